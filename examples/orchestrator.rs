//! Embedding slurm-run in an orchestrator: hold `Arc<dyn Backend>`, submit a handful of
//! jobs concurrently, watch them all in one stream with a retry policy, print the results.
//!
//! The orchestrator's code ([`Orchestrator`]) never names a concrete backend. Two are
//! swapped in under it:
//! - `slurm`: [`SlurmBackend`] over SSH, configured from the environment (the test bed's
//!   `eval "$(testbed/env)"`, or a real cluster's variables);
//! - `local`: [`local::LocalBackend`], a small but complete `Backend` written in this file
//!   that runs each job's command on this machine with `tokio::process`.
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
use slurm_run::MemoryRecordStore;

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
            let store = FileRecordStore::new(&config.state_dir)?;
            let ssh = Ssh2Transport::new(Ssh2TransportBuilder::from_env()?)?;
            let backend = SlurmBackend::new(ssh, HandlebarsRenderer::new(), store, config);
            (Arc::new(backend), marker_dir)
        }
        _ => {
            let dir = tempfile::tempdir().map_err(|e| Error::io("creating a work folder", e))?;
            let root = dir.path().to_path_buf();
            _workdir = dir;
            let backend = local::LocalBackend::new(&root, MemoryRecordStore::new())?;
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
        let optional = record.labels.get("role").map(String::as_str) == Some("optional");
        as_expected &=
            record.state == JobState::Complete || (optional && record.state == JobState::Canceled);
        println!(
            "FINAL {} {} attempt={} retry_of={}",
            record.id,
            record.state,
            record.attempt,
            record
                .retry_of
                .as_ref()
                .map(JobId::to_string)
                .unwrap_or_else(|| "-".into())
        );
        if record.state == JobState::Complete {
            let tail = LogOptions {
                tail: 1,
                ..LogOptions::default()
            };
            let last = orchestrator.backend.logs(&record.id, tail).await?;
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
            println!("submitted {} ({})", record.id, record.state);
        }

        let ids: Vec<JobId> = submitted.iter().map(|r| r.id.clone()).collect();
        let optional: HashSet<JobId> = submitted
            .iter()
            .filter(|r| r.labels.get("role").map(String::as_str) == Some("optional"))
            .map(|r| r.id.clone())
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
                        record.id, record.attempt
                    );
                    if let Some(first) = first_of.get(&previous).cloned() {
                        first_of.insert(record.id.clone(), first.clone());
                        latest.insert(first, record.id.clone());
                    }
                }
            }
            if !cancelled
                && self.all_done(ids.iter().filter(|id| !optional.contains(*id)), &latest)?
            {
                cancelled = true;
                for first in &optional {
                    let record = self.backend.cancel(&latest[first]).await?;
                    println!(
                        "{elapsed:>6.1}s  {}  cancelled: no longer needed ({})",
                        record.id, record.state
                    );
                }
            }
        }
        ids.iter()
            .map(|first| self.backend.record(&latest[first]))
            .collect()
    }

    /// Whether every job in `firsts` reached its end: terminal, and not an ERROR the
    /// retry policy is about to resubmit.
    fn all_done<'a>(
        &self,
        mut firsts: impl Iterator<Item = &'a JobId>,
        latest: &HashMap<JobId, JobId>,
    ) -> Result<bool> {
        firsts.try_fold(true, |done, first| {
            let record = self.backend.record(&latest[first])?;
            let retried = match (&self.watch.retry, record.err_class) {
                (Some(policy), Some(class)) if record.state == JobState::Error => {
                    policy.should_retry(class, record.attempt)
                }
                _ => false,
            };
            Ok(done && record.state.is_terminal() && !retried)
        })
    }
}

