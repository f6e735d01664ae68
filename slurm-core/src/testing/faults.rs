//! A transport that injects faults into chosen commands of the transport it wraps.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::transport::{Command, ForwardTarget, Forwarding, Output, OutputSink, Transport};
use crate::{Error, Result};

/// A fault to inject into the next command whose label starts with a prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Run the command for real, then lose its answer, as when the connection drops
    /// right after the command was sent ([`Error::Transport`] with `may_have_run`).
    LoseAnswerAfterRun,
    /// Fail before sending anything ([`Error::Transport`] without `may_have_run`).
    FailBeforeSend,
    /// Run the command for real and answer as if it printed nothing.
    EmptyStdout,
}

/// Injects [`Fault`]s into chosen commands of the wrapped transport; all other
/// commands pass through.
#[derive(Debug, Clone)]
pub struct FaultTransport<T> {
    inner: Arc<T>,
    faults: Arc<Mutex<Vec<(String, Fault)>>>,
}

impl<T: Transport> FaultTransport<T> {
    /// Wrap `inner` with no fault armed.
    pub fn new(inner: T) -> Self {
        FaultTransport {
            inner: Arc::new(inner),
            faults: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Arm `fault` for the next command whose label starts with `label_prefix`
    /// (once; arm again for more).
    pub fn arm(&self, label_prefix: impl Into<String>, fault: Fault) {
        self.faults
            .lock()
            .expect("faults lock")
            .push((label_prefix.into(), fault));
    }

    /// The wrapped transport.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    fn take_fault(&self, label: &str) -> Option<Fault> {
        let mut faults = self.faults.lock().expect("faults lock");
        let index = faults
            .iter()
            .position(|(prefix, _)| label.starts_with(prefix.as_str()))?;
        Some(faults.remove(index).1)
    }
}

#[async_trait]
impl<T: Transport> Transport for FaultTransport<T> {
    async fn run(&self, command: &Command) -> Result<Output> {
        match self.take_fault(&command.label()) {
            None => self.inner.run(command).await,
            Some(Fault::FailBeforeSend) => Err(Error::Transport {
                message: format!(
                    "injected: connection failed before `{}` was sent",
                    command.label()
                ),
                may_have_run: false,
            }),
            Some(Fault::LoseAnswerAfterRun) => {
                let _ = self.inner.run(command).await;
                Err(Error::Transport {
                    message: format!(
                        "injected: connection lost after `{}` was sent",
                        command.label()
                    ),
                    may_have_run: true,
                })
            }
            Some(Fault::EmptyStdout) => {
                let mut output = self.inner.run(command).await?;
                output.stdout.clear();
                Ok(output)
            }
        }
    }

    /// No faults are injected into streamed commands or forwards.
    async fn run_streamed(&self, command: &Command, sink: OutputSink) -> Result<i32> {
        self.inner.run_streamed(command, sink).await
    }

    async fn forward(&self, local_port: u16, target: &ForwardTarget) -> Result<Forwarding> {
        self.inner.forward(local_port, target).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::LocalTransport;

    #[tokio::test]
    async fn a_fault_fires_once_on_the_first_matching_command() {
        let faulty = FaultTransport::new(LocalTransport::new());
        faulty.arm("echo", Fault::EmptyStdout);
        let out = faulty.run(&Command::new("echo").arg("hi")).await.unwrap();
        assert!(out.stdout.is_empty());
        let out = faulty.run(&Command::new("echo").arg("hi")).await.unwrap();
        assert_eq!(out.stdout, b"hi\n", "a fault fires once");
        faulty.arm("true", Fault::LoseAnswerAfterRun);
        let err = faulty.run(&Command::new("true")).await.unwrap_err();
        assert!(err.may_have_run());
    }
}
