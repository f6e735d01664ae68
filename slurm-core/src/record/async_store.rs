//! [`AsyncStore`]: a [`RecordStore`] as async code calls it, each call run on the
//! runtime's blocking pool so that no runtime thread waits for a disk, a database or
//! another process's lock.
//!
//! A store is synchronous: its calls wait for an fsync, a SQLite lock, a PostgreSQL
//! round trip or a row another replica holds. Called from a task, such a wait would
//! stall every other task of that runtime thread (all of them, on a current-thread
//! runtime): an orchestrator's watches, its HTTP server, its timers. So the backends
//! hold their store as an `AsyncStore` and `.await` each call; the call itself runs on
//! [`tokio::task::spawn_blocking`]'s pool, and waiting for a submit lease another
//! process holds is an async sleep between tries that never wait. Called outside a
//! runtime (a plain thread, a test), a call runs on the caller's thread.

use std::cell::Cell;
use std::sync::Arc;

use super::{
    JobId, JobRecord, Listing, Mark, RecordFilter, RecordStore, RetryClaim, SubmitLease,
    LEASE_RETRY,
};
use crate::{Error, Result};

thread_local! {
    /// Set on a thread while it runs a call handed off the runtime ([`AsyncStore::run`],
    /// the local backend's queue steps).
    static HANDED_OFF: Cell<bool> = const { Cell::new(false) };
}

/// Run `call` as a call handed off the runtime (on the blocking pool): what
/// [`on_a_runtime_thread`] tells apart.
pub(crate) fn handed_off<T>(call: impl FnOnce() -> T) -> T {
    let before = HANDED_OFF.with(|flag| flag.replace(true));
    let answer = call();
    HANDED_OFF.with(|flag| flag.set(before));
    answer
}

/// Whether this thread is one of an async runtime's that no call was handed off to:
/// a store call here would hold the runtime's thread while it waits. A plain thread
/// (no runtime) and a call on the blocking pool through [`AsyncStore`] are not.
pub fn on_a_runtime_thread() -> bool {
    tokio::runtime::Handle::try_current().is_ok() && !HANDED_OFF.with(Cell::get)
}

/// A record store whose calls are futures that run the store's work on the runtime's
/// blocking pool (see the module's documentation). Cheap to clone: clones share the
/// store.
#[derive(Clone)]
pub struct AsyncStore {
    store: Arc<dyn RecordStore>,
}

impl std::fmt::Debug for AsyncStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("AsyncStore").field(&self.store).finish()
    }
}

impl AsyncStore {
    /// Calls of `store`, each off the runtime's threads.
    pub fn new(store: Arc<dyn RecordStore>) -> Self {
        AsyncStore { store }
    }

    /// The store itself, for code on a thread that may wait (never a runtime's).
    pub fn blocking(&self) -> &dyn RecordStore {
        self.store.as_ref()
    }

