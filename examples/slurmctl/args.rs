//! The command line: commands, flags and their help text (clap), and the flags' overlay on the environment.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use slurm_run::prelude::{Error, JobId, LogOptions, NcclProbe};
use slurm_run::NodeChoice;

#[derive(Debug, Parser)]
#[command(
    name = "slurmctl",
    version,
    about = "Run GPU jobs on a SLURM cluster over SSH: preflight, submit, status, watch, logs, cancel.",
    after_help = "Exit status: 0 success; 2 bad input or configuration; 3 remote or connection failure; 4 watch saw ERROR, CANCELED or NOT_SUBMITTED."
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: Global,
    #[command(subcommand)]
    pub(crate) command: Cmd,
}

/// Flags every command takes; each overrides the environment variable it names.
#[derive(Debug, Args)]
pub(crate) struct Global {
    /// Print JSON Lines (one object per job, per transition for watch, per check for preflight).
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// Login host(s): host, host:port, comma-separated [env: SLURM_HOSTNAME].
    #[arg(long, global = true, value_name = "HOST")]
    pub(crate) host: Option<String>,
    /// Remote user [env: SLURM_USER]. Before the command only: after `credentials
    /// install`, `--user` is the registry login.
    #[arg(long)]
    pub(crate) user: Option<String>,
    /// Private key file [env: SSH_KEY_PATH].
    #[arg(long, global = true, value_name = "PATH")]
    pub(crate) key: Option<PathBuf>,
    /// known_hosts file [env: SSH_KNOWN_HOSTS].
    #[arg(long = "known-hosts", global = true, value_name = "PATH")]
    pub(crate) known_hosts: Option<PathBuf>,
    /// GPU partition(s), comma-separated [env: SLURM_PARTITION].
    #[arg(long, global = true)]
    pub(crate) partition: Option<String>,
    /// Absolute results root on shared storage [env: SLURM_BASE_RESULTS_DIR].
    #[arg(long = "results-root", global = true, value_name = "DIR")]
    pub(crate) results_root: Option<String>,
    /// Account for #SBATCH --account [env: SLURM_ACCOUNT].
    #[arg(long, global = true)]
    pub(crate) account: Option<String>,
    /// Local state folder (the records' SQLite database, or a folder of JSON records)
    /// [env: SLURM_RUN_STATE_DIR] [default: ~/.slurm-run/jobs].
    #[arg(long = "state-dir", global = true, value_name = "DIR")]
    pub(crate) state_dir: Option<PathBuf>,
    /// Where records live: sqlite://PATH, postgres://user:password@host:port/db, or a
    /// folder of JSON records [env: SLURM_RUN_RECORDS] [default: the state folder's
    /// records.sqlite, or its JSON records when it holds some].
    #[arg(long, global = true, value_name = "LOCATION")]
    pub(crate) records: Option<String>,
    /// SSH client: ssh2 (libssh2) or openssh (the system ssh through a ControlMaster, for ProxyJump and 2FA).
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "ssh2",
        env = "SLURM_RUN_SSH"
    )]
    pub(crate) ssh: SshKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum SshKind {
    Ssh2,
    Openssh,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Cmd {
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
        /// Submit nothing: for each partition of the spec's list, when and where the job
        /// would start (sbatch --test-only), or why it could not run there; exit 2 when
        /// no partition can run it.
        #[arg(long)]
        forecast: bool,
        /// Submit even when the job's worst case (nodes x GPUs x wall x the runs it may
        /// make) exceeds what a budget has left (SLURM_RUN_BUDGETS).
        #[arg(long = "over-budget")]
        over_budget: bool,
    },
    /// What runs cost, from the records (no remote call): GPU-hours, CPU-hours, queue
    /// wait and wall used by group, with totals and each budget's use.
    Usage {
        /// Only records submitted within this span: 7d, 24h, 90m, 2w.
        #[arg(long, value_name = "SPAN")]
        since: Option<String>,
        /// Group by: record, name, label:KEY, partition, cluster or day.
        #[arg(long, default_value = "name", value_name = "KEY")]
        by: String,
        /// Also write an SVG bar chart of GPU-hours by day and group to FILE.
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
    },
    /// A picture of records' runs on one time axis (each attempt, segment, role or task
    /// a bar: waiting, running, how it ended).
    Timeline {
        /// Record ids.
        #[arg(required = true)]
        ids: Vec<String>,
        /// The SVG file to write.
        #[arg(long, required = true, value_name = "FILE")]
        svg: PathBuf,
    },
    /// Why jobs wait and when they will start: the category, the scheduler's reason, the
    /// evidence and the remedy, one round trip for all ids.
    Why {
        /// Record ids.
        #[arg(required = true)]
        ids: Vec<String>,
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
        /// Seconds between polls (default: the backend's poll interval).
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
        /// The role of a multi-role job whose log to read (without it: the job's own log).
        #[arg(long, value_name = "NAME")]
        role: Option<String>,
        /// How many lines from the end.
        #[arg(long, default_value_t = LogOptions::default().tail, value_name = "N")]
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
    /// The job records, oldest first (no remote call), from wherever they live.
    Records {
        /// Only records in this state (repeat or comma-separate for several).
        #[arg(long, value_name = "STATE", value_delimiter = ',')]
        state: Vec<String>,
        #[command(subcommand)]
        action: Option<RecordsCmd>,
    },
    /// Print the batch script a submit of SPEC would write (secrets are never in it).
    Render {
        /// A job spec (.yaml, .yml or .json).
        spec: PathBuf,
    },
    /// Forward a local port to a port of a running job's node (its first, unless --node,
    /// --task or --role says); prints http://127.0.0.1:LOCAL and runs until interrupted
    /// or the job ends.
    Forward {
        /// Record id.
        id: String,
        /// The port the job listens on.
        #[arg(long, value_name = "REMOTE")]
        port: u16,
        /// The local port on 127.0.0.1 (default: a free one).
        #[arg(long, value_name = "LOCAL", default_value_t = 0)]
        local: u16,
        #[command(flatten)]
        node: NodeFlags,
        /// Seconds between checks that the job still runs.
        #[arg(long, default_value_t = 5.0, value_name = "SECS")]
        interval: f64,
    },
    /// Run a command beside a running job (a step overlapping its allocation, in its
    /// container image when it has one); streams its output and exits with its status.
    Exec {
        /// Record id.
        id: String,
        /// The node of the job, counted from 0 (default: its first).
        #[arg(long, value_name = "N")]
        node: Option<usize>,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// enroot's credentials for a private registry on the cluster (once per cluster and user).
    Credentials {
        #[command(subcommand)]
        action: CredentialsCmd,
    },
}

/// Which node of a job a forward reaches (one of the three at most).
#[derive(Debug, Args)]
#[group(multiple = false)]
pub(crate) struct NodeFlags {
    /// The node of the job, counted from 0.
    #[arg(long, value_name = "N")]
    pub(crate) node: Option<usize>,
    /// The first node of this task of an array job.
    #[arg(long, value_name = "N")]
    pub(crate) task: Option<u32>,
    /// The first node of this role of a multi-role job.
    #[arg(long, value_name = "NAME")]
    pub(crate) role: Option<String>,
}

impl NodeFlags {
    /// The library's node choice.
    pub(crate) fn choice(&self) -> NodeChoice {
        match (self.node, self.task, &self.role) {
            (Some(n), _, _) => NodeChoice::Index(n),
            (_, Some(t), _) => NodeChoice::Task(t),
            (_, _, Some(r)) => NodeChoice::Role(r.clone()),
            _ => NodeChoice::First,
        }
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum RecordsCmd {
    /// Move a folder of JSON records into the database --records names (default: the
    /// state folder's records.sqlite), losing nothing: each record is copied, read back
    /// and compared before its file moves to the folder's moved/. What cannot move
    /// (unreadable, a submit in progress, held otherwise) stays and is named (exit 2);
    /// run it again to move what is left.
    Migrate {
        /// The folder of JSON records (default: the state folder).
        #[arg(long, value_name = "DIR")]
        from: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum CredentialsCmd {
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

impl Global {
    /// The value of environment variable `name`, a flag overriding it; empty counts as unset.
    pub(crate) fn lookup(&self, name: &str) -> Option<String> {
        let flag = match name {
            "SLURM_HOSTNAME" => self.host.clone(),
            "SLURM_USER" => self.user.clone(),
            "SSH_KEY_PATH" => self.key.as_ref().map(|p| p.display().to_string()),
            "SSH_KNOWN_HOSTS" => self.known_hosts.as_ref().map(|p| p.display().to_string()),
            "SLURM_PARTITION" => self.partition.clone(),
            "SLURM_BASE_RESULTS_DIR" => self.results_root.clone(),
            "SLURM_ACCOUNT" => self.account.clone(),
            "SLURM_RUN_STATE_DIR" => self.state_dir.as_ref().map(|p| p.display().to_string()),
            "SLURM_RUN_RECORDS" => self.records.clone(),
            _ => None,
        };
        flag.or_else(|| std::env::var(name).ok())
            .filter(|v| !v.trim().is_empty())
    }
}

/// Record ids from the command line.
pub(crate) fn parse_ids(ids: &[String]) -> slurm_run::Result<Vec<JobId>> {
    ids.iter().map(|id| JobId::parse(id)).collect()
}

/// A number of seconds from flag `--field`: above 0 and below a day.
pub(crate) fn seconds(field: &str, secs: f64) -> slurm_run::Result<Duration> {
    if secs.is_finite() && secs > 0.0 && secs < 86_400.0 {
        Ok(Duration::from_secs_f64(secs))
    } else {
        Err(Error::invalid(
            field,
            format!("{secs} is not a number of seconds between 0 and 86400; give e.g. --{field} 5"),
        ))
    }
}
