//! A record's history: one [`Transition`] per state entered, and who caused it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::state::JobState;

/// Who caused a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransitionSource {
    /// slurm-run itself (submit, retry).
    Agent,
    /// A status poll of the scheduler.
    Poll,
    /// A person (cancel).
    User,
}

/// One entry of a record's history, read through its accessors.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    #[serde(deserialize_with = "super::timestamp::deserialize")]
    pub(crate) at: DateTime<Utc>,
    pub(crate) state: JobState,
    pub(crate) source: TransitionSource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) message: Option<String>,
}

impl Transition {
    /// When.
    pub fn at(&self) -> DateTime<Utc> {
        self.at
    }

    /// The state entered.
    pub fn state(&self) -> JobState {
        self.state
    }

    /// Who.
    pub fn source(&self) -> TransitionSource {
        self.source
    }

    /// Why (the scheduler's own state, a reason); redacted.
    pub fn message(&self) -> Option<&str> {
        self.message.as_deref()
    }
}
