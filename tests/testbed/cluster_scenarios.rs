//! Backend scenarios that take the whole test bed (every GPU, or a node down), so each
//! holds the cluster exclusive: no other test-bed test runs meanwhile. Cancels of pending
//! and running jobs, and a node failure seen as NODE_FAIL (ERROR, infra) or as a Slurm
//! requeue.

use slurm_core::{Backend, ErrorClass, JobState, SubmitOptions};
use slurm_run_testsupport::backend::{down_node, harness, small_spec, wait_state, wait_terminal};
use slurm_run_testsupport::cluster;
use slurm_run_testsupport::testbed::CancelOnDrop;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_and_running_jobs_are_cancelled() {
    let _cluster = cluster::exclusive().await;
    let h = harness();
    // A blocker takes every GPU of the test bed (2 exclusive nodes of 8).
    let mut blocker = small_spec("blocker", "sleep 300");
    blocker.gpus_per_node = None;
    blocker.gpus = Some(16);
    let blocker = h
        .backend
        .submit(&blocker, SubmitOptions::default())
        .await
        .unwrap();
    // Should the test fail, the blocker must not hold the test bed for the tests after it.
    let _blocker_guard = CancelOnDrop(&h.testbed, blocker.backend_ref().unwrap().native_id.clone());
    let running = wait_state(&h.backend, blocker.id(), JobState::Running, 120).await;
    assert!(running
        .record()
        .history()
        .iter()
        .any(|t| t.state() == JobState::Running));

    // Behind it, a job asking for 8 GPUs pends (Resources or Priority).
    let mut waiting = small_spec("waiting", "true");
    waiting.gpus_per_node = Some(8);
    let waiting = h
        .backend
        .submit(&waiting, SubmitOptions::default())
        .await
        .unwrap();
    let pending = wait_state(&h.backend, waiting.id(), JobState::Pending, 30).await;
    let reason = pending
        .native()
        .as_ref()
        .and_then(|n| n.reason.clone())
        .unwrap_or_default();
    assert!(
        ["Resources", "Priority", "None"]
            .iter()
            .any(|r| reason.contains(r)),
        "pending reason {reason:?}"
    );
    let cancelled = h.backend.cancel(waiting.id()).await.unwrap();
    assert_eq!(cancelled.state(), JobState::Canceled);

    // The running blocker: sacct says `CANCELLED by <uid>`.
    let cancelled = h.backend.cancel(blocker.id()).await.unwrap();
    assert_eq!(cancelled.state(), JobState::Canceled);
    let message = cancelled.last_message().to_string();
    assert!(message.starts_with("CANCELLED"), "{message}");

    // Cancelling a finished job changes nothing and succeeds.
    let again = h.backend.cancel(blocker.id()).await.unwrap();
    assert_eq!(again.history().len(), cancelled.history().len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_failure_is_infra_or_a_requeue() {
    let _cluster = cluster::exclusive().await;
    let h = harness();
    let mut plain = small_spec("nodefail", "sleep 300");
    // On n2 only (the test bed has n1 and n2; --nodelist is slurm-run's to refuse).
    plain.extra_sbatch = vec!["--exclude=n1".into()];
    plain.requeue = Some(false);
    let mut requeued = small_spec("requeued", "sleep 300");
    requeued.extra_sbatch = vec!["--exclude=n1".into()];
    requeued.requeue = Some(true);
    let plain = h
        .backend
        .submit(&plain, SubmitOptions::default())
        .await
        .unwrap();
    let requeued = h
        .backend
        .submit(&requeued, SubmitOptions::default())
        .await
        .unwrap();
    wait_state(&h.backend, plain.id(), JobState::Running, 120).await;
    wait_state(&h.backend, requeued.id(), JobState::Running, 120).await;

    let _resume = down_node(&h.testbed, "n2", "slurm-run-test");

    let failed = wait_terminal(&h.backend, plain.id(), 120).await;
    assert_eq!(failed.state(), JobState::Error, "{:?}", failed.native());
    assert_eq!(failed.err_class(), Some(ErrorClass::Infra));
    assert!(
        failed
            .native()
            .as_ref()
            .unwrap()
            .state
            .starts_with("NODE_FAIL"),
        "{:?}",
        failed.native()
    );

    // With --requeue, Slurm puts the job back in the queue: RUNNING -> PENDING on the
    // same record, the node failure noted in the transition.
    let back = wait_state(&h.backend, requeued.id(), JobState::Pending, 120).await;
    let message = back.record().last_message().to_string();
    assert!(message.contains("NODE_FAIL"), "{message}");
    let states: Vec<JobState> = back.record().history().iter().map(|t| t.state()).collect();
    assert!(
        states
            .windows(2)
            .any(|w| w == [JobState::Running, JobState::Pending]),
        "{states:?}"
    );
    let cancelled = h.backend.cancel(requeued.id()).await.unwrap();
    assert_eq!(cancelled.state(), JobState::Canceled);
}

/// The exclusive gate starts on an empty queue: a job a test left behind (here one
/// submitted under a shared hold that was then let go, as a failed test lets go) is
/// cancelled before the exclusive holder runs, so it cannot keep that test's
/// whole-cluster job pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exclusive_gate_starts_on_an_empty_queue() {
    let h = harness();
    let shared = cluster::shared().await;
    let left = h
        .backend
        .submit(
            &small_spec("left-behind", "sleep 600"),
            SubmitOptions::default(),
        )
        .await
        .unwrap();
    drop(shared);
    let _cluster = cluster::exclusive().await;
    let status = h.backend.status(left.id()).await.unwrap();
    assert_eq!(status.state(), JobState::Canceled, "{status:?}");
}
