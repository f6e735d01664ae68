//! Submit exactly once. The flow, in order:
//! 1. **Request**: the spec (with the submit's `after`) validated, its secrets read by
//!    the one rule, the record it retries (a retry already made elsewhere is followed),
//!    its parents polled when their records say they run (one round trip: a record can
//!    be stale), then checked (each accepted by the scheduler, able to meet its
//!    condition, still known to it).
//! 2. **Plan** ([`SubmitPlan`], pure, computed once): partitions, resources, the image
//!    and its conversion, the array, the nodes to avoid; preflight once per backend
//!    before it, the conversion's gate after it (before anything is queued), and for a
//!    cold image its conversion job queued first (one in flight shared), which the job
//!    waits for on the scheduler ([`conversion`](super::conversion)).
//! 3. **NCCL**: the plan's need (see [`probe`](super::probe)): cached knobs, or a probe
//!    in flight to wait for, or a new probe, which this flow queues first; the job's
//!    `--dependency` from its parents still running and the probe.
//! 4. **Render** the batch script and lint it; **stage** the archive and the record.
//! 5. **Attempt**: the record opened under a submit lease, a retry claimed once, then
//!    stage + sbatch in one round trip; a lost answer is settled by the scheduler's
//!    answers only ([`reconcile`](super::reconcile)).
//!
//! | file | holds |
//! |---|---|
//! | `mod.rs` | the flow, `render_script`, and the probe's own submit |
//! | `plan.rs` | [`SubmitPlan`] |
//! | `script.rs` | the plan's `ScriptContext`, rendered and linted |
//! | `stage.rs` | the staging archive and the record to open |
//! | `attempt.rs` | the attempts, sbatch's answers, the conversion, the settle of a lost answer |

mod attempt;
mod code;
mod forecast;
mod plan;
mod script;
mod stage;

#[cfg(test)]
mod code_tests;
#[cfg(test)]
mod tests;

use self::attempt::{attempt, Failed};
use self::code::{send_code, StagedCode};
use self::plan::{resources_of, SubmitPlan};
use self::script::render;
use self::stage::stage;
use super::context::Context;
use super::conversion::{conversion_job_spec, in_flight};
use super::dependants::dependency_option;
use super::images::{gate_conversion, ImageNeed};
use super::job::{scancel_quietly, slurm_job};
use super::preflight::ensure_ready;
use super::probe::{self, NcclNeed};
use super::sidecars::forget;
use super::status::status_many;
use super::SlurmSubmitOptions;
use crate::backend::SubmitOptions;
use crate::code::{snapshot, CodeTree};
use crate::dependency::{check_before_submit, Attempts, Dependency, ResolvedDependency};
use crate::nccl::ProbeOptions;
use crate::record::{JobRecord, Mark, TransitionSource};
use crate::redact::SecretRegistry;
use crate::retry::{open_or_follow, prior, Prior};
use crate::spec::{JobSpec, Resources};
use crate::Result;

pub(super) use self::forecast::forecast;
pub(super) use self::script::job_view;
#[cfg(test)]
pub(crate) use self::stage::build_payload;

/// Submit `spec` (see the module's flow).
pub(super) async fn submit(
    ctx: &Context<'_>,
    spec: &JobSpec,
    options: SubmitOptions,
    slurm: SlurmSubmitOptions,
) -> Result<JobRecord> {
    // 1. Request.
    let spec = spec.with_after(&options.after);
    spec.validate()?;
    let secrets = options.secrets_for(&spec)?;
    let retry_of = options.retry_of.clone();
    let previous = match ctx
        .records()
        .run(move |store| prior(store, retry_of.as_ref()))
        .await?
    {
        Prior::Followed(winner) => return Ok(*winner),
        other => other.previous().cloned(),
    };
    refresh_parents(ctx, &spec.after).await?;
    let mut waiting = waiting_for(ctx, spec.after.clone()).await?;
    // The code tree, read now (a dirty or oversized tree is refused before anything
    // is asked of the cluster); a retry runs the tree its first attempt ran.
    let code = code_of(ctx, &spec, previous.as_ref()).await?;

    // 2. Plan.
    let root = ensure_ready(ctx, &spec).await?;
    let mut plan = SubmitPlan::new(
        spec,
        root,
        previous,
        !secrets.is_empty(),
        ctx.config(),
        ctx.facts(),
    )?;
    plan_images(ctx, &mut plan, &mut waiting).await?;
    plan.code = match code {
        Some(Code::Tree(tree)) => Some(send_code(ctx, &tree, &plan.root).await?),
        Some(Code::Kept(kept)) => Some(kept),
        None => None,
    };

    // 3. NCCL: the cluster's knobs, or a probe the job waits for (on the scheduler:
    // this submit never waits for it).
    let new_probe = plan_nccl(ctx, &mut plan, &slurm).await?;
    if let Some(probe) = &plan.probe {
        waiting.extend(waiting_for(ctx, vec![Dependency::ok(probe.id.clone())]).await?);
    }
    plan.dependency = dependency_option(&waiting)?;

    // 4-5. Render, stage, attempt.
    let submitted = submit_plan(ctx, plan, &secrets).await;
    if let (Err(Sent::Nothing(_)), Some(probe)) = (&submitted, &new_probe) {
        // Nothing was submitted: a probe queued for this job alone goes too.
        drop_probe(ctx, probe).await;
    }
    submitted.map_err(Sent::into_error)
}

