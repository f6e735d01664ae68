//! Cancel: `scancel` (of a job, a whole array, or some of its tasks), then the record goes
//! CANCELED once the scheduler confirms; a finished job is left as it is. A record whose
//! submit was left unsettled is settled first (adopted and cancelled, or ended
//! NOT_SUBMITTED); several jobs carrying its name are all cancelled. Many jobs are
//! cancelled by one `scancel` per cluster, the scheduler's confirmation read by squeue
//! in the same round trip; only the jobs it does not show CANCELLED yet are polled.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::commands;
use super::context::Context;
use super::conversion::CONVERSION_LABEL;
use super::job::{slurm_job, slurm_job_of, SlurmJob};
use super::parse::{checked, parse_squeue, SlurmJobId};
use super::poll::MINE_FROM;
use super::sidecars::forget;
use super::states::SlurmBaseState;
use super::status::{status_many, status_settling};
use crate::nccl::PROBE_LABEL;
use crate::record::{
    AsyncStore, JobId, JobRecord, Mark, TaskMark, TransitionSource, UnsettledKind,
};
use crate::spec::TaskSet;
use crate::state::JobState;
use crate::transport::{round_trip, Command, Output};
use crate::{Error, Result};

/// How long a cancel waits for the scheduler to confirm.
const CANCEL_CONFIRM: Duration = Duration::from_secs(60);

/// The most job ids one `scancel` names (its argv stays far below the kernel's limits).
const SCANCEL_CHUNK: usize = 1_000;

