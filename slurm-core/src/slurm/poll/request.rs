//! The poll's request protocol (`poll.sh`): per cluster, squeue for its jobs (named in
//! lists, or the user's own jobs from [`MINE_FROM`] of them), then sacct for those squeue
//! cannot settle; what to ask travels on standard input, so any number of jobs fits.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use super::observe::TaskKey;
use crate::slurm::commands;
use crate::slurm::context::poll_request::PollRequest;
use crate::slurm::parse::SlurmJobId;
use crate::slurm::states::live_state_names;
#[cfg(any(test, feature = "testing"))]
use crate::transport::Command;
use crate::Result;

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
    pub(super) jobs: Vec<SlurmJobId>,
    pub(super) keys: Vec<TaskKey>,
    /// Keys whose record (or task) is RUNNING: squeue showing one pending again sends
    /// it to sacct (a requeue).
    pub(super) running: Vec<TaskKey>,
    /// Array tasks not ended: one squeue no longer lists sends its array to sacct.
    pub(super) expected: Vec<TaskKey>,
    /// Whether sacct is asked for `FailedNode` too (the login node's client is Slurm
    /// 23.02 or newer).
    pub(super) failed_node: bool,
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
#[cfg(any(test, feature = "testing"))]
pub(crate) fn poll_command(groups: &BTreeMap<Option<String>, Group>) -> Result<Command> {
    Ok(poll_request(groups)?.command(None))
}

/// What one poll of `groups` asks `poll.sh`, its memo not yet named.
pub(crate) fn poll_request(groups: &BTreeMap<Option<String>, Group>) -> Result<PollRequest> {
    poll_request_deciding(groups, BASH_DECIDES_UP_TO)
}

/// [`poll_command`], with bash deciding what needs sacct up to `bash_decides_up_to`
/// jobs of a cluster (the tests run both ways).
#[cfg(test)]
pub(super) fn poll_command_deciding(
    groups: &BTreeMap<Option<String>, Group>,
    bash_decides_up_to: usize,
) -> Result<Command> {
    Ok(poll_request_deciding(groups, bash_decides_up_to)?.command(None))
}

/// Up to this many jobs of one cluster, the poll script decides which need sacct with
/// bash's builtins; above, one `awk` does (a process start, about 2 ms here, against
/// bash's loops growing with the list). Up to this many listed keys in all, bash's
/// builtins write the lists from standard input into their files; above, one `awk`.
const BASH_DECIDES_UP_TO: usize = 200;

/// [`poll_request`], with bash deciding what needs sacct up to `bash_decides_up_to` jobs
/// of a cluster.
pub(super) fn poll_request_deciding(
    groups: &BTreeMap<Option<String>, Group>,
    bash_decides_up_to: usize,
) -> Result<PollRequest> {
    let mut params = vec![live_state_names()];
    let mut stdin = String::new();
    for (k, (cluster, group)) in groups.iter().enumerate() {
        let mut squeue = commands::squeue_rows(cluster.as_deref())?;
        let mine = group.jobs.len() >= MINE_FROM;
        if mine {
            squeue = squeue.arg("--me");
        }
        let sacct = commands::sacct_rows(cluster.as_deref(), group.failed_node)?;
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
    // The lists reach their files by bash's builtins up to the same size as the deciders.
    let listed = groups
        .values()
        .map(|g| g.jobs.len() + g.running.len() + g.expected.len())
        .sum::<usize>();
    let lists_by = if listed <= bash_decides_up_to {
        "bash"
    } else {
        "awk"
    };
    params.insert(1, lists_by.to_string());
    let lists = hex::encode(&Sha256::digest(stdin.as_bytes())[..8]);
    Ok(PollRequest::new(
        params,
        stdin.into_bytes(),
        lists,
        groups.values().all(|g| g.jobs.len() >= MINE_FROM),
    ))
}
