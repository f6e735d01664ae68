//! What a submit does about NCCL for one job (see [`NcclProbe`]; the spec's
//! `nccl_probe` wins over the submit's option): nothing, the cluster's cached knobs for
//! its shape, or a probe to wait for: one in flight for a covering shape and the same
//! image, or a new one. Deciding never waits for a probe to run, and never submits:
//! the submit flow queues what the decision asks for.

use crate::nccl::{
    default_ladder, needs_nccl, parse_shape, probe_spec, read_knobs, KnobSet, NcclProbe,
    ProbeOptions, PROBE_LABEL, PROBE_SHAPE_LABEL,
};
use crate::record::{JobId, JobRecord, RecordFilter};
use crate::slurm::context::Context;
use crate::slurm::preflight::cluster_name;
use crate::slurm::SlurmSubmitOptions;
use crate::spec::{JobSpec, Resources};
use crate::Result;

/// What a submit does about NCCL for one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NcclNeed {
    /// Nothing: the job needs no NCCL, or the probe and the cache are off for it.
    Nothing,
    /// The cluster's cached knobs for the job's shape, added to its extra env.
    Knobs(KnobSet),
    /// A probe the job waits for: one in flight ([`candidates`]) or a new one
    /// ([`probe_job_spec`]).
    Probe,
}

/// What a submit of `spec` (needing `resources`) does about NCCL, from the knob cache
/// alone; call it again after polling the probes in flight (one may have passed).
pub(crate) async fn decide(
    ctx: &Context<'_>,
    spec: &JobSpec,
    resources: &Resources,
    options: &SlurmSubmitOptions,
) -> Result<NcclNeed> {
    let mode = spec.nccl_probe.unwrap_or(options.nccl_probe);
    if mode == NcclProbe::Never || spec.labels.contains_key(PROBE_LABEL) || !needs_nccl(resources) {
        return Ok(NcclNeed::Nothing);
    }
    let cached = cached_for(ctx, resources).await?;
    if mode == NcclProbe::Auto {
        // Without an image there is no container torchrun to probe with.
        if spec.image.is_none() {
            return Ok(NcclNeed::Knobs(cached.unwrap_or_default()));
        }
        if let Some(knobs) = cached {
            return Ok(NcclNeed::Knobs(knobs));
        }
    }
    Ok(NcclNeed::Probe)
}

/// The cached knobs a submit would add to `spec` (no probe): what `render_script`
/// shows.
pub(crate) async fn cached_knobs(
    ctx: &Context<'_>,
    spec: &JobSpec,
    resources: &Resources,
) -> Result<KnobSet> {
    if spec.nccl_probe == Some(NcclProbe::Never)
        || spec.labels.contains_key(PROBE_LABEL)
        || !needs_nccl(resources)
    {
        return Ok(KnobSet::new());
    }
    Ok(cached_for(ctx, resources).await?.unwrap_or_default())
}

/// The knobs cached for the cluster and a shape covering `resources`.
async fn cached_for(ctx: &Context<'_>, resources: &Resources) -> Result<Option<KnobSet>> {
    let cluster = cluster_name(ctx).await?;
    Ok(
        read_knobs(&ctx.config().state_dir, &cluster)?.and_then(|k| {
            k.for_shape(resources.nodes, resources.gpus_per_node)
                .map(|s| s.env.clone())
        }),
    )
}

/// The probes not yet ended, by their records, of the same image at a shape covering
/// `resources`: poll them, and wait for the first still in flight.
pub(crate) async fn candidates(
    ctx: &Context<'_>,
    spec: &JobSpec,
    resources: &Resources,
) -> Result<Vec<JobId>> {
    let covers = |record: &JobRecord| {
        let shape = record
            .labels
            .get(PROBE_SHAPE_LABEL)
            .and_then(|l| parse_shape(l));
        record.image == spec.image
            && shape.is_some_and(|(nodes, gpus)| {
                (resources.nodes <= 1 || nodes >= 2) && (resources.gpus_per_node <= 1 || gpus >= 2)
            })
    };
    Ok(ctx
        .records()
        .list_reported(
            &RecordFilter::any().label(PROBE_LABEL, "nccl").active(),
            "the NCCL probes in flight",
        )
        .await?
        .into_iter()
        .filter(|r| r.backend_ref.is_some() && covers(r))
        .map(|r| r.id)
        .collect())
}

/// The probe job standing for `spec` (its resources, image, mounts and env; not its
/// command): the whole ladder of `options` (or the cluster's default) in one allocation.
pub(crate) fn probe_job_spec(
    ctx: &Context<'_>,
    spec: &JobSpec,
    resources: &Resources,
    options: &ProbeOptions,
) -> Result<JobSpec> {
    let ladder = options
        .ladder
        .clone()
        .unwrap_or_else(|| default_ladder(&ctx.config().nccl_socket_ifname));
    probe_spec(spec, resources, options, &ladder)
}
