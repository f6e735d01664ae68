//! The gate in front of the test bed. Tests in one binary run on parallel threads and
//! share one cluster: most of them only need some of it and take it [`shared`]; the
//! scenarios that take the whole of it (a job holding every GPU, a node set down) take
//! it [`exclusive`], so no other test-bed test runs meanwhile, on a queue emptied of the
//! jobs earlier tests left (a failed test's job holding GPUs would otherwise keep a
//! whole-cluster job pending and fail the scenario too). Every test-bed test holds
//! one guard for its whole body (never two: a second `shared` behind a waiting
//! `exclusive` would wait forever).
//!
//! The gate is a `tokio::sync::RwLock` in a `static`: fair (once an exclusive taker
//! waits, later shared takers queue behind it), usable from any runtime, not poisoned
//! by a panicking test. Synchronous tests take it with the `_blocking` forms.

use std::time::{Duration, Instant};

use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::testbed::{testbed_env, Testbed};

/// How long the queue may take to empty once its jobs are cancelled (a job's epilog and
/// a container's teardown included).
const QUEUE_EMPTIES_WITHIN: Duration = Duration::from_secs(120);

static GATE: RwLock<()> = RwLock::const_new(());

/// The cluster held shared: other shared holders run alongside.
pub type Shared = RwLockReadGuard<'static, ()>;

/// The cluster held alone: no other test-bed test of this process runs meanwhile.
pub type Exclusive = RwLockWriteGuard<'static, ()>;

/// Take the cluster shared (for a test that leaves room for others).
pub async fn shared() -> Shared {
    GATE.read().await
}

/// Take the whole cluster, once every shared holder has let go, with the test user's
/// queue empty: whatever job is still there belongs to a test that has ended (no other
/// test-bed test runs now), so it is cancelled and waited for.
pub async fn exclusive() -> Exclusive {
    let guard = GATE.write().await;
    tokio::task::spawn_blocking(|| empty_the_queue(&testbed_env()))
        .await
        .expect("emptying the queue");
    guard
}

/// [`shared`] for a synchronous test (panics inside an async runtime).
pub fn shared_blocking() -> Shared {
    GATE.blocking_read()
}

/// [`exclusive`] for a synchronous test (panics inside an async runtime).
pub fn exclusive_blocking() -> Exclusive {
    let guard = GATE.blocking_write();
    empty_the_queue(&testbed_env());
    guard
}

/// The test user's jobs still queued or running (their ids, one per array), as the
/// administrator's `squeue` lists them.
fn queued_jobs(tb: &Testbed) -> Vec<String> {
    let out = tb
        .admin("squeue")
        .args(["--noheader", "--array", "--format=%A", "--user"])
        .arg(tb.get("SLURM_USER"))
        .output()
        .expect("running testbed/admin squeue");
    assert!(
        out.status.success(),
        "squeue: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Cancel every job of the test user and wait, with a deadline, until none is left.
fn empty_the_queue(tb: &Testbed) {
    if queued_jobs(tb).is_empty() {
        return;
    }
    let cancelled = tb
        .admin("scancel")
        .arg("--user")
        .arg(tb.get("SLURM_USER"))
        .status()
        .expect("running testbed/admin scancel");
    assert!(cancelled.success(), "scancel --user failed: {cancelled}");
    let deadline = Instant::now() + QUEUE_EMPTIES_WITHIN;
    loop {
        let left = queued_jobs(tb);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "jobs {left:?} were still queued {QUEUE_EMPTIES_WITHIN:?} after scancel --user"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}
