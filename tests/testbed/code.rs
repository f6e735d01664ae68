//! `code:` end to end, on both transports: a git tree of 1,000 files sent once (what git
//! ignores absent, the commit in the record, read-only at SLURM_RUN_CODE_DIR, also in
//! a container), a second job with one file changed sends that one file (the bytes
//! counted), a third with the same tree sends nothing and, from the same backend, asks
//! nothing; a dirty tree is refused before anything is submitted; slurmctl shows
//! code_commit in submit, status and records --json.

use std::path::Path;
use std::process::Command as Process;
use std::time::Duration;

use slurm_core::{
    Backend, ErrorKind, JobRecord, JobSpec, JobState, LogOptions, SubmitOptions, Transport,
};
use slurm_run_testsupport::backend::harness_in;
use slurm_run_testsupport::backend::{backend_over, registry_image, with_credentials};
use slurm_run_testsupport::examples::{example, run};
use slurm_run_testsupport::transports::{openssh, ssh2};
use slurm_run_testsupport::{cluster, small_spec, testbed_env};

use crate::containers::{stamp, submit_message};
use crate::into_job::{wait_state, Over};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Process::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A committed git tree of 1,000 distinct files in 10 folders, a .gitignore, and an
/// ignored file; its HEAD.
fn thousand_file_tree(dir: &Path) -> String {
    git(dir, &["init", "-q"]);
    for i in 0..1000 {
        let path = dir.join(format!("pkg{}/mod{i:04}.py", i % 10));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("VALUE = {i}\n")).unwrap();
    }
    std::fs::write(dir.join(".gitignore"), "*.log\n").unwrap();
    std::fs::write(dir.join("ignored.log"), "never sent\n").unwrap();
    git(dir, &["add", "."]);
    git(dir, &["commit", "-qm", "a thousand files"]);
    git(dir, &["rev-parse", "HEAD"])
}

/// What the job says of its code tree: its file count (two levels deep, by the shell:
/// the tiny image has no `find`), one file, the ignored file's absence, and whether it
/// could write there.
const LOOK: &str = r#"cd "$SLURM_RUN_CODE_DIR" && n=0 && for f in .* * */*; do [ -f "$f" ] && n=$((n + 1)); done; echo "$n" && cat pkg3/mod0003.py && { [ -e ignored.log ] && echo ignored-present || echo ignored-absent; } && { touch new 2>/dev/null && echo writable || echo read-only; }"#;

fn code_spec(name: &str, dir: &Path, image: Option<String>) -> JobSpec {
    let mut spec = small_spec(name, LOOK);
    spec.code = Some(slurm_core::CodeSpec::new(dir.display().to_string()));
    spec.image = image;
    spec
}

async fn run_job<T: Transport + 'static>(b: &Over<T>, spec: &JobSpec) -> (JobRecord, String) {
    let record = b.submit(spec, SubmitOptions::default()).await.unwrap();
    let done = wait_state(b, record.id(), JobState::Complete, 240).await;
    let out = b.logs(record.id(), LogOptions::default()).await.unwrap();
    (done, out)
}

