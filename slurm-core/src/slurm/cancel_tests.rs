//! Cancel against a mock cluster.

use super::testkit::*;
use crate::backend::Backend;
use crate::state::JobState;

#[tokio::test]
async fn cancel_settles_a_submitting_record_first() {
    // Issue 11, item 2: `cancel` used to say "never accepted" while the job ran.
    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(is_settle)
        .times(1)
        .returning(|c| {
            Ok(settle_answer(
                c,
                |_| Fence::Done(0, "808\n", ""),
                Some(&["808"]),
                Some(&["808"]),
            ))
        });
    let cancelled = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = std::sync::Arc::clone(&cancelled);
    remote
        .expect_run()
        .withf(|c| c.program() == "scancel")
        .times(1)
        .returning(move |c| {
            assert_eq!(c.get_args(), ["808"]);
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(output(0, "", ""))
        });
    let polled = std::sync::Arc::clone(&cancelled);
    remote.expect_run().withf(is_poll).returning(move |_| {
        Ok(if polled.load(std::sync::atomic::Ordering::SeqCst) {
            // Ended: accounting says how (a job squeue calls ended waits for it).
            output(
                0,
                "@@begin 0\nO 808|CANCELLED|None|n1|x\n@@end 0 0\n@@begin 1\nO 808|808|CANCELLED by 0|0:0|None|2026-11-30T10:00:00|2026-11-30T10:00:01|2026-11-30T10:00:02|n1|x\n@@end 1 0\n",
                "",
            )
        } else {
            poll_answer("808|PENDING|Priority|(null)|x")
        })
    });
    let backend = backend(remote);
    let record = left_submitting(&backend, "tocancel", 0);
    let ended = backend.cancel(&record.id).await.unwrap();
    assert_eq!(ended.state, JobState::Canceled);
    assert_eq!(ended.backend_ref.unwrap().native_id, "808");
}

/// A store that cannot tell whether a submit is in progress (no leases), as a custom
/// store may be: a status settles its `SUBMITTING` records only once they are old.
#[derive(Debug, Default)]
struct NoLeaseStore(crate::record::MemoryRecordStore);

impl crate::record::RecordStore for NoLeaseStore {
    fn open(&self, record: &crate::record::JobRecord) -> crate::Result<()> {
        self.0.open(record)
    }
    fn open_retry(
        &self,
        retry: &crate::record::JobRecord,
    ) -> crate::Result<crate::record::RetryClaim> {
        self.0.open_retry(retry)
    }
    fn get(&self, id: &crate::record::JobId) -> crate::Result<crate::record::JobRecord> {
        self.0.get(id)
    }
    fn mark(
        &self,
        id: &crate::record::JobId,
        mark: crate::record::Mark,
    ) -> crate::Result<crate::record::JobRecord> {
        self.0.mark(id, mark)
    }
    fn update(
        &self,
        id: &crate::record::JobId,
        change: &mut dyn FnMut(&mut crate::record::JobRecord) -> crate::Result<()>,
    ) -> crate::Result<crate::record::JobRecord> {
        self.0.update(id, change)
    }
    fn list(
        &self,
        filter: &crate::record::RecordFilter,
    ) -> crate::Result<Vec<crate::record::JobRecord>> {
        self.0.list(filter)
    }
}

/// Several jobs carrying the record's name, found by the submit's own settle, leave
/// the record SUBMITTING for a person, typed as such; `cancel` cancels every one. The
/// old code told the two writers' words apart ("carry its name" only), so a record the
/// submit itself left this way (a store without leases is not settled again while
/// young) could not be cancelled.
#[tokio::test]
async fn cancel_cancels_every_job_a_submits_own_settle_found() {
    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(is_submit)
        .times(1)
        .returning(|_| {
            Err(crate::Error::Timeout {
                what: "submit".into(),
                after: std::time::Duration::from_secs(1),
                may_have_run: true,
            })
        });
    remote
        .expect_run()
        .withf(is_settle)
        .times(1)
        .returning(|c| {
            Ok(settle_answer(
                c,
                |_| Fence::Done(124, "", ""),
                Some(&["5"]),
                Some(&["5", "6"]),
            ))
        });
    let cancelled = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = std::sync::Arc::clone(&cancelled);
    remote
        .expect_run()
        .withf(|c| c.program() == "scancel")
        .times(2)
        .returning(move |c| {
            seen.lock().unwrap().push(c.get_args().join(" "));
            Ok(output(0, "", ""))
        });
    let config = super::SlurmConfig::builder()
        .with_partition("gpu")
        .with_results_root("/shared/results")
        .with_state_dir("/nonexistent")
        .with_reconcile_wait(std::time::Duration::from_millis(10))
        .build()
        .unwrap();
    let backend = super::SlurmBackend::new(
        remote,
        FakeRenderer::names(),
        NoLeaseStore::default(),
        config,
    );
    seed_preflight(&backend, vec!["n1".into(), "n2".into()]);
    let error = backend
        .submit(
            &crate::spec::JobSpec::new("twice", "true"),
            crate::backend::SubmitOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), crate::ErrorKind::Ambiguous, "{error}");
    let record = &backend
        .records(&crate::record::RecordFilter::any())
        .await
        .unwrap()[0];
    assert_eq!(record.state, JobState::Submitting);
    assert_eq!(
        record.unsettled.as_ref().map(|u| u.kind),
        Some(crate::record::UnsettledKind::SeveralJobs)
    );
    let ended = backend.cancel(&record.id).await.unwrap();
    assert_eq!(ended.state, JobState::Canceled);
    assert_eq!(*cancelled.lock().unwrap(), ["5", "6"]);
}

