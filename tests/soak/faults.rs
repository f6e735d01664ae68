//! Fault scenarios of issue 11 that take minutes, against the real test bed: the
//! controller stopped for 30 s during a submit and during its settle, and clients
//! (slurmctl processes) killed with SIGKILL at random points of dozens of submits, after
//! which one `status` settles every record. Each holds the cluster exclusive.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rand::Rng;
use slurm_core::testing::{Fault, FaultTransport, RecordFixture};
use slurm_core::{
    Backend, Command, FileRecordStore, JobId, JobRecord, JobState, Output, RecordFilter,
    RecordStore, SlurmBackend, SlurmConfig, SubmitOptions, Transport,
};
use slurm_render::HandlebarsRenderer;
use slurm_run_testsupport::examples::{example, run};
use slurm_run_testsupport::transports::ssh2;
use slurm_run_testsupport::{cluster, small_spec, testbed_env, Testbed};

/// How long the controller stays down.
const OUTAGE: Duration = Duration::from_secs(30);

/// A hook and the label prefix of the command it runs before.
type Hook = (String, Box<dyn FnOnce() + Send>);

/// Runs `hook` once, before the first command whose label starts with `prefix`.
struct HookTransport<T> {
    inner: T,
    hook: Mutex<Option<Hook>>,
}

impl<T> std::fmt::Debug for HookTransport<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HookTransport")
    }
}

#[async_trait]
impl<T: Transport> Transport for HookTransport<T> {
    async fn run(&self, command: &Command) -> slurm_core::Result<Output> {
        let hook = {
            let mut hook = self.hook.lock().unwrap();
            match hook.as_ref() {
                Some((prefix, _)) if command.label().starts_with(prefix.as_str()) => hook.take(),
                _ => None,
            }
        };
        if let Some((_, hook)) = hook {
            hook();
        }
        self.inner.run(command).await
    }
}

type Hooked = HookTransport<FaultTransport<slurm_ssh::Ssh2Transport>>;

/// A backend on the test bed over a hook and fault layer, its records in `dir`.
fn backend(
    tb: &Testbed,
    dir: &std::path::Path,
    reconcile_wait: Duration,
) -> SlurmBackend<Arc<Hooked>, HandlebarsRenderer, FileRecordStore> {
    let transport = Arc::new(HookTransport {
        inner: FaultTransport::new(ssh2(tb)),
        hook: Mutex::new(None),
    });
    let config = SlurmConfig::builder()
        .with_env_from(tb.lookup())
        .with_state_dir(dir)
        .with_poll_interval(Duration::from_millis(500))
        .with_reconcile_wait(reconcile_wait)
        .build()
        .unwrap();
    let store = FileRecordStore::new(dir.join("jobs")).unwrap();
    SlurmBackend::new(transport, HandlebarsRenderer::new(), store, config)
}

/// Stop slurmctld now and start it again after [`OUTAGE`], on a thread.
fn outage(tb: &Testbed) -> std::thread::JoinHandle<()> {
    tb.stop("slurmctld");
    println!("slurmctld stopped for {} s", OUTAGE.as_secs());
    let tb = tb.clone();
    std::thread::spawn(move || {
        std::thread::sleep(OUTAGE);
        tb.start("slurmctld");
        println!("slurmctld back");
    })
}

