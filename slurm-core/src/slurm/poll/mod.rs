//! The poll: what the scheduler says of many jobs, in one round trip. squeue for every
//! tracked id and, in the same command, sacct for the ones squeue cannot settle;
//! scontrol only for jobs neither knows; the logs' tails and `status.json` only for
//! the jobs that need them, in one more round trip that other steps may join. Array
//! jobs are one id each, their tasks read from the same rows (`123_4`, `123_[5-7%2]`).
//!
//! A poll returns what it observed and decided ([`Observed`]); the status step
//! ([`status`](super::status)) records it and runs what follows.
//!
//! | file | holds |
//! |---|---|
//! | `mod.rs` | [`observe_jobs`] and [`Observed`]: the round trips and the marks they lead to |
//! | `request.rs` | the request protocol of `poll.sh` |
//! | `observe.rs` | pure: rows merged into observations, an observation's decision |

mod observe;
mod request;
mod resume;
mod roles;
mod usage;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use self::observe::{
    apply_followup, decide, from_scontrol, kept, merge_reading, Decision, Followup, TaskKey,
};
use super::commands;
use super::context::Context;
use super::job::{slurm_job, SlurmJob};
use super::parse::SlurmJobId;
use super::paths::{log_folder, resume_segments, staged_script, status_json};
use super::scripts::{CONTINUE_FRESH, CONTINUE_SEGMENT, TAIL_LOGS};
use crate::backend::JobStatus;
use crate::classify::LOG_TAIL_LINES;
use crate::record::{JobRecord, Mark, TaskMark, TransitionSource, Usage};
use crate::state::JobState;
use crate::transport::{round_trip, Command, Output};
use crate::{Error, Result};

#[cfg(any(test, feature = "testing"))]
pub(crate) use self::request::poll_command;
pub(crate) use self::request::Group;
pub(super) use self::request::MINE_FROM;
use super::context::poll_memo::{take_answer, Held, MemoAnswer, MemoAsk, Slot};
use super::context::poll_request::PollRequest;

/// The most commands of one follow-up round trip (their arguments stay far below the
/// kernel's limits); more go in further round trips.
const FOLLOWUP_CHUNK: usize = 200;

/// A job (or array task) on a cluster (`None`: the default one).
type Key = (Option<String>, TaskKey);

/// What one poll observed of some records and decided for each: a mark per job or
/// array task, final once the follow-ups ran.
pub(super) struct Observed {
    records: Vec<JobRecord>,
    decisions: Vec<Vec<(Key, Decision)>>,
    /// What the batch script of each multi-role job that ends wrote of its roles.
    role_ends: Vec<Option<roles::RoleEnds>>,
    /// Where the login node kept squeue's rows, and the request, when the round trip
    /// was quiet: squeue alone settled every job and nothing needs a follow-up or a
    /// cancel (see [`poll_memo`](super::context::poll_memo)).
    kept: Option<(Slot, PollRequest)>,
}

/// How a poll uses its backend's memo (see [`poll_memo`](super::context::poll_memo)).
#[derive(Default)]
pub(super) struct MemoUse {
    /// What the script is asked to compare with and keep (none: no memo).
    pub(super) ask: Option<MemoAsk>,
    /// The full answer of a held request sent again whose rows had changed, and what
    /// the script said of its memo: the answer of this poll when it makes the same
    /// request.
    pub(super) answered: Option<(PollRequest, Output, MemoAnswer)>,
}

