//! The memo of a repeated poll on the real cluster (issue 23, point 6): a poll of many
//! jobs in which nothing changed is answered by squeue on the login node alone (no
//! record read, no row parsed), and the first poll after a change sees it.

use std::sync::Arc;
use std::time::Duration;

use slurm_core::{Backend, Command, JobState, RecordStore, SlurmBackend};
use slurm_records::SqliteRecordStore;
use slurm_render::HandlebarsRenderer;
use slurm_run_testsupport::backend::{harness, remote};
use slurm_run_testsupport::bench::cluster::{cancel_all, held_jobs, track};
use slurm_run_testsupport::cluster;

/// The answer of a poll the login node found unchanged.
const SAME: &str = "@@memo same\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_poll_is_answered_by_squeue_alone_until_a_job_changes() {
    let _cluster = cluster::shared().await;
    let h = harness();
    // 70 held jobs: from MINE_FROM (64) a poll asks for the user's own jobs.
    let held = held_jobs(&h, 70).await;
    let records = track(&h, &held);
    // Records in SQLite (the default store, which tells its revision).
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteRecordStore::open(dir.path().join("records.sqlite")).unwrap();
    sqlite
        .open_many(&h.backend.store().get_many(&records).unwrap())
        .unwrap();
    let backend = SlurmBackend::new(
        Arc::clone(&h.transport),
        HandlebarsRenderer::new(),
        sqlite,
        h.backend.config().clone(),
    );

    let first = backend.status_many(&records).await.unwrap();
    assert!(first.iter().all(|s| s.state() == JobState::Pending));
    // Nothing changed: one round trip, answered by one line. squeue lists the user's
    // other jobs too, so one that ends or leaves the queue meanwhile (an earlier test's)
    // makes a poll a full one; the next is answered by one line again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        h.transport.reset();
        let again = backend.status_many(&records).await.unwrap();
        assert_eq!(again, first);
        assert_eq!(h.transport.count(), 1, "{:?}", h.transport.labels());
        if h.transport.answered_bytes() == [SAME.len()] {
            assert_eq!(h.transport.labels(), ["poll 70 job(s) again"]);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no poll was answered by squeue alone: {:?}",
            h.transport.answered_bytes()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A job cancelled behind the library's back: the next polls see it end, each one
    // round trip, and the others stay PENDING.
    let cancelled = remote(&h, Command::new("scancel").arg(held[5].to_string())).await;
    assert!(cancelled.trim().is_empty(), "{cancelled}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        h.transport.reset();
        let statuses = backend.status_many(&records).await.unwrap();
        assert_eq!(h.transport.count(), 1, "{:?}", h.transport.labels());
        assert_ne!(
            h.transport.answered_bytes(),
            [SAME.len()],
            "squeue's rows changed: never `same` while job 5 is not recorded ended"
        );
        if statuses[5].state().is_terminal() {
            assert_eq!(statuses[5].state(), JobState::Canceled);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the cancelled job never ended: {:?}",
            statuses[5]
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Once the end is recorded and squeue's rows settle, polls are answered by squeue
    // alone again, with the end kept.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        h.transport.reset();
        let statuses = backend.status_many(&records).await.unwrap();
        for (n, status) in statuses.iter().enumerate() {
            let want = if n == 5 {
                JobState::Canceled
            } else {
                JobState::Pending
            };
            assert_eq!(status.state(), want, "job {n}: {status:?}");
        }
        if h.transport.answered_bytes() == [SAME.len()] {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no poll was answered by squeue alone again"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    cancel_all(&h, &held).await;
}
