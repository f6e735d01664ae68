//! What the scheduler's answers mean: merging rows, deciding, finishing with a follow-up.

use super::*;
use crate::slurm::parse::parse_sacct;

fn rows(text: &str) -> Vec<SacctRow> {
    parse_sacct(text).unwrap()
}

/// A tool's answer: `text` on stdout, exit status 0.
fn out(text: &str) -> Output {
    Output {
        status: 0,
        stdout: text.as_bytes().to_vec(),
        stderr: Vec::new(),
    }
}

/// A job cancelled while pending that squeue already shows CANCELLED (no nodes),
/// before accounting has its row, stays PENDING: it never ran. The conformance case
/// `cancel_a_pending_job` failed on this (its record read PENDING, RUNNING,
/// CANCELED), and its blocker, never cancelled, held the test bed for five minutes.
#[test]
fn a_job_ending_before_accounting_confirms_keeps_the_live_state_it_had() {
    let id: TaskKey = (SlurmJobId::new(9).unwrap(), None);
    let record = JobRecord::new(
        crate::record::JobId::parse("job-abcdef").unwrap(),
        &crate::spec::JobSpec::new("job", "true"),
        crate::storage::RemotePath::parse("/r/job-abcdef").unwrap(),
    )
    .unwrap();
    let decided = |current: JobState, squeue: &str| {
        let observed = merge(&[id], &out(squeue), &out(""))
            .unwrap()
            .observations
            .remove(&id);
        decide(&record, current, observed).mark.state
    };
    let cancelled_pending = "9|CANCELLED|None||job-abcdef\n";
    assert_eq!(
        decided(JobState::Pending, cancelled_pending),
        JobState::Pending
    );
    assert_eq!(
        decided(JobState::Submitting, cancelled_pending),
        JobState::Pending,
        "no nodes were given to it"
    );
    let completing = "9|COMPLETING|None|n1|job-abcdef\n";
    assert_eq!(decided(JobState::Pending, completing), JobState::Pending);
    assert_eq!(decided(JobState::Running, completing), JobState::Running);
    assert_eq!(decided(JobState::Submitting, completing), JobState::Running);
    assert_eq!(decided(JobState::Unknown, completing), JobState::Running);
    // Once accounting has the row, the end is told as it is.
    let settled = out(
        "9|9|CANCELLED by 0|0:0|None|2026-11-30T10:00:00|None|2026-11-30T10:00:02||job-abcdef\n",
    );
    let observed = merge(&[id], &out(cancelled_pending), &settled)
        .unwrap()
        .observations
        .remove(&id);
    assert_eq!(
        decide(&record, JobState::Pending, observed).mark.state,
        JobState::Canceled
    );
}

#[test]
fn a_failure_squeue_reports_waits_for_accounting_to_give_its_exit_code() {
    let id: TaskKey = (SlurmJobId::new(9).unwrap(), None);
    let out = |status: i32, text: &str| Output {
        status,
        stdout: text.as_bytes().to_vec(),
        stderr: Vec::new(),
    };
    let squeue = out(0, "9|FAILED|NonZeroExitCode|n1|job-f\n");
    // slurmdbd lags: its row still says RUNNING, with no exit code yet.
    let stale = out(
        0,
        "9|9|RUNNING|0:0|None|2026-11-30T10:00:00|2026-11-30T10:00:01|Unknown|n1|job-f\n",
    );
    let waiting = &merge(&[id], &squeue, &stale).unwrap().observations[&id];
    assert!(
        !map_state(&waiting.state).0.is_terminal(),
        "not terminal before accounting knows how it ended: {waiting:?}"
    );
    let settled = out(
            0,
            "9|9|FAILED|3:0|None|2026-11-30T10:00:00|2026-11-30T10:00:01|2026-11-30T10:00:02|n1|job-f\n",
        );
    let failed = &merge(&[id], &squeue, &settled).unwrap().observations[&id];
    assert_eq!(failed.state.base, SlurmBaseState::Failed);
    assert_eq!(failed.exit_code, Some(3));
    // Without accounting, squeue's word is all there is.
    let off = Output {
        status: 1,
        stdout: Vec::new(),
        stderr: b"sacct: error: Slurm accounting storage is disabled\n".to_vec(),
    };
    let alone = &merge(&[id], &squeue, &off).unwrap().observations[&id];
    assert_eq!(alone.state.base, SlurmBaseState::Failed);
}

