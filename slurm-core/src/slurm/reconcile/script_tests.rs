//! The submit and settle scripts run for real (local bash, fake sbatch, squeue and sacct).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

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

/// A folder for one test: fake tools in `bin` (see [`fake_tools`]) and an empty results
/// root; the folder lives as long as the returned guard.
fn scene(sbatch_out: &str, sbatch_delay: u32) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let (bin, root) = (tmp.path().join("bin"), tmp.path().join("results"));
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    fake_tools(&bin, sbatch_out, sbatch_delay);
    (tmp, bin, root)
}

/// Run `command` with the fake tools of `bin` first on PATH, under a login node's
/// usual umask (022).
async fn run(bin: &Path, command: Command) -> Output {
    let path = format!(
        "PATH={}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut local = Command::new("bash")
        .arg("-c")
        .arg("umask 022 && exec env \"$@\"")
        .arg("login-umask")
        .arg(path)
        .arg(command.program())
        .args(command.get_args().iter().cloned());
    if let Some(stdin) = command.stdin_bytes() {
        local = local.stdin(stdin.to_vec());
    }
    LocalTransport::new().run(&local).await.unwrap()
}

fn submit(root: &Path, name: &str, attempt: u32) -> Command {
    submit_owned(root, name, attempt, "")
}

/// Attempt `attempt` of the record `name` holding the owner token `owner`.
fn submit_owned(root: &Path, name: &str, attempt: u32, owner: &str) -> Command {
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
            owner.to_string(),
            String::new(),
        ])
        .stdin(payload)
}

fn settle(root: &Path, name: &str, attempts: u32) -> Command {
    settle_waiting(root, &[(name, attempts, "-")], 1)
}

/// A settle of `records` (name, attempts, the SLURM ids known of it: `-` for none),
/// waiting at most `wait` seconds in all for attempts still in sbatch.
fn settle_waiting(root: &Path, records: &[(&str, u32, &str)], wait: u32) -> Command {
    let mut stdin = String::new();
    for (name, attempts, ids) in records {
        stdin.push_str(&format!("{}/{name}\t{name}\t{attempts}", root.display()));
        // The ids known are an optional field (records settled before it had none).
        if *ids != "-" {
            stdin.push_str(&format!("\t{ids}"));
        }
        stdin.push('\n');
    }
    SETTLE
        .command([wait.to_string(), "2024-01-01T00:00:00".to_string()])
        .stdin(stdin.into_bytes())
}

#[tokio::test]
async fn an_attempt_leaves_its_answer_and_a_fenced_attempt_never_runs_sbatch() {
    let (_tmp, bin, root) = scene("4321\n", 0);
    let name = "job-aaaaaa";
    let out = run(&bin, submit(&root, name, 1)).await;
    assert_eq!(out.status, 0, "{}", out.stderr_text());
    assert_eq!(out.stdout_text(), "4321\n");
    // The settle reads the attempt's answer back; attempt 2 was never sent: fenced.
    let answer = run(&bin, settle(&root, name, 2)).await;
    let parts = round_trip::split(&answer, 4).unwrap();
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
    let (_tmp, bin, root) = scene("1\n", 0);
    let name = "job-bbbbbb";
    // The settle comes first (the submitter died before its upload landed).
    let answer = run(&bin, settle(&root, name, 1)).await;
    let parts = round_trip::split(&answer, 4).unwrap();
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
    let (_tmp, bin, root) = scene("77\n", 4);
    let name = "job-cccccc";
    let (bin2, root2) = (bin.clone(), root.clone());
    let submitting = tokio::spawn(async move { run(&bin2, submit(&root2, name, 1)).await });
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    // The settle waits one second for it, then says it may still be running.
    let answer = run(&bin, settle(&root, name, 1)).await;
    let parts = round_trip::split(&answer, 4).unwrap();
    assert!(
        parts[0]
            .stdout_text()
            .contains(&format!("{name} 1 running")),
        "{}",
        parts[0].stdout_text()
    );
    assert_eq!(submitting.await.unwrap().stdout_text(), "77\n");
    let answer = run(&bin, settle(&root, name, 1)).await;
    let parts = round_trip::split(&answer, 4).unwrap();
    assert!(parts[0].stdout_text().contains(&format!("{name} 1 done 0")));
}

#[tokio::test]
async fn a_settle_makes_a_missing_job_folder_private() {
    // Defect 10: the fence made the job folder with the login umask (world-listable),
    // and a late attempt then unpacked the job's files into it.
    use std::os::unix::fs::MetadataExt;
    let (_tmp, bin, root) = scene("1\n", 0);
    let name = "job-dddddd";
    let answer = run(&bin, settle(&root, name, 1)).await;
    let parts = round_trip::split(&answer, 4).unwrap();
    assert!(parts[0].stdout_text().contains(&format!("{name} 1 fenced")));
    for folder in [root.join(name), root.join(name).join(".sbatch-1")] {
        let mode = std::fs::metadata(&folder).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}: {mode:o}", folder.display());
    }
}

