//! Settle submits whose outcome is unknown, by what the cluster says and nothing else.
//!
//! The rule: **only an answer from the scheduler settles a submit.** One round trip
//! (`settle.sh`) does three things for any number of records:
//! 1. *Fence* every sbatch attempt the record counted: an attempt that has not reached
//!    sbatch yet never will (its folder `.sbatch-N` is taken first), and an attempt that
//!    did left sbatch's own answer on disk (or is still running, bounded by its time
//!    limit). So a late upload can never create a job after the settle said there is none.
//! 2. Read the answers the attempts left (sbatch's printed id is the scheduler's answer).
//! 3. List the user's own jobs carrying each record's exact name, from squeue *and*
//!    sacct. A tool that failed (controller or database unreachable, which is exactly when
//!    answers get lost) is "could not ask", never "no job".
//!
//! The [`Verdict`] is pure ([`verdict`]); the callers (the submit loop, and `status`,
//! `watch` and `cancel` for records a dead or failed submit left `SUBMITTING`) act on it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::backend::SlurmBackend;
use super::parse::{is_accounting_disabled, parse_sbatch_parsable, SbatchOutcome, SlurmIdField};
use super::scripts::SETTLE;
use crate::record::{BackendRef, JobRecord, RecordStore};
use crate::render::Renderer;
use crate::transport::{round_trip, Output, Transport};
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

/// One settle's answer for one record: the verdict, and whether the secrets sidecar
/// was removed (every attempt was fenced before sbatch).
#[derive(Debug)]
pub(super) struct Settled {
    pub(super) verdict: Verdict,
    pub(super) secrets_removed: bool,
}

/// What the fence found of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Attempt {
    /// Never reached sbatch, and never will.
    Fenced,
    /// sbatch ran: its exit status and output.
    Done {
        rc: i32,
        stdout: String,
        stderr: String,
    },
    /// sbatch may still be running (the attempt began `age` seconds ago).
    Running { age: u64 },
}

/// What one settle round trip said of one record, before the verdict.
#[derive(Debug, Default)]
pub(super) struct Answers {
    /// Per attempt (1-based), what the fence found; missing entries are unknown.
    pub(super) attempts: BTreeMap<u32, Attempt>,
    /// Whether the fence removed the secrets sidecar.
    pub(super) forgot: bool,
    /// Jobs squeue lists with the name (`None`: squeue did not answer).
    pub(super) squeue: Option<BTreeSet<BackendRef>>,
    /// Jobs sacct lists with the name (`None`: sacct did not answer).
    pub(super) sacct: Option<BTreeSet<BackendRef>>,
    /// sacct said accounting is disabled.
    pub(super) accounting_disabled: bool,
    /// Why a tool did not answer.
    pub(super) failures: Vec<String>,
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

/// Jobs of a squeue or sacct listing (`ID|NAME` lines) whose name is exactly `name`.
fn jobs_named(listing: &str, name: &str) -> BTreeSet<BackendRef> {
    listing
        .lines()
        .filter_map(|line| {
            let (id, job_name) = line.trim().split_once('|')?;
            if job_name.trim() != name {
                return None;
            }
            let field = SlurmIdField::parse(id.trim()).ok()?;
            field
                .is_job_itself()
                .then(|| BackendRef::new(field.job.to_string()))
        })
        .collect()
}

/// Read one settle round trip's three parts for `names`.
pub(super) fn read_answers(names: &[String], parts: &[Output]) -> BTreeMap<String, Answers> {
    let mut answers: BTreeMap<String, Answers> = names
        .iter()
        .map(|name| (name.clone(), Answers::default()))
        .collect();
    let decode = |text: &str| -> String {
        if text == "-" {
            return String::new();
        }
        hex::decode(text)
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default()
    };
    for line in parts[0].stdout_text().lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(entry) = fields.first().and_then(|name| answers.get_mut(*name)) else {
            continue;
        };
        match fields.as_slice() {
            [_, "forgot"] => entry.forgot = true,
            [_, n, "fenced"] => {
                if let Ok(n) = n.parse() {
                    entry.attempts.insert(n, Attempt::Fenced);
                }
            }
            [_, n, "running", age] => {
                if let Ok(n) = n.parse() {
                    entry.attempts.insert(
                        n,
                        Attempt::Running {
                            age: age.parse().unwrap_or(0),
                        },
                    );
                }
            }
            [_, n, "done", rc, out, err] => {
                if let Ok(n) = n.parse() {
                    entry.attempts.insert(
                        n,
                        Attempt::Done {
                            rc: rc.parse().unwrap_or(-1),
                            stdout: decode(out),
                            stderr: decode(err),
                        },
                    );
                }
            }
            _ => {}
        }
    }
    let squeue = &parts[1];
    let sacct = &parts[2];
    let sacct_disabled = is_accounting_disabled(&sacct.stderr_text());
    for (name, entry) in answers.iter_mut() {
        if squeue.success() {
            entry.squeue = Some(jobs_named(&squeue.stdout_text(), name));
        } else {
            entry.failures.push(format!(
                "squeue: {}",
                first_line(&squeue.stderr_text(), squeue.status)
            ));
        }
        if sacct.success() && !sacct_disabled {
            entry.sacct = Some(jobs_named(&sacct.stdout_text(), name));
        } else if sacct_disabled {
            entry.accounting_disabled = true;
        } else {
            entry.failures.push(format!(
                "sacct: {}",
                first_line(&sacct.stderr_text(), sacct.status)
            ));
        }
    }
    answers
}

