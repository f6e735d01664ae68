//! The answers of the [`Backend`](super::Backend) operations: a job's status and what a watch reports.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::classify::ErrorClass;
use crate::record::{JobId, JobRecord};
use crate::state::JobState;

use super::{WaitAnswer, WaitCategory, WaitEvidence};

/// What the scheduler said of a job, beside the vocabulary state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NativeStatus {
    /// The scheduler's state as printed (SLURM: `CANCELLED by 1000`, `NODE_FAIL`).
    pub state: String,
    /// The pending or end reason (`Resources`, `Priority`, `Dependency`, ...).
    pub reason: Option<String>,
    /// What the reason means, where its name does not say it (SLURM: a limit that holds
    /// the job back, a hold, a job that cannot start as submitted), and what to do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason_note: Option<String>,
    /// The exit code of the batch script, when known.
    pub exit_code: Option<i32>,
    /// The nodes the job ran on.
    pub nodes: Option<String>,
    /// Where it was read (SLURM: `squeue`, `sacct` or `scontrol`).
    pub source: &'static str,
    /// What holds a waiting job back, or that it runs or ended, where the backend can
    /// tell from what it read (the batched poll: no extra query; `why` adds the
    /// evidence).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub category: Option<WaitCategory>,
}

/// A job's current state, as its record now holds it, with what the scheduler said;
/// read through its accessors. The record and the scheduler's words are shared, so a
/// status is copied by a count (a watch's poll in which nothing changed answers the
/// statuses of the poll before it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobStatus {
    pub(crate) record: Arc<JobRecord>,
    pub(crate) native: Option<Arc<NativeStatus>>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) tasks: BTreeMap<u32, NativeStatus>,
}

impl JobStatus {
    /// The status a backend answers: the `record` after the observation was applied,
    /// the scheduler's words on the job (`native`, when it was found) and, for an
    /// array, on each task it spoke of (`tasks`, by index).
    pub fn new(
        record: JobRecord,
        native: Option<NativeStatus>,
        tasks: BTreeMap<u32, NativeStatus>,
    ) -> Self {
        JobStatus {
            record: Arc::new(record),
            native: native.map(Arc::new),
            tasks,
        }
    }

    /// The record, after this observation was applied.
    pub fn record(&self) -> &JobRecord {
        &self.record
    }

    /// The record, owned.
    pub fn into_record(self) -> JobRecord {
        Arc::unwrap_or_clone(self.record)
    }

    /// The scheduler's own words, when the job was found.
    pub fn native(&self) -> Option<&NativeStatus> {
        self.native.as_deref()
    }

    /// For an array: the scheduler's words on each task it spoke of, by index (their
    /// states are in the record's tasks), read in the same round trip.
    pub fn tasks(&self) -> &BTreeMap<u32, NativeStatus> {
        &self.tasks
    }

    /// The record id.
    pub fn id(&self) -> &JobId {
        &self.record.id
    }

    /// The state in the vocabulary.
    pub fn state(&self) -> JobState {
        self.record.state
    }

    /// The scheduler's id of the job (SLURM: the job id), once submitted.
    pub fn native_id(&self) -> Option<&str> {
        self.record
            .backend_ref
            .as_ref()
            .map(|r| r.native_id.as_str())
    }

    /// Infra or program, for an ERROR.
    pub fn err_class(&self) -> Option<ErrorClass> {
        self.record.err_class
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
    /// A waiting job's category changed (`resources` to `priority`, `dependency` to
    /// `resources`, ...) while its state stayed the same (reported once per change).
    Waiting {
        /// The category before.
        from: WaitCategory,
        /// The job now (its category in [`JobStatus::native`]).
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
    /// A watched job the watch no longer follows: its record cannot be read any more
    /// (corrupt, or written by a newer slurm-run). The other jobs are still watched.
    Dropped {
        /// The job.
        id: JobId,
        /// Why its record cannot be read.
        reason: String,
    },
    /// A poll could not ask the scheduler (the controller or its database did not
    /// answer, the connection failed): no job changed, and the watch asks again after
    /// `retry_in` (the pause doubles with each such poll, up to the watch's maximum).
    Unanswered {
        /// What failed.
        reason: String,
        /// How many polls in a row could not ask.
        failures: u32,
        /// When the watch asks again.
        retry_in: Duration,
    },
}

impl WaitAnswer {
    /// The answer of a backend that cannot tell why: the category from the state alone
    /// ([`WaitCategory::of_state`]), the scheduler's reason as the status holds it.
    pub fn from_status(status: &JobStatus) -> WaitAnswer {
        let category = WaitCategory::of_state(status.state());
        let explanation = match category {
            WaitCategory::Running => "it runs".to_string(),
            WaitCategory::Ended => format!("it ended {}", status.state()),
            _ => "this backend cannot tell why the job waits".to_string(),
        };
        WaitAnswer {
            id: status.id().clone(),
            native_id: status.native_id().map(str::to_string),
            state: status.state(),
            category,
            reason: status.native().and_then(|n| n.reason.clone()),
            explanation,
            remedy: None,
            start_estimate: None,
            start_estimate_source: None,
            evidence: WaitEvidence::default(),
        }
    }
}
