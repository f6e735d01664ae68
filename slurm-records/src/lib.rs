//! Job records of slurm-run in a database: [`SqliteRecordStore`] (embedded, one file, no
//! server: the default for a new state folder) and [`PostgresRecordStore`] (several
//! replicas of an orchestrator on several machines sharing one database), beside the
//! folder of JSON records of slurm-core ([`FileRecordStore`](slurm_core::FileRecordStore)).
//!
//! One setting chooses among them: `SLURM_RUN_RECORDS` ([`RECORDS_VAR`]) takes
//! `sqlite://PATH`, `postgres://...` or a folder's path ([`RecordsLocation`]); unset, a
//! state folder that holds JSON records keeps them and a new one gets
//! `<state folder>/records.sqlite`. [`migrate_folder`] moves a folder of JSON records
//! into a database, losing nothing.
//!
//! Every store keeps the same rules (slurm-core's [`JobRecord::apply_mark`],
//! [`JobRecord::apply_update`], [`JobRecord::redact_history`]) and passes the same
//! RecordStore conformance suite (`slurm_core::testing::record_suite`). A record is kept
//! as the JSON the file store writes, beside the columns a listing filters on (state,
//! labels, the time it was opened), so old records read as they were written.
//!
//! ```no_run
//! use slurm_core::{RecordFilter, RecordStore};
//! use slurm_records::RecordsLocation;
//!
//! # fn main() -> slurm_core::Result<()> {
//! let state_dir = slurm_core::default_state_dir()?;
//! // SLURM_RUN_RECORDS if set, else the state folder's SQLite database (or its JSON records).
//! let store = RecordsLocation::from_env(&state_dir)?.open()?;
//! for record in store.list(&RecordFilter::any().active())? {
//!     println!("{} {}", record.id(), record.state());
//! }
//! # Ok(()) }
//! ```
//!
//! [`JobRecord::apply_mark`]: slurm_core::JobRecord::apply_mark
//! [`JobRecord::apply_update`]: slurm_core::JobRecord::apply_update
//! [`JobRecord::redact_history`]: slurm_core::JobRecord::redact_history
#![deny(missing_docs)]
#![deny(unreachable_pub)]

mod cache;
mod columns;
mod listing;
mod location;
mod migrate;
mod postgres;
mod sqlite;
#[cfg(feature = "testing")]
pub mod testing;

pub use location::{RecordsLocation, DEFAULT_DATABASE, RECORDS_VAR};
pub use migrate::{migrate_folder, Migration};
pub use postgres::PostgresRecordStore;
pub use sqlite::{SqliteRecordStore, BUSY_WAIT};
