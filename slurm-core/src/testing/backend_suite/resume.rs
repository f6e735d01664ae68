//! The Backend conformance suite's cases of a resumable run (a spec's `resume` block):
//! one-minute walls, a command that counts, checkpoints its count when warned and
//! resumes from it. Part of [`backend_suite`](super).

use std::time::{Duration, Instant};

use crate::backend::{LogOptions, LogStream};
use crate::classify::ErrorClass;
use crate::record::SegmentEnd;
use crate::spec::{JobSpec, ResumeSpec, WallTime};
use crate::state::JobState;

use super::{submit_case_job, wait_terminal_within, BackendFixture};

/// The wall time of the cases' jobs (Slurm's smallest) and the warning before it.
const WALL: WallTime = WallTime::from_minutes(1);
const WARN_BEFORE: WallTime = WallTime::from_secs(30);

/// A command that counts `total` steps of the fixture's step length, writing each
/// finished step to `progress.txt` (`<restart count> <step>`); warned, it checkpoints the
/// count in `ckpt/` and exits 0; started again, it resumes from `SLURM_RUN_RESUME_FROM`.
/// At the end it prints the progress file.
fn counter(step: Duration, total: u32) -> String {
    let step = format!("{:.3}", step.as_secs_f64());
    format!(
        r#"mkdir -p ckpt
i=0
if [ -n "${{SLURM_RUN_RESUME_FROM:-}}" ]; then i=$(cat "$SLURM_RUN_RESUME_FROM"); fi
trap 'printf "%s\n" "$i" > "ckpt/step-$(printf %06d "$i").ckpt"; exit 0' USR2
while [ "$i" -lt {total} ]; do
  sleep {step} & wait $!
  i=$((i + 1))
  echo "$SLURM_RUN_RESTART_COUNT $i" >> progress.txt
done
echo "counted to $i"
cat progress.txt"#
    )
}

/// The fixture's job running `command` with a one-minute wall and a resume block of
/// `max_restarts`.
fn long_run<F: BackendFixture + ?Sized>(
    fixture: &F,
    name: &str,
    command: &str,
    max_restarts: u32,
) -> JobSpec {
    let mut spec = fixture.spec(name, command);
    spec.time = Some(WALL);
    spec.child_timeout = None;
    spec.resume = Some(ResumeSpec {
        max_restarts,
        warn_before: WARN_BEFORE,
        checkpoints: Some("ckpt/*.ckpt".to_string()),
        ..ResumeSpec::new(max_restarts)
    });
    spec
}

/// How long a run of `segments` segments may take: the fixture's deadline for each.
fn run_deadline<F: BackendFixture + ?Sized>(fixture: &F, segments: u32) -> Duration {
    fixture.deadline() + fixture.resume_segment() * segments
}

/// A run whose work takes three walls completes as one record of three segments (or
/// more, when a segment started late), each continued after the wall, and its work is
/// continuous: every step counted once, in order, the restart count rising.
pub async fn a_run_of_three_segments_completes_with_its_work_continuous<
    F: BackendFixture + ?Sized,
>(
    fixture: &F,
) {
    let _guard = fixture.enter(false).await;
    // A segment counts at most wall - warning of steps: 61 need three segments.
    let steps_per_segment = (WALL.as_secs() - WARN_BEFORE.as_secs()) as u32;
    let total = 2 * steps_per_segment + 1;
    let spec = long_run(
        fixture,
        "conf-resume-three",
        &counter(fixture.resume_step(), total),
        5,
    );
    let record = submit_case_job(fixture, &spec).await;
    let done = wait_terminal_within(fixture, &record.id, run_deadline(fixture, 4)).await;
    assert_eq!(done.state(), JobState::Complete, "{done:?}");
    let record = &done.record;
    assert!(record.restarts() >= 2, "three walls of work: {record:?}");
    assert_eq!(
        record.segments().len() as u32,
        record.restarts() + 1,
        "{record:?}"
    );
    let ends: Vec<Option<SegmentEnd>> = record.segments().iter().map(|s| s.ended()).collect();
    assert_eq!(ends.last(), Some(&Some(SegmentEnd::Done)), "{ends:?}");
    for end in &ends[..ends.len() - 1] {
        assert_eq!(*end, Some(SegmentEnd::Wall), "{ends:?}");
    }
    let log = fixture
        .backend()
        .logs(
            &record.id,
            LogOptions {
                stream: LogStream::Out,
                tail: 1000,
                ..LogOptions::default()
            },
        )
        .await
        .unwrap();
    assert!(log.contains(&format!("counted to {total}")), "{log}");
    let progress: Vec<(u32, u32)> = log
        .lines()
        .filter_map(|line| {
            let (restart, step) = line.split_once(' ')?;
            Some((restart.parse().ok()?, step.parse().ok()?))
        })
        .collect();
    let steps: Vec<u32> = progress.iter().map(|(_, step)| *step).collect();
    assert_eq!(
        steps,
        (1..=total).collect::<Vec<_>>(),
        "each step once, in order: {log}"
    );
    let restarts: Vec<u32> = progress.iter().map(|(restart, _)| *restart).collect();
    assert!(restarts.windows(2).all(|w| w[0] <= w[1]), "{restarts:?}");
    assert_eq!(restarts.first(), Some(&0), "{restarts:?}");
    assert_eq!(restarts.last(), Some(&record.restarts()), "{restarts:?}");
}

