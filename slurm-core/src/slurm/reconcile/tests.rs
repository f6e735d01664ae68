//! The verdict and the reading of a settle's answers, without a cluster.

use std::collections::BTreeSet;

use chrono::Utc;

use super::answers::{jobs_named, read_answers, Answers, Attempt};
use super::verdict::{verdict, Verdict};
use crate::record::JobId;
use crate::record::{BackendRef, JobRecord};
use crate::spec::JobSpec;
use crate::storage::RemotePath;
use crate::transport::Output;

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

/// Both tools answered (accounting current, MinJobAge the default 300 s).
fn answered(attempts: &[(u32, Attempt)], squeue: &[&str], sacct: &[&str]) -> Answers {
    Answers {
        attempts: attempts.iter().cloned().collect(),
        squeue: jobs(squeue),
        sacct: jobs(sacct),
        accounting_lag: Some(false),
        min_job_age: Some(300),
        ..Answers::default()
    }
}

fn lost() -> Attempt {
    Attempt::Done {
        rc: 1,
        stdout: String::new(),
        stderr:
            "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"
                .into(),
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
        min_job_age: Some(300),
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
fn listings_count_only_the_exact_name_and_each_job_once() {
    let listing =
        "12|job-abcdef\n13|job-abcdef-2\n15.batch|job-abcdef\n16|job-abcdef\n16.0|job-abcdef\n";
    let found = jobs_named(listing, "job-abcdef");
    assert_eq!(
        found.into_iter().map(|j| j.native_id).collect::<Vec<_>>(),
        ["12", "16"]
    );
}

/// A multi-role job is a heterogeneous job: squeue and sacct list its components
/// (`17+0`, `17+1`), and the job is its leader's id. Read as no job, a lost answer
/// would be settled as "never submitted" and the job sent a second time.
#[test]
fn a_heterogeneous_job_is_found_by_its_leader() {
    let listing = "17+0|job-abcdef\n17+1|job-abcdef\n17+1.0|job-abcdef\n18+1|job-other\n";
    let found = jobs_named(listing, "job-abcdef");
    assert_eq!(
        found.into_iter().map(|j| j.native_id).collect::<Vec<_>>(),
        ["17"]
    );
}

#[test]
fn array_tasks_and_pending_ranges_count_as_their_array() {
    // Defect 3: squeue lists a started array as `123_4` and `123_[5-9]`, sacct (by
    // JobID) the same way; both are array 123, one job. Dropping them read "no job"
    // (a second array submitted) or, with JobIDRaw, "several jobs".
    let listing = "123_4|job-abcdef\n123_[5-9%2]|job-abcdef\n123_0|job-abcdef\n";
    let found = jobs_named(listing, "job-abcdef");
    assert_eq!(
        found.into_iter().map(|j| j.native_id).collect::<Vec<_>>(),
        ["123"]
    );
    let record = record(Some(1));
    let answers = Answers {
        attempts: [(1, lost())].into(),
        squeue: Some(jobs_named(listing, "job-abcdef")),
        sacct: Some(jobs_named(
            "123_4|job-abcdef\n123_[5-9%2]|job-abcdef\n",
            "job-abcdef",
        )),
        accounting_lag: Some(false),
        min_job_age: Some(300),
        ..Answers::default()
    };
    assert!(matches!(
        verdict(&record, &answers, Utc::now()),
        Verdict::Adopt(job) if job.native_id == "123"
    ));
}

#[test]
fn an_attempt_older_than_sbatchs_bound_is_dead_and_the_listings_decide() {
    // Defect 1: a submit killed between its fence and sbatch's answer left the attempt
    // "running" forever, and every settle stopped there. sbatch runs under `timeout`:
    // past that bound (and a margin) the attempt is dead and squeue and sacct decide.
    let record = record(Some(1));
    let dead = Attempt::Running { age: 3_600 };
    assert!(matches!(
        verdict(&record, &answered(&[(1, dead.clone())], &["41"], &["41"]), Utc::now()),
        Verdict::Adopt(job) if job.native_id == "41"
    ));
    assert!(matches!(
        verdict(
            &record,
            &answered(&[(1, dead.clone())], &[], &[]),
            Utc::now()
        ),
        Verdict::NoJob(_)
    ));
    // Dead, but the scheduler cannot be asked: still unsettled, never "no job".
    let unanswered = Answers {
        attempts: [(1, dead)].into(),
        squeue: jobs(&[]),
        failures: vec!["sacct: Problem talking to the database".into()],
        ..Answers::default()
    };
    assert!(matches!(
        verdict(&record, &unanswered, Utc::now()),
        Verdict::Unsettled { .. }
    ));
    // Within sbatch's bound it may still create a job: unsettled.
    let young = Attempt::Running { age: 30 };
    assert!(matches!(
        verdict(&record, &answered(&[(1, young)], &[], &[]), Utc::now()),
        Verdict::Unsettled { .. }
    ));
}

#[test]
fn the_no_accounting_window_is_the_clusters_min_job_age() {
    // Defect 8: a constant 240 s window assumed MinJobAge >= 300. With MinJobAge=30, a
    // job that ran and was purged 60 s after its submit reads "no job" from squeue.
    let mut record = record(Some(1));
    record.submitted_at -= chrono::Duration::seconds(60);
    let disabled = |min_job_age| Answers {
        attempts: [(1, lost())].into(),
        squeue: jobs(&[]),
        accounting_disabled: true,
        min_job_age,
        ..Answers::default()
    };
    assert!(matches!(
        verdict(&record, &disabled(Some(30)), Utc::now()),
        Verdict::Unsettled { .. }
    ));
    assert!(matches!(
        verdict(&record, &disabled(Some(300)), Utc::now()),
        Verdict::NoJob(_)
    ));
    // MinJobAge=0: slurmctld never purges, squeue alone always answers.
    assert!(matches!(
        verdict(
            &record,
            &disabled(Some(0)),
            Utc::now() + chrono::Duration::days(3)
        ),
        Verdict::NoJob(_)
    ));
    // Unknown MinJobAge: squeue alone never says "no job".
    assert!(matches!(
        verdict(&record, &disabled(None), Utc::now()),
        Verdict::Unsettled { .. }
    ));
}

#[test]
fn an_empty_answer_from_a_lagging_sacct_counts_only_inside_the_window() {
    // Defect 8: slurmdbd catching up (slurmctld's DBD agent queue not empty) answers
    // without the newest jobs; its silence is no "no job" once squeue may have
    // forgotten the job.
    let mut record = record(Some(1));
    record.submitted_at -= chrono::Duration::seconds(600);
    let lagging = |lag| Answers {
        attempts: [(1, lost())].into(),
        squeue: jobs(&[]),
        sacct: jobs(&[]),
        accounting_lag: lag,
        min_job_age: Some(300),
        ..Answers::default()
    };
    assert!(matches!(
        verdict(&record, &lagging(Some(true)), Utc::now()),
        Verdict::Unsettled { why, .. } if why.contains("lag")
    ));
    assert!(matches!(
        verdict(&record, &lagging(None), Utc::now()),
        Verdict::Unsettled { .. }
    ));
    assert!(matches!(
        verdict(&record, &lagging(Some(false)), Utc::now()),
        Verdict::NoJob(_)
    ));
    // Young enough that squeue still lists any job it had: squeue decides.
    let mut young = record.clone();
    young.submitted_at = Utc::now();
    assert!(matches!(
        verdict(&young, &lagging(Some(true)), Utc::now()),
        Verdict::NoJob(_)
    ));
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
            &format!("a 1 fenced\na 2 done 0 {encoded} -\nb 1 running 4\nc 1 fenced\nc forgot\n"),
            "",
        ),
        out(0, "77|a\n", ""),
        out(
            1,
            "",
            "sacct: error: Problem talking to the database: Connection refused\n",
        ),
        out(0, "min_job_age 30\ndbd_agent_queue 2\n", ""),
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
    assert_eq!(answers["b"].min_job_age, Some(30));
    assert_eq!(answers["c"].accounting_lag, Some(true));
}
