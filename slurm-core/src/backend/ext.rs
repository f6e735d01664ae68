//! [`BackendExt`]: conveniences built on the [`Backend`] operations, for every backend.

use std::time::Duration;

use async_trait::async_trait;

use super::{Backend, JobStatus};
use crate::record::JobId;
use crate::{Error, Result};

/// Conveniences on every [`Backend`].
#[async_trait]
pub trait BackendExt: Backend {
    /// Poll `id` every `interval` until it is terminal, for at most `timeout`; returns
    /// the final status.
    ///
    /// When the deadline (`timeout` after the call) passes first, the job is left as it
    /// is, still running or queued, and the answer is [`Error::Timeout`] naming the job
    /// and the last state seen. The last status is read at the deadline itself.
    async fn wait(&self, id: &JobId, interval: Duration, timeout: Duration) -> Result<JobStatus> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let status = self.status(id).await?;
            if status.state().is_terminal() {
                return Ok(status);
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(Error::Timeout {
                    what: format!(
                        "waiting for job {id} to end (last seen {}; it keeps running: cancel it if it should not)",
                        status.state()
                    ),
                    after: timeout,
                    may_have_run: false,
                });
            }
            tokio::time::sleep(interval.min(deadline - now)).await;
        }
    }
}

impl<B: Backend + ?Sized> BackendExt for B {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::SubmitOptions;
    use crate::{ErrorKind, JobRecord, JobSpec, JobState, LocalBackend, MemoryRecordStore};

    /// A local backend in a temporary folder (kept while the first value lives) with
    /// one job `name` running `command` submitted.
    async fn submitted(name: &str, command: &str) -> (tempfile::TempDir, LocalBackend, JobRecord) {
        let root = tempfile::tempdir().unwrap();
        let backend = LocalBackend::new(root.path(), MemoryRecordStore::new()).unwrap();
        let record = backend
            .submit(&JobSpec::new(name, command), SubmitOptions::default())
            .await
            .unwrap();
        (root, backend, record)
    }

    #[tokio::test]
    async fn wait_returns_the_final_status_of_a_job_that_ends_in_time() {
        let (_root, backend, record) = submitted("short", "true").await;
        let status = backend
            .wait(
                &record.id,
                Duration::from_millis(20),
                Duration::from_secs(30),
            )
            .await
            .unwrap();
        assert_eq!(status.state(), JobState::Complete);
    }

    #[tokio::test]
    async fn wait_gives_up_at_its_deadline_and_the_job_keeps_running() {
        let (_root, backend, record) = submitted("long", "sleep 30").await;
        // Bounded here too, so a wait without a deadline fails rather than hangs.
        let waited = tokio::time::timeout(
            Duration::from_secs(10),
            backend.wait(
                &record.id,
                Duration::from_millis(20),
                Duration::from_millis(300),
            ),
        )
        .await;
        let still = backend.status(&record.id).await.unwrap().state();
        backend.cancel(&record.id).await.unwrap();
        let err = waited
            .expect("wait returned by its deadline")
            .expect_err("the job was not terminal");
        assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
        let text = err.to_string();
        assert!(text.contains(record.id.as_str()), "{text}");
        assert!(text.contains("last seen RUNNING"), "{text}");
        assert!(text.contains("it keeps running"), "{text}");
        assert!(text.contains("timed out after 300ms"), "{text}");
        assert!(!err.may_have_run(), "{err}");
        assert_eq!(still, JobState::Running, "the job was left running");
    }
}
