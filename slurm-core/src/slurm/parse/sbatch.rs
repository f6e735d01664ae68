//! Reading `sbatch --parsable`: a job id (maybe with a cluster), nothing at all, or `sbatch: error:` lines.

use super::errors::is_transient_scheduler_error;
use super::id::SlurmJobId;
use crate::names::short;
use crate::{Error, Result};

/// What a `sbatch --parsable` run says about the submit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SbatchOutcome {
    /// The scheduler accepted the job.
    Submitted {
        /// The new job's id.
        job_id: SlurmJobId,
        /// The cluster, when sbatch printed `id;cluster` (federation, `-M`).
        cluster: Option<String>,
        /// `sbatch: warning:` (and other non-error) lines from stderr, and stdout lines
        /// that are not the id (a site wrapper's banner).
        warnings: Vec<String>,
    },
    /// No id, or no single id, and no error: the job may or may not exist. Reconcile by
    /// job name; never submit again blindly.
    Unknown {
        /// Why, with the (short) standard error, for the record's message.
        stderr: String,
    },
}

/// The prefix of an sbatch error line.
pub(crate) const SBATCH_ERROR_PREFIX: &str = "sbatch: error:";

/// The prefix of an sbatch fatal line (sbatch stops; the line names the cause).
pub(crate) const SBATCH_FATAL_PREFIX: &str = "sbatch: fatal:";

/// Whether a line of sbatch's stderr says why it failed (`sbatch: error:` or `sbatch: fatal:`).
fn is_failure_line(line: &str) -> bool {
    line.starts_with(SBATCH_ERROR_PREFIX) || line.starts_with(SBATCH_FATAL_PREFIX)
}

/// A job id as sbatch prints it: `123`, `123;cluster`, `Submitted batch job 123`, or
/// `Submitted batch job 123 on cluster c`.
fn job_id_line(line: &str) -> Option<(SlurmJobId, Option<String>)> {
    let text = line.strip_prefix("Submitted batch job ").unwrap_or(line);
    let (id_text, cluster) = match text.split_once(';') {
        Some((id, cluster)) => (id, Some(cluster.trim())),
        None => match text.split_once(" on cluster ") {
            Some((id, cluster)) => (id, Some(cluster.trim())),
            None => (text, None),
        },
    };
    let job_id = SlurmJobId::parse(id_text.trim()).ok()?;
    match cluster {
        Some(c) if is_cluster_name(c) => Some((job_id, Some(c.to_string()))),
        Some(_) => None,
        None => Some((job_id, None)),
    }
}