fn first_line(text: &str, status: i32) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| l.chars().take(300).collect::<String>())
        .unwrap_or_else(|| format!("exited {status} without a message"))
}

impl<T, R, S> SlurmBackend<T, R, S>
where
    T: Transport + 'static,
    R: Renderer + 'static,
    S: RecordStore + 'static,
{
    /// Settle `records` (all `SUBMITTING`) in one round trip, waiting at most
    /// `fence_wait` for an attempt still running sbatch. Never fails: a round trip that
    /// could not be made leaves every record [`Verdict::Unsettled`].
    pub(super) async fn settle_records(
        &self,
        records: &[JobRecord],
        fence_wait: Duration,
    ) -> Vec<Settled> {
        if records.is_empty() {
            return Vec::new();
        }
        let names: Vec<String> = records.iter().map(|r| r.id.to_string()).collect();
        let mut list = String::new();
        for record in records {
            list.push_str(&format!(
                "{}\t{}\t{}\n",
                record.results_dir.as_str(),
                record.id,
                record.submit_attempts.unwrap_or(0)
            ));
        }
        let oldest = records
            .iter()
            .map(|r| r.submitted_at)
            .min()
            .unwrap_or_else(Utc::now);
        // Two days of margin: the cluster's clock and time zone are not ours.
        let since = (oldest - chrono::Duration::days(2))
            .format("%Y-%m-%dT%H:%M:%S")
            .to_string();
        let command = SETTLE
            .command([fence_wait.as_secs().max(1).to_string(), since])
            .stdin(list.into_bytes())
            .timeout(fence_wait + Duration::from_secs(90))
            .display_as(format!("settle {} submit(s)", records.len()));
        let parts = match self.inner.transport.run(&command).await {
            Ok(output) => round_trip::split(&output, 3),
            Err(error) => Err(error),
        };
        let parts = match parts {
            Ok(parts) => parts,
            Err(error) => {
                tracing::warn!(%error, "settle round trip failed; the records stay SUBMITTING");
                return records
                    .iter()
                    .map(|r| Settled {
                        verdict: Verdict::Unsettled {
                            seen: r.candidates.clone(),
                            why: format!(
                                "the outcome is unknown and the cluster could not be asked: {error}"
                            ),
                        },
                        secrets_removed: false,
                    })
                    .collect();
            }
        };
        let mut answers = read_answers(&names, &parts);
        let now = Utc::now();
        records
            .iter()
            .map(|record| {
                let answer = answers.remove(record.id.as_str()).unwrap_or_default();
                Settled {
                    verdict: verdict(record, &answer, now),
                    secrets_removed: answer.forgot,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::JobId;
    use crate::spec::JobSpec;
    use crate::storage::RemotePath;

    fn record(attempts: Option<u32>) -> JobRecord {
        let id = JobId::parse("job-abcdef").unwrap();
        let dir = RemotePath::parse("/r/job-abcdef").unwrap();
        let mut record = JobRecord::new(id, &JobSpec::new("job", "true"), dir).unwrap();
        record.submit_attempts = attempts;
        record
    }

    fn jobs(ids: &[&str]) -> Option<BTreeSet<BackendRef>> {
        Some(ids.iter().map(|id| BackendRef::new(*id)).collect())
    }

    fn answered(attempts: &[(u32, Attempt)], squeue: &[&str], sacct: &[&str]) -> Answers {
        Answers {
            attempts: attempts.iter().cloned().collect(),
            squeue: jobs(squeue),
            sacct: jobs(sacct),
            ..Answers::default()
        }
    }

    fn lost() -> Attempt {
        Attempt::Done {
            rc: 1,
            stdout: String::new(),
            stderr: "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation".into(),
        }
    }

    #[test]
    fn could_not_ask_is_never_no_job() {
        let record = record(Some(1));
        // The attempt's outcome is unknown; squeue and sacct both failed.
        let answers = Answers {
            attempts: [(1, lost())].into(),
            failures: vec!["squeue: Unable to contact slurm controller".into()],
            ..Answers::default()
        };
        assert!(matches!(
            verdict(&record, &answers, Utc::now()),
            Verdict::Unsettled { .. }
        ));
        // squeue answered (no job) but sacct did not: still unsettled.
        let answers = Answers {
            attempts: [(1, lost())].into(),
            squeue: jobs(&[]),
            failures: vec!["sacct: Problem talking to the database".into()],
            ..Answers::default()
        };
        match verdict(&record, &answers, Utc::now()) {
            Verdict::Unsettled { why, .. } => assert!(why.contains("Problem talking"), "{why}"),
            other => panic!("{other:?}"),
        }
        // A job squeue saw is kept while sacct has not answered.
        let answers = Answers {
            attempts: [(1, lost())].into(),
            squeue: jobs(&["41"]),
            ..Answers::default()
        };
        match verdict(&record, &answers, Utc::now()) {
            Verdict::Unsettled { seen, .. } => assert_eq!(seen, vec![BackendRef::new("41")]),
            other => panic!("{other:?}"),
        }
        // Both answered, nothing: no job.
        assert!(matches!(
            verdict(&record, &answered(&[(1, lost())], &[], &[]), Utc::now()),
            Verdict::NoJob(_)
        ));
        // Both answered, one job: adopt.
        assert!(matches!(
            verdict(&record, &answered(&[(1, lost())], &["41"], &["41"]), Utc::now()),
            Verdict::Adopt(job) if job.native_id == "41"
        ));
    }

    #[test]
    fn fenced_and_answered_attempts_need_no_scheduler_query() {
        let record = record(Some(2));
        let none = Answers {
            attempts: [(1, Attempt::Fenced), (2, Attempt::Fenced)].into(),
            ..Answers::default()
        };
        assert!(matches!(
            verdict(&record, &none, Utc::now()),
            Verdict::NoJob(_)
        ));
        let printed = Answers {
            attempts: [
                (1, Attempt::Fenced),
                (
                    2,
                    Attempt::Done {
                        rc: 0,
                        stdout: "Site banner\n555\n".into(),
                        stderr: String::new(),
                    },
                ),
            ]
            .into(),
            ..Answers::default()
        };
        assert!(matches!(
            verdict(&record, &printed, Utc::now()),
            Verdict::Adopt(job) if job.native_id == "555"
        ));
        let refused = Answers {
            attempts: [
                (1, Attempt::Fenced),
                (
                    2,
                    Attempt::Done {
                        rc: 1,
                        stdout: String::new(),
                        stderr: "sbatch: error: invalid partition specified: nope\n".into(),
                    },
                ),
            ]
            .into(),
            ..Answers::default()
        };
        assert!(matches!(
            verdict(&record, &refused, Utc::now()),
            Verdict::Refused(_)
        ));
        let running = Answers {
            attempts: [(1, Attempt::Fenced), (2, Attempt::Running { age: 3 })].into(),
            squeue: jobs(&[]),
            sacct: jobs(&[]),
            ..Answers::default()
        };
        assert!(matches!(
            verdict(&record, &running, Utc::now()),
            Verdict::Unsettled { .. }
        ));
    }

    #[test]
    fn several_jobs_are_kept_for_a_person() {
        let record = record(None);
        match verdict(&record, &answered(&[], &["5"], &["5", "6"]), Utc::now()) {
            Verdict::Several(all) => assert_eq!(all.len(), 2),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn without_accounting_squeue_alone_answers_only_for_a_young_record() {
        let record = record(Some(1));
        let answers = Answers {
            attempts: [(1, lost())].into(),
            squeue: jobs(&[]),
            accounting_disabled: true,
            ..Answers::default()
        };
        assert!(matches!(
            verdict(&record, &answers, Utc::now()),
            Verdict::NoJob(_)
        ));
        let later = Utc::now() + chrono::Duration::minutes(10);
        assert!(matches!(
            verdict(&record, &answers, later),
            Verdict::Unsettled { .. }
        ));
    }

    #[test]
    fn listings_count_only_the_exact_name_and_the_job_itself() {
        let listing =
            "12|job-abcdef\n13|job-abcdef-2\n14_1|job-abcdef\n15.batch|job-abcdef\n16|job-abcdef\n";
        let found = jobs_named(listing, "job-abcdef");
        assert_eq!(
            found.into_iter().map(|j| j.native_id).collect::<Vec<_>>(),
            ["12", "16"]
        );
    }

    #[test]
    fn a_settle_answer_reads_back() {
        let out = |status: i32, stdout: &str, stderr: &str| Output {
            status,
            stdout: stdout.as_bytes().to_vec(),
            stderr: stderr.as_bytes().to_vec(),
        };
        let encoded = hex::encode("77\n");
        let parts = vec![
            out(
                0,
                &format!(
                    "a 1 fenced\na 2 done 0 {encoded} -\nb 1 running 4\nc 1 fenced\nc forgot\n"
                ),
                "",
            ),
            out(0, "77|a\n", ""),
            out(
                1,
                "",
                "sacct: error: Problem talking to the database: Connection refused\n",
            ),
        ];
        let answers = read_answers(&["a".into(), "b".into(), "c".into()], &parts);
        assert_eq!(
            answers["a"].attempts[&2],
            Attempt::Done {
                rc: 0,
                stdout: "77\n".into(),
                stderr: String::new()
            }
        );
        assert_eq!(answers["b"].attempts[&1], Attempt::Running { age: 4 });
        assert!(answers["c"].forgot && !answers["a"].forgot);
        assert!(answers["a"].sacct.is_none() && answers["a"].squeue.is_some());
        assert!(answers["a"].failures[0].contains("Problem talking"));
    }
}

/// The submit and settle scripts run for real (local bash, fake sbatch, squeue and sacct).
#[cfg(test)]
mod script_tests {
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    use crate::slurm::scripts::{SubmitExit, SETTLE, SUBMIT};
    use crate::transport::{round_trip, Command, LocalTransport, Output, Transport};

    /// Fake scheduler tools in `bin`: sbatch prints `sbatch_out` (after `sbatch_delay`
    /// seconds) and counts its runs; squeue and sacct log their arguments.
    fn fake_tools(bin: &Path, sbatch_out: &str, sbatch_delay: u32) {
        let write = |name: &str, text: String| {
            std::fs::write(bin.join(name), text).unwrap();
            std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(0o755))
                .unwrap();
        };
        write(
            "sbatch",
            format!(
                "#!/bin/bash\nsleep {sbatch_delay}\necho run >> {dir}/sbatch.runs\nprintf '%s' '{sbatch_out}'\n",
                dir = bin.display()
            ),
        );
        for tool in ["squeue", "sacct"] {
            write(
                tool,
                format!(
                    "#!/bin/bash\necho \"$*\" >> {dir}/{tool}.args\n",
                    dir = bin.display()
                ),
            );
        }
    }

    async fn run(bin: &Path, command: Command) -> Output {
        let path = format!(
            "PATH={}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut local = Command::new("env")
            .arg(path)
            .arg(command.program())
            .args(command.get_args().iter().cloned());
        if let Some(stdin) = command.stdin_bytes() {
            local = local.stdin(stdin.to_vec());
        }
        LocalTransport::new().run(&local).await.unwrap()
    }

    fn submit(root: &Path, name: &str, attempt: u32) -> Command {
        let payload = super::super::submit::build_payload(
            name,
            &[
                (
                    format!("sbatch/job_{name}.sbatch"),
                    b"#!/bin/bash\ntrue\n".to_vec(),
                    0o700,
                ),
                (
                    format!("env/job_{name}.env"),
                    b"export TOKEN=canary-5ec2e7\n".to_vec(),
                    0o600,
                ),
            ],
        )
        .unwrap();
        SUBMIT
            .command([
                root.display().to_string(),
                name.to_string(),
                attempt.to_string(),
                "30".to_string(),
                String::new(),
            ])
            .stdin(payload)
    }

    fn settle(root: &Path, name: &str, attempts: u32) -> Command {
        SETTLE
            .command(["1".to_string(), "2024-01-01T00:00:00".to_string()])
            .stdin(format!("{}/{name}\t{name}\t{attempts}\n", root.display()).into_bytes())
    }

    #[tokio::test]
    async fn an_attempt_leaves_its_answer_and_a_fenced_attempt_never_runs_sbatch() {
        let tmp = tempfile::tempdir().unwrap();
        let (bin, root) = (tmp.path().join("bin"), tmp.path().join("results"));
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&root).unwrap();
        fake_tools(&bin, "4321\n", 0);
        let name = "job-aaaaaa";
        let out = run(&bin, submit(&root, name, 1)).await;
        assert_eq!(out.status, 0, "{}", out.stderr_text());
        assert_eq!(out.stdout_text(), "4321\n");
        // The settle reads the attempt's answer back; attempt 2 was never sent: fenced.
        let answer = run(&bin, settle(&root, name, 2)).await;
        let parts = round_trip::split(&answer, 3).unwrap();
        let fence = parts[0].stdout_text();
        assert!(
            fence.contains(&format!("{name} 1 done 0 {} -", hex::encode("4321\n"))),
            "{fence}"
        );
        assert!(fence.contains(&format!("{name} 2 fenced")), "{fence}");
        assert!(
            !fence.contains("forgot"),
            "attempt 1 ran: its job needs the secrets"
        );
        // A late upload of attempt 2 is refused before sbatch, and leaves no secret.
        let late = run(&bin, submit(&root, name, 2)).await;
        assert_eq!(
            SubmitExit::from_status(late.status),
            Some(SubmitExit::Fenced)
        );
        let runs = std::fs::read_to_string(bin.join("sbatch.runs")).unwrap();
        assert_eq!(runs.lines().count(), 1, "sbatch ran once");
        assert!(root.join(name).join(format!("env/job_{name}.env")).exists());
        // squeue and sacct were asked about the user's own jobs, by exact name.
        let user = String::from_utf8(
            std::process::Command::new("id")
                .arg("-un")
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        for tool in ["squeue", "sacct"] {
            let args = std::fs::read_to_string(bin.join(format!("{tool}.args"))).unwrap();
            assert!(
                args.contains(&format!("--user={}", user.trim())),
                "{tool}: {args}"
            );
            assert!(args.contains(&format!("--name={name}")), "{tool}: {args}");
        }
    }

    #[tokio::test]
    async fn a_record_whose_attempts_were_all_fenced_loses_its_secrets() {
        let tmp = tempfile::tempdir().unwrap();
        let (bin, root) = (tmp.path().join("bin"), tmp.path().join("results"));
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&root).unwrap();
        fake_tools(&bin, "1\n", 0);
        let name = "job-bbbbbb";
        // The settle comes first (the submitter died before its upload landed).
        let answer = run(&bin, settle(&root, name, 1)).await;
        let parts = round_trip::split(&answer, 3).unwrap();
        assert!(parts[0].stdout_text().contains(&format!("{name} 1 fenced")));
        assert!(parts[0].stdout_text().contains(&format!("{name} forgot")));
        // The upload lands late: refused, and the secrets it unpacked are removed.
        let late = run(&bin, submit(&root, name, 1)).await;
        assert_eq!(
            SubmitExit::from_status(late.status),
            Some(SubmitExit::Fenced)
        );
        assert!(!bin.join("sbatch.runs").exists(), "sbatch never ran");
        assert!(!root.join(name).join(format!("env/job_{name}.env")).exists());
    }

    #[tokio::test]
    async fn an_attempt_still_in_sbatch_is_reported_running() {
        let tmp = tempfile::tempdir().unwrap();
        let (bin, root) = (tmp.path().join("bin"), tmp.path().join("results"));
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&root).unwrap();
        fake_tools(&bin, "77\n", 4);
        let name = "job-cccccc";
        let (bin2, root2) = (bin.clone(), root.clone());
        let submitting = tokio::spawn(async move { run(&bin2, submit(&root2, name, 1)).await });
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        // The settle waits one second for it, then says it may still be running.
        let answer = run(&bin, settle(&root, name, 1)).await;
        let parts = round_trip::split(&answer, 3).unwrap();
        assert!(
            parts[0]
                .stdout_text()
                .contains(&format!("{name} 1 running")),
            "{}",
            parts[0].stdout_text()
        );
        assert_eq!(submitting.await.unwrap().stdout_text(), "77\n");
        let answer = run(&bin, settle(&root, name, 1)).await;
        let parts = round_trip::split(&answer, 3).unwrap();
        assert!(parts[0].stdout_text().contains(&format!("{name} 1 done 0")));
    }
}
