//! Why a job waits and when it will start ([`WaitAnswer`]), and where a job not yet
//! submitted would start soonest ([`Forecast`]): the answers of [`Backend::why`] and
//! [`Backend::forecast`](super::Backend::forecast).
//!
//! [`Backend::why`]: super::Backend::why

use std::fmt;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::record::JobId;
use crate::state::JobState;

/// What holds a job back, in a fixed vocabulary (JSON: snake case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitCategory {
    /// The nodes it asks for are busy (or not available yet); it starts when they free.
    Resources,
    /// Jobs of higher priority go first.
    Priority,
    /// A limit of its account, user or QOS holds it while their other jobs run.
    Limit,
    /// A user or an admin holds it; it starts only once released.
    Held,
    /// It waits for other jobs (its dependency).
    Dependency,
    /// It was asked to start no earlier than a time still to come.
    BeginTime,
    /// It cannot start as submitted (a per-job limit, a partition's MaxTime, an account
    /// or QOS it may not use): the job must change.
    CannotStart,
    /// Slurm could not launch it on a node and requeued it held.
    LaunchFailed,
    /// The scheduler has not looked at it yet (Slurm's `None` right after a submit): no
    /// cause is known, which is not the same as none.
    NotEvaluated,
    /// It no longer waits: it runs.
    Running,
    /// It no longer waits: it ended.
    Ended,
}

impl WaitCategory {
    /// The word for it, as in JSON: `resources`, `begin_time`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            WaitCategory::Resources => "resources",
            WaitCategory::Priority => "priority",
            WaitCategory::Limit => "limit",
            WaitCategory::Held => "held",
            WaitCategory::Dependency => "dependency",
            WaitCategory::BeginTime => "begin_time",
            WaitCategory::CannotStart => "cannot_start",
            WaitCategory::LaunchFailed => "launch_failed",
            WaitCategory::NotEvaluated => "not_evaluated",
            WaitCategory::Running => "running",
            WaitCategory::Ended => "ended",
        }
    }

    /// Whether the job still waits (every category but `running` and `ended`).
    pub fn waits(self) -> bool {
        !matches!(self, WaitCategory::Running | WaitCategory::Ended)
    }

    /// The category of a job that no longer waits, or [`WaitCategory::NotEvaluated`]
    /// for one that does: what a backend that cannot tell why answers.
    pub fn of_state(state: JobState) -> WaitCategory {
        if state.is_terminal() {
            WaitCategory::Ended
        } else if state == JobState::Running {
            WaitCategory::Running
        } else {
            WaitCategory::NotEvaluated
        }
    }
}

impl fmt::Display for WaitCategory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A partition's nodes by state (each count as the scheduler reported it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct NodeStates {
    /// Idle nodes.
    pub idle: u32,
    /// Nodes whose every CPU is allocated.
    pub allocated: u32,
    /// Nodes partly allocated.
    pub mixed: u32,
    /// Nodes drained or draining (no new jobs).
    pub drained: u32,
    /// Nodes down (or failing, not responding).
    pub down: u32,
}

/// A job ahead of another in its partition's queue (a higher priority, or the same and
/// submitted first).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct JobAhead {
    /// The scheduler's id of the job.
    pub job: String,
    /// Its priority.
    pub priority: u64,
    /// Its owner, where readable.
    pub user: Option<String>,
    /// Why it waits.
    pub reason: Option<String>,
}

/// A limit that holds a job back, with what is used of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct LimitUse {
    /// The limit's name where it is set (`MaxJobs`, `GrpTRES`, `MaxWall`, ...).
    pub name: String,
    /// Where it is set (`association of user alice in account proj42`, `QOS short`).
    pub set_on: Option<String>,
    /// How much is used of it now, where readable.
    pub used: Option<u64>,
    /// The limit, where readable.
    pub max: Option<u64>,
}

/// A job another waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ParentJob {
    /// The parent's record, when slurm-run submitted it.
    pub record: Option<JobId>,
    /// The scheduler's id of the parent.
    pub job: String,
    /// Its state as the scheduler (or, once it left the queue, the record) says.
    pub state: Option<String>,
    /// The condition waited for (`afterok`, `afterany`, ...).
    pub condition: String,
}

/// What the scheduler showed of a waiting job's surroundings. A field that could not be
/// read is `None` (JSON `null`), never a zero.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct WaitEvidence {
    /// The partition the job waits in.
    pub partition: Option<String>,
    /// Its nodes by state.
    pub nodes: Option<NodeStates>,
    /// How many pending jobs of its partition are ahead of it in the scheduler's order
    /// (priority, then submit order).
    pub jobs_ahead_count: Option<u32>,
    /// The first of them, in that order.
    pub jobs_ahead: Option<Vec<JobAhead>>,
    /// The limit that holds it, for a limit (or a per-job limit it exceeds).
    pub limit: Option<LimitUse>,
    /// The jobs it depends on, for a dependency.
    pub parents: Option<Vec<ParentJob>>,
}

