//! What SLURM's answers mean, without I/O: squeue, sacct and scontrol rows merged into
//! one observation per job, and the decision that observation makes for a record (the
//! mark, and what must still be read before the mark is final).

use std::collections::HashMap;

use crate::backend::NativeStatus;
use crate::classify::{
    classify_failure, is_node_fault, ErrorClass, CHILD_TIMEOUT_EXIT, CHILD_TIMEOUT_NOTE,
};
use crate::record::{JobRecord, Mark, Timeline, TransitionSource};
use crate::slurm::parse::{
    expand_nodelist, is_accounting_disabled, is_invalid_job_id, is_transient_scheduler_error,
    parse_sacct_rows_eligible, parse_scontrol_show_job, parse_squeue, resolve_newest_of,
    split_failed_nodes, SacctRow, SlurmJobId, SqueueRow,
};
use crate::slurm::reasons::{reason_kind, ReasonKind};
use crate::slurm::states::{map_state, SlurmBaseState, SlurmState};
use crate::slurm::why::category_of;

use super::resume::{decide_resumable, ResumeStep};
use super::usage::{run_parts, run_usages, GpusAsked, RolePlace, RunParts};
use crate::spec::CompletionCheck;
use crate::state::JobState;
use crate::transport::Output;
use crate::{Error, Result};

/// A job itself (`None`) or one task of an array job.
pub(super) type TaskKey = (SlurmJobId, Option<u32>);

/// A job as the scheduler described it in this poll.
#[derive(Debug, Clone)]
pub(super) struct Observation {
    pub(super) state: SlurmState,
    pub(super) reason: Option<String>,
    pub(super) exit_code: Option<i32>,
    pub(super) nodes: Option<String>,
    pub(super) source: &'static str,
    /// An earlier run of a requeued job ended this way (NODE_FAIL, PREEMPTED, ...).
    pub(super) requeued_after: Option<String>,
    /// A step of the newest run that did not finish (`0 CANCELLED`, `batch FAILED`).
    pub(super) failed_step: Option<(String, SlurmState)>,
    /// A heterogeneous job's components and their node lists (`(1, "n2")`), from the
    /// rows `123+N`: a multi-role job's roles' nodes. Empty for any other job.
    pub(super) components: Vec<(u32, String)>,
    /// The node the scheduler pinned a failure on (sacct's `FailedNode`, 23.02 on).
    pub(super) failed_node: Option<String>,
    /// The end was read from slurmctld (squeue, scontrol) while accounting could not be
    /// asked (why): its exit code and steps are not confirmed by accounting.
    pub(super) unconfirmed: Option<String>,
    /// The newest run's times, from accounting (submitted, eligible, started, ended).
    pub(super) times: Option<Timeline>,
    /// What each run of the job used by part (components, steps), oldest first, from
    /// accounting.
    pub(super) runs: Vec<RunParts>,
}

/// What one cluster's squeue and sacct parts said of the keys asked about.
#[derive(Debug, Default)]
pub(super) struct Merged {
    /// Each key the scheduler described.
    pub(super) observations: HashMap<TaskKey, Observation>,
    /// Jobs with a sacct row that could not be read: they stay as they are (why).
    pub(super) unreadable: HashMap<SlurmJobId, String>,
    /// sacct could not answer now (slurmdbd down, a row of no readable job): why. What
    /// only accounting could tell stays as it is; ends squeue shows are read from
    /// slurmctld, unconfirmed.
    pub(super) accounting_unavailable: Option<String>,
}

/// What a poll decided for one record: the mark, what the scheduler said, and what
/// must still be read before the mark is final.
#[derive(Debug)]
pub(super) struct Decision {
    pub(super) mark: Mark,
    pub(super) native: Option<NativeStatus>,
    pub(super) followup: Followup,
    pub(super) observed: Option<Observation>,
    /// The job waits on the cluster for a dependency that can never hold: cancel it
    /// there once it is marked ERROR (never pending forever).
    pub(super) cancel: bool,
}

/// What a job needs after the first round trip, before it can be marked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Followup {
    /// Nothing: the mark is final.
    None,
    /// The logs' tails, to class a failure infra or program.
    Classify,
    /// `status.json` in the results folder, to confirm a COMPLETED job.
    StatusJson,
    /// A resumable job Slurm requeued: its begin time moved forward, and how its
    /// segment ended read from the segments file ([`super::resume`]).
    Continue,
    /// A resumable job Slurm refused to requeue, or holds: the run continued as a fresh
    /// job the record follows ([`super::resume`]).
    ContinueFresh,
}

