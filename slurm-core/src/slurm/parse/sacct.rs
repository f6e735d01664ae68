//! sacct in a fixed parsable format (`--parsable2`, explicit fields): the format, the row parser, and picking the newest row of a requeued job.

use std::collections::HashMap;

use chrono::NaiveDateTime;

use super::id::{SlurmIdField, SlurmJobId};
use super::sacct_usage::{RowUsage, USAGE_FIELDS};
use super::squeue::optional;
use crate::names::short;
use crate::slurm::states::SlurmState;
use crate::{Error, Result};

/// The sacct fields, in order. JobName is last: a name may hold the delimiter
/// and the parser joins whatever follows the ninth `|`.
pub(crate) const SACCT_FIELDS: &[&str] = &[
    "JobID", "JobIDRaw", "State", "ExitCode", "Reason", "Submit", "Start", "End", "NodeList",
    "JobName",
];

/// [`SACCT_FIELDS`] joined for `--format=`.
#[cfg(any(test, feature = "testing"))]
pub(crate) const SACCT_FORMAT: &str =
    "JobID,JobIDRaw,State,ExitCode,Reason,Submit,Start,End,NodeList,JobName";

/// [`SACCT_FORMAT`] and `FailedNode` (sacct from Slurm 23.02; 22.05 refuses the field):
/// the node that caused a job's failure. It comes after JobName, at the end of the line,
/// where a name holding the delimiter cannot hide it (node names hold no `|`).
#[cfg(test)]
pub(crate) const SACCT_FORMAT_WITH_FAILED_NODE: &str =
    "JobID,JobIDRaw,State,ExitCode,Reason,Submit,Start,End,NodeList,JobName,FailedNode";

/// The poll's sacct format: [`SACCT_FORMAT`], `Eligible` (when the run became eligible
/// to start: the job's timeline) and the usage columns ([`USAGE_FIELDS`]: what the run
/// used), read with [`parse_sacct_rows_eligible`].
pub(crate) const SACCT_POLL_FORMAT: &str =
    "JobID,JobIDRaw,State,ExitCode,Reason,Submit,Start,End,NodeList,JobName,Eligible,Elapsed,Timelimit,AllocTRES,MaxRSS,TRESUsageInAve";

/// The poll's sacct format where the client has `FailedNode`: [`SACCT_POLL_FORMAT`], then
/// `FailedNode` last (split off first, then the eligible time).
pub(crate) const SACCT_POLL_FORMAT_WITH_FAILED_NODE: &str =
    "JobID,JobIDRaw,State,ExitCode,Reason,Submit,Start,End,NodeList,JobName,Eligible,Elapsed,Timelimit,AllocTRES,MaxRSS,TRESUsageInAve,FailedNode";

/// sacct output in [`SACCT_FORMAT_WITH_FAILED_NODE`] as output in [`SACCT_FORMAT`] (each
/// line's last field cut off), and the `FailedNode` of every row that names one, by its
/// JobID column (`328`, `12_3`).
pub(crate) fn split_failed_nodes(stdout: &str) -> (String, HashMap<String, String>) {
    let mut rows = String::with_capacity(stdout.len());
    let mut failed = HashMap::new();
    for line in stdout.lines() {
        let line = line.trim_end_matches('\r');
        let row = match line.rsplit_once('|') {
            Some((row, node)) => {
                let job = row.split('|').next().unwrap_or_default().trim();
                if let Some(node) = optional(node) {
                    failed.insert(job.to_string(), node);
                }
                row
            }
            None => line,
        };
        rows.push_str(row);
        rows.push('\n');
    }
    (rows, failed)
}

/// One row of sacct: the job itself, or one of its steps or array tasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SacctRow {
    /// The JobID column (`123`, `123.batch`, `123_7`).
    pub id: SlurmIdField,
    /// The JobIDRaw column (for an array task: the task's own job number).
    pub raw_id: Option<SlurmJobId>,
    /// The state.
    pub state: SlurmState,
    /// The exit code of the script (`2` of `2:0`).
    pub exit_code: Option<i32>,
    /// The signal that ended it (`9` of `0:9`).
    pub signal: Option<i32>,
    /// The last reason the job was held, or `None`.
    pub reason: Option<String>,
    /// Submit time (local time of the cluster).
    pub submit: Option<NaiveDateTime>,
    /// Start time, `None` while pending.
    pub start: Option<NaiveDateTime>,
    /// End time, `None` while pending or running.
    pub end: Option<NaiveDateTime>,
    /// When the run became eligible, where the output had the column (`Eligible`).
    pub eligible: Option<NaiveDateTime>,
    /// What the row used, where the output had the usage columns.
    pub usage: Option<RowUsage>,
    /// Nodes (`None assigned` reads as `None`).
    pub nodelist: Option<String>,
    /// The job name.
    pub name: String,
    /// The row's position in the output (later rows are newer among equals).
    pub position: usize,
}

