//! SLURM job states as squeue, sacct and scontrol print them, and their mapping to
//! [`JobState`], in one table ([`NAMES`]) that the Rust side and the poll script share.
//!
//! | SLURM state | [`JobState`] | error class |
//! |---|---|---|
//! | PENDING, REQUEUED, REQUEUE_FED, REQUEUE_HOLD, RESV_DEL_HOLD, SPECIAL_EXIT | PENDING | |
//! | RUNNING, SUSPENDED, STOPPED, CONFIGURING, RESIZING, SIGNALING, STAGE_OUT | RUNNING | |
//! | COMPLETING | RUNNING in this table; a poll keeps the live state the job had (ending does not say it ran) | |
//! | COMPLETED | COMPLETE (then confirmed by the completion check) | |
//! | FAILED | ERROR | none: classify from the logs ([`classify_failure`](crate::classify::classify_failure)) |
//! | TIMEOUT, OUT_OF_MEMORY, DEADLINE | ERROR | program (never retried) |
//! | NODE_FAIL, BOOT_FAIL | ERROR | infra |
//! | PREEMPTED (ended for good: the cluster cancels preempted jobs) | ERROR | infra (a watch's retry policy continues it as a linked attempt) |
//! | CANCELLED, REVOKED | CANCELED | |
//! | not found, or a state this version does not know | UNKNOWN | |
//!
//! SUSPENDED and STOPPED stay RUNNING (the scheduler owns the job and may resume
//! it); SPECIAL_EXIT is a held requeue, so PENDING. The native state rides in
//! the transition message. Why a job waits (its reason) is read by the one table of
//! reasons, `slurm/reasons.rs`.

use std::fmt;

use crate::classify::{Ending, ErrorClass};
use crate::names::short;
use crate::state::JobState;
use crate::{Error, Result};

use ErrorClass::{Infra, Program};
use JobState::{Canceled, Complete, Error as Failed, Pending, Running};

/// The base SLURM job states (without flags or annotations).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum SlurmBaseState {
    /// `PENDING` (`PD`).
    Pending,
    /// `RUNNING` (`R`).
    Running,
    /// `SUSPENDED` (`S`).
    Suspended,
    /// `COMPLETED` (`CD`).
    Completed,
    /// `CANCELLED` (`CA`).
    Cancelled,
    /// `FAILED` (`F`).
    Failed,
    /// `TIMEOUT` (`TO`).
    Timeout,
    /// `NODE_FAIL` (`NF`).
    NodeFail,
    /// `PREEMPTED` (`PR`).
    Preempted,
    /// `BOOT_FAIL` (`BF`).
    BootFail,
    /// `DEADLINE` (`DL`).
    Deadline,
    /// `OUT_OF_MEMORY` (`OOM`).
    OutOfMemory,
    /// `COMPLETING` (`CG`).
    Completing,
    /// `CONFIGURING` (`CF`).
    Configuring,
    /// `RESIZING` (`RS`).
    Resizing,
    /// `REQUEUED` (`RQ`).
    Requeued,
    /// `REQUEUE_FED` (`RF`).
    RequeueFed,
    /// `REQUEUE_HOLD` (`RH`).
    RequeueHold,
    /// `RESV_DEL_HOLD` (`RD`).
    ResvDelHold,
    /// `REVOKED` (`RV`).
    Revoked,
    /// `SIGNALING` (`SI`).
    Signaling,
    /// `SPECIAL_EXIT` (`SE`).
    SpecialExit,
    /// `STAGE_OUT` (`SO`).
    StageOut,
    /// `STOPPED` (`ST`).
    Stopped,
    /// A well-formed state word this version does not know (maps to UNKNOWN).
    Other(String),
}

/// One row of [`NAMES`]: long name, short code, a constructor of the state, the
/// vocabulary state it maps to, and the error class when the state alone decides it.
type NameRow = (
    &'static str,
    &'static str,
    fn() -> SlurmBaseState,
    JobState,
    Option<ErrorClass>,
);