impl Followup {
    /// Whether the follow-up decides how a job ended (a requeued segment did not end it).
    pub(super) fn ends_job(self) -> bool {
        matches!(self, Followup::Classify | Followup::StatusJson)
    }
}

/// What one cluster's squeue and sacct parts of a poll say of `keys` (jobs, or tasks of
/// array jobs). `squeue` answers for every job; `sacct` only for those squeue could not
/// settle (empty otherwise), in `SACCT_FORMAT`. squeue's failure fails the poll; sacct's
/// does not (see [`Merged`]), and a sacct row that cannot be read costs its own job only.
#[cfg(test)]
pub(super) fn merge(keys: &[TaskKey], squeue: &Output, sacct: &Output) -> Result<Merged> {
    merge_reading(keys, squeue, sacct, false, false)
}

/// [`merge`], with sacct's rows in `SACCT_FORMAT_WITH_FAILED_NODE` when `failed_node`:
/// a job's `FailedNode` joins its observation.
pub(super) fn merge_reading(
    keys: &[TaskKey],
    squeue: &Output,
    sacct: &Output,
    failed_node: bool,
    eligible: bool,
) -> Result<Merged> {
    let squeue_rows = if squeue.success() {
        parse_squeue(&squeue.stdout_text())?
    } else {
        scheduler_failure("squeue", squeue)?;
        Vec::new()
    };
    let mut merged = Merged::default();
    // sacct ran and accounting is on: its silence about a job means lag.
    let accounting = sacct.success() && !is_accounting_disabled(&sacct.stderr_text());
    let (sacct_text, failed_nodes) = match failed_node {
        true => split_failed_nodes(&sacct.stdout_text()),
        false => (sacct.stdout_text(), HashMap::new()),
    };
    let sacct_rows = read_sacct_rows(sacct, &sacct_text, accounting, eligible, &mut merged);
    // Rows by job (a row describes only keys of its own job), so a poll of 10,000 jobs
    // looks each key up among its job's rows alone.
    let mut live_rows: HashMap<SlurmJobId, Vec<&SqueueRow>> = HashMap::new();
    for row in &squeue_rows {
        live_rows.entry(row.id.job).or_default().push(row);
    }
    let mut accounted: HashMap<SlurmJobId, Vec<SacctRow>> = HashMap::new();
    for row in sacct_rows {
        accounted.entry(row.id.job).or_default().push(row);
    }
    for key in keys {
        if merged.unreadable.contains_key(&key.0) {
            continue;
        }
        let from_sacct = accounted
            .get(&key.0)
            .and_then(|rows| observe_sacct(rows, *key));
        let live = live_rows
            .get(&key.0)
            .and_then(|rows| rows.iter().rfind(|row| row.id.describes(key.0, key.1)));
        let observation = first_observation(live, from_sacct, squeue);
        if let Some(observation) = observation {
            let observation = confirmed(
                observation,
                key,
                &accounted,
                accounting,
                &merged.accounting_unavailable,
            );
            let components = match key.1 {
                Some(_) => Vec::new(),
                None => components_of(
                    live_rows.get(&key.0).map(Vec::as_slice).unwrap_or_default(),
                    accounted.get(&key.0).map(Vec::as_slice).unwrap_or_default(),
                ),
            };
            let failed_node = match key.1 {
                None => failed_nodes.get(&key.0.to_string()).cloned(),
                Some(_) => None,
            };
            merged.observations.insert(
                *key,
                Observation {
                    components,
                    failed_node,
                    ..observation
                },
            );
        }
    }
    Ok(merged)
}

/// sacct's rows of one cluster's part, when `accounting` answered (`text`: its output,
/// the failed nodes split off); an unreadable row marks its job (or, naming none, the
/// accounting) in `merged`.
fn read_sacct_rows(
    sacct: &Output,
    text: &str,
    accounting: bool,
    eligible: bool,
    merged: &mut Merged,
) -> Vec<SacctRow> {
    if accounting {
        let (rows, unreadable) = parse_sacct_rows_eligible(text, eligible);
        for row in unreadable {
            tracing::warn!(error = %row.error, "a sacct row could not be read; its job is left as it was");
            let why = format!("its accounting row could not be read ({})", row.error);
            match row.job {
                Some(job) => {
                    merged.unreadable.insert(job, why);
                }
                None => merged.accounting_unavailable = Some(why),
            }
        }
        rows
    } else {
        merged.accounting_unavailable = sacct_failure(sacct);
        Vec::new()
    }
}

