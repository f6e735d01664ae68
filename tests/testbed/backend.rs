//! The SLURM backend end to end against the real test bed, through Ssh2Transport:
//! preflight, submit exactly once, status, logs, classification, watch, secrets (container
//! jobs: `containers.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::StreamExt;
use slurm_core::testing::Fault;
use slurm_core::{
    Backend, Command, ErrorClass, ErrorKind, JobId, JobState, LogOptions, LogStream, RetryPolicy,
    SubmitOptions, WatchEvent, WatchOptions,
};
use slurm_run_testsupport::backend::{
    depend_raw, harness, jobs_named, remote, small_spec, wait_terminal,
};
use slurm_run_testsupport::bench::cluster::{cancel_all, held_jobs, track};
use slurm_run_testsupport::cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflight_passes_and_names_each_failure_with_a_remedy() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let report = h.backend.preflight(None).await.unwrap();
    assert!(report.passed(), "{report}");
    let names: Vec<&str> = report.checks.iter().map(|c| c.check.as_str()).collect();
    for expected in [
        "ssh",
        "scheduler tools",
        "accounting (sacct)",
        "partition gpu",
        "results root",
    ] {
        assert!(names.contains(&expected), "{names:?}");
    }

    let mut spec = small_spec("pf", "true");
    spec.partition = Some("nosuchpartition".into());
    spec.image = Some("/shared/none.sqsh".into());
    spec.datasets = vec!["lustre:///definitely/not/here".into()];
    let report = h.backend.preflight(Some(&spec)).await.unwrap();
    let failed: BTreeMap<&str, &str> = report
        .failures()
        .map(|c| (c.check.as_str(), c.remedy.as_str()))
        .collect();
    assert!(
        failed["partition nosuchpartition"].contains("sinfo"),
        "{report}"
    );
    // Pyxis is there; the missing image itself is checked by the submit.
    assert!(
        !failed.contains_key("pyxis (srun --container-image)"),
        "{report}"
    );
    assert!(failed["datasets"].contains("stage the data"), "{report}");
    let err = report.into_result().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Preflight);

    // A wall time above the partition's MaxTime is refused before anything is staged.
    let mut long = small_spec("toolong", "true");
    long.time = Some(slurm_core::WallTime::from_hours(5));
    let err = h
        .backend
        .submit(&long, SubmitOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    assert!(err.to_string().contains("time"), "{err}");
    assert!(h
        .backend
        .records(&Default::default())
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_job_completes_and_its_logs_read_back() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let spec = small_spec(
        "single",
        "echo hello-from-$SLURMD_NODENAME; echo to-stderr >&2",
    );
    let record = h
        .backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap();
    assert_eq!(record.state(), JobState::Pending);
    assert!(record.backend_ref().is_some());
    let status = wait_terminal(&h.backend, record.id(), 120).await;
    assert_eq!(status.state(), JobState::Complete, "{status:?}");
    let out = h
        .backend
        .logs(record.id(), LogOptions::default())
        .await
        .unwrap();
    assert!(out.contains("hello-from-n"), "{out:?}");
    let err = h
        .backend
        .logs(
            record.id(),
            LogOptions {
                stream: LogStream::Err,
                tail: 5,
                task: None,
                role: None,
            },
        )
        .await
        .unwrap();
    assert!(err.contains("to-stderr"), "{err:?}");
    let states: Vec<JobState> = status
        .record()
        .history()
        .iter()
        .map(|t| t.state())
        .collect();
    assert_eq!(states.first(), Some(&JobState::Submitting));
    assert_eq!(states.last(), Some(&JobState::Complete));
    // The reference's layout on shared storage.
    let layout = remote(
        &h,
        Command::new("find")
            .arg(record.results_dir().as_str())
            .args(["-maxdepth", "3", "-type", "f"]),
    )
    .await;
    let slurm_id = record.backend_ref().unwrap().native_id.clone();
    for part in [
        "specs/spec.json".to_string(),
        format!("sbatch/job_{}.sbatch", record.id()),
        format!("logs/{}-{slurm_id}/main.out", record.id()),
        format!("logs/{}-{slurm_id}/main.err", record.id()),
    ] {
        assert!(layout.contains(&part), "{part} missing from {layout}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_node_job_shows_both_ranks_in_its_log() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let mut spec = small_spec(
        "twonode",
        "echo rank=$NODE_RANK world=$WORLD_SIZE master=$MASTER_ADDR node=$SLURMD_NODENAME",
    );
    spec.nodes = Some(2);
    let record = h
        .backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap();
    let status = wait_terminal(&h.backend, record.id(), 120).await;
    assert_eq!(status.state(), JobState::Complete, "{status:?}");
    let out = h
        .backend
        .logs(record.id(), LogOptions::default())
        .await
        .unwrap();
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("rank=")).collect();
    assert_eq!(lines.len(), 2, "{out}");
    let ranks: BTreeSet<&str> = lines
        .iter()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(ranks, BTreeSet::from(["rank=0", "rank=1"]));
    let nodes: BTreeSet<&str> = lines
        .iter()
        .map(|l| l.rsplit("node=").next().unwrap())
        .collect();
    assert_eq!(nodes.len(), 2, "both ranks on one node: {out}");
    assert!(lines.iter().all(|l| l.contains("world=2")), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_classed_program_or_infra_from_the_logs() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let program = small_spec(
        "failprog",
        "echo 'Traceback (most recent call last):' >&2; echo \"KeyError: 'lr'\" >&2; exit 3",
    );
    let infra = small_spec(
        "failinfra",
        "echo 'NCCL WARN NET/Socket : NCCL error: unhandled system error' >&2; exit 1",
    );
    let program = h
        .backend
        .submit(&program, SubmitOptions::default())
        .await
        .unwrap();
    let infra = h
        .backend
        .submit(&infra, SubmitOptions::default())
        .await
        .unwrap();
    let status = wait_terminal(&h.backend, program.id(), 120).await;
    assert_eq!(status.state(), JobState::Error);
    assert_eq!(
        status.err_class(),
        Some(ErrorClass::Program),
        "{:?}",
        status.record().history()
    );
    let status = wait_terminal(&h.backend, infra.id(), 120).await;
    assert_eq!(status.state(), JobState::Error);
    assert_eq!(
        status.err_class(),
        Some(ErrorClass::Infra),
        "{:?}",
        status.record().history()
    );

    // A job depending on the failed one can never start: ERROR, not pending forever.
    let mut dependent = small_spec("dependent", "true");
    dependent.extra_sbatch = vec!["--begin=now+1hour".into()];
    let dependent = h
        .backend
        .submit(&dependent, SubmitOptions::default())
        .await
        .unwrap();
    depend_raw(&h, &dependent, &program).await;
    let status = wait_terminal(&h.backend, dependent.id(), 60).await;
    assert_eq!(status.state(), JobState::Error);
    let message = status.record().last_message().to_string();
    assert!(message.contains("DependencyNeverSatisfied"), "{message}");
    remote(&h, Command::new("scancel").arg(status.native_id().unwrap())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submit_cut_after_sbatch_is_reconciled_to_exactly_one_job() {
    let _cluster = cluster::shared().await;
    let h = harness();
    h.transport
        .inner()
        .arm("submit ", Fault::LoseAnswerAfterRun);
    let record = h
        .backend
        .submit(&small_spec("cut", "sleep 2"), SubmitOptions::default())
        .await
        .unwrap();
    let adopted = record
        .history()
        .last()
        .unwrap()
        .message()
        .unwrap()
        .to_string();
    assert!(adopted.contains("adopted"), "{adopted}");
    let jobs = jobs_named(&h, record.id().as_str()).await;
    assert_eq!(jobs.len(), 1, "jobs named {}: {jobs:?}", record.id());
    assert_eq!(jobs[0], record.backend_ref().unwrap().native_id);

    // An empty sbatch answer is reconciled the same way.
    h.transport.inner().arm("submit ", Fault::EmptyStdout);
    let record = h
        .backend
        .submit(&small_spec("empty", "true"), SubmitOptions::default())
        .await
        .unwrap();
    assert_eq!(jobs_named(&h, record.id().as_str()).await.len(), 1);
    assert_eq!(record.state(), JobState::Pending);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_jobs_are_watched_with_one_remote_command_per_cycle() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let submits = (0..50).map(|i| {
        let backend = h.backend.clone();
        async move {
            let mut spec = small_spec(&format!("many{i}"), "true");
            spec.gpus_per_node = Some(0);
            backend
                .submit(&spec, SubmitOptions::default())
                .await
                .unwrap()
        }
    });
    let records = futures::future::join_all(submits).await;
    // One preflight (shared by the concurrent first submits), then one round trip per submit.
    assert_eq!(h.transport.count(), 51, "{:?}", h.transport.labels());
    let ids: Vec<_> = records.iter().map(|r| r.id().clone()).collect();
    h.transport.reset();
    let options = WatchOptions {
        interval: Duration::from_millis(500),
        ..WatchOptions::default()
    };
    let mut events = h.backend.watch(&ids, options);
    let mut completed = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    while let Some(event) = tokio::time::timeout_at(deadline, events.next())
        .await
        .expect("watch ended in time")
    {
        if let WatchEvent::Transition { status, .. } = event.unwrap() {
            if status.state().is_terminal() {
                *completed.entry(status.id().clone()).or_insert(0) += 1;
                assert_eq!(status.state(), JobState::Complete, "{status:?}");
            }
        }
    }
    assert_eq!(completed.len(), 50);
    assert!(
        completed.values().all(|n| *n == 1),
        "each terminal transition once"
    );
    let labels = h.transport.labels();
    assert!(!labels.is_empty());
    assert!(
        labels.iter().all(|l| l.starts_with("poll ")),
        "every remote command of the watch is one poll cycle: {labels:?}"
    );
    assert!(labels[0].starts_with("poll 50 job(s)"), "{}", labels[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_reach_the_job_through_a_shredded_sidecar_and_nowhere_else() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let secret = "tok-3f9a0c51e2d84b7f";
    let mut spec = small_spec(
        "secret",
        "echo len=${#SLURM_RUN_TEST_TOKEN}; echo leak=$SLURM_RUN_TEST_TOKEN",
    );
    spec.secrets = vec!["SLURM_RUN_TEST_TOKEN".into()];
    let options = SubmitOptions {
        secret_values: Some([("SLURM_RUN_TEST_TOKEN".to_string(), secret.to_string())].into()),
        ..SubmitOptions::default()
    };
    let record = h.backend.submit(&spec, options).await.unwrap();
    let status = wait_terminal(&h.backend, record.id(), 120).await;
    assert_eq!(status.state(), JobState::Complete);
    let script = remote(
        &h,
        Command::new("cat").arg(format!(
            "{}/sbatch/job_{}.sbatch",
            record.results_dir(),
            record.id()
        )),
    )
    .await;
    assert!(
        script.contains("source") && !script.contains(secret),
        "the script sources, never holds, the secret"
    );
    let sidecar = format!("{}/env/job_{}.env", record.results_dir(), record.id());
    let gone = remote(
        &h,
        Command::new("bash")
            .arg("-c")
            .arg("test -e \"$1\" && echo present || echo gone")
            .arg("x")
            .arg(&sidecar),
    )
    .await;
    assert_eq!(gone.trim(), "gone");
    let raw_log = remote(
        &h,
        Command::new("bash")
            .arg("-c")
            .arg("cat \"$1\"/logs/*/main.out")
            .arg("x")
            .arg(record.results_dir().as_str()),
    )
    .await;
    assert!(
        raw_log.contains(&format!("len={}", secret.len())),
        "{raw_log}"
    );
    std::env::set_var("SLURM_RUN_TEST_TOKEN", secret);
    let shown = h
        .backend
        .logs(record.id(), LogOptions::default())
        .await
        .unwrap();
    assert!(
        !shown.contains(secret) && shown.contains("leak=[REDACTED]"),
        "{shown}"
    );
    let json = serde_json::to_string(&h.backend.record(record.id()).await.unwrap()).unwrap();
    assert!(!json.contains(secret));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_streams_the_log_until_the_job_ends_and_infra_failures_are_retried() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let spec = small_spec("follow", "for i in 1 2 3 4; do echo line-$i; sleep 1; done");
    let record = h
        .backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap();
    let mut chunks = h.backend.follow_logs(
        record.id(),
        LogOptions::of(LogStream::Out),
        Duration::from_millis(300),
    );
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while let Some(chunk) = tokio::time::timeout_at(deadline, chunks.next())
        .await
        .expect("follow ended in time")
    {
        text.push_str(&chunk.unwrap());
    }
    for i in 1..=4 {
        assert!(text.contains(&format!("line-{i}\n")), "{text:?}");
    }
    assert_eq!(text.matches("line-1").count(), 1, "no line twice: {text:?}");

    // An infra failure is resubmitted by a watch with a retry policy, as a linked record.
    // Fails with an Xid error the first time, succeeds once a marker from the first run exists.
    let flaky = small_spec(
        "flaky",
        "if ls $HOME/.slurm-run-flaky-ok-* >/dev/null 2>&1; then echo ok; else touch $HOME/.slurm-run-flaky-ok-$SLURM_JOB_ID; echo 'GPU has fallen off the bus (Xid 79 error)' >&2; exit 1; fi",
    );
    remote(
        &h,
        Command::new("bash")
            .arg("-c")
            .arg("rm -f $HOME/.slurm-run-flaky-ok-*"),
    )
    .await;
    let first = h
        .backend
        .submit(&flaky, SubmitOptions::default())
        .await
        .unwrap();
    let options = WatchOptions {
        interval: Duration::from_millis(500),
        retry: Some(RetryPolicy::default()),
        ..WatchOptions::default()
    };
    let mut events = h.backend.watch(std::slice::from_ref(first.id()), options);
    let mut retried = None;
    let mut last = None;
    while let Some(event) =
        tokio::time::timeout_at(deadline + Duration::from_secs(120), events.next())
            .await
            .expect("watch ended in time")
    {
        match event.unwrap() {
            WatchEvent::Retried { previous, record } => {
                assert_eq!(&previous, first.id());
                retried = Some(record);
            }
            WatchEvent::Transition { status, .. } => last = Some(status),
            WatchEvent::Unanswered { .. } | WatchEvent::Waiting { .. } => {}
            WatchEvent::Dropped { id, reason } => panic!("{id} dropped: {reason}"),
        }
    }
    remote(
        &h,
        Command::new("bash")
            .arg("-c")
            .arg("rm -f $HOME/.slurm-run-flaky-ok-*"),
    )
    .await;
    let retried = retried.expect("the infra failure was retried");
    assert_eq!(retried.retry_of().as_ref(), Some(&first.id()));
    assert_eq!(retried.attempt(), 2);
    let failed = h.backend.record(first.id()).await.unwrap();
    assert_eq!(
        (failed.state(), failed.err_class()),
        (JobState::Error, Some(ErrorClass::Infra))
    );
    let last = last.unwrap();
    assert_eq!(last.id(), retried.id());
    assert_eq!(last.state(), JobState::Complete);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_many_sends_one_scancel_for_every_job_and_confirms_them_in_its_round_trip() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let mut spec = small_spec("manycancel", "true");
    spec.extra_sbatch = vec!["--begin=now+1hour".into()];
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(
            h.backend
                .submit(&spec, SubmitOptions::default())
                .await
                .unwrap()
                .id()
                .clone(),
        );
    }
    h.transport.reset();
    let records = h.backend.cancel_many(&ids).await.unwrap();
    assert!(
        records.iter().all(|r| r.state() == JobState::Canceled),
        "{records:?}"
    );
    // slurmctld sets a pending job CANCELLED within scancel's RPC: the squeue after the
    // one scancel, in the same round trip, confirms all 5 (no poll, no wait for sacct).
    let labels = h.transport.labels();
    assert_eq!(
        labels,
        ["round trip of 2: scancel, squeue"],
        "one round trip for 5 jobs: {labels:?}"
    );
    // Each job is gone from the queue, CANCELLED by the scheduler.
    for record in &records {
        let native = record.backend_ref().unwrap().native_id.clone();
        let state = remote(
            &h,
            Command::new("squeue")
                .args(["--noheader", "--states=all", "--format=%T", "--jobs"])
                .arg(native),
        )
        .await;
        assert!(
            state.trim().is_empty() || state.trim() == "CANCELLED",
            "{state}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_of_many_jobs_lists_the_users_own_and_answers_for_each_tracked_one() {
    // From MINE_FROM (64) jobs the poll asks squeue for the user's own jobs (`--me`) and
    // keeps the tracked ones on the login node: every tracked job is still answered for,
    // one that ended through sacct, and the user's untracked job changes nothing.
    let _cluster = cluster::shared().await;
    let h = harness();
    let held = held_jobs(&h, 81).await;
    // The last one is the user's but not tracked.
    let tracked = &held[..80];
    let records = track(&h, tracked);
    let cancelled = remote(&h, Command::new("scancel").arg(tracked[7].to_string())).await;
    assert!(cancelled.trim().is_empty(), "{cancelled}");
    // A cancelled job may show COMPLETING for a moment: poll until it has ended, every
    // poll one round trip.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let statuses = loop {
        h.transport.reset();
        let statuses = h.backend.status_many(&records).await.unwrap();
        assert_eq!(
            h.transport.count(),
            1,
            "one round trip: {:?}",
            h.transport.labels()
        );
        if statuses[7].state().is_terminal() {
            break statuses;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the cancelled job never ended: {:?}",
            statuses[7]
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let answered: Vec<&JobId> = statuses.iter().map(|s| s.record().id()).collect();
    assert_eq!(
        answered,
        records.iter().collect::<Vec<_>>(),
        "in the order asked"
    );
    for (n, status) in statuses.iter().enumerate() {
        let want = if n == 7 {
            JobState::Canceled
        } else {
            JobState::Pending
        };
        assert_eq!(status.state(), want, "job {n}: {status:?}");
    }
    // The same jobs asked by a poll of a few (explicit ids) agree.
    let few = h.backend.status_many(&records[..3]).await.unwrap();
    assert!(
        few.iter().all(|s| s.state() == JobState::Pending),
        "{few:?}"
    );
    cancel_all(&h, &held).await;
}
