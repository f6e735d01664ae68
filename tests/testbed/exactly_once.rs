//! Exactly once and nothing left behind (issue 11), against the real test bed: a
//! database stopped under a submit, a record whose submit is unknown while the
//! scheduler cannot answer, two watchers (two slurmctl processes) retrying one
//! infrastructure failure, a job that rewrites its spec before failing, and the
//! secrets canary after every ending (a refusal, a cancel while pending, a dependency
//! that can never be satisfied, a completion, a `scontrol requeue`, a node failure with
//! and without requeue). The scenarios that need minutes (the controller stopped for
//! 30 s, clients killed at random points) are in the soak (`make soak`).

use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt;
use slurm_core::testing::{Fault, RecordFixture};
use slurm_core::{
    Backend, Command, ErrorClass, JobRecord, JobSpec, JobState, RecordFilter, RecordStore,
    RetryPolicy, SubmitOptions, WatchEvent, WatchOptions,
};
use slurm_run_testsupport::backend::{
    admin, depend_raw, down_node, harness, jobs_named, remote, small_spec, wait_state,
    wait_terminal, Harness,
};
use slurm_run_testsupport::examples::{example, run};
use slurm_run_testsupport::{cluster, testbed_env};

/// A value no file of the test bed holds before this test.
fn canary() -> String {
    format!("canary-{:016x}", rand::random::<u64>())
}

/// `spec` receiving the secret `SLURM_RUN_CANARY` = `canary`.
fn with_canary(mut spec: JobSpec, canary: &str) -> (JobSpec, SubmitOptions) {
    spec.secrets = vec!["SLURM_RUN_CANARY".into()];
    let options = SubmitOptions {
        secret_values: Some([("SLURM_RUN_CANARY".to_string(), canary.to_string())].into()),
        ..SubmitOptions::default()
    };
    (spec, options)
}

/// A command printing a digest of the secret (never the secret), with the run number.
fn print_secret_digest(then: &str) -> String {
    format!(
        "echo \"run ${{SLURM_RESTART_COUNT:-0}} secret $(printf %s \"$SLURM_RUN_CANARY\" | sha256sum | cut -c1-16)\"; {then}"
    )
}

/// The digest `print_secret_digest` prints for `canary`.
fn digest(canary: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(canary.as_bytes()))[..16].to_string()
}