/// What squeue's row (`live`) and accounting's observation (`from_sacct`) of a key say
/// before accounting confirms an end: squeue's row, else accounting's unless it is stale.
fn first_observation(
    live: Option<&&SqueueRow>,
    from_sacct: Option<Observation>,
    squeue: &Output,
) -> Option<Observation> {
    match (live, from_sacct) {
        (Some(row), sacct) => Some(Observation {
            state: row.state.clone(),
            reason: row.reason.clone(),
            exit_code: sacct.as_ref().and_then(|s| s.exit_code),
            nodes: row.nodelist.clone(),
            source: "squeue",
            // Just after a requeue sacct may know only the run that ended
            // (NODE_FAIL) while squeue already shows the job pending again.
            requeued_after: sacct.as_ref().and_then(|s| {
                s.requeued_after.clone().or_else(|| {
                    (is_requeue_cause(&s.state.base)
                        && map_state(&row.state).0 == JobState::Pending)
                        .then(|| s.state.raw.clone())
                })
            }),
            // Steps confirm only a finished job; sacct decides those.
            failed_step: None,
            components: Vec::new(),
            failed_node: None,
            unconfirmed: None,
            times: sacct.as_ref().and_then(|s| s.times),
            runs: sacct.map(|s| s.runs).unwrap_or_default(),
        }),
        // squeue answered and no longer lists the job, yet sacct says it is
        // pending or running: slurmdbd lags behind slurmctld, so that row is
        // stale. Ask scontrol instead of taking a step back.
        (None, Some(stale)) if squeue.success() && !map_state(&stale.state).0.is_terminal() => None,
        (None, sacct) => sacct,
    }
}

/// `observation` of `key` as accounting confirms it (see the comments within), with
/// `accounted` the cluster's sacct rows by job and `unavailable` why accounting could
/// not be asked.
fn confirmed(
    observation: Observation,
    key: &TaskKey,
    accounted: &HashMap<SlurmJobId, Vec<SacctRow>>,
    accounting: bool,
    unavailable: &Option<String>,
) -> Observation {
    // A job squeue says has ended is told by accounting how: its exit code and
    // its steps (a COMPLETED job with a failed step did not finish; exit 124 is
    // the child timeout). While accounting lags behind (no row yet, or a row
    // that has not ended), the job is not called terminal: terminal states are
    // final, so it waits a poll. While accounting cannot be asked at all, the
    // end slurmctld shows is taken, said to be unconfirmed.
    let ended = observation.source == "squeue" && map_state(&observation.state).0.is_terminal();
    // A requeued job that then ends another way (cancelled while pending
    // again) may still read in accounting as the run the requeue ended
    // (NODE_FAIL): that row is an earlier run's, not this end.
    let settled = accounted
        .get(&key.0)
        .and_then(|rows| observe_sacct(rows, *key))
        .filter(|s| map_state(&s.state).0.is_terminal())
        .filter(|s| {
            !(ended && is_requeue_cause(&s.state.base) && s.state.base != observation.state.base)
        });
    match settled {
        Some(sacct) if ended => sacct,
        None if ended && accounting => Observation {
            reason: Some(format!(
                "ended {}; waiting for accounting to confirm its exit code and steps",
                observation.state.raw
            )),
            state: SlurmState::from_base(SlurmBaseState::Completing),
            exit_code: None,
            ..observation
        },
        None if ended => Observation {
            unconfirmed: unavailable.clone(),
            ..observation
        },
        _ => observation,
    }
}

/// Why sacct did not answer for this poll (`None`: it answered, or accounting is off on
/// this cluster, or it only did not know the ids). Never a failure of the poll: sacct
/// adds to squeue.
fn sacct_failure(sacct: &Output) -> Option<String> {
    let stderr = sacct.stderr_text();
    if sacct.success() || is_invalid_job_id(&stderr) || is_accounting_disabled(&stderr) {
        return None;
    }
    let why = stderr
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| l.chars().take(300).collect::<String>())
        .unwrap_or_else(|| format!("sacct exited {} without a message", sacct.status));
    tracing::warn!(%why, "sacct did not answer; using squeue and scontrol only");
    Some(why)
}

