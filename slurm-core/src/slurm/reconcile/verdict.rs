//! The verdict on one record whose submit outcome is unknown, from what one settle round
//! trip said of it ([`Answers`]): pure, so every rule of exactly once is a unit test.

use std::time::Duration;

use chrono::{DateTime, Utc};
use std::collections::BTreeSet;

use super::answers::{Answers, Attempt};
use crate::record::{BackendRef, JobRecord};
use crate::slurm::parse::{parse_sbatch_parsable, SbatchOutcome};
use crate::Error;

/// With accounting disabled, squeue alone may say "no job" only for a record this
/// young: a job that ended is forgotten by slurmctld after `MinJobAge` (300 s by default).
const NO_ACCOUNTING_WINDOW: Duration = Duration::from_secs(240);

/// What the cluster says of one record whose submit outcome is unknown.
#[derive(Debug)]
pub(super) enum Verdict {
    /// Exactly one job carries the record's name: adopt it.
    Adopt(BackendRef),
    /// No job carries the name, and none can appear any more (every attempt is fenced
    /// or answered, and the scheduler said so): the submit never reached the scheduler.
    NoJob(String),
    /// sbatch refused the job (its answer is on disk) and no job carries the name.
    Refused(Error),
    /// Several jobs carry the name: a person decides (every one is kept in the record).
    Several(Vec<BackendRef>),
    /// Not settled yet: the scheduler could not be asked, or an attempt may still be
    /// running sbatch. The jobs seen so far are kept in the record.
    Unsettled {
        /// Jobs seen carrying the name.
        seen: Vec<BackendRef>,
        /// Why it is not settled.
        why: String,
    },
}

/// How one attempt's sbatch answer reads.
enum AttemptReading {
    Job(BackendRef),
    Refused(Error),
    Unknown(String),
}

fn read_attempt(rc: i32, stdout: &str, stderr: &str) -> AttemptReading {
    match parse_sbatch_parsable(stdout, stderr) {
        Ok(SbatchOutcome::Submitted {
            job_id, cluster, ..
        }) => AttemptReading::Job(BackendRef {
            native_id: job_id.to_string(),
            cluster,
        }),
        // A definite refusal: sbatch exited by itself (not killed by its time limit or
        // a signal) with its error lines, and the scheduler did answer.
        Err(error) if rc != 0 && rc < 124 && !error.is_transient() => {
            AttemptReading::Refused(error)
        }
        Err(error) => AttemptReading::Unknown(error.to_string()),
        Ok(SbatchOutcome::Unknown { stderr }) => {
            AttemptReading::Unknown(format!("sbatch exited {rc} without a job id ({stderr})"))
        }
    }
}

/// The verdict of `answers` for `record` (pure). `now` decides whether a record is
/// young enough for squeue alone to answer on a cluster without accounting.
pub(super) fn verdict(record: &JobRecord, answers: &Answers, now: DateTime<Utc>) -> Verdict {
    let counted = record.submit_attempts.unwrap_or(0);
    let mut seen: BTreeSet<BackendRef> = BTreeSet::new();
    let mut refusal: Option<Error> = None;
    // Whether some attempt's outcome is unknown, so the scheduler must be asked.
    let mut unknown: Vec<String> = Vec::new();
    let mut running: Vec<String> = Vec::new();
    if counted == 0 {
        unknown.push("the record predates fenced attempts".to_string());
    }
    for n in 1..=counted {
        match answers.attempts.get(&n) {
            Some(Attempt::Fenced) => {}
            Some(Attempt::Done { rc, stdout, stderr }) => match read_attempt(*rc, stdout, stderr) {
                AttemptReading::Job(job) => {
                    seen.insert(job);
                }
                AttemptReading::Refused(error) => refusal = Some(error),
                AttemptReading::Unknown(why) => unknown.push(format!("attempt {n}: {why}")),
            },
            Some(Attempt::Running { age }) => running.push(format!(
                "attempt {n} may still be running sbatch (began {age} s ago)"
            )),
            None => running.push(format!("attempt {n} could not be fenced")),
        }
    }
    for jobs in [&answers.squeue, &answers.sacct].into_iter().flatten() {
        seen.extend(jobs.iter().cloned());
    }
    let seen_list: Vec<BackendRef> = seen.iter().cloned().collect();
    if seen_list.len() > 1 {
        return Verdict::Several(seen_list);
    }
    if !running.is_empty() {
        return Verdict::Unsettled {
            seen: seen_list,
            why: running.join("; "),
        };
    }
    if unknown.is_empty() {
        // Every attempt was fenced before sbatch, refused, or answered with its id.
        return match (seen_list.into_iter().next(), refusal) {
            (Some(job), _) => Verdict::Adopt(job),
            (None, Some(error)) => Verdict::Refused(error),
            (None, None) => Verdict::NoJob(
                "no attempt reached sbatch (each was fenced before it could)".to_string(),
            ),
        };
    }
    let young = now
        .signed_duration_since(record.submitted_at)
        .to_std()
        .map(|age| age < NO_ACCOUNTING_WINDOW)
        .unwrap_or(true);
    let sacct_answered = answers.sacct.is_some() || (answers.accounting_disabled && young);
    if answers.squeue.is_none() || !sacct_answered {
        let mut why = answers.failures.clone();
        if answers.accounting_disabled && !young {
            why.push(format!(
                "accounting is disabled and the record is older than {} s, so squeue alone cannot tell",
                NO_ACCOUNTING_WINDOW.as_secs()
            ));
        }
        return Verdict::Unsettled {
            seen: seen_list,
            why: format!(
                "the outcome is unknown ({}) and the scheduler could not be asked: {}",
                unknown.join("; "),
                why.join("; ")
            ),
        };
    }
    match seen_list.into_iter().next() {
        Some(job) => Verdict::Adopt(job),
        None => match refusal {
            Some(error) => Verdict::Refused(error),
            None => Verdict::NoJob(format!(
                "squeue and sacct list no job named {} ({})",
                record.id,
                unknown.join("; ")
            )),
        },
    }
}
