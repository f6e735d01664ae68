//! [`RuntimeGuardStore`]: a store that notes every call made on an async runtime's
//! thread (one no call was handed off to), for tests that no operation blocks a runtime.

use std::sync::{Arc, Mutex};

use crate::record::{
    on_a_runtime_thread, JobId, JobRecord, Listing, Mark, RecordFilter, RecordStore, RetryClaim,
    SubmitLease,
};
use crate::Result;

/// A store over another that counts its calls and names each made on a runtime's
/// thread ([`on_a_runtime_thread`]); clones share the counts.
#[derive(Debug, Clone)]
pub struct RuntimeGuardStore {
    inner: Arc<dyn RecordStore>,
    calls: Arc<Mutex<(usize, Vec<&'static str>)>>,
}

impl RuntimeGuardStore {
    /// A guard over `inner`.
    pub fn new(inner: Arc<dyn RecordStore>) -> Self {
        RuntimeGuardStore {
            inner,
            calls: Arc::default(),
        }
    }

    /// How many calls the store had.
    pub fn calls(&self) -> usize {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).0
    }

    /// The calls made on a runtime's thread, by method name, in order.
    pub fn on_runtime_threads(&self) -> Vec<&'static str> {
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .clone()
    }

    fn note(&self, method: &'static str) {
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        calls.0 += 1;
        if on_a_runtime_thread() {
            calls.1.push(method);
        }
    }
}

impl RecordStore for RuntimeGuardStore {
    fn open(&self, record: &JobRecord) -> Result<()> {
        self.note("open");
        self.inner.open(record)
    }
    fn open_retry(&self, retry: &JobRecord) -> Result<RetryClaim> {
        self.note("open_retry");
        self.inner.open_retry(retry)
    }
    fn get(&self, id: &JobId) -> Result<JobRecord> {
        self.note("get");
        self.inner.get(id)
    }
    fn get_many(&self, ids: &[JobId]) -> Result<Vec<JobRecord>> {
        self.note("get_many");
        self.inner.get_many(ids)
    }
    fn mark(&self, id: &JobId, mark: Mark) -> Result<JobRecord> {
        self.note("mark");
        self.inner.mark(id, mark)
    }
    fn mark_many(&self, marks: Vec<(JobId, Mark)>) -> Result<Vec<Result<JobRecord>>> {
        self.note("mark_many");
        self.inner.mark_many(marks)
    }
    fn update(
        &self,
        id: &JobId,
        change: &mut dyn FnMut(&mut JobRecord) -> Result<()>,
    ) -> Result<JobRecord> {
        self.note("update");
        self.inner.update(id, change)
    }
    fn list(&self, filter: &RecordFilter) -> Result<Vec<JobRecord>> {
        self.note("list");
        self.inner.list(filter)
    }
    fn list_readable(&self, filter: &RecordFilter) -> Result<Listing> {
        self.note("list_readable");
        self.inner.list_readable(filter)
    }
    fn try_submit_lease(&self, id: &JobId) -> Result<Option<SubmitLease>> {
        self.note("try_submit_lease");
        self.inner.try_submit_lease(id)
    }
    fn submit_lease(&self, id: &JobId) -> Result<SubmitLease> {
        self.note("submit_lease");
        self.inner.submit_lease(id)
    }
    fn submit_in_progress(&self, id: &JobId) -> Result<Option<bool>> {
        self.note("submit_in_progress");
        self.inner.submit_in_progress(id)
    }
    fn revision(&self) -> Result<Option<u64>> {
        self.note("revision");
        self.inner.revision()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{AsyncStore, MemoryRecordStore};

    #[tokio::test(flavor = "current_thread")]
    async fn a_call_on_the_runtimes_thread_is_named_and_one_handed_off_is_not() {
        let guard = RuntimeGuardStore::new(Arc::new(MemoryRecordStore::new()));
        let id = JobId::mint("guarded");
        let _ = guard.get(&id);
        assert_eq!(guard.on_runtime_threads(), ["get"]);
        let records = AsyncStore::new(Arc::new(guard.clone()));
        let _ = records.get(&id).await;
        let _ = records.revision().await;
        assert_eq!(guard.calls(), 3);
        assert_eq!(guard.on_runtime_threads(), ["get"], "handed off: not noted");
        let plain = guard.clone();
        std::thread::spawn(move || plain.revision().unwrap())
            .join()
            .unwrap();
        assert_eq!(
            guard.on_runtime_threads(),
            ["get"],
            "a plain thread: not noted"
        );
    }
}
