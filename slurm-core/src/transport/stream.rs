//! Streamed output: a command's stdout and stderr handed on in pieces as they arrive
//! (for a command that runs a while, such as `srun` beside a running job), and the local
//! process runner that streams (LocalTransport, and the OpenSSH transport's `ssh`).

use std::process::Stdio;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Child;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;

use super::Command;
use crate::{Error, Result};

/// Start `process`, a local process standing for `command`: its stdout and stderr piped,
/// its stdin the command's bytes (written by a task of their own, returned so the caller
/// may stop it; a process that exits without reading them is not an error) or nothing.
pub(crate) fn spawn_piped(
    process: &mut tokio::process::Command,
    command: &Command,
) -> Result<(Child, Option<JoinHandle<()>>)> {
    let stdin = command.stdin_bytes().map(<[u8]>::to_vec);
    let mut child = process
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Error::io(format!("start `{}`", command.label()), e))?;
    let writer = match (child.stdin.take(), stdin) {
        (Some(mut pipe), Some(bytes)) => Some(tokio::spawn(async move {
            let _ = pipe.write_all(&bytes).await;
            let _ = pipe.shutdown().await;
        })),
        _ => None,
    };
    Ok((child, writer))
}

/// A piece of a streamed command's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputChunk {
    /// Bytes the command wrote to its standard output.
    Stdout(Vec<u8>),
    /// Bytes the command wrote to its standard error.
    Stderr(Vec<u8>),
}

/// Where a streamed command's output goes, piece by piece.
pub type OutputSink = UnboundedSender<OutputChunk>;

/// Run `process`, a local process standing for `command` (whose stdin it gets, whose
/// label errors name, whose timeout bounds it), sending its output to `sink` as it
/// arrives, and return its exit status (128 + the signal for a process killed by one).
/// Past the timeout the process is killed and the answer is a timeout error.
pub async fn stream_process(
    mut process: tokio::process::Command,
    command: &Command,
    sink: OutputSink,
) -> Result<i32> {
    let label = command.label();
    let timeout = command.effective_timeout();
    let (mut child, _stdin) = spawn_piped(&mut process, command)?;
    let stdout = child.stdout.take().expect("piped stdout");
    let stderr = child.stderr.take().expect("piped stderr");
    let pumps = async {
        let (a, b) = tokio::join!(
            pump(stdout, sink.clone(), OutputChunk::Stdout),
            pump(stderr, sink.clone(), OutputChunk::Stderr)
        );
        a.and(b)
    };
    let run = async {
        pumps
            .await
            .map_err(|e| Error::io(format!("read the output of `{label}`"), e))?;
        child
            .wait()
            .await
            .map_err(|e| Error::io(format!("wait for `{label}`"), e))
    };
    match tokio::time::timeout(timeout, run).await {
        Ok(status) => Ok(exit_code(&status?)),
        Err(_) => Err(Error::Timeout {
            what: format!("`{label}`"),
            after: timeout,
            may_have_run: true,
        }),
    }
}

/// Copy `from` to `sink` in pieces until it ends.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    sink: OutputSink,
    wrap: fn(Vec<u8>) -> OutputChunk,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        // A caller that stopped listening still lets the command finish.
        let _ = sink.send(wrap(buf[..n].to_vec()));
    }
}

/// A process's exit status as a number (128 + the signal when killed by one).
pub(crate) fn exit_code(status: &std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn output_arrives_before_the_command_ends() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("gate");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        // The second line only comes once the first was read: streamed, not buffered.
        let mut process = tokio::process::Command::new("bash");
        process
            .args([
                "-c",
                "echo first; read -r _ < \"$1\"; echo err >&2; exit 3",
                "x",
            ])
            .arg(&fifo);
        let run =
            tokio::spawn(async move { stream_process(process, &Command::new("bash"), tx).await });
        assert_eq!(
            rx.recv().await,
            Some(OutputChunk::Stdout(b"first\n".to_vec()))
        );
        std::fs::write(&fifo, "go\n").unwrap();
        assert_eq!(run.await.unwrap().unwrap(), 3);
        assert_eq!(
            rx.recv().await,
            Some(OutputChunk::Stderr(b"err\n".to_vec()))
        );
    }

    #[tokio::test]
    async fn a_command_past_its_deadline_is_a_timeout() {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let mut process = tokio::process::Command::new("sleep");
        process.arg("30");
        let command = Command::new("sleep").timeout(std::time::Duration::from_millis(200));
        let err = stream_process(process, &command, tx).await.unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Timeout);
    }
}
