//! A transport that counts the commands (round trips) reaching the transport it wraps.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use async_trait::async_trait;

use crate::transport::{Command, ForwardTarget, Forwarding, Output, OutputSink, Transport};
use crate::Result;

/// Counts the commands (round trips) that reach the wrapped transport, and keeps their
/// labels and the size of each answer.
#[derive(Debug)]
pub struct CountingTransport<T> {
    inner: T,
    count: AtomicUsize,
    labels: Mutex<Vec<String>>,
    answered: Mutex<Vec<usize>>,
}

impl<T: Transport> CountingTransport<T> {
    /// Wrap `inner`.
    pub fn new(inner: T) -> Self {
        CountingTransport {
            inner,
            count: AtomicUsize::new(0),
            labels: Mutex::new(Vec::new()),
            answered: Mutex::new(Vec::new()),
        }
    }

    /// Commands run so far.
    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// The labels of the commands run so far, oldest first.
    pub fn labels(&self) -> Vec<String> {
        self.labels.lock().expect("labels lock").clone()
    }

    /// The bytes of standard output each command run so far answered (`run` only),
    /// oldest first.
    pub fn answered_bytes(&self) -> Vec<usize> {
        self.answered.lock().expect("answers lock").clone()
    }

    /// Forget what was counted.
    pub fn reset(&self) {
        self.count.store(0, Ordering::SeqCst);
        self.labels.lock().expect("labels lock").clear();
        self.answered.lock().expect("answers lock").clear();
    }

    /// The wrapped transport.
    pub fn inner(&self) -> &T {
        &self.inner
    }
}

#[async_trait]
impl<T: Transport> Transport for CountingTransport<T> {
    async fn run(&self, command: &Command) -> Result<Output> {
        self.count.fetch_add(1, Ordering::SeqCst);
        self.labels
            .lock()
            .expect("labels lock")
            .push(command.label());
        let output = self.inner.run(command).await?;
        self.answered
            .lock()
            .expect("answers lock")
            .push(output.stdout.len());
        Ok(output)
    }
    // The file operations go through `run` (the defaults), so they are counted too.

    /// Counted like `run`.
    async fn run_streamed(&self, command: &Command, sink: OutputSink) -> Result<i32> {
        self.count.fetch_add(1, Ordering::SeqCst);
        self.labels
            .lock()
            .expect("labels lock")
            .push(command.label());
        self.inner.run_streamed(command, sink).await
    }

    /// Not a command: not counted.
    async fn forward(&self, local_port: u16, target: &ForwardTarget) -> Result<Forwarding> {
        self.inner.forward(local_port, target).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::LocalTransport;

    #[tokio::test]
    async fn counts_every_command_file_operations_included() {
        let counting = CountingTransport::new(LocalTransport::new());
        counting.run(&Command::new("true")).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("written");
        counting
            .write_file(path.to_str().unwrap(), b"x", 0o600)
            .await
            .unwrap();
        assert_eq!(counting.count(), 2);
        assert_eq!(counting.labels()[0], "true");
        counting.reset();
        assert_eq!(counting.count(), 0);
    }
}
