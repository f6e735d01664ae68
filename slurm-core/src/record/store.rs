//! The [`RecordStore`] seam (where records live), its [`SubmitLease`], the rule of an
//! update, and the rule of a retry's claim ([`RetryClaim`]).

use std::fmt;
use std::sync::Arc;

use chrono::Utc;

use crate::{Error, Result};

use crate::redact::SecretRegistry;

use super::{JobId, JobRecord, Mark, RecordFilter};

/// Where records live. Synchronous, object safe, shared by threads and by processes
/// (the file store locks; the databases have transactions). Its calls may wait (for a
/// disk, a server, another process's lock), so async code never calls them on a
/// runtime's thread: the backends reach a store through [`AsyncStore`](super::AsyncStore),
/// which runs each call on the runtime's blocking pool.
pub trait RecordStore: Send + Sync + fmt::Debug {
    /// Store a new record; refuses an id that exists ([`Error::Invalid`] on `id`).
    fn open(&self, record: &JobRecord) -> Result<()>;

    /// Open `retry`, the retry of the record its `retry_of` names, and claim that retry
    /// for it, in one atomic step: either the retried record names no retry yet, and
    /// then `retry` is opened and the retried record's `retried_as` names it (both
    /// written, or neither), or another record holds the claim, and then nothing is
    /// written and that record is the answer ([`RetryClaim::Taken`]). However many
    /// replicas race to retry one record, one record is opened. A `retry` the retried
    /// record already names is [`RetryClaim::Won`] again (a call repeated after a lost
    /// answer). A `retry` without `retry_of` is [`Error::Invalid`] on `retry_of`; a
    /// retried record that does not exist is [`Error::NotFound`]. The rule to apply is
    /// [`JobRecord::retry_claim`].
    fn open_retry(&self, retry: &JobRecord) -> Result<RetryClaim>;

    /// The record `id`, or [`Error::NotFound`].
    fn get(&self, id: &JobId) -> Result<JobRecord>;

    /// The records `ids`, in their order (duplicates included); the first that cannot
    /// be had is the error, as [`RecordStore::get`] says it. What a poll reads its
    /// records with: the default asks [`RecordStore::get`] for each, a database store
    /// answers all of them in one query.
    fn get_many(&self, ids: &[JobId]) -> Result<Vec<JobRecord>> {
        ids.iter().map(|id| self.get(id)).collect()
    }

    /// Change the state of `id` through the state machine (the legal changes of
    /// [`JobState`](crate::JobState)): an applied change appends to the history
    /// and sets `backend_ref` / `err_class` when given; a no-op only fills
    /// `backend_ref` / `err_class` that were unset; an ignored observation changes
    /// nothing; an illegal one is [`Error::InvalidTransition`]. Returns the record
    /// as stored.
    fn mark(&self, id: &JobId, mark: Mark) -> Result<JobRecord>;

    /// Apply every mark of `marks`, each as [`RecordStore::mark`] would: the answer of
    /// each in their order, so one that cannot be applied (an illegal change, a record
    /// not found) costs only itself. What a poll records its marks with: the default
    /// marks one at a time; a database store applies them all in one transaction (one
    /// commit, one wait for the disk, however many jobs changed). The outer error is a
    /// failure of the store itself, and then no mark of the call was applied by a
    /// store that applies them together.
    fn mark_many(&self, marks: Vec<(JobId, Mark)>) -> Result<Vec<Result<JobRecord>>> {
        Ok(marks
            .into_iter()
            .map(|(id, mark)| self.mark(&id, mark))
            .collect())
    }

    /// Change fields other than the state, id and history (e.g. `results_dir`,
    /// labels) under the record's lock. Returns the record as stored.
    fn update(
        &self,
        id: &JobId,
        change: &mut dyn FnMut(&mut JobRecord) -> Result<()>,
    ) -> Result<JobRecord>;

