//! The NCCL probe and the per-cluster knob cache.
//!
//! Before a job that needs NCCL (more than one node, or more than one GPU per node) a
//! cheap all-reduce can run first, to catch a fabric that hangs. A probe job takes the
//! resources of the job it stands for (nodes, GPUs per node, partition, account,
//! image, mounts, env, extra sbatch lines) but not its command: it runs `torchrun`
//! over every GPU with a small all-reduce script of ours (`nccl_probe.py`; it travels
//! in the probe's environment and runs with `python3 -c`, so nothing has to be
//! mounted into the container), under `timeout <N>s`. Rank 0 prints `NCCL_PROBE_OK`
//! or `NCCL_PROBE_BAD sum=X expected=Y`; the wrapper prints `NCCL_PROBE_TIMEOUT` when
//! `timeout` fires. The outcome ([`ProbeOutcome`]) is read from those markers in the
//! probe's `main.out` and from the job's final state.
//!
//! On a hang the next rung of the knob ladder ([`default_ladder`]) is tried; the first
//! rung that passes is written to `<state_dir>/clusters/<ClusterName>.json`
//! ([`ClusterKnobs`], atomically: temporary file, fsync, rename, fsync of the folder).
//! Later submits add the cached env to the job's extra env (the spec's own values
//! win) and, under [`NcclProbe::Auto`], skip the probe.
//!
//! This module says what a probe is and decides from what it showed; it names no
//! scheduler. The SLURM backend runs probe jobs (`SlurmBackend::probe_nccl`, and its
//! submit hook, in [`crate::slurm`]). Probe jobs are ordinary records (exactly-once
//! submit, status, logs, cancel all apply) labelled [`PROBE_LABEL`]`=nccl`; the SLURM
//! backend's `records` leaves them out unless the filter asks for that label.

mod job;
mod knobs;
mod options;
mod outcome;

pub use job::PROBE_LABEL;
pub(crate) use job::{needs_nccl, probe_spec, MARKER_PATTERN};
pub use knobs::ClusterKnobs;
pub(crate) use knobs::{
    cluster_key, knobs_path, read_knobs, remove_knobs, write_knobs, KNOBS_SCHEMA_VERSION,
};
pub use options::{default_ladder, KnobSet, NcclProbe, ProbeOptions};
pub(crate) use outcome::{climb, probe_outcome, show_env, verdict};
pub use outcome::{ProbeAttempt, ProbeOutcome, ProbeReport};
