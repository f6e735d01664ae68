//! What every backend's retry shares: a finished record submitted again from the spec
//! the client kept (never a copy the job could rewrite), only its failed tasks for an
//! array, claimed once however many watchers and processes ask, kept off the nodes its
//! failures were tied to, and its dependants following the new attempt.

use crate::record::{JobId, JobRecord, RecordStore, RetryClaim};
use crate::spec::JobSpec;
use crate::{Error, Result};

/// Where a submit stands with the record it retries (`SubmitOptions::retry_of`).
#[derive(Debug)]
pub(crate) enum Prior {
    /// Not a retry.
    Fresh,
    /// The retry of this record.
    Retry(Box<JobRecord>),
    /// The record was retried already (by another watcher or process): this is that
    /// retry, and nothing is submitted.
    Followed(Box<JobRecord>),
}

impl Prior {
    /// The record retried, for a submit that goes ahead.
    pub(crate) fn previous(&self) -> Option<&JobRecord> {
        match self {
            Prior::Retry(previous) => Some(previous),
            _ => None,
        }
    }
}

/// Where a submit with `retry_of` stands.
pub(crate) fn prior(store: &dyn RecordStore, retry_of: Option<&JobId>) -> Result<Prior> {
    let Some(id) = retry_of else {
        return Ok(Prior::Fresh);
    };
    let previous = store.get(id)?;
    Ok(match &previous.retried_as {
        Some(winner) => Prior::Followed(Box::new(store.get(winner)?)),
        None => Prior::Retry(Box::new(previous)),
    })
}

/// The start of a retry of record `id` by `resubmit`.
#[derive(Debug)]
pub(crate) enum RetryStart {
    /// Retried once already (by another watcher or process): that retry is the answer.
    Followed(Box<JobRecord>),
    /// Retry this record (terminal).
    Retry(Box<JobRecord>),
}

/// Begin the retry of `id`: only a finished job is submitted again.
pub(crate) fn begin(store: &dyn RecordStore, id: &JobId) -> Result<RetryStart> {
    let previous = store.get(id)?;
    if let Some(winner) = &previous.retried_as {
        return Ok(RetryStart::Followed(Box::new(store.get(winner)?)));
    }
    if !previous.state.is_terminal() {
        return Err(Error::invalid(
            "id",
            format!(
                "{id} is {}; only a finished job can be submitted again (cancel it first)",
                previous.state
            ),
        ));
    }
    Ok(RetryStart::Retry(Box::new(previous)))
}

/// The spec a retry of `previous` submits: the client's own copy; for a record that
/// keeps none, `cluster_copy` (read back from the job folder) only with the submitted
/// digest. An array retries only its failed tasks.
pub(crate) fn retry_spec(previous: &JobRecord, cluster_copy: Option<&str>) -> Result<JobSpec> {
    let spec = previous.spec_for_retry(cluster_copy)?;
    Ok(match previous.tasks_to_retry() {
        Some(failed) => spec.for_tasks(failed),
        None => spec,
    })
}

/// Open `record`: a retry's record together with its claim of the retry
/// ([`RecordStore::open_retry`]), any other as it is. `None` when it was opened and is
/// to be submitted; else another record already retries the same one, nothing was
/// opened, and that record is the answer (nothing is to be submitted).
pub(crate) fn open_or_follow(
    store: &dyn RecordStore,
    record: &JobRecord,
) -> Result<Option<JobRecord>> {
    if record.retry_of.is_none() {
        store.open(record)?;
        return Ok(None);
    }
    match store.open_retry(record)? {
        RetryClaim::Won => Ok(None),
        RetryClaim::Taken(winner) => {
            tracing::info!(job = %record.id, %winner, "the retry was claimed elsewhere; following it");
            store.get(&winner).map(Some)
        }
    }
}

/// Refuse a retry whose node exclusions (inherited along its retry chain) leave its
/// partition (`partition`, whose `nodes` are known, or `None`) too few nodes for a job
/// that needs `needed`.
pub(crate) fn check_exclusions(
    needed: u32,
    exclude: &[String],
    nodes: Option<&[String]>,
    partition: &str,
    retry_of: Option<&JobId>,
) -> Result<()> {
    let Some(nodes) = nodes else {
        return Ok(()); // unknown membership: the scheduler decides
    };
    if exclude.is_empty() {
        return Ok(());
    }
    let left = nodes.iter().filter(|n| !exclude.contains(n)).count();
    if left < needed as usize {
        let of = retry_of.map(ToString::to_string).unwrap_or_default();
        return Err(Error::invalid(
            "excluded_nodes",
            format!(
                "the retry of {of} must avoid {} (node failures along its retry chain), which leaves {left} of the {} node(s) of partition {partition} for a job that needs {needed}; return the nodes to service (scontrol update nodename=... state=resume) and submit the job afresh, or choose another partition",
                exclude.join(", "),
                nodes.len()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusions_that_leave_too_few_nodes_are_refused_naming_the_field() {
        let nodes = ["n1".to_string(), "n2".to_string()];
        let exclude = ["n1".to_string()];
        assert!(check_exclusions(1, &exclude, Some(&nodes), "gpu", None).is_ok());
        let error = check_exclusions(2, &exclude, Some(&nodes), "gpu", None).unwrap_err();
        assert!(error.to_string().contains("excluded_nodes"), "{error}");
        assert!(error.to_string().contains("leaves 1 of the 2"), "{error}");
        assert!(
            check_exclusions(2, &exclude, None, "gpu", None).is_ok(),
            "unknown membership: the scheduler decides"
        );
    }
}
