//! The suite's case of a lease another holds, waited for through [`AsyncStore`]: the
//! wait never holds the runtime's thread.

use std::sync::mpsc;
use std::time::Duration;

use super::workers::{Role, Worker};
use super::{Case, RecordStoreFixture};
use crate::record::{AsyncStore, JobId};
use crate::testing::pace::{keeps_pace, wait_for_ticks};

/// How many ticks the holder waits for before it lets the lease go.
const TICKS_HELD: u64 = 30;

/// Waiting for a submit lease another holds (a worker process when the store is
/// shared) is an async wait: on a current-thread runtime, a task ticking every 10 ms
/// keeps ticking while [`AsyncStore::submit_lease`] waits, and the lease is taken
/// once the holder lets it go. The holder goes once the
/// ticker has ticked 30 times, or after 20 s when it never does (a wait that blocks the
/// runtime: the case then fails on the ticks, not on a hang).
pub fn waiting_for_a_held_lease_keeps_the_runtime_ticking<F: RecordStoreFixture>(
    fixture: &F,
    case: &Case,
) {
    let store = fixture.store();
    let id = JobId::mint("paced");
    let mut holder = Worker::start(
        &case.test,
        fixture.shared().as_deref(),
        &store,
        Role::HoldLease(id.clone()),
    );
    assert_eq!(holder.next_line("held"), "held");
    let (ticked, ticks) = mpsc::channel();
    let releaser = std::thread::spawn(move || {
        let paced = wait_for_ticks(&ticks, TICKS_HELD, Duration::from_secs(20));
        holder.kill();
        paced
    });
    let records = AsyncStore::new(store.clone());
    let (lease, pace) = keeps_pace(records.submit_lease(&id), ticked);
    let released_on_ticks = releaser.join().expect("the releaser");
    let lease = lease.expect("the lease, once its holder let it go");
    assert!(
        released_on_ticks,
        "the ticker never ticked {TICKS_HELD} times while the lease was awaited: {pace:?}"
    );
    assert!(
        pace.kept(TICKS_HELD),
        "the ticker stopped while the lease was awaited: {pace:?}"
    );
    assert_eq!(store.submit_in_progress(&id).unwrap(), Some(true));
    drop(lease);
}
