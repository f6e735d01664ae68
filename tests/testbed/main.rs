//! Every test that needs the local test bed (`--features testbed`; `testbed/up` starts
//! it, and with the feature on the tests fail loudly, naming the fix, when it is down).
//!
//! One binary, one module per area. Its tests run on parallel threads against one
//! cluster, so each holds the gate of `slurm_run_testsupport::cluster` for its whole
//! body: shared, or exclusive for the scenarios that take the whole cluster
//! (`cluster_scenarios`).

mod backend;
mod backend_conformance;
mod cluster_scenarios;
mod code;
mod containers;
mod exactly_once;
mod examples;
mod half_open;
mod host_keys;
mod into_job;
mod pipelines;
mod poll_memo;
mod probe;
mod records;
mod releases;
mod render;
mod resume;
mod roles;
mod scripts;
mod slurmctl;
mod smoke;
mod ssh_faults;
mod testbed_scripts;
mod transports;
mod usage;
mod wall_time;
mod why;
