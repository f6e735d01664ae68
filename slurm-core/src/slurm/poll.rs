//! Status of many jobs in one round trip: squeue for every tracked id and, in the same
//! command, sacct for the ones squeue cannot settle; scontrol, the completion check and
//! failure classification only when a job needs them. Array jobs are one id each, their
//! tasks read from the same rows (`123_4`, `123_[5-7%2]`). The parents of dependants are
//! observed in the same round trip, so a dependency that can never hold is settled from
//! their records ([`crate::dependency`]). `SUBMITTING` records a dead submitter left are
//! settled first ([`reconcile`](super::reconcile)), and the secrets of jobs that ended
//! are removed in the follow-up round trip. What the answers mean is decided in
//! [`observe`](super::observe); this file asks and records.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use chrono::Utc;

use super::backend::SlurmBackend;
use super::commands;
use super::observe::{
    decide, from_scontrol, merge, settle, Decision, Followup, Observation, TaskKey,
};
use super::parse::SlurmJobId;
use super::reconcile::Verdict;
use super::scripts::{FORGET_SECRETS, POLL, TAIL_LOGS};
use super::states::live_state_names;
use crate::backend::{JobStatus, NativeStatus};
use crate::classify::LOG_TAIL_LINES;
use crate::dependency::{latest_attempts, never_satisfied, resolve_dependencies};
use crate::record::{BackendRef, JobId, JobRecord, Mark, RecordStore, TaskMark, TransitionSource};
use crate::render::Renderer;
use crate::state::JobState;
use crate::transport::{round_trip, Command, Output, Transport};
use crate::{Error, Result};

/// A `SUBMITTING` record this old whose submit is not in progress (its lease is free)
/// is settled by `status`, `watch` and `cancel`: its submitter died or gave up.
pub const SETTLE_AFTER: Duration = Duration::from_secs(5);

/// For a store that cannot tell whether a submit is in progress: settle only records
/// this old (no submit runs this long).
const SETTLE_UNLEASED_AFTER: Duration = Duration::from_secs(600);

/// How long a settle from `status` waits for an attempt still running sbatch.
const STATUS_FENCE_WAIT: Duration = Duration::from_secs(5);

/// The most commands of one follow-up round trip (their arguments stay far below the
/// kernel's limits); more go in further round trips.
const FOLLOWUP_CHUNK: usize = 200;

/// The most jobs one `forget-secrets` command names.
const FORGET_CHUNK: usize = 200;

/// A job (or array task) on a cluster (`None`: the default one).
type Key = (Option<String>, TaskKey);

/// The SLURM job a record points at: its cluster and job id (an array's own id).
pub(super) fn slurm_job(record: &JobRecord) -> Result<Option<(Option<String>, SlurmJobId)>> {
    record
        .backend_ref
        .as_ref()
        .map(|r: &BackendRef| {
            SlurmJobId::parse(&r.native_id)
                .map(|id| (r.cluster.clone(), id))
                .map_err(|e| {
                    Error::parse(
                        format!("the SLURM job id of record {}", record.id),
                        e.to_string(),
                    )
                })
        })
        .transpose()
}

/// The id column form of a key: `77`, `123_4`.
fn column(key: &TaskKey) -> String {
    match key.1 {
        Some(task) => format!("{}_{task}", key.0),
        None => key.0.to_string(),
    }
}

/// One cluster's part of a poll.
#[derive(Default)]
pub(crate) struct Group {
    jobs: Vec<SlurmJobId>,
    keys: Vec<TaskKey>,
    /// Keys whose record (or task) is RUNNING: squeue showing one pending again sends
    /// it to sacct (a requeue).
    running: Vec<TaskKey>,
    /// Array tasks not ended: one squeue no longer lists sends its array to sacct.
    expected: Vec<TaskKey>,
}

#[cfg(any(test, feature = "testing"))]
impl Group {
    /// The group of single jobs `ids`, none RUNNING.
    pub(crate) fn of_jobs(ids: &[SlurmJobId]) -> Group {
        Group {
            jobs: ids.to_vec(),
            keys: ids.iter().map(|id| (*id, None)).collect(),
            ..Group::default()
        }
    }
}

/// From this many jobs of one cluster, a poll asks squeue for the user's own jobs
/// (`--me`) and keeps the tracked ones on the login node; below, it names the jobs
/// (`--jobs=` lists of at most 2000). For a list of more than one id squeue loads every
/// job of the cluster and checks each against the list, so its cost grows with the list;
/// `--me` costs one listing of the user's jobs whatever the number tracked. Measured on
/// the test bed with 10,000 jobs queued (`make bench`, BENCHMARKS.md): a list costs
/// about 44 ms plus 0.41 ms per id, `--me` about 72 ms; they meet near 70 ids, and both
/// grow with the number of jobs queued, so the crossing stays near there.
pub(crate) const MINE_FROM: usize = 64;

