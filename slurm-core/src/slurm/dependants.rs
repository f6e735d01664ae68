//! Dependants on SLURM: `--dependency` from the parents' job ids
//! (`afterok:12:13,afterany:14`); after a poll, a dependant whose parent can never meet
//! its condition ends (ERROR, to be cancelled on the cluster), and one whose parent was
//! retried follows the new attempt (`scontrol update JobId=... Dependency=...`) so it
//! waits for it instead of failing.

use std::collections::HashSet;

use super::commands;
use super::context::Context;
use super::job::{slurm_job, SlurmJob};
use crate::classify::ErrorClass;
use crate::dependency::{
    never_satisfied, Attempts, DependencyCondition, DependencyVerdict, ResolvedDependency,
};
use crate::record::{JobId, JobRecord, Mark, TransitionSource};
use crate::state::JobState;
use crate::transport::round_trip;
use crate::{Error, Result};

/// SLURM's name of a condition.
fn slurm_condition(condition: DependencyCondition) -> &'static str {
    match condition {
        DependencyCondition::Ok => "afterok",
        DependencyCondition::Any => "afterany",
        DependencyCondition::NotOk => "afternotok",
        DependencyCondition::Start => "after",
    }
}

/// The `--dependency` value for the dependencies still waiting (`None`: nothing to
/// wait for): one `type:id:id` group per condition, all of which must hold.
pub(super) fn dependency_option(resolved: &[ResolvedDependency]) -> Result<Option<String>> {
    let mut groups: Vec<(DependencyCondition, Vec<String>)> = Vec::new();
    for r in resolved
        .iter()
        .filter(|r| r.verdict == DependencyVerdict::Waiting)
    {
        let (_, job) = slurm_job(&r.parent)?.ok_or_else(|| {
            Error::invalid(
                "after",
                format!("{} is not accepted by the scheduler yet", r.parent.id),
            )
        })?;
        let job = job.to_string();
        match groups
            .iter_mut()
            .find(|(c, _)| *c == r.dependency.condition)
        {
            Some((_, ids)) if !ids.contains(&job) => ids.push(job),
            Some(_) => {}
            None => groups.push((r.dependency.condition, vec![job])),
        }
    }
    groups.sort_by_key(|(c, _)| *c);
    Ok((!groups.is_empty()).then(|| {
        groups
            .iter()
            .map(|(c, ids)| format!("{}:{}", slurm_condition(*c), ids.join(":")))
            .collect::<Vec<_>>()
            .join(",")
    }))
}

/// What a poll does next for a dependant still waiting.
pub(super) enum DependantStep {
    /// Keep waiting.
    Wait,
    /// A parent can never meet the condition (and its end was known before this poll):
    /// the record ended ERROR; its job, if the scheduler has one, is to be cancelled.
    Ended {
        record: Box<JobRecord>,
        job: Option<SlurmJob>,
    },
    /// A parent was retried elsewhere: follow the new attempt ([`follow_retries`]).
    FollowRetry,
}

/// The next step for `record` (not ended, with dependencies), its parents resolved in
/// `attempts` (the poll's one listing); `ended_before` are the parents whose end was
/// known before this poll.
pub(super) async fn next_step(
    ctx: &Context<'_>,
    record: &JobRecord,
    attempts: &Attempts,
    ended_before: &HashSet<JobId>,
) -> Result<DependantStep> {
    let resolved = attempts.resolve(&record.after)?;
    if let Some(why) = never_satisfied(&resolved, ended_before) {
        let job = slurm_job(record)?;
        let record = ctx
            .records()
            .mark(
                &record.id,
                Mark::new(JobState::Error, TransitionSource::Poll)
                    .message(format!("{why}; cancelled on the cluster"))
                    .err_class(ErrorClass::Program),
            )
            .await?;
        return Ok(DependantStep::Ended {
            record: Box::new(record),
            job,
        });
    }
    if resolved.iter().any(|r| r.parent.id != r.dependency.job) {
        return Ok(DependantStep::FollowRetry);
    }
    Ok(DependantStep::Wait)
}

/// Point `dependants` at their parents' latest attempts (in `attempts`): their records'
/// `after`, and their dependency on the cluster (one `scontrol update` each, in one
/// round trip).
pub(super) async fn follow_retries(
    ctx: &Context<'_>,
    dependants: &[JobRecord],
    attempts: &Attempts,
) -> Result<()> {
    let store = ctx.records();
    let mut commands = Vec::new();
    for dependant in dependants {
        let resolved = attempts.resolve(&dependant.after)?;
        let after: Vec<_> = resolved.iter().map(ResolvedDependency::current).collect();
        let updated = store
            .update(&dependant.id, move |record| {
                record.after = after.clone();
                Ok(())
            })
            .await?;
        let Some((cluster, job)) = slurm_job(&updated)? else {
            continue;
        };
        let value = dependency_option(&resolved)?.unwrap_or_default();
        tracing::info!(job = %dependant.id, dependency = %value, "dependant follows a retried parent");
        commands.push(commands::scontrol_update_dependency(
            job,
            cluster.as_deref(),
            &value,
        ));
    }
    if commands.is_empty() {
        return Ok(());
    }
    let output = ctx.transport().run(&round_trip::join(&commands)).await?;
    for (command, part) in commands
        .iter()
        .zip(round_trip::split(&output, commands.len())?)
    {
        if !part.success() {
            tracing::warn!(command = %command.label(), stderr = %part.stderr_text().trim(), "re-pointing a dependant failed");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dependency::{resolve_dependencies, Dependency};
    use crate::record::MemoryRecordStore;
    use crate::slurm::testkit::open_accepted;
    use crate::spec::JobSpec;
    use crate::state::JobState;

    #[test]
    fn the_option_groups_parents_by_condition_and_skips_the_met_ones() {
        let store = MemoryRecordStore::new();
        let mut deps = Vec::new();
        for (name, native, state, condition) in [
            ("a", "11", JobState::Pending, DependencyCondition::Ok),
            ("b", "12", JobState::Running, DependencyCondition::Ok),
            ("c", "13", JobState::Pending, DependencyCondition::Any),
            ("d", "14", JobState::Complete, DependencyCondition::Ok),
            ("e", "15", JobState::Pending, DependencyCondition::Start),
        ] {
            let record = open_accepted(&store, &JobSpec::new(name, "true"), native, state);
            let id = record.id().clone();
            deps.push(Dependency { job: id, condition });
        }
        let resolved = resolve_dependencies(&store, &deps).unwrap();
        assert_eq!(
            dependency_option(&resolved).unwrap().as_deref(),
            Some("afterok:11:12,afterany:13,after:15")
        );
        assert_eq!(dependency_option(&resolved[3..4]).unwrap(), None);
    }
}
