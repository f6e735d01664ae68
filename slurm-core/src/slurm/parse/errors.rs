//! Recognisers for the scheduler's error messages: transient failures worth a retry, unknown job ids, disabled accounting.

use crate::transport::{Command, Output};
use crate::{Error, Result};

/// What a scheduler error message says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum SchedulerError {
    /// slurmctld or slurmdbd did not answer (socket timeout, connection refused,
    /// controller unreachable, database trouble): retry later.
    Transient,
    /// `Invalid job id specified`: the scheduler does not know the id (finished long ago, or never existed).
    InvalidJobId,
    /// `Slurm accounting storage is disabled`: sacct cannot answer on this cluster;
    /// fall back to squeue and `scontrol show job`. Not transient.
    AccountingDisabled,
}

/// Lower-cased fragments that mark a transient scheduler failure.
pub(crate) const TRANSIENT_PATTERNS: &[&str] = &[
    "socket timed out",
    "connection refused",
    "unable to contact slurm controller",
    "slurmdbd:",
    "problem talking to the database",
    // Slurm's own wording in slurmctld and sacctmgr answers (no "the").
    "problem talking to database",
    "zero bytes were transmitted or received",
    "slurm temporarily unable to accept job",
    "communication connection failure",
    "backup controller in standby mode",
    "resource temporarily unavailable",
    "slurmctld not responding",
    // A login node mid-reconfigure: the tool could not read slurm.conf, so it asked nothing.
    "unable to process configuration file",
    // The controller (or the federation's database) could not be reached for the cluster.
    "could not get cluster information",
];

/// Lower-cased fragment of an unknown job id.
pub(crate) const INVALID_JOB_ID_PATTERN: &str = "invalid job id specified";

/// Lower-cased fragment of disabled accounting.
pub(crate) const ACCOUNTING_DISABLED_PATTERN: &str = "accounting storage is disabled";

/// What `stderr` (of squeue, sacct, scontrol, sbatch or scancel) says, if it is one
/// of the recognised messages. An unknown id wins over transient noise, and
/// disabled accounting wins over both (it is a fact of the cluster).
pub(crate) fn recognise_scheduler_error(stderr: &str) -> Option<SchedulerError> {
    let lower = stderr.to_ascii_lowercase();
    if lower.contains(ACCOUNTING_DISABLED_PATTERN) {
        Some(SchedulerError::AccountingDisabled)
    } else if lower.contains(INVALID_JOB_ID_PATTERN) {
        Some(SchedulerError::InvalidJobId)
    } else if TRANSIENT_PATTERNS.iter().any(|p| lower.contains(p)) {
        Some(SchedulerError::Transient)
    } else {
        None
    }
}

/// `output` of a scheduler tool run as `command`, or the error it reports: transient
/// when the scheduler could not be asked (retry with back-off), never a verdict.
pub(crate) fn checked(output: Output, command: &Command) -> Result<Output> {
    if output.success() {
        return Ok(output);
    }
    let stderr = output.stderr_text();
    Err(Error::Remote {
        command: command.label(),
        status: output.status,
        transient: is_transient_scheduler_error(&stderr),
        stderr: stderr.trim().chars().take(2000).collect(),
    })
}

/// Whether `stderr` shows a transient scheduler failure (retry later).
pub(crate) fn is_transient_scheduler_error(stderr: &str) -> bool {
    recognise_scheduler_error(stderr) == Some(SchedulerError::Transient)
}

/// Whether `stderr` says `Invalid job id specified`.
pub(crate) fn is_invalid_job_id(stderr: &str) -> bool {
    recognise_scheduler_error(stderr) == Some(SchedulerError::InvalidJobId)
}

/// Whether `stderr` says accounting storage is disabled.
pub(crate) fn is_accounting_disabled(stderr: &str) -> bool {
    recognise_scheduler_error(stderr) == Some(SchedulerError::AccountingDisabled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_each_message() {
        for transient in [
            "squeue: error: slurm_load_jobs error: Socket timed out on send/recv operation",
            "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation",
            "squeue: error: Unable to contact slurm controller (connect failure)",
            "sacct: error: slurm_persist_conn_open_without_init: failed to open persistent connection to host:localhost:6819: Connection refused",
            "sacct: error: slurmdbd: Getting response to message type: DBD_GET_JOBS_COND",
            "sacct: error: Problem talking to the database: Connection refused",
            "sacctmgr: error: Problem talking to database",
            "sbatch: error: Batch job submission failed: Problem talking to database",
            "scontrol: error: Zero Bytes were transmitted or received",
        ] {
            assert_eq!(
                recognise_scheduler_error(transient),
                Some(SchedulerError::Transient),
                "{transient}"
            );
            assert!(is_transient_scheduler_error(transient));
        }
        let invalid = "slurm_load_jobs error: Invalid job id specified";
        assert!(is_invalid_job_id(invalid));
        assert!(!is_transient_scheduler_error(invalid));
        let disabled = "sacct: error: Slurm accounting storage is disabled";
        assert!(is_accounting_disabled(disabled));
        assert!(!is_transient_scheduler_error(disabled));
        assert_eq!(
            recognise_scheduler_error("sbatch: error: invalid partition specified: nope"),
            None
        );
        assert_eq!(recognise_scheduler_error(""), None);
    }

    #[test]
    fn a_reconfiguring_login_node_and_an_unreachable_cluster_are_transient() {
        // Defect 13: these read as refusals (or were not recognised at all).
        for message in [
            "sbatch: fatal: Unable to process configuration file",
            "squeue: fatal: Unable to process configuration file",
            "scancel: fatal: Could not get cluster information",
        ] {
            assert_eq!(
                recognise_scheduler_error(message),
                Some(SchedulerError::Transient),
                "{message}"
            );
        }
    }
}
