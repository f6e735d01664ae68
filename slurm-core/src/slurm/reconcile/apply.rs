//! The one place a verdict changes a record: adopt the job (PENDING), count another
//! attempt, end the record (NOT_SUBMITTED, or ERROR for a refusal), or keep it
//! `SUBMITTING` with the jobs seen and a typed [`Unsettled`] state.

use super::verdict::Verdict;
use super::Settled;
use crate::record::{BackendRef, JobRecord, Mark, TransitionSource, Unsettled};
use crate::redact::SecretRegistry;
use crate::slurm::context::Context;
use crate::state::JobState;
use crate::{Error, Result};

/// Who settles, which decides what "no job" leads to.
pub(super) enum Settler<'a> {
    /// The submit whose answer was lost (`reason`): "no job" lets it send another
    /// attempt while fewer than `max_attempts` were sent.
    Submit { reason: &'a str, max_attempts: u32 },
    /// A status (or watch, or cancel) settling what a dead or failed submit left:
    /// "no job" ends the record.
    Status,
}

impl Settler<'_> {
    /// The source of the transitions this settler marks.
    fn source(&self) -> TransitionSource {
        match self {
            Settler::Submit { .. } => TransitionSource::Agent,
            Settler::Status => TransitionSource::Poll,
        }
    }

    /// What the records this settler settles say of the settle.
    fn context(&self) -> String {
        match self {
            Settler::Submit { reason, .. } => format!("its submit's outcome was unknown: {reason}"),
            Settler::Status => "settled after its submit was left unsettled".to_string(),
        }
    }
}

/// What a verdict did to a record.
#[derive(Debug)]
pub(crate) enum Applied {
    /// The one job carrying the record's name is adopted: the record is PENDING.
    Adopted(JobRecord),
    /// The scheduler has no job and none can appear any more: the submit may send
    /// attempt N (counted in the record already).
    Resend(u32),
    /// The record ended (NOT_SUBMITTED, or ERROR for a refusal); `error` says why.
    Ended { record: JobRecord, error: Error },
    /// The record stays SUBMITTING, with every job seen and why ([`Unsettled`]).
    Unsettled { record: JobRecord, error: Error },
    /// Someone else settled it meanwhile: what they found.
    SettledElsewhere(JobRecord),
}

/// Apply `settled` to `record` (as read before the settle); `redactor` hides secret
/// values from every word kept.
pub(super) async fn apply(
    ctx: &Context<'_>,
    record: &JobRecord,
    settled: Settled,
    settler: Settler<'_>,
    redactor: &SecretRegistry,
) -> Result<Applied> {
    let store = ctx.records();
    let id = &record.id;
    if settled.secrets_removed {
        store
            .update(id, move |r| {
                r.secrets_staged = false;
                Ok(())
            })
            .await?;
    }
    let source = settler.source();
    let applied = match settled.verdict {
        Verdict::Adopt(job) => adopt(ctx, id, job, source, &settler, redactor).await,
        Verdict::NoJob(why) => no_job(ctx, record, why, settler, source, redactor).await,
        Verdict::Foreign(why) => {
            let error = Error::invalid(
                "id",
                format!("{id}: {why}; submit the spec again (it gets a new id)"),
            );
            never_reached(ctx, id, source, &why, error).await
        }
        Verdict::Refused(error) => store
            .mark(
                id,
                Mark::new(JobState::Error, source).message(format!(
                    "sbatch refused the job: {}",
                    redactor.redact(&error.to_string())
                )),
            )
            .await
            .map(|record| Applied::Ended { record, error }),
        Verdict::Several(jobs) => {
            let list: Vec<String> = jobs.iter().map(ToString::to_string).collect();
            let why = format!(
                "{} SLURM jobs carry its name ({}); a person decides which to keep (scancel the others; `cancel` cancels them all)",
                jobs.len(),
                list.join(", ")
            );
            let error = Error::Ambiguous(format!("{id}: {why}"));
            keep_unsettled(ctx, id, &jobs, Unsettled::several_jobs(why))
                .await
                .map(|record| Applied::Unsettled { record, error })
        }
        Verdict::Unsettled { seen, why } => {
            let why = redactor.redact(&why);
            let error = Error::Ambiguous(format!(
                "the submit of {id} is not settled yet ({}): {why}. The record stays SUBMITTING; `status` settles it once the cluster answers",
                redactor.redact(&settler.context())
            ));
            keep_unsettled(ctx, id, &seen, Unsettled::unanswered(why))
                .await
                .map(|record| Applied::Unsettled { record, error })
        }
    };
    match applied {
        // Settled meanwhile by someone else: keep what they found.
        Err(Error::InvalidTransition { .. }) => Ok(Applied::SettledElsewhere(store.get(id).await?)),
        other => other,
    }
}

