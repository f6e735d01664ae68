//! What runs cost (issue 41), from the test bed's own accounting (jobacct_gather/linux,
//! `AccountingStorageTRES=gres/gpu`): a two-node job's GPU-hours are its allocated GPUs
//! times its elapsed time as sacct tells them, an array sums its tasks, and what the
//! cluster does not account (GPU utilisation: no NVML here) is null with a note, not 0.

use slurm_core::{ArraySpec, Backend, Command, JobState, SubmitOptions, WallTime};
use slurm_run_testsupport::backend::{harness, remote, small_spec, wait_terminal, Harness};
use slurm_run_testsupport::cluster;

/// sacct's own figures of `job`'s allocations (`-X`: one row per job or array task):
/// the sum of GPUs x elapsed seconds, and of elapsed seconds.
async fn sacct_gpu_seconds(h: &Harness, job: &str) -> (u64, u64) {
    let text = remote(
        h,
        Command::new("sacct").args([
            "-X",
            "--noheader",
            "--parsable2",
            "--format=ElapsedRaw,AllocTRES",
            "--jobs",
            job,
        ]),
    )
    .await;
    let mut gpu_seconds = 0;
    let mut elapsed = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (secs, tres) = line.split_once('|').expect("two fields");
        let secs: u64 = secs.trim().parse().expect("ElapsedRaw");
        let gpus: u64 = tres
            .split(',')
            .find_map(|p| p.strip_prefix("gres/gpu="))
            .unwrap_or_else(|| panic!("no gres/gpu in AllocTRES: {line}"))
            .parse()
            .unwrap();
        gpu_seconds += gpus * secs;
        elapsed += secs;
    }
    (gpu_seconds, elapsed)
}

/// Submit `spec`, wait until it ends, check it COMPLETEd: its record and SLURM job.
async fn completed(h: &Harness, spec: &slurm_core::JobSpec) -> (slurm_core::JobRecord, String) {
    let record = h
        .backend
        .submit(spec, SubmitOptions::default())
        .await
        .expect("submit");
    let record = wait_terminal(&h.backend, record.id(), 240)
        .await
        .into_record();
    assert_eq!(record.state(), JobState::Complete, "{record:?}");
    let job = record.backend_ref().unwrap().native_id.clone();
    (record, job)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_node_jobs_gpu_hours_are_its_allocated_gpus_times_elapsed_as_sacct_says() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let mut spec = small_spec("usage-two-node", "sleep 12");
    spec.nodes = Some(2);
    spec.gpus_per_node = Some(2);
    let (record, job) = completed(&h, &spec).await;
    let usage = record.usage().expect("usage read with the poll's sacct");
    let (gpu_seconds, elapsed) = sacct_gpu_seconds(&h, &job).await;
    assert_eq!(usage.gpus, Some(4), "{usage:?}");
    assert_eq!(usage.elapsed_s, Some(elapsed), "{usage:?}");
    assert_eq!(usage.gpu_seconds, Some(gpu_seconds), "{usage:?}");
    assert!(elapsed >= 12, "{usage:?}");
    let hours = usage.gpu_hours().unwrap();
    assert!(
        (hours - 4.0 * elapsed as f64 / 3600.0).abs() < 1e-9,
        "{hours}"
    );
    assert!(usage.cpus.is_some_and(|c| c >= 2), "{usage:?}");
    assert_eq!(usage.time_limit_s, Some(600), "{usage:?}");
    assert!(usage.queue_wait_s.is_some(), "{usage:?}");
    // The steps' memory, gathered from /proc on the nodes every 5 s
    // (JobAcctGatherFrequency=task=5; a step shorter than that has no sample).
    assert!(usage.max_rss_bytes.is_some_and(|b| b > 0), "{usage:?}");
    // No GPU utilisation is accounted here (no NVML): null, and a note says so.
    assert_eq!(usage.gpu_util_percent, None, "{usage:?}");
    assert!(
        usage.notes.iter().any(|n| n.starts_with("gpu_util")),
        "{usage:?}"
    );
    assert_eq!(record.usage_total().as_ref(), Some(usage));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_arrays_usage_sums_its_tasks() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let mut spec = small_spec("usage-array", "sleep $((2 + SLURM_ARRAY_TASK_ID))");
    spec.time = Some(WallTime::from_minutes(5));
    spec.array = Some(ArraySpec {
        size: Some(3),
        ..ArraySpec::default()
    });
    let (record, job) = completed(&h, &spec).await;
    for (index, task) in record.tasks() {
        let usage = task
            .usage()
            .unwrap_or_else(|| panic!("task {index}: no usage"));
        assert_eq!(usage.gpus, Some(1), "task {index}: {usage:?}");
        assert!(
            usage.elapsed_s.unwrap() >= 2 + u64::from(*index),
            "{usage:?}"
        );
    }
    let total = record.usage_total().expect("the tasks summed");
    let (gpu_seconds, elapsed) = sacct_gpu_seconds(&h, &job).await;
    assert_eq!(total.runs, 3, "{total:?}");
    assert_eq!(total.elapsed_s, Some(elapsed), "{total:?}");
    assert_eq!(total.gpu_seconds, Some(gpu_seconds), "{total:?}");
}
