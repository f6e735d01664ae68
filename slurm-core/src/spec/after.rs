//! The dependencies a spec names in `after`, as plain values: a [`Dependency`] on a
//! record under a [`DependencyCondition`], written `ID[:ok|any|notok|start]`, and the
//! [`DependencyVerdict`] a parent's state gives it. Reading the parents from a store is
//! `crate::dependency`'s.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::id::JobId;
use crate::state::JobState;
use crate::{Error, Result};

/// When a dependant may start, in terms of its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DependencyCondition {
    /// After the parent completed successfully (the default).
    Ok,
    /// After the parent ended, however it ended.
    Any,
    /// After the parent failed (ERROR or CANCELED).
    NotOk,
    /// After the parent started (or ended).
    Start,
}

impl DependencyCondition {
    /// `ok`, `any`, `notok` or `start`.
    pub fn as_str(self) -> &'static str {
        match self {
            DependencyCondition::Ok => "ok",
            DependencyCondition::Any => "any",
            DependencyCondition::NotOk => "notok",
            DependencyCondition::Start => "start",
        }
    }

    /// What a parent in `state` means for a dependant with this condition.
    ///
    /// ```
    /// use slurm_core::{DependencyCondition, DependencyVerdict};
    /// use slurm_core::JobState;
    /// assert_eq!(DependencyCondition::Ok.verdict(JobState::Complete), DependencyVerdict::Satisfied);
    /// assert!(matches!(DependencyCondition::Ok.verdict(JobState::Error), DependencyVerdict::Never(_)));
    /// assert_eq!(DependencyCondition::NotOk.verdict(JobState::Running), DependencyVerdict::Waiting);
    /// ```
    pub fn verdict(self, state: JobState) -> DependencyVerdict {
        use DependencyCondition::*;
        use JobState::*;
        match (self, state) {
            (Ok, Complete) | (Any, Complete | Error | Canceled) => DependencyVerdict::Satisfied,
            (NotOk, Error | Canceled) => DependencyVerdict::Satisfied,
            (Start, Running | Complete | Error | Canceled) => DependencyVerdict::Satisfied,
            (Ok, Error | Canceled) => {
                DependencyVerdict::Never(format!("it ended {state}, not COMPLETE"))
            }
            (NotOk, Complete) => DependencyVerdict::Never(
                "it completed, and the dependant waits for a failure".into(),
            ),
            _ => DependencyVerdict::Waiting,
        }
    }
}

impl fmt::Display for DependencyCondition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DependencyCondition {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "ok" | "afterok" => Ok(DependencyCondition::Ok),
            "any" | "afterany" => Ok(DependencyCondition::Any),
            "notok" | "afternotok" => Ok(DependencyCondition::NotOk),
            "start" | "after" => Ok(DependencyCondition::Start),
            other => Err(Error::invalid(
                "after",
                format!(
                    "`{}` is not a condition; use ok, any, notok or start",
                    crate::names::short(other)
                ),
            )),
        }
    }
}

/// What a dependency says now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DependencyVerdict {
    /// The parent has not reached the condition yet.
    Waiting,
    /// The condition holds.
    Satisfied,
    /// The condition can never hold; why.
    Never(String),
}

/// "Run after record `job` under `condition`". Written `ID` (after success) or
/// `ID:ok`, `ID:any`, `ID:notok`, `ID:start` in specs and on the command line.
///
/// ```
/// use slurm_core::{Dependency, DependencyCondition};
/// let d: Dependency = "train-a1b2c3:any".parse().unwrap();
/// assert_eq!(d.condition, DependencyCondition::Any);
/// assert_eq!(d.to_string(), "train-a1b2c3:any");
/// assert_eq!("train-a1b2c3".parse::<Dependency>().unwrap().condition, DependencyCondition::Ok);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Dependency {
    /// The parent record (a later attempt of it counts: see `Attempts::latest`).
    pub job: JobId,
    /// When the dependant may start.
    pub condition: DependencyCondition,
}

impl Dependency {
    /// Run after `job` completes successfully.
    pub fn ok(job: JobId) -> Self {
        Dependency {
            job,
            condition: DependencyCondition::Ok,
        }
    }
}

impl fmt::Display for Dependency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.job, self.condition)
    }
}

impl FromStr for Dependency {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let (job, condition) = match s.trim().split_once(':') {
            Some((job, condition)) => (job, condition.parse()?),
            None => (s.trim(), DependencyCondition::Ok),
        };
        let job = JobId::parse(job).map_err(|_| {
            Error::invalid(
                "after",
                format!(
                    "`{}` does not name a record; write ID or ID:ok|any|notok|start (the record id, e.g. train-a1b2c3)",
                    crate::names::short(s)
                ),
            )
        })?;
        Ok(Dependency { job, condition })
    }
}

impl Serialize for Dependency {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Dependency {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_condition_against_every_state() {
        use DependencyCondition::*;
        for state in crate::state::ALL_STATES {
            let v = |c: DependencyCondition| c.verdict(state);
            match state {
                JobState::Complete => {
                    assert_eq!(v(Ok), DependencyVerdict::Satisfied);
                    assert_eq!(v(Any), DependencyVerdict::Satisfied);
                    assert!(matches!(v(NotOk), DependencyVerdict::Never(_)));
                    assert_eq!(v(Start), DependencyVerdict::Satisfied);
                }
                JobState::Error | JobState::Canceled => {
                    assert!(matches!(v(Ok), DependencyVerdict::Never(_)));
                    assert_eq!(v(Any), DependencyVerdict::Satisfied);
                    assert_eq!(v(NotOk), DependencyVerdict::Satisfied);
                    assert_eq!(v(Start), DependencyVerdict::Satisfied);
                }
                JobState::Running => {
                    assert_eq!(v(Start), DependencyVerdict::Satisfied);
                    assert_eq!(v(Ok), DependencyVerdict::Waiting);
                }
                _ => {
                    for c in [Ok, Any, NotOk, Start] {
                        assert_eq!(v(c), DependencyVerdict::Waiting, "{c} {state}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_written_form_round_trips_and_bad_ones_name_the_field() {
        for text in ["a-1:ok", "a-1:any", "a-1:notok", "a-1:start"] {
            let d: Dependency = text.parse().unwrap();
            assert_eq!(d.to_string(), text);
            let json = serde_json::to_string(&d).unwrap();
            assert_eq!(serde_json::from_str::<Dependency>(&json).unwrap(), d);
        }
        for bad in ["", "../x", "a-1:sometimes", "a b"] {
            let error = bad.parse::<Dependency>().unwrap_err();
            assert!(error.to_string().contains("after"), "{error}");
        }
    }
}
