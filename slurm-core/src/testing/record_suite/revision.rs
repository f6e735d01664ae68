//! The suite's case of [`RecordStore::revision`]: every write moves it, reads do not.

use crate::record::{BackendRef, JobId, Mark, RecordFilter, RecordStore, TransitionSource};
use crate::state::JobState;

use super::workers::{Role, Worker};
use super::{record, Case, RecordStoreFixture};

/// A store that tells its revision moves it with every write (open, mark, a batch of
/// marks, update), by this process and by another sharing the store, and leaves it where
/// it was through reads (get, get_many, list); a store that cannot tell says so every
/// time (`None`), writes or not.
pub fn the_revision_moves_with_every_write<F: RecordStoreFixture>(fixture: &F, case: &Case) {
    let store = fixture.store();
    let first = store.revision().unwrap();
    let id = JobId::mint("revised");
    let mut seen = vec![first];
    let moved = |what: &str, seen: &mut Vec<Option<u64>>| {
        let now = store.revision().unwrap();
        match (first, now) {
            (None, None) => {}
            (Some(_), Some(now)) => assert!(
                !seen.contains(&Some(now)),
                "the revision {now} after {what} was seen before: {seen:?}"
            ),
            _ => panic!("a store tells its revision always or never: {first:?}, then {now:?}"),
        }
        seen.push(now);
    };
    store.open(&record(id.clone())).unwrap();
    moved("an open", &mut seen);
    store
        .mark(
            &id,
            Mark::new(JobState::Pending, TransitionSource::Poll).backend_ref(BackendRef::new("7")),
        )
        .unwrap();
    moved("a mark", &mut seen);
    store
        .mark_many(vec![(
            id.clone(),
            Mark::new(JobState::Running, TransitionSource::Poll),
        )])
        .unwrap();
    moved("a batch of marks", &mut seen);
    store
        .update(&id, &mut |r| {
            r.labels.insert("seen".into(), "once".into());
            Ok(())
        })
        .unwrap();
    moved("an update", &mut seen);

    let before = store.revision().unwrap();
    store.get(&id).unwrap();
    store.get_many(&[id.clone(), id.clone()]).unwrap();
    store.list(&RecordFilter::any()).unwrap();
    assert_eq!(
        store.revision().unwrap(),
        before,
        "reads leave the revision"
    );

    // Another process (a thread, for a store no other process reaches) writes.
    let shared = fixture.shared();
    let role = Role::Write {
        shared: id.clone(),
        prefix: format!("other-{}", JobId::mint("w")),
        rounds: 1,
    };
    let mut writer = Worker::start(&case.test, shared.as_deref(), &store, role);
    assert_eq!(writer.next_line("done"), "done");
    writer.finish();
    moved("another writer's writes", &mut seen);
}