/// Adopt `job` as `id`'s (the one job carrying its name): the record is PENDING, its
/// message saying which `settler` adopted it, redacted by `redactor`.
async fn adopt(
    ctx: &Context<'_>,
    id: &crate::record::JobId,
    job: BackendRef,
    source: TransitionSource,
    settler: &Settler<'_>,
    redactor: &SecretRegistry,
) -> Result<Applied> {
    let store = ctx.records();
    tracing::info!(job = %id, slurm_job_id = %job.native_id, "adopted");
    store
        .mark(
            id,
            Mark::new(JobState::Pending, source)
                .message(format!(
                    "adopted: SLURM job {job} carries its name ({})",
                    redactor.redact(&settler.context())
                ))
                .backend_ref(job),
        )
        .await
        .map(Applied::Adopted)
}

/// Apply "no job" (`why`) to `record`: a submit's `settler` sends another attempt while
/// fewer than its most were sent; else the record ends NOT_SUBMITTED.
async fn no_job(
    ctx: &Context<'_>,
    record: &JobRecord,
    why: String,
    settler: Settler<'_>,
    source: TransitionSource,
    redactor: &SecretRegistry,
) -> Result<Applied> {
    let id = &record.id;
    let sent = record.submit_attempts.unwrap_or(0);
    match settler {
        Settler::Submit { max_attempts, .. } if sent < max_attempts => {
            count_attempt(ctx, id, sent + 1)
                .await
                .map(|()| Applied::Resend(sent + 1))
        }
        _ => {
            let why = redactor.redact(&why);
            let error = Error::Remote {
                command: format!("submit {id}"),
                status: 0,
                stderr: format!(
                    "{sent} attempt(s) had an unknown outcome and the scheduler has no job named {id} ({why}); check the connection and submit again"
                ),
                transient: true,
            };
            never_reached(ctx, id, source, &why, error).await
        }
    }
}

/// End `id` NOT_SUBMITTED (its submit never reached the scheduler, `why`), answering
/// `error`.
async fn never_reached(
    ctx: &Context<'_>,
    id: &crate::record::JobId,
    source: TransitionSource,
    why: &str,
    error: Error,
) -> Result<Applied> {
    ctx.records()
        .mark(
            id,
            Mark::new(JobState::NotSubmitted, source).message(format!(
                "never reached the scheduler: {why}; submit it again"
            )),
        )
        .await
        .map(|record| Applied::Ended { record, error })
}

/// Count attempt `attempt` before it is sent; refused when the record was settled
/// elsewhere meanwhile.
async fn count_attempt(ctx: &Context<'_>, id: &crate::record::JobId, attempt: u32) -> Result<()> {
    let id = id.clone();
    let settled = id.clone();
    ctx.records()
        .update(&settled, move |record| {
            if record.state != JobState::Submitting {
                return Err(Error::invalid(
                    "state",
                    format!("{id} was settled elsewhere ({})", record.state),
                ));
            }
            record.submit_attempts = Some(attempt);
            Ok(())
        })
        .await?;
    Ok(())
}

/// Keep `seen` and `why` in a record that stays `SUBMITTING`.
async fn keep_unsettled(
    ctx: &Context<'_>,
    id: &crate::record::JobId,
    seen: &[BackendRef],
    why: Unsettled,
) -> Result<JobRecord> {
    let seen = seen.to_vec();
    ctx.records()
        .update(id, move |record| {
            for job in &seen {
                if !record.candidates.contains(job) {
                    record.candidates.push(job.clone());
                }
            }
            record.unsettled = Some(why.clone());
            Ok(())
        })
        .await
}
