//! Why a job of the local queue waits: for a free slot (with the jobs ahead of it), for
//! its dependency (with its parents), or for its array's limit of tasks at once.

use super::LocalBackend;
use crate::backend::{
    JobAhead, JobStatus, LimitUse, ParentJob, WaitAnswer, WaitCategory, WaitEvidence,
};
use crate::record::JobRecord;
use crate::state::JobState;

impl LocalBackend {
    /// The answer for `status` (just read), with `parents` the records it depends on.
    pub(super) fn wait_answer(&self, status: &JobStatus, parents: &[JobRecord]) -> WaitAnswer {
        let record = status.record();
        let mut answer = WaitAnswer::from_status(status);
        if answer.category != WaitCategory::NotEvaluated || record.backend_ref.is_none() {
            return answer;
        }
        let queue = self.inner.queue.lock().expect("queue lock");
        let Some(position) = queue.waiting.iter().position(|l| l.id == record.id) else {
            answer.explanation = "accepted, not yet in this machine's queue".to_string();
            return answer;
        };
        let launch = &queue.waiting[position];
        let parents_waited: Vec<ParentJob> = record
            .after
            .iter()
            .filter_map(|d| {
                let parent = parents.iter().find(|p| p.id == d.job)?;
                (!matches!(
                    d.condition.verdict(parent.state),
                    crate::spec::DependencyVerdict::Satisfied
                ))
                .then(|| ParentJob {
                    record: Some(parent.id.clone()),
                    job: parent
                        .backend_ref
                        .as_ref()
                        .map_or_else(|| parent.id.to_string(), |r| r.native_id.clone()),
                    state: Some(parent.state.to_string()),
                    condition: format!("after{}", d.condition),
                })
            })
            .collect();
        let running_tasks = queue.running_tasks.get(&record.id).copied().unwrap_or(0);
        let at_array_limit = launch
            .max_parallel
            .is_some_and(|max| running_tasks >= max as usize);
        let ahead: Vec<JobAhead> = queue
            .waiting
            .iter()
            .take(position)
            .filter(|l| l.id != record.id)
            .map(|l| JobAhead {
                job: l.id.to_string(),
                priority: 0,
                user: None,
                reason: Some("waiting for a free slot".to_string()),
            })
            .collect();
        let (running, slots) = (queue.running, self.inner.max_running);
        drop(queue);
        if !parents_waited.is_empty() {
            answer.category = WaitCategory::Dependency;
            answer.reason = Some("Dependency".to_string());
            answer.explanation = format!(
                "it waits for the jobs it depends on ({})",
                parents_waited
                    .iter()
                    .map(|p| format!(
                        "{} {}, {}",
                        p.condition,
                        p.job,
                        p.state.as_deref().unwrap_or("?")
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            answer.evidence = WaitEvidence {
                parents: Some(parents_waited),
                ..WaitEvidence::default()
            };
        } else if at_array_limit {
            let max = launch_max(record);
            answer.category = WaitCategory::Limit;
            answer.reason = Some("JobArrayTaskLimit".to_string());
            answer.explanation = format!(
                "the array's limit of tasks at once is reached ({running_tasks} of {} running); the next task starts when one ends",
                max.unwrap_or(0)
            );
            answer.evidence = WaitEvidence {
                limit: Some(LimitUse {
                    name: "max_parallel".to_string(),
                    set_on: Some("the spec's array".to_string()),
                    used: Some(running_tasks as u64),
                    max: max.map(u64::from),
                }),
                ..WaitEvidence::default()
            };
        } else {
            answer.category = WaitCategory::Resources;
            answer.reason = Some("waiting for a free slot".to_string());
            answer.explanation = format!(
                "waiting for a free slot on this machine ({running} of {slots} in use, {} job(s) ahead of it)",
                ahead.len()
            );
            answer.remedy = Some("none needed: it starts when a job ahead of it ends".to_string());
            answer.evidence = WaitEvidence {
                jobs_ahead_count: Some(ahead.len() as u32),
                jobs_ahead: Some(ahead),
                ..WaitEvidence::default()
            };
        }
        if answer.state != JobState::Pending {
            answer.category = WaitCategory::of_state(answer.state);
        }
        answer
    }
}

/// The array limit of `record`'s spec.
fn launch_max(record: &JobRecord) -> Option<u32> {
    record
        .spec
        .as_ref()
        .and_then(|s| s.array.as_ref())
        .and_then(|a| a.max_parallel)
}

#[cfg(test)]
mod tests {
    use crate::backend::{Backend, SubmitOptions, WaitCategory};
    use crate::record::MemoryRecordStore;
    use crate::spec::{Dependency, JobSpec};
    use crate::LocalBackend;

    #[tokio::test]
    async fn a_queued_job_waits_for_a_slot_behind_the_jobs_ahead_or_for_its_parent() {
        let root = tempfile::tempdir().unwrap();
        let backend = LocalBackend::new(root.path(), MemoryRecordStore::new())
            .unwrap()
            .with_max_running(1);
        let submit = |name: &str, after: Option<&crate::record::JobId>| {
            let mut spec = JobSpec::new(name, "sleep 30");
            if let Some(parent) = after {
                spec.after = vec![Dependency::ok(parent.clone())];
            }
            let backend = backend.clone();
            async move {
                backend
                    .submit(&spec, SubmitOptions::default())
                    .await
                    .unwrap()
            }
        };
        let running = submit("running", None).await;
        let second = submit("second", None).await;
        let third = submit("third", None).await;
        let child = submit("child", Some(&running.id)).await;
        let answers = backend
            .why(&[
                running.id.clone(),
                second.id.clone(),
                third.id.clone(),
                child.id.clone(),
            ])
            .await
            .unwrap();
        assert_eq!(answers[0].category, WaitCategory::Running);
        assert_eq!(answers[1].category, WaitCategory::Resources);
        assert_eq!(answers[1].evidence.jobs_ahead_count, Some(0));
        assert_eq!(answers[2].category, WaitCategory::Resources);
        assert_eq!(answers[2].evidence.jobs_ahead_count, Some(1));
        assert_eq!(
            answers[2].evidence.jobs_ahead.as_ref().unwrap()[0].job,
            second.id.to_string()
        );
        assert!(
            answers[2].explanation.contains("1 of 1 in use"),
            "{}",
            answers[2].explanation
        );
        assert_eq!(answers[3].category, WaitCategory::Dependency);
        let parents = answers[3].evidence.parents.as_ref().unwrap();
        assert_eq!(parents[0].record.as_ref(), Some(&running.id));
        assert_eq!(parents[0].state.as_deref(), Some("RUNNING"));
        assert_eq!(parents[0].condition, "afterok");
        let forecast = backend
            .forecast(&JobSpec::new("next", "true"))
            .await
            .unwrap();
        assert_eq!(forecast.soonest(), None, "the slot is taken and jobs wait");
        backend
            .cancel_many(&[running.id, second.id, third.id, child.id])
            .await
            .unwrap();
        let idle = backend
            .forecast(&JobSpec::new("next", "true"))
            .await
            .unwrap();
        assert_eq!(idle.soonest().unwrap().partition, "local");
    }
}
