//! The records a database store has read, kept with the version of the row each came
//! from: every write of a row raises its version, so a row whose version is the one kept
//! holds the record kept, and reading it again costs a comparison instead of a parse (a
//! watch reads every watched record each poll).

use std::collections::HashMap;
use std::sync::Mutex;

use slurm_core::{JobRecord, Result};

/// The most records kept (a watch of more reads the rest each time).
const CAPACITY: usize = 50_000;

/// Records by id, each with its row's version.
#[derive(Debug, Default)]
pub(crate) struct ReadCache {
    kept: Mutex<HashMap<String, (i64, JobRecord)>>,
}

impl ReadCache {
    fn kept(&self) -> std::sync::MutexGuard<'_, HashMap<String, (i64, JobRecord)>> {
        // Entries are replaced whole: a panic elsewhere leaves none half-written.
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The version kept of each of `ids` (one lock for all of them).
    pub(crate) fn versions<'a>(&self, ids: impl Iterator<Item = &'a str>) -> Vec<Option<i64>> {
        let kept = self.kept();
        ids.map(|id| kept.get(id).map(|(version, _)| *version))
            .collect()
    }

    /// The records kept of `rows` (each an id and the version read) at the version
    /// read, each with its place among them, in their order (one lock for all of them).
    pub(crate) fn kept_at<'a>(
        &self,
        rows: impl Iterator<Item = (&'a str, i64)>,
    ) -> Vec<(usize, JobRecord)> {
        let kept = self.kept();
        if kept.is_empty() {
            return Vec::new();
        }
        rows.enumerate()
            .filter_map(|(place, (id, version))| match kept.get(id) {
                Some((at, record)) if *at == version => Some((place, record.clone())),
                _ => None,
            })
            .collect()
    }

    /// The record `id` kept at `version`, if that is the version kept.
    pub(crate) fn get(&self, id: &str, version: i64) -> Option<JobRecord> {
        match self.kept().get(id) {
            Some((kept, record)) if *kept == version => Some(record.clone()),
            _ => None,
        }
    }

    /// Keep `record`, read from row `id` at `version`.
    pub(crate) fn keep(&self, id: &str, version: i64, record: &JobRecord) {
        let mut kept = self.kept();
        if kept.len() >= CAPACITY && !kept.contains_key(id) {
            kept.clear();
        }
        kept.insert(id.to_string(), (version, record.clone()));
    }

    /// The records of a batch of changes (each answered with the version it was written
    /// at, `None` when it wrote nothing), committed: each written one kept at its
    /// version, so the next poll compares versions instead of parsing what this process
    /// wrote. The answers without their versions, in their order.
    pub(crate) fn keep_written(
        &self,
        answers: Vec<Result<(JobRecord, Option<i64>)>>,
    ) -> Vec<Result<JobRecord>> {
        answers
            .into_iter()
            .map(|answer| {
                answer.map(|(record, written)| {
                    if let Some(version) = written {
                        self.keep(record.id().as_str(), version, &record);
                    }
                    record
                })
            })
            .collect()
    }
}
