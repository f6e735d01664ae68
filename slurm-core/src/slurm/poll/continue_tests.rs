//! `continue_segment.sh` run for real (local bash, a fake scontrol): when it moves a
//! requeued segment's begin time forward, and when it leaves Slurm's hold standing.

use std::os::unix::fs::PermissionsExt;

use crate::slurm::scripts::CONTINUE_SEGMENT;
use crate::transport::{Command, LocalTransport, Transport};

/// Run the script for job 77 with `segments` as its segments file; what it printed and
/// the fake scontrol's arguments (empty when it was not run).
async fn continue_after(segments: &str) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let scontrol = bin.join("scontrol");
    std::fs::write(
        &scontrol,
        format!(
            "#!/bin/bash\necho \"$*\" >> {}/scontrol.args\n",
            dir.path().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&scontrol, std::fs::Permissions::from_mode(0o755)).unwrap();
    let file = dir.path().join("segments.tsv");
    std::fs::write(&file, segments).unwrap();
    let script = CONTINUE_SEGMENT.command(["77".to_string(), file.display().to_string()]);
    let command = Command::new("env")
        .arg(format!(
            "PATH={}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        ))
        .arg(script.program())
        .args(script.get_args().iter().cloned());
    let output = LocalTransport::new().run(&command).await.unwrap();
    assert!(output.success(), "{}", output.stderr_text());
    let args = std::fs::read_to_string(dir.path().join("scontrol.args")).unwrap_or_default();
    (output.stdout_text(), args)
}

#[tokio::test]
async fn a_segment_ended_at_the_wall_starts_again_a_few_seconds_on() {
    let (printed, args) = continue_after("0\twall\tckpt/step-000012.ckpt\t77\n").await;
    assert_eq!(printed.trim(), "0\twall\tckpt/step-000012.ckpt\t77");
    assert_eq!(args.trim(), "update JobId=77 StartTime=now+5");
}

/// A preempted run started again at once was preempted a second time without a warning
/// on Slurm 24.11 (its checkpoint lost: `resume::a_preempted_run_resumes_from_its_checkpoint`
/// counted two restarts in CI); after a preemption Slurm's own hold stands.
#[tokio::test]
async fn a_preempted_segment_keeps_slurms_hold() {
    let (printed, args) =
        continue_after("0\twall\tckpt/a.ckpt\t70\n1\tpreemption\tckpt/step-000005.ckpt\t77\n")
            .await;
    assert_eq!(printed.trim(), "1\tpreemption\tckpt/step-000005.ckpt\t77");
    assert_eq!(args, "", "the begin time is left as Slurm set it");
}

#[tokio::test]
async fn a_segment_the_script_did_not_note_still_starts_again_soon() {
    let (printed, args) = continue_after("").await;
    assert_eq!(printed, "");
    assert_eq!(args.trim(), "update JobId=77 StartTime=now+5");
}