/// Every known state: (long name, short code, state, vocabulary state, error class).
/// The one table of SLURM states: [`map_state`] reads it, and so does the poll script
/// (through [`live_state_names`]).
const NAMES: &[NameRow] = &[
    ("PENDING", "PD", || SlurmBaseState::Pending, Pending, None),
    ("RUNNING", "R", || SlurmBaseState::Running, Running, None),
    (
        "SUSPENDED",
        "S",
        || SlurmBaseState::Suspended,
        Running,
        None,
    ),
    (
        "COMPLETED",
        "CD",
        || SlurmBaseState::Completed,
        Complete,
        None,
    ),
    (
        "CANCELLED",
        "CA",
        || SlurmBaseState::Cancelled,
        Canceled,
        None,
    ),
    ("FAILED", "F", || SlurmBaseState::Failed, Failed, None),
    (
        "TIMEOUT",
        "TO",
        || SlurmBaseState::Timeout,
        Failed,
        Some(Program),
    ),
    (
        "NODE_FAIL",
        "NF",
        || SlurmBaseState::NodeFail,
        Failed,
        Some(Infra),
    ),
    (
        "PREEMPTED",
        "PR",
        || SlurmBaseState::Preempted,
        Failed,
        Some(Infra),
    ),
    (
        "BOOT_FAIL",
        "BF",
        || SlurmBaseState::BootFail,
        Failed,
        Some(Infra),
    ),
    (
        "DEADLINE",
        "DL",
        || SlurmBaseState::Deadline,
        Failed,
        Some(Program),
    ),
    (
        "OUT_OF_MEMORY",
        "OOM",
        || SlurmBaseState::OutOfMemory,
        Failed,
        Some(Program),
    ),
    (
        "COMPLETING",
        "CG",
        || SlurmBaseState::Completing,
        Running,
        None,
    ),
    (
        "CONFIGURING",
        "CF",
        || SlurmBaseState::Configuring,
        Running,
        None,
    ),
    ("RESIZING", "RS", || SlurmBaseState::Resizing, Running, None),
    ("REQUEUED", "RQ", || SlurmBaseState::Requeued, Pending, None),
    (
        "REQUEUE_FED",
        "RF",
        || SlurmBaseState::RequeueFed,
        Pending,
        None,
    ),
    (
        "REQUEUE_HOLD",
        "RH",
        || SlurmBaseState::RequeueHold,
        Pending,
        None,
    ),
    (
        "RESV_DEL_HOLD",
        "RD",
        || SlurmBaseState::ResvDelHold,
        Pending,
        None,
    ),
    ("REVOKED", "RV", || SlurmBaseState::Revoked, Canceled, None),
    (
        "SIGNALING",
        "SI",
        || SlurmBaseState::Signaling,
        Running,
        None,
    ),
    (
        "SPECIAL_EXIT",
        "SE",
        || SlurmBaseState::SpecialExit,
        Pending,
        None,
    ),
    (
        "STAGE_OUT",
        "SO",
        || SlurmBaseState::StageOut,
        Running,
        None,
    ),
    ("STOPPED", "ST", || SlurmBaseState::Stopped, Running, None),
];

/// The long names of the states a live job is in (its vocabulary state is PENDING or
/// RUNNING), space separated: what the poll script takes as "squeue settles it".
pub(crate) fn live_state_names() -> String {
    NAMES
        .iter()
        .filter(|row| matches!(row.3, Pending | Running))
        .map(|row| row.0)
        .collect::<Vec<_>>()
        .join(" ")
}

impl SlurmBaseState {
    /// The long name SLURM prints (`OUT_OF_MEMORY`), or the unknown word itself.
    pub(crate) fn name(&self) -> &str {
        if let SlurmBaseState::Other(word) = self {
            return word;
        }
        NAMES
            .iter()
            .find(|row| row.2() == *self)
            .map(|row| row.0)
            .unwrap_or("UNKNOWN")
    }

    /// Every known state (not [`SlurmBaseState::Other`]), for tests and docs.
    #[cfg(test)]
    pub(crate) fn all_known() -> Vec<SlurmBaseState> {
        NAMES.iter().map(|row| row.2()).collect()
    }
}

/// A SLURM state as printed, with what was stripped from it: `CANCELLED by 12345`
/// (annotation `by 12345`), `CANCELLED+` (truncated by a column width), short
/// codes (`CA`) and cut-off names (`OUT_OF_ME+`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SlurmState {
    /// The base state.
    pub base: SlurmBaseState,
    /// The trimmed text as printed.
    pub raw: String,
    /// Whether a trailing `+` showed the column was cut.
    pub truncated: bool,
    /// The words after the state (`by 12345`), if any.
    pub detail: Option<String>,
}

