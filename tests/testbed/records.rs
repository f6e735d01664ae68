//! Records in the test bed's PostgreSQL server (`testbed/up` starts it;
//! `SLURM_RUN_TEST_POSTGRES_URL`): the RecordStore conformance suite on
//! `PostgresRecordStore` (each case in a schema of its own, its workers processes of
//! this binary), and two orchestrator processes (slurmctl, each with a state folder of
//! its own, as replicas on two machines would be) sharing one database: they retry an
//! infrastructure failure exactly once and agree on every state, and settle a submit
//! whose submitter crashed exactly once.

use std::sync::{mpsc, Arc};
use std::time::Duration;

use slurm_core::testing::pace::{keeps_pace, wait_for_ticks};
use slurm_core::testing::record_suite::{Planted, RecordStoreFixture};
use slurm_core::testing::RecordFixture;
use slurm_core::{
    AsyncStore, Command, JobId, JobRecord, JobState, Mark, RecordFilter, RecordStore, RemotePath,
    Result, TransitionSource,
};
use slurm_records::testing::PostgresFixture;
use slurm_records::PostgresRecordStore;
use slurm_run_testsupport::backend::{harness, jobs_named, remote, small_spec};
use slurm_run_testsupport::examples::{example, run};
use slurm_run_testsupport::{cluster, testbed_env};

/// The test bed's PostgreSQL server.
fn postgres_url() -> String {
    testbed_env().get("SLURM_RUN_TEST_POSTGRES_URL").to_string()
}

/// A schema of its own on the test bed's server, the cluster gate held shared (the
/// suite needs no cluster; the gate keeps the test bed's rule that every test holds it).
struct OnTestbed {
    postgres: PostgresFixture,
    _cluster: cluster::Shared,
}

fn on_testbed() -> OnTestbed {
    let _cluster = cluster::shared_blocking();
    OnTestbed {
        postgres: PostgresFixture::new(&postgres_url()),
        _cluster,
    }
}

impl RecordStoreFixture for OnTestbed {
    fn store(&self) -> std::sync::Arc<dyn RecordStore> {
        self.postgres.store()
    }
    fn shared(&self) -> Option<String> {
        self.postgres.shared()
    }
    fn open_shared(shared: &str) -> Result<Box<dyn RecordStore>> {
        PostgresFixture::open_shared(shared)
    }
    fn plant(&self, id: &JobId, planted: Planted<'_>) -> bool {
        self.postgres.plant(id, planted)
    }
}

slurm_core::record_store_conformance!(postgres, on_testbed());

/// The environment of a slurmctl process of its own (its own state folder) whose
/// records are in `records`.
fn replica(state: &std::path::Path, records: &str) -> Vec<(String, String)> {
    let mut env = testbed_env().client_env(state);
    env.push(("SLURM_RUN_RECORDS".into(), records.into()));
    env
}

