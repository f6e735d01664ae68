//! The memo of a repeated poll against a scripted login node: what is sent again, when
//! the held statuses answer, and when a poll is full again.

use std::sync::{Arc, Mutex};

use super::testkit::*;
use crate::backend::Backend;
use crate::record::{JobId, RecordStore};
use crate::spec::JobSpec;
use crate::state::JobState;
use crate::transport::Output;

/// The jobs of a poll that asks for the user's own jobs (`--me`): 64 or more.
const JOBS: u64 = super::poll::MINE_FROM as u64;

/// squeue's rows of jobs 1..=JOBS, PENDING but `running`, framed as `poll.sh` frames
/// them, with the memo's line `memo` last.
fn full_answer(running: &[u64], memo: &str) -> Output {
    let rows: String = (1..=JOBS)
        .map(|n| match running.contains(&n) {
            true => format!("O {n}|RUNNING|None|n1|job\n"),
            false => format!("O {n}|PENDING|Priority|(null)|job\n"),
        })
        .collect();
    output(
        0,
        &format!("@@begin 0\n{rows}@@end 0 0\n@@begin 1\n@@end 1 0\n@@memo {memo}\n"),
        "",
    )
}

/// A login node answering polls from `answers` in turn, noting each poll's memo word.
/// A poll that holds a slot brings no lists; any other brings them.
fn scripted(answers: Vec<Output>, memos: Arc<Mutex<Vec<String>>>) -> MockRemote {
    let answers = Mutex::new(answers.into_iter());
    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(is_poll)
        .returning(move |command| {
            // bash -c SCRIPT poll LIVE LISTS-BY MEMO ...
            let memo = command.get_args()[5].clone();
            let holds = slots(&memo).0 != "-";
            assert_eq!(command.stdin_bytes().is_none(), holds, "{memo}");
            memos.lock().unwrap().push(memo);
            Ok(answers.lock().unwrap().next().expect("an answer per poll"))
        });
    remote
}

/// JOBS pending records, job n's native id n.
fn pending_jobs(backend: &TestBackend) -> Vec<JobId> {
    (1..=JOBS)
        .map(|n| {
            let spec = JobSpec::new(format!("job{n}"), "true");
            open_accepted(backend.store(), &spec, &n.to_string(), JobState::Pending).id
        })
        .collect()
}

/// The held slot and the written one of a memo word `CLIENT:HELD:WRITE:LISTS`.
fn slots(word: &str) -> (String, String) {
    let mut parts = word.split(':').skip(1);
    (
        parts.next().unwrap().to_string(),
        parts.next().unwrap().to_string(),
    )
}

/// The polls' memo words named, in turn, the held and written slots of `expected`.
fn assert_slots(memos: &[String], expected: &[(&str, &str)]) {
    let asked: Vec<(String, String)> = memos.iter().map(|w| slots(w)).collect();
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(h, w)| (h.to_string(), w.to_string()))
        .collect();
    assert_eq!(asked, expected, "{memos:?}");
}

#[tokio::test]
async fn a_poll_the_login_node_answers_same_returns_the_held_statuses_without_a_read() {
    let memos = Arc::new(Mutex::new(Vec::new()));
    let remote = scripted(
        vec![
            full_answer(&[], "kept a"),
            output(0, "@@memo same\n", ""),
            // A row changed: the same round trip answers in full.
            full_answer(&[7], "kept b"),
            // The poll's own mark raised the revision: a full poll again, then `same`.
            full_answer(&[7], "kept a"),
            output(0, "@@memo same\n", ""),
        ],
        Arc::clone(&memos),
    );
    let backend = backend(remote);
    let ids = pending_jobs(&backend);

    let first = backend.status_many(&ids).await.unwrap();
    assert!(first.iter().all(|s| s.state() == JobState::Pending));
    let again = backend.status_many(&ids).await.unwrap();
    assert_eq!(again, first, "the held statuses");
    let changed = backend.status_many(&ids).await.unwrap();
    assert_eq!(changed[6].state(), JobState::Running, "job 7 started");
    assert_eq!(
        backend.store().get(&ids[6]).unwrap().state(),
        JobState::Running
    );
    let full = backend.status_many(&ids).await.unwrap();
    let last = backend.status_many(&ids).await.unwrap();
    assert_eq!(last, full);
    assert_eq!(last[6].state(), JobState::Running);

    let memos = memos.lock().unwrap().clone();
    let expected = [("-", "a"), ("a", "b"), ("a", "b"), ("-", "a"), ("a", "b")];
    assert_slots(&memos, &expected);
    let client = memos[0].split(':').next().unwrap();
    assert!(memos.iter().all(|w| w.starts_with(client)));
}