/// Parse sacct output in [`SACCT_FORMAT`] (`--parsable2`). Blank lines are
/// skipped; any malformed line is an error naming the line (the tests' strict reading;
/// the poll reads with [`parse_sacct_rows_eligible`]).
#[cfg(test)]
pub(crate) fn parse_sacct(stdout: &str) -> Result<Vec<SacctRow>> {
    let (rows, mut unreadable) = parse_sacct_rows(stdout);
    match unreadable.is_empty() {
        true => Ok(rows),
        false => Err(unreadable.remove(0).error),
    }
}

/// A sacct line the parser refused: the job it names (when its JobID reads) and why.
#[derive(Debug)]
pub(crate) struct UnreadableRow {
    /// The job of the line's JobID column, when that much reads.
    pub(crate) job: Option<SlurmJobId>,
    /// The error naming the line.
    pub(crate) error: Error,
}

/// Parse sacct output in [`SACCT_FORMAT`], every line that reads, and apart the lines
/// that do not (so one odd row costs its own job only).
#[cfg(test)]
pub(crate) fn parse_sacct_rows(stdout: &str) -> (Vec<SacctRow>, Vec<UnreadableRow>) {
    parse_sacct_rows_eligible(stdout, false)
}

/// Parse sacct output in [`SACCT_FORMAT`] (each line ending with `Eligible` when `eligible`) (the
/// poll's format, its `FailedNode` split off first).
pub(crate) fn parse_sacct_rows_eligible(
    stdout: &str,
    eligible: bool,
) -> (Vec<SacctRow>, Vec<UnreadableRow>) {
    let mut rows = Vec::new();
    let mut unreadable = Vec::new();
    for (n, line) in stdout.lines().enumerate() {
        let mut line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let mut eligible_at = None;
        let mut usage = None;
        if eligible {
            // The usage columns, then `Eligible`: the last fields when the first of them
            // reads as a time (a line without them, as an older capture's, reads as
            // before: its last field is the name, and cutting it would leave too few).
            let tail: Vec<&str> = line.rsplitn(USAGE_FIELDS.len() + 2, '|').collect();
            if tail.len() == USAGE_FIELDS.len() + 2 {
                let row = tail[USAGE_FIELDS.len() + 1];
                let at = tail[USAGE_FIELDS.len()];
                if let Ok(at) = parse_time(at) {
                    if row.split('|').count() >= SACCT_FIELDS.len() {
                        let mut fields: Vec<&str> = tail[..USAGE_FIELDS.len()].to_vec();
                        fields.reverse();
                        usage = Some(RowUsage::parse(&fields));
                        line = row;
                        eligible_at = at;
                    }
                }
            }
        }
        if eligible && usage.is_none() {
            if let Some((row, at)) = line.rsplit_once('|') {
                if let Ok(at) = parse_time(at) {
                    if row.split('|').count() >= SACCT_FIELDS.len() {
                        line = row;
                        eligible_at = at;
                    }
                }
            }
        }
        match parse_row(n, line, rows.len()) {
            Ok(row) => rows.push(SacctRow {
                eligible: eligible_at,
                usage,
                ..row
            }),
            Err(error) => unreadable.push(UnreadableRow {
                job: line
                    .split('|')
                    .next()
                    .and_then(|id| SlurmIdField::parse(id.trim()).ok())
                    .map(|id| id.job),
                error,
            }),
        }
    }
    (rows, unreadable)
}

