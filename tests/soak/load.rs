//! The load of the soak: submitters keeping a number of small jobs in flight, and
//! watches following every submitted record to its end.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use rand::Rng;
use slurm_core::{Backend, ErrorKind, JobId, SubmitOptions, WatchEvent, WatchOptions};
use slurm_run_testsupport::{small_spec, Harness};
use tokio::sync::{mpsc, Notify, Semaphore};
use tokio::task::JoinHandle;

/// Jobs in flight at once: a submitter waits for a free slot, and a slot frees when
/// the watch sees its job end (or its submit fail).
pub const CONCURRENCY: usize = 8;
/// Share of jobs whose command ends with `exit 1`.
const FAILING_SHARE: f64 = 0.2;

/// The SLURM job id a record holds.
pub fn slurm_id(backend_ref: &slurm_core::BackendRef) -> u64 {
    backend_ref.native_id.parse().expect("a SLURM job id")
}

/// What one submit gave.
pub struct Submitted {
    /// The job name asked for.
    pub name: String,
    /// Whether its command exits 1.
    pub expect_failure: bool,
    /// How long the submit took.
    pub took: Duration,
    /// The record and its SLURM job id, or the typed error.
    pub result: Result<(JobId, Option<u64>), (ErrorKind, String)>,
}

/// What the watches saw.
#[derive(Default)]
pub struct WatchLog {
    /// Terminal transitions reported per record.
    pub terminal_reports: HashMap<JobId, u32>,
    /// Transitions reported.
    pub transitions: usize,
    /// Errors a watch ended with (a lasting error; transient ones only back off).
    pub ended_with: Vec<String>,
    /// Watches started again on records a previous watch left unfinished.
    pub restarts: usize,
    /// Records still not terminal when the drain limit passed.
    pub abandoned: usize,
}

/// Follow `ids` with `Backend::watch` until each is terminal or `until` passes; a watch
/// that ends early (a lasting error) is counted and started again on what is left.
async fn follow(
    h: Arc<Harness>,
    mut ids: Vec<JobId>,
    log: Arc<Mutex<WatchLog>>,
    until: Arc<Mutex<Option<tokio::time::Instant>>>,
    slots: Slots,
) {
    let options = WatchOptions {
        interval: Duration::from_secs(1),
        retry: None,
        max_backoff: Duration::from_secs(8),
    };
    loop {
        let mut stream = h.backend.watch(&ids, options.clone());
        loop {
            let limit = *until.lock().expect("until lock");
            let next = match limit {
                Some(at) => match tokio::time::timeout_at(at, stream.next()).await {
                    Ok(next) => next,
                    Err(_) => break,
                },
                None => stream.next().await,
            };
            let Some(item) = next else { break };
            let mut log = log.lock().expect("watch lock");
            match item {
                Ok(WatchEvent::Transition { status, .. }) => {
                    log.transitions += 1;
                    if status.state().is_terminal() {
                        *log.terminal_reports.entry(status.id().clone()).or_default() += 1;
                        slots.lock().expect("slots lock").remove(status.id());
                    }
                }
                Ok(
                    WatchEvent::Retried { .. }
                    | WatchEvent::Unanswered { .. }
                    | WatchEvent::Waiting { .. },
                ) => {}
                Ok(WatchEvent::Dropped { id, reason }) => {
                    log.ended_with.push(format!("{id} dropped: {reason}"))
                }
                Err(error) => log.ended_with.push(format!("{:?}: {error}", error.kind())),
            }
        }
        let mut active = Vec::with_capacity(ids.len());
        for id in ids {
            let ended = h
                .backend
                .record(&id)
                .await
                .is_ok_and(|r| r.state().is_terminal());
            if !ended {
                active.push(id);
            }
        }
        ids = active;
        let mut ended_quietly = Vec::new();
        for id in &ids {
            // Ended without a reported transition (counted by the checks): free its slot.
            if h.backend
                .record(id)
                .await
                .is_ok_and(|r| r.state().is_terminal())
            {
                ended_quietly.push(id.clone());
            }
        }
        {
            let mut slots = slots.lock().expect("slots lock");
            for id in &ended_quietly {
                slots.remove(id);
            }
        }
        if ids.is_empty() {
            return;
        }
        let expired = until
            .lock()
            .expect("until lock")
            .is_some_and(|at| tokio::time::Instant::now() >= at);
        let mut log = log.lock().expect("watch lock");
        if expired {
            log.abandoned += ids.len();
            let mut slots = slots.lock().expect("slots lock");
            for id in &ids {
                slots.remove(id);
            }
            return;
        }
        log.restarts += 1;
    }
}

/// The in-flight slot each submitted job holds until the watch sees it end.
pub type Slots = Arc<Mutex<HashMap<JobId, tokio::sync::OwnedSemaphorePermit>>>;

