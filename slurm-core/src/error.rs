//! The one error type of slurm-core, with a kind callers match on and a transient flag for retries.

use std::time::Duration;

/// What kind of failure an [`Error`] is; match on this rather than on messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Missing or bad configuration (an environment variable, a builder field).
    Config,
    /// A job spec or argument that fails validation.
    Invalid,
    /// Authentication to the login host failed.
    Auth,
    /// The login host's key is unknown or changed.
    HostKey,
    /// The login host could not be reached.
    Connect,
    /// The connection failed while a command was in flight.
    Transport,
    /// A remote command ran and failed.
    Remote,
    /// A command or wait exceeded its deadline.
    Timeout,
    /// Output that could not be parsed.
    Parse,
    /// A local record file that does not read back (damaged, or from a newer version).
    CorruptRecord,
    /// A state change the state machine forbids.
    InvalidTransition,
    /// A record, job or file that does not exist.
    NotFound,
    /// A batch script could not be rendered.
    Render,
    /// A batch script failed the secret lint or the syntax check.
    Lint,
    /// A submit whose outcome needs a person (several SLURM jobs carry the record's name).
    Ambiguous,
    /// A preflight check failed.
    Preflight,
    /// Local I/O failed (the record folder, a temporary file).
    Io,
}

/// What a preflight check looked at; callers decide by kind, never by a check's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CheckKind {
    /// Reaching the cluster at all: the login, the host key, the remote shell.
    Connection,
    /// The job spec itself (an image or dataset reference that does not parse).
    Spec,
    /// The scheduler's tools (or, for a local backend, the shell that runs jobs).
    Scheduler,
    /// The scheduler's accounting (finished jobs are read from it).
    Accounting,
    /// A partition: it exists, is up, and allows the wall time.
    Partition,
    /// Running containers: Pyxis, enroot, or their absence for an image job.
    Containers,
    /// Credentials a job needs (a registry's, a secret's value).
    Credentials,
    /// The results root on shared storage.
    Storage,
    /// The datasets the job reads.
    Datasets,
    /// The NCCL probe before a multi-GPU job.
    NcclProbe,
}

/// The error of slurm-core. Every message says what failed and what to do; none
/// ever carries a secret value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Missing or bad configuration.
    #[error("configuration: {field}: {message}")]
    Config {
        /// The variable or builder field at fault, e.g. `SLURM_HOSTNAME`.
        field: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// Input that fails validation.
    #[error("invalid {field}: {message}")]
    Invalid {
        /// The field at fault, e.g. `time` or `gpus_per_node`.
        field: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// Authentication failed.
    #[error("authentication to {host} failed: {message}")]
    Auth {
        /// The login host.
        host: String,
        /// The reason and the remedy.
        message: String,
    },
    /// Host key unknown or changed.
    #[error("host key check for {host} failed: {message}")]
    HostKey {
        /// The login host.
        host: String,
        /// Key type, fingerprint, and how to add it.
        message: String,
    },
    /// The host could not be reached.
    #[error("cannot connect to {host}: {message}")]
    Connect {
        /// The login host (or every host tried, for failover).
        host: String,
        /// The reason.
        message: String,
    },
    /// The connection failed mid-command.
    #[error("connection lost: {message}{}", if *may_have_run { " (the command may have run on the remote side)" } else { "" })]
    Transport {
        /// What happened.
        message: String,
        /// Whether the remote side may have run the command (callers must reconcile before retrying).
        may_have_run: bool,
    },
    /// A remote command ran and failed.
    #[error("remote command `{command}` exited with status {status}: {stderr}")]
    Remote {
        /// The program name (and a short form of its arguments); never a secret.
        command: String,
        /// The exit status.
        status: i32,
        /// The (redacted, shortened) standard error.
        stderr: String,
        /// Whether retrying may succeed (e.g. slurmctld did not answer).
        transient: bool,
    },
    /// A deadline passed.
    #[error("{what} timed out after {after:?}")]
    Timeout {
        /// What was waited for.
        what: String,
        /// The deadline.
        after: Duration,
        /// Whether the remote side may have run the command.
        may_have_run: bool,
    },
    /// Output could not be parsed.
    #[error("cannot parse {what}: {message}")]
    Parse {
        /// What was parsed, e.g. `sacct output`.
        what: String,
        /// Why.
        message: String,
    },
    /// A local record file does not read back.
    #[error("cannot parse job record {path}: {message}")]
    CorruptRecord {
        /// The record file.
        path: String,
        /// What is wrong with it and what to do.
        message: String,
    },
    /// A forbidden state change.
    #[error("illegal transition for {id}: {from} -> {to}")]
    InvalidTransition {
        /// The record id.
        id: String,
        /// The current state.
        from: String,
        /// The refused state.
        to: String,
    },
    /// Something that does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// Rendering failed.
    #[error("render: {0}")]
    Render(String),
    /// Lint or syntax check failed; the findings name line, rule and variable, never values.
    #[error("batch script refused: {}", findings.join("; "))]
    Lint {
        /// One entry per finding.
        findings: Vec<String>,
    },
    /// Needs a person.
    #[error("ambiguous: {0}")]
    Ambiguous(String),
    /// A preflight check failed.
    #[error("preflight failed: {check}: {message} (remedy: {remedy})")]
    Preflight {
        /// What the check looked at.
        kind: CheckKind,
        /// The check's name, for people.
        check: String,
        /// What it found.
        message: String,
        /// What to do.
        remedy: String,
    },
    /// Local I/O failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// The result type of slurm-core.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Config { .. } => ErrorKind::Config,
            Error::Invalid { .. } => ErrorKind::Invalid,
            Error::Auth { .. } => ErrorKind::Auth,
            Error::HostKey { .. } => ErrorKind::HostKey,
            Error::Connect { .. } => ErrorKind::Connect,
            Error::Transport { .. } => ErrorKind::Transport,
            Error::Remote { .. } => ErrorKind::Remote,
            Error::Timeout { .. } => ErrorKind::Timeout,
            Error::Parse { .. } => ErrorKind::Parse,
            Error::CorruptRecord { .. } => ErrorKind::CorruptRecord,
            Error::InvalidTransition { .. } => ErrorKind::InvalidTransition,
            Error::NotFound(_) => ErrorKind::NotFound,
            Error::Render(_) => ErrorKind::Render,
            Error::Lint { .. } => ErrorKind::Lint,
            Error::Ambiguous(_) => ErrorKind::Ambiguous,
            Error::Preflight { .. } => ErrorKind::Preflight,
            Error::Io { .. } => ErrorKind::Io,
        }
    }

    /// Whether trying again later may succeed (a lost connection, a scheduler that did not answer).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Connect { .. } | Error::Transport { .. } | Error::Timeout { .. } => true,
            Error::Remote { transient, .. } => *transient,
            _ => false,
        }
    }

    /// Whether the remote side may have run the command although no answer came back.
    /// A caller that is about to repeat a non-idempotent command (sbatch) must reconcile first.
    pub fn may_have_run(&self) -> bool {
        match self {
            Error::Transport { may_have_run, .. } | Error::Timeout { may_have_run, .. } => {
                *may_have_run
            }
            _ => false,
        }
    }

    /// Shorthand for [`Error::Invalid`].
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    /// Shorthand for [`Error::Config`].
    pub fn config(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Config {
            field: field.into(),
            message: message.into(),
        }
    }

    /// Shorthand for [`Error::Parse`].
    pub fn parse(what: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Parse {
            what: what.into(),
            message: message.into(),
        }
    }

    /// Shorthand for [`Error::Io`].
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}