/// Observe the jobs of `records` (as just read): one round trip for any number of jobs
/// and array tasks, and scontrol for jobs neither squeue nor sacct knows (rare).
pub(super) async fn observe_jobs(
    ctx: &Context<'_>,
    records: Vec<JobRecord>,
    memo: MemoUse,
) -> Result<Observed> {
    // FailedNode (Slurm 23.02 on) names the node a node failure is pinned on.
    let failed_node = ctx.facts().release().is_some_and(|r| r.has_failed_node());
    let (keys, groups) = keys_of(&records, failed_node)?;
    let (
        Polled {
            mut observations,
            kept: notes,
            unavailable,
        },
        rows_kept,
    ) = if groups.is_empty() {
        (Polled::default(), None)
    } else {
        poll_groups(ctx, &groups, memo).await?
    };

    // Jobs neither squeue nor sacct knows, and ends squeue showed while accounting
    // could not be asked (scontrol has their exit code): ask scontrol (a second round
    // trip, rare).
    let missing: Vec<Key> = groups
        .iter()
        .flat_map(|(cluster, g)| g.keys.iter().map(move |k| (cluster.clone(), *k)))
        .filter(|key| key.1 .1.is_none() && !notes.contains_key(key))
        .filter(|key| {
            observations
                .get(key)
                .is_none_or(|o| o.unconfirmed.is_some())
        })
        .collect();
    if !missing.is_empty() {
        for (key, mut observation) in ask_scontrol(ctx, &missing).await? {
            let unconfirmed = observations.get(&key).and_then(|o| o.unconfirmed.clone());
            let ended = crate::slurm::states::map_state(&observation.state)
                .0
                .is_terminal();
            match unconfirmed {
                // What squeue showed stays unless scontrol tells the end too.
                Some(_) if !ended => continue,
                Some(why) => observation.unconfirmed = Some(why),
                None => {}
            }
            observations.insert(key, observation);
        }
    }

    let decisions = decisions_of(&records, &keys, &observations, &notes, &unavailable);
    let role_ends = vec![None; records.len()];
    let quiet = missing.is_empty()
        && notes.is_empty()
        && unavailable.is_empty()
        && decisions
            .iter()
            .flatten()
            .all(|(_, d)| matches!(d.followup, Followup::None) && !d.cancel);
    Ok(Observed {
        records,
        decisions,
        role_ends,
        kept: rows_kept.filter(|_| quiet),
    })
}

impl Observed {
    /// The records observed, as read before the poll.
    pub(super) fn records(&self) -> &[JobRecord] {
        &self.records
    }

    /// Where the login node kept squeue's rows of this poll, and its request, when the
    /// round trip was quiet (see [`poll_memo`](super::context::poll_memo)).
    pub(super) fn kept(&self) -> Option<&(Slot, PollRequest)> {
        self.kept.as_ref()
    }

    /// Whether this poll ends the job of record `index` (or reads its logs or
    /// `status.json` to decide how it ended).
    pub(super) fn ends(&self, index: usize) -> bool {
        self.decisions[index]
            .iter()
            .any(|(_, d)| d.mark.state.is_terminal() || d.followup.ends_job())
    }

    /// Replace the record of `record.id` by `record` (changed in the store meanwhile,
    /// e.g. its sidecar removed).
    pub(super) fn refresh(&mut self, record: JobRecord) {
        for slot in self.records.iter_mut().filter(|r| r.id == record.id) {
            *slot = record.clone();
        }
    }

    /// Run the follow-ups the decisions need (the logs' tails to class a failure,
    /// `status.json` to confirm a COMPLETED job) and `extra` commands of other steps, in
    /// as few round trips as their number allows; the decisions are finished with what
    /// was read, and the answers of `extra` returned in order.
    pub(super) async fn follow_up(
        &mut self,
        ctx: &Context<'_>,
        extra: Vec<Command>,
    ) -> Result<Vec<Output>> {
        let mut commands = Vec::new();
        let mut owners = Vec::new();
        for (index, (record, decided)) in self.records.iter().zip(&self.decisions).enumerate() {
            for (position, ((_, (job, task)), decision)) in decided.iter().enumerate() {
                let Some(command) = followup_command(record, job, task, &decision.followup)? else {
                    continue;
                };
                commands.push(command);
                owners.push((index, position));
            }
        }
        // A multi-role job that ends: how each role ended (its batch script's files).
        let mut role_owners = Vec::new();
        for (index, record) in self.records.iter().enumerate() {
            if record.is_multi_role() && self.ends(index) {
                commands.push(roles::role_ends_command(record)?);
                role_owners.push(index);
            }
        }
        let followups = commands.len();
        commands.extend(extra);
        if commands.is_empty() {
            return Ok(Vec::new());
        }
        let mut parts = run_joined(ctx, &commands).await?;
        let owned = owners.len();
        for ((index, position), part) in owners.into_iter().zip(&parts) {
            let decision = &mut self.decisions[index][position].1;
            match decision.followup {
                Followup::Continue => {
                    let requeued_after = decision
                        .observed
                        .as_ref()
                        .and_then(|o| o.requeued_after.clone());
                    resume::apply_continue(
                        &self.records[index],
                        &mut decision.mark,
                        requeued_after.as_deref(),
                        part,
                    )
                }
                Followup::ContinueFresh => {
                    resume::apply_continue_fresh(&self.records[index], &mut decision.mark, part)
                }
                _ => apply_followup(decision, part),
            }
        }
        for (index, part) in role_owners.into_iter().zip(&parts[owned..]) {
            self.role_ends[index] = Some(roles::read_role_ends(part));
        }
        Ok(parts.split_off(followups))
    }