#[test]
fn a_requeued_job_reads_as_its_newest_run_and_remembers_the_node_failure() {
    let sacct = "\
42|42|NODE_FAIL|0:0|None|2026-11-30T10:00:00|2026-11-30T10:00:01|2026-11-30T10:01:00|n2|job-a
42.batch|42.batch|CANCELLED|0:15||2026-11-30T10:00:01|2026-11-30T10:00:01|2026-11-30T10:01:00|n2|batch
42|42|PENDING|0:0|BeginTime|2026-11-30T10:01:01|Unknown|Unknown|None assigned|job-a
";
    let observed = observe_sacct(&rows(sacct), (SlurmJobId::new(42).unwrap(), None)).unwrap();
    assert_eq!(observed.state.base, SlurmBaseState::Pending);
    assert_eq!(observed.requeued_after.as_deref(), Some("NODE_FAIL"));
    assert!(
        observed.failed_step.is_none(),
        "steps of an earlier run do not count"
    );
    assert!(describe(&observed).contains("requeued by Slurm after NODE_FAIL (infra)"));
}

/// A job requeued after a node failure and cancelled while pending again, before
/// slurmdbd has recorded the cancel: accounting's newest row is still the failed run.
/// The poll waits for accounting rather than calling the job ERROR (the test bed's
/// `a_node_failure_is_infra_or_a_requeue` read Error on Slurm 26.05 in CI).
#[test]
fn a_requeued_job_cancelled_before_accounting_knows_is_not_its_earlier_failure() {
    let id: TaskKey = (SlurmJobId::new(9).unwrap(), None);
    let out = |text: &str| Output {
        status: 0,
        stdout: text.as_bytes().to_vec(),
        stderr: Vec::new(),
    };
    let squeue = out("9|CANCELLED|None||job-r\n");
    let stale = out(
        "9|9|NODE_FAIL|1:0|None|2026-11-30T10:00:00|2026-11-30T10:00:01|2026-11-30T10:00:09|n2|job-r\n",
    );
    let waiting = &merge(&[id], &squeue, &stale).unwrap().observations[&id];
    assert!(
        !map_state(&waiting.state).0.is_terminal(),
        "an earlier run's NODE_FAIL is not this end: {waiting:?}"
    );
    let settled =
        out("9|9|CANCELLED by 0|0:0|None|2026-11-30T10:00:00|None|2026-11-30T10:00:20||job-r\n");
    let done = &merge(&[id], &squeue, &settled).unwrap().observations[&id];
    assert_eq!(map_state(&done.state).0, JobState::Canceled);
    // A job that did fail on its node (no requeue) reads as such at once.
    let failed = out("9|NODE_FAIL|None|n2|job-r\n");
    let observed = &merge(&[id], &failed, &stale).unwrap().observations[&id];
    assert_eq!(map_state(&observed.state).0, JobState::Error);
}

#[test]
fn a_completed_job_with_a_cancelled_step_did_not_finish() {
    let sacct = "\
7|7|COMPLETED|0:0||2026-11-30T10:00:00|2026-11-30T10:00:01|2026-11-30T10:01:00|n1|job-b
7.batch|7.batch|COMPLETED|0:0||2026-11-30T10:00:01|2026-11-30T10:00:01|2026-11-30T10:01:00|n1|batch
7.extern|7.extern|CANCELLED|0:0||2026-11-30T10:00:01|2026-11-30T10:00:01|2026-11-30T10:01:00|n1|extern
7.0|7.0|CANCELLED|0:15||2026-11-30T10:00:02|2026-11-30T10:00:02|2026-11-30T10:01:00|n1|bash
";
    let observed = observe_sacct(&rows(sacct), (SlurmJobId::new(7).unwrap(), None)).unwrap();
    let (step, state) = observed.failed_step.unwrap();
    assert_eq!(step, "0");
    assert_eq!(state.base, SlurmBaseState::Cancelled);
}