#[tokio::test]
async fn stuck_attempts_are_waited_for_under_one_deadline() {
    // Defect 1: each attempt still "in sbatch" had a wait of its own, one after another,
    // so a status with many stuck records settled none within its round trip's limit.
    let (_tmp, bin, root) = scene("1\n", 0);
    let names = ["job-e00001", "job-e00002", "job-e00003", "job-e00004"];
    for name in names {
        // Attempt 1 claimed its folder and was killed before sbatch's answer was kept.
        std::fs::create_dir_all(root.join(name).join(".sbatch-1")).unwrap();
    }
    let records: Vec<(&str, u32, &str)> = names.iter().map(|n| (*n, 1, "-")).collect();
    let began = std::time::Instant::now();
    let answer = run(&bin, settle_waiting(&root, &records, 2)).await;
    let took = began.elapsed();
    let parts = round_trip::split(&answer, 4).unwrap();
    for name in names {
        assert!(
            parts[0]
                .stdout_text()
                .contains(&format!("{name} 1 running")),
            "{}",
            parts[0].stdout_text()
        );
    }
    // One deadline of 2 s for all four (one wait each would take 8 s).
    assert!(
        took < std::time::Duration::from_secs(6),
        "the fence took {took:?} for 4 stuck attempts with a 2 s wait"
    );
}

#[tokio::test]
async fn sacct_is_asked_by_job_id_and_by_the_ids_a_settle_knows() {
    // Defects 3 and 20: sacct's JobIDRaw of an array task is the task's own number (use
    // JobID, which maps to the array), and a range cancelled before any task started is
    // missing from a listing by name on Slurm 26.05: the ids known (the record's
    // candidates, what its attempts printed) are asked by id as well.
    let (_tmp, bin, root) = scene("1\n", 0);
    let (seen, left) = ("job-f00001", "job-f00002");
    // A sacct that knows job 48 (an array range never started) only when asked by id.
    std::fs::write(
        bin.join("sacct"),
        format!(
            "#!/bin/bash\necho \"$*\" >> {dir}/sacct.args\ncase \" $* \" in *' -j '*48*) echo '48_[2-3%2]|{seen}' ;; esac\n",
            dir = bin.display()
        ),
    )
    .unwrap();
    // The second record's attempt printed its id before the submit was killed.
    let attempt = root.join(left).join(".sbatch-1");
    std::fs::create_dir_all(&attempt).unwrap();
    std::fs::write(attempt.join("out"), "Site banner\n77\n").unwrap();
    let answer = run(
        &bin,
        settle_waiting(&root, &[(seen, 1, "48"), (left, 1, "-")], 1),
    )
    .await;
    let parts = round_trip::split(&answer, 4).unwrap();
    assert!(
        parts[2]
            .stdout_text()
            .contains(&format!("48_[2-3%2]|{seen}")),
        "{}",
        parts[2].stdout_text()
    );
    let args = std::fs::read_to_string(bin.join("sacct.args")).unwrap();
    assert!(args.contains("--format=JobID,JobName"), "{args}");
    assert!(!args.contains("JobIDRaw"), "{args}");
    let by_id = args.lines().find(|l| l.contains(" -j ")).expect(&args);
    assert!(by_id.contains("48") && by_id.contains("77"), "{by_id}");
}