    /// Mark each record with what was decided for it: the statuses in the order of the
    /// records, and the SLURM jobs to cancel (a raw dependency that can never hold). Every
    /// mark goes to the store in one [`RecordStore::mark_many`](crate::RecordStore::mark_many).
    pub(super) async fn record(self, ctx: &Context<'_>) -> Result<(Vec<JobStatus>, Vec<SlurmJob>)> {
        let mut cancels = Vec::new();
        let mut statuses = Vec::with_capacity(self.records.len());
        let mut marks = Vec::new();
        let mut marked = Vec::new();
        for ((record, decided), ends) in self
            .records
            .into_iter()
            .zip(self.decisions)
            .zip(self.role_ends)
        {
            for (key, decision) in &decided {
                if decision.cancel {
                    cancels.push((key.0.clone(), key.1 .0));
                }
            }
            let (status, mark) = record_decisions(record, decided, ends.as_ref());
            if let Some(mark) = mark {
                marks.push((status.record.id.clone(), mark));
                marked.push(statuses.len());
            }
            statuses.push(status);
        }
        if !marks.is_empty() {
            let answers = ctx.records().mark_many(marks).await?;
            for (index, answer) in marked.into_iter().zip(answers) {
                let status = &mut statuses[index];
                status.record = Arc::new(kept_on_refusal(ctx, &status.record, answer).await?);
            }
        }
        Ok((statuses, cancels))
    }
}

/// The status of `record` with what was decided for it (a job, or some of an array's
/// tasks), and the mark to record, if any (the status then holds the record as read).
fn record_decisions(
    record: JobRecord,
    decided: Vec<(Key, Decision)>,
    role_ends: Option<&roles::RoleEnds>,
) -> (JobStatus, Option<Mark>) {
    if record.is_array() {
        let mut mark = Mark::new(record.state, TransitionSource::Poll);
        let mut natives = BTreeMap::new();
        for ((_, (_, task)), decision) in decided {
            let Some(task) = task else { continue };
            // Kept in the task once it ends: an ended task is not polled again.
            let exit_code = decision.native.as_ref().and_then(|n| n.exit_code);
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
                        exit_code: exit_code.filter(|_| m.state.is_terminal()),
                        usage: Usage::sum(&m.usage).filter(|_| m.state.is_terminal()),
                    },
                );
            }
        }
        let mark = (!mark.tasks.is_empty()).then_some(mark);
        return (JobStatus::new(record, None, natives), mark);
    }
    let Some((_, decision)) = decided.into_iter().next() else {
        return (JobStatus::new(record, None, BTreeMap::new()), None);
    };
    let Decision {
        mark,
        native,
        observed,
        ..
    } = decision;
    let mark = if record.is_multi_role() {
        // The nodes of a running job, or accounting's of its run, are its roles' nodes;
        // squeue's of an ending job list only those still completing.
        let nodes_known = mark.state == JobState::Running
            || observed.as_ref().is_some_and(|o| o.source == "sacct");
        // One role of its own nodes is a plain job: its component 0 is the job.
        let (components, runs) = match observed {
            Some(o) if o.components.is_empty() => {
                (o.nodes.map(|n| (0, n)).into_iter().collect(), o.runs)
            }
            Some(o) => (o.components, o.runs),
            None => (Vec::new(), Vec::new()),
        };
        let seen = roles::RolesSeen {
            components: &components,
            known: nodes_known,
            runs: &runs,
        };
        roles::roles_mark(&record, mark, seen, role_ends)
    } else {
        // Nothing new: the store would do nothing, so it is not asked.
        (mark.state != record.state).then_some(mark)
    };
    (JobStatus::new(record, native, BTreeMap::new()), mark)
}

