//! SLURM, in one room of small modules: [`SlurmBackend`] and the operations it runs,
//! its configuration, the pure "what SLURM said -> what it means" logic, the parsers of
//! the SLURM tools' output, the one table of SLURM states, the argv of every scheduler
//! command, and the remote scripts as `.sh` files.
//!
//! Nothing outside this module names a SLURM type: the rest of the crate speaks of
//! native ids, endings and checks, and this room maps SLURM's words to them.
//!
//! The backend owns its parts and hands each operation a `Context` over them; an
//! operation is a function of its own module, and a module that needs another's work
//! imports it, so the module graph (`tests/rooms.rs`) sees every call. Calls go one
//! way: the backend's operations (submit, status, cancel, logs, resubmit, preflight,
//! the probe on demand) call the steps below them, never the reverse.
//!
//! | module | holds |
//! |---|---|
//! | `backend` | [`SlurmBackend`]: the parts, the `Backend` impl, the SLURM-only calls |
//! | `context/`, `facts` | what an operation works with (and the state it carries: the poll memo, the code upload's progress); what was learnt of the cluster |
//! | `config` | [`SlurmConfig`] from the environment or a builder |
//! | `submit/` | the submit flow: a plan computed once, then render, stage, attempt |
//! | `reconcile/` | settling a submit whose outcome is unknown; the only code that turns a verdict into a record change |
//! | `status` | the status step: the poll, then what follows, in a fixed order |
//! | `poll/` | the poll's request protocol and observations |
//! | `probe/` | the NCCL probe's steps: a submit's need, the verdicts of probes that ended |
//! | `probe_on_demand` | the probe on demand: one probe submitted and waited for |
//! | `dependants` | `--dependency`, dependants that end or follow a retried parent |
//! | `secrets`, `sidecars` | the values submitted (memory only) and log redaction; sidecar removal |
//! | `resubmit`, `cancel`, `logs`, `preflight` | the other operations |
//! | `images`, `credentials` | `.sqsh` images and their conversion; enroot's registry credentials |
//! | `forward`, `exec`, `node_choice` | into a running job: a port forward, a step beside it, the node they reach |
//! | `job`, `paths` | a record's SLURM job; a job's paths on the cluster |
//! | `reasons` | the one table of SLURM's job reasons and what each says of a waiting job |
//! | `release` | the cluster's Slurm releases: those tested against, what newer ones add |
//! | `states`, `parse/`, `commands`, `scripts/` | SLURM's states, output, argv and scripts |

mod backend;
mod cancel;
mod commands;
mod config;
mod context;
mod conversion;
mod credentials;
mod dependants;
mod exec;
mod facts;
mod forward;
mod images;
mod job;
mod logs;
mod node_choice;
pub(crate) mod parse;
mod paths;
mod poll;
mod preflight;
mod probe;
mod probe_on_demand;
mod reasons;
mod reconcile;
mod release;
mod resubmit;
pub(crate) mod scripts;
mod secrets;
mod sidecars;
mod states;
mod status;
mod submit;
mod why;

#[cfg(test)]
mod cancel_tests;
#[cfg(test)]
mod conversion_tests;
#[cfg(test)]
mod credentials_tests;
#[cfg(test)]
mod images_tests;
#[cfg(test)]
mod into_job_tests;
#[cfg(test)]
mod logs_tests;
#[cfg(test)]
mod preflight_tests;
#[cfg(test)]
mod resubmit_tests;
#[cfg(test)]
mod status_memo_tests;
#[cfg(test)]
mod status_tests;
#[cfg(test)]
mod testkit;

use crate::nccl::{NcclProbe, ProbeOptions};

pub use backend::SlurmBackend;
pub use config::{default_state_dir, SlurmConfig, SlurmConfigBuilder};
pub use context::code_progress::CodeSent;
pub use conversion::CONVERSION_LABEL;
pub use credentials::{credential_machines, CredentialsStatus};
pub use exec::ExecOptions;
pub use forward::{ForwardOptions, JobForward};
pub use node_choice::NodeChoice;
pub use parse::SlurmJobId;
pub use reconcile::SETTLE_AFTER;

#[cfg(any(test, feature = "testing"))]
pub(crate) use commands::{sacct_jobs, squeue_jobs};
#[cfg(any(test, feature = "testing"))]
pub(crate) use poll::{poll_command, Group as PollGroup};

/// What a submit to SLURM does beyond the generic
/// [`SubmitOptions`](crate::backend::SubmitOptions): the NCCL probe. The backend's
/// defaults come from [`SlurmConfig::submit`]; [`SlurmBackend::submit_with`] overrides
/// them for one submit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlurmSubmitOptions {
    /// Whether a job that needs NCCL (more than one node or more than one GPU per
    /// node) is preceded by the NCCL probe; see [`NcclProbe`]. A spec's own
    /// `nccl_probe` wins.
    pub nccl_probe: NcclProbe,
    /// How that probe runs (its command, timeout and knob ladder).
    pub probe: ProbeOptions,
}
