//! The `Backend` trait orchestrators hold, its options and answers, [`BackendExt`], the
//! generic watch, and [`LocalBackend`], a backend that runs jobs as local processes.
//!
//! An orchestrator holds an `Arc<dyn Backend>`: the trait is object safe, `Send + Sync`,
//! and has only the operations a backend must implement. Conveniences built on them
//! (wait until terminal) live in [`BackendExt`], implemented for every backend. Nothing
//! here names a scheduler: SLURM's backend lives in [`crate::slurm`].

mod answers;
mod ext;
pub(crate) mod local;
mod options;
mod preflight;
mod watch;
mod why;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;

use crate::record::{JobId, JobRecord, RecordFilter};
use crate::spec::{JobSpec, TaskSet};
use crate::Result;

pub use answers::{JobStatus, NativeStatus, WatchEvent};
pub use ext::BackendExt;
pub use local::LocalBackend;
pub use options::{LogOptions, LogStream, SubmitOptions, WatchOptions};
pub(crate) use preflight::CheckKind;
pub use preflight::{PreflightCheck, PreflightReport};
pub(crate) use watch::watch_by_polling;
pub use why::{
    Forecast, JobAhead, LimitUse, NodeStates, ParentJob, PartitionForecast, WaitAnswer,
    WaitCategory, WaitEvidence,
};

/// Runs jobs somewhere and keeps their records true. Object safe: hold it as
/// `Arc<dyn Backend>`.
#[async_trait]
pub trait Backend: Send + Sync + fmt::Debug {
    /// Check that jobs like `spec` (or any job, for `None`) can run: connection,
    /// scheduler tools, partitions, containers, storage. One line per check.
    async fn preflight(&self, spec: Option<&JobSpec>) -> Result<PreflightReport>;

    /// Validate, stage, render, lint and submit `spec` exactly once; returns the
    /// record, PENDING (or further) with the scheduler's id of the job.
    async fn submit(&self, spec: &JobSpec, options: SubmitOptions) -> Result<JobRecord>;

    /// Submit the workload of the terminal record `id` again, as a new record linked
    /// by `retry_of` (the attempt number one higher, a fresh results folder), from the
    /// spec the record kept (never a copy the job could have rewritten). A retry is
    /// claimed once, under `id`'s lock: when `id` was already retried (by another
    /// watcher or process), that retry is returned and nothing is submitted.
    async fn resubmit(&self, id: &JobId) -> Result<JobRecord>;

    /// The current status of one job (its record updated by what was observed).
    async fn status(&self, id: &JobId) -> Result<JobStatus>;

    /// The current status of many jobs, in one round trip in the common case.
    /// Answers in the order of `ids`.
    async fn status_many(&self, ids: &[JobId]) -> Result<Vec<JobStatus>>;

    /// The last lines of a job's log, secrets redacted.
    async fn logs(&self, id: &JobId, options: LogOptions) -> Result<String>;

    /// New log text as it is written, until the job is terminal; secrets redacted.
    /// `options` name the stream, the task of an array or the role of a multi-role job
    /// (its `tail` is not used: the whole log is followed).
    fn follow_logs(
        &self,
        id: &JobId,
        options: LogOptions,
        interval: Duration,
    ) -> BoxStream<'static, Result<String>>;

    /// Cancel a job (every task of an array). A job already terminal is a success
    /// that changes nothing.
    async fn cancel(&self, id: &JobId) -> Result<JobRecord>;

    /// Cancel several jobs, as [`cancel`](Backend::cancel) does each; the records in the
    /// order of `ids`. The default cancels them in turn; a backend that can cancel many
    /// jobs in one request (SLURM: one `scancel`, confirmed by squeue in the same round
    /// trip) does.
    async fn cancel_many(&self, ids: &[JobId]) -> Result<Vec<JobRecord>> {
        let mut records = Vec::with_capacity(ids.len());
        for id in ids {
            records.push(self.cancel(id).await?);
        }
        Ok(records)
    }

    /// Cancel some tasks of the array `id`; the others go on. Tasks already ended
    /// are left as they are; an index the array does not have is an error.
    async fn cancel_tasks(&self, id: &JobId, tasks: &TaskSet) -> Result<JobRecord>;