impl SlurmState {
    /// Parse a state column. The first word is the state; a trailing `+` marks a
    /// cut column and the stem is matched as a prefix of the known names (it must
    /// pick exactly one). A well-formed unknown word gives
    /// [`SlurmBaseState::Other`]; empty or malformed text is an error.
    pub(crate) fn parse(text: &str) -> Result<Self> {
        let raw = text.trim();
        let bad = |why: &str| Error::parse("SLURM state", format!("`{}`: {why}", short(raw)));
        let mut words = raw.split_whitespace();
        let first = words.next().ok_or_else(|| bad("empty state"))?;
        let detail: Vec<&str> = words.collect();
        let detail = (!detail.is_empty()).then(|| detail.join(" "));
        let upper = first.to_ascii_uppercase();
        let (stem, truncated) = match upper.strip_suffix('+') {
            Some(stem) => (stem.trim_end_matches('+'), true),
            None => (upper.as_str(), false),
        };
        if stem.is_empty() || !stem.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') {
            return Err(bad("not a state word"));
        }
        let exact = NAMES.iter().find(|row| row.0 == stem || row.1 == stem);
        let base = match exact {
            Some(row) => row.2(),
            None if truncated => {
                let matches: Vec<_> = NAMES.iter().filter(|row| row.0.starts_with(stem)).collect();
                match matches.as_slice() {
                    [row] => row.2(),
                    [] => SlurmBaseState::Other(stem.to_string()),
                    _ => {
                        return Err(bad(
                            "cut too short to tell the state apart; widen the column (State%30) or use -P",
                        ))
                    }
                }
            }
            None => SlurmBaseState::Other(stem.to_string()),
        };
        Ok(SlurmState {
            base,
            raw: raw.to_string(),
            truncated,
            detail,
        })
    }

    /// The state from a base state alone.
    pub(crate) fn from_base(base: SlurmBaseState) -> Self {
        let raw = base.name().to_string();
        SlurmState {
            base,
            raw,
            truncated: false,
            detail: None,
        }
    }
}

impl fmt::Display for SlurmState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.base.name())?;
        if let Some(d) = &self.detail {
            write!(f, " {d}")?;
        }
        Ok(())
    }
}

/// Map a SLURM state to the vocabulary, with the error class when the state alone decides it
/// (see the module table). FAILED gives `(ERROR, None)`: classify it from the logs.
pub(crate) fn map_state(state: &SlurmState) -> (JobState, Option<ErrorClass>) {
    NAMES
        .iter()
        .find(|row| row.2() == state.base)
        .map_or((JobState::Unknown, None), |row| (row.3, row.4))
}

