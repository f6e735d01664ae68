//! The domain of slurm-run: what a job is, how its state may change, how SLURM's
//! answers are read, and the seams the rest of the library plugs into.
//!
//! slurm-core knows nothing of ssh2 or handlebars. It defines the small,
//! object-safe traits the other crates implement ([`Transport`](transport::Transport),
//! [`Renderer`](render::Renderer), [`RecordStore`],
//! [`Backend`](backend::Backend)) and the pure logic every backend shares: the job
//! spec and its validation, the state machine, SLURM output parsing, failure
//! classification and redaction. Keeping this crate free of I/O libraries keeps the
//! logic testable without a cluster and lets callers swap transports and renderers.
#![deny(missing_docs)]

pub mod backend;
pub mod batch;
pub mod classify;
pub mod error;
pub mod image;
pub mod layers;
pub mod record;
pub mod redact;
pub mod render;
pub mod slurm;
pub mod spec;
pub mod state;
pub mod storage;
pub mod transport;

pub use error::{Error, ErrorKind, Result};

pub use classify::{classify_failure, ErrorClass, RetryPolicy};
pub use image::ImageRef;
pub use record::{
    BackendRef, FileRecordStore, JobId, JobRecord, Mark, MemoryRecordStore, RecordFilter,
    RecordStore, Transition, TransitionSource,
};
pub use slurm::{SlurmJobId, SlurmState};
pub use spec::{CompletionCheck, JobSpec, Limits, Resources, SpecDefaults, WallTime};
pub use state::{JobState, TransitionOutcome};
pub use storage::{MountSpec, RemotePath, StorageUri};
