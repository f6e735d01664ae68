//! The suite's case of a continuation several replicas see at once: a resumable run's
//! segment is closed, and its restart counted, once.

use super::workers::{Role, Worker};
use super::{record, Case, RecordStoreFixture};
use crate::record::{BackendRef, JobId, Mark, SegmentEnd, TransitionSource};
use crate::spec::ResumeSpec;
use crate::state::JobState;

/// A resumable run requeued by its wall, marked so by several workers at once
/// (processes when the store is shared; a barrier: each is ready before any marks), as
/// replicas whose polls all saw the requeue do: its open segment is closed once, by the
/// wall with the checkpoint it left, and its restart counted once.
pub fn a_continuation_marked_by_several_processes_counts_once<F: RecordStoreFixture>(
    fixture: &F,
    case: &Case,
) {
    const MARKERS: usize = 4;
    let store = fixture.store();
    let id = JobId::mint("continued");
    let mut resumable = record(id.clone());
    let mut spec = resumable.spec.as_deref().cloned().expect("a kept spec");
    spec.resume = Some(ResumeSpec::new(3));
    resumable.spec = Some(std::sync::Arc::new(spec));
    store.open(&resumable).unwrap();
    store
        .mark(
            &id,
            Mark::new(JobState::Pending, TransitionSource::Agent)
                .backend_ref(BackendRef::new("42".to_string())),
        )
        .unwrap();
    store
        .mark(
            &id,
            Mark::new(JobState::Running, TransitionSource::Poll).nodes(vec!["n1".into()]),
        )
        .unwrap();
    let roles = (0..MARKERS).map(|_| Role::Continue(id.clone()));
    let mut markers =
        Worker::start_together(&case.test, fixture.shared().as_deref(), &store, roles);
    for marker in &mut markers {
        assert_eq!(marker.next_line("its mark"), "marked");
    }
    for marker in markers {
        marker.finish();
    }
    let continued = store.get(&id).unwrap();
    assert_eq!(continued.state, JobState::Pending);
    assert_eq!(continued.restarts, 1, "the continuation counted once");
    assert_eq!(continued.segments.len(), 1, "{:?}", continued.segments);
    assert_eq!(continued.segments[0].ended, Some(SegmentEnd::Wall));
    assert_eq!(
        continued.segments[0].checkpoint.as_deref(),
        Some("ckpt/step-10.pt")
    );
}
