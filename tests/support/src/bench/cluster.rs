//! What the benches on the test bed share: many held jobs made at once, records that
//! track them, the reference's way (a fresh `ssh` process per command), and timing a
//! command over the harness's open connection.

use std::time::{Duration, Instant};

use slurm_core::{
    BackendRef, Command, JobId, JobRecord, JobSpec, JobState, Mark, RecordStore, RemotePath,
    SlurmJobId, TransitionSource, Transport,
};

use super::median;
use crate::backend::Harness;
use crate::testbed::Testbed;

/// `count` held jobs (they stay PENDING, so every poll asks about all of them), made on
/// the login node by a loop of `sbatch --hold` in a few commands.
pub async fn held_jobs(h: &Harness, count: usize) -> Vec<SlurmJobId> {
    let mut ids = Vec::with_capacity(count);
    while ids.len() < count {
        let batch = (count - ids.len()).min(2_500);
        let out = h
            .transport
            .run(
                &Command::bash_script(
                    r#"for ((i = 0; i < $1; i++)); do sbatch --parsable --hold --job-name=bench-held --output=/dev/null --wrap=true || exit 1; done"#,
                    [batch.to_string()],
                )
                .timeout(Duration::from_secs(1800)),
            )
            .await
            .expect("submit held jobs");
        assert!(out.success(), "{}", out.stderr_text());
        ids.extend(
            out.stdout_text()
                .lines()
                .map(|l| SlurmJobId::parse(l.split(';').next().unwrap()).expect("job id")),
        );
    }
    ids
}

/// Records that track `ids`, as a submit would have left them (PENDING, with the SLURM
/// id), in the harness's store. Each call makes new records, so a SLURM job may be
/// tracked more than once (a fresh record per sample).
pub fn track(h: &Harness, ids: &[SlurmJobId]) -> Vec<JobId> {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let spec = JobSpec::new("bench", "true");
    let store = h.backend.store();
    ids.iter()
        .map(|id| {
            // Named after the SLURM job: minted ids (24 random bits) collide among thousands.
            let job =
                JobId::parse(&format!("bench-{id}-{}-{call}", std::process::id())).expect("an id");
            let record =
                JobRecord::new(job.clone(), &spec, RemotePath::parse("/tmp/bench").unwrap())
                    .expect("a record");
            store.open(&record).expect("open a record");
            store
                .mark(
                    &job,
                    Mark::new(JobState::Pending, TransitionSource::Agent)
                        .backend_ref(BackendRef::new(id.to_string())),
                )
                .expect("mark a record");
            job
        })
        .collect()
}

/// `scancel` every job of `ids`, a few thousand per command; failures are ignored
/// (the jobs may have ended).
pub async fn cancel_all(h: &Harness, ids: &[SlurmJobId]) {
    for chunk in ids.chunks(2_000) {
        let _ = h
            .transport
            .run(
                &Command::new("scancel")
                    .args(chunk.iter().map(ToString::to_string))
                    .timeout(Duration::from_secs(300)),
            )
            .await;
    }
}

/// The median time of `command` over the harness's open connection (`samples` runs
/// after one warm-up); each must succeed.
pub async fn over_connection(h: &Harness, command: &Command, samples: usize) -> Duration {
    let mut times = Vec::with_capacity(samples);
    for i in 0..=samples {
        let took = bare_once(h, command).await;
        if i > 0 {
            times.push(took);
        }
    }
    median(times)
}

/// The time of one run of `command` over the harness's open connection, on an idle
/// shell ([`idle_shell`]); it must succeed.
pub async fn bare_once(h: &Harness, command: &Command) -> Duration {
    idle_shell().await;
    let start = Instant::now();
    let out = h.transport.run(command).await.expect("bare command");
    let took = start.elapsed();
    assert!(out.success(), "{}: {}", command.label(), out.stderr_text());
    took
}

/// A pause before a timed command: the long-lived shell finishes what it does after an
/// answer (the next command's output files, the clean-up of the last one's) while the
/// client reads it, and a command sent at once waits for that. Commands a watch or an
/// orchestrator sends come seconds apart; every timed sample, slurm-run's and the bare
/// command's alike, starts on an idle shell.
pub async fn idle_shell() {
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
}

/// The reference's way: a fresh `ssh` process (and connection) for `line`; its time.
pub fn fresh_ssh(tb: &Testbed, line: &str) -> Duration {
    let start = Instant::now();
    let out = std::process::Command::new("ssh")
        .args(tb.ssh_args())
        .arg("127.0.0.1")
        .arg(line)
        .output()
        .expect("ssh");
    let took = start.elapsed();
    assert!(
        out.status.success(),
        "ssh {line}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

/// One fresh `ssh` per line of `lines`, in turn: the total time.
pub fn fresh_ssh_each(tb: &Testbed, lines: impl IntoIterator<Item = String>) -> Duration {
    lines.into_iter().map(|line| fresh_ssh(tb, &line)).sum()
}

/// The RPCs the test bed's job user has sent so far: to slurmctld (`sdiag`) and to
/// slurmdbd (`sacctmgr show stats`), from their "by user" statistics (the daemons' own
/// traffic and the administrator's queries are left out).
pub fn user_rpcs(tb: &Testbed) -> (u64, u64) {
    let user = tb.get("SLURM_USER").to_string();
    let count = |program: &[&str]| -> u64 {
        let out = tb
            .admin(program[0])
            .args(&program[1..])
            .output()
            .unwrap_or_else(|e| panic!("{program:?}: {e}"));
        assert!(
            out.status.success(),
            "{program:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        rpcs_by_user(&String::from_utf8_lossy(&out.stdout), &user)
    };
    (count(&["sdiag"]), count(&["sacctmgr", "show", "stats"]))
}

/// The count of `user`'s line in the "statistics by user" section of sdiag's (or
/// `sacctmgr show stats`') output: `\tslurmrun ( 1001) count:42 ave_time:...` (0 when
/// the user has sent none).
fn rpcs_by_user(text: &str, user: &str) -> u64 {
    let Some((_, by_user)) = text.split_once("statistics by user") else {
        return 0;
    };
    by_user
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.split_whitespace().next() == Some(user))
        .filter_map(|l| l.split("count:").nth(1))
        .filter_map(|c| c.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_users_rpcs_are_read_from_the_by_user_statistics() {
        let sdiag = "Remote Procedure Call statistics by message type\n\
             \tREQUEST_JOB_INFO ( 2003) count:9 ave_time:1 total_time:9\n\n\
             Remote Procedure Call statistics by user\n\
             \troot            (       0) count:40     ave_time:1 total_time:1\n\
             \tslurmrun610     (    1001) count:12     ave_time:1 total_time:1\n\
             \tslurmrun6100    (    1002) count:5      ave_time:1 total_time:1\n\n\
             Pending RPC statistics\n";
        assert_eq!(super::rpcs_by_user(sdiag, "slurmrun610"), 12);
        assert_eq!(super::rpcs_by_user(sdiag, "nobody"), 0);
        assert_eq!(super::rpcs_by_user("no statistics", "root"), 0);
    }
}
