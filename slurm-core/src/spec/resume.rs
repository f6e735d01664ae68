//! A spec's `resume` block ([`ResumeSpec`]): a run longer than the wall time, continued
//! segment after segment (the signal before the wall, a checkpoint, a requeue), and its
//! signal ([`ResumeSignal`]).
//!
//! ```yaml
//! resume:
//!   max_restarts: 10         # how many times the run may be continued
//!   signal: USR2             # sent to the command warn_before the wall, and at a preemption
//!   warn_before: "00:02:00"  # how long before the wall the signal comes
//!   checkpoints: "ckpt/*.pt" # optional: the newest non-empty match is SLURM_RUN_RESUME_FROM
//! ```

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::WallTime;
use crate::{Error, Result};

/// The environment variable that tells the command which segment it runs in: 0 on the
/// first run, one more after each continuation.
pub const RESTART_COUNT_VAR: &str = "SLURM_RUN_RESTART_COUNT";

/// The environment variable holding the newest checkpoint the command resumes from
/// (a path under the job folder as the command sees it), or empty.
pub const RESUME_FROM_VAR: &str = "SLURM_RUN_RESUME_FROM";

/// The exit status of a resumable job's script when a segment ended by the wall or a
/// preemption and the budget (`max_restarts`) is used up.
pub(crate) const BUDGET_USED_UP_EXIT: u8 = 85;

/// The exit status of a resumable job's script when Slurm refused to requeue it
/// (`scontrol requeue` failed).
pub(crate) const REQUEUE_REFUSED_EXIT: u8 = 86;

/// The signal (by number: `scancel` knows no name for it) the batch script warns each
/// node's step shell with; the step shell passes the resume signal on to the command's
/// process group alone. Slurm signals every process of a step, the container runtime's
/// too (squashfuse, fuse-overlayfs), and SIGWINCH is one whose default is to be ignored:
/// the resume signal itself would end those and pull the image out from under the
/// command (a bus error, or `Transport endpoint is not connected`, at its next page or
/// program).
pub(crate) const WARNING_CARRIER: (&str, u8) = ("WINCH", 28);

/// How a run longer than its wall time continues: at most `max_restarts` times, the
/// command warned by `signal` `warn_before` the wall (and at a preemption), resuming
/// from the newest of `checkpoints`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResumeSpec {
    /// How many times the run may be continued (after the wall or a preemption); at least 1.
    pub max_restarts: u32,
    /// The signal sent to the command before the wall and at a preemption (default `USR2`).
    #[serde(default)]
    pub signal: ResumeSignal,
    /// How long before the wall the signal comes (default two minutes); below the wall time.
    #[serde(default = "default_warn_before")]
    pub warn_before: WallTime,
    /// A glob under the job folder (`ckpt/*.pt`): its newest non-empty match is exported
    /// as `SLURM_RUN_RESUME_FROM`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoints: Option<String>,
}

fn default_warn_before() -> WallTime {
    WallTime::from_minutes(2)
}

impl ResumeSpec {
    /// A resume block with `max_restarts`, the default signal (USR2) and warning (two
    /// minutes), and no checkpoint glob.
    pub fn new(max_restarts: u32) -> Self {
        ResumeSpec {
            max_restarts,
            signal: ResumeSignal::default(),
            warn_before: default_warn_before(),
            checkpoints: None,
        }
    }

    /// Check what does not depend on the wall time: the budget and the glob.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.max_restarts == 0 {
            return Err(Error::invalid(
                "resume.max_restarts",
                "a budget of 0 never continues the run; give how many times it may be continued (e.g. 10), or remove the resume block",
            ));
        }
        if self.warn_before.as_secs() == 0 {
            return Err(Error::invalid(
                "resume.warn_before",
                "must be at least one second; give how long before the wall the signal comes (e.g. \"00:02:00\")",
            ));
        }
        if let Some(glob) = &self.checkpoints {
            validate_checkpoint_glob(glob)?;
        }
        Ok(())
    }

    /// Check the warning against the wall time `wall`: the signal must come inside the
    /// segment, with time left to write a checkpoint before the wall.
    pub(crate) fn check_wall(&self, wall: WallTime) -> Result<()> {
        if self.warn_before >= wall {
            return Err(Error::invalid(
                "resume.warn_before",
                format!(
                    "{} is not below the wall time {wall}: the signal would come before the segment starts; shorten warn_before (e.g. to a tenth of the wall) or raise time",
                    self.warn_before
                ),
            ));
        }
        Ok(())
    }
}

/// A checkpoint glob: relative to the job folder, no `..`, one line.
fn validate_checkpoint_glob(glob: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::invalid(
            "resume.checkpoints",
            format!("`{}` {why}", crate::names::short(glob)),
        ))
    };
    if glob.trim().is_empty() {
        return bad("is empty; give a glob under the job folder, e.g. \"ckpt/*.pt\"");
    }
    if glob.chars().any(char::is_control) {
        return bad("holds a control character; give a glob on one line, e.g. \"ckpt/*.pt\"");
    }
    if glob.starts_with('/') || glob.starts_with('~') {
        return bad(
            "is not under the job folder; give it relative to the job folder, e.g. \"ckpt/*.pt\"",
        );
    }
    if glob.split('/').any(|part| part == "..") {
        return bad("leaves the job folder (`..`); give a glob under it, e.g. \"ckpt/*.pt\"");
    }
    Ok(())
}

/// The signals a command may be warned with, by name (without `SIG`) and number.
const SIGNALS: &[(&str, u8)] = &[
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("USR1", 10),
    ("USR2", 12),
    ("ALRM", 14),
    ("TERM", 15),
    ("URG", 23),
    ("XCPU", 24),
];

