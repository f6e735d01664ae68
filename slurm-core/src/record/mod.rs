//! Durable job records: the [`JobId`] minted for each job, the [`JobRecord`] kept true to the cluster, and the [`RecordStore`] seam.
//!
//! A record never holds a secret value: it keeps the spec's digest (the spec
//! holds secret names only), and stores redact transition messages with the
//! [`SecretRegistry`](crate::redact::SecretRegistry) they are given.

mod async_store;
mod file;
mod filter;
mod history;
mod job_record;
mod lease_files;
mod mark;
mod memory;
mod read_cache;
mod resumed_run;
mod run_times;
mod segments;
mod store;
mod tasks;
mod timeline;
mod timestamp;
mod unsettled;
mod usage;

pub use crate::id::{BackendRef, JobId};
pub(crate) use async_store::handed_off;
pub use async_store::{on_a_runtime_thread, AsyncStore};
pub use file::FileRecordStore;
pub use filter::RecordFilter;
pub use history::{Transition, TransitionSource};
pub use job_record::JobRecord;
pub(crate) use job_record::SCHEMA_VERSION;
pub use lease_files::LeaseFiles;
pub use mark::Mark;
pub use memory::MemoryRecordStore;
pub use segments::{Segment, SegmentEnd, SegmentNote};
pub(crate) use store::list_readable;
pub use store::{Listing, RecordStore, RetryClaim, SubmitLease, LEASE_RETRY};
pub use tasks::{TaskMark, TaskRecord};
pub use timeline::Timeline;
pub use unsettled::{Unsettled, UnsettledKind};
pub use usage::Usage;

#[cfg(test)]
mod tests;