/// A second [`Backend`]: runs each job's command on this machine.
mod local {
    use std::collections::HashMap;
    use std::fmt;
    use std::fs;
    use std::io::{Read, Seek, SeekFrom};
    use std::path::{Path, PathBuf};
    use std::process::Stdio;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use async_trait::async_trait;
    use futures::stream::{self, BoxStream, StreamExt};
    use slurm_run::core::classify::classify_failure;
    use slurm_run::core::record::{Mark, TransitionSource};
    use slurm_run::core::redact::SecretRegistry;
    use slurm_run::core::slurm::SlurmState;
    use slurm_run::core::spec::SpecDefaults;
    use slurm_run::core::storage::RemotePath;
    use slurm_run::{
        Backend, Error, ErrorClass, JobId, JobRecord, JobSpec, JobState, JobStatus, LogOptions,
        LogStream, NativeStatus, PreflightCheck, PreflightReport, RecordFilter, RecordStore,
        Result, SubmitOptions, WatchEvent, WatchOptions,
    };
    use tokio::process::{Child, Command};
    use tokio::sync::oneshot;

    /// A cancel request, answered once the job's process is gone and its record marked.
    type CancelRequest = oneshot::Sender<()>;

    /// Runs each job's command with `bash -c` in its own folder under a root, logs in
    /// `<root>/<id>/logs/<id>-local/main.out|err`, the records in any [`RecordStore`].
    /// No containers, no GPUs, one "node"; wall time enforced; secrets come from the
    /// environment (or the submit options) and are redacted from logs.
    #[derive(Clone)]
    pub struct LocalBackend {
        inner: Arc<Inner>,
    }

    struct Inner {
        root: PathBuf,
        store: Box<dyn RecordStore>,
        cancels: Mutex<HashMap<JobId, oneshot::Sender<CancelRequest>>>,
        exits: Mutex<HashMap<JobId, i32>>,
        secrets: Mutex<SecretRegistry>,
    }

