//! Settle submits whose outcome is unknown, by what the cluster says and nothing else.
//!
//! The rule: **only an answer from the scheduler settles a submit.** One round trip
//! (`settle.sh`) does three things for any number of records:
//! 1. *Fence* every sbatch attempt the record counted: an attempt that has not reached
//!    sbatch yet never will (its folder `.sbatch-N` is taken first), and an attempt that
//!    did left sbatch's own answer on disk (or is still running, bounded by its time
//!    limit). So a late upload can never create a job after the settle said there is none.
//! 2. Read the answers the attempts left (sbatch's printed id is the scheduler's answer).
//! 3. List the user's own jobs carrying each record's exact name, from squeue *and*
//!    sacct (an array by its tasks; sacct also by the ids known of the record). A tool
//!    that failed (controller or database unreachable, which is exactly when answers get
//!    lost) is "could not ask", never "no job".
//! 4. Read how far each listing can be trusted: `MinJobAge` (how long squeue keeps an
//!    ended job) and whether sacct lags behind slurmctld (its DBD agent queue).
//!
//! | file | holds |
//! |---|---|
//! | `mod.rs` | the round trip ([`ask`]), and the two callers' entry points: a submit settling its own lost answer ([`settle_own`]), a status settling what a dead or failed submit left ([`settle_left`]) |
//! | `answers.rs` | reading the round trip's three parts |
//! | `verdict.rs` | the pure verdict on one record |
//! | `apply.rs` | the one place a verdict changes a record |

mod answers;
mod apply;
mod verdict;

#[cfg(test)]
mod script_tests;
#[cfg(test)]
mod tests;

use std::time::{Duration, Instant};

use chrono::Utc;

use self::answers::read_answers;
use self::apply::{apply, Settler};
use self::verdict::{verdict, Verdict};
use super::context::Context;
use super::scripts::SETTLE;
use crate::record::{JobId, JobRecord, UnsettledKind};
use crate::redact::SecretRegistry;
use crate::state::JobState;
use crate::transport::round_trip;
use crate::Result;

pub(super) use self::apply::Applied;

/// A `SUBMITTING` record this old whose submit is not in progress (its lease is free)
/// is settled by `status`, `watch` and `cancel`: its submitter died or gave up.
pub const SETTLE_AFTER: Duration = Duration::from_secs(5);

/// For a store that cannot tell whether a submit is in progress: settle only records
/// this old (no submit runs this long).
const SETTLE_UNLEASED_AFTER: Duration = Duration::from_secs(600);

/// How long sbatch itself may run on the login node (`timeout` there): an attempt whose
/// answer was lost can still create a job only this long after it began (and a settle
/// calls an attempt that left no answer for longer dead).
pub(super) const SBATCH_LIMIT: Duration = Duration::from_secs(90);

/// How long a settle from `status` waits in all for attempts still running sbatch.
const STATUS_FENCE_WAIT: Duration = Duration::from_secs(5);

/// How long the settle inside a submit waits for an attempt still running sbatch.
const SUBMIT_FENCE_WAIT: Duration = Duration::from_secs(30);

/// How long a submit waits between two settles while the scheduler cannot answer.
const SUBMIT_SETTLE_PAUSE: Duration = Duration::from_secs(2);

/// One settle's answer for one record: the verdict, and whether the secrets sidecar
/// was removed (every attempt was fenced before sbatch).
#[derive(Debug)]
struct Settled {
    verdict: Verdict,
    secrets_removed: bool,
}

/// Settle `records` (all `SUBMITTING`) in one round trip, waiting at most `fence_wait`
/// for an attempt still running sbatch. Never fails: a round trip that could not be made
/// leaves every record [`Verdict::Unsettled`].
async fn ask(ctx: &Context<'_>, records: &[JobRecord], fence_wait: Duration) -> Vec<Settled> {
    if records.is_empty() {
        return Vec::new();
    }
    let names: Vec<String> = records.iter().map(|r| r.id.to_string()).collect();
    let mut list = String::new();
    for record in records {
        // The ids seen of it before: sacct is asked for them by id too.
        let known: Vec<&str> = record
            .candidates
            .iter()
            .filter(|c| c.cluster.is_none())
            .map(|c| c.native_id.as_str())
            .collect();
        list.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}\n",
            record.results_dir.as_str(),
            record.id,
            record.submit_attempts.unwrap_or(0),
            if known.is_empty() {
                "-".to_string()
            } else {
                known.join(",")
            },
            record.owner_token.as_deref().unwrap_or_default()
        ));
    }
    let oldest = records
        .iter()
        .map(|r| r.submitted_at)
        .min()
        .unwrap_or_else(Utc::now);
    // Two days of margin: the cluster's clock and time zone are not ours.
    let since = (oldest - chrono::Duration::days(2))
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string();
    let command = SETTLE
        .command([fence_wait.as_secs().max(1).to_string(), since])
        .stdin(list.into_bytes())
        .timeout(fence_wait + Duration::from_secs(90))
        .display_as(format!("settle {} submit(s)", records.len()));
    let parts = ctx
        .transport()
        .run(&command)
        .await
        .and_then(|output| round_trip::split(&output, 4));
    let parts = match parts {
        Ok(parts) => parts,
        Err(error) => {
            tracing::warn!(%error, "settle round trip failed; the records stay SUBMITTING");
            return records
                .iter()
                .map(|r| Settled {
                    verdict: Verdict::Unsettled {
                        seen: r.candidates.clone(),
                        why: format!(
                            "the outcome is unknown and the cluster could not be asked: {error}"
                        ),
                    },
                    secrets_removed: false,
                })
                .collect();
        }
    };
    let mut answers = read_answers(&names, &parts);
    let now = Utc::now();
    records
        .iter()
        .map(|record| {
            let answer = answers.remove(record.id.as_str()).unwrap_or_default();
            Settled {
                verdict: verdict(record, &answer, now),
                secrets_removed: answer.forgot,
            }
        })
        .collect()
}

