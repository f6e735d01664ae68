//! A registry image's conversion to a `.sqsh`, queued as a job of its own on the CPU
//! partition (`SLURM_CONVERT_PARTITION`), modelled on the NCCL probe: a submit of a
//! cold image queues the conversion and the GPU job at once, the GPU job held by the
//! scheduler (`--dependency=afterok:<conversion>`), so no submit waits on the CPU
//! partition's queue. Concurrent first submits of one image share the conversion in
//! flight. When a poll sees a conversion end without completing, what enroot said is
//! read and the jobs that waited for it end ERROR with that reason (and are cancelled on
//! the cluster): never a registry pull inside the GPU allocation.

use std::collections::{HashMap, HashSet};

use sha2::{Digest, Sha256};

use super::context::Context;
use super::images::{conversion_failure, Conversion};
use super::job::{slurm_job, SlurmJob};
use super::paths::log_folder;
use super::scripts::{ConvertExit, CONVERT_JOB, TAIL_LOGS};
use crate::classify::{ErrorClass, LOG_TAIL_LINES};
use crate::record::{JobId, JobRecord, Mark, RecordFilter, TransitionSource};
use crate::slurm::config::SlurmConfig;
use crate::spec::{JobSpec, NcclProbe, WallTime};
use crate::state::JobState;
use crate::transport::round_trip;
use crate::Result;

/// The label of an image conversion job's record (value `image`): such records are left
/// out of `records()` unless the filter asks for this label.
pub const CONVERSION_LABEL: &str = "slurm-run-conversion";

/// The label naming the `.sqsh` a conversion makes (a digest of its path).
const CONVERSION_OF_LABEL: &str = "slurm-run-conversion-of";

/// The label a conversion's record gets once its end was read (`converted`, `failed`).
const CONVERSION_VERDICT_LABEL: &str = "slurm-run-conversion-verdict";

/// The environment of the conversion job (what it converts, as asked and where to).
const ENV_URI: &str = "SLURM_RUN_CONVERT_URI";
const ENV_OUT: &str = "SLURM_RUN_CONVERT_OUT";
const ENV_MODE: &str = "SLURM_RUN_CONVERT_MODE";
const ENV_IMAGE: &str = "SLURM_RUN_CONVERT_IMAGE";
const ENV_REGISTRY: &str = "SLURM_RUN_CONVERT_REGISTRY";

/// The label value of a conversion to `path` (a safe name whatever the path).
fn conversion_of(path: &str) -> String {
    hex::encode(Sha256::digest(path.as_bytes()))[..16].to_string()
}

/// The conversion job of `conversion`: one node of the conversion partition, no GPUs,
/// 4 CPUs and 7200M for `enroot import`, the configured conversion time; its command is
/// `convert_job.sh`.
pub(crate) fn conversion_job_spec(
    config: &SlurmConfig,
    conversion: &Conversion,
) -> Result<JobSpec> {
    let uri = conversion
        .image
        .import_uri()
        .ok_or_else(|| crate::Error::invalid("image", "not a registry image; give a .sqsh path"))?;
    let mut spec = JobSpec::new("slurm-run-convert", CONVERT_JOB.full_text());
    spec.partition = Some(config.convert_partition.clone());
    spec.gpus = Some(0);
    spec.cpus_per_task = Some(4);
    spec.memory = Some("7200M".into());
    spec.time = Some(WallTime::from_minutes(u64::from(config.convert_minutes)));
    spec.requeue = Some(false);
    spec.nccl_probe = Some(NcclProbe::Never);
    let mode = if conversion.force { "force" } else { "reuse" };
    for (name, value) in [
        (ENV_URI, uri),
        (ENV_OUT, conversion.path.clone()),
        (ENV_MODE, mode.to_string()),
        (ENV_IMAGE, conversion.image.to_string()),
        (
            ENV_REGISTRY,
            conversion
                .image
                .registry()
                .unwrap_or("docker.io")
                .to_string(),
        ),
    ] {
        spec.env.insert(name.to_string(), value);
    }
    spec.labels
        .insert(CONVERSION_LABEL.to_string(), "image".to_string());
    spec.labels.insert(
        CONVERSION_OF_LABEL.to_string(),
        conversion_of(&conversion.path),
    );
    Ok(spec)
}

/// Whether `record` is a conversion job's.
fn is_conversion(record: &JobRecord) -> bool {
    record.labels.get(CONVERSION_LABEL).map(String::as_str) == Some("image")
}

/// A conversion to the same `.sqsh` already queued or running (not one that converts
/// again by request: a `:latest` asked anew gets its own), if any.
pub(crate) async fn in_flight(
    ctx: &Context<'_>,
    conversion: &Conversion,
) -> Result<Option<JobRecord>> {
    if conversion.force {
        return Ok(None);
    }
    let of = conversion_of(&conversion.path);
    Ok(ctx
        .records()
        .list_reported(
            &RecordFilter::any()
                .label(CONVERSION_LABEL, "image")
                .label(CONVERSION_OF_LABEL, of.as_str())
                .active(),
            "the image conversions in flight",
        )
        .await?
        .into_iter()
        .find(|r| r.backend_ref.is_some()))
}

/// What the ends of conversions did: the jobs that waited for a failed one, now ended,
/// and the SLURM jobs to cancel.
#[derive(Default)]
pub(crate) struct Concluded {
    pub(crate) ended: HashMap<JobId, JobRecord>,
    pub(crate) cancels: Vec<SlurmJob>,
}

