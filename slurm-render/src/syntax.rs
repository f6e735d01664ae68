//! The `bash -n` processes of the lint, started one ahead: after each check a new
//! `bash -n` is started in the background and waits for its script on standard input,
//! so the next check (the next submit's lint) finds its process already running and
//! costs the parse, not the process start; the start overlaps the wait for the cluster.
//! The check itself is the same: the same program, arguments and environment, the whole
//! script on standard input. A process that is no longer alive is never used.

use std::io::Write;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use slurm_core::{Error, Result};

/// The process started ahead for the next check.
static SPARE: Mutex<Option<Child>> = Mutex::new(None);

/// Whether a background start is under way (at most one at a time).
static STARTING: AtomicBool = AtomicBool::new(false);

/// A new `bash -n` reading its script on standard input.
fn start() -> std::io::Result<Child> {
    Command::new("bash")
        .arg("-n")
        .env_remove("BASH_ENV")
        .env_remove("ENV")
        .env("LC_ALL", "C")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
}

/// The process started ahead, if it is still waiting; else a new one.
fn take() -> Result<Child> {
    let spare = SPARE.lock().expect("bash -n lock").take();
    if let Some(mut child) = spare {
        if matches!(child.try_wait(), Ok(None)) {
            return Ok(child);
        }
    }
    start().map_err(|e| {
        Error::io(
            "starting `bash -n` for the syntax check (is bash on PATH?)",
            e,
        )
    })
}

/// Start the next check's process in the background, unless one is there or starting.
fn start_ahead() {
    if SPARE.lock().expect("bash -n lock").is_some() || STARTING.swap(true, Ordering::SeqCst) {
        return;
    }
    let started = std::thread::Builder::new()
        .name("bash-n-ahead".into())
        .spawn(|| {
            if let Ok(child) = start() {
                let mut spare = SPARE.lock().expect("bash -n lock");
                match spare.as_ref() {
                    None => *spare = Some(child),
                    // Another check filled the slot meanwhile: this one ends (its
                    // input closes) and is waited for.
                    Some(_) => {
                        drop(spare);
                        let _ = child.wait_with_output();
                    }
                }
            }
            STARTING.store(false, Ordering::SeqCst);
        });
    if started.is_err() {
        STARTING.store(false, Ordering::SeqCst);
    }
}

/// Feed `script` to `child` and wait for its answer.
fn feed(mut child: Child, script: &str) -> Result<Output> {
    let mut stdin = child.stdin.take().expect("stdin is piped");
    std::thread::scope(|scope| {
        // Written from a thread so a large script cannot deadlock against bash's stderr.
        let writer = scope.spawn(move || {
            // bash may stop reading early on a syntax error; a broken pipe is not a failure.
            let _ = stdin.write_all(script.as_bytes());
        });
        let output = child.wait_with_output();
        let _ = writer.join();
        output
    })
    .map_err(|e| Error::io("waiting for `bash -n`", e))
}

/// `bash -n` of `script` (read on standard input; nothing is executed): its exit status
/// and messages. A process killed by a signal is no answer: the check runs again in a
/// new one.
pub(crate) fn bash_n(script: &str) -> Result<Output> {
    let mut output = feed(take()?, script)?;
    if output.status.code().is_none() {
        let fresh = start().map_err(|e| Error::io("starting `bash -n` again", e))?;
        output = feed(fresh, script)?;
    }
    start_ahead();
    Ok(output)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_started_ahead_gives_the_same_answers_and_a_dead_one_is_not_used() {
        // Fills the slot, then checks a good and a bad script with processes started
        // ahead: the answers are those of a fresh `bash -n`.
        let fresh = |script: &str| feed(start().unwrap(), script).unwrap().status.success();
        for (script, good) in [
            ("echo ok\n", true),
            ("if then fi\n", false),
            ("f() {\n", false),
        ] {
            assert_eq!(fresh(script), good, "{script:?}");
            for _ in 0..3 {
                assert_eq!(bash_n(script).unwrap().status.success(), good, "{script:?}");
            }
        }
        // A spare that died (killed) is replaced, never read as a failed check.
        let mut dead = start().unwrap();
        dead.kill().unwrap();
        let _ = dead.wait();
        *SPARE.lock().unwrap() = Some(dead);
        assert!(bash_n("echo ok\n").unwrap().status.success());
    }
}
