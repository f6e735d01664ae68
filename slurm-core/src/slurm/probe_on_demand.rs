//! `probe_nccl`, the probe on demand: one probe for jobs like a spec, submitted and
//! waited for, its first passing env cached for the cluster and shape. An operation
//! above the submit and the status step, which use the probe's steps in `probe/`.

use std::time::Instant;

use crate::backend::JobStatus;
use crate::nccl::{verdict_of, ProbeOptions, ProbeReport};
use crate::record::JobId;
use crate::slurm::context::Context;
use crate::slurm::preflight::cluster_name;
use crate::slurm::probe::{attempts_of, cache_pass, read_verdicts};
use crate::slurm::status::status_many;
use crate::slurm::submit::{plan_resources, submit_probe};
use crate::spec::JobSpec;
use crate::{Error, Result};

/// Run the NCCL probe for jobs like `spec` and wait for it (see
/// [`SlurmBackend::probe_nccl`](crate::slurm::SlurmBackend::probe_nccl)).
pub(crate) async fn probe_nccl(
    ctx: &Context<'_>,
    spec: &JobSpec,
    options: ProbeOptions,
) -> Result<ProbeReport> {
    let resources = plan_resources(ctx, spec).await?;
    let cluster = cluster_name(ctx).await?;
    let probe = submit_probe(ctx, spec, &resources, &options).await?;
    let status = wait_probe(ctx, &probe.id, &options).await?;
    let verdict = read_verdicts(ctx, std::slice::from_ref(&status.record))
        .await?
        .remove(0);
    let attempts = attempts_of(&status.record, &verdict, status.native.as_deref());
    let knobs = verdict_of(&cluster, &attempts)?;
    // The poll that saw the end cached it already; a second write is harmless.
    let cache_file = cache_pass(ctx, &cluster, &status.record, &knobs)?;
    Ok(ProbeReport {
        cluster,
        knobs,
        attempts,
        cache_file,
        job: status.record.id.clone(),
    })
}

/// Poll the probe `id` until it ends, or until `max_wait` (the probe keeps its place).
async fn wait_probe(ctx: &Context<'_>, id: &JobId, options: &ProbeOptions) -> Result<JobStatus> {
    let started = Instant::now();
    loop {
        match status_many(ctx, std::slice::from_ref(id)).await {
            Ok(mut statuses) => {
                let status = statuses.remove(0);
                if status.state().is_terminal() {
                    return Ok(status);
                }
            }
            Err(error) if error.is_transient() => {
                tracing::warn!(job = %id, %error, "polling the NCCL probe failed; retrying");
            }
            Err(error) => return Err(error),
        }
        if let Some(max) = options.max_wait {
            if started.elapsed() >= max {
                return Err(Error::Timeout {
                    what: format!(
                        "NCCL probe {id} (still queued or running; it keeps its place, and its result is cached when a later poll or submit sees it end)"
                    ),
                    after: max,
                    may_have_run: false,
                });
            }
        }
        tokio::time::sleep(options.poll_interval).await;
    }
}