/// Step 2's images: a cold image's conversion job queued first (or the one in flight
/// followed), added to what the job waits for in `waiting`; and each other role's
/// registry image (a multi-role job) gated here, to be converted before the first send.
async fn plan_images(
    ctx: &Context<'_>,
    plan: &mut SubmitPlan,
    waiting: &mut Vec<ResolvedDependency>,
) -> Result<()> {
    // A cold image: its conversion is queued first, as a job of its own the job waits
    // for (this submit never waits on the CPU partition's queue).
    if let Some(job) = conversion_needed(ctx, plan).await? {
        waiting.extend(waiting_for(ctx, vec![Dependency::ok(job.id.clone())]).await?);
        plan.conversion_job = Some(job);
    }
    // Each role's registry image (a multi-role job): gated here, converted before the
    // first send.
    let own = plan.conversion().map(|c| c.path.clone());
    for conversion in plan.conversions() {
        if Some(&conversion.path) != own.as_ref() {
            gate_conversion(ctx, conversion).await?;
        }
    }
    Ok(())
}

/// Step 3 of the flow: `plan` gets the cluster's cached NCCL knobs, or the probe it
/// waits for (one in flight, or one queued now for it). Answers the probe queued now,
/// if any: `submit` cancels it when nothing is submitted.
async fn plan_nccl(
    ctx: &Context<'_>,
    plan: &mut SubmitPlan,
    slurm: &SlurmSubmitOptions,
) -> Result<Option<JobRecord>> {
    let mut new_probe = None;
    let (nccl_spec, nccl_resources) = plan.nccl_shape();
    match probe::decide(ctx, nccl_spec, nccl_resources, slurm).await? {
        NcclNeed::Nothing => {}
        NcclNeed::Knobs(knobs) => plan.knobs = knobs,
        NcclNeed::Probe => match wait_for_probe(ctx, plan, slurm).await? {
            Probed::Knobs(knobs) => plan.knobs = knobs,
            Probed::InFlight(probe) => plan.probe = Some(probe),
            Probed::Queued(probe) => {
                new_probe = Some(probe.clone());
                plan.probe = Some(probe);
            }
        },
    }
    Ok(new_probe)
}

/// The dependencies of `after` still to wait for, each checked before a submit (see
/// [`check_before_submit`]).
async fn waiting_for(ctx: &Context<'_>, after: Vec<Dependency>) -> Result<Vec<ResolvedDependency>> {
    ctx.records()
        .run(move |store| check_before_submit(store, &after))
        .await
}

/// A submit's code: a tree to send, or the one the retried record ran.
enum Code {
    Tree(CodeTree),
    Kept(StagedCode),
}

/// The code of `spec`, if it has some: the tree the record it retries ran, else the
/// directory read now (off the runtime's threads: it hashes every file).
async fn code_of(
    ctx: &Context<'_>,
    spec: &JobSpec,
    previous: Option<&JobRecord>,
) -> Result<Option<Code>> {
    let Some(code) = spec.code.clone() else {
        return Ok(None);
    };
    if let Some(dir) = previous.and_then(|p| p.code_dir.as_deref()) {
        return Ok(Some(Code::Kept(StagedCode {
            dir: crate::storage::RemotePath::parse_for("code tree", dir)?,
            commit: previous.and_then(|p| p.code_commit.clone()),
            note: "the code tree of the attempt it retries".into(),
        })));
    }
    let limit = ctx.config().code_limit;
    let tree = tokio::task::spawn_blocking(move || snapshot(&code, limit))
        .await
        .map_err(|e| crate::Error::io("read the code tree", std::io::Error::other(e)))??;
    Ok(Some(Code::Tree(tree)))
}

