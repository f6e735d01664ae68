//! Cancel: `scancel` (of a job, a whole array, or some of its tasks), then the record goes
//! CANCELED once the scheduler confirms; a finished job is left as it is. A record whose
//! submit was left unsettled is settled first (adopted and cancelled, or ended
//! NOT_SUBMITTED); several jobs carrying its name are all cancelled. Many jobs are
//! cancelled by one `scancel` and confirmed by one poll for all of them.

use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use super::commands;
use super::context::Context;
use super::job::{slurm_job, slurm_job_of};
use super::parse::{checked, SlurmJobId};
use super::sidecars::forget;
use super::status::{status_many, status_settling};
use crate::record::{JobId, JobRecord, Mark, TaskMark, TransitionSource, UnsettledKind};
use crate::spec::TaskSet;
use crate::state::JobState;
use crate::transport::{round_trip, Command};
use crate::{Error, Result};

/// How long a cancel waits for the scheduler to confirm.
const CANCEL_CONFIRM: Duration = Duration::from_secs(60);

/// The most job ids one `scancel` names (its argv stays far below the kernel's limits).
const SCANCEL_CHUNK: usize = 1_000;

/// Cancel `id` (a job, or a whole array).
pub(super) async fn cancel(ctx: &Context<'_>, id: &JobId) -> Result<JobRecord> {
    let mut record = ctx.store().get(id)?;
    if record.state.is_terminal() {
        return Ok(record);
    }
    if record.state == JobState::Submitting && record.backend_ref.is_none() {
        // Settle it now: adopt the job that carries its name, or end it.
        record = status_settling(ctx, std::slice::from_ref(id), Duration::ZERO)
            .await?
            .remove(0)
            .record;
        if record.state.is_terminal() {
            return Ok(record);
        }
    }
    let Some((cluster, slurm_id)) = slurm_job(&record)? else {
        return cancel_unsettled(ctx, record).await;
    };
    let command = commands::scancel(slurm_id, cluster.as_deref());
    let tasks: TaskSet = record.tasks.keys().copied().collect();
    scancel_and_confirm(ctx, id, command, &tasks, |record| {
        record.state.is_terminal()
    })
    .await
}

