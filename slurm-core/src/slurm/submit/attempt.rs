//! The attempts of one submit: the staging archive and sbatch in one round trip
//! (`submit.sh`), each attempt counted in the record and fenced on the cluster before it
//! is sent; whenever the outcome is unknown, a settle by what the cluster says ([`reconcile`]) before anything
//! is sent again, and a new attempt only once the scheduler said there is no job.
//!
//! [`reconcile`]: crate::slurm::reconcile

use std::time::Duration;

use super::stage::Staged;
use crate::record::{BackendRef, JobId, JobRecord, Mark, TransitionSource};
use crate::redact::SecretRegistry;
use crate::slurm::context::Context;
use crate::slurm::images::{convert_image, Conversion, Converted};
use crate::slurm::parse::{parse_sbatch_parsable, SbatchOutcome};
use crate::slurm::reconcile::{settle_own, Applied, SBATCH_LIMIT};
use crate::slurm::scripts::{SubmitExit, SUBMIT};
use crate::state::JobState;
use crate::transport::Command;
use crate::{Error, Result};

/// How long one submit round trip may take.
const SUBMIT_TIMEOUT: Duration = Duration::from_secs(120);

/// The most sbatch attempts one submit makes (each only after the previous one was
/// settled as "no job" by the scheduler).
const MAX_ATTEMPTS: u32 = 3;

/// What the submit round trip said.
enum Answer {
    Submitted(BackendRef),
    ImageMissing(String),
    /// Unknown whether sbatch ran: settle.
    Unknown(String),
    /// Nothing ran and trying again may work (the connection failed before sending).
    NotSent(Error),
    /// Nothing ran and trying again will not help now (host key, authentication,
    /// configuration): the attempt never reached the scheduler.
    NeverSent(Error),
    /// A definite refusal (sbatch's, or a check before it); nothing was submitted.
    Refused(Error),
}

/// How the attempts ended, when no job was accepted.
#[derive(Debug)]
pub(crate) enum Failed {
    /// Nothing was submitted, for certain: the record is to end in `state` (ERROR for
    /// a refusal, NOT_SUBMITTED when the request never reached the scheduler).
    Refused { error: Error, state: JobState },
    /// A settle ended the record (no job after every attempt, or sbatch's refusal on
    /// disk): nothing was submitted.
    Settled(Error),
    /// The outcome stays unknown: the record stays SUBMITTING with what was seen.
    Unsettled(Error),
}

/// Send the attempts of the record `staged.record` (already opened) until the
/// scheduler accepted the job (the record is PENDING) or it is certain that nothing was
/// or will be submitted; `secrets` hide their values from what the record keeps.
pub(crate) async fn attempt(
    ctx: &Context<'_>,
    staged: &Staged,
    secrets: &SecretRegistry,
) -> std::result::Result<JobRecord, Failed> {
    let id = &staged.record.id;
    let mut attempt = 1u32;
    let mut accepted = format!("sbatch accepted the job{}", staged.note);
    // Every role's registry image is converted (or found converted) before the first send.
    convert_role_images(ctx, staged, &mut accepted).await?;
    let mut resent_unsent = false;
    // Every failure below comes while no attempt's outcome is unknown (the first
    // attempt, or one sent after a settle said "no job"): it ends the record. Once an
    // outcome is unknown, only the settle decides, and every error there leaves the
    // record SUBMITTING (the job may exist).
    let refused = |error: Error, state: JobState| Failed::Refused { error, state };
    loop {
        let command = submit_command(staged, attempt);
        let reason = match send(ctx, &command).await {
            Answer::Submitted(backend_ref) => {
                return mark_submitted(ctx, id, backend_ref, &accepted)
                    .await
                    .map_err(Failed::Unsettled)
            }
            Answer::Refused(error) => return Err(refused(error, JobState::Error)),
            Answer::NeverSent(error) => return Err(refused(error, JobState::NotSubmitted)),
            Answer::ImageMissing(detail) => {
                // Seen whole before (a check or a conversion), gone since: the next
                // submit converts it first.
                if let Some(image) = &staged.image {
                    ctx.facts()
                        .change(|facts| facts.sqsh_present.remove(image.as_str()));
                }
                return Err(refused(
                    Error::invalid(
                        "image",
                        format!("{detail}; submit again (a registry image is converted first), or stage a valid .sqsh (slurm-run never falls back to pulling a registry image inside the GPU allocation)"),
                    ),
                    JobState::Error,
                ));
            }
            Answer::NotSent(error) if !resent_unsent => {
                tracing::warn!(job = %id, %error, "submit not sent; trying once more");
                resent_unsent = true;
                continue;
            }
            Answer::NotSent(error) => return Err(refused(error, JobState::NotSubmitted)),
            Answer::Unknown(reason) => reason,
        };
        tracing::warn!(job = %id, attempt, %reason, "submit outcome unknown; settling it by what the cluster says");
        match settle_own(ctx, id, &reason, MAX_ATTEMPTS, secrets).await {
            Ok(Applied::Adopted(record)) => return Ok(record),
            Ok(Applied::Resend(next)) => {
                tracing::warn!(job = %id, attempt = next, "no job after an unknown outcome; sending attempt {next}");
                attempt = next;
                resent_unsent = false;
            }
            Ok(Applied::Ended { error, .. }) => return Err(Failed::Settled(error)),
            Ok(Applied::Unsettled { error, .. }) => return Err(Failed::Unsettled(error)),
            Ok(Applied::SettledElsewhere(record)) => {
                return Err(Failed::Unsettled(Error::invalid(
                    "state",
                    format!("{id} was settled elsewhere ({})", record.state),
                )))
            }
            Err(error) => return Err(Failed::Unsettled(error)),
        }
    }
}

