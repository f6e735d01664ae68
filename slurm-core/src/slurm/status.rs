//! Status of any number of jobs: one poll, then every step that follows from what it
//! saw, in this fixed order:
//! 1. **Stale submits**: `SUBMITTING` records a dead or failed submit left (lease free,
//!    a few seconds old) are settled first ([`reconcile`](super::reconcile)).
//! 2. **Parents**: the latest attempts of the parents of dependants still waiting are
//!    observed too (whether each had ended before this poll is kept).
//! 3. **Poll** ([`poll`](super::poll)): squeue + sacct for every job in one round trip
//!    (scontrol for jobs neither knows).
//! 4. **Follow-ups and secrets**: the logs' tails and `status.json` the decisions need,
//!    and the removal of the secrets of jobs ending now (and of ended ones whose removal
//!    failed before; an array's once the array has ended), in one more round trip.
//! 5. **Record** the marks.
//! 6. **Probes and conversions**: the verdicts of NCCL probes that ended
//!    ([`probe`](super::probe)), and the ends of image conversions
//!    ([`conversion`](super::conversion)); a failed one ends the jobs waiting for it.
//! 7. **Dependants**: a dependant whose parent can never meet its condition, and whose
//!    parent's end was known before this poll (one poll of grace for a retry), ends
//!    ERROR; one whose parent was retried follows the retry
//!    ([`dependants`](super::dependants)).
//! 8. **Cancels**: the jobs steps 5-7 ended that still wait on the cluster, one `scancel`
//!    round trip.
//! 9. **Secrets** of the records steps 6-7 ended.
//!
//! A poll of the same jobs as the backend's last *quiet* poll (one that wrote nothing
//! and needed nothing but squeue's rows), with the store at the same revision, first
//! asks the login node whether squeue's rows changed since: when they did not, it
//! answers what that poll answered, having read no record and parsed no row
//! ([`memo`](super::context::poll_memo::PollMemo)); when they did, the same round trip answered in
//! full and the steps above run on it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use super::context::poll_memo::{Held, MemoGuard};
use super::context::Context;
use super::conversion::{awaits_verdict as awaits_conversion, conclude as conclude_conversions};
use super::dependants::{follow_retries, next_step, DependantStep};
use super::job::{scancel_quietly, SlurmJob};
use super::poll::{observe_jobs, poll_again, Again, MemoUse, Observed, MINE_FROM};
use super::probe::{awaits_verdict, conclude};
use super::reconcile::{settle_left, SETTLE_AFTER};
use super::sidecars::{forget, forget_commands, forgotten, note_forgotten};
use crate::backend::{JobStatus, NativeStatus};
use crate::dependency::Attempts;
use crate::nccl::PROBE_LABEL;
use crate::record::{JobId, JobRecord};
use crate::state::JobState;
use crate::Result;

/// The status of `ids`, in their order (see the module's steps); `SUBMITTING` records
/// a submit left are settled once [`SETTLE_AFTER`] old.
pub(super) async fn status_many(ctx: &Context<'_>, ids: &[JobId]) -> Result<Vec<JobStatus>> {
    status_settling(ctx, ids, SETTLE_AFTER).await
}

/// [`status_many`], settling `SUBMITTING` records whose submit is not in progress once
/// they are `settle_after` old.
pub(super) async fn status_settling(
    ctx: &Context<'_>,
    ids: &[JobId],
    settle_after: Duration,
) -> Result<Vec<JobStatus>> {
    let store = ctx.records();
    // The memo, for a poll that may ask for the user's own jobs: the store's revision
    // read before the records (a write between the two costs a full poll).
    let revision = match ids.len() >= MINE_FROM {
        true => store.revision().await?,
        false => None,
    };
    let mut memo = revision.and(ctx.poll_memo().try_take());
    let memo_use = match ask_memo(ctx, ids, revision, &mut memo).await? {
        ControlFlow::Continue(memo_use) => memo_use,
        ControlFlow::Break(statuses) => return Ok(statuses),
    };

    // Each record is read once per poll: a poll of 10,000 jobs reads 10,000 files.
    let mut records: Vec<JobRecord> = store.get_many(ids).await?;
    // Whether this poll depends on nothing but the records and squeue's rows, so far.
    let mut quiet = !records.iter().any(|r| r.state == JobState::Submitting);

    // 1. Stale submits.
    settle_left(ctx, &mut records, settle_after).await?;

    // 2. Parents of dependants still waiting.
    let (mut attempts, parents, ended_before, waits) =
        parents_of_waiting(ctx, ids, &mut records).await?;

    quiet &= !waits && parents.is_empty();

    // 3. Poll.
    let mut observed = observe_jobs(ctx, records, memo_use).await?;
    let kept = observed.kept().cloned();

    // 4. Follow-ups, and the secrets of jobs that have ended, in one round trip.
    quiet &= follow_up_and_forget(ctx, &mut observed).await?;

    // 5. Record.
    let (mut statuses, mut cancels) = observed.record(ctx).await?;

    // 6. Probes that ended (polled now, or parents that ended before).
    quiet &=
        conclude_probes_and_conversions(ctx, &mut statuses, &parents, &mut attempts, &mut cancels)
            .await;
    statuses.truncate(ids.len());

    // 7. Dependants, their parents as this poll left them.
    let (follow, ended) =
        step_dependants(ctx, &mut statuses, &attempts, &ended_before, &mut cancels).await?;

    // 8. Cancels.
    quiet &= cancels.is_empty() && follow.is_empty() && ended.is_empty();
    scancel_quietly(ctx, &cancels, "jobs that can never run").await;

    // 9. Secrets of the records ended in steps 6-7.
    forget_ended(ctx, &ended, &mut statuses).await?;

    // The memo: a quiet poll that wrote nothing is held for the next poll of these ids.
    if let (Some(guard), Some(revision), Some((slot, request)), true) =
        (memo.as_mut(), revision, kept, quiet)
    {
        if store.revision().await? == Some(revision) {
            **guard = Some(Held::new(ids, revision, slot, request, statuses.clone()));
        }
    }
    Ok(statuses)
}

