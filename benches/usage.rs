//! The usage report at scale (no cluster): 100,000 ended records with accounting, kept
//! in a SQLite store in a temporary folder, summed by day (`ledger::usage_of`); its
//! baseline, in the same run, is listing the same records bare
//! (`RecordStore::list(&RecordFilter::any())`), so the ratio is what summing adds to
//! reading. Prints its rows (not part of `BENCHMARKS.md` yet).
//! `cargo bench --bench usage` (`SLURM_RUN_USAGE_RECORDS` for another count).

use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use slurm_core::{
    usage_of, BackendRef, GroupBy, JobId, JobRecord, JobSpec, JobState, Mark, RecordFilter,
    RecordStore, RemotePath, Timeline, TransitionSource,
};
use slurm_records::SqliteRecordStore;
use slurm_run_testsupport::bench::{median, Area, Baseline, Row};

/// Records in the store.
const RECORDS: usize = 100_000;

/// Timed runs of each measure (the median is reported).
const RUNS: usize = 5;

/// Ended record `i`: started on one of 30 days, with the accounting of a run of 1 to 8
/// GPUs (every tenth without a GPU figure, as a cluster that does not account GPUs
/// tells it).
fn ended_record(i: usize, spec: &JobSpec, results: &RemotePath) -> JobRecord {
    let id = JobId::parse(&format!("usage-{i:06}")).unwrap();
    let mut record = JobRecord::new(id.clone(), spec, results.join(id.as_str()).unwrap()).unwrap();
    let submitted = Utc.with_ymd_and_hms(2026, 11, 1, 0, 0, 0).unwrap()
        + chrono::Duration::minutes((i % (30 * 24 * 60)) as i64);
    let started = submitted + chrono::Duration::seconds((i % 600) as i64);
    let elapsed = 600 + (i % 3000) as i64;
    let ended = started + chrono::Duration::seconds(elapsed);
    let mark = |state| Mark::new(state, TransitionSource::Poll);
    let times = Timeline::new(Some(submitted), Some(submitted), Some(started), Some(ended));
    for m in [
        mark(JobState::Pending).backend_ref(BackendRef::new((1_000_000 + i).to_string())),
        mark(JobState::Running),
        mark(JobState::Complete).times(times),
    ] {
        record.apply_mark(m, None).unwrap();
    }
    // Accounting's figures, set the way a store reads them back (the record's JSON).
    let gpus = (!i.is_multiple_of(10)).then_some(1 + (i % 8) as u64);
    let mut json = serde_json::to_value(&record).unwrap();
    json["usage"] = serde_json::json!({
        "runs": 1,
        "started_at": started,
        "elapsed_s": elapsed,
        "time_limit_s": 3600,
        "queue_wait_s": (started - submitted).num_seconds(),
        "gpus": gpus,
        "cpus": 16,
        "gpu_seconds": gpus.map(|g| g * elapsed as u64),
        "cpu_seconds": 16 * elapsed,
        "max_rss_bytes": 1u64 << 33,
        "gpu_util_percent": null,
        "gpu_mem_bytes": null,
    });
    JobRecord::from_stored_json(&serde_json::to_vec(&json).unwrap(), "bench").unwrap()
}

/// The median time of `RUNS` runs of `work`, and its last answer.
fn timed<T>(mut work: impl FnMut() -> T) -> (T, Duration) {
    let mut samples = Vec::with_capacity(RUNS);
    let mut last = None;
    for _ in 0..RUNS {
        let start = Instant::now();
        let value = work();
        samples.push(start.elapsed());
        last = Some(value);
    }
    (last.expect("at least one run"), median(samples))
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return; // built by `cargo test --all-targets`; runs only under `cargo bench`
    }
    let count = std::env::var("SLURM_RUN_USAGE_RECORDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(RECORDS);
    let started = Instant::now();
    let spec = JobSpec::new("usage", "python train.py");
    let results = RemotePath::parse("/lustre/results").unwrap();
    let records: Vec<JobRecord> = (0..count)
        .map(|i| ended_record(i, &spec, &results))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteRecordStore::open(dir.path().join("records.sqlite")).unwrap();
    store.open_many(&records).unwrap();
    drop(records);
    println!(
        "{count} ended records with usage made and stored in SQLite in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let (listed, list) = timed(|| store.list(&RecordFilter::any()).unwrap().len());
    let (report, summary) = timed(|| usage_of(&store, None, &GroupBy::Day).unwrap());
    assert_eq!(listed, count);
    assert_eq!(report.total.jobs, count as u64);
    let mut area = Area::new("usage", "listing the same records", "-");
    area.push(
        Row::new(format!("usage by day of {count} records (SQLite)"), summary)
            .bare(Baseline::measured(format!("list {count} records"), list))
            .note(format!(
                "{} days, {:.0} GPU-hours, {} without a GPU figure",
                report.rows.len(),
                report.total.gpu_hours.unwrap_or(0.0),
                report.total.gpu_unaccounted
            )),
    );
    println!(
        "summary {:.1} ms, list {:.1} ms: summary / list = {:.2}",
        summary.as_secs_f64() * 1e3,
        list.as_secs_f64() * 1e3,
        summary.as_secs_f64() / list.as_secs_f64()
    );
}
