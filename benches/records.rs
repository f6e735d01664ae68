//! The client at scale (no test bed): a record folder of 100,000 jobs (90,000 ended,
//! 10,000 live), listed whole, filtered by state, and the live ones watched; then a
//! watch of the 10,000 live jobs over an hour of simulated polls (360 polls, the
//! default 10 s apart) whose resident memory must stay flat. Time and peak resident
//! memory of each; the baseline is reading the record files' bytes without parsing
//! them (the floor of a store of one file per record).
//!
//! The cluster is simulated: [`SimulatedCluster`] is a `Transport` that answers the
//! poll's own command (the ids it asks about, on stdin) with squeue rows in the poll's
//! framing, each job PENDING until its turn to run and RUNNING after, so the watch
//! marks records as a real one would, without the test bed. Writes the `records` area of
//! `BENCHMARKS.md`. `cargo bench --bench records`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::StreamExt;
use slurm_core::backend::{Backend, WatchEvent, WatchOptions};
use slurm_core::record::{BackendRef, JobId, JobRecord, Mark, RecordFilter, RecordStore, TransitionSource};
use slurm_core::slurm::{SlurmBackend, SlurmConfig};
use slurm_core::storage::RemotePath;
use slurm_core::transport::{Command, Output, Transport};
use slurm_core::{FileRecordStore, JobSpec, JobState, MemoryRecordStore};
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

/// A cluster that answers polls: job `n` is PENDING until poll `n % 300`, RUNNING after.
#[derive(Debug, Default)]
struct SimulatedCluster {
    polls: AtomicUsize,
}