/// Why one job waits (or that it no longer does), when it will start, and what would
/// release it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct WaitAnswer {
    /// The record.
    pub id: JobId,
    /// The scheduler's id of the job, once submitted.
    pub native_id: Option<String>,
    /// The job's state as the scheduler shows it now (the record's when the scheduler
    /// no longer lists it; the record itself catches up at its next poll).
    pub state: JobState,
    /// What holds it back.
    pub category: WaitCategory,
    /// The scheduler's reason, as printed (`Resources`, `AssocMaxJobsLimit`).
    pub reason: Option<String>,
    /// What the reason means, in plain words.
    pub explanation: String,
    /// The command or change that releases it, when there is one.
    pub remedy: Option<String>,
    /// When the scheduler expects it to start (RFC 3339), when it has an estimate.
    pub start_estimate: Option<DateTime<Utc>>,
    /// Where the estimate came from (`scheduler`: the backfill plan).
    pub start_estimate_source: Option<String>,
    /// What was seen around it.
    pub evidence: WaitEvidence,
}

impl WaitAnswer {
    /// An answer; `explanation` in plain words.
    pub fn new(
        id: JobId,
        state: JobState,
        category: WaitCategory,
        explanation: impl Into<String>,
    ) -> WaitAnswer {
        WaitAnswer {
            id,
            native_id: None,
            state,
            category,
            reason: None,
            explanation: explanation.into(),
            remedy: None,
            start_estimate: None,
            start_estimate_source: None,
            evidence: WaitEvidence::default(),
        }
    }
}

/// Where and when a job would start in one partition, or why it could not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct PartitionForecast {
    /// The partition.
    pub partition: String,
    /// When the scheduler would start it there (RFC 3339).
    pub start_estimate: Option<DateTime<Utc>>,
    /// The nodes it would start on.
    pub nodes: Option<String>,
    /// Why it could not run there (above the partition's MaxTime, no such partition,
    /// more GPUs than a node has), when it could not.
    pub why_not: Option<String>,
    /// The jobs it would preempt to start there, as the scheduler named them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub preempts: Vec<String>,
    /// Where the answer came from (`sbatch --test-only`, or the spec's check).
    pub source: String,
}

impl PartitionForecast {
    /// A partition where the job could not run, and why.
    pub fn refused(
        partition: impl Into<String>,
        why_not: impl Into<String>,
        source: impl Into<String>,
    ) -> PartitionForecast {
        PartitionForecast {
            partition: partition.into(),
            start_estimate: None,
            nodes: None,
            why_not: Some(why_not.into()),
            preempts: Vec::new(),
            source: source.into(),
        }
    }

    /// A partition where the job would start at `at` on `nodes`.
    pub fn starts(
        partition: impl Into<String>,
        at: DateTime<Utc>,
        nodes: Option<String>,
        source: impl Into<String>,
    ) -> PartitionForecast {
        PartitionForecast {
            partition: partition.into(),
            start_estimate: Some(at),
            nodes,
            why_not: None,
            preempts: Vec::new(),
            source: source.into(),
        }
    }
}

/// Where a job not yet submitted would start: one line per partition of its list.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Forecast {
    /// One per partition, in the order of the spec's list.
    pub partitions: Vec<PartitionForecast>,
}

impl Forecast {
    /// The partition where the job would start first (the first of the list on a tie),
    /// or `None` when no partition could run it.
    pub fn soonest(&self) -> Option<&PartitionForecast> {
        self.partitions
            .iter()
            .filter(|p| p.why_not.is_none())
            .filter_map(|p| p.start_estimate.map(|at| (at, p)))
            .min_by_key(|(at, _)| *at)
            .map(|(_, p)| p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn the_soonest_partition_is_the_earliest_that_can_run_the_job() {
        let at = |m| Utc.with_ymd_and_hms(2026, 12, 7, 12, m, 0).unwrap();
        let forecast = Forecast {
            partitions: vec![
                PartitionForecast::starts("a", at(30), None, "sbatch --test-only"),
                PartitionForecast::refused("b", "no such partition", "sbatch --test-only"),
                PartitionForecast::starts("c", at(5), Some("n1".into()), "sbatch --test-only"),
                PartitionForecast::starts("d", at(5), None, "sbatch --test-only"),
            ],
        };
        assert_eq!(forecast.soonest().unwrap().partition, "c");
        let none = Forecast {
            partitions: vec![PartitionForecast::refused("b", "x", "spec")],
        };
        assert!(none.soonest().is_none());
        let json = serde_json::to_value(&forecast.partitions[2]).unwrap();
        assert_eq!(json["start_estimate"], "2026-12-07T12:05:00Z");
        assert_eq!(json["why_not"], serde_json::Value::Null);
    }

    #[test]
    fn categories_read_as_their_json_words() {
        for (category, word) in [
            (WaitCategory::BeginTime, "begin_time"),
            (WaitCategory::CannotStart, "cannot_start"),
            (WaitCategory::NotEvaluated, "not_evaluated"),
            (WaitCategory::LaunchFailed, "launch_failed"),
        ] {
            assert_eq!(serde_json::to_value(category).unwrap(), word);
            assert_eq!(category.as_str(), word);
        }
        assert!(!WaitCategory::Running.waits());
        assert!(WaitCategory::Held.waits());
        assert_eq!(
            WaitCategory::of_state(JobState::Complete),
            WaitCategory::Ended
        );
        assert_eq!(
            WaitCategory::of_state(JobState::Pending),
            WaitCategory::NotEvaluated
        );
    }
}