    /// State changes of `ids` until each is terminal (retried ones followed to their
    /// last attempt). Never stops on elapsed time; transient errors back off.
    fn watch(&self, ids: &[JobId], options: WatchOptions)
        -> BoxStream<'static, Result<WatchEvent>>;

    /// Why each of `ids` waits (or that it no longer does), when it will start and
    /// what would release it, in the order of `ids`: one round trip for any number of
    /// jobs where the backend can. The default answers from [`status_many`] what the
    /// state alone tells (running, ended, or not evaluated).
    ///
    /// [`status_many`]: Backend::status_many
    async fn why(&self, ids: &[JobId]) -> Result<Vec<WaitAnswer>> {
        let statuses = self.status_many(ids).await?;
        Ok(statuses.iter().map(WaitAnswer::from_status).collect())
    }

    /// Where and when `spec` would start, for each partition of its list, without
    /// submitting it (no record is opened). The default refuses: the backend cannot
    /// tell.
    async fn forecast(&self, spec: &JobSpec) -> Result<Forecast> {
        let _ = spec;
        Err(crate::Error::invalid(
            "forecast",
            "this backend cannot forecast a start: submit the job and ask `why` instead",
        ))
    }

    /// The record of `id`, as stored (no remote call; the store's read runs off the
    /// runtime's threads).
    async fn record(&self, id: &JobId) -> Result<JobRecord>;

    /// The records passing `filter`, oldest first (no remote call; the store's read
    /// runs off the runtime's threads).
    async fn records(&self, filter: &RecordFilter) -> Result<Vec<JobRecord>>;
}

/// `Backend` stays object safe: this fails to compile otherwise.
#[allow(dead_code)]
fn _backend_is_object_safe(_: Box<dyn Backend>) {}

/// A `Backend` behind a smart pointer is a `Backend` (as object_store's `as_ref_impl!`).
macro_rules! forward_backend {
    ($pointer:ident) => {
        #[async_trait]
        impl<B: Backend + ?Sized> Backend for $pointer<B> {
            async fn preflight(&self, spec: Option<&JobSpec>) -> Result<PreflightReport> {
                (**self).preflight(spec).await
            }
            async fn submit(&self, spec: &JobSpec, options: SubmitOptions) -> Result<JobRecord> {
                (**self).submit(spec, options).await
            }
            async fn resubmit(&self, id: &JobId) -> Result<JobRecord> {
                (**self).resubmit(id).await
            }
            async fn status(&self, id: &JobId) -> Result<JobStatus> {
                (**self).status(id).await
            }
            async fn status_many(&self, ids: &[JobId]) -> Result<Vec<JobStatus>> {
                (**self).status_many(ids).await
            }
            async fn logs(&self, id: &JobId, options: LogOptions) -> Result<String> {
                (**self).logs(id, options).await
            }
            fn follow_logs(
                &self,
                id: &JobId,
                options: LogOptions,
                interval: Duration,
            ) -> BoxStream<'static, Result<String>> {
                (**self).follow_logs(id, options, interval)
            }
            async fn cancel(&self, id: &JobId) -> Result<JobRecord> {
                (**self).cancel(id).await
            }
            async fn cancel_many(&self, ids: &[JobId]) -> Result<Vec<JobRecord>> {
                (**self).cancel_many(ids).await
            }
            async fn cancel_tasks(&self, id: &JobId, tasks: &TaskSet) -> Result<JobRecord> {
                (**self).cancel_tasks(id, tasks).await
            }
            fn watch(
                &self,
                ids: &[JobId],
                options: WatchOptions,
            ) -> BoxStream<'static, Result<WatchEvent>> {
                (**self).watch(ids, options)
            }
            async fn why(&self, ids: &[JobId]) -> Result<Vec<WaitAnswer>> {
                (**self).why(ids).await
            }
            async fn forecast(&self, spec: &JobSpec) -> Result<Forecast> {
                (**self).forecast(spec).await
            }
            async fn record(&self, id: &JobId) -> Result<JobRecord> {
                (**self).record(id).await
            }
            async fn records(&self, filter: &RecordFilter) -> Result<Vec<JobRecord>> {
                (**self).records(filter).await
            }
        }
    };
}

forward_backend!(Arc);
forward_backend!(Box);
