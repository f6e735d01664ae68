//! A resumable run's side of the poll, pure: what a requeue or an end of one of its
//! segments means (the budget used up, a requeue Slurm refused, a segment continued),
//! and what the segments file's last line says of the segment that ended.

use crate::classify::ErrorClass;
use crate::record::{BackendRef, JobRecord, Mark, SegmentEnd, SegmentNote};
use crate::slurm::parse::{parse_sbatch_parsable, SbatchOutcome};
use crate::slurm::states::SlurmBaseState;
use crate::spec::{BUDGET_USED_UP_EXIT, REQUEUE_REFUSED_EXIT};
use crate::state::JobState;
use crate::transport::Output;

/// What a resumable record's observation asks for, beyond what any job's would.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ResumeStep {
    /// The budget is used up: ERROR (program), with this message.
    BudgetUsedUp(String),
    /// Slurm requeued the job: its begin time moved forward, the segment's end read.
    Continue,
    /// Slurm refused the requeue or holds the job: a fresh job continues the run.
    ContinueFresh,
}

/// What the poll decides for a resumable record on its own (`state` is what the
/// observation maps to; `exit_code`, `base` and `reason` what the scheduler said):
/// an end the batch script explained by its exit status, a requeue to follow up, a
/// held job. `None`: decide as for any job.
pub(super) fn decide_resumable(
    record: &JobRecord,
    current: JobState,
    state: JobState,
    exit_code: Option<i32>,
    base: &SlurmBaseState,
    reason: Option<&str>,
) -> Option<ResumeStep> {
    let budget = record.max_restarts()?;
    let used_up = || {
        ResumeStep::BudgetUsedUp(format!(
            "the resume budget is used up: the run was continued {budget} time(s) (resume.max_restarts: {budget}) and its segment {} ended by the wall or a preemption again; raise resume.max_restarts or time, or make the command finish sooner",
            record.restarts.saturating_add(1)
        ))
    };
    // A fresh job continues the run, within the budget.
    let fresh = || {
        if record.restarts >= budget {
            used_up()
        } else {
            ResumeStep::ContinueFresh
        }
    };
    match state {
        JobState::Error if exit_code == Some(i32::from(BUDGET_USED_UP_EXIT)) => Some(used_up()),
        // Slurm refused the requeue the script asked for, or holds the job it requeued
        // (MaxBatchRequeue reached, JOB_GETENV_FAILED), or ended it at the wall (the
        // command ignored the signal and the child timeout's TERM), or cancelled it at a
        // preemption (PreemptMode=CANCEL): a fresh job continues the run from its
        // newest checkpoint, on the same record.
        JobState::Error
            if exit_code == Some(i32::from(REQUEUE_REFUSED_EXIT))
                || matches!(base, SlurmBaseState::Timeout | SlurmBaseState::Preempted) =>
        {
            Some(fresh())
        }
        JobState::Pending if current == JobState::Running && is_held(base, reason) => Some(fresh()),
        JobState::Pending if current == JobState::Running => Some(ResumeStep::Continue),
        _ => None,
    }
}

/// Whether Slurm holds a job it requeued (it will not start again by itself): after
/// MaxBatchRequeue batch requeues (`launch failure limit exceeded requeued held`,
/// `JobHoldMaxRequeue`; from 23.02 a preemption's requeue counts too), a failed launch
/// (`launch failed requeued held`), a failed `--get-user-env`, a `scontrol requeuehold`
/// (`job requeued in held state`).
fn is_held(base: &SlurmBaseState, reason: Option<&str>) -> bool {
    *base == SlurmBaseState::RequeueHold
        || reason.is_some_and(|r| {
            // Slurm's words for a requeued job it holds (job_mgr.c, protocol_defs.c).
            r.contains("requeued held")
                || r.contains("requeued in held state")
                || r == "JobHoldMaxRequeue"
                || r == "JobHeldAdmin"
        })
}

