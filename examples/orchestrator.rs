//! Embedding slurm-run in an orchestrator: hold `Arc<dyn Backend>`, submit a handful of
//! jobs concurrently, watch them all in one stream with a retry policy, print the results.
//!
//! The orchestrator's code ([`Orchestrator`]) never names a concrete backend. Two are
//! swapped in under it:
//! - `slurm`: [`SlurmBackend`] over SSH, configured from the environment (the test bed's
//!   `eval "$(testbed/env)"`, or a real cluster's variables);
//! - `local`: [`LocalBackend`], the library's in-process `Backend` that runs each job's
//!   command on this machine (what orchestrator authors test against without a cluster).
//!
//! `--backend auto` (the default) takes `slurm` when `SLURM_HOSTNAME` is set and `local`
//! otherwise. One of the jobs fails on its first attempt with an NCCL error (an
//! infrastructure failure), so the watch resubmits it once and it completes; an optional
//! straggler is cancelled once every other job is done.
//!
//! ```text
//! cargo run --example orchestrator -- --backend local
//! eval "$(testbed/env)" && cargo run --example orchestrator -- --backend slurm
//! ```
//!
//! Exits 0 when every job completed (the straggler: cancelled), 1 when one did not, 2 on bad configuration, 3 when
//! the cluster could not be reached.

use std::collections::{HashMap, HashSet};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use futures::future::try_join_all;
use futures::StreamExt;
use slurm_run::prelude::*;
use slurm_run::{LocalBackend, MemoryRecordStore};

