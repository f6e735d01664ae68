//! Runs longer than the wall (issue 21, point 6), with one-minute walls: a two-node
//! container run of three segments with its counter and a secret intact, a preempted
//! run that resumes (requeued, or cancelled by the cluster), a run Slurm will not requeue
//! or holds continued as a fresh job.
//! The Backend conformance suite's resume cases (three segments on one node, the
//! budget, a cancel after a continuation, a failure inside a segment) run on
//! `SlurmBackend` in `backend_conformance`.

use std::time::Duration;

use slurm_core::{
    Backend, Command, JobRecord, JobSpec, JobState, LogOptions, LogStream, NcclProbe, ResumeSpec,
    SegmentEnd, SlurmSubmitOptions, SubmitOptions, WallTime,
};
use slurm_run_testsupport::backend::{
    admin, harness, registry_image, remote, small_spec, wait_terminal, wait_until,
    with_credentials, Harness,
};
use slurm_run_testsupport::cluster;

/// The test bed's partition whose jobs a job of the others preempts (`testbed/up`).
const PREEMPTIBLE: &str = "preemptible";

/// The same, but a preempted job is cancelled (`PreemptMode=CANCEL`).
const PREEMPTIBLE_CANCEL: &str = "preemptible_cancel";

/// A command counting `total` one-second steps into `progress-<rank>.txt`; warned, every
/// rank goes on working for a second with a program it starts then (`sleep`, from the
/// image in a container: a checkpoint takes a while, and needs the image still there),
/// rank 0 checkpoints the count (once it has loaded the last one: Slurm may send the
/// warning as the segment starts) and every rank exits 0; started again, it resumes
/// from `SLURM_RUN_RESUME_FROM`. Like a program that handles the signal, it listens
/// first (and its digest's pipeline ignores it). Each rank notes the warnings it got
/// (`warned-<rank>`) and a digest of `SLURM_RUN_TEST_RESUME_TOKEN` per segment
/// (`token-<rank>`).
fn counter(total: u32) -> String {
    format!(
        r#"rank=${{NODE_RANK:-0}} i=0 loaded=0
warned() {{
  sleep 1 || exit 3
  echo "$SLURM_RUN_RESTART_COUNT" >> "warned-$rank"
  if [ "$rank" = 0 ] && [ "$loaded" = 1 ]; then printf '%s\n' "$i" > "ckpt/step-$(printf %06d "$i").ckpt"; fi
  exit 0
}}
trap warned USR2
printf '%s %s\n' "$SLURM_RUN_RESTART_COUNT" "$(trap '' USR2; printf %s "${{SLURM_RUN_TEST_RESUME_TOKEN:-}}" | sha256sum | cut -c1-16)" >> "token-$rank"
mkdir -p ckpt
if [ -n "$SLURM_RUN_RESUME_FROM" ]; then i=$(cat "$SLURM_RUN_RESUME_FROM"); fi
loaded=1
while [ "$i" -lt {total} ]; do
  sleep 1 & wait $!
  i=$((i + 1))
  echo "$SLURM_RUN_RESTART_COUNT $i" >> "progress-$rank.txt"
done
echo "rank $rank counted to $i""#
    )
}

/// A resumable spec of `command`: one node, one GPU, `wall`, a warning 30 s before it,
/// at most `max_restarts` continuations, checkpoints `ckpt/*.ckpt`.
fn resumable(name: &str, command: &str, wall: WallTime, max_restarts: u32) -> JobSpec {
    let mut spec = small_spec(name, command);
    spec.time = Some(wall);
    spec.resume = Some(ResumeSpec {
        warn_before: WallTime::from_secs(30),
        checkpoints: Some("ckpt/*.ckpt".into()),
        ..ResumeSpec::new(max_restarts)
    });
    spec
}

async fn read(h: &Harness, record: &JobRecord, file: &str) -> String {
    remote(
        h,
        Command::new("cat").arg(format!("{}/{file}", record.results_dir())),
    )
    .await
}

/// The steps of a progress file, in order.
fn steps(progress: &str) -> Vec<u32> {
    progress
        .lines()
        .filter_map(|l| l.split_once(' ')?.1.parse().ok())
        .collect()
}

