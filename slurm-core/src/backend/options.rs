//! The arguments of the [`Backend`](super::Backend) operations.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::classify::RetryPolicy;
use crate::record::{JobId, JobRecord};
use crate::redact::{check_secret_value, SecretRegistry};
use crate::spec::{Dependency, JobSpec};
use crate::Result;

/// Options of [`Backend::submit`](super::Backend::submit).
#[derive(Clone, Default)]
pub struct SubmitOptions {
    /// The record this submit retries (the new record links to it).
    pub retry_of: Option<JobId>,
    /// Secret values by name. `None` reads each secret the spec names from this
    /// process's environment. Values are never stored, logged or shown.
    pub secret_values: Option<BTreeMap<String, String>>,
    /// Records this job waits for, beside the spec's own `after` (the scheduler
    /// enforces the wait; a parent not yet accepted by it is an error).
    pub after: Vec<Dependency>,
}

impl SubmitOptions {
    /// The submit options of the retry of `previous`, with the secrets' values the first
    /// submit was given (`None`: read from this process's environment).
    pub(crate) fn for_retry_of(
        previous: &JobRecord,
        secret_values: Option<BTreeMap<String, String>>,
    ) -> Self {
        SubmitOptions {
            retry_of: Some(previous.id.clone()),
            secret_values,
            ..SubmitOptions::default()
        }
    }

    /// The values of the secrets `spec` names, from [`SubmitOptions::secret_values`] or
    /// this process's environment, each checked by the one rule every backend applies.
    pub(crate) fn secrets_for(&self, spec: &JobSpec) -> Result<SecretRegistry> {
        let mut registry = SecretRegistry::new();
        for name in &spec.secrets {
            let value = match &self.secret_values {
                Some(values) => values.get(name).cloned(),
                None => std::env::var(name).ok(),
            };
            check_secret_value(name, value.as_deref())?;
            registry.register(name.clone(), value.unwrap_or_default());
        }
        Ok(registry)
    }
}

impl fmt::Debug for SubmitOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubmitOptions")
            .field("retry_of", &self.retry_of)
            .field("after", &self.after)
            .field(
                "secret_values",
                &self.secret_values.as_ref().map(|m| {
                    m.keys()
                        .map(|k| format!("{k}=REDACTED"))
                        .collect::<Vec<_>>()
                }),
            )
            .finish()
    }
}

/// Which log of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum LogStream {
    /// `main.out`.
    #[default]
    Out,
    /// `main.err`.
    Err,
}

impl LogStream {
    /// The file name in the job's log folder.
    pub fn file_name(self) -> &'static str {
        match self {
            LogStream::Out => "main.out",
            LogStream::Err => "main.err",
        }
    }
}

/// Options of [`Backend::logs`](super::Backend::logs) and
/// [`Backend::follow_logs`](super::Backend::follow_logs) (which reads all but `tail`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogOptions {
    /// Which file.
    pub stream: LogStream,
    /// How many lines from the end.
    pub tail: usize,
    /// Which task of an array (required for an array, refused for a single job).
    pub task: Option<u32>,
    /// Which role of a multi-role job (its own log); `None` reads the job's log (the
    /// batch script's notes, e.g. which role failed first).
    pub role: Option<String>,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            stream: LogStream::Out,
            tail: 200,
            task: None,
            role: None,
        }
    }
}

impl LogOptions {
    /// The defaults, for `stream`.
    pub fn of(stream: LogStream) -> Self {
        LogOptions {
            stream,
            ..LogOptions::default()
        }
    }

    /// With role `name` of a multi-role job.
    pub fn role(mut self, name: impl Into<String>) -> Self {
        self.role = Some(name.into());
        self
    }
}

/// Options of [`Backend::watch`](super::Backend::watch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchOptions {
    /// Time between two polls (each poll is one round trip for every watched job).
    pub interval: Duration,
    /// Resubmit infra failures within this policy's budget; `None` never resubmits.
    pub retry: Option<RetryPolicy>,
    /// Longest back-off after transient errors.
    pub max_backoff: Duration,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            interval: Duration::from_secs(10),
            retry: None,
            max_backoff: Duration::from_secs(300),
        }
    }
}