#[tokio::test]
async fn a_cancel_the_cluster_could_not_take_yet_is_transient() {
    // Defect 13: `scancel: fatal: Could not get cluster information` (the controller
    // mid-restart) read as a refusal.
    use crate::record::{BackendRef, Mark, RecordStore, TransitionSource};
    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(|c| c.program() == "scancel")
        .returning(|_| {
            Ok(output(
                1,
                "",
                "scancel: fatal: Could not get cluster information\n",
            ))
        });
    let backend = backend(remote);
    let record = left_submitting(&backend, "busy", 0);
    backend
        .store()
        .mark(
            &record.id,
            Mark::new(JobState::Pending, TransitionSource::Agent).backend_ref(BackendRef::new("5")),
        )
        .unwrap();
    let error = backend.cancel(&record.id).await.unwrap_err();
    assert!(error.is_transient(), "{error}");
}

/// A fake cluster after a cancel: `shown(id)` is what squeue shows of job `id` right
/// after the scancel (CANCELLED, COMPLETED, COMPLETING, ...), `ended(id)` how a poll
/// then finds it (squeue and accounting agree). Answers the cancel's round trip (its
/// scancel and squeue parts) and polls; every command's label is kept (` (--me)` after
/// one that asks squeue for the user's own jobs).
fn cancel_cluster(
    remote: &mut MockRemote,
    shown: fn(&str) -> &'static str,
    ended: fn(&str) -> &'static str,
) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    let labels = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = std::sync::Arc::clone(&labels);
    remote.expect_run().returning(move |c| {
        // `squeue --me`: every job scancel named, and one of the user's not tracked.
        let me = c.get_args().iter().any(|a| a == "--me");
        let noted = if me { " (--me)" } else { "" };
        seen.lock().unwrap().push(format!("{}{noted}", c.label()));
        if is_poll(c) {
            // stdin: `0 J COUNT`, then the jobs.
            let stdin = String::from_utf8_lossy(c.stdin_bytes().unwrap()).to_string();
            let mut lines = stdin.lines();
            let count: usize = lines.next().unwrap().rsplit(' ').next().unwrap().parse().unwrap();
            let ids: Vec<&str> = lines.take(count).collect();
            let mut text = String::from("@@begin 0\n");
            for id in &ids {
                text.push_str(&format!("O {id}|{}|None|n1|x\n", ended(id)));
            }
            text.push_str("@@end 0 0\n@@begin 1\n");
            for id in &ids {
                text.push_str(&format!(
                    "O {id}|{id}|{}|0:0|None|2026-11-30T10:00:00|2026-11-30T10:00:01|2026-11-30T10:00:02|n1|x\n",
                    ended(id)
                ));
            }
            text.push_str("@@end 1 0\n");
            return Ok(output(0, &text, ""));
        }
        // A round trip: `round trip of N: scancel, ..., squeue, ...`.
        let label = c.label();
        let programs: Vec<&str> = label.split_once(": ").unwrap().1.split(", ").collect();
        let mut lists = c
            .get_args()
            .iter()
            .filter_map(|a| a.strip_prefix("--jobs="))
            .map(|list| list.split(',').map(str::to_string).collect::<Vec<_>>());
        let mut mine: Vec<String> = c
            .get_args()
            .iter()
            .filter(|a| !a.is_empty() && a.bytes().all(|b| b.is_ascii_digit()))
            .cloned()
            .collect();
        mine.push("99999".into());
        let mut text = String::new();
        for (i, program) in programs.iter().enumerate() {
            text.push_str(&format!("@@begin {i}\n"));
            if *program == "squeue" {
                let ids = if me { mine.clone() } else { lists.next().unwrap() };
                for id in ids {
                    text.push_str(&format!("O {id}|{}|None||x\n", shown(&id)));
                }
            } else {
                assert_eq!(*program, "scancel", "{label}");
            }
            text.push_str(&format!("@@end {i} 0\n"));
        }
        Ok(output(0, &text, ""))
    });
    labels
}

