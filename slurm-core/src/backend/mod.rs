//! The `Backend` trait orchestrators hold, its argument and answer types, `BackendExt`, and the SLURM implementation.
//!
//! An orchestrator holds an `Arc<dyn Backend>`: the trait is object safe, `Send + Sync`,
//! and has only the operations a backend must implement. Conveniences built on them
//! (wait until terminal) live in [`BackendExt`], implemented for every backend.

mod cancel;
mod config;
mod knobs;
mod logs;
mod preflight;
mod probe;
mod slurm;
mod status;
mod submit;
mod watch;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use serde::Serialize;

use crate::classify::{ErrorClass, RetryPolicy};
use crate::record::{JobId, JobRecord, RecordFilter};
use crate::slurm::SlurmJobId;
use crate::spec::JobSpec;
use crate::state::JobState;
use crate::Result;

pub use config::{default_state_dir, SlurmConfig, SlurmConfigBuilder, ENV_VARS};
pub use knobs::ClusterKnobs;
pub use preflight::{PreflightCheck, PreflightReport};
pub use probe::{
    default_ladder, KnobSet, NcclProbe, ProbeAttempt, ProbeOptions, ProbeOutcome, ProbeReport,
    PROBE_BAD, PROBE_EXIT, PROBE_LABEL, PROBE_OK, PROBE_TIMEOUT,
};
pub use slurm::SlurmBackend;
pub use watch::watch_by_polling;

/// Options of [`Backend::submit`].
#[derive(Clone, Default)]
pub struct SubmitOptions {
    /// The record this submit retries (the new record links to it).
    pub retry_of: Option<JobId>,
    /// Secret values by name. `None` reads each secret the spec names from this
    /// process's environment. Values are never stored, logged or shown.
    pub secret_values: Option<BTreeMap<String, String>>,
    /// Whether a job that needs NCCL (more than one node or more than one GPU per
    /// node) is preceded by the NCCL probe; see [`NcclProbe`].
    pub nccl_probe: NcclProbe,
    /// How that probe runs (its command, timeout and knob ladder).
    pub probe: ProbeOptions,
}

impl fmt::Debug for SubmitOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubmitOptions")
            .field("retry_of", &self.retry_of)
            .field(
                "secret_values",
                &self.secret_values.as_ref().map(|m| {
                    m.keys()
                        .map(|k| format!("{k}=REDACTED"))
                        .collect::<Vec<_>>()
                }),
            )
            .field("nccl_probe", &self.nccl_probe)
            .field("probe", &self.probe)
            .finish()
    }
}

/// What the scheduler said of a job, beside the vocabulary state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NativeStatus {
    /// The SLURM state as printed (e.g. `CANCELLED by 1000`, `NODE_FAIL`).
    pub state: String,
    /// The pending or end reason (`Resources`, `Priority`, `Dependency`, ...).
    pub reason: Option<String>,
    /// The exit code of the batch script, when known.
    pub exit_code: Option<i32>,
    /// The nodes the job ran on.
    pub nodes: Option<String>,
    /// Where it was read: `squeue`, `sacct` or `scontrol`.
    pub source: &'static str,
}

/// A job's current state, as its record now holds it, with what the scheduler said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobStatus {
    /// The record, after this observation was applied.
    pub record: JobRecord,
    /// The scheduler's own words, when the job was found.
    pub native: Option<NativeStatus>,
}

impl JobStatus {
    /// The record id.
    pub fn id(&self) -> &JobId {
        &self.record.id
    }

    /// The state in the vocabulary.
    pub fn state(&self) -> JobState {
        self.record.state
    }

    /// The SLURM job id, once submitted.
    pub fn slurm_job_id(&self) -> Option<SlurmJobId> {
        self.record.backend_ref.as_ref().map(|r| r.slurm_job_id)
    }

    /// Infra or program, for an ERROR.
    pub fn err_class(&self) -> Option<ErrorClass> {
        self.record.err_class
    }
}

/// Which log of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum LogStream {
    /// `main.out`.
    #[default]
    Out,
    /// `main.err`.
    Err,
}

impl LogStream {
    /// The file name in the job's log folder.
    pub fn file_name(self) -> &'static str {
        match self {
            LogStream::Out => "main.out",
            LogStream::Err => "main.err",
        }
    }
}

/// Options of [`Backend::logs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogOptions {
    /// Which file.
    pub stream: LogStream,
    /// How many lines from the end.
    pub tail: usize,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            stream: LogStream::Out,
            tail: 200,
        }
    }
}

