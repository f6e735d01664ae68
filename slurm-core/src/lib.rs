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
//! The rooms, and which way they lean:
//! - the domain: [`spec`], [`state`], [`record`], [`dependency`], [`classify`], [`redact`], [`image`],
//!   [`storage`], [`render`], [`transport`]; none of them names a scheduler;
//! - [`backend`]: the [`Backend`] trait, its options and answers, [`BackendExt`], the
//!   generic watch, and [`LocalBackend`] (jobs as local processes);
//! - [`slurm`]: everything SLURM, behind [`SlurmBackend`];
//! - [`nccl`]: the NCCL probe and the per-cluster knob cache;
//! - `testing` (cargo feature `testing`): the Transport and Backend conformance suites
//!   any implementation can run, and fault-injecting transports.
//!
//! `slurm` and `nccl` import the domain, never the reverse, and no two modules import
//! each other.
#![deny(missing_docs)]
#![warn(unreachable_pub)]

pub mod backend;
pub mod classify;
pub mod dependency;
mod error;
pub mod image;
mod names;
pub mod nccl;
pub mod record;
pub mod redact;
pub mod render;
mod retry;
pub mod slurm;
pub mod spec;
pub mod state;
pub mod storage;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod transport;

pub use error::{CheckKind, Error, ErrorKind, Result};

pub use backend::{Backend, BackendExt, LocalBackend};
pub use record::{FileRecordStore, JobId, JobRecord, MemoryRecordStore, RecordStore};
pub use render::Renderer;
pub use slurm::{SlurmBackend, SlurmConfig};
pub use spec::JobSpec;
pub use state::JobState;
pub use transport::{LocalTransport, Transport};