/// Finish a fresh continuation's decision with what the script answered (`part`): the
/// segments file's last line, `--`, then sbatch's answer. The record follows the new
/// job (PENDING, its id); an answer still under way keeps the record as it was (the
/// next poll asks again, nothing is submitted twice); a refused sbatch ends it ERROR.
pub(super) fn apply_continue_fresh(record: &JobRecord, mark: &mut Mark, part: &Output) {
    let text = part.stdout_text();
    let (line, answer) = text.split_once("\n--\n").unwrap_or((text.as_str(), ""));
    let ended = record.restarts;
    let fresh = parse_segment_line(line.trim_end()).filter(|(count, _, _)| *count == ended);
    let native = mark.message.take().unwrap_or_default();
    // The cluster cancelled the job at a preemption (PreemptMode=CANCEL).
    let preempted = native.starts_with("PREEMPTED");
    let (end, checkpoint) = match fresh {
        Some((_, end, checkpoint)) => (end, checkpoint),
        None if preempted => (SegmentEnd::Preemption, None),
        None => (SegmentEnd::Requeued, None),
    };
    let job = if part.success() {
        parse_sbatch_parsable(answer, &part.stderr_text()).ok()
    } else {
        None
    };
    match job {
        Some(SbatchOutcome::Submitted {
            job_id, cluster, ..
        }) => {
            let cluster =
                cluster.or_else(|| record.backend_ref.as_ref().and_then(|r| r.cluster.clone()));
            let old = record
                .backend_ref
                .as_ref()
                .map_or("?", |r| r.native_id.as_str());
            let why = if preempted {
                format!("the cluster cancelled job {old} at a preemption")
            } else {
                format!("Slurm would not requeue job {old}")
            };
            let mut message = format!(
                "continued as the fresh job {job_id} ({why}): segment {}",
                ended.saturating_add(2)
            );
            if let Some(checkpoint) = &checkpoint {
                message.push_str(&format!(", resumes from {checkpoint}"));
            }
            mark.message = Some(format!("{message} ({native})"));
            mark.backend_ref = Some(BackendRef {
                native_id: job_id.to_string(),
                cluster,
            });
            mark.segment = Some(SegmentNote {
                end: Some(end),
                checkpoint,
            });
        }
        _ if part.success() => {
            // Another poll's continuation is under way: ask again at the next poll.
            mark.state = record.state;
            mark.message = Some(native);
        }
        _ => {
            mark.state = JobState::Error;
            mark.err_class = Some(ErrorClass::Infra);
            mark.message = Some(format!(
                "{native}: Slurm would not requeue the job, and the fresh job that continues the run was refused too ({}); its checkpoints are in the job folder: submit it again to go on",
                part.stderr_text().trim().chars().take(300).collect::<String>()
            ));
        }
    }
}

/// Finish a requeued segment's decision with the segments file's last line (`part`):
/// how the segment ended, the checkpoint the next one resumes from, and the message a
/// user expects ("continued after the wall: segment 3, resumes from ckpt/step-1200.pt").
pub(super) fn apply_continue(
    record: &JobRecord,
    mark: &mut Mark,
    requeued_after: Option<&str>,
    part: &Output,
) {
    let ended = record.restarts;
    let line = part.stdout_text();
    let fresh = parse_segment_line(line.trim_end()).filter(|(count, _, _)| *count == ended);
    let (end, checkpoint) = match fresh {
        Some((_, end, checkpoint)) => (end, checkpoint),
        // The script wrote no line for this segment: Slurm requeued the job itself (a
        // preemption under PreemptMode=REQUEUE, a node failure).
        None => (
            match requeued_after {
                Some(cause) if cause.starts_with("PREEMPTED") => SegmentEnd::Preemption,
                Some(cause) if cause.starts_with("NODE_FAIL") => SegmentEnd::NodeFailure,
                _ => SegmentEnd::Requeued,
            },
            None,
        ),
    };
    let after = match end {
        SegmentEnd::Wall => "continued after the wall".to_string(),
        SegmentEnd::Preemption => "continued after a preemption".to_string(),
        SegmentEnd::NodeFailure => "continued after a node failure".to_string(),
        _ => "requeued by Slurm (a preemption or a node failure)".to_string(),
    };
    let mut message = format!("{after}: segment {}", ended.saturating_add(2));
    if let Some(checkpoint) = &checkpoint {
        message.push_str(&format!(", resumes from {checkpoint}"));
    }
    let native = mark.message.take().unwrap_or_default();
    mark.message = Some(format!("{message} ({native})"));
    mark.segment = Some(SegmentNote {
        end: Some(end),
        checkpoint,
    });
}

/// `<restart count>\t<how>\t<checkpoint>\t<job>` as the batch script writes it: the count,
/// how the segment ended, and the checkpoint it left (empty: none).
fn parse_segment_line(line: &str) -> Option<(u32, SegmentEnd, Option<String>)> {
    let mut fields = line.split('\t');
    let count = fields.next()?.parse().ok()?;
    let end = match fields.next()? {
        "wall" => SegmentEnd::Wall,
        "preemption" => SegmentEnd::Preemption,
        _ => return None,
    };
    let checkpoint = fields.next().filter(|c| !c.is_empty()).map(str::to_string);
    Some((count, end, checkpoint))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_lines_read_as_the_script_writes_them() {
        assert_eq!(
            parse_segment_line("2\twall\tckpt/step-1200.pt\t77"),
            Some((2, SegmentEnd::Wall, Some("ckpt/step-1200.pt".into())))
        );
        assert_eq!(
            parse_segment_line("0\tpreemption\t\t77"),
            Some((0, SegmentEnd::Preemption, None))
        );
        for bad in ["", "x\twall\t\t1", "1\tbudget\t\t1", "1"] {
            assert_eq!(parse_segment_line(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn held_jobs_are_told_by_slurms_own_words() {
        let pending = SlurmBaseState::Pending;
        for reason in [
            "launch failed requeued held",
            "launch failure limit exceeded requeued held",
            "job requeued in held state",
            "JobHoldMaxRequeue",
            "JobHeldAdmin",
        ] {
            assert!(is_held(&pending, Some(reason)), "{reason}");
        }
        assert!(is_held(&SlurmBaseState::RequeueHold, None));
        for reason in [
            Some("BeginTime"),
            Some("JobHeldUser"),
            Some("Priority"),
            None,
        ] {
            assert!(!is_held(&pending, reason), "{reason:?}");
        }
    }
}