#[tokio::test]
async fn a_folder_another_record_claimed_is_never_submitted_settled_or_cleaned_as_ours() {
    // Defect 4: a record of another store with the same id took the first record's
    // attempt as its own (fenced, then adopted its job), and its end shredded the first
    // record's secrets. The folder's owner token decides.
    let (_tmp, bin, root) = scene("4321\n", 0);
    let name = "job-0123456789abcdef";
    let ours = run(&bin, submit_owned(&root, name, 1, "token-a")).await;
    assert_eq!(ours.status, 0, "{}", ours.stderr_text());
    let theirs = run(&bin, submit_owned(&root, name, 1, "token-b")).await;
    assert_eq!(
        SubmitExit::from_status(theirs.status),
        Some(SubmitExit::Claimed),
        "{}",
        theirs.stderr_text()
    );
    let runs = std::fs::read_to_string(bin.join("sbatch.runs")).unwrap();
    assert_eq!(
        runs.lines().count(),
        1,
        "sbatch ran for the first record only"
    );
    // The other record's settle: foreign, nothing of the first record's read or fenced.
    let settle = SETTLE
        .command(["1".to_string(), "2024-01-01T00:00:00".to_string()])
        .stdin(format!("{}/{name}\t{name}\t2\t-\ttoken-b\n", root.display()).into_bytes());
    let answer = run(&bin, settle).await;
    let fence = round_trip::split(&answer, 4).unwrap()[0].stdout_text();
    assert_eq!(fence.trim(), format!("{name} foreign"));
    assert!(
        !root.join(name).join(".sbatch-2").exists(),
        "nothing fenced for it"
    );
    // Its end leaves the first record's secrets alone.
    let sidecar = root.join(name).join(format!("env/job_{name}.env"));
    let folder = root.join(name).display().to_string();
    let forget = crate::slurm::scripts::FORGET_SECRETS.command([
        folder.clone(),
        name.to_string(),
        "token-b".to_string(),
    ]);
    let gone = run(&bin, forget).await;
    assert_eq!(gone.stdout_text().trim(), name);
    assert!(sidecar.exists(), "the first record's sidecar stays");
    let forget = crate::slurm::scripts::FORGET_SECRETS.command([
        folder,
        name.to_string(),
        "token-a".to_string(),
    ]);
    run(&bin, forget).await;
    assert!(!sidecar.exists(), "its own record removes it");
}

#[tokio::test]
async fn a_submit_starts_only_the_programs_exactly_once_needs() {
    // Issue 25, point 2: the claim (`ln`, `rm`) and the kept status (`mv`) are bash's
    // own now. With only logging stand-ins on PATH, any other program fails the submit.
    let tmp = tempfile::tempdir().unwrap();
    let (bin, root) = (tmp.path().join("bin"), tmp.path().join("results"));
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    let log = tmp.path().join("started");
    let write = |name: &str, text: String| {
        std::fs::write(bin.join(name), text).unwrap();
        std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    for tool in ["mkdir", "tar", "sha256sum", "timeout"] {
        let real = std::process::Command::new("bash")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .unwrap();
        let real = String::from_utf8(real.stdout).unwrap();
        write(
            tool,
            format!(
                "#!/bin/bash\necho {tool} >> {log}\nexec {} \"$@\"\n",
                real.trim(),
                log = log.display()
            ),
        );
    }
    write(
        "sbatch",
        format!("#!/bin/bash\necho sbatch >> {}\necho 4321\n", log.display()),
    );
    std::os::unix::fs::symlink("/bin/bash", bin.join("bash")).unwrap();
    let name = "job-0123456789abcdef";
    let command = submit_owned(&root, name, 1, "token-a");
    let mut only = Command::new("env")
        .arg(format!("PATH={}", bin.display()))
        .arg(command.program())
        .args(command.get_args().iter().cloned());
    only = only.stdin(command.stdin_bytes().unwrap().to_vec());
    let out = LocalTransport::new().run(&only).await.unwrap();
    assert_eq!(out.status, 0, "{}", out.stderr_text());
    assert_eq!(out.stdout_text(), "4321\n");
    let started = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        started.lines().collect::<Vec<_>>(),
        ["mkdir", "tar", "sha256sum", "mkdir", "timeout", "sbatch"]
    );
    let attempt = root.join(name).join(".sbatch-1");
    assert_eq!(std::fs::read_to_string(attempt.join("rc")).unwrap(), "0\n");
    assert_eq!(
        std::fs::read_to_string(root.join(name).join(".owner")).unwrap(),
        "token-a\n"
    );
}

#[tokio::test]
async fn a_settle_that_finds_the_status_being_written_waits_for_it() {
    // The attempt writes `rc` in place, last: created and not yet written, it is read
    // again instead of as an answer without a status.
    let (_tmp, bin, root) = scene("1\n", 0);
    let name = "job-g00001";
    let attempt = root.join(name).join(".sbatch-1");
    std::fs::create_dir_all(&attempt).unwrap();
    std::fs::write(attempt.join("out"), "4321\n").unwrap();
    std::fs::write(attempt.join("err"), "").unwrap();
    std::fs::write(attempt.join("rc"), "").unwrap();
    let settling = {
        let (bin, root) = (bin.clone(), root.clone());
        tokio::spawn(async move { run(&bin, settle_waiting(&root, &[(name, 1, "-")], 20)).await })
    };
    // Without the wait the settle answers at once (an empty status, in milliseconds):
    // give it a second to show that it waits instead.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert!(!settling.is_finished(), "the settle waits for the status");
    std::fs::write(attempt.join("rc"), "0\n").unwrap();
    let answer = settling.await.unwrap();
    let fence = round_trip::split(&answer, 4).unwrap()[0].stdout_text();
    assert!(
        fence.contains(&format!("{name} 1 done 0 {} -", hex::encode("4321\n"))),
        "{fence}"
    );
}