    /// The records passing `filter`, oldest first.
    fn list(&self, filter: &RecordFilter) -> Result<Vec<JobRecord>>;

    /// The records passing `filter` that can be read, oldest first, and apart the
    /// errors of those that cannot (a corrupt file, a schema newer than this
    /// slurm-run): the listing the backends' own steps use, so that one unreadable
    /// record costs only itself. The default lists with [`RecordStore::list`] (a store
    /// whose records are always readable).
    fn list_readable(&self, filter: &RecordFilter) -> Result<Listing> {
        Ok(Listing {
            records: self.list(filter)?,
            unreadable: Vec::new(),
        })
    }

    /// Take the submit lease of `id` if no one else holds it, without waiting: `None`
    /// while another process (or another lease of this one) holds it. A lease marks a
    /// submit of `id` as in progress for as long as it lives (taken before the record is
    /// opened, dropped when the submit returns or its process dies), so that
    /// [`RecordStore::submit_in_progress`] tells others not to settle a record whose
    /// submitter is still at work. The default cannot tell anyone: it returns a lease
    /// that marks nothing.
    fn try_submit_lease(&self, id: &JobId) -> Result<Option<SubmitLease>> {
        let _ = id;
        Ok(Some(SubmitLease::none()))
    }

    /// Take the submit lease of `id` (see [`RecordStore::try_submit_lease`]), waiting
    /// while another holds it: asked again every [`LEASE_RETRY`], this thread asleep
    /// meanwhile. For threads that may wait; async code waits with
    /// [`AsyncStore::submit_lease`](super::AsyncStore::submit_lease), which sleeps
    /// without holding a runtime's thread.
    fn submit_lease(&self, id: &JobId) -> Result<SubmitLease> {
        loop {
            if let Some(lease) = self.try_submit_lease(id)? {
                return Ok(lease);
            }
            std::thread::sleep(LEASE_RETRY);
        }
    }

    /// Whether a submit of `id` is in progress (its lease is held, by this process or
    /// another sharing the store); `None` when this store cannot tell (callers then
    /// wait longer before they settle a record).
    fn submit_in_progress(&self, id: &JobId) -> Result<Option<bool>> {
        let _ = id;
        Ok(None)
    }

    /// The store's revision: a number that changes whenever a record is opened, marked
    /// or updated, by this process or another sharing the store; `None` when this store
    /// cannot tell it cheaply (the default). A poll repeated over the same records reads
    /// it to know, without reading them, that none changed. Read it before the records:
    /// a change between the two then costs a read again, never a stale answer.
    fn revision(&self) -> Result<Option<u64>> {
        Ok(None)
    }
}

/// How often a submit lease another holds is asked for again.
pub const LEASE_RETRY: std::time::Duration = std::time::Duration::from_millis(50);

/// How [`RecordStore::open_retry`] went.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryClaim {
    /// The retry's record is opened and the retried record names it: submit it.
    Won,
    /// Another record already retries the retried one: nothing was opened; that record
    /// is the retry to follow, and nothing is to be submitted.
    Taken(JobId),
}

/// What [`RecordStore::list_readable`] read.
#[derive(Debug, Default)]
pub struct Listing {
    /// The records read, oldest first.
    pub records: Vec<JobRecord>,
    /// Why each record that could not be read could not (one error per record).
    pub unreadable: Vec<Error>,
}

impl Listing {
    /// Every record, or the error of the first that could not be read (what
    /// [`RecordStore::list`] answers, for a store that lists through `list_readable`).
    pub fn into_all(mut self) -> Result<Vec<JobRecord>> {
        match self.unreadable.is_empty() {
            true => Ok(self.records),
            false => Err(self.unreadable.remove(0)),
        }
    }

    /// The records read; each unreadable one is reported (a warning naming its file)
    /// and left out.
    pub(crate) fn reported(self, purpose: &str) -> Vec<JobRecord> {
        for error in &self.unreadable {
            tracing::warn!(%error, purpose, "a record could not be read; left out");
        }
        self.records
    }
}