/// Whether `record` is an image conversion that ended and whose end is not yet read (a
/// poll of it reads how it ended).
pub(crate) fn awaits_verdict(record: &JobRecord) -> bool {
    is_conversion(record)
        && record.state.is_terminal()
        && !record.labels.contains_key(CONVERSION_VERDICT_LABEL)
}

/// Read the end of every conversion among `records` that ended and was not read yet:
/// a completed one marks its image present; any other ends the jobs that wait for it
/// with what enroot said. A failure to read is logged and tried again by a later poll.
pub(crate) async fn conclude(ctx: &Context<'_>, records: &[&JobRecord]) -> Concluded {
    let mut seen = HashSet::new();
    let ended: Vec<JobRecord> = records
        .iter()
        .filter(|r| awaits_verdict(r) && seen.insert(r.id.clone()))
        .map(|r| (*r).clone())
        .collect();
    if ended.is_empty() {
        return Concluded::default();
    }
    match conclude_ended(ctx, &ended).await {
        Ok(concluded) => concluded,
        Err(error) => {
            tracing::warn!(%error, "reading the end of an image conversion failed; a later poll tries again");
            Concluded::default()
        }
    }
}

/// Read the end of each of `conversions` (ended, not read yet): a completed one marks
/// its image present, any other ends the jobs that wait for it; each is labelled read.
async fn conclude_ended(ctx: &Context<'_>, conversions: &[JobRecord]) -> Result<Concluded> {
    let store = ctx.records();
    let failed: Vec<&JobRecord> = conversions
        .iter()
        .filter(|r| r.state != JobState::Complete)
        .collect();
    let said = read_logs(ctx, &failed).await?;
    let waiting = match failed.is_empty() {
        true => Vec::new(),
        false => {
            ctx.records()
                .list_reported(
                    &RecordFilter::any().active(),
                    "the jobs waiting for an image conversion",
                )
                .await?
        }
    };
    let mut concluded = Concluded::default();
    for conversion in conversions {
        let env = |name: &str| {
            conversion
                .spec
                .as_ref()
                .and_then(|s| s.env.get(name).cloned())
                .unwrap_or_default()
        };
        let verdict = if conversion.state == JobState::Complete {
            ctx.facts()
                .change(|facts| facts.sqsh_present.insert(env(ENV_OUT)));
            "converted"
        } else {
            end_waiters(ctx, conversion, env, &said, &waiting, &mut concluded).await?;
            "failed"
        };
        store
            .update(&conversion.id, move |record| {
                record
                    .labels
                    .insert(CONVERSION_VERDICT_LABEL.to_string(), verdict.to_string());
                Ok(())
            })
            .await?;
    }
    Ok(concluded)
}

/// End ERROR the jobs among `waiting` that wait for the failed `conversion`, with what
/// enroot said of it (its tail in `said`, its spec's variables read by `env`); their
/// records and cancels are added to `concluded`.
async fn end_waiters(
    ctx: &Context<'_>,
    conversion: &JobRecord,
    env: impl Fn(&str) -> String,
    said: &HashMap<JobId, String>,
    waiting: &[JobRecord],
    concluded: &mut Concluded,
) -> Result<()> {
    let store = ctx.records();
    let text = said.get(&conversion.id).cloned().unwrap_or_default();
    let failure = conversion_failure(
        ConvertExit::ConvertFailed.status(),
        &text,
        &env(ENV_REGISTRY),
        &env(ENV_IMAGE),
        &ctx.config().convert_partition,
    );
    let job = conversion
        .backend_ref
        .as_ref()
        .map_or("?", |r| r.native_id.as_str());
    let how = conversion.last_message();
    for waiter in waiting
        .iter()
        .filter(|r| r.after.iter().any(|d| d.job == conversion.id))
    {
        let message = format!(
            "the conversion of its image it waited for (record {}, SLURM job {job}) ended {}: {}; remedy: {}; cancelled on the cluster",
            conversion.id,
            if how.is_empty() { conversion.state.to_string() } else { how.to_string() },
            failure.message,
            failure.remedy
        );
        let updated = store
            .mark(
                &waiter.id,
                Mark::new(JobState::Error, TransitionSource::Poll)
                    .message(message)
                    .err_class(ErrorClass::Program),
            )
            .await?;
        if let Some(native) = slurm_job(&updated)? {
            concluded.cancels.push(native);
        }
        concluded.ended.insert(waiter.id.clone(), updated);
    }
    Ok(())
}

/// The tails of the logs (main.out and main.err) of `conversions`, by record, in one
/// round trip (none when there are none).
async fn read_logs(
    ctx: &Context<'_>,
    conversions: &[&JobRecord],
) -> Result<HashMap<JobId, String>> {
    let mut owners = Vec::new();
    let mut commands = Vec::new();
    for conversion in conversions {
        let Some((_, job)) = slurm_job(conversion)? else {
            continue;
        };
        let folder = log_folder(conversion, job, None)?;
        commands.push(TAIL_LOGS.command([
            LOG_TAIL_LINES.to_string(),
            format!("{folder}/main.out"),
            format!("{folder}/main.err"),
        ]));
        owners.push(conversion.id.clone());
    }
    if commands.is_empty() {
        return Ok(HashMap::new());
    }
    let joined = round_trip::join(&commands)
        .display_as(format!("read {} image conversion log(s)", commands.len()));
    let parts = round_trip::split(&ctx.transport().run(&joined).await?, commands.len())?;
    Ok(owners
        .into_iter()
        .zip(parts)
        .map(|(id, part)| (id, part.stdout_text()))
        .collect())
}
