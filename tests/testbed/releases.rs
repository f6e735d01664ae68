//! What the library knows of the test bed's Slurm release (22.05, 24.11 or 26.05) and
//! uses of it (issue 27, point 3): preflight names the release and every record notes
//! it; from 23.02 a node failure is pinned on the node sacct names (`FailedNode`), so a
//! retry avoids that node only; a waiting job's status says what its reason means.

use std::time::Duration;

use slurm_core::{Backend, Command, ErrorKind, JobState, LogOptions, SubmitOptions};
use slurm_run_testsupport::backend::{
    admin, down_node, harness, remote, small_spec, wait_state, wait_terminal, wait_until,
};
use slurm_run_testsupport::cluster;

/// The bed's release as its own `sinfo --version` prints it (`24.11.5`).
fn bed_release(h: &slurm_run_testsupport::backend::Harness) -> String {
    let version = admin(&h.testbed, "sinfo", &["--version"]);
    version.split_whitespace().last().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflight_names_the_release_and_each_record_notes_it() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let release = bed_release(&h);
    let (major, minor) = h.testbed.slurm_release();
    assert!(
        release.starts_with(&format!("{major}.{minor:02}.")),
        "{release}"
    );
    let report = h.backend.preflight(None).await.unwrap();
    let check = report
        .checks
        .iter()
        .find(|c| c.check == "slurm release")
        .unwrap_or_else(|| panic!("no release check: {report}"));
    assert!(check.ok && !check.degraded, "{report}");
    // slurmctld and the login node's client are the bed's release.
    assert_eq!(check.detail, format!("Slurm {release}"), "{report}");
    let record = h
        .backend
        .submit(&small_spec("release", "true"), SubmitOptions::default())
        .await
        .unwrap();
    assert_eq!(record.scheduler_release(), Some(release.as_str()));
    let done = wait_terminal(&h.backend, record.id(), 120).await;
    assert_eq!(done.state(), JobState::Complete, "{done:?}");
    assert_eq!(
        done.record().scheduler_release(),
        Some(release.as_str()),
        "kept as the job ends"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_failure_is_pinned_on_the_failed_node_from_23_02() {
    let _cluster = cluster::exclusive().await;
    let h = harness();
    // A job on both nodes; n2 goes down under it. No --requeue: it ends NODE_FAIL.
    let mut spec = small_spec("two-nodes", "echo started; sleep 300");
    spec.nodes = Some(2);
    spec.requeue = Some(false);
    let record = h
        .backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap();
    let running = wait_state(&h.backend, record.id(), JobState::Running, 120).await;
    assert_eq!(running.record().nodes(), ["n1", "n2"], "{running:?}");
    // RUNNING is the allocation: down the node once the command runs.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let log = h
            .backend
            .logs(record.id(), LogOptions::default())
            .await
            .unwrap_or_default();
        if log.contains("started") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the command never started"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let _resume = down_node(&h.testbed, "n2", "slurm-run-test");
    let ended = wait_terminal(&h.backend, record.id(), 180).await;
    let failed = ended.record();
    assert_eq!(failed.state(), JobState::Error, "{failed:?}");
    assert!(failed.node_fault(), "{failed:?}");
    assert_eq!(failed.nodes(), ["n1", "n2"]);
    let refusal = h.backend.resubmit(record.id()).await.unwrap_err();
    assert_eq!(refusal.kind(), ErrorKind::Invalid, "{refusal}");
    let text = refusal.to_string();
    if h.testbed.slurm_release() >= (23, 2) {
        // sacct's FailedNode names n2: the retry avoids it alone, which leaves n1 (too
        // few for a job of two nodes, so it is refused, naming n2 only).
        assert_eq!(failed.failed_nodes(), ["n2"], "{failed:?}");
        assert_eq!(failed.nodes_to_exclude(), ["n2"]);
        assert!(
            text.contains("must avoid n2 ") && text.contains("leaves 1 of the 2 node(s)"),
            "{text}"
        );
    } else {
        // Slurm 22.05 has no FailedNode (sacct refuses the field): which node failed is
        // unknown, so the failure is the whole job's and the retry would avoid both.
        assert!(failed.failed_nodes().is_empty(), "{failed:?}");
        assert_eq!(failed.nodes_to_exclude(), ["n1", "n2"]);
        assert!(
            text.contains("must avoid n1, n2 ") && text.contains("leaves 0 of the 2 node(s)"),
            "{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_jobs_status_says_it_waits_for_a_release() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let mut spec = small_spec("held", "true");
    spec.extra_sbatch = vec!["--begin=now+1hour".into()];
    let record = h
        .backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap();
    let native = record.backend_ref().unwrap().native_id.clone();
    // The job's user holds it, as a person would.
    remote(&h, Command::new("scontrol").args(["hold", &native])).await;
    let held = wait_until(&h.backend, record.id(), 60, |s| {
        s.native().and_then(|n| n.reason.as_deref()) == Some("JobHeldUser")
    })
    .await;
    assert_eq!(held.state(), JobState::Pending);
    let note = held.native().and_then(|n| n.reason_note.clone());
    assert!(
        note.as_deref()
            .is_some_and(|n| n.contains("scontrol release")),
        "{held:?}"
    );
    h.backend.cancel(record.id()).await.unwrap();
    let cancelled = wait_terminal(&h.backend, record.id(), 60).await;
    assert_eq!(cancelled.state(), JobState::Canceled);
}
