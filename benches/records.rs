//! The client at scale, for each record store side by side (no cluster): 100,000 jobs
//! (90,000 ended, 10,000 live) kept by the file store (a folder of JSON files), the
//! SQLite store and the PostgreSQL store (the test bed's server:
//! `SLURM_RUN_TEST_POSTGRES_URL`), each listed whole, filtered by state, and the live
//! ones watched; then a watch of the 10,000 live jobs over an hour of simulated polls
//! (360 polls, the default 10 s apart) whose heap must stay flat. Time and peak heap of
//! each; for the file store, the baseline is reading the record files' bytes without
//! parsing them (the floor of a store of one file per record).
//!
//! The cluster is simulated: [`SimulatedCluster`] is a `Transport` that answers the
//! poll's own command (the ids it asks about, on stdin) with squeue rows in the poll's
//! framing, each job PENDING until its turn to run and RUNNING after, so the watch
//! marks records as a real one would, without the cluster. Writes the `records` area of
//! `BENCHMARKS.md`. `cargo bench --bench records` (with the test bed's PostgreSQL up).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::StreamExt;
use slurm_core::{
    Backend, BackendRef, Command, JobId, JobRecord, JobSpec, JobState, Mark, MemoryRecordStore,
    Output, RecordFilter, RecordStore, RemotePath, SlurmBackend, SlurmConfig, TransitionSource,
    Transport, WatchEvent, WatchOptions,
};
use slurm_records::testing::PostgresFixture;
use slurm_records::{PostgresRecordStore, RecordsLocation, SqliteRecordStore};
use slurm_render::HandlebarsRenderer;
use slurm_run_testsupport::bench::heap::{self, Counting};
use slurm_run_testsupport::bench::{memory_mib, ms, Area, Baseline, Row};

#[global_allocator]
static HEAP: Counting = Counting;

/// Records in the folder.
const RECORDS: usize = 100_000;

/// Of which live (PENDING or RUNNING).
const LIVE: usize = 10_000;

/// An hour of polls at the default interval (10 s).
const HOUR_OF_POLLS: usize = 360;

/// The SLURM job id of record `i`.
fn native(i: usize) -> u64 {
    1_000_000 + i as u64
}

