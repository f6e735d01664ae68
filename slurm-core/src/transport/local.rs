//! `LocalTransport`: commands on this host, started directly (no shell).

use async_trait::async_trait;

use super::forward::listen_and_forward;
use super::stream::{exit_code, spawn_piped, stream_process};
use super::{Command, ForwardTarget, Forwarding, Output, OutputSink, Transport};
use crate::{Error, Result};

/// Runs commands on this host, for code that already runs on the login node.
/// Programs are started directly (no shell), so arguments need no quoting.
#[derive(Debug, Clone, Default)]
pub struct LocalTransport {
    _private: (),
}

impl LocalTransport {
    /// A transport that runs commands on this host.
    pub fn new() -> Self {
        LocalTransport { _private: () }
    }
}

#[async_trait]
impl Transport for LocalTransport {
    async fn run(&self, command: &Command) -> Result<Output> {
        let mut process = tokio::process::Command::new(command.program());
        process.args(command.get_args());
        let (child, stdin_task) = spawn_piped(&mut process, command)?;
        let deadline = command.effective_timeout();
        let waited = tokio::time::timeout(deadline, child.wait_with_output()).await;
        if let Some(task) = stdin_task {
            task.abort();
        }
        match waited {
            Ok(Ok(output)) => Ok(Output {
                status: exit_code(&output.status),
                stdout: output.stdout,
                stderr: output.stderr,
            }),
            Ok(Err(e)) => Err(Error::io(format!("wait for `{}`", command.label()), e)),
            Err(_) => Err(Error::Timeout {
                what: format!("`{}`", command.label()),
                after: deadline,
                may_have_run: true,
            }),
        }
    }

    async fn run_streamed(&self, command: &Command, sink: OutputSink) -> Result<i32> {
        let mut process = tokio::process::Command::new(command.program());
        process.args(command.get_args());
        stream_process(process, command, sink).await
    }

    /// Plain TCP: each connection to the local port is joined to a connection to the
    /// target made from this host.
    async fn forward(&self, local_port: u16, target: &ForwardTarget) -> Result<Forwarding> {
        let target = target.clone();
        listen_and_forward(local_port, move |mut inbound| {
            let target = target.clone();
            async move {
                let mut outbound =
                    tokio::net::TcpStream::connect((target.host.as_str(), target.port))
                        .await
                        .map_err(|e| Error::io(format!("connect to {target}"), e))?;
                tokio::io::copy_bidirectional(&mut inbound, &mut outbound)
                    .await
                    .map_err(|e| Error::io(format!("forward to {target}"), e))?;
                Ok(())
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn local_transport_round_trips_argv() {
        let t = LocalTransport::new();
        let out = t
            .run(&Command::new("printf").arg("%s").arg("a'b $(x)"))
            .await
            .unwrap();
        assert_eq!(out.stdout, b"a'b $(x)");
    }
}