/// Options of [`Backend::watch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchOptions {
    /// Time between two polls (each poll is one round trip for every watched job).
    pub interval: Duration,
    /// Resubmit infra failures within this policy's budget; `None` never resubmits.
    pub retry: Option<RetryPolicy>,
    /// Longest back-off after transient errors.
    pub max_backoff: Duration,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            interval: Duration::from_secs(10),
            retry: None,
            max_backoff: Duration::from_secs(300),
        }
    }
}

/// What a watch reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WatchEvent {
    /// A job's state changed (reported once per change).
    Transition {
        /// The state before.
        from: JobState,
        /// The job now.
        status: Box<JobStatus>,
    },
    /// A job ended ERROR (infra) and a new record was submitted to retry it; the
    /// watch goes on with the new record.
    Retried {
        /// The failed record.
        previous: JobId,
        /// The new record, linked by `retry_of`.
        record: Box<JobRecord>,
    },
}

/// Runs jobs somewhere and keeps their records true. Object safe: hold it as
/// `Arc<dyn Backend>`.
#[async_trait]
pub trait Backend: Send + Sync + fmt::Debug {
    /// Check that jobs like `spec` (or any job, for `None`) can run: connection,
    /// scheduler tools, partitions, containers, storage. One line per check.
    async fn preflight(&self, spec: Option<&JobSpec>) -> Result<PreflightReport>;

    /// Validate, stage, render, lint and submit `spec` exactly once; returns the
    /// record, PENDING with its SLURM job id.
    async fn submit(&self, spec: &JobSpec, options: SubmitOptions) -> Result<JobRecord>;

    /// Submit the workload of the terminal record `id` again, as a new record linked
    /// by `retry_of` (the attempt number one higher, a fresh results folder).
    async fn resubmit(&self, id: &JobId) -> Result<JobRecord>;

    /// The current status of one job (its record updated by what was observed).
    async fn status(&self, id: &JobId) -> Result<JobStatus>;

    /// The current status of many jobs, in one round trip in the common case.
    /// Answers in the order of `ids`.
    async fn status_many(&self, ids: &[JobId]) -> Result<Vec<JobStatus>>;

    /// The last lines of a job's log, secrets redacted.
    async fn logs(&self, id: &JobId, options: LogOptions) -> Result<String>;

    /// New log text as it is written, until the job is terminal; secrets redacted.
    fn follow_logs(
        &self,
        id: &JobId,
        stream: LogStream,
        interval: Duration,
    ) -> BoxStream<'static, Result<String>>;

    /// Cancel a job. A job already terminal is a success that changes nothing.
    async fn cancel(&self, id: &JobId) -> Result<JobRecord>;

    /// State changes of `ids` until each is terminal (retried ones followed to their
    /// last attempt). Never stops on elapsed time; transient errors back off.
    fn watch(&self, ids: &[JobId], options: WatchOptions)
        -> BoxStream<'static, Result<WatchEvent>>;

    /// The record of `id`, as stored (no remote call).
    fn record(&self, id: &JobId) -> Result<JobRecord>;

    /// The records passing `filter`, oldest first (no remote call).
    fn records(&self, filter: &RecordFilter) -> Result<Vec<JobRecord>>;
}

#[allow(dead_code)]
fn _backend_is_object_safe(_: &dyn Backend) {}

/// Conveniences on every [`Backend`].
#[async_trait]
pub trait BackendExt: Backend {
    /// Poll `id` every `interval` until it is terminal; returns the final status.
    async fn wait(&self, id: &JobId, interval: Duration) -> Result<JobStatus> {
        loop {
            let status = self.status(id).await?;
            if status.state().is_terminal() {
                return Ok(status);
            }
            tokio::time::sleep(interval).await;
        }
    }
}

impl<B: Backend + ?Sized> BackendExt for B {}

#[async_trait]
impl<B: Backend + ?Sized> Backend for std::sync::Arc<B> {
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
        stream: LogStream,
        interval: Duration,
    ) -> BoxStream<'static, Result<String>> {
        (**self).follow_logs(id, stream, interval)
    }
    async fn cancel(&self, id: &JobId) -> Result<JobRecord> {
        (**self).cancel(id).await
    }
    fn watch(
        &self,
        ids: &[JobId],
        options: WatchOptions,
    ) -> BoxStream<'static, Result<WatchEvent>> {
        (**self).watch(ids, options)
    }
    fn record(&self, id: &JobId) -> Result<JobRecord> {
        (**self).record(id)
    }
    fn records(&self, filter: &RecordFilter) -> Result<Vec<JobRecord>> {
        (**self).records(filter)
    }
}