/// A cluster that answers polls: job `n` is PENDING until poll `n % 300`, RUNNING after,
/// and from poll `end_at` on it is no longer listed and accounting says COMPLETED (so a
/// watch ends by itself). Every `sample_every` polls it notes the heap and resident
/// memory (the poll count, heap MiB, resident MiB), so the watch's memory is read at its
/// own pace, without a clock. It keeps a poll's rows as the login node's script does
/// (`poll.sh`'s memo): a poll naming the slot whose rows it lists again is answered
/// `@@memo same`.
#[derive(Debug)]
struct SimulatedCluster {
    polls: AtomicUsize,
    end_at: usize,
    sample_every: usize,
    samples: std::sync::Mutex<Vec<(usize, f64, f64)>>,
    /// squeue's rows kept, by client and slot.
    kept: std::sync::Mutex<std::collections::HashMap<(String, String), String>>,
    /// The lists of jobs kept, by client.
    lists: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

impl SimulatedCluster {
    fn new(end_at: usize, sample_every: usize) -> Self {
        SimulatedCluster {
            polls: AtomicUsize::new(0),
            end_at,
            sample_every,
            samples: std::sync::Mutex::new(Vec::new()),
            kept: std::sync::Mutex::new(std::collections::HashMap::new()),
            lists: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }
}

/// The job ids a poll asks about: its standard input holds `K KIND COUNT` headers, each
/// followed by COUNT lines; the jobs are the `J` lists.
fn asked_jobs(stdin: &str) -> Vec<&str> {
    let mut jobs = Vec::new();
    let mut lines = stdin.lines();
    while let Some(header) = lines.next() {
        let fields: Vec<&str> = header.split(' ').collect();
        let count: usize = fields
            .get(2)
            .and_then(|c| c.parse().ok())
            .expect("a headed list");
        let items = lines.by_ref().take(count);
        if fields[1] == "J" {
            jobs.extend(items);
        } else {
            items.for_each(drop);
        }
    }
    jobs
}

#[async_trait]
impl Transport for SimulatedCluster {
    async fn run(&self, command: &Command) -> slurm_core::Result<Output> {
        let poll = self.polls.fetch_add(1, Ordering::SeqCst) + 1;
        if poll.is_multiple_of(self.sample_every) {
            let sample = (poll, heap::current_mib(), memory_mib());
            self.samples.lock().unwrap().push(sample);
        }
        // bash -c SCRIPT poll LIVE LISTS-BY MEMO ...: the memo, `CLIENT:HELD:WRITE:LISTS`
        // or `-`. A poll holding a slot brings no lists: those kept for its client.
        let memo = command.get_args().get(5).cloned().unwrap_or_default();
        let words: Vec<&str> = memo.split(':').collect();
        let memo = match words[..] {
            [client, held, write, _] => Some((client.to_string(), held, write)),
            _ => None,
        };
        let stdin = match (&memo, command.stdin_bytes()) {
            (Some((client, "-", _)), Some(lists)) => {
                let lists = String::from_utf8_lossy(lists).into_owned();
                self.lists
                    .lock()
                    .unwrap()
                    .insert(client.clone(), lists.clone());
                lists
            }
            (Some((client, _, _)), None) => match self.lists.lock().unwrap().get(client) {
                Some(lists) => lists.clone(),
                None => {
                    return Ok(Output {
                        status: 0,
                        stdout: b"@@memo lost\n".to_vec(),
                        stderr: Vec::new(),
                    })
                }
            },
            (_, lists) => String::from_utf8_lossy(lists.unwrap_or_default()).into_owned(),
        };
        let (mut squeue, mut sacct) = (String::new(), String::new());
        for id in asked_jobs(&stdin) {
            let n: u64 = id.parse().expect("a job id");
            if poll >= self.end_at {
                sacct.push_str(&format!(
                    "O {id}|{id}|COMPLETED|0:0|None|2024-05-01T10:00:00|2024-05-01T10:00:01|2024-05-01T11:00:00|n1|bench\n"
                ));
            } else if (n as usize) % 300 < poll {
                squeue.push_str(&format!("O {id}|RUNNING|None|n1|bench\n"));
            } else {
                squeue.push_str(&format!("O {id}|PENDING|Priority|(null)|bench\n"));
            }
        }
        let mut out = format!("@@begin 0\n{squeue}@@end 0 0\n@@begin 1\n{sacct}@@end 1 0\n");
        if let Some((client, held, write)) = memo {
            let mut kept = self.kept.lock().unwrap();
            let slot = |slot: &str| (client.clone(), slot.to_string());
            if kept.get(&slot(held)) == Some(&squeue) && sacct.is_empty() {
                out = "@@memo same\n".to_string();
            } else if sacct.is_empty() {
                kept.insert(slot(write), squeue);
                out.push_str(&format!("@@memo kept {write}\n"));
            } else {
                out.push_str("@@memo none\n");
            }
        }
        Ok(Output {
            status: 0,
            stdout: out.into_bytes(),
            stderr: Vec::new(),
        })
    }
}

/// `RECORDS` records as a store keeps them: the first `LIVE` PENDING, the rest
/// COMPLETE, ERROR or CANCELED, each with its history.
fn make_records() -> Vec<JobRecord> {
    let memory = MemoryRecordStore::new();
    let spec = JobSpec::new("scale", "python train.py --epochs 3");
    let results = RemotePath::parse("/lustre/results").unwrap();
    let mut records = Vec::with_capacity(RECORDS);
    for i in 0..RECORDS {
        let id = JobId::parse(&format!("scale-{i:06}")).unwrap();
        let record = JobRecord::new(id.clone(), &spec, results.join(id.as_str()).unwrap()).unwrap();
        memory.open(&record).unwrap();
        let mark = |state| Mark::new(state, TransitionSource::Poll);
        memory
            .mark(
                &id,
                mark(JobState::Pending).backend_ref(BackendRef::new(native(i).to_string())),
            )
            .unwrap();
        if i >= LIVE {
            memory.mark(&id, mark(JobState::Running)).unwrap();
            let end = [JobState::Complete, JobState::Error, JobState::Canceled][i % 3];
            memory.mark(&id, mark(end)).unwrap();
        }
        records.push(memory.get(&id).unwrap());
    }
    records
}

/// A store under measure: its name, where it is, and what keeps it alive.
struct Candidate {
    name: &'static str,
    location: RecordsLocation,
    _keep: Box<dyn std::any::Any>,
}

/// The three stores, each holding `records` (written the way each keeps them).
fn candidates(records: &[JobRecord]) -> Vec<Candidate> {
    let folder = tempfile::tempdir().unwrap();
    for record in records {
        std::fs::write(
            folder.path().join(format!("{}.json", record.id())),
            serde_json::to_vec_pretty(record).unwrap(),
        )
        .unwrap();
    }
    let sqlite_dir = tempfile::tempdir().unwrap();
    let sqlite = sqlite_dir.path().join("records.sqlite");
    SqliteRecordStore::open(&sqlite)
        .unwrap()
        .open_many(records)
        .unwrap();
    let url = std::env::var("SLURM_RUN_TEST_POSTGRES_URL").expect(
        "SLURM_RUN_TEST_POSTGRES_URL: the test bed's PostgreSQL (testbed/up; eval \"$(testbed/env)\")",
    );
    let postgres = PostgresFixture::new(&url);
    PostgresRecordStore::connect(postgres.url())
        .unwrap()
        .open_many(records)
        .unwrap();
    vec![
        Candidate {
            name: "files",
            location: RecordsLocation::Folder(folder.path().to_path_buf()),
            _keep: Box::new(folder),
        },
        Candidate {
            name: "SQLite",
            location: RecordsLocation::Sqlite(sqlite),
            _keep: Box::new(sqlite_dir),
        },
        Candidate {
            name: "PostgreSQL",
            location: RecordsLocation::Postgres(postgres.url().to_string()),
            _keep: Box::new(postgres),
        },
    ]
}

/// Time and peak heap (MiB, over what was held before) of `work`.
fn measured<T>(work: impl FnOnce() -> T) -> (T, Duration, f64) {
    heap::reset_peak();
    let before = heap::current_mib();
    let start = Instant::now();
    let value = work();
    let took = start.elapsed();
    (value, took, heap::peak_mib() - before)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return; // built by `cargo test --all-targets`; runs only under `cargo bench`
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut area = Area::new("records", "reading the record files' bytes, unparsed", "-");
    let started = Instant::now();
    let records = make_records();
    let live: Vec<JobId> = records[..LIVE].iter().map(|r| r.id().clone()).collect();
    let stores = candidates(&records);
    drop(records);
    println!(
        "{RECORDS} records made and stored three ways in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let folder = match &stores[0].location {
        RecordsLocation::Folder(dir) => dir.clone(),
        _ => unreachable!("the file store comes first"),
    };
    let (bytes, raw, _) = measured(|| {
        let mut total = 0usize;
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "json") {
                total += std::fs::read(&path).unwrap().len();
            }
        }
        total
    });
    let floor = Baseline::measured(format!("{:.0} MiB read", bytes as f64 / 1048576.0), raw);
    let mut notes = Vec::new();
    for candidate in &stores {
        let name = candidate.name;
        let with_floor = |row: Row| match name {
            "files" => row.bare(floor.clone()),
            _ => row,
        };
        // A store just opened: nothing read before.
        let store = candidate.location.open().unwrap();
        let (all, took, peak) = measured(|| store.list(&RecordFilter::any()).unwrap());
        assert_eq!(all.len(), RECORDS);
        drop(all);
        let aim = if name == "SQLite" {
            format!(
                "; aim under 300 ms: {}",
                if took.as_millis() < 300 {
                    "met"
                } else {
                    "**not met**"
                }
            )
        } else {
            String::new()
        };
        area.push(with_floor(
            Row::new(format!("{name}: list {RECORDS} records"), took)
                .note(format!("peak heap +{peak:.0} MiB{aim}")),
        ));
        let (pending, took, peak) = measured(|| {
            store
                .list(&RecordFilter::any().state(JobState::Pending))
                .unwrap()
        });
        assert_eq!(pending.len(), LIVE);
        drop(pending);
        area.push(with_floor(
            Row::new(
                format!("{name}: filter {RECORDS} records by state ({LIVE} PENDING)"),
                took,
            )
            .note(format!("peak heap +{peak:.0} MiB")),
        ));
        let label = RecordFilter::any().label("no-such", "label");
        let (none, took, _) = measured(|| store.list(&label).unwrap());
        assert!(none.is_empty());
        area.push(Row::new(
            format!("{name}: filter {RECORDS} records by a label none has"),
            took,
        ));
        drop(store);

        let (polls, per_poll, samples) = watch(&rt, &candidate.location, &live, &mut area, name);
        let first = samples.first().copied().unwrap_or_default();
        let last = samples.last().copied().unwrap_or_default();
        let max = samples.iter().map(|s| s.1).fold(0.0, f64::max);
        println!("{name}: heap and resident memory through the hour (poll, heap MiB, resident MiB): {samples:?}");
        notes.push(format!(
            "{name}: {polls} polls, {per_poll:.1} ms each; heap {:.1} MiB at poll {}, {:.1} MiB at poll {} (at most {max:.1})",
            first.1, first.0, last.1, last.0
        ));
    }
    area.notes.push(format!(
        "{RECORDS} records (`FileRecordStore`: one JSON file each; `SqliteRecordStore`: one \
         database file; `PostgresRecordStore`: the test bed's server on this machine, over \
         TCP on 127.0.0.1): {LIVE} live, the rest ended. Each listing is by a store just \
         opened (nothing kept from an earlier read). Peak heap is the most the process \
         held on the heap during the figure over what it held before (a counting \
         allocator: the system allocator's reuse would hide it from the resident size). \
         The watch's cluster is simulated (a transport that answers the poll's command \
         with squeue rows; each job turns RUNNING once in the hour's first 300 polls, so \
         records are marked as in a real watch, and all end COMPLETED at its last poll, \
         which ends the watch); no cluster is involved, so these are the client's own \
         costs. The heap grows a little while jobs start (each record kept gains a \
         transition) and stays flat once all have (polls 300 to 360)."
    ));
    area.notes.push(format!(
        "The hour of polls, per store: {}.",
        notes.join("; ")
    ));
    area.save();
}

