//! The domain of slurm-run, the seams the rest of the library plugs into, and the
//! SLURM backend.
//!
//! slurm-core knows nothing of ssh2 or handlebars. It defines the small, object-safe
//! traits the other crates implement ([`Transport`], [`Renderer`], [`RecordStore`],
//! [`Backend`]) and the logic every backend shares: the job spec and its validation,
//! the state machine, durable records, failure classification and redaction.
//! Keeping this crate free of I/O libraries keeps the logic testable without a cluster
//! and lets callers swap transports and renderers.
//!
//! # The public surface
//! The modules are private: the names re-exported here, at the crate root, are the whole
//! API, with `testing` behind a cargo feature. By what they are for:
//!
//! - **Errors**: [`Error`], one enum (match on [`ErrorKind`]; [`Error::is_transient`],
//!   [`Error::may_have_run`]), [`CheckKind`], [`Result`]; [`ErrorClass`] (infra or
//!   program: why a job failed).
//! - **The job spec**: [`JobSpec`] (YAML or JSON, unknown keys refused) and what it holds:
//!   [`WallTime`], [`CompletionCheck`], [`NcclProbe`], [`Dependency`] with its
//!   [`DependencyCondition`] and [`DependencyVerdict`], [`ArraySpec`], [`TaskSet`], [`Sweep`] of
//!   [`Scalar`]s; a multi-role job's [`RoleSpec`]s and the names of the variables its roles
//!   see ([`ROLE_VAR`], [`ROLE_RANK_VAR`], [`role_hosts_var`], [`role_host_var`],
//!   [`role_env_name`]); [`SpecDefaults`] and [`Limits`] resolve it to [`Resources`];
//!   [`validate_sbatch_line`].
//! - **Records**: [`JobRecord`], a job as slurm-run remembers it, read through one
//!   accessor per field ([`JobRecord::id`], [`JobRecord::state`],
//!   [`JobRecord::backend_ref`], ...): [`JobId`], [`BackendRef`], [`JobState`], its
//!   history of [`Transition`]s (each by a [`TransitionSource`]), the scheduler's times of
//!   its run ([`Timeline`]), why a submit is not
//!   settled yet ([`Unsettled`], [`UnsettledKind`]), an array's
//!   [`TaskRecord`]s ([`JobRecord::task_groups`]), the results folder's [`RemotePath`].
//! - **The `Backend` seam**, what orchestrators hold as `Arc<dyn Backend>`: [`Backend`],
//!   [`BackendExt`]; its options [`SubmitOptions`], [`WatchOptions`] (with a
//!   [`RetryPolicy`]), [`LogOptions`] and [`LogStream`]; its answers [`JobStatus`] (read
//!   through its accessors, with [`NativeStatus`]), [`WatchEvent`], [`PreflightReport`]
//!   of [`PreflightCheck`]s; why a job waits, a [`WaitAnswer`] (its [`WaitCategory`] and
//!   [`WaitEvidence`]: [`NodeStates`], [`JobAhead`], [`LimitUse`], [`ParentJob`]), and
//!   where a job would start, a [`Forecast`] of [`PartitionForecast`]s.
//! - **The `Transport` seam**, where commands run: [`Transport`], [`Command`], [`Output`],
//!   [`shell_quote`] (the one quoting function), [`round_trip`] (several commands in one),
//!   [`Script`] (a fixed remote script, its exit statuses named once with [`exit_statuses!`]),
//!   [`LocalTransport`]; into a running job: port forwards ([`Transport::forward`] to a
//!   [`ForwardTarget`], held open by a [`Forwarding`]; [`listen_and_forward`],
//!   [`free_local_port`]) and streamed output ([`Transport::run_streamed`] into an
//!   [`OutputSink`] of [`OutputChunk`]s; [`stream_process`]).
//! - **The `Renderer` seam**, how the batch script is written: [`Renderer`],
//!   [`ScriptContext`] (with [`EnvVar`], [`ArrayContext`], [`RoleContext`]), [`TemplateKind`],
//!   [`LintFinding`]; the one rule for names ([`validate_safe_name`], [`validate_shell_name`],
//!   [`MAX_NAME_LEN`]); the secrets a script must not hold: [`SecretRegistry`],
//!   [`is_secret_name`], [`REDACTED`], [`MIN_SECRET_LEN`].
//! - **The `RecordStore` seam**, where records live: [`RecordStore`], the [`Mark`] (and
//!   [`TaskMark`]) it applies by the rules every store keeps ([`JobRecord::apply_mark`],
//!   [`JobRecord::apply_update`], [`JobRecord::redact_history`],
//!   [`JobRecord::from_stored_json`]), [`SubmitLease`], [`RecordFilter`], the [`Listing`]
//!   of the records that can be read;
//!   [`FileRecordStore`], [`MemoryRecordStore`] (SQLite and PostgreSQL stores are in the
//!   `slurm-records` crate, to keep this one free of database clients).
//! - **The two backends and their configurations**: [`LocalBackend`] (jobs as local
//!   processes); [`SlurmBackend`] with its [`SlurmConfig`] ([`SlurmConfig::builder`] gives
//!   a [`SlurmConfigBuilder`]; [`default_state_dir`]; [`SETTLE_AFTER`]), [`SlurmSubmitOptions`] and
//!   [`SlurmJobId`]; enroot's registry credentials ([`CredentialsStatus`],
//!   [`credential_machines`]); into a running job ([`SlurmBackend::forward`] with
//!   [`ForwardOptions`], held by a [`JobForward`]; [`SlurmBackend::exec`] with
//!   [`ExecOptions`]; the node both reach, a [`NodeChoice`]); a code tree's upload
//!   ([`SlurmBackend::on_code_progress`] hears [`CodeSent`]); the NCCL probe ([`ProbeOptions`], [`ProbeReport`] of
//!   [`ProbeAttempt`]s and their [`ProbeOutcome`]), its per-cluster knob cache
//!   ([`ClusterKnobs`], [`ShapeKnobs`], [`KnobSet`]) and the labels of a probe's record
//!   ([`PROBE_LABEL`], [`PROBE_SHAPE_LABEL`], [`PROBE_VERDICT_LABEL`]); the label of an
//!   image conversion job's record ([`CONVERSION_LABEL`]).
//! - **`testing`** (cargo feature `testing`): the Transport and Backend conformance suites
//!   any implementation can run (`transport_conformance!`, `backend_conformance!`),
//!   transports that count commands or inject faults, records staged as a crash leaves
//!   them (`RecordFixture`), and the remote scripts' full texts for linting.
//!
//! # Inside
//! The rooms, and which way they lean: the domain (`spec`, `state`, `record`,
//! `dependency`, `classify`, `redact`, `image`, `storage`, `render`, `transport`) names no
//! scheduler; `backend` holds the [`Backend`] trait, its options and answers, the generic
//! watch and [`LocalBackend`]; `slurm` is everything SLURM, behind [`SlurmBackend`];
//! `nccl` is the NCCL probe and the per-cluster knob cache. `slurm` and `nccl` import the
//! domain, never the reverse, and no two modules import each other
//! (`slurm-core/tests/rooms.rs` checks it).
#![deny(missing_docs)]
#![deny(unreachable_pub)]

