//! The text format: an aligned table of jobs, an array's task groups, `watch` lines and
//! preflight checks, in colour only when [`Style`] says so.

use std::collections::BTreeSet;

use slurm_run::{NativeStatus, PreflightCheck, WaitCategory};

use slurm_run::prelude::{JobId, JobRecord, JobState, JobStatus, TaskSet};

use crate::unsettled::unsettled_note;

/// Whether text is painted with ANSI colours.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Style {
    /// Colours on (a terminal, `NO_COLOR` unset, no `--json`).
    pub(crate) color: bool,
}

impl Style {
    /// `text` in the SGR colour `code`, or as it is without colour.
    pub(crate) fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    /// `text` in bold.
    pub(crate) fn bold(&self, text: &str) -> String {
        self.paint("1", text)
    }

    /// `text` (already padded) in the colour of `state`.
    pub(crate) fn state(&self, state: JobState, text: &str) -> String {
        let code = match state {
            JobState::Complete => "32",
            JobState::Error => "31",
            JobState::Canceled | JobState::NotSubmitted => "33",
            JobState::Running => "36",
            JobState::Unknown => "35",
            JobState::Pending | JobState::Submitting => "34",
        };
        self.paint(code, text)
    }
}

/// Jobs as an aligned table with a header (`no jobs` when there are none).
pub(crate) fn jobs_table(
    style: Style,
    jobs: &[(&JobRecord, Option<&NativeStatus>)],
) -> Vec<String> {
    if jobs.is_empty() {
        return vec!["no jobs".to_string()];
    }
    let header = ["ID", "STATE", "SLURM", "ATTEMPT", "REASON", "RESULTS"];
    let rows: Vec<(JobState, [String; 6])> = jobs
        .iter()
        .map(|(record, native)| (record.state(), job_row(record, *native)))
        .collect();
    let mut widths = header.map(str::len);
    for (_, row) in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let pad = |text: &str, width: usize| format!("{text:width$}");
    let head: Vec<String> = header.iter().zip(widths).map(|(h, w)| pad(h, w)).collect();
    let mut lines = vec![style.bold(head.join("  ").trim_end())];
    for (state, row) in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(i, (cell, w))| {
                let padded = pad(cell, w);
                if i == 1 {
                    style.state(state, &padded)
                } else {
                    padded
                }
            })
            .collect();
        lines.push(cells.join("  ").trim_end().to_string());
    }
    // What a reason means where its name does not say it (a hold, a limit), under the
    // table: one line a job.
    for &(record, native) in jobs {
        if let Some(note) = native.and_then(|n| n.reason_note.as_deref()) {
            lines.push(format!("{}: {note}", record.id()));
        }
    }
    lines
}

/// One job's cells: id, state, SLURM id (`?ID` for candidates of an unsettled submit),
/// attempt, reason, results folder.
fn job_row(record: &JobRecord, native: Option<&NativeStatus>) -> [String; 6] {
    let reason = unsettled_note(record)
        .or_else(|| native.and_then(|n| n.reason.clone()))
        .or_else(|| record.err_class().map(|c| c.to_string()))
        .unwrap_or_else(|| "-".into());
    [
        record.id().to_string(),
        record.state().to_string(),
        match (record.backend_ref(), record.candidates()) {
            (Some(r), _) => r.native_id.clone(),
            (None, []) => "-".into(),
            (None, seen) => format!(
                "?{}",
                seen.iter()
                    .map(|r| r.native_id.clone())
                    .collect::<Vec<_>>()
                    .join(",?")
            ),
        },
        match &record.retry_of() {
            Some(prev) => format!("{} (retry of {prev})", record.attempt()),
            None => record.attempt().to_string(),
        },
        reason,
        record.results_dir().to_string(),
    ]
}

/// An array's tasks: `ID tasks:`, then one line per group of tasks in the same state,
/// with their nodes and a reason.
pub(crate) fn task_groups(style: Style, status: &JobStatus) -> Vec<String> {
    let mut lines = vec![format!("{} tasks:", status.record().id())];
    for (state, indices) in status.record().task_groups() {
        let nodes: Vec<String> = indices_of(&indices)
            .filter_map(|i| status.tasks().get(&i).and_then(|n| n.nodes.clone()))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let reason = indices_of(&indices)
            .find_map(|i| status.tasks().get(&i).and_then(|n| n.reason.clone()));
        let mut line = format!("  {:<10} {}", style.state(state, state.as_str()), indices);
        if !nodes.is_empty() {
            line.push_str(&format!("  on {}", nodes.join(",")));
        }
        if let Some(reason) = reason {
            line.push_str(&format!("  ({reason})"));
        }
        lines.push(line);
    }
    lines
}

