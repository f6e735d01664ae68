//! The job-state vocabulary and the state machine: which changes are legal, which are no-ops, which are ignored.
//!
//! # States
//! `SUBMITTING` (a record opened but not yet accepted by the scheduler, or whose submit
//! has an unknown outcome the scheduler has not settled yet), `PENDING`, `RUNNING`,
//! `COMPLETE`, `ERROR`, `CANCELED`, `NOT_SUBMITTED` (the scheduler said it has no job of
//! this record: the submit never reached it) and `UNKNOWN` (the scheduler no longer
//! knows the job). `COMPLETE`, `ERROR`, `CANCELED` and `NOT_SUBMITTED` are terminal.
//!
//! # Transitions
//! The table below is [`TRANSITIONS`]; [`JobState::check_transition`] reads it.
//! "apply" means the record takes the new state, "no-op" means nothing changes
//! (the same state again, including the same terminal state), "ignore" means the
//! observation is dropped (UNKNOWN never overwrites a terminal state), and
//! "illegal" is [`Error::InvalidTransition`].
//!
//! | from \ to     | SUBMITTING | PENDING | RUNNING | COMPLETE | ERROR   | CANCELED | NOT_SUBMITTED | UNKNOWN |
//! |---------------|------------|---------|---------|----------|---------|----------|---------------|---------|
//! | SUBMITTING    | no-op      | apply   | apply   | apply    | apply   | apply    | apply         | apply   |
//! | PENDING       | illegal    | no-op   | apply   | apply    | apply   | apply    | illegal       | apply   |
//! | RUNNING       | illegal    | apply   | no-op   | apply    | apply   | apply    | illegal       | apply   |
//! | COMPLETE      | illegal    | illegal | illegal | no-op    | illegal | illegal  | illegal       | ignore  |
//! | ERROR         | illegal    | illegal | illegal | illegal  | no-op   | illegal  | illegal       | ignore  |
//! | CANCELED      | illegal    | illegal | illegal | illegal  | illegal | no-op    | illegal       | ignore  |
//! | NOT_SUBMITTED | illegal    | illegal | illegal | illegal  | illegal | illegal  | no-op         | ignore  |
//! | UNKNOWN       | illegal    | apply   | apply   | apply    | apply   | apply    | illegal       | no-op   |
//!
//! Why these rows:
//! - Nothing goes back to `SUBMITTING`: once a submit was tried, the record only learns.
//! - `SUBMITTING` may jump to any observed state: a fast job can already be running or
//!   finished at the first poll; a refused submit is `ERROR`. A submit whose outcome is
//!   unknown stays `SUBMITTING` until the scheduler settles it: the job is adopted
//!   (`PENDING` or further), or the scheduler says there is none (`NOT_SUBMITTED`).
//! - Only `SUBMITTING` may become `NOT_SUBMITTED`: a record that had a job never
//!   loses it.
//! - `PENDING` and `RUNNING` may skip each other (a short job runs between two polls).
//! - `RUNNING -> PENDING` is a scheduler requeue (NODE_FAIL, preemption): same record.
//! - `UNKNOWN` over a non-terminal state is applied: the record honestly says the
//!   scheduler lost sight of the job (history keeps the last known state), and every
//!   later observation may move it on again. A caller that wants to debounce (sacct
//!   lags just after submit) simply does not mark `UNKNOWN` for a fresh job.
//! - `UNKNOWN` over a terminal state is ignored, never applied: a finished job that
//!   fell out of squeue and sacct is still finished.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The state of a job as slurm-run records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    /// A record was opened; the scheduler has not (yet) accepted the job.
    Submitting,
    /// Accepted and waiting for resources (also after a scheduler requeue).
    Pending,
    /// Running (also completing, suspended, stopped: still scheduler-owned).
    Running,
    /// Finished successfully (terminal).
    Complete,
    /// Finished with a failure (terminal); the record's error class says infra or program.
    Error,
    /// Cancelled, preempted or revoked (terminal).
    Canceled,
    /// The scheduler said it has no job of this record: the submit never reached it
    /// (terminal; submitting again is safe).
    NotSubmitted,
    /// The scheduler does not know the job, or its answer was lost.
    Unknown,
}