#[derive(Debug, Parser)]
#[command(
    name = "orchestrator",
    about = "Submit and watch a few jobs through any Backend"
)]
struct Opts {
    /// Which backend runs the jobs.
    #[arg(long, value_enum, default_value = "auto", env = "ORCHESTRATOR_BACKEND")]
    backend: Which,
    /// How many plain jobs to run beside the flaky one.
    #[arg(long, default_value_t = 3)]
    jobs: u32,
    /// Seconds between polls of the watch.
    #[arg(long, default_value_t = 1.0)]
    interval: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Which {
    /// `slurm` when SLURM_HOSTNAME is set, else `local`.
    Auto,
    /// SLURM over SSH, from the environment.
    Slurm,
    /// This machine, with tokio::process.
    Local,
}

#[tokio::main]
async fn main() -> ExitCode {
    let opts = Opts::parse();
    match run(opts).await {
        Ok(code) => code,
        Err(error) => {
            eprintln!("orchestrator: {error}");
            ExitCode::from(match error.kind() {
                ErrorKind::Connect
                | ErrorKind::Auth
                | ErrorKind::HostKey
                | ErrorKind::Transport
                | ErrorKind::Remote
                | ErrorKind::Timeout => 3,
                _ => 2,
            })
        }
    }
}

async fn run(opts: Opts) -> Result<ExitCode> {
    if !(opts.interval.is_finite() && opts.interval > 0.0) {
        return Err(Error::invalid(
            "interval",
            "give a positive number of seconds, e.g. --interval 1",
        ));
    }
    let which = match opts.backend {
        Which::Auto if std::env::var_os("SLURM_HOSTNAME").is_some() => Which::Slurm,
        Which::Auto => Which::Local,
        other => other,
    };
    // The only place that knows which backend runs the jobs.
    let _workdir;
    let (backend, marker_dir): (Arc<dyn Backend>, Option<String>) = match which {
        Which::Slurm => {
            let config = SlurmConfig::from_env()?;
            let marker_dir = config.results_root.clone();
            // Records where SLURM_RUN_RECORDS says (default: the state folder's SQLite database).
            let store = RecordsLocation::from_env(&config.state_dir)?.open()?;
            let ssh = Ssh2TransportBuilder::from_env()?.build()?;
            let backend = SlurmBackend::new(ssh, HandlebarsRenderer::new(), store, config);
            (Arc::new(backend), marker_dir)
        }
        _ => {
            let dir = tempfile::tempdir().map_err(|e| Error::io("creating a work folder", e))?;
            let root = dir.path().to_path_buf();
            _workdir = dir;
            let backend = LocalBackend::new(&root, MemoryRecordStore::new())?;
            (Arc::new(backend), Some(root.display().to_string()))
        }
    };
    println!(
        "backend: {}",
        if which == Which::Slurm {
            "slurm"
        } else {
            "local"
        }
    );

    let orchestrator = Orchestrator {
        backend,
        watch: WatchOptions {
            interval: Duration::from_secs_f64(opts.interval),
            retry: Some(RetryPolicy::default()),
            ..WatchOptions::default()
        },
    };
    let finals = orchestrator
        .run(&workload(opts.jobs, marker_dir.as_deref()))
        .await?;
    println!("\nresults:");
    let mut as_expected = true;
    for record in &finals {
        let optional = record.labels().get("role").map(String::as_str) == Some("optional");
        as_expected &= record.state() == JobState::Complete
            || (optional && record.state() == JobState::Canceled);
        println!(
            "FINAL {} {} attempt={} retry_of={}",
            record.id(),
            record.state(),
            record.attempt(),
            record
                .retry_of()
                .map(JobId::to_string)
                .unwrap_or_else(|| "-".into())
        );
        if record.state() == JobState::Complete {
            let tail = LogOptions {
                tail: 1,
                ..LogOptions::default()
            };
            let last = orchestrator.backend.logs(record.id(), tail).await?;
            println!("      log: {}", last.trim_end());
        }
    }
    Ok(if as_expected {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The jobs: `plain` short jobs that print a few lines; one that fails with an NCCL
/// error on its first attempt (an infrastructure failure, so it is retried) and
/// succeeds on the next (the attempts share a marker file in `marker_dir`, or `$HOME`);
/// and an optional straggler the orchestrator cancels once the others are done.
fn workload(plain: u32, marker_dir: Option<&str>) -> Vec<JobSpec> {
    let small = |mut spec: JobSpec| {
        spec.nodes = Some(1);
        spec.gpus_per_node = Some(1);
        spec.cpus_per_task = Some(1);
        spec.time = Some(WallTime::parse("00:05:00").expect("a wall time"));
        spec
    };
    let mut specs: Vec<JobSpec> = (1..=plain)
        .map(|i| {
            small(JobSpec::new(
                format!("shard-{i}"),
                format!(r#"for step in 1 2 3; do echo "shard {i} step $step"; sleep 0.5; done"#),
            ))
        })
        .collect();
    let mut flaky = small(JobSpec::new(
        "flaky",
        r#"marker="${FLAKY_MARKER_DIR:-$HOME}/.orchestrator-flaky-${FLAKY_TAG}"
if [ ! -e "$marker" ]; then
  touch "$marker"
  echo "NCCL error: unhandled system error (simulated on the first attempt)" >&2
  exit 1
fi
rm -f "$marker"
echo "flaky: succeeded on its retry""#,
    ));
    flaky
        .env
        .insert("FLAKY_TAG".into(), format!("{:08x}", rand::random::<u32>()));
    if let Some(dir) = marker_dir {
        flaky.env.insert("FLAKY_MARKER_DIR".into(), dir.to_string());
    }
    specs.push(flaky);
    let mut straggler = small(JobSpec::new("straggler", "sleep 240"));
    straggler.labels.insert("role".into(), "optional".into());
    specs.push(straggler);
    specs
}

/// An orchestrator as a downstream project would write it: it holds the trait object
/// and nothing else of slurm-run's internals.
struct Orchestrator {
    backend: Arc<dyn Backend>,
    watch: WatchOptions,
}

impl Orchestrator {
    /// Preflight, submit every spec concurrently, watch them all in one stream (retries
    /// per the policy), cancel the optional jobs (label `role: optional`) once every
    /// other job is done, and return the last record of each job.
    async fn run(&self, specs: &[JobSpec]) -> Result<Vec<JobRecord>> {
        let report = self.backend.preflight(specs.first()).await?;
        print!("{report}");
        report.into_result()?;

        let started = Instant::now();
        let submitted = try_join_all(
            specs
                .iter()
                .map(|spec| self.backend.submit(spec, SubmitOptions::default())),
        )
        .await?;
        for record in &submitted {
            println!("submitted {} ({})", record.id(), record.state());
        }

        let ids: Vec<JobId> = submitted.iter().map(|r| r.id().clone()).collect();
        let optional: HashSet<JobId> = submitted
            .iter()
            .filter(|r| r.labels().get("role").map(String::as_str) == Some("optional"))
            .map(|r| r.id().clone())
            .collect();
        // Each job is followed through its retries: first id -> latest id.
        let mut latest: HashMap<JobId, JobId> =
            ids.iter().map(|id| (id.clone(), id.clone())).collect();
        let mut first_of: HashMap<JobId, JobId> = latest.clone();
        let mut cancelled = optional.is_empty();
        let mut events = self.backend.watch(&ids, self.watch.clone());
        while let Some(event) = events.next().await {
            let elapsed = started.elapsed().as_secs_f64();
            match event? {
                WatchEvent::Transition { from, status } => {
                    let class = status
                        .err_class()
                        .map(|c| format!(" {c}"))
                        .unwrap_or_default();
                    println!(
                        "{elapsed:>6.1}s  {}  {from} -> {}{class}",
                        status.id(),
                        status.state()
                    );
                }
                WatchEvent::Retried { previous, record } => {
                    println!(
                        "{elapsed:>6.1}s  {previous}  retried as {} (attempt {})",
                        record.id(),
                        record.attempt()
                    );
                    if let Some(first) = first_of.get(&previous).cloned() {
                        first_of.insert(record.id().clone(), first.clone());
                        latest.insert(first, record.id().clone());
                    }
                }
                WatchEvent::Waiting { from, status } => {
                    let now = status.native().and_then(|n| n.category);
                    println!(
                        "{elapsed:>6.1}s  {}  still {}: {from} -> {}",
                        status.id(),
                        status.state(),
                        now.map_or("?", |c| c.as_str())
                    );
                }
                WatchEvent::Dropped { id, reason } => {
                    println!("{elapsed:>6.1}s  {id}  no longer watched: {reason}");
                }
                WatchEvent::Unanswered {
                    reason, retry_in, ..
                } => {
                    println!(
                        "{elapsed:>6.1}s  the cluster did not answer ({reason}); asking again in {:.0}s",
                        retry_in.as_secs_f64()
                    );
                }
            }
            if !cancelled
                && self
                    .all_done(ids.iter().filter(|id| !optional.contains(*id)), &latest)
                    .await?
            {
                cancelled = true;
                for first in &optional {
                    let record = self.backend.cancel(&latest[first]).await?;
                    println!(
                        "{elapsed:>6.1}s  {}  cancelled: no longer needed ({})",
                        record.id(),
                        record.state()
                    );
                }
            }
        }
        let mut records = Vec::with_capacity(ids.len());
        for first in ids {
            records.push(self.backend.record(&latest[&first]).await?);
        }
        Ok(records)
    }

    /// Whether every job in `firsts` reached its end: terminal, and not an ERROR the
    /// retry policy is about to resubmit.
    async fn all_done<'a>(
        &self,
        firsts: impl Iterator<Item = &'a JobId>,
        latest: &HashMap<JobId, JobId>,
    ) -> Result<bool> {
        for first in firsts {
            let record = self.backend.record(&latest[first]).await?;
            let retried = match (&self.watch.retry, record.err_class()) {
                (Some(policy), Some(class)) if record.state() == JobState::Error => {
                    policy.should_retry(class, record.attempt())
                }
                _ => false,
            };
            if !record.state().is_terminal() || retried {
                return Ok(false);
            }
        }
        Ok(true)
    }
}
