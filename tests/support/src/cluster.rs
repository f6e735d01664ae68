//! The gate in front of the test bed. Tests in one binary run on parallel threads and
//! share one cluster: most of them only need some of it and take it [`shared`]; the
//! scenarios that take the whole of it (a job holding every GPU, a node set down) take
//! it [`exclusive`], so no other test-bed test runs meanwhile. Every test-bed test holds
//! one guard for its whole body (never two: a second `shared` behind a waiting
//! `exclusive` would wait forever).
//!
//! The gate is a `tokio::sync::RwLock` in a `static`: fair (once an exclusive taker
//! waits, later shared takers queue behind it), usable from any runtime, not poisoned
//! by a panicking test. Synchronous tests take it with the `_blocking` forms.

use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

static GATE: RwLock<()> = RwLock::const_new(());

/// The cluster held shared: other shared holders run alongside.
pub type Shared = RwLockReadGuard<'static, ()>;

/// The cluster held alone: no other test-bed test of this process runs meanwhile.
pub type Exclusive = RwLockWriteGuard<'static, ()>;

/// Take the cluster shared (for a test that leaves room for others).
pub async fn shared() -> Shared {
    GATE.read().await
}

/// Take the whole cluster, once every shared holder has let go.
pub async fn exclusive() -> Exclusive {
    GATE.write().await
}

/// [`shared`] for a synchronous test (panics inside an async runtime).
pub fn shared_blocking() -> Shared {
    GATE.blocking_read()
}

/// [`exclusive`] for a synchronous test (panics inside an async runtime).
pub fn exclusive_blocking() -> Exclusive {
    GATE.blocking_write()
}
