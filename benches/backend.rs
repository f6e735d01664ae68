//! The backend against the test bed: one poll cycle for 1, 10, 100 and 1000 tracked jobs
//! through the library, against the reference's way (one `ssh host sacct -j ID` process
//! per job), and the time of a submit against a bare `sbatch --parsable` over an open
//! connection. Same run, same host; prints a table with the ratios.
//!
//! `cargo bench --bench backend` (needs the test bed: `make bench` brings it up). The
//! per-job baseline at 1000 jobs takes minutes; it runs only with
//! `SLURM_RUN_BENCH_FULL=1`, otherwise it is reported as not measured.

use std::time::{Duration, Instant};

use slurm_core::backend::{Backend, SubmitOptions};
use slurm_core::record::{BackendRef, JobId, JobRecord, RecordStore};
use slurm_core::slurm::SlurmJobId;
use slurm_core::storage::RemotePath;
use slurm_core::transport::{Command, Transport};
use slurm_core::JobSpec;
use slurm_run_testsupport::{backend, testbed};

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `count` held jobs (they stay PENDING, so every poll asks about all of them), made
/// on the login node in one command.
async fn held_jobs(h: &backend::Harness, count: usize) -> Vec<SlurmJobId> {
    let out = h
        .transport
        .run(
            &Command::bash_script(
                r#"for i in $(seq "$1"); do sbatch --parsable --hold --job-name=bench-held --output=/dev/null --wrap=true || exit 1; done"#,
                [count.to_string()],
            )
            .timeout(Duration::from_secs(1800)),
        )
        .await
        .expect("submit held jobs");
    assert!(out.success(), "{}", out.stderr_text());
    out.stdout_text()
        .lines()
        .map(|l| SlurmJobId::parse(l.split(';').next().unwrap()).expect("job id"))
        .collect()
}

/// Records that track `ids`, as a submit would have left them (PENDING, with the SLURM id).
fn track(h: &backend::Harness, ids: &[SlurmJobId]) -> Vec<JobId> {
    let spec = JobSpec::new("bench", "true");
    ids.iter()
        .map(|id| {
            let job = JobId::mint("bench");
            let record =
                JobRecord::new(job.clone(), &spec, RemotePath::parse("/tmp/bench").unwrap())
                    .unwrap();
            h.backend.store().open(&record).unwrap();
            h.backend
                .store()
                .mark(
                    &job,
                    slurm_core::record::Mark::new(
                        slurm_core::JobState::Pending,
                        slurm_core::record::TransitionSource::Agent,
                    )
                    .backend_ref(BackendRef::new(id.to_string())),
                )
                .unwrap();
            job
        })
        .collect()
}