#[test]
fn status_json_verdicts() {
    let out = |text: &str, status| Output {
        status,
        stdout: text.as_bytes().to_vec(),
        stderr: Vec::new(),
    };
    assert!(status_json_says_success(&out(
        r#"{"status": "SUCCESS"}"#,
        0
    )));
    assert!(status_json_says_success(&out(
        "{\"status\":\"RUNNING\"}\n{\"status\":\"completed\"}\n",
        0
    )));
    assert!(!status_json_says_success(&out(
        r#"{"status": "FAILURE"}"#,
        0
    )));
    assert!(!status_json_says_success(&out("", 1)));
    assert!(!status_json_says_success(&out("not json", 0)));
}

/// Issue 14, point 5: a command killed by its own `timeout` (exit 124) ends with a
/// message that says so, distinct from a crash.
#[test]
fn a_child_timeout_reads_as_such_and_a_crash_does_not() {
    let sacct = |code: i32| {
        rows(&format!(
                "9|9|FAILED|{code}:0|None|2026-11-30T10:00:00|2026-11-30T10:00:01|2026-11-30T10:01:00|n1|job-c\n"
            ))
    };
    let record = JobRecord::new(
        crate::record::JobId::parse("job-c").unwrap(),
        &crate::spec::JobSpec::new("job-c", "sleep 99"),
        crate::storage::RemotePath::parse("/r/job-c").unwrap(),
    )
    .unwrap();
    let timed_out = decide(
        &record,
        record.state,
        observe_sacct(&sacct(124), (SlurmJobId::new(9).unwrap(), None)),
    );
    let crashed = decide(
        &record,
        record.state,
        observe_sacct(&sacct(1), (SlurmJobId::new(9).unwrap(), None)),
    );
    let text = |d: &Decision| d.mark.message.clone().unwrap_or_default();
    assert!(
        text(&timed_out).contains("child timeout"),
        "{}",
        text(&timed_out)
    );
    assert!(!text(&crashed).contains("timeout"), "{}", text(&crashed));
    assert_eq!(timed_out.mark.err_class, Some(ErrorClass::Program));
    assert_eq!(timed_out.followup, Followup::None);
}