#[tokio::test]
async fn a_record_written_between_polls_makes_the_next_one_full() {
    let memos = Arc::new(Mutex::new(Vec::new()));
    let remote = scripted(
        vec![full_answer(&[], "kept a"), full_answer(&[], "kept b")],
        Arc::clone(&memos),
    );
    let backend = backend(remote);
    let ids = pending_jobs(&backend);
    backend.status_many(&ids).await.unwrap();
    // Another writer (a replica, a submit) changes one record: the store's revision
    // moves, so the records are read again and the poll is a full one.
    backend
        .store()
        .update(&ids[3], &mut |r| {
            r.labels.insert("seen".into(), "yes".into());
            Ok(())
        })
        .unwrap();
    let second = backend.status_many(&ids).await.unwrap();
    assert_eq!(second[3].record().labels().get("seen").unwrap(), "yes");
    let memos = memos.lock().unwrap().clone();
    assert_eq!(slots(&memos[1]).0, "-", "nothing held: {memos:?}");
}

#[tokio::test]
async fn a_poll_that_needed_more_than_squeue_is_not_held() {
    let memos = Arc::new(Mutex::new(Vec::new()));
    // The login node kept nothing (a job needed sacct), then a poll of other ids.
    let remote = scripted(
        vec![
            full_answer(&[], "none"),
            full_answer(&[], "kept a"),
            full_answer(&[], "kept b"),
        ],
        Arc::clone(&memos),
    );
    let backend = backend(remote);
    let ids = pending_jobs(&backend);
    backend.status_many(&ids).await.unwrap();
    backend.status_many(&ids).await.unwrap();
    // The same jobs asked in another order: the memo answers only the same ids in the
    // same order (the statuses come in their order), so nothing held.
    let reversed: Vec<JobId> = ids.iter().rev().cloned().collect();
    let statuses = backend.status_many(&reversed).await.unwrap();
    assert_eq!(statuses[0].id(), &ids[ids.len() - 1]);
    let memos = memos.lock().unwrap().clone();
    let held: Vec<String> = memos.iter().map(|w| slots(w).0).collect();
    assert_eq!(held, ["-", "-", "-"], "{memos:?}");
}

#[tokio::test]
async fn a_login_node_that_lost_the_lists_is_asked_again_with_them() {
    let memos = Arc::new(Mutex::new(Vec::new()));
    // A new shell (a reconnect) keeps none of the earlier one's lists or rows.
    let remote = scripted(
        vec![
            full_answer(&[], "kept a"),
            output(0, "@@memo lost\n", ""),
            full_answer(&[2], "kept a"),
        ],
        Arc::clone(&memos),
    );
    let backend = backend(remote);
    let ids = pending_jobs(&backend);
    backend.status_many(&ids).await.unwrap();
    let statuses = backend.status_many(&ids).await.unwrap();
    assert_eq!(
        statuses[1].state(),
        JobState::Running,
        "the full poll's answer"
    );
    let memos = memos.lock().unwrap().clone();
    assert_slots(&memos, &[("-", "a"), ("a", "b"), ("-", "a")]);
}
