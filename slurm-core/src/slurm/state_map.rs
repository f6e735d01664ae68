//! SLURM job states as squeue, sacct and scontrol print them, and their mapping to [`JobState`].
//!
//! | SLURM state | [`JobState`] | error class |
//! |---|---|---|
//! | PENDING, REQUEUED, REQUEUE_FED, REQUEUE_HOLD, RESV_DEL_HOLD, SPECIAL_EXIT | PENDING | |
//! | RUNNING, COMPLETING, SUSPENDED, STOPPED, CONFIGURING, RESIZING, SIGNALING, STAGE_OUT | RUNNING | |
//! | COMPLETED | COMPLETE (then confirmed by the completion check) | |
//! | FAILED | ERROR | none: classify from the logs ([`classify_failure`](crate::classify::classify_failure)) |
//! | TIMEOUT, OUT_OF_MEMORY, DEADLINE | ERROR | program (never retried) |
//! | NODE_FAIL, BOOT_FAIL | ERROR | infra |
//! | CANCELLED, PREEMPTED, REVOKED | CANCELED | |
//! | not found, or a state this version does not know | UNKNOWN | |
//!
//! SUSPENDED and STOPPED stay RUNNING (the scheduler owns the job and may resume
//! it); SPECIAL_EXIT is a held requeue, so PENDING. The native state rides in
//! the transition message.

use std::fmt;

use crate::classify::ErrorClass;
use crate::slurm::id::short;
use crate::state::JobState;
use crate::{Error, Result};

/// The base SLURM job states (without flags or annotations).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SlurmBaseState {
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

/// One row of [`NAMES`]: long name, short code, and a constructor of the state.
type NameRow = (&'static str, &'static str, fn() -> SlurmBaseState);

/// (long name, short code, state) for every known state.
const NAMES: &[NameRow] = &[
    ("PENDING", "PD", || SlurmBaseState::Pending),
    ("RUNNING", "R", || SlurmBaseState::Running),
    ("SUSPENDED", "S", || SlurmBaseState::Suspended),
    ("COMPLETED", "CD", || SlurmBaseState::Completed),
    ("CANCELLED", "CA", || SlurmBaseState::Cancelled),
    ("FAILED", "F", || SlurmBaseState::Failed),
    ("TIMEOUT", "TO", || SlurmBaseState::Timeout),
    ("NODE_FAIL", "NF", || SlurmBaseState::NodeFail),
    ("PREEMPTED", "PR", || SlurmBaseState::Preempted),
    ("BOOT_FAIL", "BF", || SlurmBaseState::BootFail),
    ("DEADLINE", "DL", || SlurmBaseState::Deadline),
    ("OUT_OF_MEMORY", "OOM", || SlurmBaseState::OutOfMemory),
    ("COMPLETING", "CG", || SlurmBaseState::Completing),
    ("CONFIGURING", "CF", || SlurmBaseState::Configuring),
    ("RESIZING", "RS", || SlurmBaseState::Resizing),
    ("REQUEUED", "RQ", || SlurmBaseState::Requeued),
    ("REQUEUE_FED", "RF", || SlurmBaseState::RequeueFed),
    ("REQUEUE_HOLD", "RH", || SlurmBaseState::RequeueHold),
    ("RESV_DEL_HOLD", "RD", || SlurmBaseState::ResvDelHold),
    ("REVOKED", "RV", || SlurmBaseState::Revoked),
    ("SIGNALING", "SI", || SlurmBaseState::Signaling),
    ("SPECIAL_EXIT", "SE", || SlurmBaseState::SpecialExit),
    ("STAGE_OUT", "SO", || SlurmBaseState::StageOut),
    ("STOPPED", "ST", || SlurmBaseState::Stopped),
];

impl SlurmBaseState {
    /// The long name SLURM prints (`OUT_OF_MEMORY`), or the unknown word itself.
    pub fn name(&self) -> &str {
        if let SlurmBaseState::Other(word) = self {
            return word;
        }
        NAMES
            .iter()
            .find(|(_, _, make)| make() == *self)
            .map(|(long, _, _)| *long)
            .unwrap_or("UNKNOWN")
    }

    /// Every known state (not [`SlurmBaseState::Other`]), for tests and docs.
    pub fn all_known() -> Vec<SlurmBaseState> {
        NAMES.iter().map(|(_, _, make)| make()).collect()
    }
}

/// A SLURM state as printed, with what was stripped from it: `CANCELLED by 12345`
/// (annotation `by 12345`), `CANCELLED+` (truncated by a column width), short
/// codes (`CA`) and cut-off names (`OUT_OF_ME+`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SlurmState {
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
    pub fn parse(text: &str) -> Result<Self> {
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
        let exact = NAMES
            .iter()
            .find(|(long, code, _)| *long == stem || *code == stem);
        let base = match exact {
            Some((_, _, make)) => make(),
            None if truncated => {
                let matches: Vec<_> = NAMES
                    .iter()
                    .filter(|(long, _, _)| long.starts_with(stem))
                    .collect();
                match matches.as_slice() {
                    [(_, _, make)] => make(),
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
    pub fn from_base(base: SlurmBaseState) -> Self {
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
pub fn map_state(state: &SlurmState) -> (JobState, Option<ErrorClass>) {
    use SlurmBaseState::*;
    match &state.base {
        Pending | Requeued | RequeueFed | RequeueHold | ResvDelHold | SpecialExit => {
            (JobState::Pending, None)
        }
        Running | Completing | Suspended | Stopped | Configuring | Resizing | Signaling
        | StageOut => (JobState::Running, None),
        Completed => (JobState::Complete, None),
        Failed => (JobState::Error, None),
        Timeout | OutOfMemory | Deadline => (JobState::Error, Some(ErrorClass::Program)),
        NodeFail | BootFail => (JobState::Error, Some(ErrorClass::Infra)),
        Cancelled | Preempted | Revoked => (JobState::Canceled, None),
        Other(_) => (JobState::Unknown, None),
    }
}

/// [`map_state`] for an observation that may be missing: a job neither squeue nor sacct knows is UNKNOWN.
pub fn map_observed(state: Option<&SlurmState>) -> (JobState, Option<ErrorClass>) {
    state.map_or((JobState::Unknown, None), map_state)
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
            ("PREEMPTED", J::Canceled, None),
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
        assert_eq!(map_observed(None), (J::Unknown, None));
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