/// One poll of every cluster in `groups` (see `poll.sh`): per cluster squeue for its
/// jobs, then sacct for those squeue cannot settle. What to ask travels on standard
/// input (a `K KIND COUNT` line, then COUNT lines: `J` jobs, `R` RUNNING keys, `E`
/// array tasks not ended), so any number of jobs and tasks fits.
pub(crate) fn poll_command(groups: &BTreeMap<Option<String>, Group>) -> Result<Command> {
    poll_command_deciding(groups, BASH_DECIDES_UP_TO)
}

/// Up to this many jobs of one cluster, the poll script decides which need sacct with
/// bash's builtins; above, one `awk` does (a process start, about 2 ms here, against
/// bash's loops growing with the list).
const BASH_DECIDES_UP_TO: usize = 200;

/// [`poll_command`], with bash deciding what needs sacct up to `bash_decides_up_to` jobs
/// of a cluster (the tests run both ways).
fn poll_command_deciding(
    groups: &BTreeMap<Option<String>, Group>,
    bash_decides_up_to: usize,
) -> Result<Command> {
    let mut params = vec![live_state_names()];
    let mut stdin = String::new();
    for (k, (cluster, group)) in groups.iter().enumerate() {
        let mut squeue = commands::squeue_rows(cluster.as_deref())?;
        let mine = group.jobs.len() >= MINE_FROM;
        if mine {
            squeue = squeue.arg("--me");
        }
        let sacct = commands::sacct_rows(cluster.as_deref())?;
        if k > 0 {
            params.push("--slurm-run-group--".to_string());
        }
        params.push(if mine { "mine" } else { "ids" }.to_string());
        let bash_decides = group.jobs.len() <= bash_decides_up_to;
        params.push(if bash_decides { "bash" } else { "awk" }.to_string());
        params.push(squeue.program().to_string());
        params.extend(squeue.get_args().iter().cloned());
        params.push("--slurm-run-next--".to_string());
        params.push(sacct.program().to_string());
        params.extend(sacct.get_args().iter().cloned());
        let mut list = |kind: &str, items: Vec<String>| {
            if !items.is_empty() {
                stdin.push_str(&format!("{k} {kind} {}\n", items.len()));
                for item in items {
                    stdin.push_str(&item);
                    stdin.push('\n');
                }
            }
        };
        list("J", group.jobs.iter().map(ToString::to_string).collect());
        list("R", group.running.iter().map(column).collect());
        list("E", group.expected.iter().map(column).collect());
    }
    Ok(POLL.command(params).stdin(stdin.into_bytes()))
}

