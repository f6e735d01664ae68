//! Pipelines and sweeps on the test bed (issue 14, point 4): dependencies enforced by
//! SLURM, arrays polled in one round trip, and retries that avoid the bad node.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use slurm_core::{
    ArraySpec, Backend, Command, Dependency, ErrorKind, JobRecord, JobState, LogOptions, Scalar,
    SubmitOptions, Sweep,
};
use slurm_run_testsupport::backend::{
    down_node, harness, last_message, remote, small_spec, staged_script, wait_state, wait_terminal,
    watch_retrying, Harness,
};
use slurm_run_testsupport::cluster;

/// sacct's Start, End and NodeList of a job (its `-X` row).
async fn sacct_times(h: &Harness, record: &JobRecord) -> (String, String, String) {
    let native = record.backend_ref().unwrap().native_id.clone();
    let out = remote(
        h,
        Command::new("sacct").args([
            "--noheader",
            "-X",
            "--parsable2",
            "--format=Start,End,NodeList",
            &format!("--jobs={native}"),
        ]),
    )
    .await;
    let line = out.lines().last().unwrap_or_default().to_string();
    let mut parts = line.split('|').map(str::to_string);
    (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    )
}

async fn submit_after(h: &Harness, name: &str, command: &str, parent: &JobRecord) -> JobRecord {
    let options = SubmitOptions {
        after: vec![Dependency::ok(parent.id().clone())],
        ..SubmitOptions::default()
    };
    h.backend
        .submit(&small_spec(name, command), options)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_stage_pipeline_runs_in_order() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let train = h
        .backend
        .submit(
            &small_spec("train", "sleep 3; echo trained"),
            SubmitOptions::default(),
        )
        .await
        .unwrap();
    let evaluate = submit_after(&h, "evaluate", "sleep 1; echo evaluated", &train).await;
    let export = submit_after(&h, "export", "echo exported", &evaluate).await;
    // SLURM holds them, not the client: the script carries the parent's id.
    let script = staged_script(&h, &export).await;
    let evaluate_native = evaluate.backend_ref().unwrap().native_id.clone();
    assert!(
        script.contains(&format!("#SBATCH --dependency=afterok:{evaluate_native}\n")),
        "{script}"
    );
    let pending = h.backend.status(export.id()).await.unwrap();
    assert_eq!(pending.state(), JobState::Pending);
    for record in [&train, &evaluate, &export] {
        let done = wait_terminal(&h.backend, record.id(), 180).await;
        assert_eq!(done.state(), JobState::Complete, "{:?}", done.native());
    }
    let (_, train_end, _) = sacct_times(&h, &train).await;
    let (evaluate_start, evaluate_end, _) = sacct_times(&h, &evaluate).await;
    let (export_start, _, _) = sacct_times(&h, &export).await;
    assert!(
        evaluate_start >= train_end,
        "{evaluate_start} < {train_end}"
    );
    assert!(
        export_start >= evaluate_end,
        "{export_start} < {evaluate_end}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_parent_ends_its_children_and_leaves_nothing_pending() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let parent = h
        .backend
        .submit(
            &small_spec("parent", "echo 'KeyError: lr' >&2; exit 2"),
            SubmitOptions::default(),
        )
        .await
        .unwrap();
    let child = submit_after(&h, "child", "echo never", &parent).await;
    let grandchild = submit_after(&h, "grandchild", "echo never", &child).await;
    let failed = wait_terminal(&h.backend, parent.id(), 120).await;
    assert_eq!(failed.state(), JobState::Error);
    for (record, named) in [(&child, &parent), (&grandchild, &child)] {
        let done = wait_terminal(&h.backend, record.id(), 120).await;
        assert_eq!(done.state(), JobState::Error, "{:?}", done.native());
        let message = last_message(done.record());
        assert!(message.contains(named.id().as_str()), "{message}");
        assert!(message.contains("can never be satisfied"), "{message}");
    }
    let natives: Vec<String> = [&child, &grandchild]
        .iter()
        .map(|r| r.backend_ref().unwrap().native_id.clone())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let queue = remote(
            &h,
            Command::new("squeue").args([
                "--noheader",
                "--states=PENDING",
                "--format=%i",
                &format!("--jobs={}", natives.join(",")),
            ]),
        )
        .await;
        if queue.trim().is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "still pending: {queue}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_array_of_eight_runs_two_at_a_time_polled_in_one_round_trip() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let mut spec = small_spec("array8", "sleep 2; echo task-$TASK_INDEX");
    spec.array = Some(ArraySpec {
        size: Some(8),
        max_parallel: Some(2),
        ..ArraySpec::default()
    });
    let record = h
        .backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap();
    let native = record.backend_ref().unwrap().native_id.clone();
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut most_running = 0;
    let mut polls = 0;
    let mut one_trip_polls = 0;
    loop {
        h.transport.reset();
        let status = h.backend.status(record.id()).await.unwrap();
        let labels = h.transport.labels();
        polls += 1;
        let running = status
            .tasks()
            .values()
            .filter(|n| n.state == "RUNNING")
            .count();
        assert!(
            running <= 2,
            "{running} tasks RUNNING: {:?}",
            status.tasks()
        );
        most_running = most_running.max(running);
        if !status.tasks().is_empty() && labels.iter().all(|l| l.starts_with("poll ")) {
            assert_eq!(labels.len(), 1, "one round trip for every task: {labels:?}");
            assert!(labels[0].starts_with("poll 1 job(s)"), "{labels:?}");
            one_trip_polls += 1;
        }
        if status.state().is_terminal() {
            assert_eq!(status.state(), JobState::Complete, "{:?}", status.record());
            break;
        }
        assert!(Instant::now() < deadline, "{:?}", status.record());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(most_running, 2, "two at a time, in {polls} polls");
    assert!(
        one_trip_polls > polls / 2,
        "{one_trip_polls} of {polls} polls were one round trip"
    );
    let record = h.backend.record(record.id()).await.unwrap();
    assert_eq!(record.tasks().len(), 8);
    assert!(record
        .tasks()
        .values()
        .all(|t| t.state() == JobState::Complete));
    // Each task has its own log folder and results folder.
    let listing = remote(
        &h,
        Command::new("bash")
            .arg("-c")
            .arg("cd \"$1\" && ls -d logs/*/ tasks/*/")
            .arg("x")
            .arg(record.results_dir().as_str()),
    )
    .await;
    for task in 0..8 {
        assert!(
            listing.contains(&format!("logs/{}-{native}_{task}/", record.id())),
            "{listing}"
        );
        assert!(listing.contains(&format!("tasks/{task}/")), "{listing}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_gives_each_task_its_values_from_a_staged_file() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let mut spec = small_spec("sweep", "echo \"lr=$LR batch=$BATCH\"");
    spec.sweep = Some(Sweep::Grid(BTreeMap::from([
        (
            "BATCH".to_string(),
            vec![Scalar("32".into()), Scalar("64".into())],
        ),
        (
            "LR".to_string(),
            vec![Scalar("0.1".into()), Scalar("it's 1e-3".into())],
        ),
    ])));
    let record = h
        .backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap();
    let done = wait_terminal(&h.backend, record.id(), 180).await;
    assert_eq!(done.state(), JobState::Complete, "{:?}", done.record());
    let expected = [
        "lr=0.1 batch=32",
        "lr=it's 1e-3 batch=32",
        "lr=0.1 batch=64",
        "lr=it's 1e-3 batch=64",
    ];
    for (task, line) in expected.iter().enumerate() {
        let log = h
            .backend
            .logs(
                record.id(),
                LogOptions {
                    task: Some(task as u32),
                    ..LogOptions::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(log.trim(), *line, "task {task}");
    }
    // The values are in one staged file, not in the script or any argv.
    let script = staged_script(&h, &record).await;
    assert!(
        !script.contains("1e-3") && script.contains("sweep/params.sh"),
        "{script}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_failure_retry_avoids_the_node_and_the_dependant_follows() {
    let _cluster = cluster::exclusive().await;
    let h = harness();
    // No --requeue: the node failure ends the job (no two-minute BeginTime wait). The
    // first run marks that it ran (a file beside the job folders) and waits to be
    // killed; the retry finds the mark and succeeds at once.
    let marker = format!("../.node-fail-{:08x}", rand_u32());
    let mut spec = small_spec(
        "on-bad-node",
        &format!("if [ -e {marker} ]; then echo retried; else touch {marker}; sleep 300; fi"),
    );
    spec.requeue = Some(false);
    let parent = h
        .backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap();
    let running = wait_state(&h.backend, parent.id(), JobState::Running, 120).await;
    let bad = running
        .record()
        .nodes()
        .first()
        .cloned()
        .expect("it runs on a node");
    let child = submit_after(&h, "after-retry", "echo followed", &parent).await;
    // RUNNING is the allocation: down the node only once the command has left its mark
    // (on a busy machine the batch script may not have reached it yet).
    let mark = format!(
        "{}/{}",
        h.testbed.get("SLURM_BASE_RESULTS_DIR"),
        marker.trim_start_matches("../")
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while remote(&h, Command::new("ls").arg("-a").arg(&mark))
        .await
        .trim()
        != mark
    {
        assert!(
            Instant::now() < deadline,
            "the first run never started its command"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    let _resume = down_node(&h.testbed, &bad, "slurm-run-test");
    let (retries, errors) = watch_retrying(
        &h.backend,
        &[parent.id().clone(), child.id().clone()],
        1,
        240,
    )
    .await;
    assert!(errors.is_empty(), "{errors:?}");
    let retry = retries.into_iter().next();
    let first = h.backend.record(parent.id()).await.unwrap();
    assert_eq!(first.state(), JobState::Error);
    assert!(first.node_fault(), "{first:?}");
    let retry = h
        .backend
        .record(retry.expect("retried").id())
        .await
        .unwrap();
    assert_eq!(retry.excluded_nodes(), vec![bad.clone()]);
    let (_, _, ran_on) = sacct_times(&h, &retry).await;
    assert!(
        !ran_on.is_empty() && ran_on != bad,
        "the retry ran on {ran_on}, not {bad}"
    );
    assert_eq!(retry.state(), JobState::Complete, "{retry:?}");
    let child = h.backend.record(child.id()).await.unwrap();
    assert_eq!(
        child.after(),
        vec![Dependency::ok(retry.id().clone())],
        "{child:?}"
    );
    assert_eq!(
        child.state(),
        JobState::Complete,
        "the dependant ran after the retry: {child:?}"
    );
    let (child_start, _, _) = sacct_times(&h, &child).await;
    let (_, retry_end, _) = sacct_times(&h, &retry).await;
    assert!(child_start >= retry_end, "{child_start} < {retry_end}");
}

fn rand_u32() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() ^ (d.as_secs() as u32))
        .unwrap_or(7)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_exclude_faulty_nodes_until_too_few_remain() {
    let _cluster = cluster::shared().await;
    let h = harness();
    // An Xid is tied to the node: each retry excludes the nodes of the failures before.
    let spec = small_spec(
        "xid",
        "echo 'NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus' >&2; exit 1",
    );
    let first = h
        .backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap();
    let (retries, errors) =
        watch_retrying(&h.backend, std::slice::from_ref(first.id()), 5, 240).await;
    let refusal = errors.into_iter().next();
    // Two nodes: the first retry avoids one, the second would avoid both.
    assert_eq!(retries.len(), 1, "{retries:?}");
    let retry = h.backend.record(retries[0].id()).await.unwrap();
    let first = h.backend.record(first.id()).await.unwrap();
    assert!(first.node_fault() && retry.node_fault());
    assert_eq!(retry.excluded_nodes(), first.nodes());
    assert_ne!(retry.nodes(), first.nodes(), "the retry ran elsewhere");
    let refusal = refusal.expect("the third attempt is refused");
    assert_eq!(refusal.kind(), ErrorKind::Invalid, "{refusal}");
    let text = refusal.to_string();
    assert!(
        text.contains("excluded_nodes") && text.contains("leaves 0 of the 2 node(s)"),
        "{text}"
    );
}
