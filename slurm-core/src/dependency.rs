//! Job dependencies read from the store: a parent is read at its latest attempt (its
//! retries followed), so the dependants of a job retried after an infra failure wait for
//! the retry instead of failing; a submit's parents are checked, a dependant that can
//! never run is found, and the dependants of a retry are re-pointed. The values a spec
//! names in `after` ([`Dependency`], its condition and the [`DependencyVerdict`] a
//! parent's state gives it) are `spec::after`'s.
//!
//! The scheduler enforces the wait (SLURM: `--dependency`; `LocalBackend`: its own
//! queue); a client never waits. Both backends check a submit's parents, end a dependant
//! that can never run, and re-point the dependants of a retry with the functions here.

use std::collections::{HashMap, HashSet};

use crate::record::{list_readable, JobId, JobRecord, RecordFilter, RecordStore};
pub(crate) use crate::spec::{Dependency, DependencyCondition, DependencyVerdict};
use crate::state::JobState;
use crate::{Error, Result};

/// The store's records and their retry links, read once (one listing), to find the
/// latest attempt of any number of records: a poll reads it once for all its
/// dependants. Unreadable records are reported and left out.
#[derive(Debug, Default)]
pub(crate) struct Attempts {
    records: HashMap<JobId, JobRecord>,
    /// A record's newest retry (among two retries of one record, the newer).
    retries: HashMap<JobId, JobId>,
}

impl Attempts {
    /// Every readable record of `store`, in one listing.
    pub(crate) fn read(store: &dyn RecordStore) -> Result<Self> {
        let all = list_readable(
            store,
            &RecordFilter::any(),
            "the latest attempts of parents",
        )?;
        let mut attempts = Attempts::default();
        let mut newest: HashMap<JobId, chrono::DateTime<chrono::Utc>> = HashMap::new();
        for record in &all {
            if let Some(previous) = &record.retry_of {
                let newer = newest
                    .get(previous)
                    .is_none_or(|seen| *seen <= record.submitted_at);
                if newer {
                    newest.insert(previous.clone(), record.submitted_at);
                    attempts.retries.insert(previous.clone(), record.id.clone());
                }
            }
        }
        attempts.records = all.into_iter().map(|r| (r.id.clone(), r)).collect();
        Ok(attempts)
    }

    /// Replace what is known of `record` (changed since the listing, by a poll).
    pub(crate) fn refresh(&mut self, record: &JobRecord) {
        if let Some(slot) = self.records.get_mut(&record.id) {
            *slot = record.clone();
        }
    }

    /// The newest attempt of each of `ids`: the record itself, or the last record of its
    /// retry chain (`retry_of` links followed forward).
    pub(crate) fn latest(&self, ids: &[JobId]) -> Result<HashMap<JobId, JobRecord>> {
        let mut answers = HashMap::new();
        for id in ids {
            let Some(mut current) = self.records.get(id) else {
                return Err(Error::NotFound(format!(
                    "{id}: no such record (named as a dependency)"
                )));
            };
            let mut hops = 0;
            while let Some(next) = self
                .retries
                .get(&current.id)
                .and_then(|n| self.records.get(n))
            {
                current = next;
                hops += 1;
                if hops > self.records.len() {
                    break; // a loop in the links: stop where we are
                }
            }
            answers.insert(id.clone(), current.clone());
        }
        Ok(answers)
    }

    /// `deps` resolved: each parent's latest attempt and the verdict.
    pub(crate) fn resolve(&self, deps: &[Dependency]) -> Result<Vec<ResolvedDependency>> {
        let ids: Vec<JobId> = deps.iter().map(|d| d.job.clone()).collect();
        let latest = self.latest(&ids)?;
        Ok(deps
            .iter()
            .map(|dependency| {
                let parent = latest[&dependency.job].clone();
                let verdict = dependency.condition.verdict(parent.state);
                ResolvedDependency {
                    dependency: dependency.clone(),
                    parent,
                    verdict,
                }
            })
            .collect())
    }
}

/// One dependency of a job, resolved against the parent's latest attempt.
#[derive(Debug, Clone)]
pub(crate) struct ResolvedDependency {
    /// The dependency as written (its parent may have been retried since).
    pub(crate) dependency: Dependency,
    /// The parent's latest attempt.
    pub(crate) parent: JobRecord,
    /// What it says now.
    pub(crate) verdict: DependencyVerdict,
}

impl ResolvedDependency {
    /// The dependency on the latest attempt (what the scheduler should wait for).
    pub(crate) fn current(&self) -> Dependency {
        Dependency {
            job: self.parent.id.clone(),
            condition: self.dependency.condition,
        }
    }

    /// Why the dependency can never be met, naming the parent: `None` unless [`DependencyVerdict::Never`].
    pub(crate) fn never_message(&self) -> Option<String> {
        match &self.verdict {
            DependencyVerdict::Never(why) => Some(format!(
                "its dependency on {} ({}) can never be satisfied: {why}",
                self.parent.id, self.dependency.condition
            )),
            _ => None,
        }
    }
}

/// Resolve `deps` against the store: each parent's latest attempt and the verdict (one
/// listing of the store).
pub(crate) fn resolve_dependencies(
    store: &dyn RecordStore,
    deps: &[Dependency],
) -> Result<Vec<ResolvedDependency>> {
    if deps.is_empty() {
        return Ok(Vec::new());
    }
    Attempts::read(store)?.resolve(deps)
}

