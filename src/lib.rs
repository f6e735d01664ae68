//! slurm-run: run GPU jobs on a SLURM cluster reached over SSH.
//!
//! A [`JobSpec`] goes in; a durable [`JobRecord`] comes out and is kept true to what
//! the cluster says, through one [`Backend`] trait that orchestrators hold as
//! `Arc<dyn Backend>`. [`SlurmBackend`] implements it for SLURM over a pluggable
//! transport (where commands run: [`Ssh2Transport`], [`OpenSshTransport`], or
//! [`LocalTransport`] on the login node itself) and a
//! pluggable renderer (how the batch script is written: [`HandlebarsRenderer`]).
//!
//! This facade only re-exports: the names programs use, at the top level, the few most
//! programs need in [`prelude`], and the workspace crates whole: [`core`] (the domain and
//! the `Backend`, `Transport`, `Renderer` and `RecordStore` seams, every name at its
//! root), [`ssh`] (the SSH transports), [`render`] (the sbatch templates and the lint) and
//! [`records`] (records in SQLite or PostgreSQL, and the setting that chooses the store).
//!
//! # Embedding
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use futures::StreamExt;
//! use slurm_run::prelude::*;
//!
//! # async fn demo() -> slurm_run::Result<()> {
//! // Everything from the environment: SLURM_HOSTNAME, SLURM_USER, SSH_KEY_PATH, SLURM_PARTITION, ...
//! let config = SlurmConfig::from_env()?;
//! // SLURM_RUN_RECORDS chooses the store (sqlite://PATH, postgres://..., a folder);
//! // unset, the state folder's SQLite database.
//! let store = RecordsLocation::from_env(&config.state_dir)?.open()?;
//! let ssh = Ssh2TransportBuilder::from_env()?.build()?;
//! let backend: Arc<dyn Backend> =
//!     Arc::new(SlurmBackend::new(ssh, HandlebarsRenderer::new(), store, config));
//!
//! let mut spec = JobSpec::new("hello", "nvidia-smi -L");
//! spec.gpus_per_node = Some(1);
//! let record = backend.submit(&spec, SubmitOptions::default()).await?;
//! let options = WatchOptions { interval: Duration::from_secs(5), ..WatchOptions::default() };
//! let mut events = backend.watch(&[record.id().clone()], options);
//! while let Some(event) = events.next().await {
//!     if let WatchEvent::Transition { status, .. } = event? {
//!         println!("{} is {}", status.id(), status.state());
//!     }
//! }
//! println!("{}", backend.logs(record.id(), LogOptions::default()).await?);
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

pub use slurm_core as core;
pub use slurm_records as records;
pub use slurm_render as render;
pub use slurm_ssh as ssh;

pub use slurm_core::{CheckKind, Error, ErrorClass, ErrorKind, Result};

// The seams: where commands run, how scripts are written, where records live, what runs jobs.
pub use slurm_core::{Backend, BackendExt, RecordStore, Renderer, Transport};
// Their implementations.
pub use slurm_core::{
    FileRecordStore, LocalBackend, LocalTransport, MemoryRecordStore, SlurmBackend,
};
pub use slurm_records::{
    migrate_folder, Migration, PostgresRecordStore, RecordsLocation, SqliteRecordStore,
    DEFAULT_DATABASE, RECORDS_VAR,
};
pub use slurm_render::HandlebarsRenderer;
pub use slurm_ssh::{
    OpenSshTransport, OpenSshTransportBuilder, Ssh2Transport, Ssh2TransportBuilder,
};
// What goes in: the spec, the options, the configuration.
pub use slurm_core::{
    default_state_dir, CredentialsStatus, SlurmConfig, SlurmSubmitOptions, PROBE_LABEL,
    SETTLE_AFTER,
};
pub use slurm_core::{
    ArraySpec, Dependency, DependencyCondition, JobSpec, NcclProbe, ResumeSignal, ResumeSpec,
    RoleSpec, Scalar, Sweep, TaskSet, WallTime, RESTART_COUNT_VAR, RESUME_FROM_VAR,
};
pub use slurm_core::{LogOptions, LogStream, RetryPolicy, SubmitOptions, WatchOptions};
// Into a running job: a port forward, a command beside it, the node they reach.
pub use slurm_core::{
    CodeSent, CodeSpec, ExecOptions, ForwardOptions, JobForward, NodeChoice, OutputChunk,
};
// What comes out: records, their states, the answers.
pub use slurm_core::{
    JobId, JobRecord, JobState, JobStatus, NativeStatus, PreflightCheck, PreflightReport,
    RecordFilter, Segment, SegmentEnd, Timeline, Unsettled, UnsettledKind, Usage, WatchEvent,
};
// What runs cost: the usage ledger over any record store, its pictures and budgets.
pub use slurm_core::{
    budget_use, check_budgets, format_hours, parse_since, summarise, timeline_svg, usage_of,
    usage_svg, worst_case_gpu_hours, Budget, BudgetRefusal, BudgetUse, Budgets, GroupBy,
    UsageReport, UsageRow,
};
// Why a job waits and where it would start sooner.
pub use slurm_core::{
    Forecast, JobAhead, LimitUse, NodeStates, ParentJob, PartitionForecast, WaitAnswer,
    WaitCategory, WaitEvidence,
};

/// The names a program embedding slurm-run usually needs: `use slurm_run::prelude::*;`.
///
/// ```
/// use slurm_run::prelude::*;
/// use slurm_run::core::SpecDefaults;
///
/// # fn main() -> slurm_run::Result<()> {
/// // A spec as a user writes it; the defaults and the partition's limits resolve it.
/// let spec = JobSpec::from_yaml_str(
///     "name: hello\ncommand: nvidia-smi -L\nnodes: 2\ngpus_per_node: 1\ntime: \"00:10:00\"\n",
/// )?;
/// let resources = spec.resolve(&SpecDefaults::default().with_partition("gpu"))?;
/// assert_eq!((resources.nodes, resources.gpus, resources.exclusive), (2, 2, false));
///
/// // Bad input is an error naming the field and the fix.
/// let err = JobSpec::from_yaml_str("name: ../x\ncommand: 'true'\n").unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::Invalid);
/// assert!(err.to_string().starts_with("invalid name:"));
///
/// // The backend's configuration from a builder (or SlurmConfig::from_env()).
/// let config = SlurmConfig::builder()
///     .with_partition("gpu")
///     .with_results_root("/lustre/me/results")
///     .with_state_dir(std::env::temp_dir().join("slurm-run-doc"))
///     .build()?;
/// assert_eq!(config.results_root.as_deref(), Some("/lustre/me/results"));
/// # Ok(()) }
/// ```
pub mod prelude {
    pub use slurm_core::{
        ArraySpec, Backend, BackendExt, Dependency, Error, ErrorKind, FileRecordStore, JobId,
        JobRecord, JobSpec, JobState, JobStatus, LocalBackend, LogOptions, LogStream, NcclProbe,
        PreflightReport, RecordFilter, RecordStore, Renderer, Result, RetryPolicy, SlurmBackend,
        SlurmConfig, SubmitOptions, Sweep, TaskSet, Transport, WallTime, WatchEvent, WatchOptions,
    };
    pub use slurm_records::RecordsLocation;
    pub use slurm_render::HandlebarsRenderer;
    pub use slurm_ssh::{Ssh2Transport, Ssh2TransportBuilder};
}

/// The README's code blocks, compiled as doc tests so the embedding example stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
