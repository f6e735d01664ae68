//! Quickstart: preflight, submit a two-node job, watch it, print its log and its record.
//!
//! Everything comes from the environment, so the same program runs against the
//! local test bed (`make demo` exports its variables) and against a real cluster:
//!
//! ```text
//! export SLURM_HOSTNAME=login.example.org SLURM_USER=me SSH_KEY_PATH=~/.ssh/id_ed25519
//! export SLURM_PARTITION=gpu SLURM_BASE_RESULTS_DIR=/lustre/me/results
//! cargo run --example quickstart
//! ```
//!
//! Arguments (both optional): `--probe auto|always|never` runs the job with or
//! without the NCCL probe first (default: `SLURM_NCCL_PROBE`, else `auto`), and
//! `--image IMAGE` runs it in a container image (the probe runs that image's
//! torchrun):
//!
//! ```text
//! cargo run --example quickstart -- --image nvcr.io/nvidia/pytorch:24.01-py3 --probe always
//! ```
//!
//! Exits 0 when the job COMPLETEd, 1 when it ended otherwise, 2 on bad
//! configuration, bad arguments or a failed preflight, 3 when the cluster could not
//! be reached.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use futures::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use slurm_run::prelude::*;

/// Runs once on each node (one task per node): who am I, and where is rank 0 (after a
/// short pause, so that the watch shows the job RUNNING).
const COMMAND: &str = r#"sleep 3; echo "rank ${NODE_RANK} of ${WORLD_SIZE} on ${SLURMD_NODENAME:-$(hostname)} (host $(hostname)), master ${MASTER_ADDR}""#;

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(code) => code,
        Err(error) => {
            eprintln!("quickstart: {error}");
            let code = match error.kind() {
                ErrorKind::Connect
                | ErrorKind::Auth
                | ErrorKind::HostKey
                | ErrorKind::Transport
                | ErrorKind::Remote
                | ErrorKind::Timeout => 3,
                _ => 2,
            };
            ExitCode::from(code)
        }
    }
}

/// The quickstart's arguments: `--probe auto|always|never` and `--image IMAGE`.
fn arguments() -> Result<(Option<NcclProbe>, Option<String>)> {
    let (mut probe, mut image) = (None, None);
    let mut args = std::env::args().skip(1);
    let usage = "the quickstart takes --probe auto|always|never and --image IMAGE";
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| Error::invalid(arg.clone(), format!("needs a value; {usage}")))
        };
        match arg.as_str() {
            "--probe" => probe = Some(value()?.parse::<NcclProbe>()?),
            "--image" => image = Some(value()?),
            _ => {
                return Err(Error::invalid(
                    "arguments",
                    format!("`{arg}` is unknown; {usage}"),
                ))
            }
        }
    }
    Ok((probe, image))
}

