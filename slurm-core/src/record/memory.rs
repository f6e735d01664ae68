//! `MemoryRecordStore`: records in a map, for tests and for callers that need no durability.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::record::{JobId, JobRecord, Mark, RecordFilter, RecordStore, RetryClaim, SubmitLease};
use crate::redact::SecretRegistry;
use crate::{Error, Result};

/// Records held in memory; same rules as the file store (state machine,
/// create-exclusive open, redacted messages), nothing survives the process.
#[derive(Debug, Default)]
pub struct MemoryRecordStore {
    records: Mutex<BTreeMap<JobId, JobRecord>>,
    redactor: Option<SecretRegistry>,
    /// Records whose submit is in progress (their leases are alive).
    leases: Arc<Mutex<BTreeSet<JobId>>>,
    /// Counts the writes (see [`RecordStore::revision`]); bumped under the map's lock.
    revision: AtomicU64,
}

/// A held lease of the memory store: removes its id when dropped.
struct MemoryLease {
    leases: Arc<Mutex<BTreeSet<JobId>>>,
    id: JobId,
}

impl Drop for MemoryLease {
    fn drop(&mut self) {
        self.leases
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

impl MemoryRecordStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Redact transition messages with `registry`.
    pub fn with_redactor(mut self, registry: SecretRegistry) -> Self {
        self.redactor = Some(registry);
        self
    }

    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<JobId, JobRecord>> {
        // A panic while holding the lock cannot leave a half-written record: values are replaced whole.
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn not_found(id: &JobId) -> Error {
    Error::NotFound(format!("job record {id} in memory"))
}

impl RecordStore for MemoryRecordStore {
    fn open(&self, record: &JobRecord) -> Result<()> {
        let mut map = self.map();
        if map.contains_key(&record.id) {
            return Err(Error::invalid(
                "id",
                format!("record {} already exists; mint a new id", record.id),
            ));
        }
        let mut record = record.clone();
        if let Some(r) = &self.redactor {
            record.redact_history(r);
        }
        map.insert(record.id.clone(), record);
        self.revision.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Both records are written under the map's lock, so no other call sees one
    /// without the other.
    fn open_retry(&self, retry: &JobRecord) -> Result<RetryClaim> {
        let previous = retry.retried_record()?;
        let mut map = self.map();
        let stored = map.get(previous).ok_or_else(|| not_found(previous))?;
        let claimed = match stored.retry_claim(retry)? {
            Ok(claimed) => claimed,
            Err(winner) => return Ok(RetryClaim::Taken(winner)),
        };
        if map.contains_key(&retry.id) {
            return match stored.retried_as.as_ref() == Some(&retry.id) {
                true => Ok(RetryClaim::Won),
                false => Err(Error::invalid(
                    "id",
                    format!("record {} already exists; mint a new id", retry.id),
                )),
            };
        }
        let mut record = retry.clone();
        if let Some(r) = &self.redactor {
            record.redact_history(r);
        }
        map.insert(record.id.clone(), record);
        map.insert(previous.clone(), claimed);
        self.revision.fetch_add(1, Ordering::SeqCst);
        Ok(RetryClaim::Won)
    }

    fn get(&self, id: &JobId) -> Result<JobRecord> {
        self.map().get(id).cloned().ok_or_else(|| not_found(id))
    }

    fn mark(&self, id: &JobId, mark: Mark) -> Result<JobRecord> {
        let mut map = self.map();
        let current = map.get(id).ok_or_else(|| not_found(id))?;
        let mut next = current.clone();
        next.apply_mark(mark, self.redactor.as_ref())?;
        map.insert(id.clone(), next.clone());
        self.revision.fetch_add(1, Ordering::SeqCst);
        Ok(next)
    }

    fn update(
        &self,
        id: &JobId,
        change: &mut dyn FnMut(&mut JobRecord) -> Result<()>,
    ) -> Result<JobRecord> {
        let mut map = self.map();
        let current = map.get(id).ok_or_else(|| not_found(id))?;
        let next = current.apply_update(change)?;
        map.insert(id.clone(), next.clone());
        self.revision.fetch_add(1, Ordering::SeqCst);
        Ok(next)
    }

    fn list(&self, filter: &RecordFilter) -> Result<Vec<JobRecord>> {
        let mut out: Vec<JobRecord> = self
            .map()
            .values()
            .filter(|r| filter.matches(r))
            .cloned()
            .collect();
        out.sort_by(|a, b| (a.submitted_at, &a.id).cmp(&(b.submitted_at, &b.id)));
        Ok(out)
    }

    fn try_submit_lease(&self, id: &JobId) -> Result<Option<SubmitLease>> {
        let taken = self
            .leases
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone());
        Ok(taken.then(|| {
            SubmitLease::holding(MemoryLease {
                leases: Arc::clone(&self.leases),
                id: id.clone(),
            })
        }))
    }

    fn submit_in_progress(&self, id: &JobId) -> Result<Option<bool>> {
        Ok(Some(
            self.leases
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(id),
        ))
    }

    fn revision(&self) -> Result<Option<u64>> {
        // Read under the map's lock: a write is either wholly before it or after it.
        let _map = self.map();
        Ok(Some(self.revision.load(Ordering::SeqCst)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::record_suite::{suite_redactor, Planted, RecordStoreFixture};

    /// A store in memory for the RecordStore conformance suite: no other process reaches
    /// it (its workers are threads), and its records are never unreadable.
    struct InMemory(Arc<MemoryRecordStore>);

    impl RecordStoreFixture for InMemory {
        fn store(&self) -> Arc<dyn RecordStore> {
            self.0.clone()
        }
        fn shared(&self) -> Option<String> {
            None
        }
        fn open_shared(_: &str) -> Result<Box<dyn RecordStore>> {
            unreachable!("no other process reaches a store in memory")
        }
        fn plant(&self, _id: &JobId, planted: Planted<'_>) -> bool {
            match JobRecord::from_stored_json(planted.bytes(), "a planted record") {
                Ok(record) => self.0.open(&record).is_ok(),
                Err(_) => false,
            }
        }
    }

    crate::record_store_conformance!(
        conformance,
        InMemory(Arc::new(
            MemoryRecordStore::new().with_redactor(suite_redactor())
        ))
    );
}
