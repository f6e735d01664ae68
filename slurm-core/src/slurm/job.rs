//! The SLURM job a record points at (its id and cluster, read from the record's neutral
//! native id), and `scancel` of such jobs when the record already says how they end.

use super::commands;
use super::context::Context;
use super::parse::SlurmJobId;
use crate::record::{BackendRef, JobRecord};
use crate::transport::round_trip;
use crate::{Error, Result};

/// A SLURM job: its cluster (`None`: the default one) and id (an array's own id).
pub(super) type SlurmJob = (Option<String>, SlurmJobId);

/// The SLURM job `record` points at, once the scheduler accepted it.
pub(super) fn slurm_job(record: &JobRecord) -> Result<Option<SlurmJob>> {
    record
        .backend_ref
        .as_ref()
        .map(slurm_job_of)
        .transpose()
        .map_err(|e| {
            Error::parse(
                format!("the SLURM job id of record {}", record.id),
                e.to_string(),
            )
        })
}

/// The SLURM job of a native reference.
pub(super) fn slurm_job_of(reference: &BackendRef) -> Result<SlurmJob> {
    Ok((
        reference.cluster.clone(),
        SlurmJobId::parse(&reference.native_id)?,
    ))
}

/// `scancel` `jobs` in one round trip, best effort: their records already say how they
/// ended (a dependency that can never hold, a failed probe, a refused job's probe), so
/// a failure is logged and the next poll sees the job again.
pub(super) async fn scancel_quietly(ctx: &Context<'_>, jobs: &[SlurmJob], why: &str) {
    if jobs.is_empty() {
        return;
    }
    let commands: Vec<_> = jobs
        .iter()
        .map(|(cluster, id)| commands::scancel(*id, cluster.as_deref()))
        .collect();
    let command = match commands.as_slice() {
        [one] => one.clone(),
        _ => round_trip::join(&commands),
    };
    if let Err(error) = ctx.transport().run(&command).await {
        tracing::warn!(%error, "cancelling {why} failed");
    }
}
