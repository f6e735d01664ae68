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

/// A command that counts `total` steps of `step`, writing each finished step to
/// `progress.txt` (`<restart count> <step>`); warned, it checkpoints the count in
/// `ckpt/` and exits 0; started again, it resumes from `SLURM_RUN_RESUME_FROM`. At the
/// end it prints the progress file.
///
/// It keeps the resume contract the way a program must. Its first act is to listen:
/// Slurm may send the warning as a segment starts, and one that comes before the
/// handler is lost. The handler only notes the warning and the loop acts on it between
/// steps, so the checkpoint holds the last step written wherever the warning falls.
/// Every process of the command gets the warning, so nothing it needs runs in a child
/// process once warned (a `mkdir` or `cat` then would die of it): the checkpoint is
/// loaded and named by builtins, and its folder made when it is written.
pub fn resume_counter(step: Duration, total: u32) -> String {
    let step = format!("{:.3}", step.as_secs_f64());
    format!(
        r#"trap 'warned=1' USR2
i=0
if [ -n "${{SLURM_RUN_RESUME_FROM:-}}" ]; then read -r i < "$SLURM_RUN_RESUME_FROM"; fi
checkpoint() {{
  [ -d ckpt ] || mkdir -p ckpt
  printf -v name 'ckpt/step-%06d.ckpt' "$i"
  printf '%s\n' "$i" > "$name"
  exit 0
}}
while [ "$i" -lt {total} ]; do
  [ -z "${{warned:-}}" ] || checkpoint
  sleep {step} & wait $!
  if [ -n "${{warned:-}}" ]; then kill $! 2>/dev/null; checkpoint; fi
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
        &resume_counter(fixture.resume_step(), total),
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
    let progress = progress_lines(&log);
    let steps: Vec<u32> = progress.iter().map(|(_, step)| *step).collect();
    assert_eq!(
        steps,
        (1..=total).collect::<Vec<_>>(),
        "each step once, in order: {log}"
    );
    // Each segment wrote the steps from the checkpoint it resumed from to the one it
    // left (the last one, to the end), under its own restart count. A segment Slurm
    // warned as it started wrote none (the signal may come up to a minute early), so
    // the first line's count is not always 0.
    let mut expected = Vec::new();
    let mut from = 0;
    for (restart, segment) in (0u32..).zip(record.segments()) {
        let to = match segment.ended() {
            Some(SegmentEnd::Done) => total,
            _ => checkpoint_step(segment.checkpoint())
                .unwrap_or_else(|| panic!("segment {restart} left no checkpoint: {record:?}")),
        };
        expected.extend((from..to).map(|_| restart));
        from = to;
    }
    let restarts: Vec<u32> = progress.iter().map(|(restart, _)| *restart).collect();
    assert_eq!(restarts, expected, "each segment's steps: {record:?}");
}

/// The progress lines of [`resume_counter`] in `text` (`<restart count> <step>`), in
/// order; other lines are skipped.
fn progress_lines(text: &str) -> Vec<(u32, u32)> {
    text.lines()
        .filter_map(|line| {
            let (restart, step) = line.split_once(' ')?;
            Some((restart.parse().ok()?, step.parse().ok()?))
        })
        .collect()
}

/// The step a checkpoint of [`resume_counter`] holds, read from its name
/// (`ckpt/step-000024.ckpt`: 24).
fn checkpoint_step(checkpoint: Option<&str>) -> Option<u32> {
    checkpoint?
        .strip_prefix("ckpt/step-")?
        .strip_suffix(".ckpt")?
        .parse()
        .ok()
}

/// A run that needs more continuations than its budget ends ERROR (program) once the
/// budget is used up, the record naming it.
pub async fn a_run_over_its_budget_ends_error_naming_it<F: BackendFixture + ?Sized>(fixture: &F) {
    let _guard = fixture.enter(false).await;
    let spec = long_run(
        fixture,
        "conf-resume-budget",
        &resume_counter(fixture.resume_step(), 100_000),
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
        &resume_counter(fixture.resume_step(), 100_000),
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

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::{Command, Stdio};
    use std::time::Duration;

    use super::{progress_lines, resume_counter};
    use crate::render::resume_step_command;
    use crate::spec::WARNING_CARRIER;
    use crate::testing::wait_until_blocking;

    const TOTAL: u32 = 40;

    /// Stand-ins for `mkdir` and `cat` that take 0.2 s, as a program's start does on a
    /// busy node: a warning then falls inside them.
    fn slow_tools(dir: &Path) {
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        for tool in ["mkdir", "cat"] {
            let path = bin.join(tool);
            std::fs::write(
                &path,
                format!("#!/bin/bash\nsleep 0.2\nPATH=/usr/bin:/bin exec {tool} \"$@\"\n"),
            )
            .unwrap();
            Command::new("chmod").arg("+x").arg(&path).status().unwrap();
        }
    }

    /// The newest checkpoint in `dir/ckpt` (the highest step), as a path under `dir`.
    fn newest_checkpoint(dir: &Path) -> Option<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir.join("ckpt"))
            .ok()?
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names.pop().map(|name| format!("ckpt/{name}"))
    }

    /// One segment of the counter run by the library's step shell in `dir`, resumed
    /// from its newest checkpoint; warned as the batch script warns it (the carrier
    /// signal to the step shell) `warn_after` the command has noted its start (never
    /// when `None`). The segment's exit status.
    fn segment(dir: &Path, restart: u32, warn_after: Option<Duration>) -> i32 {
        let ready = dir.join("ready");
        let _ = std::fs::remove_dir_all(&ready);
        std::fs::create_dir_all(&ready).unwrap();
        let step = resume_step_command(
            &resume_counter(Duration::from_millis(10), TOTAL),
            "USR2",
            &ready.display().to_string(),
        )
        .unwrap();
        let from = newest_checkpoint(dir)
            .map(|relative| dir.join(relative).display().to_string())
            .unwrap_or_default();
        let mut child = Command::new("bash")
            .arg("-c")
            .arg(step)
            .current_dir(dir)
            .env("PATH", format!("{}/bin:/usr/bin:/bin", dir.display()))
            .env("SLURM_RUN_RESTART_COUNT", restart.to_string())
            .env("SLURM_RUN_RESUME_FROM", from)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        if let Some(after) = warn_after {
            let note = ready.join("0");
            wait_until_blocking("the command's ready note", Duration::from_secs(20), || {
                note.exists()
            });
            std::thread::sleep(after);
            Command::new("kill")
                .args(["-s", WARNING_CARRIER.0, &child.id().to_string()])
                .status()
                .unwrap();
        }
        child.wait().unwrap().code().unwrap_or(-1)
    }

    /// The steps written so far, each with its segment's restart count.
    /// Every line of `progress.txt` must be one.
    fn progress(dir: &Path) -> Vec<(u32, u32)> {
        let text = std::fs::read_to_string(dir.join("progress.txt")).unwrap_or_default();
        let lines = progress_lines(&text);
        assert_eq!(lines.len(), text.lines().count(), "{text}");
        lines
    }

    /// Wherever the warning falls (as the command starts, while its start is still
    /// busy, inside its steps), the counter checkpoints the last step it wrote, and the
    /// segments together write every step once, in order. Slurm may warn a segment as it
    /// starts: a counter that set its handler after its first programs would lose that
    /// warning and count on to the wall.
    #[test]
    fn a_warning_anywhere_in_a_segment_checkpoints_the_last_step_written() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        slow_tools(dir);
        let last_written = |dir: &Path| progress(dir).last().map_or(0, |(_, step)| *step);
        let warnings = [
            Some(Duration::ZERO),
            Some(Duration::from_millis(150)),
            Some(Duration::ZERO),
            Some(Duration::from_millis(100)),
        ];
        for (restart, warn_after) in warnings.into_iter().enumerate() {
            assert_eq!(
                segment(dir, restart as u32, warn_after),
                0,
                "{warn_after:?}"
            );
            let checkpoint = newest_checkpoint(dir).expect("a warned segment checkpoints");
            let held = std::fs::read_to_string(dir.join(&checkpoint)).unwrap();
            assert_eq!(
                held.trim().parse::<u32>().unwrap(),
                last_written(dir),
                "segment {restart} warned {warn_after:?}: {checkpoint}"
            );
        }
        assert!(last_written(dir) < TOTAL, "the warned segments left work");
        assert_eq!(segment(dir, warnings.len() as u32, None), 0);
        let written = progress(dir);
        let steps: Vec<u32> = written.iter().map(|(_, step)| *step).collect();
        assert_eq!(
            steps,
            (1..=TOTAL).collect::<Vec<_>>(),
            "each step once, in order"
        );
        assert!(written.windows(2).all(|w| w[0].0 <= w[1].0), "{written:?}");
    }
}
