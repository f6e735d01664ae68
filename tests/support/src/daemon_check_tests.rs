//! `testbed/up`'s daemon check (`daemon_answers` in `testbed/lib.sh`), run by real bash
//! on stand-in daemons: one that forks into the background and dies there, as slurmd
//! 24.11 does without a cgroup plugin (issue 26, defect 18: `up` reported the cluster up
//! until the nodes timed out), and one that keeps running and answers.

use std::path::Path;
use std::process::Command;

/// Run `daemon_answers` on a stand-in daemon started by `start` (bash, with `$PIDFILE`
/// set; it must write the daemon's pid there), answering when `answer` succeeds.
fn check(start: &str, answer: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testbed/lib.sh");
    let script = format!(
        r#"set -euo pipefail
. "$LIB"
{start}
daemon_answers standin-daemon "$PIDFILE" "$LOGFILE" {answer}
echo answered"#
    );
    Command::new("bash")
        .arg("-c")
        .arg(script)
        .env("LIB", lib)
        .env("PIDFILE", dir.path().join("standin.pid"))
        .env("LOGFILE", dir.path().join("standin.log"))
        .env("SLURM_RUN_TESTBED_DIR", dir.path())
        .output()
        .unwrap()
}

#[test]
fn a_daemon_that_dies_after_forking_fails_the_check_naming_it() {
    // The stand-in forks, writes its pid and exits 0 at once (the parent's status is
    // all `up` saw); the child runs a moment, then dies as slurmd does.
    let output = check(
        r#"echo "slurmd: error: cgroup namespace plugin not found" > "$LOGFILE"
(exec -a standin-daemon sleep 1) & echo $! > "$PIDFILE""#,
        "false",
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("standin-daemon did not keep running"),
        "{stderr}"
    );
    assert!(stderr.contains("cgroup namespace plugin"), "{stderr}");
}

#[test]
fn a_daemon_that_runs_and_answers_passes_the_check() {
    let output = check(
        r#"(exec -a standin-daemon sleep 30) & echo $! > "$PIDFILE"; trap 'kill $(cat "$PIDFILE")' EXIT"#,
        "true",
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "answered");
}
