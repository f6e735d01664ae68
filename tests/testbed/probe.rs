//! The NCCL probe against the real test bed: a 2-node probe whose fake command hangs
//! until `NCCL_P2P_DISABLE=1` climbs the knob ladder, caches the knob per cluster, and
//! later jobs run with it without probing; a wrong sum is an error that caches nothing;
//! a submit with `NcclProbe::Always` probes first.

use std::time::Duration;

use slurm_core::backend::{Backend, LogOptions, SubmitOptions};
use slurm_core::nccl::{KnobSet, NcclProbe, ProbeOptions, PROBE_LABEL};
use slurm_core::record::RecordFilter;
use slurm_core::slurm::SlurmSubmitOptions;
use slurm_core::{ErrorKind, JobState};
use slurm_run_testsupport::backend::{harness, small_spec, wait_terminal};
use slurm_run_testsupport::cluster;

/// Hangs (past the 3 s probe timeout) unless NCCL_P2P_DISABLE=1; then rank 0 says OK.
const HANGS_WITHOUT_P2P_DISABLE: &str = r#"if [ "${NCCL_P2P_DISABLE:-0}" = 1 ]; then
  if [ "${NODE_RANK:-0}" = 0 ]; then echo "NCCL_PROBE_OK world=2"; fi
else
  sleep 60
fi"#;

/// Finishes at once with a wrong sum: rank 0 prints it and exits 3 (as the real script
/// does: only rank 0 fails, after its marker, so `--kill-on-bad-exit` cannot cut it off).
const WRONG_SUM: &str =
    r#"if [ "${NODE_RANK:-0}" = 0 ]; then echo "NCCL_PROBE_BAD sum=3 expected=10"; exit 3; fi"#;

fn fake(command: &str) -> ProbeOptions {
    ProbeOptions::default()
        .with_command(command)
        .with_timeout(Duration::from_secs(3))
        .with_poll_interval(Duration::from_millis(500))
        .with_max_wait(Duration::from_secs(90))
}

fn two_nodes(name: &str, command: &str) -> slurm_core::JobSpec {
    let mut spec = small_spec(name, command);
    spec.nodes = Some(2);
    spec
}