/// Line `n` (0-based) of sacct's output, the `position`-th row read.
fn parse_row(n: usize, line: &str, position: usize) -> Result<SacctRow> {
    let n_fields = SACCT_FIELDS.len();
    let bad = |why: String| {
        Error::parse(
            "sacct output",
            format!("line {}: {why}: `{}`", n + 1, short(line)),
        )
    };
    let p: Vec<&str> = line.splitn(n_fields, '|').collect();
    if p.len() != n_fields {
        return Err(bad(format!(
            "expected {n_fields} `|`-separated fields, got {}",
            p.len()
        )));
    }
    let id = SlurmIdField::parse(p[0]).map_err(|e| bad(e.to_string()))?;
    let raw_id = match p[1].trim() {
        "" => None,
        raw => Some(
            SlurmIdField::parse(raw)
                .map_err(|e| bad(e.to_string()))?
                .job,
        ),
    };
    let state = SlurmState::parse(p[2]).map_err(|e| bad(e.to_string()))?;
    let (exit_code, signal) = parse_exit_code(p[3]).map_err(bad)?;
    Ok(SacctRow {
        id,
        raw_id,
        state,
        exit_code,
        signal,
        reason: optional(p[4]),
        submit: parse_time(p[5]).map_err(bad)?,
        start: parse_time(p[6]).map_err(bad)?,
        end: parse_time(p[7]).map_err(bad)?,
        eligible: None,
        usage: None,
        nodelist: optional(p[8]).filter(|n| n != "None assigned"),
        name: p[9].to_string(),
        position,
    })
}

/// `2:0` -> (Some(2), Some(0)); empty -> (None, None).
fn parse_exit_code(text: &str) -> std::result::Result<(Option<i32>, Option<i32>), String> {
    let t = text.trim();
    if t.is_empty() {
        return Ok((None, None));
    }
    let (code, signal) = t.split_once(':').unwrap_or((t, ""));
    let num = |s: &str| -> std::result::Result<Option<i32>, String> {
        if s.is_empty() {
            Ok(None)
        } else {
            s.parse()
                .map(Some)
                .map_err(|_| format!("bad exit code `{}`", short(t)))
        }
    };
    Ok((num(code)?, num(signal)?))
}

/// sacct times: `2024-01-02T03:04:05`, or `Unknown` / `None` / empty.
fn parse_time(text: &str) -> std::result::Result<Option<NaiveDateTime>, String> {
    match text.trim() {
        "" | "Unknown" | "None" | "N/A" => Ok(None),
        t => NaiveDateTime::parse_from_str(t, "%Y-%m-%dT%H:%M:%S")
            .map(Some)
            .map_err(|_| format!("bad time `{}`", short(t))),
    }
}

/// The newest row describing job `id` itself (not a step, array task or het
/// component). A requeued job has several rows (`--duplicates`); the newest is
/// the one with the latest submit time and, among equal submit times, the one
/// printed last (sacct prints older records first). Start times are not used: a
/// requeued row still waiting has none, yet it is the newest.
#[cfg(test)]
pub(crate) fn resolve_newest(rows: &[SacctRow], id: SlurmJobId) -> Option<&SacctRow> {
    resolve_newest_of(rows, id, None)
}

