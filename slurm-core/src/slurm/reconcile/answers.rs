//! What one settle round trip (`settle.sh`) said of each record: per attempt what the
//! fence found, whether the sidecar was removed, and the jobs squeue and sacct list with
//! the record's name (or why a tool did not answer).

use std::collections::{BTreeMap, BTreeSet};

use crate::record::BackendRef;
use crate::slurm::parse::{is_accounting_disabled, SlurmIdField};
use crate::transport::Output;

/// What the fence found of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Attempt {
    /// Never reached sbatch, and never will.
    Fenced,
    /// sbatch ran: its exit status and output.
    Done {
        rc: i32,
        stdout: String,
        stderr: String,
    },
    /// sbatch may still be running (the attempt began `age` seconds ago).
    Running { age: u64 },
}

/// What one settle round trip said of one record, before the verdict.
#[derive(Debug, Default)]
pub(super) struct Answers {
    /// Per attempt (1-based), what the fence found; missing entries are unknown.
    pub(super) attempts: BTreeMap<u32, Attempt>,
    /// Whether the fence removed the secrets sidecar.
    pub(super) forgot: bool,
    /// The job folder belongs to another record of the same name: nothing of this
    /// record reached it or sbatch.
    pub(super) foreign: bool,
    /// Jobs squeue lists with the name (`None`: squeue did not answer).
    pub(super) squeue: Option<BTreeSet<BackendRef>>,
    /// Jobs sacct lists with the name (`None`: sacct did not answer).
    pub(super) sacct: Option<BTreeSet<BackendRef>>,
    /// sacct said accounting is disabled.
    pub(super) accounting_disabled: bool,
    /// Why a tool did not answer.
    pub(super) failures: Vec<String>,
    /// The cluster's `MinJobAge` in seconds (`None`: unknown): how long slurmctld keeps
    /// an ended job, so how long squeue alone can say a job does not exist.
    pub(super) min_job_age: Option<u64>,
    /// Whether sacct may lag behind slurmctld (its DBD agent queue not empty; `None`:
    /// unknown, so it may).
    pub(super) accounting_lag: Option<bool>,
}

/// Jobs of a squeue or sacct listing (`ID|NAME` lines) whose name is exactly `name`:
/// a job itself, or an array by its tasks and pending ranges (`123_4`, `123_[5-9]` are
/// array 123); steps are not jobs.
pub(super) fn jobs_named(listing: &str, name: &str) -> BTreeSet<BackendRef> {
    listing
        .lines()
        .filter_map(|line| {
            let (id, job_name) = line.trim().split_once('|')?;
            if job_name.trim() != name {
                return None;
            }
            let field = SlurmIdField::parse(id.trim()).ok()?;
            // An array's task rows are the array; a heterogeneous job (a multi-role
            // job) is its leader's id.
            field
                .names_a_job()
                .then(|| BackendRef::new(field.job.to_string()))
        })
        .collect()
}

/// Read one settle round trip's four parts for `names`.
pub(super) fn read_answers(names: &[String], parts: &[Output]) -> BTreeMap<String, Answers> {
    let mut answers: BTreeMap<String, Answers> = names
        .iter()
        .map(|name| (name.clone(), Answers::default()))
        .collect();
    read_fences(&mut answers, parts);
    let squeue = &parts[1];
    let sacct = &parts[2];
    let sacct_disabled = is_accounting_disabled(&sacct.stderr_text());
    let mut min_job_age = None;
    let mut dbd_agent_queue: Option<u64> = None;
    for line in parts[3].stdout_text().lines() {
        match line.split_once(' ') {
            Some(("min_job_age", value)) => min_job_age = value.trim().parse().ok(),
            Some(("dbd_agent_queue", value)) => dbd_agent_queue = value.trim().parse().ok(),
            _ => {}
        }
    }
    for (name, entry) in answers.iter_mut() {
        entry.min_job_age = min_job_age;
        entry.accounting_lag = dbd_agent_queue.map(|queued| queued > 0);
        if squeue.success() {
            entry.squeue = Some(jobs_named(&squeue.stdout_text(), name));
        } else {
            entry.failures.push(format!(
                "squeue: {}",
                first_line(&squeue.stderr_text(), squeue.status)
            ));
        }
        if sacct.success() && !sacct_disabled {
            entry.sacct = Some(jobs_named(&sacct.stdout_text(), name));
        } else if sacct_disabled {
            entry.accounting_disabled = true;
        } else {
            entry.failures.push(format!(
                "sacct: {}",
                first_line(&sacct.stderr_text(), sacct.status)
            ));
        }
    }
    answers
}

/// Read what the fence (the first of `parts`) found of each attempt, whether it removed
/// the secrets sidecar, and whether the job folder is another record's, into `answers`.
fn read_fences(answers: &mut BTreeMap<String, Answers>, parts: &[Output]) {
    let decode = |text: &str| -> String {
        if text == "-" {
            return String::new();
        }
        hex::decode(text)
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default()
    };
    for line in parts[0].stdout_text().lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(entry) = fields.first().and_then(|name| answers.get_mut(*name)) else {
            continue;
        };
        match fields.as_slice() {
            [_, "forgot"] => entry.forgot = true,
            [_, "foreign"] => entry.foreign = true,
            [_, n, "fenced"] => {
                if let Ok(n) = n.parse() {
                    entry.attempts.insert(n, Attempt::Fenced);
                }
            }
            [_, n, "running", age] => {
                if let Ok(n) = n.parse() {
                    entry.attempts.insert(
                        n,
                        Attempt::Running {
                            age: age.parse().unwrap_or(0),
                        },
                    );
                }
            }
            [_, n, "done", rc, out, err] => {
                if let Ok(n) = n.parse() {
                    entry.attempts.insert(
                        n,
                        Attempt::Done {
                            rc: rc.parse().unwrap_or(-1),
                            stdout: decode(out),
                            stderr: decode(err),
                        },
                    );
                }
            }
            _ => {}
        }
    }
}

/// The first line of `text` that is not blank (at most 300 characters), or what the
/// exit `status` says when there is none.
fn first_line(text: &str, status: i32) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| l.chars().take(300).collect::<String>())
        .unwrap_or_else(|| format!("exited {status} without a message"))
}
