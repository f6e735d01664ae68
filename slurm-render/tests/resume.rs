//! A resumable job's batch script (issue 21): its directives, and its decisions run by a
//! real bash with stand-ins for srun, scancel and scontrol: the signal passed to the
//! command, a segment the signal or the child timeout ended requeued within the budget,
//! any other end of the command left to stand.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use slurm_core::testing::wait_until_blocking;
use slurm_core::{
    resume_step_command, Renderer, ResumeContext, ScriptContext, SecretRegistry, TemplateKind,
};
use slurm_render::{check_syntax, HandlebarsRenderer};

fn example_context() -> ScriptContext {
    include!("fixtures/example_context.rs")
}

fn resume(segments_file: &str) -> ResumeContext {
    ResumeContext {
        signal: "USR2".into(),
        signal_number: 12,
        carrier_number: 28,
        warn_before_secs: 30,
        wall_secs: 60,
        max_restarts: 2,
        checkpoints: Some("ckpt/*.pt".into()),
        segments_file: segments_file.into(),
        ready_dir: segments_file.replace("segments.tsv", "ready"),
        budget_exit: 85,
        refused_exit: 86,
    }
}

/// A one-node job with an image, resumable: what a spec's resume block renders.
fn resumable() -> ScriptContext {
    ScriptContext {
        image: Some("/lustre/images/pytorch.sqsh".into()),
        container_mounts: vec!["/lustre/users/me/results/resnet-train-a1b2c3:/results".into()],
        results_dir_in_job: "/results".into(),
        time: "00:01:00".into(),
        child_timeout_secs: 57,
        command: "python train.py --resume \"$SLURM_RUN_RESUME_FROM\"".into(),
        resume: Some(resume(
            "/lustre/users/me/results/resnet-train-a1b2c3/resume/segments.tsv",
        )),
        ..example_context()
    }
}

#[test]
fn snapshot_a_resumable_job() {
    let script = HandlebarsRenderer::new()
        .render(TemplateKind::SingleNode, &resumable())
        .unwrap();
    assert!(script.contains("#SBATCH --signal=B:USR2@30\n"), "{script}");
    assert!(script.contains("#SBATCH --requeue\n"), "{script}");
    insta::assert_snapshot!("singlenode_resumable", script);
}

#[test]
fn resumable_scripts_pass_bash_n_and_the_lint_on_both_templates() {
    let renderer = HandlebarsRenderer::new();
    let two = ScriptContext {
        nodes: 2,
        ..resumable()
    };
    let no_glob = ScriptContext {
        resume: Some(ResumeContext {
            checkpoints: None,
            ..resume("/r/segments.tsv")
        }),
        ..resumable()
    };
    for (kind, context) in [
        (TemplateKind::SingleNode, resumable()),
        (TemplateKind::MultiNode, two),
        (TemplateKind::SingleNode, no_glob),
    ] {
        let script = renderer.render(kind, &context).unwrap();
        assert_eq!(check_syntax(&script).unwrap(), vec![], "{kind}: bash -n");
        assert!(
            script.contains("slurm_run_continue \"$slurm_run_status\""),
            "{kind}"
        );
        renderer
            .lint(&script, &SecretRegistry::new())
            .unwrap_or_else(|e| panic!("{kind}: {e}"));
    }
}

#[test]
fn a_user_template_without_the_resume_branches_refuses_a_resumable_job() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("singlenode.sbatch.hbs"),
        "#!/bin/bash\n#SBATCH --job-name={{sbatch job_name}}\nbash -c {{sh command}}\n",
    )
    .unwrap();
    let renderer = HandlebarsRenderer::with_template_dir(dir.path()).unwrap();
    let text = renderer
        .render(TemplateKind::SingleNode, &resumable())
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("slurm_run_continue") && text.contains("resume block"),
        "{text}"
    );
}

