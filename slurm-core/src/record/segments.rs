//! The segments of a resumable run ([`Segment`]): one per time the job ran, each with
//! its scheduler job, nodes, start, end and how it ended ([`SegmentEnd`]). How a mark
//! opens and closes them is in `resumed_run`.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{Timeline, Usage};

/// How one segment of a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentEnd {
    /// The wall time came (the signal before it, or the child timeout): continued.
    Wall,
    /// The scheduler preempted the job for another: continued.
    Preemption,
    /// A node of the job failed and the scheduler requeued it: continued.
    NodeFailure,
    /// The scheduler requeued the job for a cause it did not say: continued.
    Requeued,
    /// The command finished: the run is complete.
    Done,
    /// The command failed, or the budget was used up: the run ended ERROR.
    Failed,
    /// The run was cancelled.
    Canceled,
}

impl SegmentEnd {
    /// The word for it: `wall`, `preemption`, `node failure`, `requeued`, `done`,
    /// `failed`, `canceled`.
    pub fn as_str(self) -> &'static str {
        match self {
            SegmentEnd::Wall => "wall",
            SegmentEnd::Preemption => "preemption",
            SegmentEnd::NodeFailure => "node failure",
            SegmentEnd::Requeued => "requeued",
            SegmentEnd::Done => "done",
            SegmentEnd::Failed => "failed",
            SegmentEnd::Canceled => "canceled",
        }
    }

    /// Whether the run went on after a segment that ended this way.
    pub fn continues(self) -> bool {
        matches!(
            self,
            SegmentEnd::Wall
                | SegmentEnd::Preemption
                | SegmentEnd::NodeFailure
                | SegmentEnd::Requeued
        )
    }
}

impl fmt::Display for SegmentEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One time a resumable job ran: from its start on some nodes to its end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// The scheduler's job id it ran as (the same for segments Slurm requeued).
    pub(crate) job: String,
    /// The nodes it ran on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) nodes: Vec<String>,
    /// When it was seen running.
    #[serde(deserialize_with = "super::timestamp::deserialize")]
    pub(crate) started_at: DateTime<Utc>,
    /// When it was seen ending (`None` while it runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ended_at: Option<DateTime<Utc>>,
    /// How it ended (`None` while it runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ended: Option<SegmentEnd>,
    /// The checkpoint it left for the next segment (a path in the job folder), if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) checkpoint: Option<String>,
    /// The scheduler's times of the run, where it told them (accounting, once the run
    /// ended).
    #[serde(default, skip_serializing_if = "Timeline::is_empty")]
    pub(crate) timeline: Timeline,
    /// What the run used, from accounting, once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) usage: Option<Usage>,
}

impl Segment {
    /// The scheduler's job id it ran as.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// The nodes it ran on.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// When it was seen running.
    pub fn started_at(&self) -> DateTime<Utc> {
        self.started_at
    }

    /// When it was seen ending (`None` while it runs).
    pub fn ended_at(&self) -> Option<DateTime<Utc>> {
        self.ended_at
    }

    /// How it ended (`None` while it runs).
    pub fn ended(&self) -> Option<SegmentEnd> {
        self.ended
    }

    /// The checkpoint it left for the next segment, if known.
    pub fn checkpoint(&self) -> Option<&str> {
        self.checkpoint.as_deref()
    }

    /// The scheduler's times of the run (submitted, eligible, started, ended), where
    /// it told them.
    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }

    /// What the run used, from accounting, once it ended.
    pub fn usage(&self) -> Option<&Usage> {
        self.usage.as_ref()
    }
}

/// What a mark says of the segment that ends with it (a backend that knows how the
/// segment ended, or the checkpoint it left, says so; a mark without one is read from
/// the state alone).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SegmentNote {
    /// How the segment ended.
    pub end: Option<SegmentEnd>,
    /// The checkpoint it left (the next segment's `SLURM_RUN_RESUME_FROM`).
    pub checkpoint: Option<String>,
}
