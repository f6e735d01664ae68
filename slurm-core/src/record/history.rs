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

/// One entry of a record's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    /// When.
    pub at: DateTime<Utc>,
    /// The state entered.
    pub state: JobState,
    /// Who.
    pub source: TransitionSource,
    /// Why (the scheduler's own state, a reason); redacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
