//! Wall time at the edges, as a user meets them (issue 14, point 5): a partition whose
//! MaxTime is UNLIMITED takes a long time, a one-minute smoke test runs, and a command
//! killed by its own child timeout says so.

use slurm_core::{
    Backend, Command, ErrorClass, JobState, LogOptions, LogStream, SubmitOptions, WallTime,
};
use slurm_run_testsupport::backend::{
    harness, last_message, remote, small_spec, staged_script, wait_terminal,
};
use slurm_run_testsupport::cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlimited_partition_takes_a_long_wall_time() {
    let _cluster = cluster::shared().await;
    let h = harness();
    // The test bed's CPU partition has MaxTime=INFINITE; its GPU partition 04:00:00.
    let partition = h.testbed.get("SLURM_CONVERT_PARTITION").to_string();
    let mut spec = small_spec("unlimited", "true");
    spec.gpus_per_node = Some(0);
    spec.partition = Some(partition);
    spec.time = Some(WallTime::from_hours(30));
    let record = h
        .backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap();
    let native = record.backend_ref().unwrap().native_id.clone();
    let limit = remote(
        &h,
        Command::new("scontrol").args(["--oneliner", "show", "job", native.as_str()]),
    )
    .await;
    assert!(limit.contains("TimeLimit=1-06:00:00"), "{limit}");
    let done = wait_terminal(&h.backend, record.id(), 120).await;
    assert_eq!(done.state(), JobState::Complete, "{:?}", done.native());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_minute_smoke_test_runs() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let mut spec = small_spec("smoke-1min", "echo smoke-ok");
    spec.time = Some(WallTime::parse("00:01:00").unwrap());
    let record = h
        .backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap();
    let done = wait_terminal(&h.backend, record.id(), 120).await;
    assert_eq!(done.state(), JobState::Complete, "{:?}", done.native());
    let script = staged_script(&h, &record).await;
    assert!(script.contains("timeout 57s srun"), "{script}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_killed_by_its_child_timeout_says_so() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let mut spec = small_spec("child-timeout", "echo started; sleep 120");
    spec.time = Some(WallTime::parse("00:02:00").unwrap());
    spec.child_timeout = Some(WallTime::parse("00:00:03").unwrap());
    let timed_out = h
        .backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap();
    let crash = h
        .backend
        .submit(
            &small_spec("crash", "echo started; exit 1"),
            SubmitOptions::default(),
        )
        .await
        .unwrap();
    let done = wait_terminal(&h.backend, timed_out.id(), 120).await;
    assert_eq!(done.state(), JobState::Error, "{:?}", done.native());
    assert_eq!(done.err_class(), Some(ErrorClass::Program));
    assert_eq!(done.native().as_ref().and_then(|n| n.exit_code), Some(124));
    let message = last_message(done.record());
    assert!(message.contains("child timeout"), "{message}");
    assert!(message.contains("not a crash"), "{message}");
    let err = h
        .backend
        .logs(
            timed_out.id(),
            LogOptions {
                stream: LogStream::Err,
                tail: 20,
                task: None,
                role: None,
            },
        )
        .await
        .unwrap();
    assert!(
        err.contains("reached its child timeout of 3 seconds"),
        "{err}"
    );

    let crashed = wait_terminal(&h.backend, crash.id(), 120).await;
    assert_eq!(crashed.state(), JobState::Error);
    let message = crashed.record().last_message().to_string();
    assert!(
        !message.is_empty() && !message.contains("timeout"),
        "{message}"
    );
}
