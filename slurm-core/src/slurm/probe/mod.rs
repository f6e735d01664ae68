//! The SLURM side of the NCCL probe. A submit that needs a probe queues the probe job
//! (the whole knob ladder in its one allocation) and the real job at once, the real job
//! held by the scheduler (`--dependency=afterok:<probe>`) and exporting the knobs the
//! probe writes to its job folder: nobody waits on a queue. When a poll sees a probe
//! end, its verdict is read: a pass is cached, anything else ends the jobs that waited
//! for it with the error that says why. The probe on demand (`probe_nccl`, one probe
//! submitted and waited for) is the operation `slurm::probe_on_demand` above these
//! steps: it submits and polls, and the submit and the status step use this module.
//!
//! | file | holds |
//! |---|---|
//! | `plan.rs` | what a submit does about NCCL for a job: nothing, cached knobs, or a probe (in flight, or new) |
//! | `verdicts.rs` | after a poll: the verdicts of probes that ended, read, cached, or ending their waiting jobs |

mod plan;
mod verdicts;

#[cfg(test)]
mod tests;

pub(super) use self::plan::{cached_knobs, candidates, decide, probe_job_spec, NcclNeed};
pub(super) use self::verdicts::{attempts_of, awaits_verdict, cache_pass, conclude, read_verdicts};