/// The reference's way: one fresh `ssh ... sacct -j ID` process per job, in turn.
fn per_job_ssh(tb: &testbed::Testbed, ids: &[SlurmJobId]) -> Duration {
    let start = Instant::now();
    for id in ids {
        let out = std::process::Command::new("ssh")
            .args(tb.ssh_args())
            .arg("127.0.0.1")
            .arg(format!("sacct -j {id} -X -n -o State%30"))
            .output()
            .expect("ssh");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    start.elapsed()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return; // built by `cargo test --all-targets`; runs only under `cargo bench`
    }
    let full = std::env::var_os("SLURM_RUN_BENCH_FULL").is_some();
    let h = backend::harness();
    let all = held_jobs(&h, 1000).await;

    println!("poll cycle of pending jobs (median of 5) through SlurmBackend::status_many vs one `ssh sacct -j ID` process per job");
    println!(
        "{:>6} {:>14} {:>16} {:>10}",
        "jobs", "library ms", "per-job ssh ms", "ratio"
    );
    let mut one_job = None;
    for n in [1usize, 10, 100, 1000] {
        let ids = track(&h, &all[..n]);
        h.backend.status_many(&ids).await.expect("warm-up poll");
        let mut samples = Vec::new();
        for _ in 0..5 {
            h.transport.reset();
            let start = Instant::now();
            let statuses = h.backend.status_many(&ids).await.expect("poll");
            samples.push(start.elapsed());
            assert_eq!(statuses.len(), n);
            assert_eq!(h.transport.count(), 1, "one round trip per cycle");
        }
        let library = median(samples);
        one_job.get_or_insert(library);
        let baseline = if n <= 100 || full {
            Some(per_job_ssh(&h.testbed, &all[..n]))
        } else {
            None
        };
        match baseline {
            Some(b) => println!(
                "{n:>6} {:>14.1} {:>16.1} {:>9.0}x",
                ms(library),
                ms(b),
                b.as_secs_f64() / library.as_secs_f64()
            ),
            None => println!(
                "{n:>6} {:>14.1} {:>16} {:>10}",
                ms(library),
                "not measured",
                "-"
            ),
        }
    }
    let one = one_job.unwrap();
    let ids = track(&h, &all);
    let mut samples = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        h.backend.status_many(&ids).await.unwrap();
        samples.push(start.elapsed());
    }
    let thousand = median(samples);
    println!(
        "cycle for 1000 jobs / cycle for 1 job: {:.2} (aim: below 1.5)",
        thousand.as_secs_f64() / one.as_secs_f64()
    );
    // Where the 1000-job cycle goes. Held jobs are live, so squeue settles them and the
    // library asks no sacct; a cycle where every job needs accounting (all just ended)
    // pays sacct too: both measured here, with the local record reads.
    let remote = |commands: Vec<Command>| {
        let h = &h;
        async move {
            let command = slurm_core::transport::round_trip::join(&commands);
            let mut samples = Vec::new();
            for _ in 0..5 {
                let start = Instant::now();
                h.transport.run(&command).await.unwrap();
                samples.push(start.elapsed());
            }
            median(samples)
        }
    };
    let squeue_only = remote(vec![slurm_core::testing::bare_squeue(&all, None).unwrap()]).await;
    let with_sacct = remote(vec![
        slurm_core::testing::bare_squeue(&all, None).unwrap(),
        slurm_core::testing::bare_sacct(&all, None).unwrap(),
    ])
    .await;
    let reads = {
        let start = Instant::now();
        for id in &ids {
            h.backend.record(id).unwrap();
        }
        start.elapsed()
    };
    println!(
        "  1000 ids: squeue alone {:.1} ms; squeue + sacct (every job needing accounting) {:.1} ms; reading 1000 records {:.1} ms",
        ms(squeue_only),
        ms(with_sacct),
        ms(reads)
    );

    // Submit: through the library (stage + render + lint + sbatch, one round trip) vs a
    // bare `sbatch --parsable` over the already open connection.
    let mut library = Vec::new();
    let mut bare = Vec::new();
    let mut spec = backend::small_spec("benchsubmit", "true");
    spec.extra_sbatch = vec!["--begin=now+1hour".into()];
    let warm = h
        .backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap();
    let mut submitted = vec![SlurmJobId::parse(&warm.backend_ref.unwrap().native_id).unwrap()];
    let bare_command = Command::new("sbatch").args([
        "--parsable",
        "--begin=now+1hour",
        "--output=/dev/null",
        "--wrap=true",
    ]);
    for _ in 0..15 {
        let start = Instant::now();
        let record = h
            .backend
            .submit(&spec, SubmitOptions::default())
            .await
            .unwrap();
        library.push(start.elapsed());
        submitted.push(SlurmJobId::parse(&record.backend_ref.unwrap().native_id).unwrap());
        let start = Instant::now();
        let out = h.transport.run(&bare_command).await.unwrap();
        bare.push(start.elapsed());
        submitted.push(SlurmJobId::parse(out.stdout_text().trim()).unwrap());
    }
    let (library, bare) = (median(library), median(bare));
    println!(
        "submit: library {:.1} ms, bare sbatch {:.1} ms, ratio {:.2} (aim: within 1.3)",
        ms(library),
        ms(bare),
        library.as_secs_f64() / bare.as_secs_f64()
    );

    let cancel: Vec<String> = all
        .iter()
        .chain(&submitted)
        .map(|id| id.to_string())
        .collect();
    for chunk in cancel.chunks(500) {
        let _ = h
            .transport
            .run(&Command::new("scancel").args(chunk.iter().cloned()))
            .await;
    }
}