/// The decision for a job the poll could not read (`why`): it stays as it was
/// (`current`), with a note in what the status shows.
pub(super) fn kept(current: JobState, why: &str) -> Decision {
    Decision {
        mark: Mark::new(current, TransitionSource::Poll).message(why),
        native: Some(NativeStatus {
            state: "UNREAD".to_string(),
            reason: Some(format!("left {current}: {why}")),
            exit_code: None,
            nodes: None,
            source: "sacct",
            reason_note: None,
            category: None,
        }),
        followup: Followup::None,
        observed: None,
        cancel: false,
    }
}

/// The components of a heterogeneous job and their node lists: squeue's rows
/// (`123+1 ... n2`) while it runs, else accounting's (each component's last row).
fn components_of(live: &[&SqueueRow], accounted: &[SacctRow]) -> Vec<(u32, String)> {
    let usable = |nodes: &Option<String>| {
        nodes
            .clone()
            .filter(|n| !n.is_empty() && n != "None assigned" && !n.starts_with('('))
    };
    let mut components: std::collections::BTreeMap<u32, String> = live
        .iter()
        .filter_map(|row| Some((row.id.component()?, usable(&row.nodelist)?)))
        .collect();
    if components.is_empty() {
        components = accounted
            .iter()
            .filter_map(|row| Some((row.id.component()?, usable(&row.nodelist)?)))
            .collect();
    }
    components.into_iter().collect()
}

/// What `scontrol show job` said of `id` (the fallback for jobs squeue and sacct did
/// not know): `None` when it does not know the job either.
pub(super) fn from_scontrol(id: SlurmJobId, part: &Output) -> Result<Option<Observation>> {
    if !part.success() {
        scheduler_failure("scontrol", part)?;
        return Ok(None);
    }
    let jobs = parse_scontrol_show_job(&part.stdout_text()).unwrap_or_default();
    Ok(jobs
        .iter()
        .filter(|job| job.job_id().ok() == Some(id))
        .filter_map(|job| {
            job.state().ok().map(|state| Observation {
                state,
                reason: job.reason().map(str::to_string),
                exit_code: job.exit_code(),
                nodes: job.nodelist().map(str::to_string),
                source: "scontrol",
                requeued_after: None,
                failed_step: None,
                components: Vec::new(),
                failed_node: job.get("FailedNode").and_then(optional_node),
                unconfirmed: None,
                times: None,
                runs: Vec::new(),
            })
        })
        .next_back())
}

/// The decision `observed` makes for `record` (a record no tool knows goes UNKNOWN);
/// `current` is the state of what was observed (the record's, or its task's).
pub(super) fn decide(
    record: &JobRecord,
    current: JobState,
    observed: Option<Observation>,
) -> Decision {
    let Some(observed) = observed else {
        return Decision {
            mark: Mark::new(JobState::Unknown, TransitionSource::Poll)
                .message("not found by squeue, sacct or scontrol"),
            native: None,
            followup: Followup::None,
            observed: None,
            cancel: false,
        };
    };
    let native = NativeStatus {
        state: observed.state.raw.clone(),
        reason: observed.reason.clone(),
        reason_note: reason_note(&observed).map(str::to_string),
        exit_code: observed.exit_code,
        nodes: observed.nodes.clone(),
        source: observed.source,
        category: Some(category_of(
            observed.state.base.name(),
            observed.reason.as_deref(),
        )),
    };
    let observed = awaiting_components(record, observed);
    let (state, class) = map_state(&observed.state);
    let state = if observed.state.base == SlurmBaseState::Completing {
        while_ending(current, &observed)
    } else {
        state
    };
    let mut message = describe(&observed);
    if let (Some(why), true) = (&observed.unconfirmed, state.is_terminal()) {
        message = format!(
            "{message}; read from slurmctld while accounting could not be asked ({why}): not confirmed by accounting"
        );
    }
    let mut cancel = false;
    let resumable = decide_resumable(
        record,
        current,
        state,
        observed.exit_code,
        &observed.state.base,
        observed.reason.as_deref(),
    );
    let (state, class, followup) = outcome(
        record,
        &observed,
        (state, class),
        resumable,
        &mut message,
        &mut cancel,
    );
    let mark = mark_of(record, state, class, message, &observed);
    Decision {
        mark,
        native: Some(native),
        followup,
        observed: Some(observed),
        cancel,
    }
}