/// The record a mark of `record` answered: the record as stored, or, when the scheduler
/// reported a state the record cannot take, the record kept as it is.
async fn kept_on_refusal(
    ctx: &Context<'_>,
    record: &JobRecord,
    answer: Result<JobRecord>,
) -> Result<JobRecord> {
    match answer {
        Ok(updated) => Ok(updated),
        Err(Error::InvalidTransition { id, from, to }) => {
            tracing::warn!(job = %id, %from, %to, "the scheduler reported a state the record cannot take; kept the record");
            ctx.records().get(&record.id).await
        }
        Err(error) => Err(error),
    }
}

/// What was decided for each of `records` (its keys `keys`): by what the poll
/// `observed` of each key, unless it is kept (`notes`, or its cluster's accounting
/// `unavailable` for a key nothing knows).
fn decisions_of(
    records: &[JobRecord],
    keys: &[Vec<Key>],
    observations: &HashMap<Key, observe::Observation>,
    notes: &HashMap<Key, String>,
    unavailable: &HashMap<Option<String>, String>,
) -> Vec<Vec<(Key, Decision)>> {
    records
        .iter()
        .zip(keys)
        .map(|(record, own)| {
            own.iter()
                .map(|key| {
                    let current = key
                        .1
                         .1
                        .and_then(|task| record.tasks.get(&task))
                        .map_or(record.state, |task| task.state);
                    let observed = observations.get(key).cloned();
                    let decision = match (notes.get(key), &observed, unavailable.get(&key.0)) {
                        (Some(why), _, _) => kept(current, why),
                        // Nothing known, and accounting could not be asked: no verdict.
                        (None, None, Some(why)) => kept(
                            current,
                            &format!("not listed by squeue or scontrol, and accounting could not be asked ({why})"),
                        ),
                        (None, observed, _) => decide(record, current, observed.clone()),
                    };
                    (key.clone(), decision)
                })
                .collect()
        })
        .collect()
}

/// The command that reads what `followup` of `job` (or its array task `task`) of
/// `record` needs (`None`: nothing).
fn followup_command(
    record: &JobRecord,
    job: &SlurmJobId,
    task: &Option<u32>,
    followup: &Followup,
) -> Result<Option<Command>> {
    Ok(match followup {
        Followup::None => None,
        Followup::Classify => {
            let folder = log_folder(record, *job, *task)?;
            Some(TAIL_LOGS.command([
                LOG_TAIL_LINES.to_string(),
                format!("{folder}/main.out"),
                format!("{folder}/main.err"),
            ]))
        }
        Followup::StatusJson => {
            let path = status_json(record, *task)?;
            Some(Command::new("cat").arg("--").arg(path.as_str()))
        }
        Followup::Continue => {
            let segments = resume_segments(&record.results_dir)?;
            Some(CONTINUE_SEGMENT.command([job.to_string(), segments.as_str().to_string()]))
        }
        Followup::ContinueFresh => {
            let dir = &record.results_dir;
            Some(CONTINUE_FRESH.command([
                dir.as_str().to_string(),
                format!("{}/{}", dir.as_str(), staged_script(&record.id)),
                resume_segments(dir)?.as_str().to_string(),
                job.to_string(),
                record.restarts.saturating_add(1).to_string(),
            ]))
        }
    })
}