/// Convert every role's registry image of `staged` (or find it converted), the note of
/// each conversion job added to `accepted`; a failed conversion refuses the submit.
async fn convert_role_images(
    ctx: &Context<'_>,
    staged: &Staged,
    accepted: &mut String,
) -> std::result::Result<(), Failed> {
    for conversion in &staged.role_conversions {
        match convert_image(ctx, conversion).await {
            Ok(done @ Converted::ByJob(_)) => {
                accepted.push_str(&conversion_note(conversion, &done))
            }
            Ok(Converted::Present) => {}
            Err(error) => {
                return Err(Failed::Refused {
                    error,
                    state: JobState::Error,
                })
            }
        }
    }
    Ok(())
}

/// The submit command of attempt `attempt`.
fn submit_command(staged: &Staged, attempt: u32) -> Command {
    let id = &staged.record.id;
    let mut params = vec![
        staged.root.clone(),
        id.as_str().to_string(),
        attempt.to_string(),
        SBATCH_LIMIT.as_secs().to_string(),
        staged.record.owner_token.clone().unwrap_or_default(),
    ];
    params.extend(staged.tail.iter().cloned());
    SUBMIT
        .command(params)
        .stdin(staged.payload.clone())
        .timeout(SUBMIT_TIMEOUT)
        .display_as(format!("submit {id}"))
}

/// Run one attempt and read its answer.
async fn send(ctx: &Context<'_>, command: &Command) -> Answer {
    let output = match ctx.transport().run(command).await {
        Ok(output) => output,
        Err(error) if error.may_have_run() => return Answer::Unknown(error.to_string()),
        Err(error) if error.is_transient() => return Answer::NotSent(error),
        // Host key, authentication, configuration: the request never left.
        Err(error) => return Answer::NeverSent(error),
    };
    let stdout = output.stdout_text();
    let stderr = output.stderr_text();
    match SubmitExit::from_status(output.status) {
        Some(SubmitExit::ChecksumMismatch) => Answer::NotSent(Error::Remote {
            command: command.label(),
            status: output.status,
            stderr: format!(
                "staged files failed their checksum check: {}",
                stderr.trim()
            ),
            transient: true,
        }),
        Some(SubmitExit::ImageMissing) => Answer::ImageMissing(stderr.trim().to_string()),
        Some(SubmitExit::DatasetsMissing) => Answer::Refused(Error::invalid(
            "datasets",
            format!(
                "{}; stage the data on shared storage first and give lustre:///absolute/path",
                stderr.trim()
            ),
        )),
        Some(SubmitExit::NoJobFolder | SubmitExit::UnpackFailed) => {
            Answer::Refused(Error::Remote {
                command: command.label(),
                status: output.status,
                stderr: format!("staging the job folder failed: {}", stderr.trim()),
                transient: false,
            })
        }
        // The attempt was made before (its answer is on disk) or fenced: settle.
        Some(SubmitExit::Fenced) => Answer::Unknown(stderr.trim().to_string()),
        // Another record's folder: every attempt of this record checks the claim before
        // anything else, so none reached it or sbatch.
        Some(SubmitExit::Claimed) => Answer::NeverSent(Error::invalid(
            "id",
            format!(
                "{}; submit the spec again (it gets a new id)",
                stderr.trim()
            ),
        )),
        None => match parse_sbatch_parsable(&stdout, &stderr) {
            Ok(SbatchOutcome::Submitted {
                job_id, cluster, ..
            }) => Answer::Submitted(BackendRef {
                native_id: job_id.to_string(),
                cluster,
            }),
            Ok(SbatchOutcome::Unknown { stderr }) => Answer::Unknown(format!(
                "sbatch exited {} without a job id: {stderr}",
                output.status
            )),
            // sbatch ended by itself with its reasons, and the scheduler answered.
            Err(error) if output.status != 0 && output.status < 124 && !error.is_transient() => {
                Answer::Refused(error)
            }
            Err(error) => Answer::Unknown(error.to_string()),
        },
    }
}

/// sbatch's own answer: the record is PENDING on `backend_ref`.
async fn mark_submitted(
    ctx: &Context<'_>,
    id: &JobId,
    backend_ref: BackendRef,
    message: &str,
) -> Result<JobRecord> {
    tracing::info!(job = %id, slurm_job_id = %backend_ref.native_id, "submitted");
    ctx.records()
        .mark(
            id,
            Mark::new(JobState::Pending, TransitionSource::Agent)
                .message(message)
                .backend_ref(backend_ref),
        )
        .await
}

/// What the PENDING mark says of a role's image the submit converted (or found
/// converted).
fn conversion_note(conversion: &Conversion, converted: &Converted) -> String {
    match converted {
        Converted::ByJob(job) => format!(
            "; image {} converted to {} by SLURM job {job}",
            conversion.image, conversion.path
        ),
        Converted::Present => format!(
            "; image {} found converted at {} (a concurrent submit made it)",
            conversion.image, conversion.path
        ),
    }
}