#[test]
fn a_context_with_a_warning_past_the_wall_is_refused_naming_the_field() {
    let context = ScriptContext {
        resume: Some(ResumeContext {
            warn_before_secs: 60,
            ..resume("/r/segments.tsv")
        }),
        ..resumable()
    };
    let text = HandlebarsRenderer::new()
        .render(TemplateKind::SingleNode, &context)
        .unwrap_err()
        .to_string();
    assert!(text.contains("resume.warn_before_secs"), "{text}");
}

/// A folder with stand-ins for srun (the step in a process group of its own, its id
/// kept, beside a process of the container runtime's, `$RUNTIME_PID`, that any signal but
/// an ignored one ends, as one ends squashfuse; with `$STEP_START_SECS` it takes that
/// long to start the command, as a container runtime does), scancel (signals that group,
/// as Slurm signals a step's processes), scontrol (`requeue` noted, answering with
/// `$REQUEUE_STATUS`; `show config` says the controller runs `$CONTROLLER_RELEASE`, or
/// fails without it) and squeue (the job's PreemptTime is `$PREEMPT_TIME`, or it fails
/// without it).
struct Bed {
    dir: tempfile::TempDir,
    wall_secs: u64,
}

impl Bed {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let tools = [
            (
                "srun",
                "#!/bin/bash\nwhile [ \"${1#--}\" != \"$1\" ]; do case $1 in --chdir=*) cd \"${1#--chdir=}\" ;; esac; shift; done\nexec setsid bash -c 'echo $$ > \"$STEP_PGID\"; sleep 600 & echo $! > \"$RUNTIME_PID\"; if [ -n \"${STEP_START_SECS:-}\" ]; then sleep \"$STEP_START_SECS\"; fi; exec \"$@\"' step \"$@\"\n",
            ),
            (
                "scancel",
                "#!/bin/bash\nkill -s \"${1#--signal=}\" -- \"-$(cat \"$STEP_PGID\")\"\n",
            ),
            (
                "scontrol",
                "#!/bin/bash\ncase $1 in\n  requeue) echo \"$2\" >> \"$REQUEUES\"; exit \"${REQUEUE_STATUS:-0}\" ;;\n  show) [ \"$2\" = config ] && [ -n \"${CONTROLLER_RELEASE:-}\" ] || exit 1; printf 'SlurmctldPort           = 6817\\nSLURM_VERSION           = %s\\n' \"$CONTROLLER_RELEASE\" ;;\n  *) exit 1 ;;\nesac\n",
            ),
            (
                "squeue",
                "#!/bin/bash\n[ -n \"${PREEMPT_TIME:-}\" ] || exit 1\nprintf '%-20s\\n' \"$PREEMPT_TIME\"\n",
            ),
        ];
        for (name, text) in tools {
            std::fs::write(bin.join(name), text).unwrap();
            Command::new("chmod")
                .arg("+x")
                .arg(bin.join(name))
                .status()
                .unwrap();
        }
        Bed { dir, wall_secs: 60 }
    }

    /// A bed whose job has a wall time of `wall_secs` (a signal soon after the start is
    /// then well before the wall's warning).
    fn with_wall(wall_secs: u64) -> Self {
        let mut bed = Bed::new();
        bed.wall_secs = wall_secs;
        bed
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn root(&self) -> String {
        self.dir.path().display().to_string()
    }

    /// The script of `command` (child timeout `child_timeout` s), started by bash with
    /// Slurm's restart count `restarts`.
    fn start(
        &self,
        command: &str,
        child_timeout: u64,
        restarts: u32,
        env: &[(&str, &str)],
    ) -> Child {
        let root = self.root();
        let context = ScriptContext {
            log_dir: format!("{root}/logs"),
            results_dir: format!("{root}/job"),
            results_dir_in_job: format!("{root}/job"),
            image: None,
            container_mounts: Vec::new(),
            // The step the library gives a resumable command.
            command: resume_step_command(command, "USR2", &format!("{root}/job/resume/ready"))
                .unwrap(),
            child_timeout_secs: child_timeout,
            time: format!(
                "{:02}:{:02}:{:02}",
                self.wall_secs / 3600,
                self.wall_secs / 60 % 60,
                self.wall_secs % 60
            ),
            resume: Some(ResumeContext {
                wall_secs: self.wall_secs,
                ..resume(&format!("{root}/job/resume/segments.tsv"))
            }),
            ..resumable()
        };
        let script = HandlebarsRenderer::new()
            .render(TemplateKind::SingleNode, &context)
            .unwrap();
        let mut run = Command::new("bash");
        run.arg("-c")
            .arg(script)
            .env("PATH", format!("{}/bin:/usr/bin:/bin", root))
            .env("SLURM_JOB_ID", "7")
            .env("SLURM_RESTART_COUNT", restarts.to_string())
            .env("STEP_PGID", self.path("step.pgid"))
            .env("REQUEUES", self.path("requeues"))
            .env("RUNTIME_PID", self.path("runtime.pid"))
            .stdin(Stdio::null());
        for (name, value) in env {
            run.env(name, value);
        }
        run.spawn().unwrap()
    }

    fn read(&self, relative: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(relative)).unwrap_or_default()
    }

    /// Run [`COUNTER`] (child timeout `child_timeout` s, Slurm's restart count
    /// `restarts`) and warn it once it has started: its exit status, the requeues it
    /// asked for, and its segments file.
    fn warned_counter(
        &self,
        child_timeout: u64,
        restarts: u32,
        env: &[(&str, &str)],
    ) -> (i32, String, String) {
        let child = self.start(COUNTER, child_timeout, restarts, env);
        self.warn_when(&child, "job/started");
        (
            status(child),
            self.read("requeues"),
            self.read("job/resume/segments.tsv"),
        )
    }

    /// Wait until `relative` exists (the command has started), then send the batch
    /// shell `signal`, as Slurm's `--signal=B:` does.
    fn warn_when(&self, child: &Child, relative: &str) {
        wait_for(&self.dir.path().join(relative));
        Command::new("kill")
            .args(["-s", "USR2", &child.id().to_string()])
            .status()
            .unwrap();
    }
}