mod backend;
mod classify;
mod code;
mod dependency;
mod error;
mod id;
mod image;
mod ledger;
mod names;
mod nccl;
mod record;
mod redact;
mod render;
mod retry;
mod slurm;
mod spec;
mod state;
mod storage;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod transport;

// Errors.
pub use classify::ErrorClass;
pub use error::{CheckKind, Error, ErrorKind, Result};

// The job spec.
pub use spec::{
    role_env_name, role_host_var, role_hosts_var, validate_sbatch_line, ArraySpec, CodeSpec,
    CompletionCheck, Dependency, DependencyCondition, DependencyVerdict, JobSpec, Limits,
    NcclProbe, Resources, ResumeSignal, ResumeSpec, RoleSpec, Scalar, SpecDefaults, Sweep, TaskSet,
    WallTime, RESTART_COUNT_VAR, RESUME_FROM_VAR, ROLE_RANK_VAR, ROLE_VAR,
};
pub use storage::RemotePath;

// What runs cost: the usage ledger over records, its pictures and budgets.
pub use ledger::{
    budget_use, check_budgets, format_hours, parse_since, summarise, timeline_svg, usage_of,
    usage_svg, worst_case_gpu_hours, Budget, BudgetRefusal, BudgetUse, Budgets, GroupBy,
    UsageReport, UsageRow,
};
// Records.
pub use record::{
    BackendRef, JobId, JobRecord, Segment, SegmentEnd, SegmentNote, TaskRecord, Timeline,
    Transition, TransitionSource, Unsettled, UnsettledKind, Usage,
};
pub use state::JobState;

// The Backend seam: what runs jobs, its options and answers.
pub use backend::{
    Backend, BackendExt, Forecast, JobAhead, JobStatus, LimitUse, LogOptions, LogStream,
    NativeStatus, NodeStates, ParentJob, PartitionForecast, PreflightCheck, PreflightReport,
    SubmitOptions, WaitAnswer, WaitCategory, WaitEvidence, WatchEvent, WatchOptions,
};
pub use classify::RetryPolicy;

// The Transport seam: where commands run.
pub use transport::{
    free_local_port, listen_and_forward, round_trip, shell_quote, stream_process, Command,
    FixedScript, ForwardTarget, Forwarding, LocalTransport, Output, OutputChunk, OutputSink,
    Script, Transport,
};

// The Renderer seam: how the batch script is written, and the secrets it must not hold.
pub use redact::{is_secret_name, SecretRegistry, MIN_SECRET_LEN, REDACTED};
pub use render::{
    resume_step_command, validate_safe_name, validate_shell_name, ArrayContext, EnvVar,
    LintFinding, Renderer, ResumeContext, RoleContext, ScriptContext, TemplateKind, MAX_NAME_LEN,
};

// The RecordStore seam: where records live.
pub use record::{
    on_a_runtime_thread, AsyncStore, FileRecordStore, LeaseFiles, Listing, Mark, MemoryRecordStore,
    RecordFilter, RecordStore, RetryClaim, SubmitLease, TaskMark, LEASE_RETRY,
};

// The two backends and their configurations.
pub use backend::LocalBackend;
pub use nccl::{
    ClusterKnobs, KnobSet, ProbeAttempt, ProbeOptions, ProbeOutcome, ProbeReport, ShapeKnobs,
    PROBE_LABEL, PROBE_SHAPE_LABEL, PROBE_VERDICT_LABEL,
};
pub use slurm::{
    credential_machines, default_state_dir, CodeSent, CredentialsStatus, ExecOptions,
    ForwardOptions, JobForward, NodeChoice, SlurmBackend, SlurmConfig, SlurmConfigBuilder,
    SlurmJobId, SlurmSubmitOptions, CONVERSION_LABEL, SETTLE_AFTER,
};