fn probes() -> RecordFilter {
    RecordFilter::any().label(PROBE_LABEL, "nccl")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hang_climbs_to_p2p_disable_which_is_cached_and_used_by_later_jobs() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let spec = two_nodes("train", "echo the probe never runs this");
    let report = h
        .backend
        .probe_nccl(&spec, fake(HANGS_WITHOUT_P2P_DISABLE))
        .await
        .unwrap();
    let outcomes: Vec<&str> = report.attempts.iter().map(|a| a.outcome.name()).collect();
    assert_eq!(outcomes, ["HUNG", "OK"], "{report:#?}");
    assert!(report.attempts[0].env.is_empty());
    let p2p = KnobSet::from([("NCCL_P2P_DISABLE".to_string(), "1".to_string())]);
    assert_eq!(report.attempts[1].env, p2p);
    assert_eq!(report.knobs, p2p);
    assert_eq!(report.cluster, "testbed");

    // The cache file on disk holds the knob.
    let text = std::fs::read_to_string(&report.cache_file).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["env"]["NCCL_P2P_DISABLE"], "1", "{text}");
    assert_eq!(json["nodes"], 2, "{text}");
    let cached = h.backend.knob_cache("testbed").unwrap().unwrap();
    assert_eq!(cached.env, p2p);
    assert_eq!(cached.probe_job, report.attempts[1].job);

    // Probe jobs are records, but the user's list leaves them out.
    assert!(h.backend.records(&RecordFilter::any()).unwrap().is_empty());
    let probe_records = h.backend.records(&probes()).unwrap();
    assert_eq!(probe_records.len(), 2);
    assert!(probe_records.iter().all(|r| r.state.is_terminal()));

    // A later 2-node job: no probe (one round trip), the cached knob in its environment.
    let job = two_nodes(
        "after",
        "echo rank=$NODE_RANK p2p=${NCCL_P2P_DISABLE:-unset}",
    );
    let before = h.transport.count();
    let record = h
        .backend
        .submit(&job, SubmitOptions::default())
        .await
        .unwrap();
    assert_eq!(
        h.transport.count() - before,
        1,
        "a cached cluster submits in one round trip: {:?}",
        h.transport.labels()
    );
    let status = wait_terminal(&h.backend, &record.id, 60).await;
    assert_eq!(status.state(), JobState::Complete, "{status:?}");
    let out = h
        .backend
        .logs(&record.id, LogOptions::default())
        .await
        .unwrap();
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("rank=")).collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines.iter().all(|l| l.ends_with("p2p=1")), "{out}");
    assert_eq!(
        h.backend.records(&probes()).unwrap().len(),
        2,
        "no new probe"
    );

    // A job that sets the knob itself keeps its own value; a one-GPU job gets no knob.
    let mut own = two_nodes("own", "echo own-p2p=${NCCL_P2P_DISABLE:-unset}");
    own.extra_env.insert("NCCL_P2P_DISABLE".into(), "0".into());
    let single = small_spec("single", "echo single-p2p=${NCCL_P2P_DISABLE:-unset}");
    let own = h
        .backend
        .submit(&own, SubmitOptions::default())
        .await
        .unwrap();
    let single = h
        .backend
        .submit(&single, SubmitOptions::default())
        .await
        .unwrap();
    for (id, expected) in [(&own.id, "own-p2p=0"), (&single.id, "single-p2p=unset")] {
        let status = wait_terminal(&h.backend, id, 60).await;
        assert_eq!(status.state(), JobState::Complete, "{status:?}");
        let out = h.backend.logs(id, LogOptions::default()).await.unwrap();
        assert!(out.contains(expected), "{expected} missing: {out}");
    }

    // Clearing the cache forgets the knob.
    assert!(h.backend.clear_knob_cache("testbed").unwrap());
    assert!(h.backend.knob_cache("testbed").unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_sum_is_an_error_that_caches_nothing() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let spec = two_nodes("train", "true");
    let err = h
        .backend
        .probe_nccl(&spec, fake(WRONG_SUM))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Preflight, "{err}");
    let text = err.to_string();
    assert!(text.contains("BAD"), "{text}");
    assert!(text.contains("sum=3 expected=10"), "{text}");
    assert!(text.contains("admins"), "{text}");
    assert!(h.backend.knob_cache("testbed").unwrap().is_none());
    assert_eq!(
        h.backend.records(&probes()).unwrap().len(),
        1,
        "BAD is not a hang: no second rung"
    );

    // The same probe inside a submit: the job is refused, no record of it is left.
    let options = SlurmSubmitOptions {
        nccl_probe: NcclProbe::Always,
        probe: fake(WRONG_SUM),
    };
    let err = h
        .backend
        .submit_with(&spec, SubmitOptions::default(), options)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("BAD"), "{err}");
    assert!(h.backend.records(&RecordFilter::any()).unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submit_with_always_probes_first_then_runs_the_job() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let spec = two_nodes("always", "echo job-ran p2p=${NCCL_P2P_DISABLE:-unset}");
    let options = SlurmSubmitOptions {
        nccl_probe: NcclProbe::Always,
        probe: fake(HANGS_WITHOUT_P2P_DISABLE),
    };
    let record = h
        .backend
        .submit_with(&spec, SubmitOptions::default(), options)
        .await
        .unwrap();
    let probe_records = h.backend.records(&probes()).unwrap();
    assert_eq!(probe_records.len(), 2, "HUNG, then OK");
    assert!(
        probe_records
            .iter()
            .all(|p| p.submitted_at <= record.submitted_at),
        "the probes ran before the job"
    );
    let status = wait_terminal(&h.backend, &record.id, 60).await;
    assert_eq!(status.state(), JobState::Complete, "{status:?}");
    let out = h
        .backend
        .logs(&record.id, LogOptions::default())
        .await
        .unwrap();
    assert_eq!(out.matches("job-ran p2p=1").count(), 2, "{out}");
    assert_eq!(
        h.backend.knob_cache("testbed").unwrap().unwrap().env["NCCL_P2P_DISABLE"],
        "1"
    );
}