/// Cancel `ids`: the plain jobs the scheduler has (not arrays, not ended, not left
/// SUBMITTING) by one `scancel` per cluster in one round trip, then polled together
/// until each is terminal; every other record as [`cancel_job`](Self::cancel_job)
/// does. The records in the order of `ids`.
pub(super) async fn cancel_many(ctx: &Context<'_>, ids: &[JobId]) -> Result<Vec<JobRecord>> {
    let mut answers: Vec<Option<JobRecord>> = vec![None; ids.len()];
    let mut batch: Vec<(usize, JobId)> = Vec::new();
    let mut jobs: BTreeMap<Option<String>, Vec<SlurmJobId>> = BTreeMap::new();
    for (index, id) in ids.iter().enumerate() {
        let record = ctx.store().get(id)?;
        if record.state.is_terminal() {
            answers[index] = Some(record);
            continue;
        }
        match (record.is_array(), slurm_job(&record)?) {
            (false, Some((cluster, slurm_id))) => {
                jobs.entry(cluster).or_default().push(slurm_id);
                batch.push((index, id.clone()));
            }
            _ => answers[index] = Some(cancel(ctx, id).await?),
        }
    }
    if !batch.is_empty() {
        let commands: Vec<Command> = jobs
            .iter()
            .flat_map(|(cluster, ids)| {
                ids.chunks(SCANCEL_CHUNK)
                    .map(|chunk| commands::scancel_all(chunk, cluster.as_deref()))
            })
            .collect();
        let command = round_trip::join(&commands);
        let output = ctx.transport().run(&command).await?;
        let parts = round_trip::split(&output, commands.len())?;
        // scancel of a finished or unknown id exits 0; anything else is a real failure.
        for (part, command) in parts.into_iter().zip(&commands) {
            checked(part, command)?;
        }
        let deadline = Instant::now() + CANCEL_CONFIRM;
        let mut waiting = batch;
        loop {
            let ids: Vec<JobId> = waiting.iter().map(|(_, id)| id.clone()).collect();
            let statuses = status_many(ctx, &ids).await?;
            let mut still = Vec::new();
            for ((index, id), status) in waiting.into_iter().zip(statuses) {
                if status.record.state.is_terminal() {
                    answers[index] = Some(status.record);
                } else if Instant::now() >= deadline {
                    // The scheduler accepted the cancel; note it and let the next
                    // poll confirm.
                    answers[index] = Some(
                        ctx.store().mark(
                            &id,
                            Mark::new(status.state(), TransitionSource::User)
                                .message("scancel sent; waiting for the scheduler to confirm"),
                        )?,
                    );
                } else {
                    still.push((index, id));
                }
            }
            if still.is_empty() {
                break;
            }
            waiting = still;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    Ok(answers
        .into_iter()
        .map(|r| r.expect("every record answered"))
        .collect())
}

/// Cancel `tasks` of the array `id`.
pub(super) async fn cancel_tasks(
    ctx: &Context<'_>,
    id: &JobId,
    tasks: &TaskSet,
) -> Result<JobRecord> {
    let record = ctx.store().get(id)?;
    record.check_tasks(tasks)?;
    let ended = |r: &JobRecord| tasks.iter().all(|t| r.tasks[&t].state.is_terminal());
    if ended(&record) {
        return Ok(record);
    }
    let Some((cluster, slurm_id)) = slurm_job(&record)? else {
        return Err(Error::invalid(
            "id",
            format!("{id} was never accepted by the scheduler; nothing to cancel"),
        ));
    };
    let command = commands::scancel_tasks(slurm_id, &tasks.to_string(), cluster.as_deref());
    scancel_and_confirm(ctx, id, command, tasks, ended).await
}

/// Run `command` (an scancel), then poll `id` until `done` holds for its record.
/// Array tasks among `tasks` the scheduler no longer knows were cancelled before
/// they started (SLURM keeps no record of those): they are marked CANCELED.
async fn scancel_and_confirm(
    ctx: &Context<'_>,
    id: &JobId,
    command: Command,
    tasks: &TaskSet,
    done: impl Fn(&JobRecord) -> bool,
) -> Result<JobRecord> {
    let output = ctx.transport().run(&command).await?;
    // scancel of a finished or unknown id exits 0; anything else is a real failure.
    checked(output, &command)?;
    let deadline = Instant::now() + CANCEL_CONFIRM;
    loop {
        let mut status = status_many(ctx, std::slice::from_ref(id)).await?.remove(0);
        let vanished: Vec<u32> = tasks
            .iter()
            .filter(|t| status.record.tasks.get(t).map(|t| t.state) == Some(JobState::Unknown))
            .collect();
        if !vanished.is_empty() {
            let mut mark = Mark::new(JobState::Canceled, TransitionSource::User);
            for task in vanished {
                let mut task_mark = TaskMark::new(JobState::Canceled);
                task_mark.message = Some(
                    "cancelled before it started (the scheduler keeps no record of it)".into(),
                );
                mark = mark.task(task, task_mark);
            }
            status.record = ctx.store().mark(id, mark)?;
        }
        if done(&status.record) {
            return Ok(status.record);
        }
        if status.record.is_array() && Instant::now() >= deadline {
            return Ok(status.record);
        }
        if Instant::now() >= deadline {
            // The scheduler accepted the cancel; note it and let the next poll confirm.
            return ctx.store().mark(
                id,
                Mark::new(status.state(), TransitionSource::User)
                    .message("scancel sent; waiting for the scheduler to confirm"),
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Cancel a record still `SUBMITTING` after a settle: every job seen carrying its
/// name once the scheduler has listed them all (several: a duplicate submit), or an
/// error saying why it cannot be cancelled yet.
async fn cancel_unsettled(ctx: &Context<'_>, record: JobRecord) -> Result<JobRecord> {
    let id = &record.id;
    if ctx.store().submit_in_progress(id)? == Some(true) {
        return Err(Error::invalid(
            "id",
            format!("{id} is being submitted right now; cancel it once the submit returns"),
        ));
    }
    let several = record.candidates.len() > 1
        && record
            .unsettled
            .as_ref()
            .is_some_and(|u| u.kind == UnsettledKind::SeveralJobs);
    if !several {
        return Err(Error::Ambiguous(format!(
            "{id} is SUBMITTING and not settled yet ({}); nothing known to cancel. Run `status` once the cluster answers",
            record
                .unsettled
                .as_ref()
                .map_or("its submit is still being settled".to_string(), ToString::to_string)
        )));
    }
    for job in &record.candidates {
        let (cluster, slurm_id) = slurm_job_of(job)?;
        let command = commands::scancel(slurm_id, cluster.as_deref());
        checked(ctx.transport().run(&command).await?, &command)?;
    }
    let ids: Vec<String> = record.candidates.iter().map(ToString::to_string).collect();
    let ended = ctx.store().mark(
        id,
        Mark::new(JobState::Canceled, TransitionSource::User).message(format!(
            "scancel of every SLURM job carrying its name: {}",
            ids.join(", ")
        )),
    )?;
    forget(ctx, std::slice::from_ref(&ended)).await;
    ctx.store().get(id)
}
