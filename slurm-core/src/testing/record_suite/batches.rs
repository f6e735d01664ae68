//! The suite's case of [`RecordStore::mark_many`]: several marks at once, each as
//! [`RecordStore::mark`] applies it.

use crate::classify::ErrorClass;
use crate::record::{BackendRef, JobId, Mark, RecordStore, TransitionSource};
use crate::state::JobState;
use crate::ErrorKind;

use super::{record, states, Case, RecordStoreFixture, SUITE_SECRET};

/// `mark_many` applies each mark as `mark` would, in order: answers in the order of the
/// marks; a record never opened and an illegal change cost only themselves (typed
/// errors, the other marks applied); a later mark of the same job sees the earlier one;
/// secrets are redacted before they are stored; what a store opened afresh reads is what
/// the call answered; no marks, no answers.
pub fn mark_many_marks_each_as_mark_does<F: RecordStoreFixture>(fixture: &F, _case: &Case) {
    let store = fixture.store();
    let (a, b, never) = (
        JobId::mint("batch-a"),
        JobId::mint("batch-b"),
        JobId::mint("never"),
    );
    store.open(&record(a.clone())).unwrap();
    store.open(&record(b.clone())).unwrap();
    let secret = SUITE_SECRET.1;
    let poll = |state| Mark::new(state, TransitionSource::Poll);
    let answers = store
        .mark_many(vec![
            (
                a.clone(),
                poll(JobState::Pending)
                    .backend_ref(BackendRef::new("41"))
                    .message(format!("submitted with token {secret}")),
            ),
            (never.clone(), poll(JobState::Pending)),
            (b.clone(), poll(JobState::Pending)),
            (a.clone(), poll(JobState::Running)),
            (
                b.clone(),
                poll(JobState::Error).err_class(ErrorClass::Infra),
            ),
            (
                b.clone(),
                Mark::new(JobState::Canceled, TransitionSource::User),
            ),
        ])
        .unwrap();
    assert_eq!(answers.len(), 6, "one answer per mark");
    let answered_a = answers[3].as_ref().expect("a's second mark").clone();
    assert_eq!(
        answers[0].as_ref().expect("a's first mark").state,
        JobState::Pending
    );
    let missing = answers[1].as_ref().unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound, "{missing}");
    assert!(missing.to_string().contains(never.as_str()), "{missing}");
    use JobState::*;
    assert_eq!(
        states(&answered_a),
        vec![Submitting, Pending, Running],
        "the second mark saw the first"
    );
    assert_eq!(answered_a.backend_ref, Some(BackendRef::new("41")));
    assert_eq!(answers[4].as_ref().expect("b's end").state, Error);
    let illegal = answers[5].as_ref().unwrap_err();
    assert_eq!(illegal.kind(), ErrorKind::InvalidTransition, "{illegal}");

    let stored_a = store.get(&a).unwrap();
    assert_eq!(stored_a, answered_a);
    assert!(
        !format!("{stored_a:?}").contains(secret),
        "a secret was stored"
    );
    let stored_b = store.get(&b).unwrap();
    assert_eq!(states(&stored_b), vec![Submitting, Pending, Error]);
    if let Some(shared) = fixture.shared() {
        let other = F::open_shared(&shared).expect("the store opened afresh");
        assert_eq!(other.get(&a).unwrap(), answered_a, "as stored");
        assert_eq!(other.get(&b).unwrap(), stored_b, "as stored");
    }
    assert!(store.mark_many(Vec::new()).unwrap().is_empty());
}
