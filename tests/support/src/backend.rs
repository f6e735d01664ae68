//! A SlurmBackend wired to the test bed (Ssh2Transport, HandlebarsRenderer, a fresh
//! FileRecordStore), with a counting and a fault-injecting layer, for the end-to-end tests.

use std::sync::Arc;
use std::time::Duration;

use slurm_core::testing::{CountingTransport, FaultTransport};
use slurm_core::{
    Backend, Command, FileRecordStore, JobId, JobSpec, JobState, JobStatus, SlurmBackend,
    SlurmConfig, Transport, WallTime,
};
use slurm_render::HandlebarsRenderer;
use slurm_ssh::{Ssh2Transport, Ssh2TransportBuilder};

use crate::testbed::{testbed_env, Testbed};

/// The transport stack of the tests: counting over fault injection over ssh2.
pub type Stack = Arc<CountingTransport<FaultTransport<Ssh2Transport>>>;

/// The backend under test.
pub type TestBackend = SlurmBackend<Stack, HandlebarsRenderer, FileRecordStore>;

/// A backend on the test bed and what the tests need beside it.
pub struct Harness {
    /// The backend.
    pub backend: TestBackend,
    /// Its transport, for counting and arming faults.
    pub transport: Stack,
    /// The test bed's settings.
    pub testbed: Testbed,
    _records: tempfile::TempDir,
}

/// A backend on the test bed with its own record folder.
pub fn harness() -> Harness {
    harness_with(None, Duration::from_secs(15))
}

/// [`harness`] with its own results root (a folder of the test bed's results root named
/// `folder`): its image cache (`<root>/images`) starts empty.
pub fn harness_in(folder: Option<&str>) -> Harness {
    harness_with(folder, Duration::from_secs(15))
}

/// [`harness`] whose submits keep settling an unknown outcome for up to `wait` (a test
/// that stops the controller for longer than the default).
pub fn harness_with_reconcile_wait(wait: Duration) -> Harness {
    harness_with(None, wait)
}

/// [`harness`] with an optional results folder of its own and a reconcile wait.
fn harness_with(folder: Option<&str>, wait: Duration) -> Harness {
    let testbed = testbed_env();
    let ssh = Ssh2Transport::new(
        Ssh2TransportBuilder::from_lookup(testbed.lookup()).expect("test bed ssh settings"),
    )
    .expect("ssh2 transport");
    let transport: Stack = Arc::new(CountingTransport::new(FaultTransport::new(ssh)));
    let records = tempfile::tempdir().unwrap();
    let backend = SlurmBackend::new(
        Arc::clone(&transport),
        HandlebarsRenderer::new(),
        FileRecordStore::new(records.path()).expect("record store"),
        config(&testbed, folder, records.path(), wait),
    );
    Harness {
        backend,
        transport,
        testbed,
        _records: records,
    }
}

/// A SlurmBackend over any `transport` on the test bed (the built-in templates, a record
/// folder of its own, which it returns), with its own results root under the test
/// bed's when `folder` names one.
pub fn backend_over<T: Transport + 'static>(
    transport: T,
    testbed: &Testbed,
    folder: Option<&str>,
) -> (
    SlurmBackend<T, HandlebarsRenderer, FileRecordStore>,
    tempfile::TempDir,
) {
    let records = tempfile::tempdir().unwrap();
    let config = config(testbed, folder, records.path(), Duration::from_secs(15));
    let store = FileRecordStore::new(records.path()).expect("record store");
    (
        SlurmBackend::new(transport, HandlebarsRenderer::new(), store, config),
        records,
    )
}

/// The test bed's configuration with records in `records`, a poll every 0.5 s, a
/// reconcile wait of `wait`, and its own results root under the test bed's when
/// `folder` names one.
fn config(
    testbed: &Testbed,
    folder: Option<&str>,
    records: &std::path::Path,
    wait: Duration,
) -> SlurmConfig {
    let mut builder = SlurmConfig::builder().with_env_from(testbed.lookup());
    if let Some(folder) = folder {
        builder = builder.with_results_root(format!(
            "{}/{folder}",
            testbed.get("SLURM_BASE_RESULTS_DIR")
        ));
    }
    builder
        .with_state_dir(records)
        .with_poll_interval(Duration::from_millis(500))
        .with_reconcile_wait(wait)
        .build()
        .expect("test bed backend config")
}

