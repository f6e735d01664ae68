//! What runs cost (issue 41), from the test bed's own accounting (jobacct_gather/linux,
//! `AccountingStorageTRES=gres/gpu`): a two-node job's GPU-hours are its allocated GPUs
//! times its elapsed time as sacct tells them, an array sums its tasks, and what the
//! cluster does not account (GPU utilisation: no NVML here) is null with a note, not 0.

use std::collections::BTreeMap;

use slurm_core::{
    ArraySpec, Backend, Command, JobSpec, JobState, RoleSpec, SubmitOptions, WallTime,
};
use slurm_run_testsupport::backend::{harness, remote, small_spec, wait_terminal, Harness};
use slurm_run_testsupport::cluster;

/// sacct's own figures of `job`'s allocations (`-X`: one row per job, array task or
/// component): the sum of GPUs x elapsed seconds, and of elapsed seconds.
async fn sacct_gpu_seconds(h: &Harness, job: &str) -> (u64, u64) {
    let rows = sacct_allocations(h, job).await;
    assert!(!rows.is_empty(), "no sacct rows of {job}");
    let gpu_seconds = rows.iter().map(|(_, secs, gpus)| gpus * secs).sum();
    (gpu_seconds, rows.iter().map(|(_, secs, _)| secs).sum())
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

/// sacct's own allocation rows of `job` (`-X`): each row's id (`123+1`), elapsed
/// seconds and GPUs.
async fn sacct_allocations(h: &Harness, job: &str) -> Vec<(String, u64, u64)> {
    let text = remote(
        h,
        Command::new("sacct").args([
            "-X",
            "--noheader",
            "--parsable2",
            "--format=JobID,ElapsedRaw,AllocTRES",
            "--jobs",
            job,
        ]),
    )
    .await;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split('|').collect();
            let gpus = fields[2]
                .split(',')
                .find_map(|p| p.strip_prefix("gres/gpu="))
                .map_or(0, |g| g.parse().unwrap());
            (fields[0].to_string(), fields[1].parse().unwrap(), gpus)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_role_jobs_usage_is_its_components_and_each_role_has_its_own() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let own = |command: &str, gpus: u32| RoleSpec {
        nodes: Some(1),
        gpus_per_node: Some(gpus),
        cpus_per_task: Some(1),
        ..RoleSpec::new(command)
    };
    let mut spec = JobSpec::new("usage-roles", "");
    spec.time = Some(WallTime::from_minutes(5));
    // Components in name order of the roles of their own nodes: trainer +0, worker +1.
    spec.roles = BTreeMap::from([
        ("trainer".to_string(), own("sleep 9", 2)),
        ("worker".to_string(), own("sleep 6", 1)),
        (
            "watch".to_string(),
            RoleSpec {
                on: Some("trainer".to_string()),
                ..RoleSpec::new("sleep 7")
            },
        ),
    ]);
    let (record, job) = completed(&h, &spec).await;
    let rows = sacct_allocations(&h, &job).await;
    let row = |id: String| {
        rows.iter()
            .find(|r| r.0 == id)
            .unwrap_or_else(|| panic!("no sacct row {id}: {rows:?}"))
    };
    let (_, trainer_elapsed, trainer_gpus) = row(format!("{job}+0"));
    let (_, worker_elapsed, worker_gpus) = row(format!("{job}+1"));
    assert_eq!((*trainer_gpus, *worker_gpus), (2, 1), "{rows:?}");

    let usage = record
        .usage()
        .expect("the job's usage: its components summed");
    assert_eq!(usage.gpus, Some(3), "{usage:?}");
    assert_eq!(
        usage.gpu_seconds,
        Some(2 * trainer_elapsed + worker_elapsed),
        "{usage:?}"
    );
    assert_eq!(record.usage_total().as_ref(), Some(usage));

    let role = |name: &str| {
        record.roles()[name]
            .usage()
            .unwrap_or_else(|| panic!("role {name}: no usage: {:?}", record.roles()[name]))
            .clone()
    };
    let trainer = role("trainer");
    assert_eq!(trainer.gpus, Some(2), "{trainer:?}");
    assert_eq!(trainer.elapsed_s, Some(*trainer_elapsed), "{trainer:?}");
    assert_eq!(
        trainer.gpu_seconds,
        Some(2 * trainer_elapsed),
        "{trainer:?}"
    );
    // Its one step ran 9 s: past the first 5-second sample of its memory.
    assert!(trainer.max_rss_bytes.is_some_and(|b| b > 0), "{trainer:?}");
    let worker = role("worker");
    assert_eq!(worker.gpus, Some(1), "{worker:?}");
    assert_eq!(worker.gpu_seconds, Some(*worker_elapsed), "{worker:?}");
    // A role beside another holds none of the allocation: its GPUs are the trainer's,
    // counted there; its time is its own step's.
    let watch = role("watch");
    assert_eq!(watch.gpus, Some(0), "{watch:?}");
    assert_eq!(watch.gpu_seconds, Some(0), "{watch:?}");
    assert!(
        watch
            .elapsed_s
            .is_some_and(|e| (7..=*trainer_elapsed).contains(&e)),
        "{watch:?}"
    );
    assert!(
        watch.notes.iter().any(|n| n.contains("trainer")),
        "{watch:?}"
    );
    let roles_gpu_seconds: u64 = ["trainer", "worker", "watch"]
        .iter()
        .map(|r| role(r).gpu_seconds.unwrap())
        .sum();
    assert_eq!(Some(roles_gpu_seconds), usage.gpu_seconds);
}

/// A job that asks for no GPU holds none: its GPU-hours are 0, not "not accounted" (its
/// AllocTRES has no `gres/gpu` on a cluster that accounts GPUs), so sums over it keep
/// their GPU-hours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_asking_no_gpu_used_zero_gpu_hours_not_an_unknown() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let mut spec = small_spec("usage-cpu-only", "sleep 2");
    spec.gpus_per_node = Some(0);
    let (record, job) = completed(&h, &spec).await;
    let rows = sacct_allocations(&h, &job).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].2, 0, "no gres/gpu in its AllocTRES: {rows:?}");
    let usage = record.usage().expect("usage");
    assert_eq!(
        (usage.gpus, usage.gpu_seconds),
        (Some(0), Some(0)),
        "{usage:?}"
    );
    assert!(usage.cpu_seconds.is_some_and(|s| s > 0), "{usage:?}");
    assert!(
        !usage.notes.iter().any(|n| n.starts_with("gpus")),
        "{usage:?}"
    );
}
