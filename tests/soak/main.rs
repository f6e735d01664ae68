//! The soak: many small jobs submitted and watched through `Ssh2Transport` while a chaos
//! task kills the sshd processes serving our connections and injects lost answers; at the
//! end, exactly-once and consistency invariants are checked against squeue and sacct.
//!
//! `make soak` (brings the test bed up, then `cargo test --features soak --test soak --
//! --nocapture`); not part of `make test`. Bounded by `SLURM_RUN_SOAK_JOBS` submits
//! (default 300) and `SLURM_RUN_SOAK_SECONDS` of submitting (default 600), whichever
//! comes first; the drain and the checks after it are bounded too. Prints one PASS/FAIL
//! line per invariant and fails if any failed.
//!
//! The scenario is in [`load`] (submitters and watches) and [`chaos`]; what the cluster
//! says afterwards in [`cluster_view`]; the checks in [`invariants`]. The fault
//! scenarios of issue 11 that take minutes (the controller stopped for 30 s, clients
//! killed at random points) are in [`faults`], each a test of its own.

mod chaos;
mod cluster_view;
mod events;
mod faults;
mod invariants;
mod load;

use std::sync::Arc;
use std::time::{Duration, Instant};

use slurm_core::{Backend, Command, RecordFilter, Transport};
use slurm_run_testsupport::{cluster, harness, Harness};

use chaos::Chaos;
use events::EventCounts;
use invariants::{Resources, Verdicts};
use load::{Submitted, Watches, CONCURRENCY};

/// How long the watches may take to drain after the last submit.
const DRAIN_LIMIT: Duration = Duration::from_secs(300);
/// How long the final checks wait for sacct to catch up.
const VERIFY_LIMIT: Duration = Duration::from_secs(120);
/// How long idle threads get to leave before threads and descriptors are counted.
const SETTLE_LIMIT: Duration = Duration::from_secs(15);

/// How much the soak does, from the environment.
struct Settings {
    jobs: usize,
    seconds: u64,
}

impl Settings {
    fn from_env() -> Settings {
        let read = |name: &str, default: u64| -> u64 {
            match std::env::var(name) {
                Ok(v) => v.trim().parse().unwrap_or_else(|_| {
                    panic!("{name}={v:?} is not a whole number; unset it or give e.g. {default}")
                }),
                Err(_) => default,
            }
        };
        Settings {
            jobs: read("SLURM_RUN_SOAK_JOBS", 300) as usize,
            seconds: read("SLURM_RUN_SOAK_SECONDS", 600),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak() {
    let _cluster = cluster::exclusive().await;
    let settings = Settings::from_env();
    let (counts, log_path) = events::install();
    let h = Arc::new(harness());
    let listener: u32 = std::fs::read_to_string(h.testbed.sshd_pid_file())
        .expect("the test bed's sshd pid file")
        .trim()
        .parse()
        .expect("a pid in sshd.pid");
    let port = h.testbed.ssh_port();
    h.transport
        .inner()
        .inner()
        .connect()
        .await
        .expect("connect to the test bed");
    let remote_start = h
        .transport
        .run(&Command::new("date").arg("+%Y-%m-%dT%H:%M:%S"))
        .await
        .expect("remote date")
        .stdout_text()
        .trim()
        .to_string();
    let prefix = format!("soak-{:06x}-", rand::random::<u32>() & 0x00ff_ffff);
    let resources_start = Resources::now();
    let our_sessions = chaos::our_sshd_sessions(listener, port).len();
    println!(
        "soak {prefix}*: up to {} jobs or {} s of submitting, {CONCURRENCY} at a time, chaos on; \
         {our_sessions} connection(s) found serving us; library log in {}",
        settings.jobs,
        settings.seconds,
        log_path.display()
    );

    // The scenario: chaos, watches, submitters; then the drain.
    let submit_began = Arc::new(tokio::sync::Notify::new());
    let chaos = Chaos::start(Arc::clone(&h), listener, port, Arc::clone(&submit_began));
    let watches = Watches::start(&h);
    let started = Instant::now();
    let outcomes = load::submit_all(
        &h,
        settings.jobs,
        settings.seconds,
        &prefix,
        &watches,
        &submit_began,
    )
    .await;
    let submit_phase = started.elapsed();
    println!(
        "submitted {} in {:.0} s; draining the watches (at most {} s)",
        outcomes.len(),
        submit_phase.as_secs_f64(),
        DRAIN_LIMIT.as_secs()
    );
    let watch = watches.drain(DRAIN_LIMIT).await;
    let chaos = chaos.stop().await;
    let drain_phase = started.elapsed() - submit_phase;

    // What is left: the records, the cluster's view, this process's resources.
    let records = h
        .backend
        .records(&RecordFilter::any())
        .await
        .expect("list the records");
    let view = cluster_view::settled(&h, &remote_start, &records, &prefix, VERIFY_LIMIT).await;
    let resources_end = Resources::settled(resources_start, SETTLE_LIMIT).await;

    println!();
    println!(
        "soak {prefix}*: {} submits in {:.0} s, drain {:.0} s",
        outcomes.len(),
        submit_phase.as_secs_f64(),
        drain_phase.as_secs_f64()
    );
    let mut v = Verdicts::default();
    invariants::every_submit_answered(&mut v, &outcomes);
    invariants::exactly_once(&mut v, &records, &view, &prefix);
    invariants::records_agree_with_sacct(&mut v, &h, &records, &view, &outcomes).await;
    invariants::one_terminal_report_per_job(&mut v, &records, &watch);
    invariants::no_resource_growth(&mut v, resources_start, resources_end);
    invariants::chaos_happened(&mut v, &chaos);
    report(&outcomes, &counts, our_sessions, &h);
    assert_eq!(
        v.failed, 0,
        "soak: {} invariant(s) FAILED (the FAIL lines above say which)",
        v.failed
    );
    println!("soak: every invariant held");
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// Submit latencies and what the library did under the chaos.
fn report(outcomes: &[Submitted], counts: &EventCounts, our_sessions: usize, h: &Harness) {
    let mut all: Vec<Duration> = outcomes.iter().map(|o| o.took).collect();
    all.sort();
    let mut good: Vec<Duration> = outcomes
        .iter()
        .filter(|o| o.result.is_ok())
        .map(|o| o.took)
        .collect();
    good.sort();
    println!(
        "submit latency, all {}: p50 {} p95 {} p99 {} max {}",
        all.len(),
        ms(percentile(&all, 0.5)),
        ms(percentile(&all, 0.95)),
        ms(percentile(&all, 0.99)),
        ms(all.last().copied().unwrap_or_default())
    );
    println!(
        "submit latency, accepted {}: p50 {} p95 {} p99 {}",
        good.len(),
        ms(percentile(&good, 0.5)),
        ms(percentile(&good, 0.95)),
        ms(percentile(&good, 0.99))
    );
    println!(
        "connections: {} lost, {} opened ({} at start); submits: {} settled after an unknown outcome, {} resent unsent; \
         polls backed off {} times; settles asked again {}; {} round trips",
        counts.get("SSH connection lost"),
        counts.get("SSH session open"),
        our_sessions,
        counts.get("submit outcome unknown; settling it by what the cluster says"),
        counts.get("submit not sent; trying once more"),
        counts.get("poll failed; backing off"),
        counts.get("submit not settled yet; asking again"),
        h.transport.count()
    );
}
