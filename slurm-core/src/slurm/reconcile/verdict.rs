//! The verdict on one record whose submit outcome is unknown, from what one settle round
//! trip said of it ([`Answers`]): pure, so every rule of exactly once is a unit test.

use std::time::Duration;

use chrono::{DateTime, Utc};
use std::collections::BTreeSet;

use super::answers::{Answers, Attempt};
use crate::record::{BackendRef, JobRecord};
use crate::slurm::parse::{parse_sbatch_parsable, SbatchOutcome};
use crate::Error;

/// An attempt that began this long ago and left no answer is dead: sbatch runs under
/// `timeout -k 5 SBATCH_LIMIT` (see `submit.sh`), so whatever killed the submit script
/// (a dropped connection, the OOM killer, a reboot), sbatch can no longer create a job.
const ATTEMPT_DEAD_AFTER: Duration = Duration::from_secs(super::SBATCH_LIMIT.as_secs() + 5 + 60);

/// How long after a record's submit squeue alone can say "no job", on a cluster that
/// keeps an ended job `min_job_age` seconds (`MinJobAge`; 0: never purged): a job ends
/// after its submit, and is purged `MinJobAge` after its end, so it is listed at least
/// that long after the record was made. A margin of a tenth (at least 5 s) for the
/// purge timer and the time the round trip took.
fn squeue_window(min_job_age: u64) -> Duration {
    if min_job_age == 0 {
        return Duration::MAX;
    }
    Duration::from_secs(min_job_age.saturating_sub((min_job_age / 10).max(5)))
}

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
    /// The job folder is another record's (another store's record of the same id): no
    /// attempt of this record reached sbatch, and the jobs carrying the name are not its.
    Foreign(String),
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

/// How the answer of an attempt whose sbatch exited `rc`, printing `stdout` and
/// `stderr`, reads.
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
    if answers.foreign {
        return Verdict::Foreign(format!(
            "its job folder {} belongs to another record named {} (another record store shares the results root and SLURM user), so none of its attempts reached sbatch and the jobs of that name are not its own",
            record.results_dir.as_str(),
            record.id
        ));
    }
    let (mut seen, refusal, unknown, running) = read_attempts(record, answers);
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
    let age = now
        .signed_duration_since(record.submitted_at)
        .to_std()
        .unwrap_or_default();
    let window = answers.min_job_age.map(squeue_window);
    // Young enough that squeue still lists any job it had.
    let young = window.is_some_and(|window| age < window);
    // sacct decides when it answered and holds every job slurmctld knows (nothing waits
    // in the DBD agent queue). Disabled, or possibly lagging: squeue alone, while young.
    let sacct_current = answers.sacct.is_some() && answers.accounting_lag == Some(false);
    let squeue_alone = answers.sacct.is_some() || answers.accounting_disabled;
    let answered = answers.squeue.is_some() && (sacct_current || (squeue_alone && young));
    if !answered {
        let why = unanswered_causes(answers, window, squeue_alone, sacct_current, young);
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

/// What the attempts `record` counted said (`answers`): the jobs their answers name, the
/// refusal of one, why the outcome of each unknown one is unknown, and why each that
/// may still be running sbatch leaves the settle for later.
fn read_attempts(
    record: &JobRecord,
    answers: &Answers,
) -> (
    BTreeSet<BackendRef>,
    Option<Error>,
    Vec<String>,
    Vec<String>,
) {
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
            Some(Attempt::Running { age }) if *age > ATTEMPT_DEAD_AFTER.as_secs() => {
                unknown.push(format!(
                    "attempt {n} began {age} s ago and left no answer: its submit was killed, and sbatch (bounded by {} s) can no longer create a job",
                    super::SBATCH_LIMIT.as_secs() + 5
                ))
            }
            Some(Attempt::Running { age }) => running.push(format!(
                "attempt {n} may still be running sbatch (began {age} s ago)"
            )),
            None => running.push(format!("attempt {n} could not be fenced")),
        }
    }
    (seen, refusal, unknown, running)
}

/// Why the scheduler could not be asked: the `answers`' failures, and, when squeue
/// alone would answer (`squeue_alone`) but sacct is not current and the record is not
/// `young` (within `window`), why squeue alone cannot tell.
fn unanswered_causes(
    answers: &Answers,
    window: Option<Duration>,
    squeue_alone: bool,
    sacct_current: bool,
    young: bool,
) -> Vec<String> {
    let mut why = answers.failures.clone();
    if squeue_alone && !sacct_current && !young {
        let cause = if answers.accounting_disabled {
            "accounting is disabled".to_string()
        } else if answers.accounting_lag == Some(true) {
            "sacct may lag behind slurmctld (its DBD agent queue is not empty)".to_string()
        } else {
            "whether sacct lags behind slurmctld could not be read (sdiag)".to_string()
        };
        let limit = match window {
            Some(window) => format!(
                "the {} s squeue keeps an ended job (MinJobAge)",
                window.as_secs()
            ),
            None => "the time squeue keeps an ended job (MinJobAge could not be read)".to_string(),
        };
        why.push(format!(
            "{cause} and the record is older than {limit}, so squeue alone cannot tell"
        ));
    }
    why
}