/// A small job: one node, one GPU, one CPU, ten minutes.
pub fn small_spec(name: &str, command: &str) -> JobSpec {
    let mut spec = JobSpec::new(name, command);
    spec.gpus_per_node = Some(1);
    spec.cpus_per_task = Some(1);
    spec.time = Some(WallTime::from_minutes(10));
    spec
}

/// Poll `id` until `done` holds for its status, or panic after `seconds`.
pub async fn wait_until(
    backend: &TestBackend,
    id: &JobId,
    seconds: u64,
    done: impl Fn(&JobStatus) -> bool,
) -> JobStatus {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    loop {
        let status = backend.status(id).await.expect("status");
        if done(&status) {
            return status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{id} still {} ({:?}) after {seconds} s",
            status.state(),
            status.native()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Poll `id` until it is terminal.
pub async fn wait_terminal(backend: &TestBackend, id: &JobId, seconds: u64) -> JobStatus {
    wait_until(backend, id, seconds, |s| s.state().is_terminal()).await
}

/// Poll `id` until it is terminal, check that it COMPLETEd, and return its `main.out`.
pub async fn completed_output(backend: &TestBackend, id: &JobId, seconds: u64) -> String {
    let status = wait_terminal(backend, id, seconds).await;
    assert_eq!(status.state(), JobState::Complete, "{status:?}");
    backend
        .logs(id, slurm_core::LogOptions::default())
        .await
        .expect("the log of a completed job")
}

/// Poll `id` until it is in `state`.
pub async fn wait_state(
    backend: &TestBackend,
    id: &JobId,
    state: JobState,
    seconds: u64,
) -> JobStatus {
    wait_until(backend, id, seconds, |s| s.state() == state).await
}

/// Run a command on the test bed through the harness's transport; its stdout.
pub async fn remote(harness: &Harness, command: Command) -> String {
    let output = harness
        .transport
        .run(&command)
        .await
        .expect("remote command");
    output.stdout_text()
}

/// The batch script a submit staged for `record` (`sbatch/job_<id>.sbatch`).
pub async fn staged_script(harness: &Harness, record: &slurm_core::JobRecord) -> String {
    remote(
        harness,
        Command::new("cat").arg(format!(
            "{}/sbatch/job_{}.sbatch",
            record.results_dir(),
            record.id()
        )),
    )
    .await
}

/// The SLURM job ids carrying `name`, from squeue and sacct.
pub async fn jobs_named(harness: &Harness, name: &str) -> Vec<String> {
    let out = remote(
        harness,
        Command::new("bash").arg("-c").arg(
            r#"{ squeue --noheader --states=all --format=%i --name="$1"; sacct --noheader -X --parsable2 --starttime=now-1days --format=JobIDRaw --name="$1"; } | sort -u"#,
        ).arg("jobs-named").arg(name),
    )
    .await;
    out.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// Run a Slurm admin command against the test bed, as its administrator with its
/// release's own binaries (`testbed/admin`); its stdout, failing the test when it fails.
pub fn admin(testbed: &Testbed, program: &str, args: &[&str]) -> String {
    let output = testbed
        .admin(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run testbed/admin {program}: {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The message of a record's last transition (empty when it has none).
pub fn last_message(record: &slurm_core::JobRecord) -> String {
    record.last_message().to_string()
}

/// Watch `ids` with a retry budget until every job is terminal (or `seconds` pass):
/// the retries (new records) and the errors the watch reported.
pub async fn watch_retrying(
    backend: &TestBackend,
    ids: &[JobId],
    budget: u32,
    seconds: u64,
) -> (Vec<slurm_core::JobRecord>, Vec<slurm_core::Error>) {
    use futures::StreamExt;
    use slurm_core::{WatchEvent, WatchOptions};
    let options = WatchOptions {
        interval: Duration::from_millis(500),
        retry: Some(slurm_core::RetryPolicy {
            budget,
            ..Default::default()
        }),
        ..WatchOptions::default()
    };
    let mut events = backend.watch(ids, options);
    let (mut retries, mut errors) = (Vec::new(), Vec::new());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    while let Some(event) = tokio::time::timeout_at(deadline, events.next())
        .await
        .expect("the watch ends in time")
    {
        match event {
            Ok(WatchEvent::Retried { record, .. }) => retries.push(*record),
            Ok(_) => {}
            Err(error) => errors.push(error),
        }
    }
    (retries, errors)
}

/// Puts a node of the test bed back in service when dropped, whatever the test did.
pub struct ResumeNode<'a>(pub &'a crate::Testbed, pub String);

/// Set `node` down (`reason` shows in `sinfo -R`), as a node failure does; it is back
/// in service when the guard is dropped.
pub fn down_node<'a>(testbed: &'a Testbed, node: &str, reason: &str) -> ResumeNode<'a> {
    let resume = ResumeNode(testbed, node.to_string());
    admin(
        testbed,
        "scontrol",
        &[
            "update",
            &format!("nodename={node}"),
            "state=down",
            &format!("reason={reason}"),
        ],
    );
    resume
}

/// A node's state as `sinfo` prints it (`%T`, e.g. `idle`, `down*`, `drained`).
pub fn node_state(testbed: &Testbed, node: &str) -> Result<String, String> {
    let output = testbed
        .admin("sinfo")
        .args(["-h", "-n", node, "-o", "%T"])
        .output()
        .map_err(|e| format!("cannot run testbed/admin sinfo: {e}"))?;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).trim().to_string());
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    Ok(stdout.lines().next().unwrap_or("").trim().to_string())
}

/// Whether a node state (as [`node_state`] prints it) takes jobs: responding, neither
/// down nor drained nor failing.
pub fn in_service(state: &str) -> bool {
    !state.is_empty()
        && !state.contains('*')
        && !["down", "drain", "fail", "unknown", "inval", "future"]
            .iter()
            .any(|bad| state.contains(bad))
}

/// Return `node` to service and wait (a minute at most) until its state shows it; the
/// state it is left in otherwise. The resume itself may fail: with `ReturnToService=2`
/// (the test bed's) Slurm 26.05 returns an admin-downed node to service at once, and a
/// later resume is an `Invalid node state transition`; the node's state is what tells.
pub fn try_resume_node(testbed: &Testbed, node: &str) -> Result<(), String> {
    let resume = testbed
        .admin("scontrol")
        .args(["update", &format!("nodename={node}"), "state=resume"])
        .output()
        .map_err(|e| format!("cannot run testbed/admin scontrol: {e}"))?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let state = node_state(testbed, node);
        if state.as_deref().is_ok_and(in_service) {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            return Err(format!(
                "node {node} is not back in service after a resume: {state:?} (the resume said: {})",
                String::from_utf8_lossy(&resume.stderr).trim()
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// [`try_resume_node`], failing the test when the node does not come back.
pub fn resume_node(testbed: &Testbed, node: &str) {
    try_resume_node(testbed, node).unwrap_or_else(|e| panic!("{e}"));
}

impl Drop for ResumeNode<'_> {
    fn drop(&mut self) {
        let resumed = try_resume_node(self.0, &self.1);
        // A test that failed already is not failed twice (a panic in a panic aborts).
        if !std::thread::panicking() {
            resumed.unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

/// The test bed registry's image `name` (e.g. `slurm-run/tiny:1`), as `host:port/name`.
pub fn registry_image(harness: &Harness, name: &str) -> String {
    format!("{}/{name}", harness.testbed.get("SLURM_RUN_TEST_REGISTRY"))
}

/// The test bed registry's password (test-only).
pub fn registry_password(harness: &Harness) -> String {
    harness
        .testbed
        .get("SLURM_RUN_TEST_REGISTRY_PASSWORD")
        .to_string()
}

/// Install the test bed registry's credentials through the library (idempotent).
pub async fn with_credentials(harness: &Harness) {
    let registry = harness.testbed.get("SLURM_RUN_TEST_REGISTRY");
    let status = harness
        .backend
        .install_credentials(
            registry,
            harness.testbed.get("SLURM_RUN_TEST_REGISTRY_USER"),
            &registry_password(harness),
        )
        .await
        .unwrap();
    assert!(status.is_present(), "{status}");
}
