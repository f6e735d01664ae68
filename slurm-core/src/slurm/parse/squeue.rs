//! squeue in a fixed `|`-separated format: the format and the parser of its rows.

use super::id::SlurmIdField;
use crate::names::short;
use crate::slurm::states::SlurmState;
use crate::{Error, Result};

/// The squeue format: job id (with array part), state (long form), reason,
/// node list, and the job name last (a name may hold the delimiter; the
/// parser joins what follows the fourth `|`).
pub(crate) const SQUEUE_FORMAT: &str = "%i|%T|%r|%N|%j";

/// The number of fields in [`SQUEUE_FORMAT`].
pub(crate) const SQUEUE_FIELDS: usize = 5;

/// One row of squeue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SqueueRow {
    /// The id column (`123`, `123_7`, `123_[1-5]`).
    pub id: SlurmIdField,
    /// The state.
    pub state: SlurmState,
    /// Why the job waits (`Resources`, `Priority`, `BeginTime`), or `None`.
    pub reason: Option<String>,
    /// The nodes, empty while pending.
    pub nodelist: Option<String>,
    /// The job name.
    pub name: String,
}

/// Parse squeue output in [`SQUEUE_FORMAT`]. Blank lines and `CLUSTER: name`
/// banners (printed with `--clusters`) are skipped; any other malformed line is
/// an error naming the line.
pub(crate) fn parse_squeue(stdout: &str) -> Result<Vec<SqueueRow>> {
    let mut rows = Vec::new();
    for (n, line) in stdout.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.starts_with("CLUSTER: ") {
            continue;
        }
        let bad = |why: String| {
            Error::parse(
                "squeue output",
                format!("line {}: {why}: `{}`", n + 1, short(line)),
            )
        };
        let parts: Vec<&str> = line.splitn(SQUEUE_FIELDS, '|').collect();
        if parts.len() != SQUEUE_FIELDS {
            return Err(bad(format!(
                "expected {SQUEUE_FIELDS} `|`-separated fields, got {}",
                parts.len()
            )));
        }
        let id = SlurmIdField::parse(parts[0]).map_err(|e| bad(e.to_string()))?;
        let state = SlurmState::parse(parts[1]).map_err(|e| bad(e.to_string()))?;
        rows.push(SqueueRow {
            id,
            state,
            reason: optional(parts[2]),
            nodelist: optional(parts[3]),
            name: parts[4].to_string(),
        });
    }
    Ok(rows)
}

/// A column value, with SLURM's empty markers (`""`, `None`, `(null)`) as `None`.
pub(crate) fn optional(text: &str) -> Option<String> {
    let t = text.trim();
    match t {
        "" | "None" | "(null)" | "n/a" => None,
        _ => Some(t.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::states::SlurmBaseState;

    #[test]
    fn rows_arrays_and_odd_names() {
        let out = "CLUSTER: c1\n\
                   101|RUNNING|None|n[1-2]|train-abc123\n\
                   102|PENDING|Resources||eval|with|pipes\n\
                   103_[1-5]|PENDING|Priority||arr\n\
                   103_7|RUNNING|None|n1|arr\n\
                   \n";
        let rows = parse_squeue(out).unwrap();
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[0].id.job.get(), 101);
        assert_eq!(rows[0].state.base, SlurmBaseState::Running);
        assert_eq!(rows[0].reason, None);
        assert_eq!(rows[0].nodelist.as_deref(), Some("n[1-2]"));
        assert_eq!(rows[1].name, "eval|with|pipes");
        assert_eq!(rows[1].reason.as_deref(), Some("Resources"));
        assert_eq!(rows[1].nodelist, None);
        assert!(!rows[2].id.is_job_itself());
        assert!(!rows[3].id.is_job_itself());
        assert!(parse_squeue("").unwrap().is_empty());
    }

    #[test]
    fn malformed_lines_are_errors() {
        for bad in [
            "101|RUNNING",
            "x|RUNNING|None|n1|a",
            "101|???|None|n1|a",
            "101||None|n1|a",
        ] {
            let err = parse_squeue(bad).unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::Parse, "{bad}");
            assert!(err.to_string().contains("line 1"));
        }
    }
}
