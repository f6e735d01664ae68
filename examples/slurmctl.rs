//! slurmctl: a command-line facade over the slurm-run `Backend`, for people and for scripts.
//!
//! ```text
//! slurmctl preflight [SPEC]          check that jobs (like SPEC) can run
//! slurmctl submit SPEC [--after ID[:ok|any|notok|start]]... [--probe auto|always|never]
//!                                    submit exactly once (after other jobs; with or
//!                                    without the NCCL probe first)
//! slurmctl status ID...              current state (one round trip for all ids)
//! slurmctl watch ID...               follow jobs until each is terminal
//! slurmctl logs ID [--task N] [--tail N] [--err] [--follow]
//! slurmctl cancel ID... [--tasks 0-3,8]   cancel (a whole array, or some of its tasks)
//! slurmctl records [--state S]       the local job records (no remote call)
//! slurmctl render SPEC               the batch script a submit would write (secrets never shown)
//! slurmctl credentials install REGISTRY --user USER [--password-env VAR]
//!                                    enroot credentials for a private registry, once per
//!                                    cluster and user (the secret on stdin, or in VAR)
//! slurmctl credentials check REGISTRY   present (exit 0) or absent (exit 2)
//! slurmctl credentials remove REGISTRY
//! ```
//!
//! Configuration comes from the environment (`SLURM_HOSTNAME`, `SLURM_USER`,
//! `SSH_KEY_PATH`, `SSH_KNOWN_HOSTS`, `SLURM_PARTITION`, `SLURM_BASE_RESULTS_DIR`,
//! `SLURM_ACCOUNT`, `SLURM_CONVERT_PARTITION`, `SLURM_CONTAINER_MOUNTS`,
//! `SLURM_RUN_STATE_DIR`); the flags `--host`, `--user`, `--key`, `--known-hosts`,
//! `--partition`, `--results-root`, `--account` and `--state-dir` override it.
//!
//! `--json` prints JSON Lines on stdout: one object per job (per transition for
//! `watch`, per check for `preflight`). Without it the output is aligned text, with
//! colour only when stdout is a terminal (and `NO_COLOR` is unset). A spinner shows
//! long waits on stderr when stderr is a terminal, and nothing on a pipe.
//!
//! Exit status:
//! - `0` success.
//! - `1` an internal error (a bug: please report it).
//! - `2` bad input or configuration: the message names the field and the fix. Error
//!   kinds Config, Invalid, Lint, Render, NotFound (a record, a log not written yet),
//!   Io (the record folder, the spec file), Parse of a local record, and Preflight
//!   when a check other than `ssh` failed (a partition that does not exist or is not
//!   up, a wall time above its MaxTime, an unwritable results root: the fix is on the
//!   caller's side).
//! - `3` the remote side or the connection failed: Connect, Auth, HostKey, Transport,
//!   Remote, Timeout, Ambiguous (a submit a person must settle), Parse of the
//!   cluster's output, and a failed `ssh` preflight check.
//! - `4` `watch` saw a job end ERROR, CANCELED or NOT_SUBMITTED (after its retries).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use futures::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};
use slurm_run::core::backend::{NativeStatus, PreflightCheck};
use slurm_run::core::nccl::PROBE_LABEL;
use slurm_run::core::record::state_groups;
use slurm_run::core::slurm::default_state_dir;
use slurm_run::core::spec::{Dependency, TaskSet};
use slurm_run::prelude::*;
use slurm_run::ssh::{OpenSshTransport, OpenSshTransportBuilder};
use slurm_run::{CheckKind, Error};

/// The concrete backend slurmctl drives: any transport, the built-in templates, records in a folder.
type Slurm = SlurmBackend<Arc<dyn Transport>, HandlebarsRenderer, FileRecordStore>;

#[derive(Debug, Parser)]
#[command(
    name = "slurmctl",
    version,
    about = "Run GPU jobs on a SLURM cluster over SSH: preflight, submit, status, watch, logs, cancel.",
    after_help = "Exit status: 0 success; 2 bad input or configuration; 3 remote or connection failure; 4 watch saw ERROR, CANCELED or NOT_SUBMITTED."
)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Cmd,
}