async fn run() -> Result<ExitCode> {
    let (probe, image) = arguments()?;
    // 1. Wire the backend from the environment.
    let config = SlurmConfig::from_env()?;
    // Records where SLURM_RUN_RECORDS says (default: the state folder's SQLite database).
    let store = RecordsLocation::from_env(&config.state_dir)?.open()?;
    let ssh = Ssh2TransportBuilder::from_env()?.build()?;
    let backend = SlurmBackend::new(ssh, HandlebarsRenderer::new(), store, config);

    // 2. A two-node job: one GPU and one CPU per node, ten minutes.
    let mut spec = JobSpec::new("quickstart", COMMAND);
    spec.nodes = Some(2);
    spec.gpus_per_node = Some(1);
    spec.cpus_per_task = Some(1);
    spec.time = Some(WallTime::parse("00:10:00")?);
    spec.nccl_probe = probe;
    spec.image = image;

    // 3. Preflight: one line per check, with the remedy of each failure.
    println!("== preflight");
    let report = backend.preflight(Some(&spec)).await?;
    print!("{report}");
    if !report.passed() {
        eprintln!("quickstart: preflight failed; apply the remedies above and run again");
        let unreachable = report.failures().any(|check| check.check == "ssh");
        return Ok(ExitCode::from(if unreachable { 3 } else { 2 }));
    }

    // 4. Submit exactly once.
    let record = backend.submit(&spec, SubmitOptions::default()).await?;
    let slurm_id = record
        .backend_ref()
        .as_ref()
        .map(|r| r.native_id.clone())
        .unwrap_or_default();
    println!("\n== submitted {} as SLURM job {slurm_id}", record.id());
    println!("   results: {}", record.results_dir());
    if let Some(probe) = record.after().first() {
        println!(
            "   it waits on the cluster for NCCL probe {} (the submit did not)",
            probe.job
        );
    }

    // 5. Watch until it ends: a spinner on a terminal, one line per change otherwise.
    println!("\n== watch");
    let started = Instant::now();
    let spinner = spinner(&format!("{} {}", record.id(), record.state()));
    let options = WatchOptions {
        interval: Duration::from_secs(2),
        retry: Some(RetryPolicy::default()),
        ..WatchOptions::default()
    };
    let mut id = record.id().clone();
    let mut events = backend.watch(std::slice::from_ref(&id), options);
    while let Some(event) = events.next().await {
        let (line, now) = match event? {
            WatchEvent::Transition { from, status } => {
                let reason = status
                    .native()
                    .as_ref()
                    .and_then(|n| n.reason.clone())
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default();
                let now = format!("{} {}{reason}", status.id(), status.state());
                (format!("{from} -> {}{reason}", status.state()), now)
            }
            WatchEvent::Retried { previous, record } => {
                id = record.id().clone();
                let line = format!("{previous} failed on the cluster's side; retried as {id}");
                (line, format!("{id} {}", record.state()))
            }
            WatchEvent::Waiting { from, status } => {
                let now = status
                    .native()
                    .and_then(|n| n.category)
                    .map_or("?", |c| c.as_str());
                let line = format!("still {}: {from} -> {now}", status.state());
                (line, format!("{} {} ({now})", status.id(), status.state()))
            }
            WatchEvent::Dropped { id: lost, reason } => (
                format!("{lost} is no longer watched: {reason}"),
                format!("{id}"),
            ),
            WatchEvent::Unanswered {
                reason, retry_in, ..
            } => {
                let line = format!(
                    "the cluster did not answer ({reason}); asking again in {:.0}s",
                    retry_in.as_secs_f64()
                );
                (line, format!("{id} waiting for the cluster"))
            }
        };
        let line = format!("   [{:>5.1}s] {line}", started.elapsed().as_secs_f64());
        match &spinner {
            Some(bar) => {
                bar.println(&line);
                bar.set_message(now);
            }
            None => println!("{line}"),
        }
    }
    if let Some(bar) = spinner {
        bar.finish_and_clear();
    }
    let record = backend.record(&id).await?;
    println!(
        "   {} after {:.1}s",
        record.state(),
        started.elapsed().as_secs_f64()
    );

    // 6. The log's tail and the final record.
    println!("\n== log (last 20 lines of main.out)");
    match backend
        .logs(
            &id,
            LogOptions {
                tail: 20,
                ..LogOptions::default()
            },
        )
        .await
    {
        Ok(text) => print!("{text}"),
        Err(error) => println!("   (no log: {error})"),
    }
    if record.state() != JobState::Complete {
        if let Ok(text) = backend
            .logs(
                &id,
                LogOptions {
                    tail: 20,
                    stream: LogStream::Err,
                    task: None,
                    role: None,
                },
            )
            .await
        {
            println!("\n== log (last 20 lines of main.err)");
            print!("{text}");
        }
    }
    println!("\n== record");
    println!(
        "{}",
        serde_json::to_string_pretty(&record).expect("a record serialises")
    );
    Ok(if record.state() == JobState::Complete {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// A spinner with the elapsed time on stderr, only when stderr is a terminal.
fn spinner(message: &str) -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("   {spinner} {msg} [{elapsed_precise}]")
            .expect("a valid template"),
    );
    bar.set_message(message.to_string());
    bar.enable_steady_tick(Duration::from_millis(100));
    Some(bar)
}
