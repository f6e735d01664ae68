//! [`RecordFilter`]: which records a store lists.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::state::JobState;

use super::JobRecord;

/// Which records [`RecordStore::list`](super::RecordStore::list) returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordFilter {
    /// Only these states (empty: any).
    pub states: Vec<JobState>,
    /// Only records with all these labels.
    pub labels: BTreeMap<String, String>,
    /// Only records not yet terminal.
    pub active_only: bool,
    /// Only records opened at or after this time.
    pub submitted_since: Option<DateTime<Utc>>,
    /// Only records opened before this time.
    pub submitted_before: Option<DateTime<Utc>>,
}

impl RecordFilter {
    /// Every record.
    pub fn any() -> Self {
        Self::default()
    }

    /// Also accept `state`.
    pub fn state(mut self, state: JobState) -> Self {
        self.states.push(state);
        self
    }

    /// Require label `key` = `value`.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Only non-terminal records.
    pub fn active(mut self) -> Self {
        self.active_only = true;
        self
    }

    /// Only records opened at or after `since`.
    pub fn since(mut self, since: DateTime<Utc>) -> Self {
        self.submitted_since = Some(since);
        self
    }

    /// Only records opened before `before`.
    pub fn before(mut self, before: DateTime<Utc>) -> Self {
        self.submitted_before = Some(before);
        self
    }

    /// Whether `record` passes.
    pub fn matches(&self, record: &JobRecord) -> bool {
        (self.states.is_empty() || self.states.contains(&record.state))
            && (!self.active_only || !record.state.is_terminal())
            && self
                .submitted_since
                .is_none_or(|since| record.submitted_at >= since)
            && self
                .submitted_before
                .is_none_or(|before| record.submitted_at < before)
            && self
                .labels
                .iter()
                .all(|(k, v)| record.labels.get(k) == Some(v))
    }
}