/// What [`JobState::check_transition`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum TransitionOutcome {
    /// The record takes the new state.
    Apply,
    /// The same state again: nothing changes.
    NoOp,
    /// An observation that must not change the record (UNKNOWN over a terminal state).
    Ignore,
}

/// Every state, in declaration order.
pub(crate) const ALL_STATES: [JobState; 8] = [
    JobState::Submitting,
    JobState::Pending,
    JobState::Running,
    JobState::Complete,
    JobState::Error,
    JobState::Canceled,
    JobState::NotSubmitted,
    JobState::Unknown,
];

/// The legal state changes (the "apply" cells of the module's table): for each
/// state, the states it may move to. Same-state pairs are no-ops and
/// UNKNOWN over a terminal state is ignored; both are handled by
/// [`JobState::check_transition`], not listed here.
pub(crate) const TRANSITIONS: &[(JobState, &[JobState])] = {
    use JobState::*;
    &[
        (
            Submitting,
            &[
                Pending,
                Running,
                Complete,
                Error,
                Canceled,
                NotSubmitted,
                Unknown,
            ],
        ),
        (Pending, &[Running, Complete, Error, Canceled, Unknown]),
        (Running, &[Pending, Complete, Error, Canceled, Unknown]),
        (Complete, &[]),
        (Error, &[]),
        (Canceled, &[]),
        (NotSubmitted, &[]),
        (Unknown, &[Pending, Running, Complete, Error, Canceled]),
    ]
};