/// [`resolve_newest`] for job `id` itself (`task` None) or its array task `task`.
pub(crate) fn resolve_newest_of(
    rows: &[SacctRow],
    id: SlurmJobId,
    task: Option<u32>,
) -> Option<&SacctRow> {
    rows.iter()
        .filter(|r| r.id.describes(id, task))
        .max_by_key(|r| (r.submit, r.position))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::states::SlurmBaseState;

    fn id(n: u64) -> SlurmJobId {
        SlurmJobId::new(n).unwrap()
    }

    #[test]
    fn the_format_lists_the_fields() {
        assert_eq!(SACCT_FORMAT, SACCT_FIELDS.join(","));
    }

    #[test]
    fn rows_steps_and_requeued_duplicates() {
        let out = "\
200|200|NODE_FAIL|0:0|None|2024-05-01T10:00:00|2024-05-01T10:00:05|2024-05-01T10:03:00|n1|job-a1b2c3
200.batch|200|CANCELLED|0:15||2024-05-01T10:00:05|2024-05-01T10:00:05|2024-05-01T10:03:00|n1|batch
200.extern|200|COMPLETED|0:0||2024-05-01T10:00:05|2024-05-01T10:00:05|2024-05-01T10:03:00|n1|extern
200|200|PENDING|0:0|BeginTime|2024-05-01T10:03:01|Unknown|Unknown|None assigned|job-a1b2c3
201|201|CANCELLED by 1000|0:0|None|2024-05-01T11:00:00|None|2024-05-01T11:00:09|None assigned|name|with|bars
202_3|205|FAILED|2:0|None|2024-05-01T11:00:00|2024-05-01T11:00:01|2024-05-01T11:00:02|n2|arr
";
        let rows = parse_sacct(out).unwrap();
        assert_eq!(rows.len(), 6);
        assert!(rows[1].id.is_step() && rows[2].id.is_step());
        assert_eq!((rows[1].exit_code, rows[1].signal), (Some(0), Some(15)));
        assert_eq!(rows[3].start, None);
        assert_eq!(rows[3].nodelist, None);
        assert_eq!(rows[3].reason.as_deref(), Some("BeginTime"));
        let newest = resolve_newest(&rows, id(200)).unwrap();
        assert_eq!(newest.state.base, SlurmBaseState::Pending);
        assert_eq!(newest.position, 3);
        let cancelled = resolve_newest(&rows, id(201)).unwrap();
        assert_eq!(cancelled.state.base, SlurmBaseState::Cancelled);
        assert_eq!(cancelled.state.detail.as_deref(), Some("by 1000"));
        assert_eq!(cancelled.name, "name|with|bars");
        // An array task is not job 202 itself.
        assert!(resolve_newest(&rows, id(202)).is_none());
        assert_eq!(rows[5].raw_id, Some(id(205)));
        assert!(resolve_newest(&rows, id(999)).is_none());
        assert!(parse_sacct("").unwrap().is_empty());
    }

    #[test]
    fn same_submit_time_falls_back_to_output_order() {
        let out = "\
300|300|FAILED|1:0|None|2024-05-01T10:00:00|2024-05-01T10:00:09|2024-05-01T10:01:00|n1|x
300|300|RUNNING|0:0|None|2024-05-01T10:00:00|2024-05-01T10:02:00|Unknown|n2|x
300|300|PENDING|0:0|None|2024-05-01T10:00:00|Unknown|Unknown|None assigned|x
";
        let rows = parse_sacct(out).unwrap();
        // The row printed last wins, even without a start time.
        assert_eq!(
            resolve_newest(&rows, id(300)).unwrap().state.base,
            SlurmBaseState::Pending
        );
    }

    /// sacct of a job whose node went down under it (`--no-requeue`), as each release's
    /// test bed printed it: the base format, then with `FailedNode` (22.05 refuses it).
    const NODE_FAIL: [(&str, &str, &str); 3] = [
        (
            "22.05",
            include_str!("../../../../tests/fixtures/slurm-22.05/sacct-node-fail"),
            include_str!(
                "../../../../tests/fixtures/slurm-22.05/sacct-node-fail-with-failed-node.stderr"
            ),
        ),
        (
            "24.11",
            include_str!("../../../../tests/fixtures/slurm-24.11/sacct-node-fail"),
            include_str!("../../../../tests/fixtures/slurm-24.11/sacct-node-fail-with-failed-node"),
        ),
        (
            "26.05",
            include_str!("../../../../tests/fixtures/slurm-26.05/sacct-node-fail"),
            include_str!("../../../../tests/fixtures/slurm-26.05/sacct-node-fail-with-failed-node"),
        ),
    ];

    #[test]
    fn a_node_failure_reads_on_each_release_and_names_its_node_from_23_02() {
        for (release, base, with_failed_node) in NODE_FAIL {
            let rows = parse_sacct(base).unwrap();
            let job = &rows[0];
            assert_eq!(job.state.base, SlurmBaseState::NodeFail, "{release}");
            assert_eq!(job.nodelist.as_deref(), Some("n2"), "{release}");
            // NODE_FAIL got an exit code in 24.11 (1:0; 0:0 before).
            let exit = if release == "22.05" { 0 } else { 1 };
            assert_eq!(job.exit_code, Some(exit), "{release}");
            if release == "22.05" {
                assert!(
                    with_failed_node.contains("Invalid field requested: \"FailedNode\""),
                    "{with_failed_node}"
                );
                continue;
            }
            let (text, failed) = split_failed_nodes(with_failed_node);
            let again = parse_sacct(&text).unwrap();
            assert_eq!(again.len(), rows.len(), "{release}");
            assert_eq!(again[0].state, job.state, "{release}");
            assert_eq!(again[0].name, job.name, "{release}");
            let id = job.id.to_string();
            assert_eq!(failed.get(&id).map(String::as_str), Some("n2"), "{release}");
            assert_eq!(failed.len(), 1, "only the job row names it: {failed:?}");
        }
    }

    #[test]
    fn the_failed_node_is_cut_off_the_end_even_after_a_name_with_bars() {
        assert!(SACCT_FORMAT_WITH_FAILED_NODE.starts_with(SACCT_FORMAT));
        assert!(SACCT_FORMAT_WITH_FAILED_NODE.ends_with(",JobName,FailedNode"));
        let out = "\
7|7|NODE_FAIL|1:0|None|2024-05-01T10:00:00|2024-05-01T10:00:05|2024-05-01T10:03:00|n[1-2]|a|b|n2
7.batch|7.batch|CANCELLED|||2024-05-01T10:00:05|2024-05-01T10:00:05|2024-05-01T10:03:00|n1|batch|

8|8|COMPLETED|0:0|None|2024-05-01T10:00:00|2024-05-01T10:00:05|2024-05-01T10:03:00|n1|c|None
";
        let (text, failed) = split_failed_nodes(out);
        let rows = parse_sacct(&text).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].name, "a|b");
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert_eq!(failed["7"], "n2");
    }

    #[test]
    fn the_polls_eligible_time_is_cut_off_the_end_and_an_older_line_reads_as_before() {
        assert_eq!(
            SACCT_POLL_FORMAT_WITH_FAILED_NODE,
            format!("{SACCT_POLL_FORMAT},FailedNode")
        );
        assert_eq!(
            SACCT_POLL_FORMAT,
            format!("{SACCT_FORMAT},Eligible,{}", USAGE_FIELDS.join(","))
        );
        let out = "\
7|7|COMPLETED|0:0|None|2024-05-01T10:00:00|2024-05-01T10:00:05|2024-05-01T10:03:00|n1|a|b|2024-05-01T10:00:02
7.batch|7.batch|COMPLETED|0:0||2024-05-01T10:00:05|2024-05-01T10:00:05|2024-05-01T10:03:00|n1|batch|Unknown
8|8|COMPLETED|0:0|None|2024-05-01T10:00:00|2024-05-01T10:00:05|2024-05-01T10:03:00|n1|old-name
";
        let (rows, unreadable) = parse_sacct_rows_eligible(out, true);
        assert!(unreadable.is_empty(), "{unreadable:?}");
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].name, "a|b");
        assert_eq!(rows[0].eligible.unwrap().to_string(), "2024-05-01 10:00:02");
        assert_eq!(rows[1].eligible, None);
        assert_eq!(rows[2].name, "old-name");
        assert_eq!(rows[2].eligible, None);
        assert_eq!(rows[0].usage, None, "a line without the usage columns");
        // The poll's format today: Eligible, then the usage columns, after a name that
        // holds the delimiter.
        let out = "9|9|COMPLETED|0:0|None|2024-05-01T10:00:00|2024-05-01T10:00:05|2024-05-01T10:03:00|n1|x|y|2024-05-01T10:00:01|00:02:55|01:00:00|cpu=2,gres/gpu=4,node=1||\n";
        let (rows, unreadable) = parse_sacct_rows_eligible(out, true);
        assert!(unreadable.is_empty(), "{unreadable:?}");
        assert_eq!(rows[0].name, "x|y");
        assert_eq!(rows[0].eligible.unwrap().to_string(), "2024-05-01 10:00:01");
        let usage = rows[0].usage.as_ref().unwrap();
        assert_eq!(
            (usage.elapsed_s, usage.gpus, usage.cpus),
            (Some(175), Some(4), Some(2))
        );
        assert_eq!(usage.max_rss_bytes, None);
    }

    #[test]
    fn malformed_lines_are_errors() {
        for bad in [
            "300|300|FAILED",
            "abc|300|FAILED|1:0|None|Unknown|Unknown|Unknown|n1|x",
            "300|300|FAILED|x:y|None|Unknown|Unknown|Unknown|n1|x",
            "300|300|FAILED|1:0|None|yesterday|Unknown|Unknown|n1|x",
            "300|300||1:0|None|Unknown|Unknown|Unknown|n1|x",
        ] {
            let err = parse_sacct(bad).unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::Parse, "{bad}");
        }
    }
}