/// Submit `spec` and wait until it runs: its record and its first SLURM job.
async fn running(h: &Harness, spec: &JobSpec) -> (JobRecord, String) {
    let record = h
        .backend
        .submit(spec, SubmitOptions::default())
        .await
        .unwrap();
    wait_until(&h.backend, record.id(), 120, |s| {
        s.state() == JobState::Running
    })
    .await;
    let first = record.backend_ref().unwrap().native_id.clone();
    (record, first)
}

/// Wait (a minute at most) until the run's rank 0 has counted `n` steps.
async fn counted(h: &Harness, record: &JobRecord, n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while steps(&read(h, record, "progress-0.txt").await).len() < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run never counted"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The SLURM state of `id` (the test asks, not the library).
async fn slurm_state(h: &Harness, id: &str) -> String {
    remote(
        h,
        Command::new("squeue").args(["--noheader", "--format=%T", "--jobs", id]),
    )
    .await
    .trim()
    .to_string()
}

/// Point 6: a two-node container run whose work takes three walls completes as one
/// record: every step counted once on rank 0, the warning reaching the command inside
/// the container on both nodes in every segment but the last, the secret there in
/// every segment and its sidecar gone at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_node_container_run_of_three_segments_keeps_its_counter_and_secret() {
    let _cluster = cluster::shared().await;
    let h = harness();
    with_credentials(&h).await;
    let total = 61;
    let mut spec = resumable(
        "resume-two-node",
        &counter(total),
        WallTime::from_minutes(1),
        5,
    );
    spec.image = Some(registry_image(&h, "slurm-run/tiny:1"));
    spec.nodes = Some(2);
    spec.secrets = vec!["SLURM_RUN_TEST_RESUME_TOKEN".into()];
    let secret = "resume-secret-value-1234";
    let options = SubmitOptions {
        secret_values: Some(
            [(
                "SLURM_RUN_TEST_RESUME_TOKEN".to_string(),
                secret.to_string(),
            )]
            .into(),
        ),
        ..SubmitOptions::default()
    };
    let slurm = SlurmSubmitOptions {
        nccl_probe: NcclProbe::Never,
        ..SlurmSubmitOptions::default()
    };
    let record = h.backend.submit_with(&spec, options, slurm).await.unwrap();
    let done = wait_terminal(&h.backend, record.id(), 480).await;
    let record = done.into_record();
    assert_eq!(record.state(), JobState::Complete, "{record:?}");
    assert!(record.restarts() >= 2, "{record:?}");
    assert_eq!(
        record.segments().len() as u32,
        record.restarts() + 1,
        "{record:?}"
    );
    assert!(
        record.segments().iter().all(|s| s.nodes().len() == 2),
        "{record:?}"
    );
    // What each segment used, from accounting (issue 41): two nodes x one GPU for the
    // segment's elapsed time, at most its one-minute wall; the record sums them.
    for segment in record.segments() {
        let usage = segment
            .usage()
            .unwrap_or_else(|| panic!("no usage: {segment:?}"));
        let elapsed = usage.elapsed_s.expect("elapsed");
        assert!(elapsed > 0 && elapsed <= 60 + 30, "{usage:?}");
        assert_eq!(usage.gpus, Some(2), "{usage:?}");
        assert_eq!(usage.gpu_seconds, Some(2 * elapsed), "{usage:?}");
    }
    let used = record.usage_total().expect("the segments summed");
    assert_eq!(used.runs as usize, record.segments().len(), "{used:?}");
    assert_eq!(
        used.elapsed_s,
        Some(
            record
                .segments()
                .iter()
                .filter_map(|s| s.usage()?.elapsed_s)
                .sum()
        )
    );
    assert_eq!(
        steps(&read(&h, &record, "progress-0.txt").await),
        (1..=total).collect::<Vec<_>>()
    );
    // Rank 1 resumes from rank 0's checkpoint: its steps rise within each segment.
    let rank1 = steps(&read(&h, &record, "progress-1.txt").await);
    assert_eq!(rank1.last(), Some(&total), "{rank1:?}");
    let restarts: Vec<String> = (0..record.restarts()).map(|n| n.to_string()).collect();
    for rank in ["0", "1"] {
        let warned = read(&h, &record, &format!("warned-{rank}")).await;
        assert_eq!(
            warned.lines().collect::<Vec<_>>(),
            restarts,
            "rank {rank} warned in every continued segment"
        );
        let tokens = read(&h, &record, &format!("token-{rank}")).await;
        let digests: Vec<&str> = tokens
            .lines()
            .filter_map(|l| l.split_once(' ').map(|p| p.1))
            .collect();
        assert_eq!(digests.len() as u32, record.restarts() + 1, "{tokens}");
        assert!(
            digests.windows(2).all(|w| w[0] == w[1]) && digests[0] != "e3b0c44298fc1c14",
            "the secret in every segment: {tokens}"
        );
    }
    let sidecar = remote(
        &h,
        Command::new("bash")
            .arg("-c")
            .arg(r#"ls "$1"/env 2>/dev/null | wc -l"#)
            .arg("ls")
            .arg(record.results_dir().as_str()),
    )
    .await;
    assert_eq!(sidecar.trim(), "0", "the sidecar is gone at the end");
    assert!(!record.secrets_staged(), "{record:?}");
    let log = h
        .backend
        .logs(
            record.id(),
            LogOptions {
                stream: LogStream::Out,
                tail: 1000,
                ..LogOptions::default()
            },
        )
        .await
        .unwrap();
    assert!(!log.contains(secret));
    assert!(
        log.contains("segment 3 of job"),
        "the log appends across segments: {log}"
    );
}

/// Submit a job of the GPU partition (a higher tier) that needs both nodes whole and
/// sleeps `secs`: it preempts whatever runs in the preemptible partitions. Its record.
async fn preemptor(h: &Harness, name: &str, secs: u32) -> JobRecord {
    let mut blocker = small_spec(name, &format!("sleep {secs}"));
    blocker.gpus_per_node = None;
    blocker.gpus = Some(16);
    h.backend
        .submit(&blocker, SubmitOptions::default())
        .await
        .unwrap()
}

/// A resumable counter of `total` steps in `partition` (five-minute wall, three
/// restarts), preempted a few steps in by a job of the GPU partition that needs both
/// nodes whole (a higher tier). Returns the run's record once it has ended, its first
/// SLURM job, and the preemptor's status once it has ended.
async fn preempted_run(
    h: &Harness,
    name: &str,
    partition: &str,
    total: u32,
) -> (JobRecord, String, slurm_core::JobStatus) {
    let mut spec = resumable(name, &counter(total), WallTime::from_minutes(5), 3);
    spec.partition = Some(partition.into());
    let (record, first) = running(h, &spec).await;
    counted(h, &record, 5).await;
    let preemptor = preemptor(h, &format!("{name}-preemptor"), 5).await;
    let record = wait_terminal(&h.backend, record.id(), 360)
        .await
        .into_record();
    let preemptor = wait_terminal(&h.backend, preemptor.id(), 120).await;
    (record, first, preemptor)
}

/// Point 6: a run in the preemptible partition, preempted by a job of the GPU partition
/// that needs every node, gets its warning at the preemption (GraceTime,
/// preempt_send_user_signal), checkpoints, and resumes once the other job is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preempted_run_resumes_from_its_checkpoint() {
    let _cluster = cluster::exclusive().await;
    let h = harness();
    let total = 30;
    let (record, _, preemptor) = preempted_run(&h, "resume-preempted", PREEMPTIBLE, total).await;
    assert_eq!(record.state(), JobState::Complete, "{record:?}");
    assert_eq!(record.restarts(), 1, "{record:?}");
    assert_eq!(
        record.segments()[0].ended(),
        Some(SegmentEnd::Preemption),
        "{record:?}"
    );
    assert!(
        record.history().iter().any(|t| t.message().is_some_and(
            |m| m.starts_with("continued after a preemption: segment 2, resumes from ckpt/")
        )),
        "{record:?}"
    );
    assert_eq!(
        steps(&read(&h, &record, "progress-0.txt").await),
        (1..=total).collect::<Vec<_>>()
    );
    assert_eq!(preemptor.state(), JobState::Complete, "{preemptor:?}");
}