/// Poll the latest attempts of the parents in `after` that the scheduler accepted and
/// that have not ended by their records, so the check that follows (and the
/// `--dependency` sbatch gets) reads them as the scheduler has them now: a record last
/// polled long ago may say RUNNING for a job that ended and was purged, whose id sbatch
/// then refuses. A parent the scheduler no longer knows at all is an error naming it.
async fn refresh_parents(ctx: &Context<'_>, after: &[Dependency]) -> Result<()> {
    if after.is_empty() {
        return Ok(());
    }
    let ids: Vec<_> = after.iter().map(|d| d.job.clone()).collect();
    let latest = ctx
        .records()
        .run(move |store| Attempts::read(store)?.latest(&ids))
        .await?;
    let mut live: Vec<_> = latest
        .values()
        .filter(|p| !p.state.is_terminal() && p.backend_ref.is_some())
        .map(|p| p.id.clone())
        .collect();
    live.sort();
    live.dedup();
    if live.is_empty() {
        return Ok(());
    }
    for status in status_many(ctx, &live).await? {
        if status.state() == crate::state::JobState::Unknown {
            return Err(crate::Error::invalid(
                "after",
                format!(
                    "the scheduler no longer knows SLURM job {} of parent {} (squeue, sacct and scontrol have no trace: it ended long ago and was purged, or its accounting is off); submit without that dependency, or after a parent the scheduler knows",
                    status.native_id().unwrap_or("?"),
                    status.id()
                ),
            ));
        }
    }
    Ok(())
}

/// How a submit of a plan failed.
enum Sent {
    /// Nothing was submitted, for certain.
    Nothing(crate::Error),
    /// The outcome is unknown: the record stays SUBMITTING.
    Unknown(crate::Error),
}

impl Sent {
    fn into_error(self) -> crate::Error {
        match self {
            Sent::Nothing(error) | Sent::Unknown(error) => error,
        }
    }
}

/// Render, stage and send `plan`: steps 4 and 5 of the flow.
async fn submit_plan(
    ctx: &Context<'_>,
    plan: SubmitPlan,
    secrets: &SecretRegistry,
) -> std::result::Result<JobRecord, Sent> {
    let records = ctx.records();
    let script = render(ctx, &plan, secrets).map_err(Sent::Nothing)?;
    let staged = stage(&plan, script, secrets).map_err(Sent::Nothing)?;
    let id = staged.record.id.clone();
    // The lease tells `status` elsewhere not to settle this record while it is submitted.
    let _lease = records.submit_lease(&id).await.map_err(Sent::Nothing)?;
    // A retry's record is opened with its claim in one step of the store: of replicas
    // racing to retry one record, one opens its record and submits, and the others
    // open nothing and answer the winner's record.
    let opened = records
        .run({
            let record = staged.record.clone();
            move |store| open_or_follow(store, &record)
        })
        .await
        .map_err(Sent::Nothing)?;
    if let Some(winner) = opened {
        return Ok(winner);
    }
    ctx.secrets().remember(&id, secrets);
    tracing::info!(job = %id, "record opened; submitting");
    let failed = match attempt(ctx, &staged, secrets).await {
        Ok(record) => return Ok(record),
        Err(failed) => failed,
    };
    let error = match failed {
        Failed::Refused { error, state } => {
            let message = secrets.redact(&error.to_string());
            let _ = records
                .mark(
                    &id,
                    Mark::new(state, TransitionSource::Agent)
                        .message(format!("submit failed: {message}")),
                )
                .await;
            error
        }
        Failed::Settled(error) => error,
        Failed::Unsettled(error) => return Err(Sent::Unknown(error)),
    };
    // Nothing was submitted: the staged secrets go now (or at the next status, if the
    // cluster cannot be reached).
    if staged.record.secrets_staged {
        if let Ok(record) = records.get(&id).await {
            forget(ctx, &[record]).await;
        }
    }
    Err(Sent::Nothing(error))
}

/// What a job that needs a probe waits for.
enum Probed {
    /// A probe passed meanwhile: its cached knobs.
    Knobs(crate::nccl::KnobSet),
    /// A probe already in flight for a covering shape and the same image.
    InFlight(JobRecord),
    /// A new probe, queued now for this job.
    Queued(JobRecord),
}

/// The probe a job of `plan` waits for: one in flight (polled first: it may have ended
/// meanwhile), or a new one. One decision at a time: concurrent submits share a probe.
async fn wait_for_probe(
    ctx: &Context<'_>,
    plan: &SubmitPlan,
    slurm: &SlurmSubmitOptions,
) -> Result<Probed> {
    let _once = ctx.locks().probe.lock().await;
    let (spec, resources) = plan.nccl_shape();
    let candidates = probe::candidates(ctx, spec, resources).await?;
    let in_flight = match candidates.is_empty() {
        true => None,
        false => status_many(ctx, &candidates)
            .await?
            .into_iter()
            .map(|s| s.into_record())
            .find(|r| !r.state.is_terminal()),
    };
    if let NcclNeed::Knobs(knobs) = probe::decide(ctx, spec, resources, slurm).await? {
        return Ok(Probed::Knobs(knobs));
    }
    if let Some(probe) = in_flight {
        tracing::info!(job = %plan.spec.name, probe = %probe.id, "waiting for the NCCL probe already in flight");
        return Ok(Probed::InFlight(probe));
    }
    let probe = submit_probe(ctx, spec, resources, &slurm.probe).await?;
    Ok(Probed::Queued(probe))
}

