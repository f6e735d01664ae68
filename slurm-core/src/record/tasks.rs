//! The tasks of an array record: one state per task ([`TaskRecord`]), the marks a poll
//! makes for them ([`TaskMark`]), and the array's own state derived from its tasks
//! ([`derive_state`]), so the record keeps the state machine's rules.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::Usage;
use crate::classify::ErrorClass;
use crate::state::{JobState, TransitionOutcome};

/// One task of an array as the record keeps it, read through its accessors.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRecord {
    pub(crate) state: JobState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) err_class: Option<ErrorClass>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) nodes: Vec<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) node_fault: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) exit_code: Option<i32>,
    #[serde(deserialize_with = "super::timestamp::deserialize")]
    pub(crate) updated_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) usage: Option<Usage>,
}

impl TaskRecord {
    /// The task's state (the state machine's rules hold for it).
    pub fn state(&self) -> JobState {
        self.state
    }

    /// Infra or program, for an ERROR.
    pub fn err_class(&self) -> Option<ErrorClass> {
        self.err_class
    }

    /// The nodes it ran on.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// Whether its failure is tied to its nodes (they are excluded from its retry).
    pub fn node_fault(&self) -> bool {
        self.node_fault
    }

    /// What was last said of it.
    pub fn message(&self) -> Option<&str> {
        self.message.as_deref()
    }

    /// Its exit code, kept from the poll that saw it end (a task that ended is not
    /// asked about again).
    pub fn exit_code(&self) -> Option<i32> {
        self.exit_code
    }

    /// What it used, from accounting, once it ended.
    pub fn usage(&self) -> Option<&Usage> {
        self.usage.as_ref()
    }

    /// When it last changed.
    pub fn updated_at(&self) -> DateTime<Utc> {
        self.updated_at
    }

    /// A task just opened, in `state`.
    pub(crate) fn new(state: JobState, at: DateTime<Utc>) -> Self {
        TaskRecord {
            state,
            err_class: None,
            nodes: Vec::new(),
            node_fault: false,
            message: None,
            exit_code: None,
            updated_at: at,
            usage: None,
        }
    }
}

/// A state change of one task, asked of a store inside a [`Mark`](super::Mark).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskMark {
    /// The observed state.
    pub state: JobState,
    /// The error class; only with ERROR.
    pub err_class: Option<ErrorClass>,
    /// Why.
    pub message: Option<String>,
    /// The nodes it runs or ran on, when known.
    pub nodes: Option<Vec<String>>,
    /// Whether its failure is tied to its nodes.
    pub node_fault: bool,
    /// Its exit code, when the scheduler gave one.
    pub exit_code: Option<i32>,
    /// What it used, from accounting, once it ended.
    pub usage: Option<Usage>,
}

impl TaskMark {
    /// A mark to `state`.
    pub fn new(state: JobState) -> Self {
        TaskMark {
            state,
            err_class: None,
            message: None,
            nodes: None,
            node_fault: false,
            exit_code: None,
            usage: None,
        }
    }
}

/// Apply `mark` to `task` through the state machine; whether anything changed. An
/// illegal or ignored change leaves the task as it is (a task ended stays ended).
pub(crate) fn apply_task(task: &mut TaskRecord, mark: &TaskMark, at: DateTime<Utc>) -> bool {
    let outcome = JobState::check_transition(task.state, mark.state);
    let mut changed = false;
    match outcome {
        Ok(TransitionOutcome::Apply) => {
            task.state = mark.state;
            task.err_class = mark.err_class;
            task.node_fault = mark.node_fault;
            task.message = mark.message.clone();
            task.exit_code = mark.exit_code.or(task.exit_code);
            if mark.usage.is_some() {
                task.usage = mark.usage.clone();
            }
            changed = true;
        }
        Ok(TransitionOutcome::NoOp) => {
            if task.err_class.is_none() && mark.err_class.is_some() {
                task.err_class = mark.err_class;
                changed = true;
            }
            if task.exit_code.is_none() && mark.exit_code.is_some() {
                task.exit_code = mark.exit_code;
                changed = true;
            }
            if mark.usage.is_some() && task.usage != mark.usage {
                task.usage = mark.usage.clone();
                changed = true;
            }
        }
        Ok(TransitionOutcome::Ignore) | Err(_) => return false,
    }
    if let Some(nodes) = &mark.nodes {
        if !nodes.is_empty() && &task.nodes != nodes {
            task.nodes = nodes.clone();
            changed = true;
        }
    }
    if changed {
        task.updated_at = at;
    }
    changed
}

/// The state of an array from its tasks' states:
/// - every task ended: COMPLETE when all completed, else ERROR when one failed (classed
///   program when one failure is a program's or unclassed, else infra), else CANCELED;
/// - otherwise the most advanced live state of the tasks not ended: RUNNING, then
///   PENDING, then UNKNOWN; SUBMITTING only while every task is.
///
/// An array ends only when its last task ends, and a task ended stays ended, so the
/// derived state moves as the state machine allows.
///
/// A multi-role job's state is derived from its roles by the same rule.
pub(crate) fn derive_state<K>(tasks: &BTreeMap<K, TaskRecord>) -> (JobState, Option<ErrorClass>) {
    let states = || tasks.values().map(|t| t.state);
    if states().all(JobState::is_terminal) {
        if states().all(|s| s == JobState::Complete) {
            return (JobState::Complete, None);
        }
        let errors: Vec<Option<ErrorClass>> = tasks
            .values()
            .filter(|t| t.state == JobState::Error)
            .map(|t| t.err_class)
            .collect();
        if errors.is_empty() {
            return (JobState::Canceled, None);
        }
        let class = if errors.iter().all(|c| *c == Some(ErrorClass::Infra)) {
            ErrorClass::Infra
        } else {
            ErrorClass::Program
        };
        return (JobState::Error, Some(class));
    }
    for live in [JobState::Running, JobState::Pending, JobState::Unknown] {
        if states().any(|s| s == live) {
            return (live, None);
        }
    }
    // Tasks still SUBMITTING beside ended ones: the array was accepted (nothing goes
    // back to SUBMITTING).
    if states().all(|s| s == JobState::Submitting) {
        (JobState::Submitting, None)
    } else {
        (JobState::Pending, None)
    }
}

