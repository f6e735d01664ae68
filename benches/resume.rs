//! The time a resumable run loses between its segments (issue 21, point 4), on the test
//! bed: a run of one-minute walls that needs three segments, each gap (a segment's end
//! to the next one's start, as the record holds them) against a bare job that requeues
//! itself with `scontrol requeue` and nothing more (Slurm holds a requeued job until its
//! begin time, the requeue plus the credential lifetime: about two minutes by default).
//!
//! slurm-run moves a requeued job's begin time to a few seconds after now (its owner
//! may), so a segment starts again as soon as the scheduler runs it. Writes the
//! `resume` area of `BENCHMARKS.md`. `cargo bench --bench resume` (needs the test bed;
//! `make bench` brings it up). It takes about six minutes: walls are real.

use std::time::{Duration, Instant};

use slurm_core::testing::backend_suite::resume_counter;
use slurm_core::{Backend, Command, JobState, ResumeSpec, SubmitOptions, Transport, WallTime};
use slurm_run_testsupport::backend::{self, remote, wait_terminal, Harness};
use slurm_run_testsupport::bench::{median, Area, Baseline, Row};

/// The gaps of a resumable run: each segment's end to the next one's start.
async fn library_gaps(h: &Harness) -> Vec<Duration> {
    let mut spec = backend::small_spec("benchresume", &resume_counter(Duration::from_secs(1), 70));
    spec.time = Some(WallTime::from_minutes(1));
    spec.resume = Some(ResumeSpec {
        warn_before: WallTime::from_secs(30),
        checkpoints: Some("ckpt/*.ckpt".into()),
        ..ResumeSpec::new(6)
    });
    let record = h
        .backend
        .submit(&spec, SubmitOptions::default())
        .await
        .expect("submit");
    let record = wait_terminal(&h.backend, record.id(), 600)
        .await
        .into_record();
    assert_eq!(record.state(), JobState::Complete, "{record:?}");
    let segments = record.segments();
    assert!(segments.len() >= 2, "{record:?}");
    segments
        .windows(2)
        .map(|w| {
            let ended = w[0].ended_at().expect("a continued segment ended");
            (w[1].started_at() - ended).to_std().unwrap_or_default()
        })
        .collect()
}

/// The gap of a bare job that requeues itself once: its first run's end to its second
/// run's start, as the job itself wrote them (seconds since the epoch).
async fn bare_gap(h: &Harness) -> Duration {
    let dir = format!(
        "{}/bench-resume-bare-{}",
        h.testbed.get("SLURM_BASE_RESULTS_DIR"),
        std::process::id()
    );
    remote(h, Command::new("mkdir").args(["-p", &dir])).await;
    let wrap = r#"if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then date +%s.%N > ended; scontrol requeue "$SLURM_JOB_ID"; sleep 60; else date +%s.%N > started; fi"#;
    let out = h
        .transport
        .run(&Command::new("sbatch").args([
            "--parsable",
            "--requeue",
            "--time=5",
            "--output=/dev/null",
            &format!("--chdir={dir}"),
            &format!("--partition={}", h.testbed.get("SLURM_PARTITION")),
            &format!("--wrap={wrap}"),
        ]))
        .await
        .expect("bare sbatch");
    assert!(out.success(), "{}", out.stderr_text());
    let deadline = Instant::now() + Duration::from_secs(400);
    loop {
        let times = remote(
            h,
            Command::new("bash")
                .arg("-c")
                .arg(r#"cd -- "$1" && cat ended started 2>/dev/null"#)
                .arg("bench")
                .arg(&dir),
        )
        .await;
        let times: Vec<f64> = times
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        if let [ended, started] = times[..] {
            remote(h, Command::new("rm").args(["-rf", "--", &dir])).await;
            return Duration::from_secs_f64((started - ended).max(0.0));
        }
        assert!(
            Instant::now() < deadline,
            "the bare requeued job never ran again"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return; // built by `cargo test --all-targets`; runs only under `cargo bench`
    }
    let h = backend::harness();
    let mut area = Area::new(
        "resume",
        "a bare job requeued by `scontrol requeue`",
        "- (no command per segment to run over ssh)",
    );
    let bare = bare_gap(&h).await;
    let gaps = library_gaps(&h).await;
    for (n, gap) in gaps.iter().enumerate() {
        area.push(
            Row::new(format!("gap before segment {}", n + 2), *gap)
                .bare(Baseline::measured("scontrol requeue, begin time untouched", bare))
                .note("the segment's end to the next one's start, as the record holds them (the poll's view, every 0.5 s)"),
        );
    }
    area.push(
        Row::new("median gap", median(gaps.clone())).bare(Baseline::measured(
            "scontrol requeue, begin time untouched",
            bare,
        )),
    );
    area.notes.push(
        "Slurm holds a requeued job until the old run's credential expires (BeginTime = the \
         requeue plus the credential lifetime). The job's owner may move the begin time \
         earlier: slurm-run sets it to now+5 s when its poll sees the requeue, so the gap is \
         the poll's interval, the five seconds and the scheduler's next pass. A run continued \
         as a fresh job (a requeue Slurm refused or held) pays one sbatch instead."
            .to_string(),
    );
    area.save();
}
