//! SLURM, in one room: [`SlurmBackend`] (submit, poll, preflight, cancel, logs, and the
//! NCCL probe runs), its configuration, the pure "what SLURM said -> what it means"
//! logic, the parsers of the SLURM tools' output, the one table of SLURM states, the
//! argv of every scheduler command, and the remote scripts as `.sh` files.
//!
//! Nothing outside this module names a SLURM type: the rest of the crate speaks of
//! native ids, endings and checks, and this room maps SLURM's words to them.
//!
//! | file | holds |
//! |---|---|
//! | `backend.rs` | [`SlurmBackend`] and its `Backend` impl |
//! | `config.rs` | [`SlurmConfig`] from the environment or a builder |
//! | `submit.rs`, `reconcile.rs`, `images.rs` | exactly-once submit, reconcile by job name, `.sqsh` staging, the conversion gate |
//! | `credentials.rs` | enroot's registry credentials on the cluster: install, check, remove |
//! | `depend.rs` | `--dependency` from the parents' ids; dependants re-pointed at a retried parent |
//! | `poll.rs`, `observe.rs` | one-round-trip status; the pure decisions from squeue/sacct/scontrol rows |
//! | `preflight.rs`, `cancel.rs`, `logs.rs` | the other operations |
//! | `nccl.rs` | the NCCL probe's submit hook (cached knobs, or a probe queued with the job waiting on it), the settling of probes a poll saw end, `probe_nccl` |
//! | `states.rs`, `parse/`, `commands.rs`, `scripts/` | SLURM's states, output, argv and scripts |

mod backend;
mod cancel;
mod commands;
mod config;
mod credentials;
mod depend;
mod images;
mod logs;
mod nccl;
mod observe;
pub(crate) mod parse;
mod poll;
mod preflight;
mod reconcile;
pub(crate) mod scripts;
mod states;
mod submit;

#[cfg(test)]
mod container_tests;
#[cfg(test)]
mod nccl_tests;
#[cfg(test)]
mod tests;

use crate::nccl::{NcclProbe, ProbeOptions};

pub use backend::SlurmBackend;
pub use config::{default_state_dir, SlurmConfig, SlurmConfigBuilder, ENV_VARS};
pub use credentials::{credential_machines, CredentialsStatus};
pub use parse::SlurmJobId;
pub use poll::SETTLE_AFTER;
pub use states::{map_state, SlurmBaseState, SlurmState};

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
