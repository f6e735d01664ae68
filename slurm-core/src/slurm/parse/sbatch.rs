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
        /// `sbatch: warning:` (and other non-error) lines from stderr.
        warnings: Vec<String>,
    },
    /// No id and no error: the job may or may not exist. Reconcile by job name;
    /// never submit again blindly.
    Unknown {
        /// The (short) standard error, for the record's message.
        stderr: String,
    },
}

/// The prefix of an sbatch error line.
pub(crate) const SBATCH_ERROR_PREFIX: &str = "sbatch: error:";

/// Read the output of `sbatch --parsable`.
///
/// - `123` or `123;cluster` on stdout: [`SbatchOutcome::Submitted`], whatever
///   stderr says (the job exists; warnings are kept). `Submitted batch job 123`
///   (sbatch without `--parsable`) is read too.
/// - empty stdout and `sbatch: error:` lines on stderr: [`Error::Remote`] with
///   those lines, transient when the scheduler did not answer (socket timeout...).
/// - empty stdout otherwise: [`SbatchOutcome::Unknown`].
/// - anything else on stdout: [`Error::Parse`].
pub(crate) fn parse_sbatch_parsable(stdout: &str, stderr: &str) -> Result<SbatchOutcome> {
    let lines: Vec<&str> = stdout
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let warnings: Vec<String> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with(SBATCH_ERROR_PREFIX))
        .map(|l| short_line(l).to_string())
        .collect();
    let errors: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with(SBATCH_ERROR_PREFIX))
        .collect();
    match lines.as_slice() {
        [] if !errors.is_empty() => Err(Error::Remote {
            command: "sbatch --parsable".to_string(),
            status: 1,
            stderr: errors
                .iter()
                .map(|l| short_line(l))
                .collect::<Vec<_>>()
                .join("; "),
            transient: is_transient_scheduler_error(stderr),
        }),
        [] => Ok(SbatchOutcome::Unknown {
            stderr: short_line(stderr.trim()).to_string(),
        }),
        [line] => {
            let text = line.strip_prefix("Submitted batch job ").unwrap_or(line);
            let (id_text, cluster) = match text.split_once(';') {
                Some((id, cluster)) => (id, Some(cluster.trim())),
                None => {
                    // `Submitted batch job 123 on cluster c`
                    match text.split_once(" on cluster ") {
                        Some((id, cluster)) => (id, Some(cluster.trim())),
                        None => (text, None),
                    }
                }
            };
            let job_id = SlurmJobId::parse(id_text).map_err(|_| {
                Error::parse(
                    "sbatch --parsable output",
                    format!("expected `ID` or `ID;CLUSTER`, got `{}`", short(line)),
                )
            })?;
            let cluster = match cluster {
                Some(c) if is_cluster_name(c) => Some(c.to_string()),
                Some(c) => {
                    return Err(Error::parse(
                        "sbatch --parsable output",
                        format!("bad cluster name `{}` after the job id", short(c)),
                    ))
                }
                None => None,
            };
            Ok(SbatchOutcome::Submitted {
                job_id,
                cluster,
                warnings,
            })
        }
        _ => Err(Error::parse(
            "sbatch --parsable output",
            format!(
                "expected one line `ID` or `ID;CLUSTER`, got {} lines starting `{}`",
                lines.len(),
                short(lines[0])
            ),
        )),
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
    fn garbage_is_a_parse_error() {
        for out in [
            "abc",
            "123_4",
            "123;",
            "123;bad cluster",
            "1\n2",
            "0",
            "12.batch",
        ] {
            let err = parse_sbatch_parsable(out, "").unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::Parse, "{out}");
        }
    }
}