/// Flags every command takes; each overrides the environment variable it names.
#[derive(Debug, Args)]
struct Global {
    /// Print JSON Lines (one object per job, per transition for watch, per check for preflight).
    #[arg(long, global = true)]
    json: bool,
    /// Login host(s): host, host:port, comma-separated [env: SLURM_HOSTNAME].
    #[arg(long, global = true, value_name = "HOST")]
    host: Option<String>,
    /// Remote user [env: SLURM_USER]. Before the command only: after `credentials
    /// install`, `--user` is the registry login.
    #[arg(long)]
    user: Option<String>,
    /// Private key file [env: SSH_KEY_PATH].
    #[arg(long, global = true, value_name = "PATH")]
    key: Option<PathBuf>,
    /// known_hosts file [env: SSH_KNOWN_HOSTS].
    #[arg(long = "known-hosts", global = true, value_name = "PATH")]
    known_hosts: Option<PathBuf>,
    /// GPU partition(s), comma-separated [env: SLURM_PARTITION].
    #[arg(long, global = true)]
    partition: Option<String>,
    /// Absolute results root on shared storage [env: SLURM_BASE_RESULTS_DIR].
    #[arg(long = "results-root", global = true, value_name = "DIR")]
    results_root: Option<String>,
    /// Account for #SBATCH --account [env: SLURM_ACCOUNT].
    #[arg(long, global = true)]
    account: Option<String>,
    /// Local folder of job records [env: SLURM_RUN_STATE_DIR] [default: ~/.slurm-run/jobs].
    #[arg(long = "state-dir", global = true, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// SSH client: ssh2 (libssh2) or openssh (the system ssh through a ControlMaster, for ProxyJump and 2FA).
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "ssh2",
        env = "SLURM_RUN_SSH"
    )]
    ssh: SshKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SshKind {
    Ssh2,
    Openssh,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Check that jobs (like SPEC, else the configured defaults) can run; one line per check.
    Preflight {
        /// A job spec (.yaml, .yml or .json).
        spec: Option<PathBuf>,
    },
    /// Submit a job spec exactly once; prints the record.
    Submit {
        /// A job spec (.yaml, .yml or .json).
        spec: PathBuf,
        /// Start after record ID: ID or ID:ok (it succeeded), ID:any (it ended),
        /// ID:notok (it failed), ID:start (it started). Repeat for several; the
        /// scheduler enforces the wait.
        #[arg(long, value_name = "ID[:COND]")]
        after: Vec<String>,
        /// The NCCL probe before a multi-GPU job: auto (when the cluster has no knobs
        /// cached for the job's shape and it has an image), always, or never (and no
        /// cached knobs). Overrides the spec's nccl_probe and SLURM_NCCL_PROBE.
        #[arg(long, value_name = "auto|always|never")]
        probe: Option<NcclProbe>,
    },
    /// The current state of jobs, one remote round trip for all of them.
    Status {
        /// Record ids.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Follow jobs until each is terminal; exit 4 when one ends ERROR, CANCELED or NOT_SUBMITTED.
    Watch {
        /// Record ids.
        #[arg(required = true)]
        ids: Vec<String>,
        /// Seconds between polls (default: the backend's, 10).
        #[arg(long, value_name = "SECS")]
        interval: Option<f64>,
        /// Resubmit infrastructure failures up to this many times.
        #[arg(long, value_name = "N")]
        retries: Option<u32>,
    },
    /// The last lines of a job's log (main.out, or main.err with --err).
    Logs {
        /// Record id.
        id: String,
        /// The task of an array whose log to read.
        #[arg(long, value_name = "N")]
        task: Option<u32>,
        /// How many lines from the end.
        #[arg(long, default_value_t = 200, value_name = "N")]
        tail: usize,
        /// Read main.err instead of main.out.
        #[arg(long)]
        err: bool,
        /// Stream new text until the job is terminal.
        #[arg(long)]
        follow: bool,
        /// Seconds between reads when following.
        #[arg(long, default_value_t = 2.0, value_name = "SECS")]
        interval: f64,
    },
    /// Cancel jobs (every task of an array); a job already finished is left as it is.
    Cancel {
        /// Record ids.
        #[arg(required = true)]
        ids: Vec<String>,
        /// Only these tasks of the array(s), e.g. 3 or 0-3,8.
        #[arg(long, value_name = "LIST")]
        tasks: Option<String>,
    },
    /// The local job records, oldest first (no remote call).
    Records {
        /// Only records in this state (repeat or comma-separate for several).
        #[arg(long, value_name = "STATE", value_delimiter = ',')]
        state: Vec<String>,
    },
    /// Print the batch script a submit of SPEC would write (secrets are never in it).
    Render {
        /// A job spec (.yaml, .yml or .json).
        spec: PathBuf,
    },
    /// enroot's credentials for a private registry on the cluster (once per cluster and user).
    Credentials {
        #[command(subcommand)]
        action: CredentialsCmd,
    },
}

#[derive(Debug, Subcommand)]
enum CredentialsCmd {
    /// Install (or replace) REGISTRY's credentials, keeping other registries' lines. The
    /// secret is read from stdin (one line), or from the environment variable
    /// --password-env names: never from the command line.
    Install {
        /// The registry as images name it: nvcr.io, or host:port.
        registry: String,
        /// The registry login (`$oauthtoken` for nvcr.io).
        #[arg(long = "user", id = "registry_user", value_name = "USER")]
        user: String,
        /// Read the secret from this environment variable instead of stdin.
        #[arg(long = "password-env", value_name = "VAR")]
        password_env: Option<String>,
    },
    /// Whether REGISTRY's credentials are installed (exit 2 when absent); never shows the secret.
    Check {
        /// The registry as images name it.
        registry: String,
    },
    /// Remove REGISTRY's credentials, keeping other registries' lines.
    Remove {
        /// The registry as images name it.
        registry: String,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let out = Out::new(cli.global.json);
    match run(&cli, &out).await {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            let code = exit_code(&error);
            out.error(&error, code);
            ExitCode::from(code)
        }
    }
}

/// The exit status for an error (see the module docs).
fn exit_code(error: &Error) -> u8 {
    match error.kind() {
        ErrorKind::Config
        | ErrorKind::Invalid
        | ErrorKind::Lint
        | ErrorKind::Render
        | ErrorKind::NotFound
        | ErrorKind::CorruptRecord
        | ErrorKind::Io => 2,
        ErrorKind::Preflight => match error {
            Error::Preflight { kind, .. } => check_exit_code(*kind),
            _ => 2,
        },
        ErrorKind::Parse
        | ErrorKind::Connect
        | ErrorKind::Auth
        | ErrorKind::HostKey
        | ErrorKind::Transport
        | ErrorKind::Remote
        | ErrorKind::Timeout
        | ErrorKind::Ambiguous => 3,
        _ => 1,
    }
}

/// The exit status for a failed preflight check: the connection is the cluster's (3),
/// everything else is input or configuration to fix (2).
fn check_exit_code(kind: CheckKind) -> u8 {
    match kind {
        CheckKind::Connection => 3,
        _ => 2,
    }
}

/// The field an error names, when it names one.
fn error_field(error: &Error) -> Option<&str> {
    match error {
        Error::Config { field, .. } | Error::Invalid { field, .. } => Some(field),
        Error::Preflight { check, .. } => Some(check),
        _ => None,
    }
}

async fn run(cli: &Cli, out: &Out) -> slurm_run::Result<u8> {
    let global = &cli.global;
    match &cli.command {
        Cmd::Records { state } => {
            let mut filter = RecordFilter::any();
            for s in state {
                filter = filter.state(s.parse::<JobState>()?);
            }
            let dir = match global.lookup("SLURM_RUN_STATE_DIR") {
                Some(dir) => PathBuf::from(dir),
                None => default_state_dir()?,
            };
            let records = FileRecordStore::new(dir)?.list(&filter)?;
            out.jobs(records.iter().map(|r| (r, None)));
            Ok(0)
        }
        Cmd::Preflight { spec } => {
            let spec = spec.as_ref().map(JobSpec::from_path).transpose()?;
            let backend = global.backend()?;
            let progress = Progress::start("preflight");
            let report = backend.preflight(spec.as_ref()).await?;
            progress.finish();
            out.preflight(&report.checks);
            let code = report
                .failures()
                .next()
                .map_or(0, |failed| check_exit_code(failed.kind));
            Ok(code)
        }
        Cmd::Submit { spec, after, probe } => {
            let mut spec = JobSpec::from_path(spec)?;
            if let Some(probe) = probe {
                spec.nccl_probe = Some(*probe);
            }
            let after = after
                .iter()
                .map(|a| a.parse::<Dependency>())
                .collect::<slurm_run::Result<Vec<_>>>()?;
            let backend = global.backend()?;
            let progress = Progress::start(&format!("submitting {}", spec.name));
            let options = SubmitOptions {
                after,
                ..SubmitOptions::default()
            };
            let record = backend.submit(&spec, options).await?;
            progress.finish();
            if out.json {
                out.line(&job_json(&record, None).to_string());
            } else {
                out.line(&format!(
                    "submitted {} as SLURM job {}; results in {}",
                    out.bold(record.id.as_str()),
                    record
                        .backend_ref
                        .as_ref()
                        .map(|r| r.native_id.clone())
                        .unwrap_or_else(|| "-".into()),
                    record.results_dir
                ));
                let probe = record
                    .after
                    .iter()
                    .filter_map(|d| backend.record(&d.job).ok())
                    .find(|r| r.labels.contains_key(PROBE_LABEL));
                if let Some(probe) = probe {
                    out.line(&format!(
                        "it waits on the cluster for NCCL probe {} and runs with the knobs it finds",
                        probe.id
                    ));
                }
                out.line(&format!("follow it with: slurmctl watch {}", record.id));
            }
            Ok(0)
        }
        Cmd::Status { ids } => {
            let ids = parse_ids(ids)?;
            let backend = global.backend()?;
            let progress = Progress::start("status");
            let statuses = backend.status_many(&ids).await?;
            progress.finish();
            out.statuses(&statuses);
            Ok(0)
        }
        Cmd::Watch {
            ids,
            interval,
            retries,
        } => {
            let ids = parse_ids(ids)?;
            let backend = global.backend()?;
            let interval = match interval {
                Some(secs) => seconds("interval", *secs)?,
                None => backend.config().poll_interval,
            };
            let retry = retries.map(|budget| RetryPolicy {
                budget,
                ..RetryPolicy::default()
            });
            watch(&backend, &ids, interval, retry, out).await
        }
        Cmd::Logs {
            id,
            task,
            tail,
            err,
            follow,
            interval,
        } => {
            let id = JobId::parse(id)?;
            let stream = if *err { LogStream::Err } else { LogStream::Out };
            let backend = global.backend()?;
            if *follow {
                let interval = seconds("interval", *interval)?;
                let record = backend.record(&id)?;
                let mut chunks = backend.follow_logs(&id, stream, interval);
                while let Some(chunk) = chunks.next().await {
                    let text = chunk?;
                    if out.json {
                        out.line(&logs_json(&record, stream, &text).to_string());
                    } else {
                        out.raw(&text);
                    }
                }
            } else {
                let progress = Progress::start("reading the log");
                let text = backend
                    .logs(
                        &id,
                        LogOptions {
                            stream,
                            tail: *tail,
                            task: *task,
                        },
                    )
                    .await?;
                progress.finish();
                let record = backend.record(&id)?;
                if out.json {
                    out.line(&logs_json(&record, stream, &text).to_string());
                } else {
                    out.raw(&text);
                }
            }
            Ok(0)
        }
        Cmd::Cancel { ids, tasks } => {
            let ids = parse_ids(ids)?;
            let tasks = tasks
                .as_deref()
                .map(|t| TaskSet::parse("--tasks", t))
                .transpose()?;
            let backend = global.backend()?;
            let records = match &tasks {
                Some(tasks) => {
                    let mut records = Vec::new();
                    for id in &ids {
                        let progress = Progress::start(&format!("cancelling {id}"));
                        records.push(backend.cancel_tasks(id, tasks).await?);
                        progress.finish();
                    }
                    records
                }
                // Every job in one scancel, confirmed by one poll for all.
                None => {
                    let progress = Progress::start(&format!("cancelling {} job(s)", ids.len()));
                    let records = backend.cancel_many(&ids).await?;
                    progress.finish();
                    records
                }
            };
            out.jobs(records.iter().map(|r| (r, None)));
            Ok(0)
        }
        Cmd::Credentials { action } => {
            let backend = global.backend()?;
            let progress = Progress::start("credentials");
            let status = match action {
                CredentialsCmd::Install {
                    registry,
                    user,
                    password_env,
                } => {
                    let secret = read_secret(password_env.as_deref())?;
                    backend.install_credentials(registry, user, &secret).await?
                }
                CredentialsCmd::Check { registry } => backend.check_credentials(registry).await?,
                CredentialsCmd::Remove { registry } => backend.remove_credentials(registry).await?,
            };
            progress.finish();
            if out.json {
                let mut object = json!(status);
                object["ok"] = json!(status.is_present());
                out.line(&object.to_string());
            } else {
                out.line(&status.to_string());
            }
            let absent = matches!(action, CredentialsCmd::Check { .. }) && !status.is_present();
            Ok(if absent { 2 } else { 0 })
        }
        Cmd::Render { spec } => {
            let spec = JobSpec::from_path(spec)?;
            let backend = global.backend()?;
            let progress = Progress::start("rendering");
            let script = backend.render_script(&spec).await?;
            progress.finish();
            if out.json {
                let id = script
                    .lines()
                    .find_map(|l| l.strip_prefix("#SBATCH --job-name="))
                    .unwrap_or_default();
                out.line(
                    &json!({"id": id, "name": spec.name, "state": null, "script": script})
                        .to_string(),
                );
            } else {
                out.raw(&script);
            }
            Ok(0)
        }
    }
}

/// Follow `ids` to the end; 4 when one ended ERROR, CANCELED or NOT_SUBMITTED.
async fn watch(
    backend: &Slurm,
    ids: &[JobId],
    interval: Duration,
    retry: Option<RetryPolicy>,
    out: &Out,
) -> slurm_run::Result<u8> {
    // The latest record of every watched job (followed through retries).
    let mut latest: BTreeMap<JobId, JobRecord> = BTreeMap::new();
    let mut root_of: HashMap<JobId, JobId> = HashMap::new();
    for id in ids {
        latest.insert(id.clone(), backend.record(id)?);
        root_of.insert(id.clone(), id.clone());
    }
    let mut reported: HashSet<JobId> = HashSet::new();
    let progress = Progress::start("watching");
    progress.set(&summary(&latest));
    let options = WatchOptions {
        interval,
        retry,
        ..WatchOptions::default()
    };
    let mut events = backend.watch(ids, options);
    while let Some(event) = events.next().await {
        match event? {
            WatchEvent::Transition { from, status } => {
                let id = status.id().clone();
                reported.insert(id.clone());
                if out.json {
                    let mut object = job_json(&status.record, status.native.as_ref());
                    object["event"] = json!("transition");
                    object["from"] = json!(from);
                    progress.line(&object.to_string());
                } else {
                    progress.line(&out.transition(from, &status.record, status.native.as_ref()));
                }
                if let Some(root) = root_of.get(&id).cloned() {
                    latest.insert(root, status.record.clone());
                }
            }
            WatchEvent::Retried { previous, record } => {
                reported.insert(record.id.clone());
                if out.json {
                    let mut object = job_json(&record, None);
                    object["event"] = json!("retried");
                    object["previous"] = json!(previous);
                    progress.line(&object.to_string());
                } else {
                    progress.line(&format!(
                        "{}  {}  retried as {} (attempt {})",
                        chrono::Local::now().format("%H:%M:%S"),
                        previous,
                        out.bold(record.id.as_str()),
                        record.attempt
                    ));
                }
                if let Some(root) = root_of.get(&previous).cloned() {
                    root_of.insert(record.id.clone(), root.clone());
                    latest.insert(root, (*record).clone());
                }
            }
        }
        progress.set(&summary(&latest));
    }
    progress.finish();
    // The final word on each job; in JSON only for jobs no event spoke of (already terminal).
    let mut failed = false;
    let mut finals = Vec::new();
    for record in latest.values() {
        let record = backend.record(&record.id)?;
        failed |= matches!(
            record.state,
            JobState::Error | JobState::Canceled | JobState::NotSubmitted
        );
        finals.push(record);
    }
    if out.json {
        for record in finals.iter().filter(|r| !reported.contains(&r.id)) {
            let mut object = job_json(record, None);
            object["event"] = json!("final");
            out.line(&object.to_string());
        }
    } else {
        out.jobs(finals.iter().map(|r| (r, None)));
    }
    Ok(if failed { 4 } else { 0 })
}

fn summary(latest: &BTreeMap<JobId, JobRecord>) -> String {
    let mut counts: BTreeMap<JobState, usize> = BTreeMap::new();
    for record in latest.values() {
        *counts.entry(record.state).or_default() += 1;
    }
    let parts: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    format!("watching {} job(s): {}", latest.len(), parts.join(", "))
}

/// The registry secret: from the environment variable `var`, else one line on stdin
/// (never from the command line, never from a terminal: nothing would hide it).
fn read_secret(var: Option<&str>) -> slurm_run::Result<String> {
    let secret = match var {
        Some(var) => std::env::var(var).map_err(|_| {
            Error::config(
                var,
                format!("--password-env names {var}, which is not set; export it, or pipe the secret on stdin"),
            )
        })?,
        None => {
            let stdin = std::io::stdin();
            if stdin.is_terminal() {
                return Err(Error::invalid(
                    "password",
                    "stdin is a terminal; pipe the secret in (e.g. from a password manager) or use --password-env VAR",
                ));
            }
            let mut text = String::new();
            std::io::Read::read_to_string(&mut stdin.lock(), &mut text)
                .map_err(|e| Error::io("reading the secret from stdin", e))?;
            text
        }
    };
    let secret = secret
        .strip_suffix('\n')
        .map(|s| s.strip_suffix('\r').unwrap_or(s))
        .unwrap_or(&secret);
    if secret.is_empty() || secret.contains('\n') {
        return Err(Error::invalid(
            "password",
            "give exactly one non-empty line (stdin or --password-env)",
        ));
    }
    Ok(secret.to_string())
}

/// The indices of a range list printed by `state_groups` (`0-3,8`).
fn indices_of(list: &str) -> impl Iterator<Item = u32> {
    TaskSet::parse("tasks", list)
        .map(|set| set.iter().collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
}

fn parse_ids(ids: &[String]) -> slurm_run::Result<Vec<JobId>> {
    ids.iter().map(|id| JobId::parse(id)).collect()
}

fn seconds(field: &str, secs: f64) -> slurm_run::Result<Duration> {
    if secs.is_finite() && secs > 0.0 && secs < 86_400.0 {
        Ok(Duration::from_secs_f64(secs))
    } else {
        Err(Error::invalid(
            field,
            format!("{secs} is not a number of seconds between 0 and 86400; give e.g. --{field} 5"),
        ))
    }
}

impl Global {
    /// The value of environment variable `name`, a flag overriding it; empty counts as unset.
    fn lookup(&self, name: &str) -> Option<String> {
        let flag = match name {
            "SLURM_HOSTNAME" => self.host.clone(),
            "SLURM_USER" => self.user.clone(),
            "SSH_KEY_PATH" => self.key.as_ref().map(|p| p.display().to_string()),
            "SSH_KNOWN_HOSTS" => self.known_hosts.as_ref().map(|p| p.display().to_string()),
            "SLURM_PARTITION" => self.partition.clone(),
            "SLURM_BASE_RESULTS_DIR" => self.results_root.clone(),
            "SLURM_ACCOUNT" => self.account.clone(),
            "SLURM_RUN_STATE_DIR" => self.state_dir.as_ref().map(|p| p.display().to_string()),
            _ => None,
        };
        flag.or_else(|| std::env::var(name).ok())
            .filter(|v| !v.trim().is_empty())
    }

    /// The backend the flags and the environment describe (connecting happens on first use).
    fn backend(&self) -> slurm_run::Result<Slurm> {
        let lookup = |name: &str| self.lookup(name);
        let config = SlurmConfig::builder().with_env_from(lookup).build()?;
        let store = FileRecordStore::new(&config.state_dir)?;
        let transport: Arc<dyn Transport> = match self.ssh {
            SshKind::Ssh2 => Arc::new(Ssh2TransportBuilder::from_lookup(lookup)?.build()?),
            SshKind::Openssh => {
                // Every host of SLURM_HOSTNAME, tried in order (each with its own master).
                let builder = OpenSshTransportBuilder::from_lookup(lookup)?;
                Arc::new(OpenSshTransport::new(builder)?)
            }
        };
        Ok(SlurmBackend::new(
            transport,
            HandlebarsRenderer::new(),
            store,
            config,
        ))
    }
}

/// One job as a JSON object: the fields scripts rely on, then the details.
fn job_json(record: &JobRecord, native: Option<&NativeStatus>) -> Value {
    json!({
        "id": record.id,
        "state": record.state,
        "slurm_job_id": record.backend_ref.as_ref().and_then(|r| r.native_id.parse::<u64>().ok()),
        "results_dir": record.results_dir.as_str(),
        "retry_of": record.retry_of,
        "name": record.name,
        "attempt": record.attempt,
        "err_class": record.err_class,
        "cluster": record.backend_ref.as_ref().and_then(|r| r.cluster.clone()),
        "native_state": native.map(|n| n.state.clone()),
        "reason": native.and_then(|n| n.reason.clone()),
        "exit_code": native.and_then(|n| n.exit_code),
        "nodes": native.and_then(|n| n.nodes.clone()),
        "message": record.history.last().and_then(|t| t.message.clone()),
        "unsettled": unsettled_note(record),
        "candidates": record.candidates.iter().map(|r| r.native_id.clone()).collect::<Vec<_>>(),
        "submitted_at": record.submitted_at,
        "updated_at": record.updated_at,
    })
}

/// One task of an array as a JSON object: the array's fields, then the task's.
fn task_json(record: &JobRecord, index: u32, native: Option<&NativeStatus>) -> Value {
    let task = &record.tasks[&index];
    let mut object = job_json(record, native);
    object["task"] = json!(index);
    object["state"] = json!(task.state);
    object["err_class"] = json!(task.err_class);
    object["slurm_task_id"] = json!(record
        .backend_ref
        .as_ref()
        .map(|r| format!("{}_{index}", r.native_id)));
    object["message"] = json!(task.message);
    object["task_nodes"] = json!(task.nodes);
    object
}

/// For a SUBMITTING record whose submit is not settled (its outcome was lost, or its
/// submitter died): what is known, and how to settle it; `None` otherwise.
fn unsettled_note(record: &JobRecord) -> Option<String> {
    if record.state != JobState::Submitting {
        return None;
    }
    let age = chrono::Utc::now().signed_duration_since(record.submitted_at);
    if record.unsettled.is_none() && age < chrono::Duration::seconds(5) {
        return None;
    }
    let mut note = match &record.unsettled {
        Some(why) => format!("submit not settled: {why}"),
        None => format!(
            "submit not settled since {} (its submitter stopped before the scheduler answered)",
            record
                .submitted_at
                .with_timezone(&chrono::Local)
                .format("%H:%M:%S")
        ),
    };
    if !record.candidates.is_empty() {
        let ids: Vec<String> = record.candidates.iter().map(|r| r.to_string()).collect();
        note.push_str(&format!(
            "; SLURM jobs seen with its name: {}",
            ids.join(", ")
        ));
    }
    note.push_str(&format!("; `slurmctl status {}` settles it", record.id));
    Some(note)
}

fn logs_json(record: &JobRecord, stream: LogStream, text: &str) -> Value {
    let mut object = job_json(record, None);
    object["stream"] = json!(stream.file_name());
    object["text"] = json!(text);
    object
}

/// Where and how results are printed.
struct Out {
    json: bool,
    color: bool,
}

impl Out {
    fn new(json: bool) -> Self {
        let color =
            !json && std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        Out { json, color }
    }

    /// Write `text` to stdout as it is; a closed pipe ends the program quietly.
    fn raw(&self, text: &str) {
        let mut stdout = std::io::stdout().lock();
        if let Err(e) = stdout
            .write_all(text.as_bytes())
            .and_then(|_| stdout.flush())
        {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
        }
    }

    fn line(&self, text: &str) {
        self.raw(&format!("{text}\n"));
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    fn bold(&self, text: &str) -> String {
        self.paint("1", text)
    }

    /// `text` (already padded) in the colour of `state`.
    fn state(&self, state: JobState, text: &str) -> String {
        let code = match state {
            JobState::Complete => "32",
            JobState::Error => "31",
            JobState::Canceled | JobState::NotSubmitted => "33",
            JobState::Running => "36",
            JobState::Unknown => "35",
            JobState::Pending | JobState::Submitting => "34",
        };
        self.paint(code, text)
    }

    /// Statuses: as [`Out::jobs`], and for an array one JSON object per task (one
    /// line per group of tasks in the same state without `--json`).
    fn statuses(&self, statuses: &[JobStatus]) {
        if self.json {
            for status in statuses {
                if status.record.is_array() {
                    for index in status.record.tasks.keys() {
                        self.line(
                            &task_json(&status.record, *index, status.tasks.get(index)).to_string(),
                        );
                    }
                } else {
                    self.line(&job_json(&status.record, status.native.as_ref()).to_string());
                }
            }
            return;
        }
        self.jobs(statuses.iter().map(|s| (&s.record, s.native.as_ref())));
        for status in statuses.iter().filter(|s| s.record.is_array()) {
            self.line(&format!("{} tasks:", status.record.id));
            for (state, indices) in state_groups(&status.record.tasks) {
                let nodes: Vec<String> = indices_of(&indices)
                    .filter_map(|i| status.tasks.get(&i).and_then(|n| n.nodes.clone()))
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect();
                let reason = indices_of(&indices)
                    .find_map(|i| status.tasks.get(&i).and_then(|n| n.reason.clone()));
                let mut line = format!("  {:<10} {}", self.state(state, state.as_str()), indices);
                if !nodes.is_empty() {
                    line.push_str(&format!("  on {}", nodes.join(",")));
                }
                if let Some(reason) = reason {
                    line.push_str(&format!("  ({reason})"));
                }
                self.line(&line);
            }
        }
    }

    /// Jobs: JSON Lines, or an aligned table.
    fn jobs<'a>(&self, jobs: impl Iterator<Item = (&'a JobRecord, Option<&'a NativeStatus>)>) {
        let jobs: Vec<_> = jobs.collect();
        if self.json {
            for (record, native) in jobs {
                self.line(&job_json(record, native).to_string());
            }
            return;
        }
        if jobs.is_empty() {
            self.line("no jobs");
            return;
        }
        let header = ["ID", "STATE", "SLURM", "ATTEMPT", "REASON", "RESULTS"];
        let rows: Vec<(JobState, [String; 6])> = jobs
            .iter()
            .map(|(record, native)| {
                let reason = unsettled_note(record)
                    .or_else(|| native.and_then(|n| n.reason.clone()))
                    .or_else(|| record.err_class.map(|c| c.to_string()))
                    .unwrap_or_else(|| "-".into());
                (
                    record.state,
                    [
                        record.id.to_string(),
                        record.state.to_string(),
                        match (&record.backend_ref, record.candidates.as_slice()) {
                            (Some(r), _) => r.native_id.clone(),
                            (None, []) => "-".into(),
                            (None, seen) => format!(
                                "?{}",
                                seen.iter()
                                    .map(|r| r.native_id.clone())
                                    .collect::<Vec<_>>()
                                    .join(",?")
                            ),
                        },
                        match &record.retry_of {
                            Some(prev) => format!("{} (retry of {prev})", record.attempt),
                            None => record.attempt.to_string(),
                        },
                        reason,
                        record.results_dir.to_string(),
                    ],
                )
            })
            .collect();
        let mut widths = header.map(str::len);
        for (_, row) in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let pad = |text: &str, width: usize| format!("{text:width$}");
        let head: Vec<String> = header.iter().zip(widths).map(|(h, w)| pad(h, w)).collect();
        self.line(self.bold(head.join("  ").trim_end()).as_str());
        for (state, row) in rows {
            let cells: Vec<String> = row
                .iter()
                .zip(widths)
                .enumerate()
                .map(|(i, (cell, w))| {
                    let padded = pad(cell, w);
                    if i == 1 {
                        self.state(state, &padded)
                    } else {
                        padded
                    }
                })
                .collect();
            self.line(cells.join("  ").trim_end());
        }
    }

    /// One line of `watch` output.
    fn transition(
        &self,
        from: JobState,
        record: &JobRecord,
        native: Option<&NativeStatus>,
    ) -> String {
        let mut line = format!(
            "{}  {}  {} -> {}",
            chrono::Local::now().format("%H:%M:%S"),
            record.id,
            from,
            self.state(record.state, record.state.as_str())
        );
        if let Some(r) = &record.backend_ref {
            line.push_str(&format!("  slurm {}", r.native_id));
        }
        if let Some(reason) = native.and_then(|n| n.reason.as_deref()) {
            line.push_str(&format!("  ({reason})"));
        }
        if let Some(class) = record.err_class {
            line.push_str(&format!("  {class}"));
        }
        line
    }

    /// Preflight checks: one JSON object each, or an aligned list with remedies.
    fn preflight(&self, checks: &[PreflightCheck]) {
        if self.json {
            for c in checks {
                self.line(
                    &json!({"check": c.check, "ok": c.ok, "degraded": c.degraded, "detail": c.detail, "remedy": c.remedy})
                        .to_string(),
                );
            }
            return;
        }
        let width = checks.iter().map(|c| c.check.len()).max().unwrap_or(0);
        for c in checks {
            let mark = match (c.ok, c.degraded) {
                (true, false) => self.paint("32", "ok  "),
                (true, true) => self.paint("33", "WARN"),
                (false, _) => self.paint("31", "FAIL"),
            };
            self.line(&format!("{mark} {:width$}  {}", c.check, c.detail));
            if !c.ok || c.degraded {
                self.line(&format!("     {:width$}  remedy: {}", "", c.remedy));
            }
        }
    }

    /// An error on stderr: text, or one JSON object with `--json`.
    fn error(&self, error: &Error, code: u8) {
        let message = if self.json {
            json!({
                "error": error.to_string(),
                "kind": format!("{:?}", error.kind()),
                "field": error_field(error),
                "exit_code": code,
            })
            .to_string()
        } else {
            let lead = if std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none()
            {
                "\x1b[31merror\x1b[0m"
            } else {
                "error"
            };
            format!("slurmctl: {lead}: {error}")
        };
        let _ = writeln!(std::io::stderr(), "{message}");
    }
}

/// A spinner with the elapsed time on stderr, only when stderr is a terminal.
struct Progress(Option<ProgressBar>);

impl Progress {
    fn start(message: &str) -> Self {
        if !std::io::stderr().is_terminal() {
            return Progress(None);
        }
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} [{elapsed_precise}]")
                .expect("a valid template"),
        );
        bar.set_message(message.to_string());
        bar.enable_steady_tick(Duration::from_millis(100));
        Progress(Some(bar))
    }

    fn set(&self, message: &str) {
        if let Some(bar) = &self.0 {
            bar.set_message(message.to_string());
        }
    }

    /// Print a line on stdout without tearing the spinner.
    fn line(&self, text: &str) {
        let print = || {
            let mut stdout = std::io::stdout().lock();
            if let Err(e) = writeln!(stdout, "{text}").and_then(|_| stdout.flush()) {
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    std::process::exit(0);
                }
            }
        };
        match &self.0 {
            Some(bar) => bar.suspend(print),
            None => print(),
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