impl Bed {
    /// Whether the step's container runtime stand-in still runs.
    fn runtime_alive(&self) -> bool {
        let pid = self.read("runtime.pid");
        !pid.trim().is_empty()
            && Command::new("kill")
                .args(["-0", pid.trim()])
                .stderr(Stdio::null())
                .status()
                .unwrap()
                .success()
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        let pid = self.read("runtime.pid");
        if !pid.trim().is_empty() {
            let _ = Command::new("kill")
                .arg(pid.trim())
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn wait_for(path: &Path) {
    let what = format!("{} appearing", path.display());
    wait_until_blocking(&what, Duration::from_secs(20), || path.exists());
}

fn status(child: Child) -> i32 {
    child
        .wait_with_output()
        .unwrap()
        .status
        .code()
        .unwrap_or(-1)
}

/// What the command does in these tests: listen first (a warning may come as soon as
/// the command starts), note its restart count and checkpoint, say it started, then
/// count; warned, it checkpoints and exits 0.
const COUNTER: &str = r#"trap 'warned=1' USR2
mkdir -p ckpt
echo "restart=$SLURM_RUN_RESTART_COUNT from=$SLURM_RUN_RESUME_FROM" >> seen
touch started
while [ -z "${warned:-}" ]; do sleep 0.05 & wait $!; done
printf 5 > ckpt/step-5.pt"#;

#[test]
fn a_warned_segment_checkpoints_and_is_requeued_with_its_line() {
    let bed = Bed::new();
    std::fs::create_dir_all(bed.path("job/ckpt")).unwrap();
    std::fs::write(bed.path("job/ckpt/step-2.pt"), "2").unwrap();
    std::fs::write(bed.path("job/ckpt/empty.pt"), "").unwrap();
    let child = bed.start(COUNTER, 50, 1, &[]);
    bed.warn_when(&child, "job/started");
    assert_eq!(status(child), 0, "requeued: the run goes on");
    assert_eq!(bed.read("requeues"), "7\n");
    let root = bed.root();
    assert_eq!(
        bed.read("job/seen"),
        format!("restart=1 from={root}/job/ckpt/step-2.pt\n"),
        "the restart count and the newest non-empty checkpoint"
    );
    assert_eq!(
        bed.read("job/resume/segments.tsv"),
        "1\twall\tckpt/step-5.pt\t7\n"
    );
}

/// The warning reaches the command's process group and no other process of the step: the
/// container runtime's (squashfuse, whose end pulls the image from under the command)
/// outlives it (CI, 26.05: a two-node container run died of a bus error after its third
/// warning, once Slurm had passed the resume signal itself to squashfuse).
#[test]
fn the_warning_reaches_the_command_and_spares_the_container_runtime() {
    let bed = Bed::new();
    let child = bed.start(COUNTER, 50, 0, &[]);
    bed.warn_when(&child, "job/started");
    assert_eq!(status(child), 0, "requeued: the run goes on");
    assert_eq!(
        bed.read("job/resume/segments.tsv"),
        "0\twall\tckpt/step-5.pt\t7\n",
        "the command was warned and checkpointed"
    );
    assert!(
        bed.runtime_alive(),
        "the container runtime's process got the resume signal"
    );
}

#[test]
fn a_program_failure_after_the_warning_stands_and_is_not_requeued() {
    let bed = Bed::new();
    let command = "trap 'exit 3' USR2; touch started; while :; do sleep 0.05 & wait $!; done";
    let child = bed.start(command, 50, 0, &[]);
    bed.warn_when(&child, "job/started");
    assert_eq!(status(child), 3, "the command's own status");
    assert_eq!(bed.read("requeues"), "");
    assert_eq!(bed.read("job/resume/segments.tsv"), "");
}

#[test]
fn a_failure_without_the_warning_stands() {
    let bed = Bed::new();
    let child = bed.start("echo 'ValueError: x' >&2; exit 4", 50, 0, &[]);
    assert_eq!(status(child), 4);
    assert_eq!(bed.read("requeues"), "");
}

#[test]
fn the_child_timeout_requeues_the_segment() {
    let bed = Bed::new();
    let child = bed.start("touch started; sleep 30", 1, 0, &[]);
    assert_eq!(status(child), 0);
    assert_eq!(bed.read("requeues"), "7\n");
    assert_eq!(bed.read("job/resume/segments.tsv"), "0\twall\t\t7\n");
}

#[test]
fn the_last_restart_of_the_budget_ends_the_run_with_the_budget_status() {
    let bed = Bed::new();
    let (status, requeues, segments) = bed.warned_counter(50, 2, &[]);
    assert_eq!(status, 85);
    assert_eq!(requeues, "");
    assert_eq!(segments, "2\tbudget\tckpt/step-5.pt\t7\n");
}

#[test]
fn a_job_slurm_requeued_past_the_budget_does_not_run_the_command_again() {
    let bed = Bed::new();
    let child = bed.start("touch ran", 50, 3, &[]);
    assert_eq!(status(child), 85);
    assert!(!bed.path("job/ran").exists(), "the command ran");
}

#[test]
fn a_refused_requeue_ends_with_the_refused_status() {
    let bed = Bed::new();
    let child = bed.start(COUNTER, 50, 0, &[("REQUEUE_STATUS", "1")]);
    bed.warn_when(&child, "job/started");
    assert_eq!(status(child), 86);
    assert_eq!(bed.read("requeues"), "7\n", "asked once");
}

/// What squeue prints for a job the controller has signalled for its preemption grace
/// time (PreemptTime).
const PREEMPTING: (&str, &str) = ("PREEMPT_TIME", "2026-12-01T23:27:17");

/// From Slurm 23.02 the controller requeues a job that ends during its preemption grace
/// time by itself, and a requeue the job asked for then leaves the preemption's mark on
/// it: Slurm took the next segment's end (a finished run's) for a preemption too and
/// requeued it once more (CI on 24.11 and 26.05: two restarts, the run counted again).
/// So there the segment notes its line and ends, and Slurm requeues it.
#[test]
fn a_preempted_segment_is_left_to_a_controller_of_23_02_or_later_to_requeue() {
    for release in ["23.02.0", "24.11.5", "26.05.5"] {
        let bed = Bed::new();
        let (status, requeues, segments) =
            bed.warned_counter(50, 1, &[PREEMPTING, ("CONTROLLER_RELEASE", release)]);
        assert_eq!(status, 0, "{release}: the segment ends as its command did");
        assert_eq!(requeues, "", "{release}: no requeue of its own");
        assert_eq!(segments, "1\tpreemption\tckpt/step-5.pt\t7\n", "{release}");
    }
}

/// Slurm 22.05 ends a job that finishes in its grace time as COMPLETED: there the segment
/// requeues itself, as it does when the controller's release cannot be read.
#[test]
fn a_preempted_segment_requeues_itself_on_22_05_or_an_unknown_release() {
    for release in [Some("22.05.8"), None] {
        let bed = Bed::new();
        let mut env = vec![PREEMPTING];
        env.extend(release.map(|r| ("CONTROLLER_RELEASE", r)));
        let (status, requeues, segments) = bed.warned_counter(50, 0, &env);
        assert_eq!(status, 0, "{release:?}");
        assert_eq!(requeues, "7\n", "{release:?}: requeued by the job");
        assert_eq!(
            segments, "0\tpreemption\tckpt/step-5.pt\t7\n",
            "{release:?}"
        );
    }
}

/// How a segment ended is what Slurm says (PreemptTime), not when the signal came: an
/// early signal of no preemption (a `scancel --signal` by hand) is a wall's, and only when
/// squeue cannot say does the signal's time decide.
#[test]
fn a_segment_is_called_preempted_only_when_slurm_is_preempting_it() {
    let (status, requeues, segments) = Bed::with_wall(3600).warned_counter(
        3500,
        0,
        &[("PREEMPT_TIME", "N/A"), ("CONTROLLER_RELEASE", "24.11.5")],
    );
    assert_eq!(status, 0);
    assert_eq!(requeues, "7\n");
    assert_eq!(segments, "0\twall\tckpt/step-5.pt\t7\n");

    let (status, requeues, segments) = Bed::with_wall(3600).warned_counter(3500, 0, &[]);
    assert_eq!(status, 0);
    assert_eq!(requeues, "7\n");
    assert_eq!(
        segments, "0\tpreemption\tckpt/step-5.pt\t7\n",
        "squeue could not say: the signal came long before the wall's warning"
    );
}

/// A signal that comes while the step is still starting the command (a container runtime
/// setting up; the step shell not yet listening would never pass it on) is held back until the
/// command has started, then passed on: the segment checkpoints and is requeued instead
/// of failing (CI, 22.05: a two-node container run warned in its first second ended
/// ERROR).
#[test]
fn a_signal_before_the_command_has_started_waits_for_it() {
    let bed = Bed::new();
    let child = bed.start(COUNTER, 50, 0, &[("STEP_START_SECS", "1")]);
    wait_for(&bed.path("step.pgid"));
    Command::new("kill")
        .args(["-s", "USR2", &child.id().to_string()])
        .status()
        .unwrap();
    assert_eq!(status(child), 0, "requeued, not failed");
    assert_eq!(bed.read("requeues"), "7\n");
    assert!(bed.path("job/started").exists(), "the command ran");
    assert_eq!(
        bed.read("job/resume/segments.tsv"),
        "0\twall\tckpt/step-5.pt\t7\n"
    );
}