#[test]
fn a_status_json_that_cannot_be_read_is_no_verdict() {
    let record = crate::record::JobRecord::new(
        crate::record::JobId::parse("job-abcdef").unwrap(),
        &{
            let mut spec = crate::spec::JobSpec::new("job", "true");
            spec.completion_check = CompletionCheck::StatusJson;
            spec
        },
        crate::storage::RemotePath::parse("/r/job-abcdef").unwrap(),
    )
    .unwrap();
    let completed = Observation {
        state: SlurmState::from_base(SlurmBaseState::Completed),
        reason: None,
        exit_code: Some(0),
        nodes: None,
        source: "sacct",
        requeued_after: None,
        failed_step: None,
        components: Vec::new(),
        failed_node: None,
        unconfirmed: None,
        times: None,
        runs: Vec::new(),
    };
    let read = |status: i32, stdout: &str, stderr: &str| Output {
        status,
        stdout: stdout.as_bytes().to_vec(),
        stderr: stderr.as_bytes().to_vec(),
    };
    // A transient NFS error: not terminal, read again next poll.
    let mut decision = decide(&record, record.state, Some(completed.clone()));
    assert_eq!(decision.followup, Followup::StatusJson);
    apply_followup(
        &mut decision,
        &read(1, "", "cat: /r/job-abcdef/status.json: Stale file handle\n"),
    );
    assert_eq!(decision.mark.state, JobState::Running);
    assert!(!decision.mark.state.is_terminal());
    assert!(decision.mark.message.unwrap().contains("Stale file handle"));
    // Absent: the job did not report success.
    let mut decision = decide(&record, record.state, Some(completed.clone()));
    apply_followup(
        &mut decision,
        &read(
            1,
            "",
            "cat: /r/job-abcdef/status.json: No such file or directory\n",
        ),
    );
    assert_eq!(decision.mark.state, JobState::Error);
    // Present and successful.
    let mut decision = decide(&record, record.state, Some(completed));
    apply_followup(&mut decision, &read(0, r#"{"status": "SUCCESS"}"#, ""));
    assert_eq!(decision.mark.state, JobState::Complete);
}

#[test]
fn scheduler_failures_are_sorted() {
    let out = |stderr: &str| Output {
        status: 1,
        stdout: Vec::new(),
        stderr: stderr.as_bytes().to_vec(),
    };
    assert!(scheduler_failure(
        "squeue",
        &out("slurm_load_jobs error: Invalid job id specified")
    )
    .is_ok());
    let err = scheduler_failure(
        "squeue",
        &out("slurm_load_jobs error: Socket timed out on send/recv operation"),
    )
    .unwrap_err();
    assert!(err.is_transient());
    // sacct never fails a poll: it says why accounting could not be asked, if it could not.
    assert!(sacct_failure(&out("sacct: error: something odd")).is_some());
    assert!(sacct_failure(&out("sacct: error: Problem talking to the database")).is_some());
    assert!(sacct_failure(&out("sacct: error: Slurm accounting storage is disabled")).is_none());
}

/// Issue 21: a resumable record's decisions. A requeue (RUNNING, then PENDING) is a
/// continued segment; the script's budget and refused statuses, a held job and a
/// segment Slurm ended at the wall are told apart; a record without resume decides as
/// before.
#[test]
fn a_resumable_records_requeues_and_ends_are_decided_by_what_its_script_said() {
    let id: TaskKey = (SlurmJobId::new(9).unwrap(), None);
    let out = |text: &str| Output {
        status: 0,
        stdout: text.as_bytes().to_vec(),
        stderr: Vec::new(),
    };
    let record = |resume: bool, restarts: u32| {
        let mut spec = crate::spec::JobSpec::new("job", "true");
        if resume {
            spec.resume = Some(crate::spec::ResumeSpec::new(2));
        }
        let mut record = JobRecord::new(
            crate::record::JobId::parse("job-abcdef").unwrap(),
            &spec,
            crate::storage::RemotePath::parse("/r/job-abcdef").unwrap(),
        )
        .unwrap();
        record.restarts = restarts;
        record
    };
    let live = |record: &JobRecord, squeue: &str| {
        let observed = merge(&[id], &out(squeue), &out(""))
            .unwrap()
            .observations
            .remove(&id);
        decide(record, JobState::Running, observed)
    };
    let ended = |record: &JobRecord, state: &str, exit: &str| {
        let sacct = out(&format!(
            "9|9|{state}|{exit}|None|2026-11-30T10:00:00|2026-11-30T10:00:01|2026-11-30T10:01:00|n1|job-abcdef\n"
        ));
        let observed = merge(&[id], &out(""), &sacct)
            .unwrap()
            .observations
            .remove(&id);
        decide(record, JobState::Running, observed)
    };
    let requeued = "9|PENDING|BeginTime||job-abcdef\n";
    let d = live(&record(true, 0), requeued);
    assert_eq!(
        (d.mark.state, d.followup),
        (JobState::Pending, Followup::Continue)
    );
    let d = live(&record(false, 0), requeued);
    assert_eq!(
        (d.mark.state, d.followup),
        (JobState::Pending, Followup::None)
    );
    let held = "9|PENDING|job requeued in held state||job-abcdef\n";
    let d = live(&record(true, 0), held);
    assert_eq!(d.followup, Followup::ContinueFresh);
    let d = ended(&record(true, 1), "FAILED", "85:0");
    assert_eq!(
        (d.mark.state, d.mark.err_class),
        (JobState::Error, Some(ErrorClass::Program))
    );
    let message = d.mark.message.clone().unwrap_or_default();
    assert!(
        message.contains("resume budget is used up") && message.contains("max_restarts: 2"),
        "{message}"
    );
    let d = ended(&record(true, 1), "FAILED", "86:0");
    assert_eq!(
        (d.mark.state, d.followup),
        (JobState::Pending, Followup::ContinueFresh)
    );
    let d = ended(&record(true, 1), "TIMEOUT", "0:15");
    assert_eq!(
        (d.mark.state, d.followup),
        (JobState::Pending, Followup::ContinueFresh)
    );
    // At the budget, a fresh job is not submitted: the run ends naming it.
    let d = ended(&record(true, 2), "TIMEOUT", "0:15");
    assert_eq!(
        (d.mark.state, d.followup),
        (JobState::Error, Followup::None)
    );
    // The same statuses mean nothing special without a resume block.
    let d = ended(&record(false, 0), "FAILED", "85:0");
    assert_eq!(
        (d.mark.state, d.followup),
        (JobState::Error, Followup::Classify)
    );
    let d = ended(&record(false, 0), "TIMEOUT", "0:15");
    assert_eq!(
        (d.mark.state, d.mark.err_class),
        (JobState::Error, Some(ErrorClass::Program))
    );
    // A resumable run the cluster preempted by cancelling it (PreemptMode=CANCEL) is
    // continued on its record, from its checkpoint, within the budget.
    let preempted = record(true, 0);
    let mut d = ended(&preempted, "PREEMPTED", "0:15");
    assert_eq!(
        (d.mark.state, d.followup),
        (JobState::Pending, Followup::ContinueFresh)
    );
    // The fresh job's answer: the segment ended by the preemption, the record follows it.
    super::super::resume::apply_continue_fresh(&preempted, &mut d.mark, &out("\n--\n10\n"));
    let message = d.mark.message.clone().unwrap_or_default();
    assert!(
        message.starts_with("continued as the fresh job 10 (the cluster cancelled job")
            && message.contains("at a preemption): segment 2"),
        "{message}"
    );
    assert_eq!(
        d.mark.backend_ref.as_ref().map(|r| r.native_id.as_str()),
        Some("10")
    );
    assert_eq!(
        d.mark.segment.as_ref().and_then(|n| n.end),
        Some(crate::record::SegmentEnd::Preemption)
    );
    let d = ended(&record(true, 2), "PREEMPTED", "0:15");
    assert_eq!(
        (d.mark.state, d.followup),
        (JobState::Error, Followup::None)
    );
    // Issue 21's defect: PREEMPTED was CANCELED; a preempted job the cluster cancels
    // is an infra failure a retry policy continues (as a linked record).
    let d = ended(&record(false, 0), "PREEMPTED", "0:15");
    assert_eq!(
        (d.mark.state, d.mark.err_class),
        (JobState::Error, Some(ErrorClass::Infra))
    );
}
/// A two-node job one of whose nodes went down, as 24.11 and 26.05 print it: sacct's
/// `FailedNode` names the node; the decision pins the failure on it, so a retry avoids
/// that node only. Read without the field (22.05 has none), the retry must avoid both.
#[test]
fn a_node_failure_is_pinned_on_the_node_sacct_names_from_23_02() {
    let spec = crate::spec::JobSpec::new("two", "true");
    let mut record = JobRecord::new(
        crate::record::JobId::parse("two-abcdef").unwrap(),
        &spec,
        crate::storage::RemotePath::parse("/r/two-abcdef").unwrap(),
    )
    .unwrap();
    record.state = JobState::Running;
    record.nodes = vec!["n1".into(), "n2".into()];
    for (release, sacct) in [
        (
            "24.11",
            include_str!("../../../../tests/fixtures/slurm-24.11/sacct-node-fail-with-failed-node"),
        ),
        (
            "26.05",
            include_str!("../../../../tests/fixtures/slurm-26.05/sacct-node-fail-with-failed-node"),
        ),
    ] {
        // The fixture's job ran on n2 alone; here it held both nodes.
        let sacct = sacct.replacen("|n2|fixture-node-fail|", "|n[1-2]|fixture-node-fail|", 1);
        let job = sacct.split('|').next().unwrap().to_string();
        let id: TaskKey = (SlurmJobId::new(job.parse().unwrap()).unwrap(), None);
        let observed = merge_reading(&[id], &out(""), &out(&sacct), true, false)
            .unwrap()
            .observations
            .remove(&id);
        assert_eq!(
            observed.as_ref().and_then(|o| o.failed_node.as_deref()),
            Some("n2"),
            "{release}"
        );
        let decision = decide(&record, JobState::Running, observed);
        assert_eq!(decision.mark.state, JobState::Error, "{release}");
        assert!(decision.mark.node_fault, "{release}");
        assert_eq!(
            decision.mark.failed_nodes,
            vec!["n2".to_string()],
            "{release}"
        );
        let mut ended = record.clone();
        ended.apply_mark(decision.mark, None).unwrap();
        assert_eq!(ended.nodes, vec!["n1".to_string(), "n2".to_string()]);
        assert_eq!(
            ended.nodes_to_exclude(),
            vec!["n2".to_string()],
            "{release}"
        );
    }
    // 22.05: no FailedNode; the failure is the whole job's, so both nodes are avoided.
    let sacct = include_str!("../../../../tests/fixtures/slurm-22.05/sacct-node-fail").replacen(
        "|n2|fixture-node-fail",
        "|n[1-2]|fixture-node-fail",
        1,
    );
    let job = sacct.split('|').next().unwrap().to_string();
    let id_22: TaskKey = (SlurmJobId::new(job.parse().unwrap()).unwrap(), None);
    let observed = merge(&[id_22], &out(""), &out(&sacct))
        .unwrap()
        .observations
        .remove(&id_22);
    let decision = decide(&record, JobState::Running, observed);
    assert!(decision.mark.failed_nodes.is_empty());
    let mut ended = record.clone();
    ended.apply_mark(decision.mark, None).unwrap();
    assert_eq!(
        ended.nodes_to_exclude(),
        vec!["n1".to_string(), "n2".to_string()]
    );
}

/// What a waiting job's reason means reaches its record, where the name does not say
/// it: a hold (from each release's squeue), a limit, a job that cannot start.
#[test]
fn a_waiting_jobs_message_says_what_its_reason_means() {
    let record = JobRecord::new(
        crate::record::JobId::parse("held-abcdef").unwrap(),
        &crate::spec::JobSpec::new("held", "true"),
        crate::storage::RemotePath::parse("/r/held-abcdef").unwrap(),
    )
    .unwrap();
    let message = |squeue: &str| {
        let job = squeue.split(['|', '_']).next().unwrap().to_string();
        let id: TaskKey = (SlurmJobId::new(job.parse().unwrap()).unwrap(), None);
        let observed = merge(&[id], &out(squeue), &out(""))
            .unwrap()
            .observations
            .remove(&id);
        let decision = decide(&record, JobState::Submitting, observed);
        assert_eq!(decision.mark.state, JobState::Pending, "{squeue}");
        decision.mark.message.unwrap()
    };
    for squeue in [
        include_str!("../../../../tests/fixtures/slurm-22.05/squeue-held"),
        include_str!("../../../../tests/fixtures/slurm-24.11/squeue-held"),
        include_str!("../../../../tests/fixtures/slurm-26.05/squeue-held"),
    ] {
        let text = message(squeue);
        assert!(text.contains("reason JobHeldUser (held:"), "{text}");
        assert!(text.contains("scontrol release"), "{text}");
    }
    let limit = message("40|PENDING|QOSGrpJobsLimit||held-abcdef\n");
    assert!(
        limit.contains("a limit of its account, QOS or user"),
        "{limit}"
    );
    let never = message("41|PENDING|QOSMaxWallDurationPerJobLimit||held-abcdef\n");
    assert!(never.contains("cannot start as submitted"), "{never}");
    let queued = message("42|PENDING|Resources||held-abcdef\n");
    assert!(queued.ends_with("reason Resources"), "{queued}");
}