/// The last state each `--json watch` output line gave each record.
fn last_states(stdout: &str) -> std::collections::BTreeMap<String, String> {
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|v| {
            Some((
                v["id"].as_str()?.to_string(),
                v["state"].as_str()?.to_string(),
            ))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_postgres_retry_an_infra_failure_once_and_agree() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let database = PostgresFixture::new(&postgres_url());
    let specs = tempfile::tempdir().unwrap();
    let spec = specs.path().join("flaky.yaml");
    std::fs::write(
        &spec,
        "name: flaky\ncommand: \"echo 'NCCL error: unhandled system error' >&2; exit 1\"\ngpus_per_node: 1\ncpus_per_task: 1\ntime: \"00:10:00\"\n",
    )
    .unwrap();
    let ctl = example("slurmctl");
    let states: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let submitted = run(
        &ctl,
        &["--json", "submit", &spec.display().to_string()],
        &replica(states[0].path(), database.url()),
        Duration::from_secs(120),
    );
    submitted.expect_code(0);
    let id = submitted.json_lines()[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    // Two replicas watch the job, each with its own state folder: only the database is shared.
    let watchers: Vec<_> = states[1..]
        .iter()
        .map(|state| {
            let (ctl, env, id) = (
                ctl.clone(),
                replica(state.path(), database.url()),
                id.clone(),
            );
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
    let outputs: Vec<String> = watchers
        .into_iter()
        .map(|w| {
            let run = w.join().unwrap();
            run.expect_code(4);
            run.stdout.clone()
        })
        .collect();
    for state in &states {
        assert!(
            !state.path().join(slurm_records::DEFAULT_DATABASE).exists(),
            "no replica kept records of its own"
        );
    }
    let store = PostgresRecordStore::connect(database.url()).unwrap();
    let first = store.get(&JobId::parse(&id).unwrap()).unwrap();
    let all = store.list(&RecordFilter::any()).unwrap();
    // One record retries the failure: the replica that lost the race opened none (it
    // left a NOT_SUBMITTED second retry before open_retry).
    let retries: Vec<&JobRecord> = all
        .iter()
        .filter(|r| r.retry_of() == Some(first.id()))
        .collect();
    assert_eq!(retries.len(), 1, "one retry record: {all:?}");
    assert_ne!(retries[0].state(), JobState::NotSubmitted, "{all:?}");
    assert_eq!(all.len(), 2, "the failed record and its one retry: {all:?}");
    assert_eq!(
        first.retried_as(),
        Some(retries[0].id()),
        "the claim names it"
    );
    assert_eq!(jobs_named(&h, retries[0].id().as_str()).await.len(), 1);
    assert_eq!(jobs_named(&h, &id).await.len(), 1);
    // Both replicas saw every record end where the database says it ended, and their
    // final lines agree.
    let (a, b) = (last_states(&outputs[0]), last_states(&outputs[1]));
    assert_eq!(
        a, b,
        "the watchers' final lines:\n{}\n--\n{}",
        outputs[0], outputs[1]
    );
    for record in [&first, retries[0]] {
        let stored = record.state().to_string();
        assert_eq!(a.get(record.id().as_str()), Some(&stored), "{}", outputs[0]);
        assert_eq!(b.get(record.id().as_str()), Some(&stored), "{}", outputs[1]);
    }
    // `slurmctl records --json` lists from PostgreSQL what the database holds (a fresh
    // state folder: nothing local to read).
    let fresh = tempfile::tempdir().unwrap();
    let listed = run(
        &ctl,
        &["--json", "records"],
        &replica(fresh.path(), database.url()),
        Duration::from_secs(60),
    );
    let mut listed: Vec<(String, String)> = listed
        .expect_code(0)
        .json_lines()
        .iter()
        .map(|v| {
            (
                v["id"].as_str().unwrap().into(),
                v["state"].as_str().unwrap().into(),
            )
        })
        .collect();
    let mut stored: Vec<(String, String)> = all
        .iter()
        .map(|r| (r.id().to_string(), r.state().to_string()))
        .collect();
    listed.sort();
    stored.sort();
    assert_eq!(
        listed, stored,
        "records --json lists the database's records"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_postgres_settle_a_crashed_submit_once() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let database = PostgresFixture::new(&postgres_url());
    let store = PostgresRecordStore::connect(database.url()).unwrap();
    // A submitter that died after sbatch took the job: its record SUBMITTING, attempt 1
    // counted, its answer left in the attempt's folder on the cluster.
    let spec = small_spec("crashed", "true");
    let id = JobId::mint_for(&spec);
    let root = RemotePath::parse(h.testbed.get("SLURM_BASE_RESULTS_DIR")).unwrap();
    let record = JobRecord::new(id.clone(), &spec, root.join(id.as_str()).unwrap()).unwrap();
    let record = RecordFixture::new(record)
        .submit_attempts(1)
        .submitted_ago(Duration::from_secs(30))
        .into_record();
    store.open(&record).unwrap();
    remote(
        &h,
        Command::new("bash").arg("-c").arg(
            r#"mkdir -p "$1/.sbatch-1" && cd "$1" && { sbatch --parsable --hold --job-name="$2" --partition="$3" --gres=gpu:1 --cpus-per-task=1 --time=5 --output=/dev/null --wrap='sleep 20' > .sbatch-1/out 2> .sbatch-1/err; echo $? > .sbatch-1/rc; }"#,
        )
        .arg("crashed-attempt")
        .arg(record.results_dir().as_str())
        .arg(id.as_str())
        .arg(h.testbed.get("SLURM_PARTITION")),
    )
    .await;
    assert_eq!(
        store.submit_in_progress(&id).unwrap(),
        Some(false),
        "its submitter is gone"
    );
    // Two replicas ask for its status at once.
    let ctl = example("slurmctl");
    let states: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let askers: Vec<_> = states
        .iter()
        .map(|state| {
            let (ctl, env, id) = (
                ctl.clone(),
                replica(state.path(), database.url()),
                id.to_string(),
            );
            std::thread::spawn(move || {
                run(
                    &ctl,
                    &["--json", "status", &id],
                    &env,
                    Duration::from_secs(120),
                )
            })
        })
        .collect();
    let answers: Vec<serde_json::Value> = askers
        .into_iter()
        .map(|a| {
            let run = a.join().unwrap();
            run.expect_code(0);
            run.json_lines()[0].clone()
        })
        .collect();
    let jobs = jobs_named(&h, id.as_str()).await;
    assert_eq!(jobs.len(), 1, "one job: {jobs:?}");
    let settled = store.get(&id).unwrap();
    assert_eq!(
        settled.backend_ref().map(|r| r.native_id.as_str()),
        Some(jobs[0].as_str()),
        "the job the crashed submit left was adopted"
    );
    assert_eq!(settled.submit_attempts(), Some(1), "nothing sent again");
    // Held, the job stays PENDING: SUBMITTING, then PENDING once, whoever settled it.
    let states: Vec<JobState> = settled.history().iter().map(|t| t.state()).collect();
    assert_eq!(
        states,
        vec![JobState::Submitting, JobState::Pending],
        "settled once"
    );
    for answer in &answers {
        assert_eq!(answer["state"], "PENDING", "{answer}");
        assert_eq!(answer["slurm_job_id"].to_string(), jobs[0], "{answer}");
    }
    let _ = remote(&h, Command::new("scancel").arg(&jobs[0])).await;
}

/// The store is called from async code (every `Backend` caller is): on either runtime
/// flavour its blocking client runs on the store's own thread, so nothing panics with
/// "Cannot start a runtime from within a runtime".
#[tokio::test(flavor = "current_thread")]
async fn the_postgres_store_works_inside_an_async_runtime_of_either_flavour() {
    let _cluster = cluster::shared().await;
    let database = PostgresFixture::new(&postgres_url());
    let store = PostgresRecordStore::connect(database.url()).unwrap();
    let spec = small_spec("in-runtime", "true");
    let id = JobId::mint_for(&spec);
    let root = RemotePath::parse("/shared/results").unwrap();
    store
        .open(&JobRecord::new(id.clone(), &spec, root.join(id.as_str()).unwrap()).unwrap())
        .unwrap();
    assert_eq!(store.get(&id).unwrap().state(), JobState::Submitting);
    let lease = store.submit_lease(&id).unwrap();
    assert_eq!(store.submit_in_progress(&id).unwrap(), Some(true));
    drop(lease);
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listed = std::thread::spawn(move || {
        multi.block_on(async move {
            tokio::spawn(async move { store.list(&RecordFilter::any()).unwrap().len() })
                .await
                .unwrap()
        })
    })
    .join()
    .unwrap();
    assert_eq!(listed, 1);
}

/// A PostgreSQL call that waits (here for a row another replica holds, as a change of it
/// does) waits off the runtime: on a current-thread runtime, a task ticking every 10 ms
/// keeps ticking while `AsyncStore::mark` waits, and the mark
/// lands once the row is free. The row is released once the ticker ticked 30 times (or
/// after 20 s: a call that blocked the runtime then fails on the ticks).
#[test]
fn a_slow_postgres_call_leaves_a_current_thread_runtime_ticking() {
    let _cluster = cluster::shared_blocking();
    let database = PostgresFixture::new(&postgres_url());
    let store: Arc<dyn RecordStore> =
        Arc::new(PostgresRecordStore::connect(database.url()).unwrap());
    let spec = small_spec("slow-call", "true");
    let id = JobId::mint_for(&spec);
    let root = RemotePath::parse("/shared/results").unwrap();
    store
        .open(&JobRecord::new(id.clone(), &spec, root.join(id.as_str()).unwrap()).unwrap())
        .unwrap();
    let held = database.hold_row(&id);
    let (ticked, ticks) = mpsc::channel();
    let releaser = std::thread::spawn(move || {
        let paced = wait_for_ticks(&ticks, 30, Duration::from_secs(20));
        held.release();
        paced
    });
    let records = AsyncStore::new(Arc::clone(&store));
    let mark = Mark::new(JobState::NotSubmitted, TransitionSource::Agent).message("slow");
    let (marked, pace) = keeps_pace(async { records.mark(&id, mark).await }, ticked);
    let released_on_ticks = releaser.join().unwrap();
    assert!(
        released_on_ticks,
        "the ticker stopped while the call waited: {pace:?}"
    );
    assert!(
        pace.kept(30),
        "the ticker stopped while the call waited: {pace:?}"
    );
    assert_eq!(marked.unwrap().state(), JobState::NotSubmitted);
}