/// Cancel `id` (a job, or a whole array).
pub(super) async fn cancel(ctx: &Context<'_>, id: &JobId) -> Result<JobRecord> {
    let mut record = ctx.records().get(id).await?;
    if record.state.is_terminal() {
        return Ok(record);
    }
    if record.state == JobState::Submitting && record.backend_ref.is_none() {
        // Settle it now: adopt the job that carries its name, or end it.
        record = status_settling(ctx, std::slice::from_ref(id), Duration::ZERO)
            .await?
            .remove(0)
            .into_record();
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
/// SUBMITTING) together, as [`cancel_jobs`] does; every other record as
/// [`cancel`] does. The records in the order of `ids`.
pub(super) async fn cancel_many(ctx: &Context<'_>, ids: &[JobId]) -> Result<Vec<JobRecord>> {
    let mut answers: Vec<Option<JobRecord>> = vec![None; ids.len()];
    let mut batch: Vec<(usize, JobRecord, SlurmJob)> = Vec::new();
    for (index, id) in ids.iter().enumerate() {
        let record = ctx.records().get(id).await?;
        if record.state.is_terminal() {
            answers[index] = Some(record);
            continue;
        }
        match (record.is_array(), slurm_job(&record)?) {
            (false, Some(job)) => batch.push((index, record, job)),
            _ => answers[index] = Some(cancel(ctx, id).await?),
        }
    }
    if !batch.is_empty() {
        cancel_jobs(ctx, batch, &mut answers).await?;
    }
    Ok(answers
        .into_iter()
        .map(|r| r.expect("every record answered"))
        .collect())
}

/// Cancel the plain jobs (not arrays) of `jobs`, each record with its place in `answers`
/// and its SLURM job, in one round trip ([`scancel_and_look`]): slurmctld sets a pending
/// job CANCELLED within scancel's own RPC, so a job squeue then shows CANCELLED is
/// confirmed by the scheduler and its record goes CANCELED at once, without waiting for
/// accounting to catch up. Any other job (still completing, ended another way before the
/// cancel reached it, not listed) and any record whose end the poll reads further (a
/// multi-role job, an NCCL probe, an image conversion) is polled until terminal, as long
/// as [`CANCEL_CONFIRM`]. Each record, once it ends, goes to its place in `answers`.
async fn cancel_jobs(
    ctx: &Context<'_>,
    jobs: Vec<(usize, JobRecord, SlurmJob)>,
    answers: &mut [Option<JobRecord>],
) -> Result<()> {
    let cancelled = scancel_and_look(ctx, &jobs).await?;
    let mut waiting: Vec<(usize, JobId)> = Vec::new();
    let mut marks: Vec<(usize, JobId)> = Vec::new();
    let mut confirmed: Vec<usize> = Vec::new();
    for (index, record, job) in jobs {
        if cancelled.contains(&job) && ends_by_its_mark(&record) {
            marks.push((index, record.id));
        } else {
            waiting.push((index, record.id));
        }
    }
    let marked = mark_cancelled(ctx.records(), &marks).await?;
    for ((index, id), marked) in marks.into_iter().zip(marked) {
        match marked {
            Ok(record) => {
                answers[index] = Some(record);
                confirmed.push(index);
            }
            // The record moved meanwhile (another poll ended it): the poll says how.
            Err(Error::InvalidTransition { .. }) => waiting.push((index, id)),
            Err(error) => return Err(error),
        }
    }
    // The secrets of the jobs confirmed ended, as a poll that saw them end would.
    let ended: Vec<JobRecord> = confirmed
        .iter()
        .filter_map(|&index| answers[index].clone())
        .filter(|record| record.secrets_staged)
        .collect();
    if !ended.is_empty() {
        forget(ctx, &ended).await;
        for &index in &confirmed {
            let staged = answers[index].as_ref().filter(|r| r.secrets_staged);
            if let Some(id) = staged.map(|r| r.id.clone()) {
                answers[index] = Some(ctx.records().get(&id).await?);
            }
        }
    }
    poll_until_ended(ctx, waiting, answers).await
}

/// One round trip: one `scancel` per cluster (of at most [`SCANCEL_CHUNK`] ids) for the
/// jobs of `jobs`, then squeue of the same jobs (of the user's own from [`MINE_FROM`]
/// jobs, as the poll does); the jobs squeue shows CANCELLED. A scancel that failed is
/// the cancel's failure; a squeue that failed confirms nothing.
async fn scancel_and_look(
    ctx: &Context<'_>,
    jobs: &[(usize, JobRecord, SlurmJob)],
) -> Result<HashSet<SlurmJob>> {
    let mut clusters: BTreeMap<Option<String>, Vec<SlurmJobId>> = BTreeMap::new();
    for (_, _, (cluster, id)) in jobs {
        clusters.entry(cluster.clone()).or_default().push(*id);
    }
    let mut scancels: Vec<Command> = Vec::new();
    let mut looks: Vec<(Option<String>, Command)> = Vec::new();
    for (cluster, ids) in &clusters {
        let chunks = ids.chunks(SCANCEL_CHUNK);
        let cluster_name = cluster.as_deref();
        scancels.extend(
            chunks
                .clone()
                .map(|c| commands::scancel_all(c, cluster_name)),
        );
        // A cluster name squeue refuses leaves its jobs to the poll, which says why.
        let cluster_looks: Result<Vec<Command>> = if ids.len() >= MINE_FROM {
            commands::squeue_rows(cluster_name).map(|c| vec![c.arg("--me")])
        } else {
            chunks
                .map(|c| commands::squeue_jobs(c, cluster_name))
                .collect()
        };
        for look in cluster_looks.unwrap_or_default() {
            looks.push((cluster.clone(), look));
        }
    }
    let commands: Vec<Command> = scancels
        .iter()
        .chain(looks.iter().map(|(_, look)| look))
        .cloned()
        .collect();
    let output = ctx.transport().run(&round_trip::join(&commands)).await?;
    let mut parts = round_trip::split(&output, commands.len())?;
    let shown = parts.split_off(scancels.len());
    // scancel of a finished or unknown id exits 0; anything else is a real failure.
    for (part, command) in parts.into_iter().zip(&scancels) {
        checked(part, command)?;
    }
    Ok(looks
        .iter()
        .zip(&shown)
        .flat_map(|((cluster, _), part)| shown_cancelled(cluster, part))
        .collect())
}

/// Poll the records of `waiting` (each with its place in `answers`) until each is
/// terminal, 500 ms apart; one still not terminal after [`CANCEL_CONFIRM`] is noted as
/// waiting for the scheduler to confirm.
async fn poll_until_ended(
    ctx: &Context<'_>,
    mut waiting: Vec<(usize, JobId)>,
    answers: &mut [Option<JobRecord>],
) -> Result<()> {
    let deadline = Instant::now() + CANCEL_CONFIRM;
    while !waiting.is_empty() {
        let ids: Vec<JobId> = waiting.iter().map(|(_, id)| id.clone()).collect();
        let statuses = status_many(ctx, &ids).await?;
        let mut still = Vec::new();
        for ((index, id), status) in waiting.into_iter().zip(statuses) {
            if status.record.state.is_terminal() {
                answers[index] = Some(status.into_record());
            } else if Instant::now() >= deadline {
                // The scheduler accepted the cancel; note it and let the next
                // poll confirm.
                answers[index] = Some(
                    ctx.records()
                        .mark(
                            &id,
                            Mark::new(status.state(), TransitionSource::User)
                                .message("scancel sent; waiting for the scheduler to confirm"),
                        )
                        .await?,
                );
            } else {
                still.push((index, id));
            }
        }
        waiting = still;
        if !waiting.is_empty() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    Ok(())
}

/// Mark the records of `ids` CANCELED, as the scheduler confirmed, in one
/// [`RecordStore::mark_many`] (one transaction in a database, the file store's fsyncs
/// overlapping on a few threads). The answers in the order of `ids`.
async fn mark_cancelled(
    records: &AsyncStore,
    ids: &[(usize, JobId)],
) -> Result<Vec<Result<JobRecord>>> {
    records
        .mark_many(
            ids.iter()
                .map(|(_, id)| {
                    let mark = Mark::new(JobState::Canceled, TransitionSource::User)
                        .message("CANCELLED (squeue, right after scancel)");
                    (id.clone(), mark)
                })
                .collect(),
        )
        .await
}

/// The jobs of `cluster` a squeue answer (`part`, in the poll's format) shows CANCELLED.
/// A squeue that failed or printed what cannot be read confirms nothing: its jobs are
/// polled.
fn shown_cancelled(cluster: &Option<String>, part: &Output) -> Vec<SlurmJob> {
    if !part.success() {
        return Vec::new();
    }
    match parse_squeue(&part.stdout_text()) {
        Ok(rows) => rows
            .into_iter()
            // The job's own row (not an array task's, a component's or a step's).
            .filter(|row| row.id.describes(row.id.job, None))
            .filter(|row| row.state.base == SlurmBaseState::Cancelled)
            .map(|row| (cluster.clone(), row.id.job))
            .collect(),
        Err(error) => {
            tracing::warn!(%error, "squeue after scancel could not be read; polling the jobs");
            Vec::new()
        }
    }
}

/// Whether a record ends with its mark alone (and its secrets' removal) once the
/// scheduler shows its job CANCELLED: not a multi-role job (each role's end is read from
/// its batch script), an NCCL probe (its verdict) or an image conversion (the jobs that
/// wait for it), whose ends the poll reads.
fn ends_by_its_mark(record: &JobRecord) -> bool {
    !record.is_multi_role()
        && !record.labels.contains_key(PROBE_LABEL)
        && !record.labels.contains_key(CONVERSION_LABEL)
}

/// Cancel `tasks` of the array `id`.
pub(super) async fn cancel_tasks(
    ctx: &Context<'_>,
    id: &JobId,
    tasks: &TaskSet,
) -> Result<JobRecord> {
    let record = ctx.records().get(id).await?;
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
            status.record = Arc::new(ctx.records().mark(id, mark).await?);
        }
        if done(&status.record) {
            return Ok(status.into_record());
        }
        if status.record.is_array() && Instant::now() >= deadline {
            return Ok(status.into_record());
        }
        if Instant::now() >= deadline {
            // The scheduler accepted the cancel; note it and let the next poll confirm.
            return ctx
                .records()
                .mark(
                    id,
                    Mark::new(status.state(), TransitionSource::User)
                        .message("scancel sent; waiting for the scheduler to confirm"),
                )
                .await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Cancel a record still `SUBMITTING` after a settle: every job seen carrying its
/// name once the scheduler has listed them all (several: a duplicate submit), or an
/// error saying why it cannot be cancelled yet.
async fn cancel_unsettled(ctx: &Context<'_>, record: JobRecord) -> Result<JobRecord> {
    let id = &record.id;
    if ctx.records().submit_in_progress(id).await? == Some(true) {
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
    let ended = ctx
        .records()
        .mark(
            id,
            Mark::new(JobState::Canceled, TransitionSource::User).message(format!(
                "scancel of every SLURM job carrying its name: {}",
                ids.join(", ")
            )),
        )
        .await?;
    forget(ctx, std::slice::from_ref(&ended)).await;
    ctx.records().get(id).await
}