/// What this poll of `ids` uses of the `memo` taken at `revision`: when it holds a poll
/// of the same ids and squeue's rows did not change since, the statuses that poll
/// answered (`Break`, the memo kept); else what the script is asked, and the full
/// answer of the held request sent again when its rows had changed (`Continue`, the
/// memo emptied).
async fn ask_memo(
    ctx: &Context<'_>,
    ids: &[JobId],
    revision: Option<u64>,
    memo: &mut Option<MemoGuard<'_>>,
) -> Result<ControlFlow<Vec<JobStatus>, MemoUse>> {
    let mut answered = None;
    if let (Some(guard), Some(revision)) = (memo.as_mut(), revision) {
        if let Some(held) = guard.as_ref().filter(|h| h.answers(ids, revision)) {
            match poll_again(ctx, held, ids.len()).await? {
                Again::Unchanged => return Ok(ControlFlow::Break(held.statuses().to_vec())),
                Again::Changed(answer) => answered = Some(answer),
                // A new shell: a full poll, its lists sent.
                Again::Lost => {}
            }
        }
        // Held again only if this poll is quiet too.
        **guard = None;
    }
    Ok(ControlFlow::Continue(MemoUse {
        ask: memo.as_ref().map(|_| ctx.poll_memo().ask(None)),
        answered,
    }))
}

/// The latest attempts of the parents of the dependants in `records` still waiting
/// (step 2), those not ended added to `records`: the store's attempts (listed once, and
/// only when a dependant waits), the parents, the ids of those that had ended before
/// this poll, and whether a dependant waits.
async fn parents_of_waiting(
    ctx: &Context<'_>,
    ids: &[JobId],
    records: &mut Vec<JobRecord>,
) -> Result<(Attempts, HashMap<JobId, JobRecord>, HashSet<JobId>, bool)> {
    let store = ctx.records();
    let mut parent_ids: Vec<JobId> = Vec::new();
    for record in records.iter() {
        if !record.state.is_terminal() {
            parent_ids.extend(record.after.iter().map(|d| d.job.clone()));
        }
    }
    // The store is listed once per poll, and only when a dependant waits: every
    // dependant's parents are resolved in that one listing (steps 2 and 7).
    let waits = records
        .iter()
        .any(|r| !r.state.is_terminal() && !r.after.is_empty());
    let attempts = if waits {
        store.run(|store| Attempts::read(store)).await?
    } else {
        Attempts::default()
    };
    let parents = attempts.latest(&parent_ids).unwrap_or_default();
    let ended_before: HashSet<JobId> = parents
        .values()
        .filter(|p| p.state.is_terminal())
        .map(|p| p.id.clone())
        .collect();
    let mut present: HashSet<JobId> = if parents.is_empty() {
        HashSet::new()
    } else {
        ids.iter().cloned().collect()
    };
    for parent in parents.values() {
        if !parent.state.is_terminal() && present.insert(parent.id.clone()) {
            records.push(parent.clone());
        }
    }
    Ok((attempts, parents, ended_before, waits))
}