/// No file of the job's folder on shared storage, and none of the framing's folders on
/// the login node, holds the secret; the record knows its sidecar is gone.
async fn assert_no_secret_left(h: &Harness, id: &slurm_core::JobId, canary: &str) {
    // A status removes the sidecar of an ended job (and confirms it).
    let record = h.backend.status(id).await.unwrap().into_record();
    assert!(record.state().is_terminal(), "{id} is {}", record.state());
    let found = remote(
        h,
        Command::new("bash")
            .arg("-c")
            .arg(r#"grep -rlF -e "$1" -- "$2" "${TMPDIR:-/tmp}"/slurm-run-* 2>/dev/null; exit 0"#)
            .arg("canary-grep")
            .arg(canary)
            .arg(record.results_dir().as_str()),
    )
    .await;
    assert_eq!(
        found.trim(),
        "",
        "the secret of {id} is still at rest in: {found}"
    );
    assert!(
        !record.secrets_staged(),
        "{id}: the sidecar's removal was not confirmed"
    );
}

/// The lines of a job's main.out.
async fn main_out(h: &Harness, record: &JobRecord) -> String {
    let native = record.backend_ref().unwrap().native_id.clone();
    let path = format!(
        "{}/logs/{}-{native}/main.out",
        record.results_dir().as_str(),
        record.id()
    );
    remote(h, Command::new("cat").arg(path)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_gone_after_a_refusal_a_cancel_a_dependency_and_a_completion() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let secret = canary();

    // sbatch refuses the job: ERROR, and the staged sidecar goes at once.
    let (mut refused, options) = with_canary(small_spec("refused", "true"), &secret);
    refused.extra_sbatch = vec!["--exclude=no-such-node".into()];
    let error = h.backend.submit(&refused, options).await.unwrap_err();
    assert!(error.to_string().contains("Invalid node name"), "{error}");
    let record = h
        .backend
        .records(&RecordFilter::any())
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.name() == "refused")
        .unwrap();
    assert_eq!(record.state(), JobState::Error);
    assert_no_secret_left(&h, record.id(), &secret).await;

    // Cancelled while pending (it never ran, so the job never removed it itself).
    let (mut later, options) = with_canary(small_spec("later", "true"), &secret);
    later.extra_sbatch = vec!["--begin=now+1hour".into()];
    let later = h.backend.submit(&later, options).await.unwrap();
    wait_state(&h.backend, later.id(), JobState::Pending, 30).await;
    assert_eq!(
        h.backend.cancel(later.id()).await.unwrap().state(),
        JobState::Canceled
    );
    assert_no_secret_left(&h, later.id(), &secret).await;

    // A dependency that can never be satisfied: ERROR while the job still pends.
    let failed = h
        .backend
        .submit(&small_spec("deps-fail", "exit 3"), SubmitOptions::default())
        .await
        .unwrap();
    wait_terminal(&h.backend, failed.id(), 120).await;
    let (mut dependent, options) = with_canary(small_spec("deps-never", "true"), &secret);
    dependent.extra_sbatch = vec!["--begin=now+1hour".into()];
    let dependent = h.backend.submit(&dependent, options).await.unwrap();
    depend_raw(&h, &dependent, &failed).await;
    let status = wait_terminal(&h.backend, dependent.id(), 60).await;
    assert_eq!(status.state(), JobState::Error);
    assert_no_secret_left(&h, dependent.id(), &secret).await;
    remote(&h, Command::new("scancel").arg(status.native_id().unwrap())).await;

    // A completed job that used its secret.
    let (done, options) = with_canary(small_spec("used", &print_secret_digest("true")), &secret);
    let done = h.backend.submit(&done, options).await.unwrap();
    let status = wait_terminal(&h.backend, done.id(), 120).await;
    assert_eq!(status.state(), JobState::Complete, "{:?}", status.native());
    let out = main_out(&h, status.record()).await;
    assert!(
        out.contains(&digest(&secret)),
        "the job had its secret: {out}"
    );
    assert_no_secret_left(&h, done.id(), &secret).await;
}

/// Start a requeued job now rather than after Slurm's requeue delay (two minutes).
fn start_now(h: &Harness, record: &JobRecord) {
    let native = record.backend_ref().unwrap().native_id.clone();
    let _ = h
        .testbed
        .admin("scontrol")
        .args(["update", &format!("jobid={native}"), "starttime=now"])
        .status();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requeued_run_still_gets_its_secrets_and_a_node_failure_leaves_none() {
    let _cluster = cluster::exclusive().await;
    let h = harness();
    let secret = canary();

    // `scontrol requeue`: the second run reads the sidecar the first one kept.
    let (mut requeued, options) = with_canary(
        small_spec("requeue-me", &print_secret_digest("sleep 8")),
        &secret,
    );
    requeued.requeue = Some(true);
    let requeued = h.backend.submit(&requeued, options).await.unwrap();
    let running = wait_state(&h.backend, requeued.id(), JobState::Running, 120).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    admin(
        &h.testbed,
        "scontrol",
        &["requeue", running.native_id().unwrap()],
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    start_now(&h, running.record());
    let status = wait_terminal(&h.backend, requeued.id(), 180).await;
    assert_eq!(
        status.state(),
        JobState::Complete,
        "{:?}",
        status.record().history()
    );
    let out = main_out(&h, status.record()).await;
    let runs: Vec<&str> = out.lines().filter(|l| l.starts_with("run ")).collect();
    assert_eq!(runs.len(), 2, "two runs: {out}");
    assert!(
        runs.iter().all(|l| l.ends_with(&digest(&secret))),
        "every run had its secret: {out}"
    );
    assert!(runs[1].starts_with("run 1 "), "{out}");
    assert_no_secret_left(&h, requeued.id(), &secret).await;

    // A node failure: without requeue the job ends ERROR and its sidecar goes; with
    // requeue, the next run gets its secret.
    let (mut lost, options) = with_canary(small_spec("node-lost", "sleep 300"), &secret);
    // On n2 only (the test bed has n1 and n2; --nodelist is slurm-run's to refuse).
    lost.extra_sbatch = vec!["--exclude=n1".into()];
    lost.requeue = Some(false);
    let lost = h.backend.submit(&lost, options).await.unwrap();
    let (mut again, options) = with_canary(
        small_spec("node-again", &print_secret_digest("sleep 5")),
        &secret,
    );
    again.extra_sbatch = vec!["--exclude=n1".into()];
    again.requeue = Some(true);
    let again = h.backend.submit(&again, options).await.unwrap();
    wait_state(&h.backend, lost.id(), JobState::Running, 120).await;
    let again_running = wait_state(&h.backend, again.id(), JobState::Running, 120).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    {
        let _resume = down_node(&h.testbed, "n2", "slurm-run-secrets-test");
        let failed = wait_terminal(&h.backend, lost.id(), 120).await;
        assert_eq!(failed.state(), JobState::Error);
        assert_eq!(failed.err_class(), Some(ErrorClass::Infra));
        assert_no_secret_left(&h, lost.id(), &secret).await;
        wait_state(&h.backend, again.id(), JobState::Pending, 120).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    start_now(&h, again_running.record());
    let status = wait_terminal(&h.backend, again.id(), 180).await;
    assert_eq!(
        status.state(),
        JobState::Complete,
        "{:?}",
        status.record().history()
    );
    let out = main_out(&h, status.record()).await;
    assert!(
        out.lines()
            .any(|l| l.starts_with("run 1 ") && l.ends_with(&digest(&secret))),
        "the requeued run had its secret: {out}"
    );
    assert_no_secret_left(&h, again.id(), &secret).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_slurmdbd_stopped_submits_work_and_unknown_outcomes_wait_for_it() {
    let _cluster = cluster::exclusive().await;
    let h = harness();
    let dbd = h.testbed.stopped("slurmdbd");

    // Preflight passes, degraded: jobs run without accounting.
    let report = h.backend.preflight(None).await.unwrap();
    assert!(report.passed(), "{report}");
    assert_eq!(report.degraded().count(), 1, "{report}");

    // A submit whose answer is lost is settled from the attempt's own answer, with
    // sacct down.
    h.transport
        .inner()
        .arm("submit ", Fault::LoseAnswerAfterRun);
    let adopted = h
        .backend
        .submit(&small_spec("dbd-down", "sleep 5"), SubmitOptions::default())
        .await
        .unwrap();
    assert_eq!(adopted.state(), JobState::Pending);

    // A record whose attempt ended without an answer (sbatch timed out): squeue
    // answers "no job" but sacct cannot; could-not-ask is never "no job".
    let spec = small_spec("dbd-unknown", "true");
    let id = slurm_core::JobId::mint_for(&spec);
    let root = slurm_core::RemotePath::parse(h.testbed.get("SLURM_BASE_RESULTS_DIR")).unwrap();
    let record = JobRecord::new(id.clone(), &spec, root.join(id.as_str()).unwrap()).unwrap();
    let record = RecordFixture::new(record)
        .submit_attempts(1)
        .submitted_ago(Duration::from_secs(30))
        .into_record();
    h.backend.store().open(&record).unwrap();
    remote(
        &h,
        Command::new("bash")
            .arg("-c")
            .arg(r#"mkdir -p "$1/.sbatch-1" && : > "$1/.sbatch-1/out" && echo 'sbatch: error: Batch job submission failed: Socket timed out on send/recv operation' > "$1/.sbatch-1/err" && echo 1 > "$1/.sbatch-1/rc""#)
            .arg("fake-attempt")
            .arg(record.results_dir().as_str()),
    )
    .await;
    let status = h.backend.status(&id).await.unwrap();
    assert_eq!(status.state(), JobState::Submitting);
    let note = status
        .record()
        .unsettled()
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(note.contains("sacct"), "{note}");

    // Accounting back: the scheduler says there is no job; the record ends.
    drop(dbd);
    let status = h.backend.status(&id).await.unwrap();
    assert_eq!(
        status.state(),
        JobState::NotSubmitted,
        "{:?}",
        status.record().unsettled()
    );
    assert_eq!(jobs_named(&h, id.as_str()).await.len(), 0);
    let done = wait_terminal(&h.backend, adopted.id(), 120).await;
    assert_eq!(done.state(), JobState::Complete, "{:?}", done.native());
    assert_eq!(jobs_named(&h, adopted.id().as_str()).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_rewrites_its_spec_is_retried_with_the_spec_the_client_kept() {
    let _cluster = cluster::shared().await;
    let h = harness();
    // A local file the rewritten spec would have uploaded, and an environment
    // variable it would have sent as a secret.
    let local = tempfile::tempdir().unwrap();
    let private = local.path().join("id_ed25519");
    let key_canary = canary();
    std::fs::write(&private, format!("PRIVATE KEY {key_canary}\n")).unwrap();
    let data = local.path().join("data.txt");
    std::fs::write(&data, "plain data\n").unwrap();
    let mut evil = small_spec("rewriter", "true");
    evil.supporting_files = vec![private.display().to_string()];
    evil.secrets = vec!["HOME".into()];
    let evil_json = serde_json::to_string(&evil).unwrap();
    let mut spec = small_spec(
        "rewriter",
        &format!(
            "printf '%s' {} > \"$SLURM_SUBMIT_DIR/specs/spec.json\"; echo 'NCCL error: unhandled system error' >&2; exit 1",
            shlex::try_quote(&evil_json).unwrap()
        ),
    );
    spec.supporting_files = vec![data.display().to_string()];
    let first = h
        .backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap();
    let options = WatchOptions {
        interval: Duration::from_millis(500),
        retry: Some(RetryPolicy {
            budget: 1,
            ..RetryPolicy::default()
        }),
        ..WatchOptions::default()
    };
    let mut events = h.backend.watch(std::slice::from_ref(first.id()), options);
    let mut retries = Vec::new();
    while let Some(event) = tokio::time::timeout(Duration::from_secs(300), events.next())
        .await
        .expect("the watch ends")
    {
        if let WatchEvent::Retried { record, .. } = event.unwrap() {
            retries.push(*record);
        }
    }
    assert_eq!(retries.len(), 1);
    let retry = &retries[0];
    assert_eq!(retry.spec_digest(), first.spec_digest(), "the kept spec");
    let staged = remote(
        &h,
        Command::new("bash")
            .arg("-c")
            .arg(r#"cd "$1" && find . -type f ! -path './logs/*' ! -path './.sbatch-*' | sort; grep -rlF -e "$2" . ; exit 0"#)
            .arg("staged")
            .arg(retry.results_dir().as_str())
            .arg(&key_canary),
    )
    .await;
    assert!(staged.contains("./files/data.txt"), "{staged}");
    assert!(
        !staged.contains("id_ed25519"),
        "the private key was staged: {staged}"
    );
    assert!(
        !staged.contains("./env/"),
        "an environment secret was staged: {staged}"
    );
    let first = h.backend.record(first.id()).await.unwrap();
    assert_eq!(first.retried_as().as_ref(), Some(&retry.id()));
}

/// The test bed's environment for slurmctl, with a record folder.
fn ctl_env(state: &std::path::Path) -> Vec<(String, String)> {
    testbed_env().client_env(state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_slurmctl_watchers_retry_an_infra_failure_once() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let state = tempfile::tempdir().unwrap();
    let specs = tempfile::tempdir().unwrap();
    let env = ctl_env(state.path());
    let spec: PathBuf = specs.path().join("flaky.yaml");
    std::fs::write(
        &spec,
        "name: flaky\ncommand: \"echo 'NCCL error: unhandled system error' >&2; exit 1\"\ngpus_per_node: 1\ncpus_per_task: 1\ntime: \"00:10:00\"\n",
    )
    .unwrap();
    let ctl = example("slurmctl");
    let submitted = run(
        &ctl,
        &["--json", "submit", &spec.display().to_string()],
        &env,
        Duration::from_secs(120),
    );
    submitted.expect_code(0);
    let id = submitted.json_lines()[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    // Two watchers, two processes, one record folder.
    let watchers: Vec<_> = (0..2)
        .map(|_| {
            let (ctl, env, id) = (ctl.clone(), env.clone(), id.clone());
            std::thread::spawn(move || {
                run(
                    &ctl,
                    &["--json", "watch", "--interval", "1", "--retries", "1", &id],
                    &env,
                    Duration::from_secs(300),
                )
            })
        })
        .collect();
    for watcher in watchers {
        watcher.join().unwrap().expect_code(4);
    }
    // slurmctl keeps a new state folder's records in its SQLite database.
    let store = slurm_records::RecordsLocation::default_for(state.path())
        .open()
        .unwrap();
    let first = store.get(&slurm_core::JobId::parse(&id).unwrap()).unwrap();
    let all = store.list(&RecordFilter::any()).unwrap();
    // The watcher that lost the race opens no record of its own (before open_retry it
    // left a NOT_SUBMITTED second retry).
    let retries: Vec<JobRecord> = all
        .iter()
        .filter(|r| r.retry_of().as_ref() == Some(&first.id()))
        .cloned()
        .collect();
    assert_eq!(retries.len(), 1, "{all:?}");
    assert_eq!(all.len(), 2, "the failed record and its one retry: {all:?}");
    assert_eq!(first.retried_as().as_ref(), Some(&retries[0].id()));
    assert_eq!(jobs_named(&h, retries[0].id().as_str()).await.len(), 1);
    assert_eq!(jobs_named(&h, &id).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_of_twenty_thousand_ids_works() {
    // Issue 11, item 12: 20,000 ids as one argument (~140 KB) were over Linux's 128 KiB
    // limit for one argument; they travel on stdin, in chunks, to the real squeue and sacct.
    let _cluster = cluster::shared().await;
    let h = harness();
    let real = h
        .backend
        .submit(&small_spec("many-ids", "true"), SubmitOptions::default())
        .await
        .unwrap();
    let real_id: u64 = real
        .backend_ref()
        .as_ref()
        .unwrap()
        .native_id
        .parse()
        .unwrap();
    wait_terminal(&h.backend, real.id(), 120).await;
    let mut ids: Vec<slurm_core::SlurmJobId> = (9_000_000..9_019_999)
        .map(|n| slurm_core::SlurmJobId::new(n).unwrap())
        .collect();
    ids.push(slurm_core::SlurmJobId::new(real_id).unwrap());
    let command = slurm_core::testing::poll_command(&ids).unwrap();
    let started = std::time::Instant::now();
    let output = slurm_core::Transport::run(&h.transport, &command)
        .await
        .expect("the poll runs");
    let parts = slurm_core::round_trip::split(&output, 2).unwrap();
    assert!(parts[0].success(), "squeue: {}", parts[0].stderr_text());
    assert!(parts[1].success(), "sacct: {}", parts[1].stderr_text());
    assert!(
        parts[1]
            .stdout_text()
            .lines()
            .any(|l| l.starts_with(&format!("{real_id}|"))),
        "sacct answered for the real job among 20,000 ids"
    );
    println!("a poll of {} ids took {:?}", ids.len(), started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurmctl_shows_an_unsettled_submit_plainly() {
    // Issue 11, item 2: a record whose submitter died, and one whose settle could not
    // ask the scheduler (with the jobs it saw), as `slurmctl records` shows them.
    let _cluster = cluster::shared().await;
    let state = tempfile::tempdir().unwrap();
    let store = slurm_core::FileRecordStore::new(state.path()).unwrap();
    let root = slurm_core::RemotePath::parse("/shared/results").unwrap();
    let spec = small_spec("orphaned", "true");
    let orphan = slurm_core::JobId::mint_for(&spec);
    let record =
        JobRecord::new(orphan.clone(), &spec, root.join(orphan.as_str()).unwrap()).unwrap();
    let record = RecordFixture::new(record)
        .submitted_ago(Duration::from_secs(180))
        .into_record();
    store.open(&record).unwrap();
    let waiting = slurm_core::JobId::mint_for(&spec);
    let record =
        JobRecord::new(waiting.clone(), &spec, root.join(waiting.as_str()).unwrap()).unwrap();
    let record = RecordFixture::new(record)
        .unsettled(
            "the scheduler could not be asked: sacct: Problem talking to the database",
            vec![slurm_core::BackendRef::new("4711")],
        )
        .into_record();
    store.open(&record).unwrap();

    let env = ctl_env(state.path());
    let text = run(
        &example("slurmctl"),
        &["records"],
        &env,
        Duration::from_secs(60),
    );
    text.expect_code(0);
    assert!(
        text.stdout.contains("submit not settled since"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout
            .contains(&format!("`slurmctl status {orphan}` settles it")),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("?4711"), "{}", text.stdout);
    let json = run(
        &example("slurmctl"),
        &["--json", "records"],
        &env,
        Duration::from_secs(60),
    );
    let lines = json.expect_code(0).json_lines();
    let line = lines.iter().find(|l| l["id"] == waiting.as_str()).unwrap();
    assert_eq!(line["state"], "SUBMITTING");
    assert!(line["unsettled"]
        .as_str()
        .unwrap()
        .contains("Problem talking"));
    assert_eq!(line["candidates"][0], "4711");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_task_of_an_array_with_secrets_gets_them_and_none_are_left() {
    // Issue 26, defect 2: each task's EXIT trap shredded the one sidecar the array
    // shares, so every task that started after the first one ended failed ("env sidecar
    // ... is missing"). One task at a time makes each later task start after a task
    // ended; the client removes the sidecar once the array has ended.
    let _cluster = cluster::shared().await;
    let h = harness();
    let secret = canary();
    let (mut spec, options) = with_canary(
        small_spec(
            "array-secret",
            &print_secret_digest("echo task-$TASK_INDEX"),
        ),
        &secret,
    );
    spec.array = Some(slurm_core::ArraySpec {
        size: Some(3),
        max_parallel: Some(1),
        ..slurm_core::ArraySpec::default()
    });
    let record = h.backend.submit(&spec, options).await.unwrap();
    let done = wait_terminal(&h.backend, record.id(), 240).await;
    let native = done.native_id().unwrap().to_string();
    for task in 0..3 {
        let path = format!(
            "{}/logs/{}-{native}_{task}/main.out",
            record.results_dir().as_str(),
            record.id()
        );
        let out = remote(&h, Command::new("cat").arg(path)).await;
        assert!(
            out.contains(&digest(&secret)) && out.contains(&format!("task-{task}")),
            "task {task} had its secret: {out}"
        );
    }
    assert_eq!(done.state(), JobState::Complete, "{:?}", done.record());
    assert_no_secret_left(&h, record.id(), &secret).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_store_with_the_same_id_never_adopts_the_first_ones_job() {
    // Issue 26, defect 4: two record stores sharing a results root and SLURM user could
    // hold the same id; the second one's settle took the first one's attempt (its
    // `.sbatch-1` answer, the job by name) as its own: its record reported the other
    // job, cancelling it cancelled the other job, its end shredded the other's secrets.
    // Each record's claim on its cluster folder is exclusive and checked by the fence.
    let _cluster = cluster::shared().await;
    let first = harness();
    let secret = canary();
    let (spec, options) = with_canary(small_spec("same-id", "sleep 60"), &secret);
    let theirs = first.backend.submit(&spec, options).await.unwrap();
    let native = theirs.backend_ref().unwrap().native_id.clone();
    // The second store holds a record of that id, as a submitter that died after
    // counting its attempt left it (its attempt never reached the cluster).
    let second = harness();
    let twin = JobRecord::new(theirs.id().clone(), &spec, theirs.results_dir().clone()).unwrap();
    let twin = RecordFixture::new(twin)
        .submitted_ago(Duration::from_secs(60))
        .submit_attempts(1)
        .into_record();
    second.backend.store().open(&twin).unwrap();
    let settled = second.backend.status(twin.id()).await.unwrap();
    assert_eq!(
        settled.state(),
        JobState::NotSubmitted,
        "{:?}",
        settled.record()
    );
    assert_eq!(settled.native_id(), None, "never the first store's job");
    // The first store's job goes on, its secrets still there for it.
    let status = first.backend.status(theirs.id()).await.unwrap();
    assert!(!status.state().is_terminal(), "{:?}", status.record());
    assert_eq!(status.native_id(), Some(native.as_str()));
    let sidecar = remote(
        &first,
        Command::new("bash")
            .arg("-c")
            .arg(r#"test -e "$1/env/job_$2.env" && echo present"#)
            .arg("sidecar")
            .arg(theirs.results_dir().as_str())
            .arg(theirs.id().as_str()),
    )
    .await;
    assert_eq!(sidecar.trim(), "present");
    let cancelled = first.backend.cancel(theirs.id()).await.unwrap();
    assert_eq!(cancelled.state(), JobState::Canceled);
    assert_no_secret_left(&first, theirs.id(), &secret).await;
}