/// A multi-role job's roles: `ID roles:`, then one line per role with its state, its
/// nodes and what was last said of it.
pub(crate) fn roles(style: Style, record: &JobRecord) -> Vec<String> {
    let mut lines = vec![format!("{} roles:", record.id())];
    let width = record.roles().keys().map(String::len).max().unwrap_or(0);
    for (name, role) in record.roles() {
        let state = role.state();
        let mut line = format!(
            "  {name:<width$}  {}",
            style.state(state, &format!("{:<10}", state.as_str()))
        );
        if !role.nodes().is_empty() {
            line.push_str(&format!("  on {}", role.nodes().join(",")));
        }
        if let Some(message) = role.message() {
            line.push_str(&format!("  ({message})"));
        }
        lines.push(line);
    }
    lines
}

/// A resumable run's segments: `ID segments (N restarts):`, then one line per segment
/// with its SLURM job, nodes, start, end and how it ended.
pub(crate) fn segments(style: Style, record: &JobRecord) -> Vec<String> {
    let mut lines = vec![format!(
        "{} segments ({} restart{}):",
        record.id(),
        record.restarts(),
        if record.restarts() == 1 { "" } else { "s" }
    )];
    let time = |at: chrono::DateTime<chrono::Utc>| {
        at.with_timezone(&chrono::Local)
            .format("%H:%M:%S")
            .to_string()
    };
    for (n, segment) in record.segments().iter().enumerate() {
        let mut line = format!(
            "  {:>3}  slurm {}  {}  {} - {}",
            n + 1,
            segment.job(),
            if segment.nodes().is_empty() {
                "-".to_string()
            } else {
                segment.nodes().join(",")
            },
            time(segment.started_at()),
            segment.ended_at().map_or_else(|| "now".to_string(), time),
        );
        match segment.ended() {
            Some(end) => line.push_str(&format!("  {}", style.bold(end.as_str()))),
            None => line.push_str("  running"),
        }
        if let Some(checkpoint) = segment.checkpoint() {
            line.push_str(&format!("  (left {checkpoint})"));
        }
        lines.push(line);
    }
    lines
}

/// The indices of a range list printed by `JobRecord::task_groups` (`0-3,8`).
fn indices_of(list: &str) -> impl Iterator<Item = u32> {
    TaskSet::parse("tasks", list)
        .map(|set| set.iter().collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
}

/// One line of `watch`: a job moved from `from` to its record's state.
pub(crate) fn transition(
    style: Style,
    from: JobState,
    record: &JobRecord,
    native: Option<&NativeStatus>,
) -> String {
    let mut line = format!(
        "{}  {}  {} -> {}",
        now(),
        record.id(),
        from,
        style.state(record.state(), record.state().as_str())
    );
    if let Some(r) = &record.backend_ref() {
        line.push_str(&format!("  slurm {}", r.native_id));
    }
    if let Some(reason) = native.and_then(|n| n.reason.as_deref()) {
        line.push_str(&format!("  ({reason})"));
    }
    if let Some(class) = record.err_class() {
        line.push_str(&format!("  {class}"));
    }
    line
}

/// One line of `watch`: a waiting job's category changed from `from` to `now`
/// (`still PENDING: resources -> priority`).
pub(crate) fn waiting(
    style: Style,
    from: WaitCategory,
    record: &JobRecord,
    now_category: Option<WaitCategory>,
) -> String {
    format!(
        "{}  {}  still {}: {from} -> {}",
        now(),
        record.id(),
        style.state(record.state(), record.state().as_str()),
        now_category.map_or("?", |c| c.as_str())
    )
}

/// One line of `watch`: `previous` was retried as `record`.
pub(crate) fn retried(style: Style, previous: &JobId, record: &JobRecord) -> String {
    format!(
        "{}  {}  retried as {} (attempt {})",
        now(),
        previous,
        style.bold(record.id().as_str()),
        record.attempt()
    )
}

/// A `watch` line for a poll that could not ask the cluster (`failures` in a row).
pub(crate) fn unanswered(reason: &str, failures: u32, retry_in: std::time::Duration) -> String {
    format!(
        "{}  the cluster did not answer ({failures} poll(s) in a row): {reason}; asking again in {:.0} s",
        now(),
        retry_in.as_secs_f64()
    )
}

/// The local time of day, as `watch` lines start.
fn now() -> impl std::fmt::Display {
    chrono::Local::now().format("%H:%M:%S")
}

/// Preflight checks: an aligned list, with the remedy under each failed or degraded one.
pub(crate) fn checks(style: Style, checks: &[PreflightCheck]) -> Vec<String> {
    let width = checks.iter().map(|c| c.check.len()).max().unwrap_or(0);
    let mut lines = Vec::new();
    for c in checks {
        let mark = match (c.ok, c.degraded) {
            (true, false) => style.paint("32", "ok  "),
            (true, true) => style.paint("33", "WARN"),
            (false, _) => style.paint("31", "FAIL"),
        };
        lines.push(format!("{mark} {:width$}  {}", c.check, c.detail));
        if !c.ok || c.degraded {
            lines.push(format!("     {:width$}  remedy: {}", "", c.remedy));
        }
    }
    lines
}