/// Sends the follow-ups `observed` needs with the removal of the secrets of its jobs
/// that have ended (step 4), in one round trip, and refreshes the records whose secrets
/// are gone; whether there was no secret to remove.
async fn follow_up_and_forget(ctx: &Context<'_>, observed: &mut Observed) -> Result<bool> {
    let forget_now: Vec<JobRecord> = observed
        .records()
        .iter()
        .enumerate()
        .filter(|(index, record)| {
            record.secrets_staged
                && (record.state.is_terminal() || (!record.is_array() && observed.ends(*index)))
        })
        .map(|(_, record)| record.clone())
        .collect();
    let quiet = forget_now.is_empty();
    let forget_refs: Vec<&JobRecord> = forget_now.iter().collect();
    let answers = observed
        .follow_up(ctx, forget_commands(&forget_refs))
        .await?;
    let gone = forgotten(&forget_refs, &answers);
    for record in note_forgotten(ctx, gone).await? {
        observed.refresh(record);
    }
    Ok(quiet)
}

/// Concludes the NCCL probes and the image conversions that ended among `statuses` and
/// the `parents` that ended before (step 6): the records they ended replace theirs in
/// `statuses`, their cancels are added to `cancels`, and `attempts` is refreshed with
/// every status; whether none of them awaited a verdict.
async fn conclude_probes_and_conversions(
    ctx: &Context<'_>,
    statuses: &mut [JobStatus],
    parents: &HashMap<JobId, JobRecord>,
    attempts: &mut Attempts,
    cancels: &mut Vec<SlurmJob>,
) -> bool {
    // Only a probe's verdict reads what the scheduler said of it.
    let natives: BTreeMap<JobId, NativeStatus> = statuses
        .iter()
        .filter(|s| s.record.labels.contains_key(PROBE_LABEL))
        .filter_map(|s| Some((s.record.id.clone(), NativeStatus::clone(s.native.as_ref()?))))
        .collect();
    let candidates: Vec<&JobRecord> = statuses
        .iter()
        .map(|s| &*s.record)
        .chain(parents.values().filter(|p| p.state.is_terminal()))
        .collect();
    let quiet = !candidates
        .iter()
        .any(|r| awaits_verdict(r) || awaits_conversion(r));
    let mut concluded = conclude(ctx, &candidates, &natives).await;
    cancels.append(&mut concluded.cancels);
    // Image conversions that ended: a failed one ends the jobs waiting for it.
    let mut converted = conclude_conversions(ctx, &candidates).await;
    cancels.append(&mut converted.cancels);
    for status in statuses.iter_mut() {
        if let Some(record) = concluded.ended.remove(&status.record.id) {
            status.record = Arc::new(record);
        }
        if let Some(record) = converted.ended.remove(&status.record.id) {
            status.record = Arc::new(record);
        }
    }
    for status in statuses.iter() {
        attempts.refresh(&status.record);
    }
    quiet
}

/// Takes the next step of each dependant in `statuses` still waiting, its parents as
/// this poll left them (step 7): one that ends replaces its record in `statuses` and
/// adds its job to `cancels`, and those whose parent was retried follow the retry; the
/// dependants that followed a retry, and those that ended.
async fn step_dependants(
    ctx: &Context<'_>,
    statuses: &mut [JobStatus],
    attempts: &Attempts,
    ended_before: &HashSet<JobId>,
    cancels: &mut Vec<SlurmJob>,
) -> Result<(Vec<JobRecord>, Vec<JobRecord>)> {
    let mut follow = Vec::new();
    let mut ended = Vec::new();
    for status in statuses.iter_mut() {
        let record = &status.record;
        if record.state.is_terminal() || record.after.is_empty() {
            continue;
        }
        match next_step(ctx, record, attempts, ended_before).await? {
            DependantStep::Ended { record, job } => {
                cancels.extend(job);
                ended.push(JobRecord::clone(&record));
                status.record = Arc::new(*record);
            }
            DependantStep::FollowRetry => follow.push(JobRecord::clone(record)),
            DependantStep::Wait => {}
        }
    }
    if !follow.is_empty() {
        follow_retries(ctx, &follow, attempts).await?;
    }
    Ok((follow, ended))
}

/// Removes the secrets of the records `ended` in steps 6-7 (step 9), and reads again
/// from the store the records of `statuses` among them.
async fn forget_ended(
    ctx: &Context<'_>,
    ended: &[JobRecord],
    statuses: &mut [JobStatus],
) -> Result<()> {
    let store = ctx.records();
    if ended.iter().any(|r| r.secrets_staged) {
        forget(ctx, ended).await;
        for status in statuses.iter_mut() {
            if ended.iter().any(|r| r.id == status.record.id) {
                status.record = Arc::new(store.get(&status.record.id).await?);
            }
        }
    }
    Ok(())
}