/// Point 2, a cluster that cancels at a preemption: a run in the partition whose
/// preempted jobs are cancelled (`PreemptMode=CANCEL`) resumes from its checkpoint on
/// its one record. From Slurm 23.02 the preempted segment leaves its end to the
/// controller, which ends the job PREEMPTED, and the library continues the run as a
/// fresh job; Slurm 22.05 would end a job that finishes in its grace time COMPLETED, so
/// there the segment requeues itself and the same job goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_the_cluster_cancels_at_a_preemption_resumes_from_its_checkpoint() {
    let _cluster = cluster::exclusive().await;
    let h = harness();
    let total = 30;
    let (record, first, preemptor) =
        preempted_run(&h, "resume-preempt-cancel", PREEMPTIBLE_CANCEL, total).await;
    assert_eq!(record.state(), JobState::Complete, "{record:?}");
    assert_eq!(record.restarts(), 1, "{record:?}");
    let segments = record.segments();
    assert_eq!(segments.len(), 2, "{record:?}");
    assert_eq!(
        segments[0].ended(),
        Some(SegmentEnd::Preemption),
        "{record:?}"
    );
    assert!(
        segments[0]
            .checkpoint()
            .is_some_and(|c| c.starts_with("ckpt/")),
        "{record:?}"
    );
    if h.testbed.slurm_release() >= (23, 2) {
        assert_ne!(
            segments[1].job(),
            first,
            "the controller ended the preempted job: a fresh job goes on: {record:?}"
        );
        let accounted = remote(
            &h,
            Command::new("sacct").args([
                "--noheader",
                "-X",
                "--parsable2",
                "--format=State",
                "--jobs",
                &first,
            ]),
        )
        .await;
        assert_eq!(accounted.trim(), "PREEMPTED", "the first job in accounting");
    } else {
        assert_eq!(
            segments[1].job(),
            first,
            "on 22.05 the segment requeued itself: {record:?}"
        );
    }
    assert_eq!(
        steps(&read(&h, &record, "progress-0.txt").await),
        (1..=total).collect::<Vec<_>>()
    );
    assert_eq!(preemptor.state(), JobState::Complete, "{preemptor:?}");
}