/// Read the output of `sbatch --parsable`.
///
/// - exactly one line of stdout that is a job id (`123`, `123;cluster`, or
///   `Submitted batch job 123`): [`SbatchOutcome::Submitted`], whatever else stdout
///   holds (a site wrapper's banner) and whatever stderr says (the job exists; the
///   other lines are kept as warnings).
/// - no such line, an empty stdout, and `sbatch: error:` or `sbatch: fatal:` lines on
///   stderr: [`Error::Remote`] with those lines (the fatal line names the cause),
///   transient when the scheduler did not answer (socket timeout...).
/// - anything else (nothing at all, only text that is no id, or several ids):
///   [`SbatchOutcome::Unknown`]: the caller reconciles, never guesses.
pub(crate) fn parse_sbatch_parsable(stdout: &str, stderr: &str) -> Result<SbatchOutcome> {
    let lines: Vec<&str> = stdout
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let mut warnings: Vec<String> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !is_failure_line(l))
        .map(|l| short_line(l).to_string())
        .collect();
    let failures: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| is_failure_line(l))
        .collect();
    let mut ids: Vec<(SlurmJobId, Option<String>)> = Vec::new();
    for line in &lines {
        match job_id_line(line) {
            Some(found) if !ids.contains(&found) => ids.push(found),
            Some(_) => {}
            None => warnings.push(short_line(line).to_string()),
        }
    }
    match ids.as_slice() {
        [(job_id, cluster)] => Ok(SbatchOutcome::Submitted {
            job_id: *job_id,
            cluster: cluster.clone(),
            warnings,
        }),
        [] if lines.is_empty() && !failures.is_empty() => Err(Error::Remote {
            command: "sbatch --parsable".to_string(),
            status: 1,
            stderr: failures
                .iter()
                .map(|l| short_line(l))
                .collect::<Vec<_>>()
                .join("; "),
            transient: is_transient_scheduler_error(stderr),
        }),
        [] if lines.is_empty() => Ok(SbatchOutcome::Unknown {
            stderr: short_line(stderr.trim()).to_string(),
        }),
        [] => Ok(SbatchOutcome::Unknown {
            stderr: format!(
                "no line of sbatch's output is a job id (it printed {} line(s) starting `{}`)",
                lines.len(),
                short(lines[0])
            ),
        }),
        several => Ok(SbatchOutcome::Unknown {
            stderr: format!(
                "sbatch's output holds {} lines that look like job ids ({})",
                several.len(),
                several
                    .iter()
                    .map(|(id, _)| id.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }),
    }
}

fn is_cluster_name(c: &str) -> bool {
    !c.is_empty()
        && c.len() <= 64
        && c.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// At most 300 bytes of a line (on a char boundary), for messages.
fn short_line(line: &str) -> &str {
    if line.len() <= 300 {
        return line;
    }
    let mut end = 300;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    &line[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn submitted(stdout: &str, stderr: &str) -> (u64, Option<String>, Vec<String>) {
        match parse_sbatch_parsable(stdout, stderr).unwrap() {
            SbatchOutcome::Submitted {
                job_id,
                cluster,
                warnings,
            } => (job_id.get(), cluster, warnings),
            other => panic!("expected Submitted, got {other:?}"),
        }
    }

    #[test]
    fn ids_with_and_without_cluster_and_warnings() {
        assert_eq!(submitted("123\n", ""), (123, None, vec![]));
        assert_eq!(
            submitted("123;gpu-cluster\n", ""),
            (123, Some("gpu-cluster".into()), vec![])
        );
        let (id, _, warnings) = submitted(
            "456\n",
            "sbatch: warning: can't honor --ntasks-per-node set to 1\n",
        );
        assert_eq!(id, 456);
        assert_eq!(warnings.len(), 1);
        assert_eq!(
            submitted("Submitted batch job 789\n", ""),
            (789, None, vec![])
        );
        // The job exists even when stderr also carries an error line.
        assert_eq!(
            submitted("321", "sbatch: error: something after submit").0,
            321
        );
    }

    #[test]
    fn empty_output_is_unknown_and_error_lines_are_errors() {
        assert_eq!(
            parse_sbatch_parsable("", "").unwrap(),
            SbatchOutcome::Unknown {
                stderr: String::new()
            }
        );
        assert!(matches!(
            parse_sbatch_parsable("  \n", "Connection to host closed").unwrap(),
            SbatchOutcome::Unknown { .. }
        ));
        let err = parse_sbatch_parsable(
            "",
            "sbatch: error: invalid partition specified: nope\nsbatch: error: Batch job submission failed: Invalid partition name specified\n",
        )
        .unwrap_err();
        assert!(!err.is_transient());
        assert!(err.to_string().contains("invalid partition specified"));
        let err = parse_sbatch_parsable(
            "",
            "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation",
        )
        .unwrap_err();
        assert!(err.is_transient());
    }

    #[test]
    fn output_with_no_single_id_is_unknown_never_an_error() {
        for out in [
            "abc",
            "123_4",
            "123;",
            "123;bad cluster",
            "1\n2",
            "0",
            "12.batch",
        ] {
            assert!(
                matches!(
                    parse_sbatch_parsable(out, "").unwrap(),
                    SbatchOutcome::Unknown { .. }
                ),
                "{out}"
            );
        }
    }

    #[test]
    fn a_wrapper_banner_around_the_id_is_skipped() {
        // Site wrappers print banners before (or after) sbatch's own line.
        let (id, _, warnings) = submitted(
            "*** Submitting to the GPU partition. Mind your quota. ***\n4242\nUsage: 12% of allocation\n",
            "",
        );
        assert_eq!(id, 4242);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert_eq!(
            submitted("Welcome!\nSubmitted batch job 77 on cluster west\n", "").1,
            Some("west".into())
        );
        // The same id twice is one id.
        assert_eq!(submitted("88\n88\n", "").0, 88);
        // Two different ids: nobody can tell which is the job; reconcile.
        assert!(matches!(
            parse_sbatch_parsable("2024\n4243\n", "").unwrap(),
            SbatchOutcome::Unknown { .. }
        ));
    }

    #[test]
    fn a_refusal_keeps_its_fatal_line() {
        let err = parse_sbatch_parsable(
            "",
            "sbatch: error: Batch job submission failed\nsbatch: fatal: Invalid --distribution specification\n",
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("Invalid --distribution specification"),
            "{text}"
        );
        assert!(text.contains("Batch job submission failed"), "{text}");
        let err = parse_sbatch_parsable("", "sbatch: fatal: No such partition\n").unwrap_err();
        assert!(err.to_string().contains("No such partition"));
        assert!(!err.is_transient());
    }
}