#[async_trait]
impl Transport for SimulatedCluster {
    async fn run(&self, command: &Command) -> slurm_core::Result<Output> {
        let poll = self.polls.fetch_add(1, Ordering::SeqCst);
        let stdin = String::from_utf8_lossy(command.stdin_bytes().unwrap_or_default()).into_owned();
        let mut out = String::from("@@begin 0\n");
        for line in stdin.lines() {
            let mut fields = line.split(' ');
            let (Some(_group), Some("J"), Some(id)) = (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            let n: u64 = id.parse().expect("a job id");
            if (n as usize) % 300 < poll {
                out.push_str(&format!("O {id}|RUNNING|None|n1|bench\n"));
            } else {
                out.push_str(&format!("O {id}|PENDING|Priority|(null)|bench\n"));
            }
        }
        out.push_str("@@end 0 0\n@@begin 1\n@@end 1 0\n");
        Ok(Output {
            status: 0,
            stdout: out.into_bytes(),
            stderr: Vec::new(),
        })
    }
}

/// Write `RECORDS` record files into `dir` as the file store keeps them: the first
/// `LIVE` PENDING, the rest COMPLETE, ERROR or CANCELED, each with its history.
fn make_records(dir: &std::path::Path) -> Vec<JobId> {
    let memory = MemoryRecordStore::new();
    let spec = JobSpec::new("scale", "python train.py --epochs 3");
    let results = RemotePath::parse("/lustre/results").unwrap();
    let mut live = Vec::with_capacity(LIVE);
    for i in 0..RECORDS {
        let id = JobId::parse(&format!("scale-{i:06}")).unwrap();
        let record = JobRecord::new(id.clone(), &spec, results.join(id.as_str()).unwrap()).unwrap();
        memory.open(&record).unwrap();
        let mark = |state| Mark::new(state, TransitionSource::Poll);
        memory
            .mark(&id, mark(JobState::Pending).backend_ref(BackendRef::new(native(i).to_string())))
            .unwrap();
        if i >= LIVE {
            memory.mark(&id, mark(JobState::Running)).unwrap();
            let end = [JobState::Complete, JobState::Error, JobState::Canceled][i % 3];
            memory.mark(&id, mark(end)).unwrap();
        } else {
            live.push(id.clone());
        }
        let record = memory.get(&id).unwrap();
        std::fs::write(
            dir.join(format!("{id}.json")),
            serde_json::to_vec_pretty(&record).unwrap(),
        )
        .unwrap();
    }
    live
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
    let mut area = Area::new(
        "records",
        "reading the record files' bytes, unparsed",
        "-",
    );
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let live = make_records(dir.path());
    println!("{RECORDS} records written in {:.1} s", started.elapsed().as_secs_f64());
    let store = FileRecordStore::new(dir.path()).unwrap();

    let (bytes, raw, _) = measured(|| {
        let mut total = 0usize;
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "json") {
                total += std::fs::read(&path).unwrap().len();
            }
        }
        total
    });
    let floor = Baseline::measured(format!("{:.0} MiB read", bytes as f64 / 1048576.0), raw);

    let (all, took, peak) = measured(|| store.list(&RecordFilter::any()).unwrap());
    assert_eq!(all.len(), RECORDS);
    drop(all);
    area.push(
        Row::new(format!("list {RECORDS} records"), took)
            .bare(floor.clone())
            .note(format!("peak heap +{peak:.0} MiB")),
    );
    let (running, took, peak) = measured(|| store.list(&RecordFilter::any().state(JobState::Pending)).unwrap());
    assert_eq!(running.len(), LIVE);
    area.push(
        Row::new(format!("filter {RECORDS} records by state ({LIVE} PENDING)"), took)
            .bare(floor.clone())
            .note(format!("peak heap +{peak:.0} MiB")),
    );

    let cluster = Arc::new(SimulatedCluster::default());
    let config = SlurmConfig::builder()
        .with_partition("gpu")
        .with_results_root("/lustre/results")
        .with_state_dir(dir.path())
        .build()
        .unwrap();
    let backend = SlurmBackend::new(
        Arc::clone(&cluster),
        HandlebarsRenderer::new(),
        FileRecordStore::new(dir.path()).unwrap(),
        config,
    );
    let (_, took, peak) = measured(|| {
        rt.block_on(async {
            let live = backend.records(&RecordFilter::any().active()).unwrap();
            let ids: Vec<JobId> = live.iter().map(|r| r.id.clone()).collect();
            assert_eq!(ids.len(), LIVE);
            backend.status_many(&ids).await.unwrap()
        })
    });
    area.push(
        Row::new(format!("watch of the {LIVE} live ones: find them, one poll"), took)
            .bare(floor)
            .note(format!("peak heap +{peak:.0} MiB; simulated cluster")),
    );

    // An hour of polls of the 10,000 live jobs through the watch (a task of its own,
    // consuming its events); heap and resident memory sampled every 36 polls.
    cluster.polls.store(0, Ordering::SeqCst);
    let mut samples: Vec<(usize, f64, f64)> = Vec::new();
    let started = Instant::now();
    let transitions = Arc::new(AtomicUsize::new(0));
    rt.block_on(async {
        let options = WatchOptions {
            interval: Duration::from_millis(1),
            ..WatchOptions::default()
        };
        let mut events = backend.watch(&live, options);
        let counted = Arc::clone(&transitions);
        let watch = tokio::spawn(async move {
            while let Some(event) = events.next().await {
                if let Ok(WatchEvent::Transition { .. }) = event {
                    counted.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        loop {
            let polls = cluster.polls.load(Ordering::SeqCst);
            if polls % 36 == 0 && polls > 0 && samples.last().map(|s| s.0) != Some(polls) {
                samples.push((polls, heap::current_mib(), memory_mib()));
            }
            if polls >= HOUR_OF_POLLS {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        watch.abort();
        let _ = watch.await;
    });
    let hour = started.elapsed();
    assert_eq!(
        transitions.load(Ordering::SeqCst),
        LIVE,
        "every job was reported RUNNING once"
    );
    let first = samples.first().copied().unwrap_or_default();
    let last = samples.last().copied().unwrap_or_default();
    let max = samples.iter().map(|s| s.1).fold(0.0, f64::max);
    println!("heap and resident memory through the hour (poll, heap MiB, resident MiB): {samples:?}");
    area.push(
        Row::new(format!("watch of {LIVE} live jobs, {HOUR_OF_POLLS} polls (an hour at 10 s)"), hour)
            .note(format!(
                "heap {:.1} MiB at poll {}, {:.1} MiB at poll {} (at most {max:.1} MiB); resident {:.0} then {:.0} MiB; {:.1} ms per poll",
                first.1, first.0, last.1, last.0, first.2, last.2,
                ms(hour) / HOUR_OF_POLLS as f64
            )),
    );
    area.notes.push(format!(
        "{RECORDS} records of one folder (`FileRecordStore`, one JSON file each): {LIVE} \
         live, the rest ended. Peak heap is the most the process held on the heap during the \
         figure over what it held before (a counting allocator: the system allocator's \
         reuse would hide it from the resident size). The watch's cluster is simulated (a \
         transport that answers the poll's command with squeue rows; each job turns RUNNING \
         once during the hour, so records are marked as in a real watch); no test bed is \
         involved, so these are the client's own costs."
    ));
    area.save();
}