/// `observed` as accounting confirms a multi-role job's end: while the newest run's
/// rows lack the end of some component (see [`RunParts::awaits_components`]), the job is
/// still ending, waiting a poll for them (its usage and its roles' would read low).
fn awaiting_components(record: &JobRecord, observed: Observation) -> Observation {
    let ended = observed.source == "sacct" && map_state(&observed.state).0.is_terminal();
    if !ended || !record.is_multi_role() {
        return observed;
    }
    let components = super::roles::role_places(record)
        .values()
        .filter(|place| matches!(place, RolePlace::Own(_)))
        .count() as u32;
    let now = chrono::Utc::now().naive_utc();
    match observed.runs.last() {
        Some(run) if run.awaits_components(components, now) => Observation {
            reason: Some(format!(
                "ended {}; waiting for accounting to write every component's end",
                observed.state.raw
            )),
            state: SlurmState::from_base(SlurmBaseState::Completing),
            exit_code: None,
            ..observed
        },
        _ => observed,
    }
}

/// The state, error class and follow-up of a job `observed` in `state` (of `class`) by
/// the tools, `resumable` when it may continue; the message and the cancel are amended
/// with what is decided.
fn outcome(
    record: &JobRecord,
    observed: &Observation,
    (state, class): (JobState, Option<ErrorClass>),
    resumable: Option<ResumeStep>,
    message: &mut String,
    cancel: &mut bool,
) -> (JobState, Option<ErrorClass>, Followup) {
    let never = observed
        .reason
        .as_deref()
        .is_some_and(|r| reason_kind(r) == ReasonKind::NeverSatisfied);
    match state {
        _ if resumable.is_some() => match resumable.unwrap_or(ResumeStep::Continue) {
            ResumeStep::BudgetUsedUp(why) => {
                *message = format!("{message}: {why}");
                (JobState::Error, Some(ErrorClass::Program), Followup::None)
            }
            ResumeStep::Continue => (JobState::Pending, None, Followup::Continue),
            ResumeStep::ContinueFresh => (JobState::Pending, None, Followup::ContinueFresh),
        },
        JobState::Pending if never && record.after.is_empty() => {
            *message = format!(
                "{message}: its dependency can never be satisfied; cancelled on the cluster"
            );
            *cancel = true;
            (JobState::Error, Some(ErrorClass::Program), Followup::None)
        }
        JobState::Complete => match &observed.failed_step {
            Some((step, step_state)) => {
                *message = format!("{message}, but step {step} ended {}", step_state.raw);
                match map_state(step_state) {
                    (_, Some(class)) => (JobState::Error, Some(class), Followup::None),
                    _ => (JobState::Error, None, Followup::Classify),
                }
            }
            None if observed.exit_code.is_some_and(|c| c != 0) => {
                *message = format!(
                    "{message} with exit code {}",
                    observed.exit_code.unwrap_or(0)
                );
                (JobState::Error, None, Followup::Classify)
            }
            None if record.completion_check == CompletionCheck::StatusJson => {
                (JobState::Complete, None, Followup::StatusJson)
            }
            None => (JobState::Complete, None, Followup::None),
        },
        JobState::Error if class.is_none() && observed.exit_code == Some(CHILD_TIMEOUT_EXIT) => {
            *message = format!("{message}: {CHILD_TIMEOUT_NOTE}");
            (JobState::Error, Some(ErrorClass::Program), Followup::None)
        }
        JobState::Error if class.is_none() => (JobState::Error, None, Followup::Classify),
        other => (other, class, Followup::None),
    }
}

/// The mark of `record`'s job decided `state` (of `class`) with `message`, with the
/// nodes `observed` names (those it failed on, for an error) and what its runs used.
fn mark_of(
    record: &JobRecord,
    state: JobState,
    class: Option<ErrorClass>,
    message: String,
    observed: &Observation,
) -> Mark {
    let mut mark = Mark::new(state, TransitionSource::Poll).message(message);
    if let Some(times) = observed.times {
        mark = mark.times(times);
    }
    if !observed.runs.is_empty() {
        let asks = GpusAsked::of(record).asks(None);
        mark = mark.usage(run_usages(&observed.runs, asks));
    }
    if let Some(class) = class {
        mark = mark.err_class(class);
        mark.node_fault = class == ErrorClass::Infra
            && is_node_fault(observed.state.base.ending(observed.exit_code), "");
    }
    if let (JobState::Error, Some(failed)) = (state, observed.failed_node.as_deref()) {
        match expand_nodelist(failed) {
            Ok(nodes) => mark = mark.failed_nodes(nodes),
            Err(error) => tracing::warn!(%error, "unreadable FailedNode; not recorded"),
        }
    }
    if let Some(nodes) = observed.nodes.as_deref() {
        match expand_nodelist(nodes) {
            Ok(nodes) if !nodes.is_empty() => mark = mark.nodes(nodes),
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "unreadable node list; nodes not recorded"),
        }
    }
    mark
}