/// The signal a resumable command is warned with (HUP, INT, QUIT, USR1, USR2, ALRM, TERM,
/// URG or XCPU), `USR2` by default
/// (NCCL catches `USR1`, which is why peers moved to `USR2`). Written `USR2` or `SIGUSR2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(into = "String")]
pub struct ResumeSignal {
    name: &'static str,
    number: u8,
}

impl Default for ResumeSignal {
    fn default() -> Self {
        ResumeSignal {
            name: "USR2",
            number: 12,
        }
    }
}

impl ResumeSignal {
    /// The name without `SIG` (`USR2`), as `kill -s` and `--signal` take it.
    pub fn name(self) -> &'static str {
        self.name
    }

    /// The signal's number on Linux (`USR2` = 12): a command killed by it exits 128 + it.
    pub fn number(self) -> u8 {
        self.number
    }
}

impl FromStr for ResumeSignal {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        let upper = text.trim().to_ascii_uppercase();
        let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
        SIGNALS
            .iter()
            .find(|(name, _)| *name == bare)
            .map(|(name, number)| ResumeSignal {
                name,
                number: *number,
            })
            .ok_or_else(|| {
                let known: Vec<&str> = SIGNALS.iter().map(|(n, _)| *n).collect();
                Error::invalid(
                    "resume.signal",
                    format!(
                        "`{}` is not a signal a command can be warned with; use one of {} (USR2 is the usual one: NCCL catches USR1)",
                        crate::names::short(text),
                        known.join(", ")
                    ),
                )
            })
    }
}

impl<'de> Deserialize<'de> for ResumeSignal {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl From<ResumeSignal> for String {
    fn from(signal: ResumeSignal) -> String {
        signal.name.to_string()
    }
}

impl fmt::Display for ResumeSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::JobSpec;

    fn spec_with(resume: &str) -> Result<JobSpec> {
        JobSpec::from_yaml_str(&format!(
            "name: long\ncommand: python train.py\ntime: \"00:10:00\"\nresume:\n{resume}"
        ))
    }

    #[test]
    fn the_block_reads_with_its_defaults() {
        let spec = spec_with("  max_restarts: 10\n").unwrap();
        let resume = spec.resume.unwrap();
        assert_eq!(resume.max_restarts, 10);
        assert_eq!(resume.signal.name(), "USR2");
        assert_eq!(resume.signal.number(), 12);
        assert_eq!(resume.warn_before, WallTime::from_minutes(2));
        assert_eq!(resume.checkpoints, None);
        let spec = spec_with(
            "  max_restarts: 3\n  signal: SIGusr1\n  warn_before: \"00:00:30\"\n  checkpoints: \"ckpt/*.pt\"\n",
        )
        .unwrap();
        let resume = spec.resume.unwrap();
        assert_eq!(resume.signal.to_string(), "USR1");
        assert_eq!(resume.warn_before.as_secs(), 30);
        assert_eq!(resume.checkpoints.as_deref(), Some("ckpt/*.pt"));
    }

    /// The multirole template has no signal trap or requeue: a multi-role job with a
    /// resume block is refused at validation, naming the field, before anything is sent.
    #[test]
    fn a_multi_role_job_with_a_resume_block_is_refused_naming_it() {
        let error = JobSpec::from_yaml_str(
            "name: rl\ntime: \"00:10:00\"\nresume: {max_restarts: 2}\nroles:\n  a: {command: x}\n  b: {command: y}\n",
        )
        .unwrap_err();
        assert_eq!(error.kind(), crate::ErrorKind::Invalid, "{error}");
        assert!(error.to_string().contains("resume"), "{error}");
        assert!(error.to_string().contains("multi-role"), "{error}");
    }

    #[test]
    fn bad_blocks_name_the_field_and_the_fix() {
        let cases: &[(&str, &str, &str)] = &[
            ("  max_restarts: 0\n", "resume.max_restarts", "budget of 0"),
            ("  signal: USR2\n", "max_restarts", "missing field"),
            (
                "  max_restarts: 2\n  signal: KILL\n",
                "resume.signal",
                "USR2 is the usual one",
            ),
            (
                "  max_restarts: 2\n  checkpoints: /abs/*.pt\n",
                "resume.checkpoints",
                "relative to the job folder",
            ),
            (
                "  max_restarts: 2\n  checkpoints: ../other/*.pt\n",
                "resume.checkpoints",
                "leaves the job folder",
            ),
            (
                "  max_restarts: 2\n  every: 3\n",
                "every",
                "remove it or fix its spelling",
            ),
        ];
        for (block, field, fix) in cases {
            let error = spec_with(block).unwrap_err();
            let text = error.to_string();
            assert!(text.contains(field), "{block}: {text}");
            assert!(text.contains(fix), "{block}: {text}");
        }
    }

    #[test]
    fn a_warning_longer_than_the_wall_is_refused_at_resolve() {
        let mut spec = spec_with("  max_restarts: 2\n  warn_before: \"00:10:00\"\n").unwrap();
        let error = spec
            .resolve(&crate::spec::SpecDefaults::default())
            .unwrap_err();
        assert!(error.to_string().contains("resume.warn_before"), "{error}");
        assert!(error.to_string().contains("not below the wall"), "{error}");
        spec.resume.as_mut().unwrap().warn_before = WallTime::from_secs(30);
        let resources = spec.resolve(&crate::spec::SpecDefaults::default()).unwrap();
        assert!(resources.requeue, "a resumable job is always requeueable");
    }
}
