//! The NCCL probe and the per-cluster knob cache.
//!
//! Before a job that needs NCCL (more than one node, or more than one GPU per node) a
//! cheap all-reduce can run first, to catch a fabric that hangs. A probe job takes the
//! resources of the job it stands for (nodes, GPUs per node, partition, account,
//! image, mounts, env, extra sbatch lines) but not its command. Its batch step runs the
//! whole knob ladder ([`default_ladder`]) in its one allocation (`probe_ladder.sh`):
//! each rung is one step on every node, in the job's container, running `torchrun`
//! over every GPU with a small all-reduce script of ours (`nccl_probe.py`; it travels
//! in the probe's environment and runs with `python3 -c`, so nothing has to be
//! mounted into the container), under its own `timeout`, with the rung's knobs and a
//! fresh rendezvous port. Rank 0 prints `NCCL_PROBE_OK` or `NCCL_PROBE_BAD sum=X
//! expected=Y`; a rung that says nothing in time hung, and the next rung is tried. The
//! ladder writes its verdict and the passing rung's knobs to the probe's job folder
//! (`nccl/verdict`, `nccl/knobs.env`) and exits 0 only when a rung passed.
//!
//! The job the probe stands for is submitted at the same time, waiting on the
//! scheduler for the probe's success (SLURM: `--dependency=afterok`) and exporting the
//! knobs the probe found before its own env (its own values win). No client waits on a
//! queue, and a long queue is never a failure. When the client sees the probe end it
//! reads the verdict ([`ProbeOutcome`] per rung): a pass is cached per cluster and
//! shape in `<state_dir>/clusters/<ClusterName>.json` ([`ClusterKnobs`]); anything else
//! ends the waiting jobs with the error that names the outcome and the remedy (and
//! the switch that skips the probe). Later submits add the cached env to the job's
//! extra env and, under [`NcclProbe::Auto`], skip the probe.
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

pub(crate) use job::is_probe_job;
#[cfg(any(test, feature = "testing"))]
pub(crate) use job::{default_probe_command, PROBE_LADDER};
pub(crate) use job::{needs_nccl, parse_shape, probe_spec, KNOBS_FILE, PROBE_DIR, VERDICT_FILE};
pub use job::{PROBE_LABEL, PROBE_SHAPE_LABEL, PROBE_VERDICT_LABEL};
pub(crate) use knobs::{cluster_key, knobs_path, read_knobs, record_knobs, remove_knobs};
pub use knobs::{ClusterKnobs, ShapeKnobs};
pub(crate) use options::{default_ladder, NcclProbe};
pub use options::{KnobSet, ProbeOptions};
pub(crate) use outcome::{ladder_outcomes, show_env, verdict_of};
pub use outcome::{ProbeAttempt, ProbeOutcome, ProbeReport};
