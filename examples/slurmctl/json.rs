//! The JSON Lines format (`--json`): one object per job, task, role, transition, check or error.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use slurm_run::prelude::{Error, JobRecord, JobState, LogStream};
use slurm_run::CredentialsStatus;
use slurm_run::{NativeStatus, PreflightCheck};
use slurm_run::{Segment, Usage};

use crate::exit::error_field;
use crate::unsettled::unsettled_note;

/// One job as a JSON object: the fields scripts rely on, then the details.
pub(crate) fn job(record: &JobRecord, native: Option<&NativeStatus>) -> Value {
    let mut object = json!({
        "id": record.id(),
        "state": record.state(),
        "slurm_job_id": record.backend_ref().as_ref().and_then(|r| r.native_id.parse::<u64>().ok()),
        "results_dir": record.results_dir().as_str(),
        "retry_of": record.retry_of(),
        "name": record.name(),
        "attempt": record.attempt(),
        "restarts": record.restarts(),
        "err_class": record.err_class(),
        "cluster": record.backend_ref().as_ref().and_then(|r| r.cluster.clone()),
        "slurm_release": record.scheduler_release(),
        "native_state": native.map(|n| n.state.clone()),
        "reason": native.and_then(|n| n.reason.clone()),
        "reason_note": native.and_then(|n| n.reason_note.clone()),
        "exit_code": native.and_then(|n| n.exit_code),
        "nodes": native.and_then(|n| n.nodes.clone()),
        "message": record.history().last().and_then(|t| t.message()),
        "unsettled": unsettled_note(record),
        "candidates": record.candidates().iter().map(|r| r.native_id.clone()).collect::<Vec<_>>(),
        "segments": segments(record),
        "code_commit": record.code_commit(),
        "usage": usage(record.usage_total().as_ref()),
        "submitted_at": record.submitted_at(),
        "updated_at": record.updated_at(),
    });
    with_times(&mut object, &times_of(record));
    object
}

/// A run's times: the scheduler's where it told them (`Timeline`), else what the
/// record saw (the submit, the first RUNNING, the end).
struct Times {
    submitted_at: DateTime<Utc>,
    eligible_at: Option<DateTime<Utc>>,
    started_at: Option<DateTime<Utc>>,
    ended_at: Option<DateTime<Utc>>,
}

/// The times of a record's newest run.
fn times_of(record: &JobRecord) -> Times {
    let timeline = record.timeline();
    let seen = |state: JobState| {
        record
            .history()
            .iter()
            .find(|t| t.state() == state)
            .map(|t| t.at())
    };
    let ended = record
        .history()
        .iter()
        .rfind(|t| t.state().is_terminal())
        .map(|t| t.at());
    Times {
        submitted_at: timeline
            .submitted_at
            .unwrap_or_else(|| record.submitted_at()),
        eligible_at: timeline.eligible_at,
        started_at: timeline.started_at.or_else(|| seen(JobState::Running)),
        ended_at: timeline.ended_at.or(ended),
    }
}

/// `eligible_at`, `started_at`, `ended_at`, `queue_wait_s` (submitted to started; to now
/// while it waits) and `eligible_wait_s` (submitted to eligible) into `object`.
fn with_times(object: &mut Value, times: &Times) {
    let seconds = |from: DateTime<Utc>, to: DateTime<Utc>| (to - from).num_seconds().max(0);
    object["eligible_at"] = json!(times.eligible_at);
    object["started_at"] = json!(times.started_at);
    object["ended_at"] = json!(times.ended_at);
    object["queue_wait_s"] = json!(times.started_at.map(|s| seconds(times.submitted_at, s)));
    object["eligible_wait_s"] = json!(times.eligible_at.map(|e| seconds(times.submitted_at, e)));
}

/// The segments of a resumable run, each with its times: the scheduler's where it told
/// them, else as seen (a segment's queue wait runs from the end of the one before, or
/// from the submit for the first).
fn segments(record: &JobRecord) -> Vec<Value> {
    let mut queued_from = record.submitted_at();
    record
        .segments()
        .iter()
        .map(|s| {
            let timeline = s.timeline();
            let times = Times {
                submitted_at: timeline.submitted_at.unwrap_or(queued_from),
                eligible_at: timeline.eligible_at,
                started_at: Some(timeline.started_at.unwrap_or(s.started_at())),
                ended_at: timeline.ended_at.or(s.ended_at()),
            };
            queued_from = times.ended_at.unwrap_or(queued_from);
            let mut object = segment(s);
            with_times(&mut object, &times);
            object
        })
        .collect()
}

/// One segment of a resumable run: its SLURM job, nodes, start, end and how it ended.
fn segment(segment: &Segment) -> Value {
    json!({
        "slurm_job_id": segment.job(),
        "nodes": segment.nodes(),
        "started_at": segment.started_at(),
        "ended_at": segment.ended_at(),
        "ended": segment.ended().map(|e| e.as_str()),
        "checkpoint": segment.checkpoint(),
        "usage": usage(segment.usage()),
    })
}

