//! The submit and settle scripts run for real (local bash, fake sbatch, squeue and sacct).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::slurm::scripts::{SubmitExit, SETTLE, SUBMIT};
use crate::transport::{round_trip, Command, LocalTransport, Output, Transport};

/// Fake scheduler tools in `bin`: sbatch prints `sbatch_out` (after `sbatch_delay`
/// seconds) and counts its runs; squeue and sacct log their arguments.
fn fake_tools(bin: &Path, sbatch_out: &str, sbatch_delay: u32) {
    let write = |name: &str, text: String| {
        std::fs::write(bin.join(name), text).unwrap();
        std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    write(
        "sbatch",
        format!(
            "#!/bin/bash\nsleep {sbatch_delay}\necho run >> {dir}/sbatch.runs\nprintf '%s' '{sbatch_out}'\n",
            dir = bin.display()
        ),
    );
    for tool in ["squeue", "sacct"] {
        write(
            tool,
            format!(
                "#!/bin/bash\necho \"$*\" >> {dir}/{tool}.args\n",
                dir = bin.display()
            ),
        );
    }
}

async fn run(bin: &Path, command: Command) -> Output {
    let path = format!(
        "PATH={}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut local = Command::new("env")
        .arg(path)
        .arg(command.program())
        .args(command.get_args().iter().cloned());
    if let Some(stdin) = command.stdin_bytes() {
        local = local.stdin(stdin.to_vec());
    }
    LocalTransport::new().run(&local).await.unwrap()
}

fn submit(root: &Path, name: &str, attempt: u32) -> Command {
    let payload = crate::slurm::submit::build_payload(
        name,
        &[
            (
                format!("sbatch/job_{name}.sbatch"),
                b"#!/bin/bash\ntrue\n".to_vec(),
                0o700,
            ),
            (
                format!("env/job_{name}.env"),
                b"export TOKEN=canary-5ec2e7\n".to_vec(),
                0o600,
            ),
        ],
    )
    .unwrap();
    SUBMIT
        .command([
            root.display().to_string(),
            name.to_string(),
            attempt.to_string(),
            "30".to_string(),
            String::new(),
        ])
        .stdin(payload)
}

fn settle(root: &Path, name: &str, attempts: u32) -> Command {
    SETTLE
        .command(["1".to_string(), "2024-01-01T00:00:00".to_string()])
        .stdin(format!("{}/{name}\t{name}\t{attempts}\n", root.display()).into_bytes())
}

#[tokio::test]
async fn an_attempt_leaves_its_answer_and_a_fenced_attempt_never_runs_sbatch() {
    let tmp = tempfile::tempdir().unwrap();
    let (bin, root) = (tmp.path().join("bin"), tmp.path().join("results"));
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    fake_tools(&bin, "4321\n", 0);
    let name = "job-aaaaaa";
    let out = run(&bin, submit(&root, name, 1)).await;
    assert_eq!(out.status, 0, "{}", out.stderr_text());
    assert_eq!(out.stdout_text(), "4321\n");
    // The settle reads the attempt's answer back; attempt 2 was never sent: fenced.
    let answer = run(&bin, settle(&root, name, 2)).await;
    let parts = round_trip::split(&answer, 3).unwrap();
    let fence = parts[0].stdout_text();
    assert!(
        fence.contains(&format!("{name} 1 done 0 {} -", hex::encode("4321\n"))),
        "{fence}"
    );
    assert!(fence.contains(&format!("{name} 2 fenced")), "{fence}");
    assert!(
        !fence.contains("forgot"),
        "attempt 1 ran: its job needs the secrets"
    );
    // A late upload of attempt 2 is refused before sbatch, and leaves no secret.
    let late = run(&bin, submit(&root, name, 2)).await;
    assert_eq!(
        SubmitExit::from_status(late.status),
        Some(SubmitExit::Fenced)
    );
    let runs = std::fs::read_to_string(bin.join("sbatch.runs")).unwrap();
    assert_eq!(runs.lines().count(), 1, "sbatch ran once");
    assert!(root.join(name).join(format!("env/job_{name}.env")).exists());
    // squeue and sacct were asked about the user's own jobs, by exact name.
    let user = String::from_utf8(
        std::process::Command::new("id")
            .arg("-un")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    for tool in ["squeue", "sacct"] {
        let args = std::fs::read_to_string(bin.join(format!("{tool}.args"))).unwrap();
        assert!(
            args.contains(&format!("--user={}", user.trim())),
            "{tool}: {args}"
        );
        assert!(args.contains(&format!("--name={name}")), "{tool}: {args}");
    }
}

#[tokio::test]
async fn a_record_whose_attempts_were_all_fenced_loses_its_secrets() {
    let tmp = tempfile::tempdir().unwrap();
    let (bin, root) = (tmp.path().join("bin"), tmp.path().join("results"));
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    fake_tools(&bin, "1\n", 0);
    let name = "job-bbbbbb";
    // The settle comes first (the submitter died before its upload landed).
    let answer = run(&bin, settle(&root, name, 1)).await;
    let parts = round_trip::split(&answer, 3).unwrap();
    assert!(parts[0].stdout_text().contains(&format!("{name} 1 fenced")));
    assert!(parts[0].stdout_text().contains(&format!("{name} forgot")));
    // The upload lands late: refused, and the secrets it unpacked are removed.
    let late = run(&bin, submit(&root, name, 1)).await;
    assert_eq!(
        SubmitExit::from_status(late.status),
        Some(SubmitExit::Fenced)
    );
    assert!(!bin.join("sbatch.runs").exists(), "sbatch never ran");
    assert!(!root.join(name).join(format!("env/job_{name}.env")).exists());
}

#[tokio::test]
async fn an_attempt_still_in_sbatch_is_reported_running() {
    let tmp = tempfile::tempdir().unwrap();
    let (bin, root) = (tmp.path().join("bin"), tmp.path().join("results"));
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    fake_tools(&bin, "77\n", 4);
    let name = "job-cccccc";
    let (bin2, root2) = (bin.clone(), root.clone());
    let submitting = tokio::spawn(async move { run(&bin2, submit(&root2, name, 1)).await });
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    // The settle waits one second for it, then says it may still be running.
    let answer = run(&bin, settle(&root, name, 1)).await;
    let parts = round_trip::split(&answer, 3).unwrap();
    assert!(
        parts[0]
            .stdout_text()
            .contains(&format!("{name} 1 running")),
        "{}",
        parts[0].stdout_text()
    );
    assert_eq!(submitting.await.unwrap().stdout_text(), "77\n");
    let answer = run(&bin, settle(&root, name, 1)).await;
    let parts = round_trip::split(&answer, 3).unwrap();
    assert!(parts[0].stdout_text().contains(&format!("{name} 1 done 0")));
}
