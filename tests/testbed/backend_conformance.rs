//! The Backend conformance suite on `SlurmBackend` against the test bed: the same cases
//! `LocalBackend` passes in plain `cargo test` (`slurm_core::testing::backend_suite`).

use std::any::Any;
use std::time::Duration;

use async_trait::async_trait;
use slurm_core::testing::backend_suite::BackendFixture;
use slurm_core::{Backend, JobSpec};
use slurm_run_testsupport::backend::{harness, small_spec, Harness};
use slurm_run_testsupport::cluster;

/// A `SlurmBackend` on the test bed with a record folder of its own.
struct Slurm(Harness);

#[async_trait]
impl BackendFixture for Slurm {
    fn backend(&self) -> &dyn Backend {
        &self.0.backend
    }

    fn spec(&self, name: &str, command: &str) -> JobSpec {
        small_spec(name, command)
    }

    /// Every GPU of the test bed: two exclusive nodes of eight.
    fn blocker(&self, name: &str, command: &str) -> JobSpec {
        let mut spec = small_spec(name, command);
        spec.gpus_per_node = None;
        spec.gpus = Some(16);
        spec
    }

    fn poll_interval(&self) -> Duration {
        Duration::from_millis(500)
    }

    /// The cluster gate: a case with a blocker runs alone.
    async fn enter(&self, fills_backend: bool) -> Box<dyn Any + Send> {
        if fills_backend {
            Box::new(cluster::exclusive().await)
        } else {
            Box::new(cluster::shared().await)
        }
    }
}

slurm_core::backend_conformance!(slurm_backend, Slurm(harness()));