/// Check the parents of a job about to be submitted: each must be accepted by its
/// scheduler (a SUBMITTING parent is an error) and able to meet its condition (one that
/// never can is an error naming it). Returns the dependencies still to wait for.
pub(crate) fn check_before_submit(
    store: &dyn RecordStore,
    deps: &[Dependency],
) -> Result<Vec<ResolvedDependency>> {
    let mut waiting = Vec::new();
    for resolved in resolve_dependencies(store, deps)? {
        let parent = &resolved.parent;
        if parent.state == JobState::Submitting || parent.backend_ref.is_none() {
            return Err(Error::invalid(
                "after",
                format!(
                    "{} is not accepted by the scheduler yet ({}); submit the dependant once the parent is PENDING",
                    parent.id, parent.state
                ),
            ));
        }
        if let Some(message) = resolved.never_message() {
            return Err(Error::invalid(
                "after",
                format!("{message}; drop the dependency or submit the parent again"),
            ));
        }
        if resolved.verdict == DependencyVerdict::Waiting {
            waiting.push(resolved);
        }
    }
    Ok(waiting)
}

/// For a dependant still waiting: why it must end, when a parent's latest attempt can
/// never meet the condition and that parent's end was already known before this poll
/// (`known_ended`). One poll of grace lets a watch retry an infra failure first, so the
/// dependant follows the retry instead of failing.
pub(crate) fn never_satisfied(
    resolved: &[ResolvedDependency],
    known_ended: &HashSet<JobId>,
) -> Option<String> {
    resolved
        .iter()
        .filter(|r| known_ended.contains(&r.parent.id))
        .find_map(ResolvedDependency::never_message)
}

/// After `previous` was retried as `retry`: every dependant not yet ended that waits for
/// `previous` waits for `retry` instead (its record's `after` is updated). Returns the
/// dependants changed, so a scheduler can be told too.
pub(crate) fn follow_retry(
    store: &dyn RecordStore,
    previous: &JobId,
    retry: &JobId,
) -> Result<Vec<JobRecord>> {
    let mut changed = Vec::new();
    for dependant in list_readable(
        store,
        &RecordFilter::any().active(),
        "the dependants of a retried record",
    )? {
        if !dependant.after.iter().any(|d| &d.job == previous) {
            continue;
        }
        let updated = store.update(&dependant.id, &mut |record| {
            for dependency in &mut record.after {
                if &dependency.job == previous {
                    dependency.job = retry.clone();
                }
            }
            Ok(())
        })?;
        changed.push(updated);
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::record::{BackendRef, Mark, MemoryRecordStore, TransitionSource};
    use crate::spec::JobSpec;
    use crate::storage::RemotePath;

    fn open(store: &MemoryRecordStore, name: &str, retry_of: Option<&JobRecord>) -> JobRecord {
        let id = JobId::mint(name);
        let mut record = JobRecord::new(
            id.clone(),
            &JobSpec::new(name, "true"),
            RemotePath::parse(&format!("/r/{id}")).unwrap(),
        )
        .unwrap();
        if let Some(previous) = retry_of {
            record = record.retrying(previous);
        }
        store.open(&record).unwrap();
        store
            .mark(
                &id,
                Mark::new(JobState::Pending, TransitionSource::Agent)
                    .backend_ref(BackendRef::new("1")),
            )
            .unwrap()
    }

    #[test]
    fn the_latest_attempt_follows_retries_and_a_submitting_parent_is_refused() {
        let store = MemoryRecordStore::new();
        let first = open(&store, "train", None);
        let second = open(&store, "train", Some(&first));
        let third = open(&store, "train", Some(&second));
        let alone = open(&store, "alone", None);
        let latest = Attempts::read(&store)
            .unwrap()
            .latest(&[first.id.clone(), alone.id.clone()])
            .unwrap();
        assert_eq!(latest[&first.id].id, third.id);
        assert_eq!(latest[&alone.id].id, alone.id);

        let submitting = JobRecord::new(
            JobId::mint("early"),
            &JobSpec::new("early", "true"),
            RemotePath::parse("/r/early").unwrap(),
        )
        .unwrap();
        store.open(&submitting).unwrap();
        let error =
            check_before_submit(&store, &[Dependency::ok(submitting.id.clone())]).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("not accepted by the scheduler yet"),
            "{error}"
        );

        store
            .mark(
                &third.id,
                Mark::new(JobState::Error, TransitionSource::Poll),
            )
            .unwrap();
        let error = check_before_submit(&store, &[Dependency::ok(first.id.clone())]).unwrap_err();
        assert!(error.to_string().contains(third.id.as_str()), "{error}");
        let any = Dependency {
            job: first.id.clone(),
            condition: DependencyCondition::Any,
        };
        assert!(
            check_before_submit(&store, &[any]).unwrap().is_empty(),
            "met already"
        );
        let waiting = check_before_submit(&store, &[Dependency::ok(alone.id.clone())]).unwrap();
        assert_eq!(waiting.len(), 1);
        assert!(check_before_submit(
            &store,
            &[Dependency::ok(JobId::parse("nope-000000").unwrap())]
        )
        .is_err());
    }
}
