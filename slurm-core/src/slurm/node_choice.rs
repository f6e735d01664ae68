//! Which node of a running job a forward or an exec reaches: the one place that choice
//! is made (the first node, the Nth node of the allocation, the node of an array's
//! task; a role of a multi-role job once roles exist).

use crate::record::JobRecord;
use crate::state::JobState;
use crate::{Error, Result};

/// Which node of a running job to reach.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum NodeChoice {
    /// The job's first node (an array: its lowest running task's first node).
    #[default]
    First,
    /// The node at this index of the job's allocation (0 is the first).
    Index(usize),
    /// The first node of this task of an array job.
    Task(u32),
    /// The first node of this role of a multi-role job.
    Role(String),
}

/// The node `choice` names among what `record` says of its running job; a clear error
/// when the job is not running, has no such node, task or role.
pub(super) fn choose_node(record: &JobRecord, choice: &NodeChoice) -> Result<String> {
    let id = record.id();
    match choice {
        NodeChoice::Role(role) => Err(Error::invalid(
            "role",
            format!("job {id} has no roles (asked for role {role:?}); use --node N or --task N"),
        )),
        NodeChoice::Task(task) => {
            if !record.is_array() {
                return Err(Error::invalid(
                    "task",
                    format!("job {id} is not an array; use --node N to pick one of its nodes"),
                ));
            }
            let Some(t) = record.tasks().get(task) else {
                return Err(Error::invalid(
                    "task",
                    format!("job {id} has no task {task}"),
                ));
            };
            if t.state() != JobState::Running {
                return Err(not_running(&format!("task {task} of job {id}"), t.state()));
            }
            t.nodes()
                .first()
                .cloned()
                .ok_or_else(|| no_nodes_yet(record))
        }
        NodeChoice::First | NodeChoice::Index(_) => {
            let index = match choice {
                NodeChoice::Index(i) => *i,
                _ => 0,
            };
            let nodes: &[String] = if record.is_array() {
                match record
                    .tasks()
                    .values()
                    .find(|t| t.state() == JobState::Running)
                {
                    Some(task) => task.nodes(),
                    None => {
                        return Err(not_running(
                            &format!("every task of job {id}"),
                            record.state(),
                        ))
                    }
                }
            } else {
                if record.state() != JobState::Running {
                    return Err(not_running(&format!("job {id}"), record.state()));
                }
                record.nodes()
            };
            if nodes.is_empty() {
                return Err(no_nodes_yet(record));
            }
            nodes.get(index).cloned().ok_or_else(|| {
                Error::invalid(
                    "node",
                    format!(
                        "job {id} runs on {} node(s) ({}); --node counts from 0 to {}",
                        nodes.len(),
                        nodes.join(","),
                        nodes.len() - 1
                    ),
                )
            })
        }
    }
}

/// The error of a forward or an exec into `what`, which is in `state`, not RUNNING.
fn not_running(what: &str, state: JobState) -> Error {
    Error::invalid(
        "job",
        format!(
            "{what} is {state}, not RUNNING: a forward or an exec reaches a running job; {}",
            if state.is_terminal() {
                "it has ended"
            } else {
                "wait until it runs (slurmctl watch)"
            }
        ),
    )
}

fn no_nodes_yet(record: &JobRecord) -> Error {
    Error::invalid(
        "job",
        format!(
            "the scheduler has not named the nodes of job {} yet; try again in a moment",
            record.id()
        ),
    )
}