/// The readable records of `store` passing `filter`, for `purpose` (a step of a
/// backend's own): each unreadable record is reported and left out.
pub(crate) fn list_readable(
    store: &dyn RecordStore,
    filter: &RecordFilter,
    purpose: &str,
) -> Result<Vec<JobRecord>> {
    Ok(store.list_readable(filter)?.reported(purpose))
}

/// A held submit lease (see [`RecordStore::submit_lease`]); released on drop.
pub struct SubmitLease {
    _held: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl SubmitLease {
    /// A lease that marks nothing (stores that cannot tell).
    pub fn none() -> Self {
        SubmitLease { _held: None }
    }

    /// A lease that holds `guard` until it is dropped.
    pub fn holding(guard: impl std::any::Any + Send + Sync) -> Self {
        SubmitLease {
            _held: Some(Box::new(guard)),
        }
    }
}

impl fmt::Debug for SubmitLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubmitLease")
            .field("held", &self._held.is_some())
            .finish()
    }
}

#[allow(dead_code)]
fn _record_store_is_object_safe(_: &dyn RecordStore) {}

/// A store behind a pointer is that store: `Box<dyn RecordStore>` and
/// `Arc<dyn RecordStore>` (a store chosen at run time) go wherever a store goes.
macro_rules! forward_record_store {
    ($pointer:ident) => {
        impl<S: RecordStore + ?Sized> RecordStore for $pointer<S> {
            fn open(&self, record: &JobRecord) -> Result<()> {
                (**self).open(record)
            }
            fn open_retry(&self, retry: &JobRecord) -> Result<RetryClaim> {
                (**self).open_retry(retry)
            }
            fn get(&self, id: &JobId) -> Result<JobRecord> {
                (**self).get(id)
            }
            fn get_many(&self, ids: &[JobId]) -> Result<Vec<JobRecord>> {
                (**self).get_many(ids)
            }
            fn mark(&self, id: &JobId, mark: Mark) -> Result<JobRecord> {
                (**self).mark(id, mark)
            }
            fn mark_many(&self, marks: Vec<(JobId, Mark)>) -> Result<Vec<Result<JobRecord>>> {
                (**self).mark_many(marks)
            }
            fn update(
                &self,
                id: &JobId,
                change: &mut dyn FnMut(&mut JobRecord) -> Result<()>,
            ) -> Result<JobRecord> {
                (**self).update(id, change)
            }
            fn list(&self, filter: &RecordFilter) -> Result<Vec<JobRecord>> {
                (**self).list(filter)
            }
            fn list_readable(&self, filter: &RecordFilter) -> Result<Listing> {
                (**self).list_readable(filter)
            }
            fn try_submit_lease(&self, id: &JobId) -> Result<Option<SubmitLease>> {
                (**self).try_submit_lease(id)
            }
            fn submit_lease(&self, id: &JobId) -> Result<SubmitLease> {
                (**self).submit_lease(id)
            }
            fn submit_in_progress(&self, id: &JobId) -> Result<Option<bool>> {
                (**self).submit_in_progress(id)
            }
            fn revision(&self) -> Result<Option<u64>> {
                (**self).revision()
            }
        }
    };
}
forward_record_store!(Box);
forward_record_store!(Arc);

/// The rules of [`RecordStore::open`] and [`RecordStore::update`], for every store (a
/// store written outside this crate calls them; the state's rule is
/// [`JobRecord::apply_mark`]).
impl JobRecord {
    /// Redact every message of the history with `registry` (what a store with a
    /// redactor does to a record it opens).
    pub fn redact_history(&mut self, registry: &SecretRegistry) {
        for transition in &mut self.history {
            if let Some(message) = &transition.message {
                transition.message = Some(registry.redact(message));
            }
        }
    }

