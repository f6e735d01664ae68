//! `watch`: follow jobs (through their retries) until each is terminal.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use futures::StreamExt;
use serde_json::json;
use slurm_run::prelude::*;

use crate::args::{parse_ids, seconds, Global};
use crate::connect::{backend, Slurm};
use crate::exit::{BAD_INPUT, OK, WATCH_SAW_FAILURE};
use crate::json;
use crate::output::Out;
use crate::progress::Progress;
use crate::text;

/// `watch ID... [--interval SECS] [--retries N]`: every transition as it happens, then
/// the final word on each job; exit 4 when one ended ERROR, CANCELED or NOT_SUBMITTED.
pub(crate) async fn watch(
    global: &Global,
    ids: &[String],
    interval: Option<f64>,
    retries: Option<u32>,
    out: &Out,
) -> Result<u8> {
    let ids = parse_ids(ids)?;
    let backend = backend(global)?;
    let interval = match interval {
        Some(secs) => seconds("interval", secs)?,
        None => backend.config().poll_interval,
    };
    let retry = retries.map(|budget| RetryPolicy {
        budget,
        ..RetryPolicy::default()
    });
    follow(&backend, &ids, interval, retry, out).await
}

/// Follow `ids` to the end; 4 when one ended ERROR, CANCELED or NOT_SUBMITTED.
async fn follow(
    backend: &Slurm,
    ids: &[JobId],
    interval: Duration,
    retry: Option<RetryPolicy>,
    out: &Out,
) -> Result<u8> {
    // The latest record of every watched job (followed through retries).
    let mut latest: BTreeMap<JobId, JobRecord> = BTreeMap::new();
    let mut root_of: HashMap<JobId, JobId> = HashMap::new();
    for id in ids {
        latest.insert(id.clone(), backend.record(id).await?);
        root_of.insert(id.clone(), id.clone());
    }
    let mut reported: HashSet<JobId> = HashSet::new();
    let mut dropped: HashSet<JobId> = HashSet::new();
    let progress = Progress::start("watching");
    progress.set(&summary(&latest));
    let options = WatchOptions {
        interval,
        retry,
        ..WatchOptions::default()
    };
    let mut events = backend.watch(ids, options);
    while let Some(event) = events.next().await {
        match event? {
            WatchEvent::Transition { from, status } => {
                let id = status.id().clone();
                reported.insert(id.clone());
                if out.json {
                    let job = json::job(status.record(), status.native());
                    let fields = [("from", json!(from))];
                    progress.line(&json::event(job, "transition", &fields).to_string());
                } else {
                    let native = status.native();
                    progress.line(&text::transition(out.style, from, status.record(), native));
                }
                if let Some(root) = root_of.get(&id).cloned() {
                    latest.insert(root, status.record().clone());
                }
            }
            WatchEvent::Retried { previous, record } => {
                reported.insert(record.id().clone());
                if out.json {
                    let fields = [("previous", json!(previous))];
                    let job = json::job(&record, None);
                    progress.line(&json::event(job, "retried", &fields).to_string());
                } else {
                    progress.line(&text::retried(out.style, &previous, &record));
                }
                if let Some(root) = root_of.get(&previous).cloned() {
                    root_of.insert(record.id().clone(), root.clone());
                    latest.insert(root, (*record).clone());
                }
            }
            WatchEvent::Waiting { from, status } => {
                let now = status.native().and_then(|n| n.category);
                if out.json {
                    let job = json::job(status.record(), status.native());
                    let fields = [("from", json!(from)), ("category", json!(now))];
                    progress.line(&json::event(job, "waiting", &fields).to_string());
                } else {
                    progress.line(&text::waiting(out.style, from, status.record(), now));
                }
            }
            WatchEvent::Dropped { id, reason } => {
                // Its record cannot be read: the others are still watched; exit 2 at the end.
                dropped.insert(id.clone());
                let line = if out.json {
                    json!({"event": "dropped", "id": id, "reason": reason}).to_string()
                } else {
                    format!("{id}: no longer watched: {reason}")
                };
                progress.note(&line);
            }
            WatchEvent::Unanswered {
                reason,
                failures,
                retry_in,
            } => {
                // The outage and its progress, on stderr: stdout keeps one line per job event.
                let line = if out.json {
                    json!({"event": "unanswered", "reason": reason, "failures": failures, "retry_in_secs": retry_in.as_secs_f64()}).to_string()
                } else {
                    text::unanswered(&reason, failures, retry_in)
                };
                progress.note(&line);
            }
        }
        progress.set(&summary(&latest));
    }
    progress.finish();
    // The final word on each job; in JSON only for jobs no event spoke of (already terminal,
    // or ended and retried before this watch saw it).
    let mut failed = false;
    let mut finals = Vec::new();
    for record in latest.values() {
        let record = match backend.record(record.id()).await {
            Ok(record) => record,
            Err(_) if dropped.contains(record.id()) => continue,
            Err(error) => return Err(error),
        };
        failed |= matches!(
            record.state(),
            JobState::Error | JobState::Canceled | JobState::NotSubmitted
        );
        finals.push(record);
    }
    if out.json {
        let final_line = |record: &JobRecord| {
            out.line(&json::event(json::job(record, None), "final", &[]).to_string())
        };
        // A watched job that ended and was retried before this watch saw it end (another
        // watcher marked it): its end, once, before its latest attempt's.
        for id in ids {
            if !reported.contains(id) && latest.get(id).is_some_and(|r| r.id() != id) {
                if let Ok(record) = backend.record(id).await {
                    final_line(&record);
                }
            }
        }
        for record in finals.iter().filter(|r| !reported.contains(r.id())) {
            final_line(record);
        }
    } else {
        out.jobs(finals.iter().map(|r| (r, None)));
    }
    Ok(match (failed, dropped.is_empty()) {
        (true, _) => WATCH_SAW_FAILURE,
        // A watched record could not be read (exit 2, as for a corrupt local record).
        (false, false) => BAD_INPUT,
        (false, true) => OK,
    })
}

/// What the spinner says while watching: how many jobs, in which states.
fn summary(latest: &BTreeMap<JobId, JobRecord>) -> String {
    let mut counts: BTreeMap<JobState, usize> = BTreeMap::new();
    for record in latest.values() {
        *counts.entry(record.state()).or_default() += 1;
    }
    let parts: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    format!("watching {} job(s): {}", latest.len(), parts.join(", "))
}
