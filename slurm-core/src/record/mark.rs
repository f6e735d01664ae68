//! A [`Mark`]: a state change asked of a store, and how it applies to a record (a single
//! job's state through the state machine, an array's derived from its tasks).

use std::collections::BTreeMap;

use chrono::Utc;

use crate::classify::ErrorClass;

use crate::redact::SecretRegistry;
use crate::state::{JobState, TransitionOutcome};
use crate::{Error, Result};

use super::tasks::{self, derive_state, role_summary, summary, TaskMark, TaskRecord};
use super::{BackendRef, JobRecord, SegmentNote, Timeline, Transition, TransitionSource, Usage};

/// A state change asked of a store: validated by the state machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// The observed or decided state.
    pub state: JobState,
    /// Who.
    pub source: TransitionSource,
    /// Why (redacted by the store).
    pub message: Option<String>,
    /// The scheduler's job, set on the move to PENDING once the scheduler accepted it.
    pub backend_ref: Option<BackendRef>,
    /// The error class; only with state ERROR.
    pub err_class: Option<ErrorClass>,
    /// The nodes the job runs or ran on, when observed.
    pub nodes: Option<Vec<String>>,
    /// Whether an ERROR is tied to the job's nodes.
    pub node_fault: bool,
    /// The nodes the scheduler named as the cause of the failure (of a single job; empty
    /// when it named none).
    pub failed_nodes: Vec<String>,
    /// Changes of an array's tasks (the record's state is then derived from them; a
    /// mark without tasks on an array applies its state to every task not ended).
    pub tasks: BTreeMap<u32, TaskMark>,
    /// Changes of a multi-role job's roles, by name (the record's state is then derived
    /// from them; a mark without roles on a multi-role job applies its state to every
    /// role not ended).
    pub roles: BTreeMap<String, TaskMark>,
    /// How the segment of a resumable run that ends with this mark ended, when the
    /// backend knows (see [`JobRecord::segments`]).
    pub segment: Option<SegmentNote>,
    /// The scheduler's times of the job's newest run, when it told them (see
    /// [`JobRecord::timeline`]).
    pub times: Option<Timeline>,
    /// What each run of the job's newest scheduler job used, oldest first, when
    /// accounting told it (see [`JobRecord::usage`]).
    pub usage: Vec<Usage>,
}

impl Mark {
    /// A mark to `state` by `source`.
    pub fn new(state: JobState, source: TransitionSource) -> Self {
        Mark {
            state,
            source,
            message: None,
            backend_ref: None,
            err_class: None,
            nodes: None,
            node_fault: false,
            failed_nodes: Vec::new(),
            tasks: BTreeMap::new(),
            roles: BTreeMap::new(),
            segment: None,
            times: None,
            usage: Vec::new(),
        }
    }

    /// With what each run of the job's newest scheduler job used, oldest first.
    pub fn usage(mut self, runs: Vec<Usage>) -> Self {
        self.usage = runs;
        self
    }

    /// With the scheduler's times of the job's newest run.
    pub fn times(mut self, times: Timeline) -> Self {
        self.times = Some(times);
        self
    }

    /// With how the segment that ends with this mark ended.
    pub fn segment(mut self, note: SegmentNote) -> Self {
        self.segment = Some(note);
        self
    }

    /// With the nodes the job runs or ran on.
    pub fn nodes(mut self, nodes: Vec<String>) -> Self {
        self.nodes = Some(nodes);
        self
    }

    /// With a failure tied to the job's nodes.
    pub fn node_fault(mut self, fault: bool) -> Self {
        self.node_fault = fault;
        self
    }

    /// With the nodes the scheduler named as the cause of the failure.
    pub fn failed_nodes(mut self, nodes: Vec<String>) -> Self {
        self.failed_nodes = nodes;
        self
    }

    /// With a change of task `index`.
    pub fn task(mut self, index: u32, mark: TaskMark) -> Self {
        self.tasks.insert(index, mark);
        self
    }

    /// With a change of role `name`.
    pub fn role(mut self, name: impl Into<String>, mark: TaskMark) -> Self {
        self.roles.insert(name.into(), mark);
        self
    }

    /// With a message.
    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    /// With the scheduler's job.
    pub fn backend_ref(mut self, backend_ref: BackendRef) -> Self {
        self.backend_ref = Some(backend_ref);
        self
    }

    /// With an error class.
    pub fn err_class(mut self, class: ErrorClass) -> Self {
        self.err_class = Some(class);
        self
    }
}