impl<T, R, S> SlurmBackend<T, R, S>
where
    T: Transport + 'static,
    R: Renderer + 'static,
    S: RecordStore + 'static,
{
    /// Observe `ids` and update their records. One round trip for any number of jobs
    /// and array tasks in the common case; answers in the order of `ids`. `SUBMITTING`
    /// records left by a submit that died or gave up are settled first
    /// ([`SETTLE_AFTER`]).
    pub(super) async fn poll(&self, ids: &[JobId]) -> Result<Vec<JobStatus>> {
        self.poll_settling(ids, SETTLE_AFTER).await
    }

    /// [`poll`](Self::poll), settling `SUBMITTING` records whose submit is not in
    /// progress once they are `settle_after` old.
    pub(super) async fn poll_settling(
        &self,
        ids: &[JobId],
        settle_after: Duration,
    ) -> Result<Vec<JobStatus>> {
        let store = &self.inner.store;
        // Each record is read once per poll: a poll of 10,000 jobs reads 10,000 files.
        let mut records: Vec<JobRecord> =
            ids.iter().map(|id| store.get(id)).collect::<Result<_>>()?;
        self.settle_stale(&mut records, settle_after).await?;
        // The parents of dependants still waiting are observed too, and whether each had
        // ended before this poll is kept: a dependant of a parent whose failure is new
        // waits one poll (a watch may retry the parent first).
        let mut parent_ids: Vec<JobId> = Vec::new();
        for record in &records {
            if !record.state.is_terminal() {
                parent_ids.extend(record.after.iter().map(|d| d.job.clone()));
            }
        }
        let parents = latest_attempts(store, &parent_ids).unwrap_or_default();
        let ended_before: HashSet<JobId> = parents
            .values()
            .filter(|p| p.state.is_terminal())
            .map(|p| p.id.clone())
            .collect();
        let mut present: HashSet<JobId> = ids.iter().cloned().collect();
        for parent in parents.values() {
            if !parent.state.is_terminal() && present.insert(parent.id.clone()) {
                records.push(parent.clone());
            }
        }
        let (mut statuses, mut cancels) = self.observe_records(records).await?;
        // Probes that ended (polled now, or parents that ended before): their verdicts
        // read, the jobs waiting for a failed one ended (see nccl.rs).
        let natives: BTreeMap<JobId, NativeStatus> = statuses
            .iter()
            .filter_map(|s| Some((s.record.id.clone(), s.native.clone()?)))
            .collect();
        let candidates: Vec<&JobRecord> = statuses
            .iter()
            .map(|s| &s.record)
            .chain(parents.values().filter(|p| p.state.is_terminal()))
            .collect();
        let mut settled = self.settle_probes(&candidates, &natives).await;
        cancels.append(&mut settled.cancels);
        for status in statuses.iter_mut() {
            if let Some(record) = settled.ended.remove(&status.record.id) {
                status.record = record;
            }
        }
        statuses.truncate(ids.len());
        let mut follow = Vec::new();
        let mut ended = Vec::new();
        for status in statuses.iter_mut() {
            let record = &status.record;
            if record.state.is_terminal() || record.after.is_empty() {
                continue;
            }
            let resolved = resolve_dependencies(store, &record.after)?;
            if let Some(why) = never_satisfied(&resolved, &ended_before) {
                if let Some(job) = slurm_job(record)? {
                    cancels.push(job);
                }
                let message = format!("{why}; cancelled on the cluster");
                status.record = store.mark(
                    &record.id,
                    Mark::new(JobState::Error, TransitionSource::Poll)
                        .message(message)
                        .err_class(crate::classify::ErrorClass::Program),
                )?;
                ended.push(status.record.clone());
            } else if resolved.iter().any(|r| r.parent.id != r.dependency.job) {
                // A parent was retried elsewhere: this dependant follows the new attempt.
                follow.push(record.clone());
            }
        }
        if !follow.is_empty() {
            self.follow_retries(&follow).await?;
        }
        self.cancel_on_cluster(&cancels).await;
        if ended.iter().any(|r| r.secrets_staged) {
            self.forget_secrets(&ended).await;
            for status in statuses.iter_mut() {
                if ended.iter().any(|r| r.id == status.record.id) {
                    status.record = store.get(&status.record.id)?;
                }
            }
        }
        Ok(statuses)
    }

    /// `scancel` the jobs whose dependency can never hold, in one round trip; a failure
    /// is logged (the record already says ERROR; the next poll sees the job again).
    async fn cancel_on_cluster(&self, jobs: &[(Option<String>, SlurmJobId)]) {
        if jobs.is_empty() {
            return;
        }
        let commands: Vec<Command> = jobs
            .iter()
            .map(|(cluster, id)| commands::scancel(*id, cluster.as_deref()))
            .collect();
        if let Err(error) = self.inner.transport.run(&round_trip::join(&commands)).await {
            tracing::warn!(%error, "cancelling jobs whose dependency can never hold failed");
        }
    }

    /// Observe the jobs of `records` (as just read) and mark them; also the jobs to
    /// cancel on the cluster.
    async fn observe_records(
        &self,
        records: Vec<JobRecord>,
    ) -> Result<(Vec<JobStatus>, Vec<(Option<String>, SlurmJobId)>)> {
        let store = &self.inner.store;
        // Each record's keys: the job itself, or its array tasks not yet ended.
        let mut keys: Vec<Vec<Key>> = Vec::with_capacity(records.len());
        let mut groups: BTreeMap<Option<String>, Group> = BTreeMap::new();
        // What the groups already hold (a poll of 10,000 jobs checks in constant time).
        let mut known_jobs: HashSet<(Option<String>, SlurmJobId)> = HashSet::new();
        let mut known_keys: HashSet<Key> = HashSet::new();
        for record in &records {
            let mut own = Vec::new();
            if let (false, Some((cluster, job))) = (record.state.is_terminal(), slurm_job(record)?)
            {
                let group = groups.entry(cluster.clone()).or_default();
                if known_jobs.insert((cluster.clone(), job)) {
                    group.jobs.push(job);
                }
                let tasks: Vec<(Option<u32>, JobState)> = if record.is_array() {
                    record
                        .tasks
                        .iter()
                        .filter(|(_, t)| !t.state.is_terminal())
                        .map(|(i, t)| (Some(*i), t.state))
                        .collect()
                } else {
                    vec![(None, record.state)]
                };
                for (task, state) in tasks {
                    let key = (job, task);
                    if known_keys.insert((cluster.clone(), key)) {
                        group.keys.push(key);
                        if state == JobState::Running {
                            group.running.push(key);
                        }
                        if task.is_some() {
                            group.expected.push(key);
                        }
                    }
                    own.push((cluster.clone(), key));
                }
            }
            keys.push(own);
        }
        let mut observations = if groups.is_empty() {
            HashMap::new()
        } else {
            self.observe(&groups).await?
        };

        // Jobs neither squeue nor sacct knows: ask scontrol (a second round trip, rare).
        let missing: Vec<Key> = groups
            .iter()
            .flat_map(|(cluster, g)| g.keys.iter().map(move |k| (cluster.clone(), *k)))
            .filter(|key| key.1 .1.is_none() && !observations.contains_key(key))
            .collect();
        if !missing.is_empty() {
            observations.extend(self.observe_scontrol(&missing).await?);
        }

        // Decide each key's next state; the follow-ups that need the cluster run next.
        let mut decisions: Vec<Vec<(Key, Decision)>> = records
            .iter()
            .zip(&keys)
            .map(|(record, own)| {
                own.iter()
                    .map(|key| {
                        let current = key
                            .1
                             .1
                            .and_then(|task| record.tasks.get(&task))
                            .map_or(record.state, |task| task.state);
                        let observed = observations.get(key).cloned();
                        (key.clone(), decide(record, current, observed))
                    })
                    .collect()
            })
            .collect();
        // The secrets of jobs that have ended go in the same round trip: the records
        // ending now, and ended ones whose sidecar could not be removed before (an
        // array's once the array has ended).
        let forget: Vec<usize> = records
            .iter()
            .zip(&decisions)
            .enumerate()
            .filter(|(_, (record, decided))| {
                record.secrets_staged
                    && (record.state.is_terminal()
                        || (!record.is_array()
                            && decided.iter().any(|(_, d)| {
                                d.mark.state.is_terminal() || d.followup != Followup::None
                            })))
            })
            .map(|(index, _)| index)
            .collect();
        let forgotten = self
            .run_followups(&records, &mut decisions, &forget)
            .await?;

        let mut cancels = Vec::new();
        let mut answers = Vec::with_capacity(records.len());
        for (record, decided) in records.into_iter().zip(decisions) {
            let record = if forgotten.contains(&record.id) {
                store.update(&record.id, &mut |r| {
                    r.secrets_staged = false;
                    Ok(())
                })?
            } else {
                record
            };
            for (key, decision) in &decided {
                if decision.cancel {
                    cancels.push((key.0.clone(), key.1 .0));
                }
            }
            answers.push(self.record_decisions(record, decided)?);
        }
        Ok((answers, cancels))
    }

    /// Mark `record` with what was decided for it (a job, or some of an array's tasks).
    fn record_decisions(
        &self,
        record: JobRecord,
        decided: Vec<(Key, Decision)>,
    ) -> Result<JobStatus> {
        if record.is_array() {
            let mut mark = Mark::new(record.state, TransitionSource::Poll);
            let mut natives = BTreeMap::new();
            for ((_, (_, task)), decision) in decided {
                let Some(task) = task else { continue };
                if let Some(native) = decision.native {
                    natives.insert(task, native);
                }
                let Decision { mark: m, .. } = decision;
                let current = &record.tasks[&task];
                let new_nodes = m.nodes.as_ref().is_some_and(|n| n != &current.nodes);
                if m.state != current.state || new_nodes {
                    mark = mark.task(
                        task,
                        TaskMark {
                            state: m.state,
                            err_class: m.err_class,
                            message: m.message,
                            nodes: m.nodes,
                            node_fault: m.node_fault,
                        },
                    );
                }
            }
            let record = if mark.tasks.is_empty() {
                record
            } else {
                self.mark_kept(&record, mark)?
            };
            return Ok(JobStatus {
                record,
                native: None,
                tasks: natives,
            });
        }
        let Some((_, decision)) = decided.into_iter().next() else {
            return Ok(JobStatus {
                record,
                native: None,
                tasks: BTreeMap::new(),
            });
        };
        let Decision { mark, native, .. } = decision;
        if mark.state == record.state {
            // Nothing new: the store would do nothing, so it is not asked.
            return Ok(JobStatus {
                record,
                native,
                tasks: BTreeMap::new(),
            });
        }
        let updated = self.mark_kept(&record, mark)?;
        Ok(JobStatus {
            record: updated,
            native,
            tasks: BTreeMap::new(),
        })
    }

    /// `store.mark`, keeping the record as it is when the scheduler reported a state it
    /// cannot take.
    fn mark_kept(&self, record: &JobRecord, mark: Mark) -> Result<JobRecord> {
        let store = &self.inner.store;
        match store.mark(&record.id, mark) {
            Ok(updated) => Ok(updated),
            Err(Error::InvalidTransition { id, from, to }) => {
                tracing::warn!(job = %id, %from, %to, "the scheduler reported a state the record cannot take; kept the record");
                store.get(&record.id)
            }
            Err(error) => Err(error),
        }
    }

    /// squeue for every group and, in the same round trip, sacct for the jobs squeue
    /// cannot settle (`poll.sh`).
    async fn observe(
        &self,
        groups: &BTreeMap<Option<String>, Group>,
    ) -> Result<HashMap<Key, Observation>> {
        let label = format!(
            "poll {} job(s)",
            groups.values().map(|g| g.jobs.len()).sum::<usize>()
        );
        let command = poll_command(groups)?.display_as(label);
        let output = self.inner.transport.run(&command).await?;
        let parts = round_trip::split(&output, 2 * groups.len())?;
        let mut observations = HashMap::new();
        for ((cluster, group), pair) in groups.iter().zip(parts.chunks(2)) {
            for (key, observation) in merge(&group.keys, &pair[0], &pair[1])? {
                observations.insert((cluster.clone(), key), observation);
            }
        }
        Ok(observations)
    }

    /// `scontrol show job` for jobs squeue and sacct did not know.
    async fn observe_scontrol(&self, keys: &[Key]) -> Result<HashMap<Key, Observation>> {
        let commands: Vec<Command> = keys
            .iter()
            .map(|(cluster, key)| commands::scontrol_show_job(key.0, cluster.as_deref()))
            .collect();
        let parts = self.run_joined(&commands).await?;
        let mut observations = HashMap::new();
        for (key, part) in keys.iter().zip(parts) {
            if let Some(observation) = from_scontrol(key.1 .0, &part)? {
                observations.insert(key.clone(), observation);
            }
        }
        Ok(observations)
    }

    /// `commands` in as few round trips as their number allows (at most
    /// [`FOLLOWUP_CHUNK`] each); one answer per command, in order.
    async fn run_joined(&self, commands: &[Command]) -> Result<Vec<Output>> {
        let mut parts = Vec::with_capacity(commands.len());
        for chunk in commands.chunks(FOLLOWUP_CHUNK) {
            let output = self.inner.transport.run(&round_trip::join(chunk)).await?;
            parts.extend(round_trip::split(&output, chunk.len())?);
        }
        Ok(parts)
    }

    /// Classify failures from their logs and run the status.json check, for every job
    /// or task that needs one, and remove the secrets of the records in `forget`, in one
    /// more round trip. Returns the records whose secrets are gone.
    async fn run_followups(
        &self,
        records: &[JobRecord],
        decisions: &mut [Vec<(Key, Decision)>],
        forget: &[usize],
    ) -> Result<BTreeSet<JobId>> {
        let mut commands = Vec::new();
        let mut owners = Vec::new();
        for (index, (record, decided)) in records.iter().zip(decisions.iter()).enumerate() {
            for (position, ((_, (job, task)), decision)) in decided.iter().enumerate() {
                match decision.followup {
                    Followup::None => continue,
                    Followup::Classify => {
                        let folder = self.log_folder(record, *job, *task)?;
                        commands.push(TAIL_LOGS.command([
                            LOG_TAIL_LINES.to_string(),
                            format!("{folder}/main.out"),
                            format!("{folder}/main.err"),
                        ]));
                    }
                    Followup::StatusJson => {
                        let dir = match task {
                            Some(task) => {
                                record.results_dir.join("tasks")?.join(&task.to_string())?
                            }
                            None => record.results_dir.clone(),
                        };
                        let path = dir.join("status.json")?;
                        commands.push(Command::new("cat").arg("--").arg(path.as_str()));
                    }
                }
                owners.push((index, position));
            }
        }
        let followups = commands.len();
        let forget_records: Vec<&JobRecord> = forget.iter().map(|i| &records[*i]).collect();
        commands.extend(forget_commands(&forget_records));
        if commands.is_empty() {
            return Ok(BTreeSet::new());
        }
        let parts = self.run_joined(&commands).await?;
        for ((index, position), part) in owners.into_iter().zip(&parts) {
            settle(&mut decisions[index][position].1, part);
        }
        Ok(forgotten(&forget_records, &parts[followups..]))
    }

    /// Remove the secrets sidecars of `records` (ended), best effort: the records whose
    /// sidecar is confirmed gone are updated; the others keep `secrets_staged` and are
    /// tried again at their next status.
    pub(super) async fn forget_secrets(&self, records: &[JobRecord]) {
        let refs: Vec<&JobRecord> = records.iter().filter(|r| r.secrets_staged).collect();
        let commands = forget_commands(&refs);
        if commands.is_empty() {
            return;
        }
        let gone = match self.run_joined(&commands).await {
            Ok(parts) => forgotten(&refs, &parts),
            Err(error) => {
                tracing::warn!(%error, "could not remove secrets sidecars yet; the next status tries again");
                return;
            }
        };
        for id in gone {
            let _ = self.inner.store.update(&id, &mut |r| {
                r.secrets_staged = false;
                Ok(())
            });
        }
    }

    /// Settle the `SUBMITTING` records among `records` whose submit is not in progress
    /// and that are at least `settle_after` old, in one round trip; `records` are
    /// replaced by what the store holds afterwards. See [`reconcile`](super::reconcile).
    async fn settle_stale(&self, records: &mut [JobRecord], settle_after: Duration) -> Result<()> {
        let store = &self.inner.store;
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
            let eligible = match store.submit_in_progress(&record.id)? {
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
        let settled = self.settle_records(&chosen, STATUS_FENCE_WAIT).await;
        for (record, settled) in chosen.iter().zip(settled) {
            let id = &record.id;
            let marked = match settled.verdict {
                Verdict::Adopt(job) => store.mark(
                    id,
                    Mark::new(JobState::Pending, TransitionSource::Poll)
                        .message(format!(
                            "adopted: SLURM job {job} carries its name (settled after its submit was left unsettled)"
                        ))
                        .backend_ref(job),
                ),
                Verdict::NoJob(why) => store.mark(
                    id,
                    Mark::new(JobState::NotSubmitted, TransitionSource::Poll)
                        .message(format!("never reached the scheduler: {why}; submit it again")),
                ),
                Verdict::Refused(error) => store.mark(
                    id,
                    Mark::new(JobState::Error, TransitionSource::Poll)
                        .message(format!("sbatch refused the job: {error}")),
                ),
                Verdict::Several(jobs) => {
                    let list: Vec<String> = jobs.iter().map(ToString::to_string).collect();
                    let note = format!(
                        "{} SLURM jobs carry its name ({}); a person decides which to keep (`cancel` cancels them all)",
                        jobs.len(),
                        list.join(", ")
                    );
                    note_unsettled(store, id, &jobs, note)
                }
                Verdict::Unsettled { seen, why } => note_unsettled(store, id, &seen, why),
            };
            match marked {
                Ok(_) => {}
                // Settled meanwhile by someone else: keep what they found.
                Err(Error::InvalidTransition { .. }) => {}
                Err(error) => return Err(error),
            }
            if settled.secrets_removed {
                store.update(id, &mut |r| {
                    r.secrets_staged = false;
                    Ok(())
                })?;
            }
            let fresh = store.get(id)?;
            for slot in records.iter_mut().filter(|r| &r.id == id) {
                *slot = fresh.clone();
            }
        }
        Ok(())
    }

    /// `<job_dir>/logs/<id>-<slurm id>` of one run; `<id>-<array id>_<task>` of an
    /// array task.
    pub(super) fn log_folder(
        &self,
        record: &JobRecord,
        slurm_job_id: SlurmJobId,
        task: Option<u32>,
    ) -> Result<String> {
        let run = match task {
            Some(task) => format!("{slurm_job_id}_{task}"),
            None => slurm_job_id.to_string(),
        };
        Ok(format!(
            "{}/{}-{run}",
            record.results_dir.join("logs")?.as_str(),
            record.id,
        ))
    }
}

/// Keep `seen` and `why` in a record that stays `SUBMITTING`.
fn note_unsettled<S: RecordStore>(
    store: &S,
    id: &JobId,
    seen: &[BackendRef],
    why: String,
) -> Result<JobRecord> {
    store.update(id, &mut |record| {
        for job in seen {
            if !record.candidates.contains(job) {
                record.candidates.push(job.clone());
            }
        }
        record.unsettled = Some(why.clone());
        Ok(())
    })
}

/// The `forget-secrets` commands for `records` (folder and name of each).
fn forget_commands(records: &[&JobRecord]) -> Vec<Command> {
    records
        .chunks(FORGET_CHUNK)
        .map(|chunk| {
            FORGET_SECRETS.command(
                chunk
                    .iter()
                    .flat_map(|r| [r.results_dir.as_str().to_string(), r.id.to_string()]),
            )
        })
        .collect()
}

/// The records among `records` whose sidecar the `forget-secrets` answers in `parts`
/// confirm gone.
fn forgotten(records: &[&JobRecord], parts: &[Output]) -> BTreeSet<JobId> {
    let names: BTreeSet<String> = parts
        .iter()
        .flat_map(|part| {
            part.stdout_text()
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    records
        .iter()
        .filter(|r| names.contains(r.id.as_str()))
        .map(|r| r.id.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(list: &[u64]) -> Vec<SlurmJobId> {
        list.iter().map(|n| SlurmJobId::new(*n).unwrap()).collect()
    }

    /// A group of single jobs: `all`, of which `running` are RUNNING.
    fn jobs(all: &[u64], running: &[u64]) -> Group {
        Group {
            jobs: ids(all),
            keys: ids(all).into_iter().map(|j| (j, None)).collect(),
            running: ids(running).into_iter().map(|j| (j, None)).collect(),
            expected: Vec::new(),
        }
    }

    /// Runs the poll script locally against fake `squeue` / `sacct` programs (squeue
    /// prints `squeue_lines` and exits `squeue_rc`; sacct prints nothing); returns the
    /// two parts, every `--jobs=` squeue was given (one a line), and every `--jobs=`
    /// sacct was given (None when it was not run).
    async fn poll_group_locally(
        squeue_lines: &str,
        squeue_rc: i32,
        group: Group,
    ) -> (Vec<Output>, String, Option<String>) {
        use crate::transport::{LocalTransport, Transport};
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path();
        std::fs::write(bin.join("squeue.out"), squeue_lines).unwrap();
        std::fs::write(
            bin.join("squeue"),
            format!(
                "#!/bin/bash\nfor a; do case $a in --jobs=*) echo \"${{a#--jobs=}}\" >> {dir}/squeue.jobs;; --me) echo mine >> {dir}/squeue.jobs;; esac; done\ncat {dir}/squeue.out\nexit {squeue_rc}\n",
                dir = bin.display()
            ),
        )
        .unwrap();
        std::fs::write(
            bin.join("sacct"),
            format!(
                "#!/bin/bash\nfor a; do case $a in --jobs=*) echo \"${{a#--jobs=}}\" >> {}/sacct.jobs;; esac; done\n",
                bin.display()
            ),
        )
        .unwrap();
        for tool in ["squeue", "sacct"] {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(bin.join(tool), std::fs::Permissions::from_mode(0o755))
                .unwrap();
        }
        let path = format!(
            "PATH={}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let groups: BTreeMap<Option<String>, Group> = [(None, group)].into();
        // Once with bash deciding what needs sacct, once with awk: both must agree.
        let mut answers = Vec::new();
        for bash_decides_up_to in [usize::MAX, 0] {
            let poll = poll_command_deciding(&groups, bash_decides_up_to).unwrap();
            let command = Command::new("env")
                .arg(&path)
                .arg(poll.program())
                .args(poll.get_args().iter().cloned())
                .stdin(poll.stdin_bytes().unwrap().to_vec());
            let output = LocalTransport::new().run(&command).await.unwrap();
            let parts = round_trip::split(&output, 2).unwrap();
            let squeue = std::fs::read_to_string(bin.join("squeue.jobs")).unwrap_or_default();
            let sacct = std::fs::read_to_string(bin.join("sacct.jobs"))
                .ok()
                .map(|j| j.trim().to_string());
            for log in ["squeue.jobs", "sacct.jobs"] {
                let _ = std::fs::remove_file(bin.join(log));
            }
            answers.push((parts, squeue, sacct));
        }
        let by_awk = answers.pop().unwrap();
        let by_bash = answers.pop().unwrap();
        assert_eq!(
            by_bash.2, by_awk.2,
            "bash and awk send the same jobs to sacct"
        );
        assert_eq!(by_bash.1, by_awk.1);
        assert_eq!(
            by_bash
                .0
                .iter()
                .map(|p| (&p.stdout, p.status))
                .collect::<Vec<_>>(),
            by_awk
                .0
                .iter()
                .map(|p| (&p.stdout, p.status))
                .collect::<Vec<_>>()
        );
        by_bash
    }

    #[tokio::test]
    async fn jobs_squeue_settles_cost_no_sacct() {
        let (parts, _, sacct) = poll_group_locally(
            "1|PENDING|Priority|(null)|a\n2|RUNNING|None|n1|b\n",
            0,
            jobs(&[1, 2], &[]),
        )
        .await;
        assert_eq!(sacct, None, "all live: no sacct");
        assert!(parts[0].stdout_text().contains("2|RUNNING"));
        assert!(parts[1].stdout.is_empty() && parts[1].success());
    }

    #[tokio::test]
    async fn sacct_is_asked_only_for_what_squeue_cannot_settle() {
        // 3 finished (exit code and steps from sacct), 4 gone from squeue, 5 a RUNNING
        // record pending again (a requeue: sacct says why), 6 pending as before.
        let (_, _, sacct) = poll_group_locally(
            "3|COMPLETED|None|n1|c\n5|PENDING|BeginTime|(null)|e\n6|PENDING|Priority|(null)|f\n",
            0,
            jobs(&[3, 4, 5, 6], &[5]),
        )
        .await;
        assert_eq!(sacct.as_deref(), Some("3,4,5"));
        let (_, _, sacct) = poll_group_locally("", 1, jobs(&[7, 8], &[])).await;
        assert_eq!(
            sacct.as_deref(),
            Some("7,8"),
            "squeue failed: sacct for every job"
        );
    }

    #[tokio::test]
    async fn an_array_costs_one_squeue_until_a_task_ends_or_vanishes() {
        let job = SlurmJobId::new(40).unwrap();
        let task = |t: u32| (job, Some(t));
        let group = |running: Vec<u32>, expected: Vec<u32>| Group {
            jobs: vec![job],
            keys: expected.iter().map(|t| task(*t)).collect(),
            running: running.into_iter().map(task).collect(),
            expected: expected.into_iter().map(task).collect(),
        };
        // Two running, the rest in the pending range: squeue settles all.
        let (parts, _, sacct) = poll_group_locally(
            "40_[2-7%2]|PENDING|JobArrayTaskLimit|(null)|a\n40_0|RUNNING|None|n1|a\n40_1|RUNNING|None|n2|a\n",
            0,
            group(vec![0, 1], (0..8).collect()),
        )
        .await;
        assert_eq!(sacct, None, "all live: no sacct");
        let merged = merge(&(0..8).map(task).collect::<Vec<_>>(), &parts[0], &parts[1]).unwrap();
        assert_eq!(merged.len(), 8);
        assert_eq!(merged[&task(1)].state.raw, "RUNNING");
        assert_eq!(
            merged[&task(5)].reason.as_deref(),
            Some("JobArrayTaskLimit")
        );
        // A running task gone from squeue (it ended and was purged): sacct for the array.
        let (_, _, sacct) = poll_group_locally(
            "40_[2-7%2]|PENDING|JobArrayTaskLimit|(null)|a\n40_1|RUNNING|None|n2|a\n",
            0,
            group(vec![0, 1], (0..8).collect()),
        )
        .await;
        assert_eq!(sacct.as_deref(), Some("40"));
        // A task listed as ended: sacct says how.
        let (_, _, sacct) = poll_group_locally(
            "40_0|COMPLETED|None|n1|a\n40_1|RUNNING|None|n2|a\n",
            0,
            group(vec![1], vec![0, 1]),
        )
        .await;
        assert_eq!(sacct.as_deref(), Some("40"));
    }

    #[tokio::test]
    async fn a_poll_of_twenty_thousand_ids_travels_on_stdin_and_asks_squeue_once() {
        // 20,000 ids as one argument would be ~140 KB, above Linux's 128 KiB limit for one
        // argument: they travel on stdin. So many ids: squeue lists the user's own jobs
        // once (`--me`), and sacct gets the ones squeue does not list, 2000 per run.
        let all: Vec<u64> = (1_000_000..1_020_000).collect();
        let poll = poll_command(&[(None, jobs(&all, &[]))].into()).unwrap();
        assert!(
            poll.get_args().iter().all(|a| a.len() < 16 * 1024),
            "no argument carries the ids"
        );
        let (_, squeue, sacct) = poll_group_locally("", 0, jobs(&all, &[])).await;
        assert_eq!(
            squeue, "mine\n",
            "one squeue of the user's jobs, no id list"
        );
        let sacct = sacct.unwrap();
        assert_eq!(sacct.lines().count(), 10, "10 sacct runs of 2000 ids");
        assert!(sacct.lines().all(|c| c.split(',').count() == 2000));
        assert_eq!(
            sacct.lines().next().unwrap().split(',').next(),
            Some("1000000")
        );
        assert_eq!(sacct.lines().flat_map(|l| l.split(',')).count(), 20_000);
    }

    #[tokio::test]
    async fn few_jobs_are_named_to_squeue_and_many_are_kept_from_the_users_own() {
        // Below MINE_FROM jobs: explicit lists.
        let few: Vec<u64> = (1..MINE_FROM as u64).collect();
        let (_, squeue, _) = poll_group_locally("", 0, jobs(&few, &[])).await;
        assert_eq!(squeue.lines().count(), 1);
        assert_eq!(squeue.trim().split(',').count(), few.len());
        // From MINE_FROM jobs: squeue lists the user's jobs; untracked rows are dropped
        // on the login node, and a tracked job it does not list goes to sacct.
        let many: Vec<u64> = (1..=MINE_FROM as u64).collect();
        let rows = format!(
            "1|PENDING|Priority|(null)|a\n5_[1-3]|PENDING|Priority|(null)|b\n9999|RUNNING|None|n1|other\n{}",
            (3..=MINE_FROM as u64)
                .map(|n| format!("{n}|RUNNING|None|n1|c\n"))
                .collect::<String>()
        );
        let (parts, squeue, sacct) = poll_group_locally(&rows, 0, jobs(&many, &[])).await;
        assert_eq!(squeue, "mine\n");
        let listed = parts[0].stdout_text();
        assert!(listed.contains("1|PENDING") && listed.contains("5_[1-3]|PENDING"));
        assert!(
            !listed.contains("9999"),
            "an untracked job is not sent back: {listed}"
        );
        assert_eq!(listed.lines().count(), MINE_FROM, "every tracked row kept");
        assert_eq!(
            sacct.as_deref(),
            Some("2"),
            "only the unlisted job needs sacct"
        );
    }
}