impl JobState {
    /// The upper-case name: `SUBMITTING`, `PENDING`, ... `NOT_SUBMITTED`.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Submitting => "SUBMITTING",
            JobState::Pending => "PENDING",
            JobState::Running => "RUNNING",
            JobState::Complete => "COMPLETE",
            JobState::Error => "ERROR",
            JobState::Canceled => "CANCELED",
            JobState::NotSubmitted => "NOT_SUBMITTED",
            JobState::Unknown => "UNKNOWN",
        }
    }

    /// Whether the state is final (COMPLETE, ERROR, CANCELED, NOT_SUBMITTED).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Complete | JobState::Error | JobState::Canceled | JobState::NotSubmitted
        )
    }

    /// The states `self` may legally move to (from [`TRANSITIONS`]).
    pub(crate) fn successors(self) -> &'static [JobState] {
        TRANSITIONS
            .iter()
            .find(|(from, _)| *from == self)
            .map(|(_, to)| *to)
            .unwrap_or(&[])
    }

    /// Decide a change from `from` to `to`: apply, no-op, ignore, or
    /// [`Error::InvalidTransition`] (with an empty id; see [`JobState::check_transition_for`]).
    pub(crate) fn check_transition(from: JobState, to: JobState) -> Result<TransitionOutcome> {
        Self::check_transition_for("", from, to)
    }

    /// [`JobState::check_transition`] for the record `id` (named in the error).
    pub(crate) fn check_transition_for(
        id: &str,
        from: JobState,
        to: JobState,
    ) -> Result<TransitionOutcome> {
        if from == to {
            return Ok(TransitionOutcome::NoOp);
        }
        if from.is_terminal() && to == JobState::Unknown {
            return Ok(TransitionOutcome::Ignore);
        }
        if from.successors().contains(&to) {
            return Ok(TransitionOutcome::Apply);
        }
        Err(Error::InvalidTransition {
            id: id.to_string(),
            from: from.to_string(),
            to: to.to_string(),
        })
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobState {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        ALL_STATES
            .iter()
            .copied()
            .find(|st| st.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                Error::invalid(
                    "state",
                    format!(
                        "`{s}` is not a job state; use one of SUBMITTING, PENDING, RUNNING, COMPLETE, ERROR, CANCELED, NOT_SUBMITTED, UNKNOWN"
                    ),
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::JobState::*;
    use super::TransitionOutcome::*;
    use super::*;

    #[test]
    fn check_transition_decides_each_kind() {
        assert_eq!(
            JobState::check_transition(JobState::Running, JobState::Pending).unwrap(),
            TransitionOutcome::Apply
        );
        assert_eq!(
            JobState::check_transition(JobState::Error, JobState::Unknown).unwrap(),
            TransitionOutcome::Ignore
        );
        assert!(JobState::check_transition(JobState::Complete, JobState::Running).is_err());
    }

    /// The expected outcome of every (from, to) pair, written out independently of [`TRANSITIONS`].
    fn expected(from: JobState, to: JobState) -> Option<TransitionOutcome> {
        let a = Some(Apply);
        let rows: [(JobState, [Option<TransitionOutcome>; 8]); 8] = [
            // to: Submitting, Pending, Running, Complete, Error, Canceled, NotSubmitted, Unknown
            (Submitting, [Some(NoOp), a, a, a, a, a, a, a]),
            (Pending, [None, Some(NoOp), a, a, a, a, None, a]),
            (Running, [None, a, Some(NoOp), a, a, a, None, a]),
            (
                Complete,
                [None, None, None, Some(NoOp), None, None, None, Some(Ignore)],
            ),
            (
                Error,
                [None, None, None, None, Some(NoOp), None, None, Some(Ignore)],
            ),
            (
                Canceled,
                [None, None, None, None, None, Some(NoOp), None, Some(Ignore)],
            ),
            (
                NotSubmitted,
                [None, None, None, None, None, None, Some(NoOp), Some(Ignore)],
            ),
            (Unknown, [None, a, a, a, a, a, None, Some(NoOp)]),
        ];
        let row = rows.iter().find(|(f, _)| *f == from).unwrap();
        let col = ALL_STATES.iter().position(|s| *s == to).unwrap();
        row.1[col]
    }

    #[test]
    fn every_pair_matches_the_documented_table() {
        let mut checked = 0;
        for from in ALL_STATES {
            for to in ALL_STATES {
                let got = JobState::check_transition_for("rec-1", from, to);
                match expected(from, to) {
                    Some(outcome) => assert_eq!(got.unwrap(), outcome, "{from} -> {to}"),
                    None => {
                        let err = got.expect_err(&format!("{from} -> {to} must be illegal"));
                        assert_eq!(err.kind(), crate::ErrorKind::InvalidTransition);
                        let msg = err.to_string();
                        assert!(msg.contains("rec-1"), "{msg}");
                        assert!(msg.contains(from.as_str()) && msg.contains(to.as_str()));
                    }
                }
                checked += 1;
            }
        }
        assert_eq!(checked, 64);
    }

    #[test]
    fn terminal_states_are_exactly_three() {
        let terminal: Vec<_> = ALL_STATES.iter().filter(|s| s.is_terminal()).collect();
        assert_eq!(terminal, vec![&Complete, &Error, &Canceled, &NotSubmitted]);
        for s in ALL_STATES {
            assert_eq!(s.is_terminal(), s.successors().is_empty(), "{s}");
        }
    }

    #[test]
    fn names_round_trip_through_display_serde_and_from_str() {
        for s in ALL_STATES {
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{}\"", s));
            assert_eq!(serde_json::from_str::<JobState>(&json).unwrap(), s);
            assert_eq!(s.to_string().parse::<JobState>().unwrap(), s);
            assert_eq!(s.as_str().to_lowercase().parse::<JobState>().unwrap(), s);
        }
        assert_eq!(Canceled.to_string(), "CANCELED");
        let err = "CANCELLED".parse::<JobState>().unwrap_err();
        assert!(err.to_string().contains("CANCELED"));
    }
}