/// The state of a job that is ending (squeue's COMPLETING, or an end squeue showed that
/// accounting has not confirmed yet). Ending does not say the job ran: one cancelled
/// while pending ends the same way. So the job keeps the live state it had (`current`);
/// one not seen live yet is RUNNING when nodes were given to it, else PENDING.
fn while_ending(current: JobState, observed: &Observation) -> JobState {
    match current {
        JobState::Pending | JobState::Running => current,
        _ if observed
            .nodes
            .as_deref()
            .is_some_and(|n| !n.trim().is_empty()) =>
        {
            JobState::Running
        }
        _ => JobState::Pending,
    }
}

/// Finish `decision` with what its follow-up read (`part`): the logs' tails class a
/// failure, `status.json` confirms a COMPLETED job or turns it into an ERROR.
pub(super) fn apply_followup(decision: &mut Decision, part: &Output) {
    let Decision {
        mark,
        followup,
        observed,
        ..
    } = decision;
    match followup {
        Followup::Classify => {
            let base = observed
                .as_ref()
                .map_or(SlurmBaseState::Failed, |o| o.state.base.clone());
            let exit = observed.as_ref().and_then(|o| o.exit_code);
            let tail = part.stdout_text();
            let class = classify_failure(base.ending(exit), &tail);
            mark.err_class = Some(class);
            mark.node_fault = class == ErrorClass::Infra && is_node_fault(base.ending(exit), &tail);
            let note = format!(" (classed {} from the logs)", class.as_str());
            mark.message = Some(format!(
                "{}{note}",
                mark.message.clone().unwrap_or_default()
            ));
        }
        Followup::StatusJson if status_json_unreadable(part) => {
            // The job finished, but status.json could not be read (a transient NFS
            // error, a dropped read): not a verdict. The record stays unfinished and the
            // next poll reads it again; only a file that is absent or says otherwise
            // makes the job an ERROR.
            mark.state = JobState::Running;
            mark.message = Some(format!(
                "{}; status.json could not be read ({}), read again at the next poll",
                mark.message.clone().unwrap_or_default(),
                part.stderr_text()
                    .trim()
                    .chars()
                    .take(300)
                    .collect::<String>()
            ));
        }
        Followup::StatusJson => {
            if !status_json_says_success(part) {
                mark.state = JobState::Error;
                mark.err_class = Some(ErrorClass::Program);
                mark.message = Some(format!(
                    "{}, but status.json in the results folder does not report success",
                    mark.message.clone().unwrap_or_default()
                ));
            }
        }
        Followup::Continue | Followup::ContinueFresh | Followup::None => {}
    }
}

/// What sacct says of job or task `key`: its newest row, the way an earlier run ended
/// when it was requeued, and a step of the newest run that did not finish.
fn observe_sacct(rows: &[SacctRow], key: TaskKey) -> Option<Observation> {
    let (id, task) = key;
    let newest = resolve_newest_of(rows, id, task)?;
    let requeued_after = rows
        .iter()
        .filter(|r| r.id.describes(id, task) && r.position != newest.position)
        .filter(|r| is_requeue_cause(&r.state.base))
        .map(|r| r.state.raw.clone())
        .next_back();
    // sacct prints a job row, then that run's steps: the newest run's steps are those
    // after its row and before the next job row.
    let failed_step = rows
        .iter()
        .skip_while(|r| r.position != newest.position)
        .skip(1)
        .take_while(|r| r.id.is_step())
        .filter(|r| r.id.is_step_of(id, task))
        .filter(|r| r.id.step.as_deref() != Some("extern"))
        .find(|r| {
            matches!(
                r.state.base,
                SlurmBaseState::Cancelled
                    | SlurmBaseState::Failed
                    | SlurmBaseState::OutOfMemory
                    | SlurmBaseState::NodeFail
                    | SlurmBaseState::Timeout
            )
        })
        .map(|r| (r.id.step.clone().unwrap_or_default(), r.state.clone()));
    Some(Observation {
        state: newest.state.clone(),
        reason: newest.reason.clone().filter(|r| r != "None"),
        exit_code: newest.exit_code,
        nodes: newest
            .nodelist
            .clone()
            .filter(|n| !n.is_empty() && n != "None assigned"),
        source: "sacct",
        requeued_after,
        failed_step,
        components: Vec::new(),
        failed_node: None,
        unconfirmed: None,
        times: Some(Timeline::new(
            newest.submit.map(|t| t.and_utc()),
            newest.eligible.map(|t| t.and_utc()),
            newest.start.map(|t| t.and_utc()),
            newest.end.map(|t| t.and_utc()),
        ))
        .filter(|t| !t.is_empty()),
        runs: run_parts(rows, id, task),
    })
}