/// Point 6, `MaxBatchRequeue` reached: from Slurm 23.02 the controller requeues a job
/// that ends in its preemption grace time as a batch requeue, counted against
/// `MaxBatchRequeue` (5, the default the test bed keeps), and the fifth holds it
/// (REQUEUE_HOLD, "launch failure limit exceeded requeued held"): the run
/// goes on as a fresh job on its record and completes, its count intact. Slurm 22.05
/// never counts the requeue a job asks for itself, so there the same job is requeued
/// each time and never held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_preempted_until_max_batch_requeue_holds_it_goes_on_as_a_fresh_job() {
    let _cluster = cluster::exclusive().await;
    let h = harness();
    let total = 45;
    let preemptions: u32 = 5;
    let mut spec = resumable(
        "resume-max-requeue",
        &counter(total),
        WallTime::from_minutes(5),
        8,
    );
    spec.partition = Some(PREEMPTIBLE.into());
    let (record, first) = running(&h, &spec).await;
    for preemption in 0..preemptions {
        // A step into this segment, a job that needs both nodes whole comes in a higher
        // tier; once it is done, the run is running again in its next segment.
        let seen = steps(&read(&h, &record, "progress-0.txt").await).len();
        counted(&h, &record, seen + 1).await;
        let preemptor = preemptor(&h, &format!("resume-max-requeue-by-{preemption}"), 2).await;
        let preemptor = wait_terminal(&h.backend, preemptor.id(), 120).await;
        assert_eq!(preemptor.state(), JobState::Complete, "{preemptor:?}");
        wait_until(&h.backend, record.id(), 180, |s| {
            s.record().restarts() > preemption && s.state() == JobState::Running
        })
        .await;
    }
    let record = wait_terminal(&h.backend, record.id(), 300)
        .await
        .into_record();
    assert_eq!(record.state(), JobState::Complete, "{record:?}");
    assert_eq!(record.restarts(), preemptions, "{record:?}");
    let segments = record.segments();
    assert!(
        segments[..preemptions as usize]
            .iter()
            .all(|s| s.ended() == Some(SegmentEnd::Preemption)),
        "{record:?}"
    );
    let jobs: Vec<&str> = segments.iter().map(|s| s.job()).collect();
    let last = preemptions as usize;
    assert!(jobs[..last].iter().all(|j| *j == first), "{jobs:?}");
    if h.testbed.slurm_release() >= (23, 2) {
        assert_ne!(jobs[last], first, "held, then a fresh job: {record:?}");
        assert!(
            record
                .history()
                .iter()
                .any(|t| t.message().is_some_and(|m| {
                    m.starts_with(&format!("continued as the fresh job {}", jobs[last]))
                        && m.contains("launch failure limit exceeded requeued held")
                })),
            "{record:?}"
        );
    } else {
        assert_eq!(jobs[last], first, "22.05 never holds it: {record:?}");
    }
    assert_eq!(
        steps(&read(&h, &record, "progress-0.txt").await),
        (1..=total).collect::<Vec<_>>()
    );
}

