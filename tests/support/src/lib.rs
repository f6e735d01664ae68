//! What the root package's tests and benches share (`publish = false`):
//!
//! - [`testbed`]: the local test bed's settings ([`Testbed`], [`testbed_env`]) and an
//!   OpenSSH ControlMaster to it;
//! - [`cluster`]: the process-wide gate every test-bed test takes, shared, or exclusive
//!   for the scenarios that need the whole cluster;
//! - [`transports`]: `Ssh2Transport` and `OpenSshTransport` on the test bed, and
//!   [`Held`](transports::Held), a transport kept together with what must outlive it;
//! - [`backend`]: a `SlurmBackend` on the test bed over counting and fault-injecting
//!   layers ([`harness`]), [`small_spec`], and polls with deadlines;
//! - [`bench`](mod@bench): the figures benches measure, kept between bench binaries and written
//!   to `BENCHMARKS.md` with its plot;
//! - [`examples`]: the example programs, built once and run with a deadline;
//! - [`proxy`]: [`SilentProxy`](proxy::SilentProxy), a TCP proxy that goes silent on demand;
//! - [`wait_until_gone`]: the wait for a remote process a transport abandoned (from the
//!   Transport conformance suite).

pub mod backend;
pub mod bench;
pub mod cluster;
pub mod examples;
pub mod proxy;
pub mod testbed;
pub mod transports;

#[cfg(test)]
mod daemon_check_tests;

use std::path::PathBuf;

pub use backend::{harness, small_spec, Harness};
pub use slurm_core::testing::transport_suite::wait_until_gone;
pub use testbed::{testbed_env, Testbed};

/// The workspace's root folder (where `Cargo.toml`, `testbed/` and `examples/` are).
pub fn workspace_root() -> PathBuf {
    let support = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    support
        .ancestors()
        .nth(2)
        .expect("tests/support sits two folders below the workspace root")
        .to_path_buf()
}