    /// Run `call` with the store on the runtime's blocking pool (on this thread when
    /// there is no runtime) and answer what it answers: the way to run several calls,
    /// or a synchronous step over the store, as one hop.
    pub async fn run<T: Send + 'static>(
        &self,
        call: impl FnOnce(&dyn RecordStore) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let store = Arc::clone(&self.store);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return call(store.as_ref());
        };
        match runtime
            .spawn_blocking(move || handed_off(|| call(store.as_ref())))
            .await
        {
            Ok(answer) => answer,
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            Err(error) => Err(Error::io(
                "a call of the record store",
                std::io::Error::other(format!("the runtime shut down before it ended: {error}")),
            )),
        }
    }

    /// [`RecordStore::open`].
    pub async fn open(&self, record: JobRecord) -> Result<()> {
        self.run(move |store| store.open(&record)).await
    }

    /// [`RecordStore::open_retry`].
    pub async fn open_retry(&self, retry: JobRecord) -> Result<RetryClaim> {
        self.run(move |store| store.open_retry(&retry)).await
    }

    /// [`RecordStore::get`].
    pub async fn get(&self, id: &JobId) -> Result<JobRecord> {
        let id = id.clone();
        self.run(move |store| store.get(&id)).await
    }

    /// [`RecordStore::get_many`].
    pub async fn get_many(&self, ids: &[JobId]) -> Result<Vec<JobRecord>> {
        let ids = ids.to_vec();
        self.run(move |store| store.get_many(&ids)).await
    }

    /// [`RecordStore::mark`].
    pub async fn mark(&self, id: &JobId, mark: Mark) -> Result<JobRecord> {
        let id = id.clone();
        self.run(move |store| store.mark(&id, mark)).await
    }

    /// [`RecordStore::mark_many`].
    pub async fn mark_many(&self, marks: Vec<(JobId, Mark)>) -> Result<Vec<Result<JobRecord>>> {
        self.run(move |store| store.mark_many(marks)).await
    }

    /// [`RecordStore::update`]: `change` runs on the blocking pool, under the record's
    /// lock.
    pub async fn update(
        &self,
        id: &JobId,
        mut change: impl FnMut(&mut JobRecord) -> Result<()> + Send + 'static,
    ) -> Result<JobRecord> {
        let id = id.clone();
        self.run(move |store| store.update(&id, &mut change)).await
    }

    /// [`RecordStore::list`].
    pub async fn list(&self, filter: &RecordFilter) -> Result<Vec<JobRecord>> {
        let filter = filter.clone();
        self.run(move |store| store.list(&filter)).await
    }

    /// [`RecordStore::list_readable`].
    pub async fn list_readable(&self, filter: &RecordFilter) -> Result<Listing> {
        let filter = filter.clone();
        self.run(move |store| store.list_readable(&filter)).await
    }

    /// The readable records passing `filter`, each unreadable one reported (a warning
    /// naming it, for `purpose`) and left out: the listing a backend's own steps use.
    pub(crate) async fn list_reported(
        &self,
        filter: &RecordFilter,
        purpose: &'static str,
    ) -> Result<Vec<JobRecord>> {
        Ok(self.list_readable(filter).await?.reported(purpose))
    }

    /// [`RecordStore::submit_lease`], waiting as a task waits: while another holds the
    /// lease, this future sleeps [`LEASE_RETRY`] between tries
    /// ([`RecordStore::try_submit_lease`], which never waits), and the runtime's thread
    /// runs other tasks meanwhile.
    pub async fn submit_lease(&self, id: &JobId) -> Result<SubmitLease> {
        loop {
            let asked = id.clone();
            if let Some(lease) = self
                .run(move |store| store.try_submit_lease(&asked))
                .await?
            {
                return Ok(lease);
            }
            match tokio::runtime::Handle::try_current() {
                Ok(_) => tokio::time::sleep(LEASE_RETRY).await,
                Err(_) => std::thread::sleep(LEASE_RETRY),
            }
        }
    }

    /// [`RecordStore::submit_in_progress`].
    pub async fn submit_in_progress(&self, id: &JobId) -> Result<Option<bool>> {
        let id = id.clone();
        self.run(move |store| store.submit_in_progress(&id)).await
    }

    /// [`RecordStore::revision`].
    pub async fn revision(&self) -> Result<Option<u64>> {
        self.run(|store| store.revision()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::MemoryRecordStore;

    #[test]
    fn outside_a_runtime_a_call_runs_on_the_callers_thread() {
        let store = AsyncStore::new(Arc::new(MemoryRecordStore::new()));
        let caller = std::thread::current().id();
        let ran_on =
            futures::executor::block_on(store.run(|_| Ok::<_, Error>(std::thread::current().id())))
                .unwrap();
        assert_eq!(ran_on, caller);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn on_a_runtime_a_call_runs_off_the_runtimes_thread() {
        let store = AsyncStore::new(Arc::new(MemoryRecordStore::new()));
        let runtime_thread = std::thread::current().id();
        let ran_on = store
            .run(|_| Ok::<_, Error>(std::thread::current().id()))
            .await
            .unwrap();
        assert_ne!(ran_on, runtime_thread, "the blocking pool ran it");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_panic_in_a_call_is_the_callers_panic() {
        let store = AsyncStore::new(Arc::new(MemoryRecordStore::new()));
        let call = tokio::spawn(async move {
            store
                .run(|_| -> Result<()> { panic!("the store's own panic") })
                .await
        });
        let error = call.await.unwrap_err();
        assert!(error.is_panic());
    }
}
