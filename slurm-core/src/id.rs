//! The ids of a job: the [`JobId`] slurm-run mints for it, and the [`BackendRef`] of the
//! scheduler's job that runs it.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::names::{validate_safe_name, MAX_NAME_LEN};
use crate::{Error, Result};

/// The hex digits of a minted id's random suffix.
const SUFFIX_HEX: usize = 16;

/// A record id: `<label>-<16 hex>` (64 random bits), a safe name (`^[A-Za-z0-9][A-Za-z0-9._-]*$`,
/// at most 64 characters) usable as a file name and as the SLURM job name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct JobId(String);

impl JobId {
    /// Parse an existing id (refuses unsafe names and path traversal).
    pub fn parse(text: &str) -> Result<Self> {
        validate_safe_name("job id", text)?;
        Ok(JobId(text.to_string()))
    }

    /// Mint a fresh id from `label`: the label sanitised (unsafe characters become
    /// `-`, cut to fit), a dash, and 16 random hex digits (64 bits: records of many
    /// stores sharing one results root do not meet by the birthday paradox).
    ///
    /// ```
    /// use slurm_core::JobId;
    /// let id = JobId::mint("dino/train v2");
    /// assert!(id.as_str().starts_with("dino-train-v2-"));
    /// assert_eq!(id.as_str().len(), "dino-train-v2-".len() + 16);
    /// ```
    pub fn mint(label: &str) -> Self {
        let mut clean: String = label
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        // Start with a letter or digit; no runs of dashes at the ends.
        clean = clean
            .trim_start_matches(|c: char| !c.is_ascii_alphanumeric())
            .trim_end_matches('-')
            .to_string();
        clean.truncate(MAX_NAME_LEN - 1 - SUFFIX_HEX);
        let clean = clean.trim_end_matches('-');
        let label = if clean.is_empty() { "job" } else { clean };
        let suffix: u64 = rand::random();
        JobId(format!("{label}-{suffix:0width$x}", width = SUFFIX_HEX))
    }

    /// The id text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for JobId {
    type Error = Error;
    fn try_from(value: String) -> Result<Self> {
        validate_safe_name("job id", &value)?;
        Ok(JobId(value))
    }
}

impl From<JobId> for String {
    fn from(value: JobId) -> Self {
        value.0
    }
}

impl std::str::FromStr for JobId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        JobId::parse(s)
    }
}

/// Where the job lives on the backend: the scheduler's own id for it, as text, and
/// the cluster when the scheduler named one. Scheduler neutral: a SLURM job id is
/// `"4242"`, a local process could be its pid.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BackendRef {
    /// The scheduler's id of the job (SLURM: the job id).
    #[serde(alias = "slurm_job_id", deserialize_with = "native_id_text")]
    pub native_id: String,
    /// The cluster, when the scheduler named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
}

impl BackendRef {
    /// A reference to the job `native_id` on the default cluster.
    pub fn new(native_id: impl Into<String>) -> Self {
        BackendRef {
            native_id: native_id.into(),
            cluster: None,
        }
    }

    /// On `cluster`.
    pub fn on_cluster(mut self, cluster: impl Into<String>) -> Self {
        self.cluster = Some(cluster.into());
        self
    }
}

impl fmt::Display for BackendRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cluster {
            Some(cluster) => write!(f, "{}@{cluster}", self.native_id),
            None => f.write_str(&self.native_id),
        }
    }
}

/// Reads a native id written as text, or as a number (records written before the id
/// became scheduler neutral hold `"slurm_job_id": 4242`).
fn native_id_text<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Text {
        Text(String),
        Number(u64),
    }
    Ok(match Text::deserialize(deserializer)? {
        Text::Text(text) => text,
        Text::Number(number) => number.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_ids_are_wide_enough_that_collisions_are_no_birthday_problem() {
        // Issue 26, defect 4: 24 random bits collide at a few thousand records (two
        // stores sharing a results root, one of them then adopting the other's job).
        let id = JobId::mint("train");
        let suffix = id.as_str().strip_prefix("train-").unwrap();
        assert!(
            suffix.len() >= 16 && suffix.bytes().all(|b| b.is_ascii_hexdigit()),
            "{id}"
        );
        let long = JobId::mint(&"x".repeat(200));
        assert!(long.as_str().len() <= MAX_NAME_LEN, "{long}");
    }
}