    impl fmt::Debug for LocalBackend {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("LocalBackend")
                .field("root", &self.inner.root)
                .field("store", &self.inner.store)
                .finish_non_exhaustive()
        }
    }

    enum Outcome {
        Exited(Option<i32>),
        Canceled(Option<CancelRequest>),
        TimedOut,
        Lost(String),
    }

    impl LocalBackend {
        /// A backend whose jobs live under `root` (created if missing).
        pub fn new(root: &Path, store: impl RecordStore + 'static) -> Result<Self> {
            fs::create_dir_all(root)
                .map_err(|e| Error::io(format!("creating {}", root.display()), e))?;
            Ok(LocalBackend {
                inner: Arc::new(Inner {
                    root: root.to_path_buf(),
                    store: Box::new(store),
                    cancels: Mutex::new(HashMap::new()),
                    exits: Mutex::new(HashMap::new()),
                    secrets: Mutex::new(SecretRegistry::new()),
                }),
            })
        }

        fn log_path(&self, record: &JobRecord, stream: LogStream) -> PathBuf {
            Path::new(record.results_dir.as_str())
                .join("logs")
                .join(format!("{}-local", record.id))
                .join(stream.file_name())
        }

        fn redact(&self, text: &str) -> String {
            self.inner
                .secrets
                .lock()
                .expect("secrets lock")
                .redact(text)
        }

        /// Wait for the job's process, a cancel or the wall time; then mark the record.
        async fn supervise(
            self,
            id: JobId,
            mut child: Child,
            mut cancel: oneshot::Receiver<CancelRequest>,
            limit: Duration,
        ) {
            let outcome = tokio::select! {
                status = child.wait() => match status {
                    Ok(status) => Outcome::Exited(status.code()),
                    Err(e) => Outcome::Lost(e.to_string()),
                },
                request = &mut cancel => {
                    let _ = child.kill().await;
                    Outcome::Canceled(request.ok())
                }
                _ = tokio::time::sleep(limit) => {
                    let _ = child.kill().await;
                    Outcome::TimedOut
                }
            };
            let mark = match &outcome {
                Outcome::Exited(Some(0)) => {
                    Mark::new(JobState::Complete, TransitionSource::Poll).message("exit 0")
                }
                Outcome::Exited(code) => {
                    if let Some(code) = code {
                        self.inner
                            .exits
                            .lock()
                            .expect("exits lock")
                            .insert(id.clone(), *code);
                    }
                    let class = match self.inner.store.get(&id) {
                        Ok(record) => {
                            let mut tail = String::new();
                            for stream in [LogStream::Out, LogStream::Err] {
                                tail.push_str(&last_lines(&self.log_path(&record, stream), 500));
                            }
                            let failed = SlurmState::parse("FAILED").expect("a SLURM state");
                            classify_failure(&failed, *code, &tail)
                        }
                        Err(_) => ErrorClass::Program,
                    };
                    Mark::new(JobState::Error, TransitionSource::Poll)
                        .message(match code {
                            Some(code) => format!("exit {code}"),
                            None => "killed by a signal".to_string(),
                        })
                        .err_class(class)
                }
                Outcome::Canceled(_) => {
                    Mark::new(JobState::Canceled, TransitionSource::User).message("cancelled")
                }
                Outcome::TimedOut => Mark::new(JobState::Error, TransitionSource::Poll)
                    .message("the wall time was reached")
                    .err_class(ErrorClass::Program),
                Outcome::Lost(why) => Mark::new(JobState::Error, TransitionSource::Poll)
                    .message(format!("lost the process: {why}"))
                    .err_class(ErrorClass::Infra),
            };
            if let Err(error) = self.inner.store.mark(&id, mark) {
                eprintln!("local backend: cannot record the end of {id}: {error}");
            }
            self.inner.cancels.lock().expect("cancels lock").remove(&id);
            if let Outcome::Canceled(Some(done)) = outcome {
                let _ = done.send(());
            }
            // `cancel` drops here: a cancel that raced with the exit sees the record marked.
        }
    }

    /// The last `n` lines of a file, or nothing when it does not exist.
    fn last_lines(path: &Path, n: usize) -> String {
        let text = fs::read(path).unwrap_or_default();
        let text = String::from_utf8_lossy(&text);
        let lines: Vec<&str> = text.lines().collect();
        let mut tail = lines[lines.len().saturating_sub(n)..].join("\n");
        if !tail.is_empty() {
            tail.push('\n');
        }
        tail
    }

    fn native(record: &JobRecord, exit_code: Option<i32>) -> NativeStatus {
        NativeStatus {
            state: record.state.to_string(),
            reason: None,
            exit_code,
            nodes: Some("localhost".into()),
            source: "local",
        }
    }

    #[async_trait]
    impl Backend for LocalBackend {
        async fn preflight(&self, spec: Option<&JobSpec>) -> Result<PreflightReport> {
            let mut checks = Vec::new();
            let mut push = |check: &str, ok: bool, detail: String, remedy: &str| {
                checks.push(PreflightCheck {
                    check: check.into(),
                    ok,
                    detail,
                    remedy: if ok { String::new() } else { remedy.into() },
                })
            };
            let bash = Command::new("bash").arg("-c").arg("true").status().await;
            push(
                "bash",
                matches!(&bash, Ok(s) if s.success()),
                match &bash {
                    Ok(_) => "bash runs".into(),
                    Err(e) => e.to_string(),
                },
                "install bash",
            );
            let probe = tempfile::tempfile_in(&self.inner.root);
            push(
                "results root",
                probe.is_ok(),
                match &probe {
                    Ok(_) => format!("{} is writable", self.inner.root.display()),
                    Err(e) => e.to_string(),
                },
                "give the local backend a folder it can write",
            );
            if let Some(spec) = spec {
                push(
                    "image",
                    spec.image.is_none(),
                    match &spec.image {
                        None => "not needed".into(),
                        Some(image) => format!("{image}: the local backend runs no containers"),
                    },
                    "remove `image`, or run the job on the SLURM backend",
                );
                let missing: Vec<&str> = spec
                    .secrets
                    .iter()
                    .filter(|name| std::env::var_os(name).is_none())
                    .map(String::as_str)
                    .collect();
                push(
                    "secrets",
                    missing.is_empty(),
                    if missing.is_empty() {
                        format!("{} present", spec.secrets.len())
                    } else {
                        format!("not in the environment: {}", missing.join(", "))
                    },
                    "export each secret the spec names before submitting",
                );
            }
            Ok(PreflightReport { checks })
        }

        async fn submit(&self, spec: &JobSpec, options: SubmitOptions) -> Result<JobRecord> {
            let resources = spec.resolve(&SpecDefaults::default())?;
            if spec.image.is_some() {
                return Err(Error::invalid(
                    "image",
                    "the local backend runs commands on this machine, without containers; remove `image` or use the SLURM backend",
                ));
            }
            let mut secrets = Vec::new();
            for name in &spec.secrets {
                let value = match &options.secret_values {
                    Some(values) => values.get(name).cloned(),
                    None => std::env::var(name).ok(),
                }
                .ok_or_else(|| {
                    Error::invalid(
                        "secrets",
                        format!("{name} has no value; export {name} before submitting"),
                    )
                })?;
                secrets.push((name.clone(), value));
            }
            let previous = match &options.retry_of {
                Some(id) => Some(self.inner.store.get(id)?),
                None => None,
            };

            let id = JobId::mint_for(spec);
            let dir = self.inner.root.join(id.as_str());
            let results_dir = RemotePath::parse_for("results_dir", &dir.to_string_lossy())?;
            let mut record = JobRecord::new(id.clone(), spec, results_dir)?;
            if let Some(previous) = &previous {
                record = record.retry_of(previous);
            }
            let log_dir = dir.join("logs").join(format!("{id}-local"));
            for folder in [dir.join("specs"), log_dir.clone()] {
                fs::create_dir_all(&folder)
                    .map_err(|e| Error::io(format!("creating {}", folder.display()), e))?;
            }
            let spec_json = serde_json::to_vec_pretty(spec).expect("a spec serialises");
            fs::write(dir.join("specs/spec.json"), spec_json)
                .map_err(|e| Error::io("writing specs/spec.json", e))?;
            let open = |name: &str| {
                fs::File::create(log_dir.join(name))
                    .map_err(|e| Error::io(format!("creating {name}"), e))
            };
            let (out, err) = (open("main.out")?, open("main.err")?);
            self.inner.store.open(&record)?;
            {
                let mut registry = self.inner.secrets.lock().expect("secrets lock");
                for (name, value) in &secrets {
                    registry.register(name.clone(), value.clone());
                }
            }

            let mut command = Command::new("bash");
            command
                .arg("-c")
                .arg(&spec.command)
                .current_dir(&dir)
                .envs(&spec.env)
                .envs(&spec.extra_env)
                .envs(secrets)
                .env("NODE_RANK", "0")
                .env("WORLD_SIZE", "1")
                .env("MASTER_ADDR", "127.0.0.1")
                .env("RESULTS_DIR", &dir)
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .kill_on_drop(true);
            let child = match command.spawn() {
                Ok(child) => child,
                Err(e) => {
                    let _ = self.inner.store.mark(
                        &id,
                        Mark::new(JobState::Error, TransitionSource::Agent)
                            .message(format!("bash did not start: {e}"))
                            .err_class(ErrorClass::Infra),
                    );
                    return Err(Error::io("starting bash", e));
                }
            };
            let record = self.inner.store.mark(
                &id,
                Mark::new(JobState::Running, TransitionSource::Agent)
                    .message(format!("started as pid {}", child.id().unwrap_or_default())),
            )?;
            let (cancel_tx, cancel_rx) = oneshot::channel();
            self.inner
                .cancels
                .lock()
                .expect("cancels lock")
                .insert(id.clone(), cancel_tx);
            let limit = Duration::from_secs(resources.wall.as_secs());
            tokio::spawn(self.clone().supervise(id, child, cancel_rx, limit));
            Ok(record)
        }

        async fn resubmit(&self, id: &JobId) -> Result<JobRecord> {
            let previous = self.inner.store.get(id)?;
            if !previous.state.is_terminal() {
                return Err(Error::invalid(
                    "id",
                    format!(
                        "{id} is {}; only a finished job can be submitted again",
                        previous.state
                    ),
                ));
            }
            let path = Path::new(previous.results_dir.as_str()).join("specs/spec.json");
            let text = fs::read_to_string(&path)
                .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
            let spec = JobSpec::from_json_str(&text)?;
            self.submit(
                &spec,
                SubmitOptions {
                    retry_of: Some(id.clone()),
                    ..SubmitOptions::default()
                },
            )
            .await
        }

        async fn status(&self, id: &JobId) -> Result<JobStatus> {
            let record = self.inner.store.get(id)?;
            let exit = self
                .inner
                .exits
                .lock()
                .expect("exits lock")
                .get(id)
                .copied();
            let exit = exit.or((record.state == JobState::Complete).then_some(0));
            Ok(JobStatus {
                native: Some(native(&record, exit)),
                record,
            })
        }

        async fn status_many(&self, ids: &[JobId]) -> Result<Vec<JobStatus>> {
            let mut all = Vec::with_capacity(ids.len());
            for id in ids {
                all.push(self.status(id).await?);
            }
            Ok(all)
        }

        async fn logs(&self, id: &JobId, options: LogOptions) -> Result<String> {
            let record = self.inner.store.get(id)?;
            let path = self.log_path(&record, options.stream);
            if !path.exists() {
                return Err(Error::NotFound(format!("{}: no such log", path.display())));
            }
            Ok(self.redact(&last_lines(&path, options.tail)))
        }

        fn follow_logs(
            &self,
            id: &JobId,
            stream: LogStream,
            interval: Duration,
        ) -> BoxStream<'static, Result<String>> {
            let state = (self.clone(), id.clone(), 0u64, false);
            stream::unfold(state, move |(backend, id, offset, done)| async move {
                if done {
                    return None;
                }
                let mut offset = offset;
                loop {
                    // Terminal is read before the file, so the last read sees everything.
                    let record = match backend.inner.store.get(&id) {
                        Ok(record) => record,
                        Err(error) => return Some((Err(error), (backend, id, offset, true))),
                    };
                    let terminal = record.state.is_terminal();
                    let mut chunk = Vec::new();
                    if let Ok(mut file) = fs::File::open(backend.log_path(&record, stream)) {
                        if file.seek(SeekFrom::Start(offset)).is_ok() {
                            let _ = file.read_to_end(&mut chunk);
                        }
                    }
                    offset += chunk.len() as u64;
                    if !chunk.is_empty() {
                        let text = backend.redact(&String::from_utf8_lossy(&chunk));
                        return Some((Ok(text), (backend, id, offset, terminal)));
                    }
                    if terminal {
                        return None;
                    }
                    tokio::time::sleep(interval).await;
                }
            })
            .boxed()
        }

        async fn cancel(&self, id: &JobId) -> Result<JobRecord> {
            let record = self.inner.store.get(id)?;
            if record.state.is_terminal() {
                return Ok(record);
            }
            let sender = self.inner.cancels.lock().expect("cancels lock").remove(id);
            if let Some(sender) = sender {
                let (done_tx, done_rx) = oneshot::channel();
                if sender.send(done_tx).is_ok() {
                    // Answered once the process is gone and the record marked (or dropped
                    // when the job ended by itself first).
                    let _ = done_rx.await;
                }
            }
            self.inner.store.get(id)
        }

        fn watch(
            &self,
            ids: &[JobId],
            options: WatchOptions,
        ) -> BoxStream<'static, Result<WatchEvent>> {
            // The library's generic watch: one status_many per cycle, retries per policy.
            slurm_run::core::backend::watch_by_polling(self.clone(), ids, options)
        }

        fn record(&self, id: &JobId) -> Result<JobRecord> {
            self.inner.store.get(id)
        }

        fn records(&self, filter: &RecordFilter) -> Result<Vec<JobRecord>> {
            self.inner.store.list(filter)
        }
    }
}