/// Point 2: a run whose requeue Slurm refuses (requeue disabled on the running job, as
/// an administrator or a MaxBatchRequeue'd cluster leaves it) is continued as a fresh
/// job that the one record follows, resuming from its checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_slurm_will_not_requeue_continues_as_a_fresh_job() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let total = 40;
    let spec = resumable(
        "resume-refused",
        &counter(total),
        WallTime::from_minutes(1),
        3,
    );
    let (record, first) = running(&h, &spec).await;
    remote(
        &h,
        Command::new("scontrol").args(["update", &format!("JobId={first}"), "Requeue=0"]),
    )
    .await;
    let done = wait_terminal(&h.backend, record.id(), 300).await;
    let record = done.into_record();
    assert_eq!(record.state(), JobState::Complete, "{record:?}");
    // Slurm may send the wall's signal up to a minute early (its time-limit check runs
    // every 30 to 60 s): Slurm may requeue the job itself before the test disables it,
    // and the fresh job may be requeued once more. So: the segments of the first job,
    // then a fresh job the record follows, announced as such.
    let jobs: Vec<&str> = record.segments().iter().map(|s| s.job()).collect();
    assert_eq!(record.restarts() as usize, jobs.len() - 1, "{record:?}");
    assert_eq!(jobs[0], first);
    let fresh = jobs.iter().position(|j| *j != first).expect("a fresh job");
    assert!(
        jobs[fresh..].iter().all(|j| *j == jobs[fresh]),
        "{record:?}"
    );
    assert_eq!(record.backend_ref().unwrap().native_id, jobs[fresh]);
    assert!(
        record.history().iter().any(|t| t
            .message()
            .is_some_and(|m| m.contains(&format!("continued as the fresh job {}", jobs[fresh])))),
        "{record:?}"
    );
    assert_eq!(
        steps(&read(&h, &record, "progress-0.txt").await),
        (1..=total).collect::<Vec<_>>()
    );
}

/// Point 2: a run Slurm holds after requeueing it (what MaxBatchRequeue launch failures
/// or a failed `--get-user-env` leave: REQUEUE_HOLD; here an administrator's
/// `scontrol requeuehold`) is continued as a fresh job; the held one is cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_run_continues_as_a_fresh_job() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let total = 20;
    let spec = resumable("resume-held", &counter(total), WallTime::from_minutes(2), 3);
    let (record, first) = running(&h, &spec).await;
    // A few steps in (the command runs), the job is requeued held.
    counted(&h, &record, 3).await;
    admin(&h.testbed, "scontrol", &["requeuehold", &first]);
    let done = wait_terminal(&h.backend, record.id(), 300).await;
    let record = done.into_record();
    assert_eq!(record.state(), JobState::Complete, "{record:?}");
    assert_eq!(record.segments().len(), 2, "{record:?}");
    assert_ne!(record.segments()[1].job(), first, "{record:?}");
    let held = slurm_state(&h, &first).await;
    assert!(
        held.is_empty() || held == "CANCELLED",
        "the held job goes: {held}"
    );
    let progress = steps(&read(&h, &record, "progress-0.txt").await);
    assert_eq!(progress.last(), Some(&total), "{progress:?}");
}
