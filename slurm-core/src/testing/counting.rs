//! A transport that counts the commands (round trips) reaching the transport it wraps.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use async_trait::async_trait;

use crate::transport::{Command, ForwardTarget, Forwarding, Output, OutputSink, Transport};
use crate::Result;

/// Counts the commands (round trips) that reach the wrapped transport, and keeps their labels.
#[derive(Debug)]
pub struct CountingTransport<T> {
    inner: T,
    count: AtomicUsize,
    labels: Mutex<Vec<String>>,
}

impl<T: Transport> CountingTransport<T> {
    /// Wrap `inner`.
    pub fn new(inner: T) -> Self {
        CountingTransport {
            inner,
            count: AtomicUsize::new(0),
            labels: Mutex::new(Vec::new()),
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

    /// Forget what was counted.
    pub fn reset(&self) {
        self.count.store(0, Ordering::SeqCst);
        self.labels.lock().expect("labels lock").clear();
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
        self.inner.run(command).await
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