/// The keys of each of `records` (the job itself, or its array tasks not yet ended), and
/// the groups of every cluster's keys to poll (with `failed_node`, see [`Group`]).
#[allow(clippy::type_complexity)]
fn keys_of(
    records: &[JobRecord],
    failed_node: bool,
) -> Result<(Vec<Vec<Key>>, BTreeMap<Option<String>, Group>)> {
    // Each record's keys: the job itself, or its array tasks not yet ended.
    let mut keys: Vec<Vec<Key>> = Vec::with_capacity(records.len());
    let mut groups: BTreeMap<Option<String>, Group> = BTreeMap::new();
    // What the groups already hold (a poll of 10,000 jobs checks in constant time).
    let mut known_jobs: HashSet<SlurmJob> = HashSet::new();
    let mut known_keys: HashSet<Key> = HashSet::new();
    for record in records {
        let mut own = Vec::new();
        if let (false, Some((cluster, job))) = (record.state.is_terminal(), slurm_job(record)?) {
            let group = groups.entry(cluster.clone()).or_insert_with(|| Group {
                failed_node,
                ..Group::default()
            });
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
    Ok((keys, groups))
}

/// What the poll round trip said of every cluster's keys.
#[derive(Default)]
struct Polled {
    observations: HashMap<Key, observe::Observation>,
    /// Keys left as they are (a sacct row of theirs could not be read), and why.
    kept: HashMap<Key, String>,
    /// Clusters whose sacct could not answer now, and why.
    unavailable: HashMap<Option<String>, String>,
}

/// What the login node said of a held request sent again ([`poll_again`]).
pub(super) enum Again {
    /// squeue's rows are those the held poll saw: its statuses are this poll's.
    Unchanged,
    /// They changed: the round trip answered in full (what [`MemoUse::answered`] holds).
    Changed((PollRequest, Output, MemoAnswer)),
    /// The login node kept no lists of it (a new shell): nothing was asked.
    Lost,
}

/// The request `held` asked, sent again without its lists (see [`poll_memo`](super::context::poll_memo)), for a poll of
/// `jobs` jobs: one round trip.
pub(super) async fn poll_again(ctx: &Context<'_>, held: &Held, jobs: usize) -> Result<Again> {
    let ask = ctx.poll_memo().ask(Some(held.slot()));
    let request = held.request().clone();
    let command = request
        .command_again(ask.word())
        .display_as(format!("poll {jobs} job(s) again"));
    let mut output = ctx.transport().run(&command).await?;
    Ok(match take_answer(&mut output)? {
        MemoAnswer::Same => Again::Unchanged,
        MemoAnswer::Lost => Again::Lost,
        answer => Again::Changed((request, output, answer)),
    })
}

/// squeue for every group and, in the same round trip, sacct for the jobs squeue
/// cannot settle (`poll.sh`); with where the login node kept squeue's rows, when it
/// did, and the request.
async fn poll_groups(
    ctx: &Context<'_>,
    groups: &BTreeMap<Option<String>, Group>,
    memo: MemoUse,
) -> Result<(Polled, Option<(Slot, PollRequest)>)> {
    let label = format!(
        "poll {} job(s)",
        groups.values().map(|g| g.jobs.len()).sum::<usize>()
    );
    let request = request::poll_request(groups)?;
    let (output, answer) = match memo.answered {
        Some((asked, output, answer)) if asked == request => (output, Some(answer)),
        _ => {
            let ask = memo.ask.as_ref().filter(|_| request.memo_able);
            let command = request.command(ask.map(MemoAsk::word)).display_as(label);
            let mut output = ctx.transport().run(&command).await?;
            let answer = match ask {
                Some(_) => Some(take_answer(&mut output)?),
                None => None,
            };
            (output, answer)
        }
    };
    let kept = match answer {
        Some(MemoAnswer::Kept(slot)) => Some((slot, request)),
        Some(MemoAnswer::Same | MemoAnswer::Lost) => {
            return Err(Error::parse(
                "poll output",
                "the login node answered `same` or `lost` to a poll that held no rows",
            ))
        }
        _ => None,
    };
    let parts = round_trip::split(&output, 2 * groups.len())?;
    let mut polled = Polled::default();
    for ((cluster, group), pair) in groups.iter().zip(parts.chunks(2)) {
        let merged = merge_reading(&group.keys, &pair[0], &pair[1], group.failed_node, true)?;
        for (key, observation) in merged.observations {
            polled
                .observations
                .insert((cluster.clone(), key), observation);
        }
        for key in &group.keys {
            if let Some(why) = merged.unreadable.get(&key.0) {
                polled.kept.insert((cluster.clone(), *key), why.clone());
            }
        }
        if let Some(why) = merged.accounting_unavailable {
            polled.unavailable.insert(cluster.clone(), why);
        }
    }
    Ok((polled, kept))
}

/// `scontrol show job` for jobs squeue and sacct did not know.
async fn ask_scontrol(
    ctx: &Context<'_>,
    keys: &[Key],
) -> Result<HashMap<Key, observe::Observation>> {
    let commands: Vec<Command> = keys
        .iter()
        .map(|(cluster, key)| commands::scontrol_show_job(key.0, cluster.as_deref()))
        .collect();
    let parts = run_joined(ctx, &commands).await?;
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
async fn run_joined(ctx: &Context<'_>, commands: &[Command]) -> Result<Vec<Output>> {
    let mut parts = Vec::with_capacity(commands.len());
    for chunk in commands.chunks(FOLLOWUP_CHUNK) {
        let output = ctx.transport().run(&round_trip::join(chunk)).await?;
        parts.extend(round_trip::split(&output, chunk.len())?);
    }
    Ok(parts)
}