impl SlurmBaseState {
    /// How a job that ended in this state ended, in the scheduler-neutral words of
    /// [`classify_failure`](crate::classify::classify_failure); `exit_code` is the
    /// batch script's.
    pub(crate) fn ending(&self, exit_code: Option<i32>) -> Ending {
        match self {
            SlurmBaseState::NodeFail => Ending::NodeFailure,
            SlurmBaseState::BootFail => Ending::BootFailure,
            SlurmBaseState::Preempted => Ending::Preempted,
            SlurmBaseState::Timeout => Ending::TimeLimit,
            SlurmBaseState::OutOfMemory => Ending::OutOfMemory,
            SlurmBaseState::Deadline => Ending::Deadline,
            _ => Ending::Failed { exit_code },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::ErrorClass::{Infra, Program};
    use JobState as J;

    fn map(text: &str) -> (JobState, Option<ErrorClass>) {
        map_state(&SlurmState::parse(text).unwrap())
    }

    #[test]
    fn every_row_of_the_mapping_table() {
        let table: &[(&str, JobState, Option<ErrorClass>)] = &[
            ("PENDING", J::Pending, None),
            ("REQUEUED", J::Pending, None),
            ("REQUEUE_FED", J::Pending, None),
            ("REQUEUE_HOLD", J::Pending, None),
            ("RESV_DEL_HOLD", J::Pending, None),
            ("SPECIAL_EXIT", J::Pending, None),
            ("RUNNING", J::Running, None),
            ("COMPLETING", J::Running, None),
            ("SUSPENDED", J::Running, None),
            ("STOPPED", J::Running, None),
            ("CONFIGURING", J::Running, None),
            ("RESIZING", J::Running, None),
            ("SIGNALING", J::Running, None),
            ("STAGE_OUT", J::Running, None),
            ("COMPLETED", J::Complete, None),
            ("FAILED", J::Error, None),
            ("TIMEOUT", J::Error, Some(Program)),
            ("OUT_OF_MEMORY", J::Error, Some(Program)),
            ("DEADLINE", J::Error, Some(Program)),
            ("NODE_FAIL", J::Error, Some(Infra)),
            ("BOOT_FAIL", J::Error, Some(Infra)),
            ("CANCELLED", J::Canceled, None),
            ("PREEMPTED", J::Error, Some(Infra)),
            ("REVOKED", J::Canceled, None),
            ("SOME_NEW_STATE", J::Unknown, None),
        ];
        for (text, state, class) in table {
            assert_eq!(map(text), (*state, *class), "{text}");
        }
        // Every known state appears in the table above.
        for known in SlurmBaseState::all_known() {
            assert!(
                table.iter().any(|(t, _, _)| *t == known.name()),
                "{} missing from the test table",
                known.name()
            );
        }
    }

    #[test]
    fn the_live_states_the_poll_script_gets_are_the_tables_pending_and_running_rows() {
        let live = live_state_names();
        let words: Vec<&str> = live.split(' ').collect();
        for known in SlurmBaseState::all_known() {
            let state = SlurmState::from_base(known.clone());
            let alive = matches!(map_state(&state).0, J::Pending | J::Running);
            assert_eq!(words.contains(&known.name()), alive, "{}", known.name());
        }
        // What the poll script's awk list held before it came from the table.
        for name in [
            "PENDING",
            "RUNNING",
            "COMPLETING",
            "REQUEUE_HOLD",
            "STAGE_OUT",
        ] {
            assert!(words.contains(&name), "{name}");
        }
    }

    #[test]
    fn endings_name_how_a_job_ended_for_the_classifier() {
        use crate::classify::Ending;
        let ending = |name: &str| SlurmState::parse(name).unwrap().base.ending(Some(3));
        assert_eq!(ending("NODE_FAIL"), Ending::NodeFailure);
        assert_eq!(ending("BOOT_FAIL"), Ending::BootFailure);
        assert_eq!(ending("PREEMPTED"), Ending::Preempted);
        assert_eq!(ending("TIMEOUT"), Ending::TimeLimit);
        assert_eq!(ending("OUT_OF_MEMORY"), Ending::OutOfMemory);
        assert_eq!(ending("DEADLINE"), Ending::Deadline);
        for name in ["FAILED", "COMPLETED", "CANCELLED"] {
            assert_eq!(
                ending(name),
                Ending::Failed { exit_code: Some(3) },
                "{name}"
            );
        }
    }

    #[test]
    fn annotated_truncated_and_short_forms() {
        let by = SlurmState::parse("CANCELLED by 12345").unwrap();
        assert_eq!(by.base, SlurmBaseState::Cancelled);
        assert_eq!(by.detail.as_deref(), Some("by 12345"));
        assert_eq!(by.to_string(), "CANCELLED by 12345");
        let plus = SlurmState::parse("CANCELLED+").unwrap();
        assert!(plus.truncated);
        assert_eq!(plus.base, SlurmBaseState::Cancelled);
        // sacct's default width is 10: nine characters and a plus.
        for (cut, base) in [
            ("OUT_OF_ME+", SlurmBaseState::OutOfMemory),
            ("REQUEUE_H+", SlurmBaseState::RequeueHold),
            ("REQUEUE_F+", SlurmBaseState::RequeueFed),
            ("RESV_DEL_+", SlurmBaseState::ResvDelHold),
            ("CONFIGURI+", SlurmBaseState::Configuring),
            ("SPECIAL_E+", SlurmBaseState::SpecialExit),
            ("COMPLETED+", SlurmBaseState::Completed),
            ("  node_fail  ", SlurmBaseState::NodeFail),
        ] {
            assert_eq!(SlurmState::parse(cut).unwrap().base, base, "{cut}");
        }
        for (code, base) in [
            ("PD", SlurmBaseState::Pending),
            ("R", SlurmBaseState::Running),
            ("CG", SlurmBaseState::Completing),
            ("OOM", SlurmBaseState::OutOfMemory),
            ("CA", SlurmBaseState::Cancelled),
        ] {
            assert_eq!(SlurmState::parse(code).unwrap().base, base, "{code}");
        }
        // Too short to tell COMPLETED from COMPLETING.
        assert!(SlurmState::parse("COMPL+").is_err());
        for bad in ["", "   ", "12345", "RUN-NING", "+"] {
            assert!(SlurmState::parse(bad).is_err(), "{bad:?}");
        }
    }
}