/// A node list field, `None` when empty or `(null)`.
fn optional_node(text: &str) -> Option<String> {
    crate::slurm::parse::squeue::optional(text)
}

/// The ways a run can end that make Slurm requeue a job with `--requeue`.
fn is_requeue_cause(state: &SlurmBaseState) -> bool {
    matches!(
        state,
        SlurmBaseState::NodeFail
            | SlurmBaseState::Preempted
            | SlurmBaseState::BootFail
            | SlurmBaseState::Requeued
    )
}

/// A scheduler command that failed (squeue, scontrol): fine when the job simply left
/// the queue, a transient error when the scheduler did not answer, otherwise a remote
/// error.
fn scheduler_failure(tool: &str, output: &Output) -> Result<()> {
    let stderr = output.stderr_text();
    if is_invalid_job_id(&stderr) || is_accounting_disabled(&stderr) {
        return Ok(());
    }
    let transient = is_transient_scheduler_error(&stderr);
    Err(Error::Remote {
        command: tool.to_string(),
        status: output.status,
        stderr: stderr.trim().chars().take(500).collect(),
        transient,
    })
}

/// What a waiting job's reason means, where its name does not say it (a limit, a hold);
/// an ended job's reason is read with its state, and a dependency that can never be
/// met ends the job with its own message.
fn reason_note(observed: &Observation) -> Option<&'static str> {
    let kind = reason_kind(observed.reason.as_deref()?);
    let waiting = !map_state(&observed.state).0.is_terminal();
    match kind {
        ReasonKind::NeverSatisfied => None,
        _ if waiting => kind.note(),
        _ => None,
    }
}

fn describe(observed: &Observation) -> String {
    let mut text = format!("{} ({})", observed.state.raw, observed.source);
    if let Some(reason) = &observed.reason {
        text.push_str(&format!(", reason {reason}"));
        if let Some(note) = reason_note(observed) {
            text.push_str(&format!(" ({note})"));
        }
    }
    if let Some(previous) = &observed.requeued_after {
        text.push_str(&format!(", requeued by Slurm after {previous}"));
        if previous.starts_with("NODE_FAIL") || previous.starts_with("BOOT_FAIL") {
            text.push_str(" (infra)");
        }
    }
    text
}

/// Whether a `cat status.json` failed for another reason than the file being absent
/// (an I/O error, a stale NFS handle, a read that never came back).
fn status_json_unreadable(output: &Output) -> bool {
    !output.success() && !output.stderr_text().contains("No such file or directory")
}

/// Whether a `cat status.json` says success: the last JSON object with a `status`
/// key holds `SUCCESS`, `COMPLETE` or `COMPLETED` (any case).
fn status_json_says_success(output: &Output) -> bool {
    if !output.success() {
        return false;
    }
    let text = output.stdout_text();
    let mut verdict = None;
    let mut consider = |value: &serde_json::Value| {
        if let Some(status) = value.get("status").and_then(|s| s.as_str()) {
            verdict = Some(matches!(
                status.to_ascii_uppercase().as_str(),
                "SUCCESS" | "COMPLETE" | "COMPLETED"
            ));
        }
    };
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) {
        consider(&value);
    } else {
        for line in text.lines() {
            if let Ok(value) = serde_json::from_str::<serde_json::Value>(line) {
                consider(&value);
            }
        }
    }
    verdict.unwrap_or(false)
}

#[cfg(test)]
#[path = "observe_tests.rs"]
mod tests;