/// The whole story over `transport`, in a results root of its own (an empty store).
async fn a_tree_is_sent_once_then_only_what_changed<T: Transport + 'static>(
    transport: T,
    tag: &str,
    image: Option<String>,
) {
    let tb = testbed_env();
    let folder = format!("code-{tag}-{}", stamp());
    let (b, _records) = backend_over(transport, &tb, Some(&folder));
    let tree = tempfile::tempdir().unwrap();
    let head = thousand_file_tree(tree.path());

    let (first, out) = run_job(
        &b,
        &code_spec(&format!("code1-{tag}"), tree.path(), image.clone()),
    )
    .await;
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["1001", "VALUE = 3", "ignored-absent", "read-only"],
        "{out}"
    );
    assert_eq!(first.code_commit(), Some(head.as_str()));
    let bytes: usize = (0..1000)
        .map(|i| format!("VALUE = {i}\n").len())
        .sum::<usize>()
        + "*.log\n".len();
    assert!(
        submit_message(&first).contains(&format!("1001 of 1001 files sent ({bytes} bytes)")),
        "{}",
        submit_message(&first)
    );

    // One file changed and committed: that one file travels.
    std::fs::write(tree.path().join("pkg3/mod0003.py"), "VALUE = 'changed'\n").unwrap();
    git(tree.path(), &["commit", "-qam", "one change"]);
    let head2 = git(tree.path(), &["rev-parse", "HEAD"]);
    let (second, out) = run_job(
        &b,
        &code_spec(&format!("code2-{tag}"), tree.path(), image.clone()),
    )
    .await;
    assert_eq!(out.lines().nth(1), Some("VALUE = 'changed'"), "{out}");
    assert_eq!(second.code_commit(), Some(head2.as_str()));
    let changed = "VALUE = 'changed'\n".len();
    assert!(
        submit_message(&second).contains(&format!("1 of 1001 files sent ({changed} bytes)")),
        "{}",
        submit_message(&second)
    );
    assert_ne!(first.code_dir(), second.code_dir());

    // Uncommitted changes: refused, nothing recorded.
    std::fs::write(tree.path().join("pkg1/mod0001.py"), "VALUE = 'dirty'\n").unwrap();
    let before = b.records(&Default::default()).await.unwrap().len();
    let err = b
        .submit(
            &code_spec(&format!("code3-{tag}"), tree.path(), None),
            SubmitOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
    assert!(
        err.to_string().contains("uncommitted changes") && err.to_string().contains("allow_dirty"),
        "{err}"
    );
    assert_eq!(b.records(&Default::default()).await.unwrap().len(), before);
    git(tree.path(), &["checkout", "-q", "--", "."]);

    // A fresh backend (another process) finds the tree whole and sends nothing.
    let (again, _records2) = backend_over(ssh2(&tb), &tb, Some(&folder));
    let record = again
        .submit(
            &code_spec(&format!("code4-{tag}"), tree.path(), None),
            SubmitOptions::default(),
        )
        .await
        .unwrap();
    assert!(
        submit_message(&record).contains("code tree")
            && submit_message(&record).contains("already on the cluster (1001 files)"),
        "{}",
        submit_message(&record)
    );
    assert_eq!(record.code_dir(), second.code_dir());
    wait_state(&again, record.id(), JobState::Complete, 240).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_over_ssh2_is_sent_once_then_only_what_changed() {
    let _cluster = cluster::shared().await;
    a_tree_is_sent_once_then_only_what_changed(ssh2(&testbed_env()), "ssh2", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_over_openssh_is_sent_once_and_mounted_read_only_in_the_container() {
    let _cluster = cluster::shared().await;
    let h = harness_in(None);
    with_credentials(&h).await;
    let image = registry_image(&h, "slurm-run/tiny:1");
    a_tree_is_sent_once_then_only_what_changed(openssh(&testbed_env()), "openssh", Some(image))
        .await;
}

/// Jobs of one sweep (several submits of one tree from one backend) ask about the
/// tree once and send it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jobs_of_a_sweep_send_and_ask_about_their_tree_once() {
    let _cluster = cluster::shared().await;
    let h = harness_in(Some(&format!("code-sweep-{}", stamp())));
    let tree = tempfile::tempdir().unwrap();
    thousand_file_tree(tree.path());
    h.transport.reset();
    let mut ids = Vec::new();
    for lr in ["0.1", "0.01", "0.001", "0.0001"] {
        let mut spec = small_spec(
            &format!("sweep-{}", lr.replace('.', "")),
            r#"test -f "$SLURM_RUN_CODE_DIR/pkg0/mod0000.py""#,
        );
        spec.code = Some(slurm_core::CodeSpec::new(tree.path().display().to_string()));
        spec.env.insert("LR".into(), lr.into());
        ids.push(
            h.backend
                .submit(&spec, SubmitOptions::default())
                .await
                .unwrap()
                .id()
                .clone(),
        );
    }
    let labels = h.transport.labels();
    let count = |label: &str| labels.iter().filter(|l| l.as_str() == label).count();
    assert_eq!(
        (count("code-missing"), count("code-put")),
        (1, 1),
        "{labels:?}"
    );
    for id in &ids {
        let status = slurm_run_testsupport::backend::wait_terminal(&h.backend, id, 240).await;
        assert_eq!(status.state(), JobState::Complete, "{status:?}");
    }
}

/// slurmctl submits a spec with `code:` and shows the commit in submit, status and
/// records --json.
#[test]
fn slurmctl_shows_the_code_commit() {
    let _cluster = cluster::shared_blocking();
    let tb = testbed_env();
    let state = tempfile::tempdir().unwrap();
    let tree = tempfile::tempdir().unwrap();
    git(tree.path(), &["init", "-q"]);
    std::fs::write(tree.path().join("train.py"), "print('hi')\n").unwrap();
    git(tree.path(), &["add", "."]);
    git(tree.path(), &["commit", "-qm", "one"]);
    let head = git(tree.path(), &["rev-parse", "HEAD"]);
    let spec = state.path().join("spec.yaml");
    std::fs::write(
        &spec,
        format!(
            "name: ctl-code\ncommand: cat \"$SLURM_RUN_CODE_DIR/train.py\"\ngpus_per_node: 1\ncpus_per_task: 1\ntime: \"00:05:00\"\ncode: {{path: {}, exclude: [\"*.tmp\"]}}\n",
            tree.path().display()
        ),
    )
    .unwrap();
    let env = tb.client_env(&state.path().join("records"));
    let ctl = |args: &[&str]| run(&example("slurmctl"), args, &env, Duration::from_secs(240));
    let out = ctl(&["submit", spec.to_str().unwrap(), "--json"]);
    out.expect_code(0);
    let job = &out.json_lines()[0];
    assert_eq!(job["code_commit"], head.as_str(), "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    let out = ctl(&["watch", &id, "--json"]);
    out.expect_code(0);
    let out = ctl(&["status", &id, "--json"]);
    assert_eq!(out.json_lines()[0]["code_commit"], head.as_str());
    let out = ctl(&["records", "--json"]);
    assert_eq!(out.json_lines()[0]["code_commit"], head.as_str());
    let out = ctl(&["logs", &id]);
    assert_eq!(out.stdout.trim(), "print('hi')");
}