/// How a mark applies: the rule every store keeps ([`RecordStore::mark`](super::RecordStore::mark)).
impl JobRecord {
    /// Apply `mark` to this record through the state machine, its message redacted with
    /// `redactor`; returns whether anything changed. This is what a
    /// [`RecordStore`](super::RecordStore) does to the stored record on
    /// [`mark`](super::RecordStore::mark): a store written outside this crate calls it.
    /// An illegal change is [`Error::InvalidTransition`] and changes nothing.
    pub fn apply_mark(&mut self, mark: Mark, redactor: Option<&SecretRegistry>) -> Result<bool> {
        if self.is_array() || self.is_multi_role() {
            return self.apply_parts_mark(mark, redactor);
        }
        if mark.err_class.is_some() && mark.state != JobState::Error {
            return Err(Error::invalid(
                "err_class",
                format!(
                    "only an ERROR mark carries an error class, not {}",
                    mark.state
                ),
            ));
        }
        let outcome = JobState::check_transition_for(self.id.as_str(), self.state, mark.state)?;
        let now = Utc::now();
        match outcome {
            TransitionOutcome::Apply => {
                let previous = self.state;
                if self.state == JobState::Submitting {
                    // The submit is settled now (or ended): no note of why it was not.
                    self.unsettled = None;
                }
                self.state = mark.state;
                if let Some(r) = mark.backend_ref {
                    self.backend_ref = Some(r);
                }
                if let Some(c) = mark.err_class {
                    self.err_class = Some(c);
                }
                // The nodes as seen, never shrinking: an ending job's rows name only the
                // nodes still completing (a node failure's survivors); a list with a
                // node not seen before (a requeue elsewhere) replaces them.
                if let Some(nodes) = mark.nodes.filter(|n| !n.is_empty()) {
                    if nodes.iter().any(|node| !self.nodes.contains(node)) {
                        self.nodes = nodes;
                    }
                }
                self.node_fault = mark.node_fault;
                if !mark.failed_nodes.is_empty() {
                    self.failed_nodes = mark.failed_nodes;
                }
                let message = mark
                    .message
                    .map(|m| redactor.map_or_else(|| m.clone(), |r| r.redact(&m)));
                self.history.push(Transition {
                    at: now,
                    state: mark.state,
                    source: mark.source,
                    message,
                });
                self.note_segment(previous, mark.segment, now);
                if let Some(times) = &mark.times {
                    self.note_timeline(times);
                }
                self.note_usage(&mark.usage);
                self.updated_at = now;
                Ok(true)
            }
            TransitionOutcome::NoOp => {
                let mut changed = false;
                if self.backend_ref.is_none() && mark.backend_ref.is_some() {
                    self.backend_ref = mark.backend_ref;
                    changed = true;
                }
                if self.err_class.is_none() && mark.err_class.is_some() {
                    self.err_class = mark.err_class;
                    changed = true;
                }
                if let Some(times) = &mark.times {
                    changed |= self.note_timeline(times);
                }
                changed |= self.note_usage(&mark.usage);
                if changed {
                    self.updated_at = now;
                }
                Ok(changed)
            }
            TransitionOutcome::Ignore => Ok(false),
        }
    }

    /// [`JobRecord::apply_mark`] for an array or a multi-role job: the changes of its
    /// parts (tasks or roles; or the mark's state for every part not ended), then the
    /// record's state derived from its parts, through the state machine.
    fn apply_parts_mark(&mut self, mark: Mark, redactor: Option<&SecretRegistry>) -> Result<bool> {
        let now = Utc::now();
        let redact = |m: String| redactor.map_or_else(|| m.clone(), |r| r.redact(&m));
        let whole = TaskMark {
            state: mark.state,
            err_class: mark.err_class,
            message: mark.message.clone().map(redact),
            nodes: None,
            node_fault: mark.node_fault,
            exit_code: None,
            usage: None,
        };
        let mut changed = if self.is_array() {
            apply_part_marks(&mut self.tasks, mark.tasks, &whole, &redact, now)?
        } else {
            apply_part_marks(&mut self.roles, mark.roles, &whole, &redact, now)?
        };
        if self.is_multi_role() {
            let mut nodes: Vec<String> = Vec::new();
            for node in self.roles.values().flat_map(|r| r.nodes.iter()) {
                if !nodes.contains(node) {
                    nodes.push(node.clone());
                }
            }
            if !nodes.is_empty() && nodes != self.nodes {
                self.nodes = nodes;
                changed = true;
            }
        }
        if self.backend_ref.is_none() && mark.backend_ref.is_some() {
            self.backend_ref = mark.backend_ref;
            changed = true;
        }
        // A multi-role job's times and usage are the job's (its components summed).
        if let Some(times) = &mark.times {
            changed |= self.note_timeline(times);
        }
        changed |= self.note_usage(&mark.usage);
        let (state, class) = match self.is_array() {
            true => derive_state(&self.tasks),
            false => derive_state(&self.roles),
        };
        match JobState::check_transition_for(self.id.as_str(), self.state, state)? {
            TransitionOutcome::Apply => {
                self.state = state;
                self.err_class = class;
                let summary = match self.is_array() {
                    true => summary(&self.tasks),
                    false => role_summary(&self.roles),
                };
                let message = match mark.message {
                    Some(m) if state.is_terminal() || mark.source != TransitionSource::Poll => {
                        format!("{}; {summary}", redact(m))
                    }
                    _ => summary,
                };
                self.history.push(Transition {
                    at: now,
                    state,
                    source: mark.source,
                    message: Some(message),
                });
                changed = true;
            }
            TransitionOutcome::NoOp => {
                if self.err_class != class {
                    self.err_class = class;
                    changed = true;
                }
            }
            TransitionOutcome::Ignore => {}
        }
        if changed {
            self.updated_at = now;
        }
        Ok(changed)
    }
}

/// Apply `marks` to `parts` (an array's tasks or a job's roles), or `whole` to every
/// part not ended when `marks` is empty; whether anything changed. A mark of a part
/// that is not there changes nothing.
fn apply_part_marks<K: Ord + std::fmt::Display>(
    parts: &mut BTreeMap<K, TaskRecord>,
    marks: BTreeMap<K, TaskMark>,
    whole: &TaskMark,
    redact: &dyn Fn(String) -> String,
    now: chrono::DateTime<Utc>,
) -> Result<bool> {
    let mut changed = false;
    if marks.is_empty() {
        for part in parts.values_mut() {
            if !part.state.is_terminal() {
                changed |= tasks::apply_task(part, whole, now);
            }
        }
        return Ok(changed);
    }
    for (key, mut part_mark) in marks {
        if part_mark.err_class.is_some() && part_mark.state != JobState::Error {
            return Err(Error::invalid(
                "err_class",
                format!("{key}: only an ERROR carries an error class"),
            ));
        }
        part_mark.message = part_mark.message.map(redact);
        if let Some(part) = parts.get_mut(&key) {
            changed |= tasks::apply_task(part, &part_mark, now);
        }
    }
    Ok(changed)
}