/// The watch of the `live` jobs of the store at `location`: the first poll (finding them
/// and polling once), then an hour of polls until every job has ended. Pushes the two
/// figures; answers the polls of the hour, the time per poll (ms) and the memory samples.
fn watch(
    rt: &tokio::runtime::Runtime,
    location: &RecordsLocation,
    live: &[JobId],
    area: &mut Area,
    name: &str,
) -> (usize, f64, Vec<(usize, f64, f64)>) {
    // The first poll (below) and the hour after it; the jobs end at the hour's last poll.
    let cluster = Arc::new(SimulatedCluster::new(1 + HOUR_OF_POLLS, 36));
    let state = tempfile::tempdir().unwrap();
    let config = SlurmConfig::builder()
        .with_partition("gpu")
        .with_results_root("/lustre/results")
        .with_state_dir(state.path())
        .build()
        .unwrap();
    let backend = SlurmBackend::new(
        Arc::clone(&cluster),
        HandlebarsRenderer::new(),
        location.open().unwrap(),
        config,
    );
    let (first, took, peak) = measured(|| {
        rt.block_on(async {
            let live = backend
                .records(&RecordFilter::any().active())
                .await
                .unwrap();
            let ids: Vec<JobId> = live.iter().map(|r| r.id().clone()).collect();
            assert_eq!(ids.len(), LIVE);
            backend.status_many(&ids).await.unwrap()
        })
    });
    // The jobs whose turn came at that first poll are RUNNING already; the watch reports
    // the others' start.
    let started_before = first
        .iter()
        .filter(|s| s.record().state() == JobState::Running)
        .count();
    drop(first);
    area.push(
        Row::new(
            format!("{name}: watch of the {LIVE} live ones: find them, one poll"),
            took,
        )
        .note(format!("peak heap +{peak:.0} MiB; simulated cluster")),
    );

    // An hour of polls of the 10,000 live jobs through the watch, its events consumed
    // here; the cluster samples heap and resident memory every 36 polls and ends every
    // job at the hour's last poll, so the watch ends by itself.
    let before = cluster.polls.load(Ordering::SeqCst);
    let started = Instant::now();
    let (running, ended) = rt.block_on(async {
        let options = WatchOptions {
            interval: Duration::from_millis(1),
            ..WatchOptions::default()
        };
        let mut events = backend.watch(live, options);
        let (mut running, mut ended) = (0usize, 0usize);
        while let Some(event) = events.next().await {
            if let WatchEvent::Transition { status, .. } = event.expect("a watch event") {
                match status.record().state() {
                    JobState::Running => running += 1,
                    JobState::Complete => ended += 1,
                    other => panic!("unexpected transition to {other:?}"),
                }
            }
        }
        (running, ended)
    });
    let hour = started.elapsed();
    let polls = cluster.polls.load(Ordering::SeqCst) - before;
    assert_eq!(
        running + started_before,
        LIVE,
        "every job not yet running was reported RUNNING once"
    );
    assert_eq!(ended, LIVE, "every job was reported COMPLETE once");
    let samples = cluster.samples.lock().unwrap().clone();
    let first = samples.first().copied().unwrap_or_default();
    let last = samples.last().copied().unwrap_or_default();
    let max = samples.iter().map(|s| s.1).fold(0.0, f64::max);
    let per_poll = ms(hour) / polls as f64;
    area.push(
        Row::new(format!("{name}: watch of {LIVE} live jobs, {HOUR_OF_POLLS} polls (an hour at 10 s)"), hour)
            .note(format!(
                "heap {:.1} MiB at poll {}, {:.1} MiB at poll {} (at most {max:.1} MiB); resident {:.0} then {:.0} MiB; {per_poll:.1} ms per poll",
                first.1, first.0, last.1, last.0, first.2, last.2,
            )),
    );
    (polls, per_poll, samples)
}