/// Settle the submit of `id` whose answer was just lost (`reason`), for the submit
/// itself: fence and ask, again until the configured wait passes while the cluster
/// cannot answer. "No job" lets the submit send attempt N + 1 (counted here) while
/// fewer than `max_attempts` were sent, else ends the record NOT_SUBMITTED. `redactor`
/// holds the submit's secret values.
pub(super) async fn settle_own(
    ctx: &Context<'_>,
    id: &JobId,
    reason: &str,
    max_attempts: u32,
    redactor: &SecretRegistry,
) -> Result<Applied> {
    let deadline = Instant::now() + ctx.config().reconcile_wait;
    loop {
        let record = ctx.records().get(id).await?;
        let remaining = deadline.saturating_duration_since(Instant::now());
        let wait = remaining.clamp(Duration::from_secs(1), SUBMIT_FENCE_WAIT);
        let settled = ask(ctx, std::slice::from_ref(&record), wait)
            .await
            .pop()
            .expect("one answer per record");
        let give_up = Instant::now() >= deadline;
        let applied = apply(
            ctx,
            &record,
            settled,
            Settler::Submit {
                reason,
                max_attempts,
            },
            redactor,
        )
        .await?;
        match applied {
            Applied::Unsettled { record, .. } if !give_up && is_unanswered(&record) => {
                tracing::warn!(job = %id, why = %record.unsettled.as_ref().map(ToString::to_string).unwrap_or_default(), "submit not settled yet; asking again");
                tokio::time::sleep(SUBMIT_SETTLE_PAUSE).await;
            }
            other => return Ok(other),
        }
    }
}

/// Whether `record` waits for the scheduler's answer (not for a person).
fn is_unanswered(record: &JobRecord) -> bool {
    record
        .unsettled
        .as_ref()
        .is_some_and(|u| u.kind == UnsettledKind::Unanswered)
}

/// Settle the `SUBMITTING` records among `records` whose submit is not in progress and
/// that are at least `settle_after` old (their submitter died or gave up), in one round
/// trip; `records` are replaced by what the store holds afterwards.
pub(super) async fn settle_left(
    ctx: &Context<'_>,
    records: &mut [JobRecord],
    settle_after: Duration,
) -> Result<()> {
    let store = ctx.records();
    let now = Utc::now();
    let mut chosen: Vec<JobRecord> = Vec::new();
    for record in records.iter() {
        if record.state != JobState::Submitting
            || record.backend_ref.is_some()
            || chosen.iter().any(|c| c.id == record.id)
        {
            continue;
        }
        let age = now
            .signed_duration_since(record.submitted_at)
            .to_std()
            .unwrap_or_default();
        let eligible = match store.submit_in_progress(&record.id).await? {
            Some(true) => false,
            Some(false) => age >= settle_after,
            None => age >= SETTLE_UNLEASED_AFTER.max(settle_after),
        };
        if eligible {
            chosen.push(record.clone());
        }
    }
    if chosen.is_empty() {
        return Ok(());
    }
    let settled = ask(ctx, &chosen, STATUS_FENCE_WAIT).await;
    for (record, settled) in chosen.iter().zip(settled) {
        let redactor = ctx.secrets().redactor_for(record);
        let fresh = match apply(ctx, record, settled, Settler::Status, &redactor).await? {
            Applied::Adopted(record)
            | Applied::Ended { record, .. }
            | Applied::Unsettled { record, .. }
            | Applied::SettledElsewhere(record) => record,
            // Only a submit resends; a status ends such a record.
            Applied::Resend(_) => store.get(&record.id).await?,
        };
        for slot in records.iter_mut().filter(|r| r.id == record.id) {
            *slot = fresh.clone();
        }
    }
    Ok(())
}