/// `8 tasks: 2 COMPLETE, 2 RUNNING, 4 PENDING`.
pub(crate) fn summary(tasks: &BTreeMap<u32, TaskRecord>) -> String {
    counted(tasks, "tasks")
}

/// `3 roles: 1 ERROR (policy), 2 CANCELED`: a multi-role job's roles told in short,
/// the failed ones named.
pub(crate) fn role_summary(roles: &BTreeMap<String, TaskRecord>) -> String {
    let failed: Vec<&str> = roles
        .iter()
        .filter(|(_, r)| r.state == JobState::Error)
        .map(|(name, _)| name.as_str())
        .collect();
    let text = counted(roles, "roles");
    match failed.is_empty() {
        true => text,
        false => format!("{text}; failed: {}", failed.join(", ")),
    }
}

/// `N <noun>: 2 COMPLETE, ...` of any parts.
fn counted<K>(parts: &BTreeMap<K, TaskRecord>, noun: &str) -> String {
    let tasks = parts;
    let mut counts: BTreeMap<JobState, usize> = BTreeMap::new();
    for task in tasks.values() {
        *counts.entry(task.state).or_default() += 1;
    }
    let parts: Vec<String> = counts
        .iter()
        .rev()
        .map(|(s, n)| format!("{n} {s}"))
        .collect();
    format!("{} {noun}: {}", tasks.len(), parts.join(", "))
}

/// Task indices grouped by state, as ranges: `[(COMPLETE, "0-1"), (PENDING, "2-7")]`.
pub(crate) fn state_groups(tasks: &BTreeMap<u32, TaskRecord>) -> Vec<(JobState, String)> {
    let mut groups: BTreeMap<JobState, Vec<u32>> = BTreeMap::new();
    for (index, task) in tasks {
        groups.entry(task.state).or_default().push(*index);
    }
    groups
        .into_iter()
        .map(|(state, indices)| {
            let set: crate::spec::TaskSet = indices.into_iter().collect();
            (state, set.to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::ALL_STATES;
    use proptest::prelude::*;

    fn tasks(states: &[(JobState, Option<ErrorClass>)]) -> BTreeMap<u32, TaskRecord> {
        states
            .iter()
            .enumerate()
            .map(|(i, (state, class))| {
                let mut task = TaskRecord::new(*state, Utc::now());
                task.err_class = *class;
                (i as u32, task)
            })
            .collect()
    }

    #[test]
    fn the_array_state_follows_its_tasks() {
        use JobState::*;
        let infra = Some(ErrorClass::Infra);
        let program = Some(ErrorClass::Program);
        assert_eq!(
            derive_state(&tasks(&[(Complete, None), (Complete, None)])),
            (Complete, None)
        );
        assert_eq!(
            derive_state(&tasks(&[(Complete, None), (Error, infra)])),
            (Error, infra)
        );
        assert_eq!(
            derive_state(&tasks(&[(Error, infra), (Error, program)])),
            (Error, program)
        );
        assert_eq!(
            derive_state(&tasks(&[(Complete, None), (Canceled, None)])),
            (Canceled, None)
        );
        assert_eq!(
            derive_state(&tasks(&[
                (Complete, None),
                (Running, None),
                (Pending, None)
            ]))
            .0,
            Running
        );
        assert_eq!(
            derive_state(&tasks(&[(Error, infra), (Pending, None)])).0,
            Pending
        );
        assert_eq!(
            derive_state(&tasks(&[(Complete, None), (Unknown, None)])).0,
            Unknown
        );
        let groups = state_groups(&tasks(&[
            (Complete, None),
            (Complete, None),
            (Pending, None),
            (Complete, None),
        ]));
        assert_eq!(
            groups,
            vec![(Pending, "2".to_string()), (Complete, "0-1,3".to_string())]
        );
    }

    proptest! {
        /// Whatever legal changes the tasks go through, the derived state only moves as
        /// the state machine allows.
        #[test]
        fn derived_changes_are_legal(
            start in proptest::collection::vec(0usize..7, 1..6),
            steps in proptest::collection::vec((0usize..6, 0usize..7), 0..30),
        ) {
            let mut tasks: BTreeMap<u32, TaskRecord> = start
                .iter()
                .enumerate()
                .map(|(i, s)| (i as u32, TaskRecord::new(ALL_STATES[*s].min(JobState::Running), Utc::now())))
                .collect();
            let mut derived = derive_state(&tasks).0;
            for (task, state) in steps {
                let index = (task % tasks.len()) as u32;
                let mut mark = TaskMark::new(ALL_STATES[state]);
                if mark.state == JobState::Error { mark.err_class = Some(ErrorClass::Infra); }
                apply_task(tasks.get_mut(&index).unwrap(), &mark, Utc::now());
                let next = derive_state(&tasks).0;
                prop_assert!(JobState::check_transition(derived, next).is_ok(), "{derived} -> {next}");
                derived = next;
            }
        }
    }
}