    /// The rule of [`RecordStore::open_retry`], applied by a store to the record `retry`
    /// retries (`self`, as stored, read under its lock or in the transaction that opens
    /// `retry`): `Ok(Ok(record))` is this record with the claim for `retry` (its
    /// `retried_as` set, `updated_at` now), to be written with `retry`; `Ok(Err(winner))`
    /// names the record that holds the claim already, and nothing is to be written;
    /// `Ok(Ok(..))` with `retried_as` unchanged when `retry` holds it already (a
    /// repeated call). A `retry` that retries another record is [`Error::Invalid`].
    pub fn retry_claim(&self, retry: &JobRecord) -> Result<std::result::Result<JobRecord, JobId>> {
        if retry.retry_of.as_ref() != Some(&self.id) {
            return Err(Error::invalid(
                "retry_of",
                format!(
                    "record {} does not retry {} (retry_of is {}); open it with open",
                    retry.id,
                    self.id,
                    retry
                        .retry_of
                        .as_ref()
                        .map_or_else(|| "unset".to_string(), ToString::to_string)
                ),
            ));
        }
        match &self.retried_as {
            Some(winner) if *winner != retry.id => Ok(Err(winner.clone())),
            _ => self
                .apply_update(&mut |record| {
                    record.retried_as = Some(retry.id.clone());
                    Ok(())
                })
                .map(Ok),
        }
    }

    /// The record a retry's record retries (its `retry_of`), for
    /// [`RecordStore::open_retry`]: a record without one is [`Error::Invalid`].
    pub fn retried_record(&self) -> Result<&JobId> {
        self.retry_of.as_ref().ok_or_else(|| {
            Error::invalid(
                "retry_of",
                format!(
                    "record {} retries no record (retry_of is unset); open it with open",
                    self.id
                ),
            )
        })
    }

    /// Read a record as a store keeps it (its JSON, as [`serde_json`] writes a
    /// `JobRecord`) from `origin` (a file, a database row: named in the error): a record
    /// that does not parse, or that a newer slurm-run wrote (a schema above this
    /// one's), is [`Error::CorruptRecord`]; records of older schemas read as they are.
    pub fn from_stored_json(bytes: &[u8], origin: &str) -> Result<JobRecord> {
        let corrupt = |message: String| Error::CorruptRecord {
            path: origin.to_string(),
            message,
        };
        // Text known to be UTF-8 is read without checking each of its strings again.
        let record: JobRecord = match std::str::from_utf8(bytes) {
            Ok(text) => serde_json::from_str(text),
            Err(_) => serde_json::from_slice(bytes),
        }
        .map_err(|e| corrupt(e.to_string()))?;
        if record.schema_version > super::SCHEMA_VERSION {
            return Err(corrupt(format!(
                "schema version {} is newer than this slurm-run ({}); upgrade slurm-run",
                record.schema_version,
                super::SCHEMA_VERSION
            )));
        }
        Ok(record)
    }

    /// Run `change` on a copy of this record, refusing changes to the id, state,
    /// history, tasks or schema ([`Error::Invalid`]); the copy's `updated_at` is now.
    pub fn apply_update(
        &self,
        change: &mut dyn FnMut(&mut JobRecord) -> Result<()>,
    ) -> Result<JobRecord> {
        let record = self;
        let mut next = record.clone();
        change(&mut next)?;
        if next.id != record.id {
            return Err(Error::invalid(
                "id",
                "a record's id cannot change; open a new record",
            ));
        }
        if next.state != record.state
            || next.history != record.history
            || next.tasks != record.tasks
        {
            return Err(Error::invalid(
                "state",
                "update cannot change the state or history; use mark",
            ));
        }
        if next.schema_version != record.schema_version {
            return Err(Error::invalid(
                "schema_version",
                "update cannot change the schema version",
            ));
        }
        next.updated_at = Utc::now();
        Ok(next)
    }
}