/// `count` records of pending SLURM jobs `first`, `first + 1`, ...
fn open_pending(backend: &TestBackend, count: usize, first: usize) -> Vec<crate::record::JobId> {
    (first..first + count)
        .map(|n| {
            let spec = crate::spec::JobSpec::new(format!("many{n}"), "true");
            open_accepted(backend.store(), &spec, &n.to_string(), JobState::Pending).id
        })
        .collect()
}

/// Issue 25, point 3: slurmctld sets a pending job CANCELLED within scancel's own RPC,
/// so the squeue that follows it in the same round trip confirms the cancel. The old
/// code sent scancel alone, then polled squeue and sacct until accounting too had the
/// end: two round trips at best, and a 500 ms sleep for each poll accounting lagged.
#[tokio::test]
async fn cancel_many_of_jobs_the_scheduler_shows_cancelled_costs_one_round_trip() {
    let mut remote = MockRemote::new();
    let labels = cancel_cluster(&mut remote, |_| "CANCELLED", |_| "CANCELLED");
    let backend = backend(remote);
    let ids = open_pending(&backend, 5, 700);
    let records = backend.cancel_many(&ids).await.unwrap();
    let labels = labels.lock().unwrap().clone();
    assert_eq!(labels, ["round trip of 2: scancel, squeue"], "{labels:?}");
    assert!(
        records.iter().all(|r| r.state == JobState::Canceled),
        "{records:?}"
    );
    assert!(records
        .iter()
        .all(|r| r.last_message().starts_with("CANCELLED (squeue")));
}

/// From MINE_FROM jobs the squeue after scancel lists the user's own jobs, as the poll
/// does; still one round trip, each record marked once.
#[tokio::test]
async fn cancel_many_of_many_jobs_reads_the_users_own_jobs_in_the_same_round_trip() {
    let mut remote = MockRemote::new();
    let labels = cancel_cluster(&mut remote, |_| "CANCELLED", |_| "CANCELLED");
    let backend = backend(remote);
    let count = super::poll::MINE_FROM + 6;
    let ids = open_pending(&backend, count, 1000);
    let records = backend.cancel_many(&ids).await.unwrap();
    let labels = labels.lock().unwrap().clone();
    assert_eq!(
        labels,
        ["round trip of 2: scancel, squeue (--me)"],
        "{labels:?}"
    );
    for (record, id) in records.iter().zip(&ids) {
        assert_eq!(&record.id, id);
        assert_eq!(record.state, JobState::Canceled);
        assert_eq!(record.history.len(), 3, "{record:?}");
    }
}

/// The squeue after scancel confirms only what it shows CANCELLED: a job that completed
/// before the cancel reached it is recorded COMPLETE, and a running job still completing
/// is polled until the scheduler says how it ended; neither is taken for cancelled.
#[tokio::test]
async fn cancel_many_polls_the_jobs_squeue_does_not_show_cancelled_and_records_what_they_were() {
    let mut remote = MockRemote::new();
    // 801 pending, cancelled; 802 completed before the cancel; 803 running, completing.
    let shown = |id: &str| match id {
        "801" => "CANCELLED",
        "802" => "COMPLETED",
        _ => "COMPLETING",
    };
    let ended = |id: &str| match id {
        "802" => "COMPLETED",
        _ => "CANCELLED",
    };
    let labels = cancel_cluster(&mut remote, shown, ended);
    let backend = backend(remote);
    let open = |name: &str, native: &str, state| {
        let spec = crate::spec::JobSpec::new(name, "true");
        open_accepted(backend.store(), &spec, native, state).id
    };
    let ids = [
        open("pending", "801", JobState::Pending),
        open("done", "802", JobState::Running),
        open("running", "803", JobState::Running),
    ];
    let records = backend.cancel_many(&ids).await.unwrap();
    // Only the two jobs squeue did not show CANCELLED are polled.
    let labels = labels.lock().unwrap().clone();
    assert_eq!(
        labels,
        ["round trip of 2: scancel, squeue", "poll 2 job(s)"],
        "{labels:?}"
    );
    let states: Vec<JobState> = records.iter().map(|r| r.state).collect();
    assert_eq!(
        states,
        [JobState::Canceled, JobState::Complete, JobState::Canceled]
    );
    assert!(records[0].last_message().starts_with("CANCELLED (squeue"));
    assert!(records[2].last_message().contains("(sacct)"), "{records:?}");
}