/// The SLURM jobs carrying `name` (squeue and sacct, by exact name).
async fn jobs_named<T: Transport>(transport: &T, name: &str) -> BTreeSet<String> {
    let out = transport
        .run(
            &Command::new("bash")
                .arg("-c")
                .arg(r#"{ squeue --noheader --states=all --format='%i|%j' --name="$1"; sacct --noheader -X --parsable2 --starttime=now-2days --format=JobIDRaw,JobName --name="$1"; } | awk -F'|' -v n="$1" '$2 == n { print $1 }' | sort -u"#)
                .arg("jobs-named")
                .arg(name),
        )
        .await
        .expect("squeue and sacct");
    out.stdout_text()
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// Issue 11: slurmctld stopped for 30 s, first during a submit (sbatch cannot reach
/// it, then the settle cannot ask squeue: the record waits, nothing is sent again until
/// the scheduler answers), then during the settle of a submit whose answer was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_stopped_during_a_submit_and_during_its_settle() {
    let _cluster = cluster::exclusive().await;
    let tb = testbed_env();
    let dir = tempfile::tempdir().unwrap();
    let backend = backend(&tb, dir.path(), OUTAGE * 4);
    let spec = small_spec("ctld-down", "sleep 2");
    backend.preflight(Some(&spec)).await.unwrap();

    // During a submit.
    let back = outage(&tb);
    let started = Instant::now();
    let record = backend
        .submit(&spec, SubmitOptions::default())
        .await
        .expect("the submit rides out the outage");
    println!(
        "submit during the outage: {} after {:.0} s, attempt {:?}",
        record.state(),
        started.elapsed().as_secs_f64(),
        record.submit_attempts()
    );
    back.join().unwrap();
    assert_eq!(record.state(), JobState::Pending);
    assert_eq!(
        record.submit_attempts(),
        Some(2),
        "the first sbatch never reached the controller; a second one was sent only once the scheduler said so"
    );
    let jobs = jobs_named(backend.transport(), record.id().as_str()).await;
    assert_eq!(jobs.len(), 1, "{jobs:?}");

    // During the settle of a submit whose answer was lost after sbatch ran: the hook
    // stops the controller as the settle begins, and it stays down until the checks
    // below are made (longer than 30 s: the settle alone waits on squeue for ~18 s).
    let unknown = unknown_attempt(&backend, &tb).await;
    backend
        .transport()
        .inner
        .arm("submit ", Fault::LoseAnswerAfterRun);
    let stopped: Arc<Mutex<Option<slurm_run_testsupport::testbed::Stopped>>> = Arc::default();
    let (tb2, guard) = (tb.clone(), Arc::clone(&stopped));
    *backend.transport().hook.lock().unwrap() = Some((
        "settle ".to_string(),
        Box::new(move || {
            println!("slurmctld stopped as the settle begins");
            *guard.lock().unwrap() = Some(tb2.stopped("slurmctld"));
        }),
    ));
    let down_since = Instant::now();
    let lost = backend
        .submit(
            &small_spec("ctld-settle", "sleep 2"),
            SubmitOptions::default(),
        )
        .await
        .expect("settled from the attempt's own answer");
    assert_eq!(lost.state(), JobState::Pending);
    // While the controller is down, a status of a record whose attempt left no
    // answer stays SUBMITTING: could-not-ask is never "no job".
    let status = backend.status(&unknown).await.unwrap();
    assert_eq!(
        status.state(),
        JobState::Submitting,
        "{:?}",
        status.record().unsettled()
    );
    assert!(stopped.lock().unwrap().is_some(), "the hook ran");
    if let Some(wait) = OUTAGE.checked_sub(down_since.elapsed()) {
        tokio::time::sleep(wait).await;
    }
    let guard = stopped.lock().unwrap().take();
    drop(guard);
    println!(
        "slurmctld back after {:.0} s",
        down_since.elapsed().as_secs_f64()
    );
    let status = backend.status(&unknown).await.unwrap();
    assert_eq!(
        status.state(),
        JobState::NotSubmitted,
        "{:?}",
        status.record().unsettled()
    );
    assert_eq!(
        jobs_named(backend.transport(), unknown.as_str())
            .await
            .len(),
        0
    );
    let jobs = jobs_named(backend.transport(), lost.id().as_str()).await;
    assert_eq!(
        jobs.into_iter().collect::<Vec<_>>(),
        vec![lost.backend_ref().unwrap().native_id.clone()],
        "exactly the adopted job"
    );
}

/// A record whose one attempt ran sbatch and got no answer (a socket timeout), as a
/// client that died then would leave it.
async fn unknown_attempt<T: Transport + 'static>(
    backend: &SlurmBackend<T, HandlebarsRenderer, FileRecordStore>,
    tb: &Testbed,
) -> JobId {
    let spec = small_spec("ctld-unknown", "true");
    let id = JobId::mint_for(&spec);
    let root = slurm_core::RemotePath::parse(tb.get("SLURM_BASE_RESULTS_DIR")).unwrap();
    let record = JobRecord::new(id.clone(), &spec, root.join(id.as_str()).unwrap()).unwrap();
    let record = RecordFixture::new(record)
        .submit_attempts(1)
        .submitted_ago(Duration::from_secs(30))
        .into_record();
    backend.store().open(&record).unwrap();
    backend
        .transport()
        .run(
            &Command::new("bash")
                .arg("-c")
                .arg(r#"mkdir -p "$1/.sbatch-1" && : > "$1/.sbatch-1/out" && echo 'sbatch: error: Batch job submission failed: Socket timed out on send/recv operation' > "$1/.sbatch-1/err" && echo 1 > "$1/.sbatch-1/rc""#)
                .arg("fake-attempt")
                .arg(record.results_dir().as_str()),
        )
        .await
        .unwrap();
    id
}

/// slurmctl with a clean environment holding `env`, its output discarded.
fn slurmctl_command(
    ctl: &std::path::Path,
    args: &[&str],
    env: &[(String, String)],
) -> std::process::Command {
    let mut command = std::process::Command::new(ctl);
    command
        .args(args)
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    for name in ["PATH", "HOME", "USER", "LANG"] {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    for (k, v) in env {
        command.env(k, v);
    }
    command
}

/// One whole submit: when its record appeared (in the state folder's database, where
/// slurmctl keeps a new folder's records), and when the process ended.
fn time_one_submit(
    ctl: &std::path::Path,
    spec: &str,
    env: &[(String, String)],
    state: &std::path::Path,
) -> (Duration, Duration) {
    let store = slurm_records::RecordsLocation::default_for(state)
        .open()
        .unwrap();
    let count = || store.list(&RecordFilter::any()).unwrap().len();
    let before = count();
    let started = Instant::now();
    let mut child = slurmctl_command(ctl, &["--json", "submit", spec], env)
        .spawn()
        .unwrap();
    let mut opened = None;
    loop {
        if opened.is_none() && count() > before {
            opened = Some(started.elapsed());
        }
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "the timed submit failed");
            let whole = started.elapsed();
            return (opened.unwrap_or(whole), whole);
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the timed submit hangs"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// How many clients are killed (`SLURM_RUN_SOAK_KILLS`, default 40).
fn kills() -> usize {
    std::env::var("SLURM_RUN_SOAK_KILLS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(40)
}

/// Issue 11: slurmctl processes killed with SIGKILL at random points of their submits
/// (before the record, mid-upload, during sbatch, before the record is marked); then one
/// `status` of every record settles them all: none left SUBMITTING, no duplicate job
/// name, every record agrees with the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_killed_at_random_points_then_one_status_settles_every_record() {
    let _cluster = cluster::exclusive().await;
    let tb = testbed_env();
    let state = tempfile::tempdir().unwrap();
    let specs = tempfile::tempdir().unwrap();
    let prefix = format!("kill-{:06x}", rand::random::<u32>() & 0x00ff_ffff);
    let spec = specs.path().join("job.yaml");
    std::fs::write(
        &spec,
        format!("name: {prefix}\ncommand: \"sleep 1\"\ngpus_per_node: 0\ncpus_per_task: 1\ntime: \"00:05:00\"\n"),
    )
    .unwrap();
    let env = tb.client_env(state.path());
    let ctl = example("slurmctl");
    let spec_arg = spec.display().to_string();

    // When, in a whole submit (a fresh process: connect, preflight, submit), the
    // record appears and when the process ends: the kills fall between a little before
    // the first and a little after the second (killing earlier only loses a preflight).
    let (opened, whole) = time_one_submit(&ctl, &spec_arg, &env, state.path());
    println!(
        "one slurmctl submit: record opened at {:.0} ms, done at {:.0} ms; killing {} at random points",
        opened.as_secs_f64() * 1000.0,
        whole.as_secs_f64() * 1000.0,
        kills()
    );
    let from = opened.saturating_sub(Duration::from_millis(30));
    let to = whole + Duration::from_millis(20);

    let mut rng = rand::rng();
    for _ in 0..kills() {
        let mut child = slurmctl_command(&ctl, &["--json", "submit", &spec_arg], &env)
            .spawn()
            .unwrap();
        let at = from + (to - from).mul_f64(rng.random_range(0.0..1.0));
        std::thread::sleep(at);
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
    }
    // The last killed submit must be a few seconds old before a status settles it.
    std::thread::sleep(Duration::from_secs(6));
    // slurmctl keeps a new state folder's records in its SQLite database.
    let store = slurm_records::RecordsLocation::default_for(state.path())
        .open()
        .unwrap();
    let records = store.list(&RecordFilter::any()).unwrap();
    let before: BTreeMap<JobState, usize> = records.iter().fold(BTreeMap::new(), |mut m, r| {
        *m.entry(r.state()).or_default() += 1;
        m
    });
    println!("{} records before the status: {before:?}", records.len());
    let ids: Vec<String> = records.iter().map(|r| r.id().to_string()).collect();
    let mut args = vec!["--json", "status"];
    args.extend(ids.iter().map(String::as_str));
    run(&ctl, &args, &env, Duration::from_secs(300)).expect_code(0);

    let records = store.list(&RecordFilter::any()).unwrap();
    let after: BTreeMap<JobState, usize> = records.iter().fold(BTreeMap::new(), |mut m, r| {
        *m.entry(r.state()).or_default() += 1;
        m
    });
    println!("after one status: {after:?}");
    let left: Vec<&JobRecord> = records
        .iter()
        .filter(|r| r.state() == JobState::Submitting)
        .collect();
    assert!(
        left.is_empty(),
        "left SUBMITTING: {:?}",
        left.iter()
            .map(|r| (r.id(), r.unsettled()))
            .collect::<Vec<_>>()
    );

    // The cluster's view of every job of the prefix.
    let transport = ssh2(&tb);
    let out = transport
        .run(
            &Command::new("bash")
                .arg("-c")
                .arg(r#"{ squeue --me --noheader --states=all --format='%i|%j'; sacct --noheader -X --parsable2 --starttime=now-1days --format=JobIDRaw,JobName; } | awk -F'|' -v p="$1" 'index($2, p) == 1 { print $1 "|" $2 }' | sort -u"#)
                .arg("prefix-jobs")
                .arg(&prefix),
        )
        .await
        .unwrap();
    let mut by_name: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in out.stdout_text().lines() {
        if let Some((job, name)) = line.split_once('|') {
            by_name
                .entry(name.to_string())
                .or_default()
                .insert(job.to_string());
        }
    }
    let duplicates: Vec<_> = by_name.iter().filter(|(_, jobs)| jobs.len() > 1).collect();
    assert!(duplicates.is_empty(), "duplicate job names: {duplicates:?}");
    let known: BTreeSet<&str> = records.iter().map(|r| r.id().as_str()).collect();
    let orphans: Vec<_> = by_name
        .keys()
        .filter(|n| !known.contains(n.as_str()))
        .collect();
    assert!(orphans.is_empty(), "jobs without a record: {orphans:?}");
    for record in &records {
        let jobs = by_name
            .get(record.id().as_str())
            .cloned()
            .unwrap_or_default();
        match &record.backend_ref() {
            Some(job) => assert_eq!(
                jobs.into_iter().collect::<Vec<_>>(),
                vec![job.native_id.clone()],
                "{} ({})",
                record.id(),
                record.state()
            ),
            None => assert!(
                jobs.is_empty(),
                "{} ({}) has no job, yet {jobs:?} carry its name",
                record.id(),
                record.state()
            ),
        }
    }
    println!(
        "PASS {} records settled by one status: {after:?}; no duplicate, every record agrees with squeue and sacct",
        records.len()
    );
}
