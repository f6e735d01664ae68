//! The env sidecar's clean-up when a job is cancelled, run by a real bash with stand-ins
//! for srun, scontrol and shred: Slurm signals the job's processes again while the
//! clean-up runs, and the sidecar must not survive that.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use slurm_core::testing::wait_until_blocking;
use slurm_core::{Renderer, ScriptContext, TemplateKind};
use slurm_render::HandlebarsRenderer;

fn example_context() -> ScriptContext {
    include!("fixtures/example_context.rs")
}

/// Writes an executable `name` into `bin`.
fn tool(bin: &Path, name: &str, text: &str) {
    let path = bin.join(name);
    std::fs::write(&path, text).unwrap();
    let status = Command::new("chmod").arg("+x").arg(&path).status().unwrap();
    assert!(status.success());
}

/// Ends the process group of `child` (the script's leftovers) when dropped.
struct Group(u32);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0)])
            .stderr(Stdio::null())
            .status();
    }
}

/// Runs the batch script of `kind` (`requeue` on or off) with a sidecar, cancels it once
/// its command runs, and answers whether the sidecar is still there after the script
/// ended. The shred stand-in signals its whole process group with SIGTERM before it
/// does its work, as Slurm signals every process of a job it cancels, again and again
/// while they end.
fn sidecar_survives_a_cancel(kind: TemplateKind, requeue: bool) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(dir.path().join("job")).unwrap();
    let real_shred = ["/usr/bin/shred", "/bin/shred"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("coreutils' shred");
    tool(
        &bin,
        "srun",
        "#!/bin/bash\nwhile [ \"${1#--}\" != \"$1\" ]; do case $1 in --chdir=*) cd \"${1#--chdir=}\" ;; esac; shift; done\nexec \"$@\"\n",
    );
    // Not requeued: the job's restart count is the one it started with.
    tool(
        &bin,
        "scontrol",
        "#!/bin/bash\necho \"JobId=7 Restarts=0\"\n",
    );
    tool(
        &bin,
        "shred",
        &format!("#!/bin/bash\nkill -TERM 0\nexec {real_shred} \"$@\"\n"),
    );
    let env_file = dir.path().join("job.env");
    std::fs::write(&env_file, "export SECRET_TOKEN=s3cr3t\n").unwrap();
    let context = ScriptContext {
        nodes: if kind == TemplateKind::MultiNode {
            2
        } else {
            1
        },
        log_dir: format!("{root}/logs"),
        results_dir: format!("{root}/job"),
        results_dir_in_job: format!("{root}/job"),
        command: "touch started; sleep 60".into(),
        env_file: Some(env_file.display().to_string()),
        requeue,
        ..example_context()
    };
    let script = HandlebarsRenderer::new().render(kind, &context).unwrap();
    let mut child: Child = Command::new("bash")
        .arg("-c")
        .arg(script)
        .env("PATH", format!("{root}/bin:/usr/bin:/bin"))
        .env("SLURM_JOB_ID", "7")
        .env("SLURM_RESTART_COUNT", "0")
        .env("SLURM_JOB_NODELIST", "n1")
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let _group = Group(child.id());
    let started = dir.path().join("job/started");
    wait_until_blocking("the command's start", Duration::from_secs(20), || {
        started.exists()
    });
    // scancel: SIGTERM to the batch shell.
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    wait_until_blocking("the script's end", Duration::from_secs(20), || {
        child.try_wait().unwrap().is_some()
    });
    env_file.exists()
}

#[test]
fn a_cancel_that_signals_the_clean_up_leaves_no_sidecar() {
    // Seen on the test bed under load: the cancel's SIGTERM reached `shred -u` while it
    // overwrote the sidecar (three passes, each synced), shred died, and the batch shell,
    // running its TERM trap, exited before the `rm` that follows a failed shred.
    for kind in [TemplateKind::SingleNode, TemplateKind::MultiNode] {
        for requeue in [false, true] {
            assert!(
                !sidecar_survives_a_cancel(kind, requeue),
                "{kind:?} (requeue {requeue}): the sidecar survived the cancel"
            );
        }
    }
}