/// The watches: records are batched as they come (up to 16, or what came within half a
/// second) and each batch is followed to the end by [`follow`].
pub struct Watches {
    tx: mpsc::UnboundedSender<JobId>,
    collector: JoinHandle<()>,
    log: Arc<Mutex<WatchLog>>,
    until: Arc<Mutex<Option<tokio::time::Instant>>>,
    slots: Slots,
    free: Arc<Semaphore>,
}

impl Watches {
    /// Start the collector that turns submitted records into watches.
    pub fn start(h: &Arc<Harness>) -> Watches {
        let log = Arc::new(Mutex::new(WatchLog::default()));
        let until: Arc<Mutex<Option<tokio::time::Instant>>> = Arc::new(Mutex::new(None));
        let (tx, mut rx) = mpsc::unbounded_channel::<JobId>();
        let slots: Slots = Arc::default();
        let collector = tokio::spawn({
            let h = Arc::clone(h);
            let log = Arc::clone(&log);
            let until = Arc::clone(&until);
            let slots = Arc::clone(&slots);
            async move {
                let mut watches = tokio::task::JoinSet::new();
                while let Some(first) = rx.recv().await {
                    let mut batch = vec![first];
                    let close = tokio::time::Instant::now() + Duration::from_millis(500);
                    while batch.len() < 16 {
                        match tokio::time::timeout_at(close, rx.recv()).await {
                            Ok(Some(id)) => batch.push(id),
                            _ => break,
                        }
                    }
                    watches.spawn(follow(
                        Arc::clone(&h),
                        batch,
                        Arc::clone(&log),
                        Arc::clone(&until),
                        Arc::clone(&slots),
                    ));
                }
                while watches.join_next().await.is_some() {}
            }
        });
        Watches {
            tx,
            collector,
            log,
            until,
            slots,
            free: Arc::new(Semaphore::new(CONCURRENCY)),
        }
    }

    /// No more records come: let the watches finish, for at most `limit`; what they saw.
    pub async fn drain(self, limit: Duration) -> WatchLog {
        drop(self.tx);
        *self.until.lock().expect("until lock") = Some(tokio::time::Instant::now() + limit);
        self.collector.await.expect("the watch collector panicked");
        std::mem::take(&mut *self.log.lock().expect("watch lock"))
    }
}

/// Submit up to `jobs` small jobs named `{prefix}{n}` (one in five failing, GPUs 0 or 1)
/// from [`CONCURRENCY`] submitters, each waiting for a free slot, until `seconds` have
/// passed; each accepted record goes to `watches`. `submit_began` is notified as each
/// submit starts. What every submit gave.
pub async fn submit_all(
    h: &Arc<Harness>,
    jobs: usize,
    seconds: u64,
    prefix: &str,
    watches: &Watches,
    submit_began: &Arc<Notify>,
) -> Vec<Submitted> {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let next = Arc::new(AtomicUsize::new(0));
    let outcomes = Arc::new(Mutex::new(Vec::<Submitted>::new()));
    let mut submitters = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY {
        let h = Arc::clone(h);
        let next = Arc::clone(&next);
        let outcomes = Arc::clone(&outcomes);
        let tx = watches.tx.clone();
        let prefix = prefix.to_string();
        let slots = Arc::clone(&watches.slots);
        let free = Arc::clone(&watches.free);
        let submit_began = Arc::clone(submit_began);
        submitters.spawn(async move {
            loop {
                let wait = tokio::time::Instant::from_std(deadline);
                let Ok(Ok(slot)) =
                    tokio::time::timeout_at(wait, Arc::clone(&free).acquire_owned()).await
                else {
                    break;
                };
                let n = next.fetch_add(1, Ordering::SeqCst);
                if n >= jobs {
                    break;
                }
                let (gpus, fail) = {
                    let mut rng = rand::rng();
                    (rng.random_range(0..2u32), rng.random_bool(FAILING_SHARE))
                };
                let name = format!("{prefix}{n}");
                let command = if fail {
                    "sleep $((RANDOM % 3)); exit 1"
                } else {
                    "sleep $((RANDOM % 3))"
                };
                let mut spec = small_spec(&name, command);
                spec.gpus_per_node = Some(gpus);
                let began = Instant::now();
                submit_began.notify_waiters();
                let result = h.backend.submit(&spec, SubmitOptions::default()).await;
                let took = began.elapsed();
                let result = match result {
                    Ok(record) => {
                        slots
                            .lock()
                            .expect("slots lock")
                            .insert(record.id().clone(), slot);
                        let _ = tx.send(record.id().clone());
                        Ok((record.id().clone(), record.backend_ref().map(slurm_id)))
                    }
                    Err(error) => Err((error.kind(), error.to_string())),
                };
                outcomes.lock().expect("outcomes lock").push(Submitted {
                    name,
                    expect_failure: fail,
                    took,
                    result,
                });
            }
        });
    }
    while let Some(joined) = submitters.join_next().await {
        joined.expect("a submitter panicked");
    }
    let outcomes = std::mem::take(&mut *outcomes.lock().expect("outcomes lock"));
    outcomes
}