/// Submit the probe job standing for `spec` (needing `resources`): the whole ladder of
/// `options`, never probing itself.
pub(super) async fn submit_probe(
    ctx: &Context<'_>,
    spec: &JobSpec,
    resources: &Resources,
    options: &ProbeOptions,
) -> Result<JobRecord> {
    let probe_spec = probe::probe_job_spec(ctx, spec, resources, options)?;
    probe_spec.validate()?;
    let root = ensure_ready(ctx, &probe_spec).await?;
    let mut plan = SubmitPlan::new(probe_spec, root, None, false, ctx.config(), ctx.facts())?;
    if let Some(job) = conversion_needed(ctx, &plan).await? {
        let waiting = waiting_for(ctx, vec![Dependency::ok(job.id.clone())]).await?;
        plan.dependency = dependency_option(&waiting)?;
        plan.conversion_job = Some(job);
    }
    let rungs = options.ladder.as_ref().map_or(0, Vec::len);
    let record = submit_plan(ctx, plan, &SecretRegistry::new())
        .await
        .map_err(Sent::into_error)?;
    tracing::info!(probe = %record.id, rungs, "NCCL probe submitted");
    Ok(record)
}

/// The conversion job `plan`'s image waits for, when it must be converted first (the
/// gate passed): one in flight for the same `.sqsh`, or a new one queued now. One
/// decision at a time: concurrent first submits of an image share one conversion.
async fn conversion_needed(ctx: &Context<'_>, plan: &SubmitPlan) -> Result<Option<JobRecord>> {
    let Some(conversion) = plan.conversion() else {
        return Ok(None);
    };
    if gate_conversion(ctx, conversion).await? == ImageNeed::Present {
        return Ok(None);
    }
    let _once = ctx.locks().conversion.lock().await;
    if let Some(job) = in_flight(ctx, conversion).await? {
        tracing::info!(image = %conversion.image, conversion = %job.id, "waiting for the conversion already in flight");
        return Ok(Some(job));
    }
    let spec = conversion_job_spec(ctx.config(), conversion)?;
    spec.validate()?;
    let root = ensure_ready(ctx, &spec).await?;
    let job_plan = SubmitPlan::new(spec, root, None, false, ctx.config(), ctx.facts())?;
    let job = submit_plan(ctx, job_plan, &SecretRegistry::new())
        .await
        .map_err(Sent::into_error)?;
    tracing::info!(image = %conversion.image, conversion = %job.id, "image conversion queued on the CPU partition");
    Ok(Some(job))
}

/// Cancel a probe this submit queued for a job that was then refused (best effort: the
/// probe would only refresh the cache).
async fn drop_probe(ctx: &Context<'_>, probe: &JobRecord) {
    if let Some(job) = slurm_job(probe).ok().flatten() {
        scancel_quietly(ctx, &[job], "the NCCL probe of a refused job").await;
    }
}

/// `spec`'s resources as a submit would resolve them (after preflight, which learns the
/// partitions' limits).
pub(super) async fn plan_resources(ctx: &Context<'_>, spec: &JobSpec) -> Result<Resources> {
    spec.validate()?;
    ensure_ready(ctx, spec).await?;
    let partitions = ctx.config().partitions_for(spec);
    resources_of(spec, &partitions, ctx.config(), ctx.facts())
}

/// Render the script for `spec` as a submit would, without submitting (secrets are
/// named, never shown: the script only sources the sidecar). Cached NCCL knobs are
/// applied as a submit would; no probe runs.
pub(super) async fn render_script(ctx: &Context<'_>, spec: &JobSpec) -> Result<String> {
    spec.validate()?;
    let root = ensure_ready(ctx, spec).await?;
    render_under(ctx, spec, root).await
}

/// Render the script for `spec` (validated) under the results root `root`, as
/// [`render_script`] does once the cluster is known.
async fn render_under(
    ctx: &Context<'_>,
    spec: &JobSpec,
    root: crate::storage::RemotePath,
) -> Result<String> {
    let mut plan = SubmitPlan::new(
        spec.clone(),
        root,
        None,
        !spec.secrets.is_empty(),
        ctx.config(),
        ctx.facts(),
    )?;
    let (nccl_spec, nccl_resources) = plan.nccl_shape();
    plan.knobs = probe::cached_knobs(ctx, nccl_spec, nccl_resources).await?;
    render(ctx, &plan, &SecretRegistry::new())
}