/// A run that needs more continuations than its budget ends ERROR (program) once the
/// budget is used up, the record naming it.
pub async fn a_run_over_its_budget_ends_error_naming_it<F: BackendFixture + ?Sized>(fixture: &F) {
    let _guard = fixture.enter(false).await;
    let spec = long_run(
        fixture,
        "conf-resume-budget",
        &counter(fixture.resume_step(), 100_000),
        1,
    );
    let record = submit_case_job(fixture, &spec).await;
    let done = wait_terminal_within(fixture, &record.id, run_deadline(fixture, 3)).await;
    assert_eq!(done.state(), JobState::Error, "{done:?}");
    assert_eq!(done.err_class(), Some(ErrorClass::Program), "{done:?}");
    let record = &done.record;
    assert!(
        record.last_message().contains("resume budget is used up")
            && record.last_message().contains("max_restarts: 1"),
        "{record:?}"
    );
    assert_eq!(record.restarts(), 1, "{record:?}");
    assert_eq!(record.segments().len(), 2, "{record:?}");
}

/// A cancel after the run was continued stops it for good: CANCELED, and no segment
/// starts after it.
pub async fn a_cancel_after_a_continuation_stops_the_run<F: BackendFixture + ?Sized>(fixture: &F) {
    let _guard = fixture.enter(false).await;
    let spec = long_run(
        fixture,
        "conf-resume-cancel",
        &counter(fixture.resume_step(), 100_000),
        5,
    );
    let record = submit_case_job(fixture, &spec).await;
    let deadline = Instant::now() + run_deadline(fixture, 2);
    loop {
        let status = fixture.backend().status(&record.id).await.unwrap();
        if status.record.restarts() >= 1 {
            break;
        }
        assert!(
            !status.state().is_terminal() && Instant::now() < deadline,
            "never continued: {status:?}"
        );
        tokio::time::sleep(fixture.poll_interval()).await;
    }
    let cancelled = fixture.backend().cancel(&record.id).await.unwrap();
    let done = wait_terminal_within(fixture, &cancelled.id, fixture.deadline()).await;
    assert_eq!(done.state(), JobState::Canceled, "{done:?}");
    let restarts = done.record.restarts();
    // Past the next wall: no further segment, the record unchanged.
    tokio::time::sleep(fixture.resume_segment()).await;
    let later = fixture.backend().status(&record.id).await.unwrap();
    assert_eq!(later.state(), JobState::Canceled, "{later:?}");
    assert_eq!(later.record.restarts(), restarts, "{later:?}");
    // Cancelled in a segment (it ends canceled) or between two (the last one ended
    // by the wall): none is left running.
    let last = later.record.segments().last().and_then(|s| s.ended());
    assert!(
        matches!(last, Some(SegmentEnd::Canceled | SegmentEnd::Wall)),
        "{later:?}"
    );
}

/// A program that fails inside a segment is not continued: ERROR, one segment, no
/// restart, its own exit status.
pub async fn a_failure_inside_a_segment_is_not_continued<F: BackendFixture + ?Sized>(fixture: &F) {
    let _guard = fixture.enter(false).await;
    let spec = long_run(
        fixture,
        "conf-resume-fail",
        "echo 'ValueError: diverged' >&2; exit 3",
        5,
    );
    let record = submit_case_job(fixture, &spec).await;
    let done = wait_terminal_within(fixture, &record.id, fixture.deadline()).await;
    assert_eq!(done.state(), JobState::Error, "{done:?}");
    assert_eq!(done.err_class(), Some(ErrorClass::Program), "{done:?}");
    assert_eq!(done.record.restarts(), 0, "{done:?}");
    assert_eq!(
        done.native.as_ref().and_then(|n| n.exit_code),
        Some(3),
        "{done:?}"
    );
}
