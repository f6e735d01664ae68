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
        let start = Instant::now();
        let out = h.transport.run(command).await.expect("bare command");
        let took = start.elapsed();
        assert!(out.success(), "{}: {}", command.label(), out.stderr_text());
        if i > 0 {
            times.push(took);
        }
    }
    median(times)
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