/// What a run (or a record's runs summed) used, from the cluster's accounting: every
/// figure null where the cluster does not account it, with `notes` saying so; null
/// until the job ended and accounting told.
pub(crate) fn usage(usage: Option<&Usage>) -> Value {
    let Some(u) = usage else {
        return Value::Null;
    };
    json!({
        "runs": u.runs,
        "elapsed_s": u.elapsed_s,
        "time_limit_s": u.time_limit_s,
        "wall_used": u.wall_used(),
        "queue_wait_s": u.queue_wait_s,
        "gpus": u.gpus,
        "cpus": u.cpus,
        "gpu_hours": u.gpu_hours(),
        "cpu_hours": u.cpu_hours(),
        "max_rss_bytes": u.max_rss_bytes,
        "gpu_util_percent": u.gpu_util_percent,
        "gpu_mem_bytes": u.gpu_mem_bytes,
        "notes": u.notes,
    })
}

/// One task of an array as a JSON object: the array's fields, then the task's.
pub(crate) fn task(record: &JobRecord, index: u32, native: Option<&NativeStatus>) -> Value {
    let task = &record.tasks()[&index];
    let mut object = job(record, native);
    object["task"] = json!(index);
    object["state"] = json!(task.state());
    object["err_class"] = json!(task.err_class());
    object["slurm_task_id"] = json!(record
        .backend_ref()
        .as_ref()
        .map(|r| format!("{}_{index}", r.native_id)));
    object["message"] = json!(task.message());
    object["task_nodes"] = json!(task.nodes());
    // A task that ended keeps its code (it is not polled again).
    object["exit_code"] = json!(native.and_then(|n| n.exit_code).or(task.exit_code()));
    object["usage"] = usage(task.usage());
    object
}

/// One role of a multi-role job as a JSON object: the job's fields, then the role's
/// (`role`, its `state`, `err_class`, `message`, `role_nodes` and `usage`).
pub(crate) fn role(record: &JobRecord, name: &str, native: Option<&NativeStatus>) -> Value {
    let role = &record.roles()[name];
    let mut object = job(record, native);
    object["role"] = json!(name);
    object["state"] = json!(role.state());
    object["err_class"] = json!(role.err_class());
    object["message"] = json!(role.message());
    object["role_nodes"] = json!(role.nodes());
    object["usage"] = usage(role.usage());
    object
}

/// A job with an event of `watch` (`transition`, `retried`, `final`) and its own fields.
pub(crate) fn event(mut object: Value, event: &str, fields: &[(&str, Value)]) -> Value {
    object["event"] = json!(event);
    for (name, value) in fields {
        object[*name] = value.clone();
    }
    object
}

/// A piece of a job's log: the job, the stream's file name and the text.
pub(crate) fn logs(record: &JobRecord, stream: LogStream, text: &str) -> Value {
    let mut object = job(record, None);
    object["stream"] = json!(stream.file_name());
    object["text"] = json!(text);
    object
}

/// One preflight check.
pub(crate) fn check(c: &PreflightCheck) -> Value {
    json!({"check": c.check, "ok": c.ok, "degraded": c.degraded, "detail": c.detail, "remedy": c.remedy})
}

/// A registry's credentials: their status, and `ok` when they are present.
pub(crate) fn credentials(status: &CredentialsStatus) -> Value {
    let mut object = json!(status);
    object["ok"] = json!(status.is_present());
    object
}

/// The script a submit of the spec `name` would write, with its record id `id`.
pub(crate) fn script(id: &str, name: &str, script: &str) -> Value {
    json!({"id": id, "name": name, "state": null, "script": script})
}

/// What `records migrate` did: the records moved and already there, and each one left
/// with why.
pub(crate) fn migration(
    from: &std::path::Path,
    to: &slurm_run::RecordsLocation,
    migration: &slurm_run::Migration,
) -> Value {
    let ids = |ids: &[slurm_run::JobId]| ids.iter().map(|id| id.to_string()).collect::<Vec<_>>();
    let left: Vec<Value> = migration
        .left
        .iter()
        .map(|(what, why)| json!({"record": what, "why": why.to_string()}))
        .collect();
    json!({
        "from": from.display().to_string(),
        "to": to.to_string(),
        "moved": ids(&migration.moved),
        "already": ids(&migration.already),
        "left": left,
        "complete": migration.complete(),
    })
}

/// An error, with its kind, the field it names and the exit status.
pub(crate) fn error(error: &Error, code: u8) -> Value {
    json!({
        "error": error.to_string(),
        "kind": format!("{:?}", error.kind()),
        "field": error_field(error),
        "exit_code": code,
    })
}
