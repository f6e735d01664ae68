//! The scheduler's times of a job's run ([`Timeline`]): submitted, eligible, started
//! and ended, so its queue wait splits into waiting to be eligible (a dependency, a
//! hold, a begin time) and waiting for resources.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

/// When the scheduler says a job's run was submitted, became eligible, started and
/// ended; a time it has not told is `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Timeline {
    /// When the run was submitted (for a run Slurm requeued: when it was queued again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted_at: Option<DateTime<Utc>>,
    /// When it became eligible to start (its dependency met, released, its begin time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eligible_at: Option<DateTime<Utc>>,
    /// When it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<DateTime<Utc>>,
}

impl Timeline {
    /// The times given (each `None` where not known).
    pub fn new(
        submitted_at: Option<DateTime<Utc>>,
        eligible_at: Option<DateTime<Utc>>,
        started_at: Option<DateTime<Utc>>,
        ended_at: Option<DateTime<Utc>>,
    ) -> Timeline {
        Timeline {
            submitted_at,
            eligible_at,
            started_at,
            ended_at,
        }
    }

    /// Whether no time is known.
    pub fn is_empty(&self) -> bool {
        *self == Timeline::default()
    }

    /// From submitted to started.
    pub fn queue_wait(&self) -> Option<Duration> {
        Some(self.started_at? - self.submitted_at?).filter(|d| *d >= Duration::zero())
    }

    /// From submitted to eligible (a dependency, a hold, a begin time).
    pub fn eligible_wait(&self) -> Option<Duration> {
        Some(self.eligible_at? - self.submitted_at?).filter(|d| *d >= Duration::zero())
    }

    /// From eligible to started (waiting for resources and priority).
    pub fn resource_wait(&self) -> Option<Duration> {
        Some(self.started_at? - self.eligible_at?).filter(|d| *d >= Duration::zero())
    }

    /// Take what `newer` tells: a run submitted at another time (Slurm queued the job
    /// again) replaces these times; the same run's times fill and correct them. Whether
    /// anything changed.
    pub(crate) fn take(&mut self, newer: &Timeline) -> bool {
        let before = *self;
        if newer.submitted_at.is_some() && newer.submitted_at != self.submitted_at {
            *self = *newer;
        } else {
            self.eligible_at = newer.eligible_at.or(self.eligible_at);
            self.started_at = newer.started_at.or(self.started_at);
            self.ended_at = newer.ended_at.or(self.ended_at);
        }
        *self != before
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(minute: u32) -> Option<DateTime<Utc>> {
        Some(Utc.with_ymd_and_hms(2026, 12, 7, 12, minute, 0).unwrap())
    }

    #[test]
    fn the_queue_wait_splits_into_eligible_and_resource_waits() {
        let t = Timeline::new(at(0), at(10), at(25), None);
        assert_eq!(t.queue_wait(), Some(Duration::minutes(25)));
        assert_eq!(t.eligible_wait(), Some(Duration::minutes(10)));
        assert_eq!(t.resource_wait(), Some(Duration::minutes(15)));
        assert_eq!(Timeline::new(at(0), None, None, None).queue_wait(), None);
    }

    #[test]
    fn a_requeued_run_replaces_the_times_and_the_same_run_fills_them() {
        let mut t = Timeline::new(at(0), at(0), None, None);
        assert!(t.take(&Timeline::new(at(0), at(0), at(5), at(9))));
        assert_eq!((t.started_at, t.ended_at), (at(5), at(9)));
        assert!(!t.take(&Timeline::new(at(0), None, None, None)));
        assert!(t.take(&Timeline::new(at(20), at(21), None, None)));
        assert_eq!(t, Timeline::new(at(20), at(21), None, None));
    }
}
