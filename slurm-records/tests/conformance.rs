//! The RecordStore conformance suite on the SQLite store (its workers are processes of
//! this test binary). The PostgreSQL store runs it on the test bed's server
//! (`tests/testbed/records.rs`).

use slurm_records::testing::SqliteFixture;

slurm_core::record_store_conformance!(sqlite, SqliteFixture::new());
