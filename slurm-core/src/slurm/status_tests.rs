//! The status step against a mock cluster: submits a dead submitter left settled first,
//! the secrets of jobs that ended removed in the same round trips.

use super::testkit::*;
use crate::backend::{Backend, SubmitOptions};
use crate::record::{BackendRef, RecordStore};
use crate::spec::JobSpec;
use crate::state::JobState;

#[tokio::test]
async fn status_adopts_the_job_of_a_record_its_dead_submitter_left_submitting() {
    // Issue 11, item 2: the client died after sbatch accepted the job and before the
    // record was marked. `status` settles it: the attempt's answer names the job.
    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(is_settle)
        .times(1)
        .returning(|c| {
            Ok(settle_answer(
                c,
                |_| Fence::Done(0, "4242\n", ""),
                Some(&["4242"]),
                Some(&["4242"]),
            ))
        });
    remote
        .expect_run()
        .withf(is_poll)
        .times(1)
        .returning(|_| Ok(poll_answer("4242|RUNNING|None|n1|x")));
    let backend = backend(remote);
    let record = left_submitting(&backend, "orphan", 60);
    let status = backend.status(&record.id).await.unwrap();
    assert_eq!(status.state(), JobState::Running, "adopted, then polled");
    assert_eq!(status.native_id(), Some("4242"));
}

#[tokio::test]
async fn status_ends_a_record_whose_submit_never_reached_the_scheduler() {
    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(is_settle)
        .times(1)
        .returning(|c| Ok(settle_answer(c, |_| Fence::Fenced, Some(&[]), Some(&[]))));
    let backend = backend(remote);
    let record = left_submitting(&backend, "never", 60);
    let status = backend.status(&record.id).await.unwrap();
    assert_eq!(status.state(), JobState::NotSubmitted);
    assert!(status.state().is_terminal());
    // Terminal: the next status asks nothing (the mock would refuse a second settle).
    assert_eq!(
        backend.status(&record.id).await.unwrap().state(),
        JobState::NotSubmitted
    );
}

#[tokio::test]
async fn a_record_being_submitted_or_just_opened_is_not_settled() {
    let remote = MockRemote::new(); // any command would panic
    let backend = backend(remote);
    // Just opened: left alone for a few seconds.
    let young = left_submitting(&backend, "young", 0);
    assert_eq!(
        backend.status(&young.id).await.unwrap().state(),
        JobState::Submitting
    );
    // Old, but its submitter still holds the lease: left alone.
    let busy = left_submitting(&backend, "busy", 60);
    let _lease = backend.store().submit_lease(&busy.id).unwrap();
    assert_eq!(
        backend.status(&busy.id).await.unwrap().state(),
        JobState::Submitting
    );
}

#[tokio::test]
async fn an_unsettled_record_stays_submitting_with_what_was_seen() {
    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(is_settle)
        .times(1)
        .returning(|c| {
            Ok(settle_answer(
                c,
                |_| Fence::Done(124, "", ""),
                Some(&["77"]),
                None,
            ))
        });
    let backend = backend(remote);
    let record = left_submitting(&backend, "dbdown", 60);
    let status = backend.status(&record.id).await.unwrap();
    assert_eq!(status.state(), JobState::Submitting);
    assert_eq!(status.record.candidates, vec![BackendRef::new("77")]);
    assert!(status
        .record
        .unsettled
        .as_ref()
        .unwrap()
        .why
        .contains("Problem talking to the database"));
}

#[tokio::test]
async fn a_job_that_ends_has_its_secrets_removed_and_its_logs_redacted_by_declared_name() {
    // Issue 11, item 8: the sidecar goes when the record ends (here: a cancel while
    // pending, seen by a poll), and logs hide the values of the names the spec declares.
    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(is_submit)
        .times(1)
        .returning(|_| Ok(output(0, "900\n", "")));
    remote
        .expect_run()
        .withf(is_poll)
        .returning(|_| {
            Ok(output(
                0,
                "@@begin 0\n@@end 0 0\n@@begin 1\nO 900|900|CANCELLED by 1000|0:0|None|2024-05-01T10:00:00|Unknown|2024-05-01T10:00:09|None assigned|x\n@@end 1 0\n",
                "",
            ))
        });
    let forgets = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&forgets);
    remote.expect_run().withf(is_forget).returning(move |c| {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(forget_answer(c))
    });
    let backend = backend(remote);
    let mut spec = JobSpec::new("secretive", "true");
    spec.secrets = vec!["WANDB_KEY".into(), "DB_PASS".into()];
    let options = SubmitOptions {
        secret_values: Some(
            [
                ("WANDB_KEY".to_string(), "wandb-0123456789".to_string()),
                ("DB_PASS".to_string(), "hunter2-but-longer".to_string()),
            ]
            .into(),
        ),
        ..SubmitOptions::default()
    };
    let record = backend.submit(&spec, options).await.unwrap();
    assert!(record.secrets_staged);
    let status = backend.status(&record.id).await.unwrap();
    assert_eq!(status.state(), JobState::Canceled);
    assert!(!status.record.secrets_staged, "removal confirmed");
    assert_eq!(forgets.load(std::sync::atomic::Ordering::SeqCst), 1);
    // A terminal record with nothing staged asks nothing more.
    backend.status(&record.id).await.unwrap();
    assert_eq!(forgets.load(std::sync::atomic::Ordering::SeqCst), 1);

    let redactor = backend.context().secrets().redactor_for(&status.record);
    assert_eq!(
        redactor.redact("key=wandb-0123456789 pass=hunter2-but-longer"),
        "key=[REDACTED] pass=[REDACTED]"
    );
    // A viewer in another process: the values come from its environment, by the
    // names the record keeps (never the values).
    let other = backend_without_memory();
    std::env::set_var("SLURM_RUN_TEST_DECLARED_NAME", "declared-secret-value");
    let mut declared = status.record().clone();
    declared.secret_names = vec!["SLURM_RUN_TEST_DECLARED_NAME".into()];
    assert_eq!(
        other
            .context()
            .secrets()
            .redactor_for(&declared)
            .redact("v=declared-secret-value"),
        "v=[REDACTED]"
    );
    std::env::remove_var("SLURM_RUN_TEST_DECLARED_NAME");
}

fn backend_without_memory() -> TestBackend {
    backend(MockRemote::new())
}

/// A record the scheduler accepted as `native`, in `state`.
fn accepted(
    backend: &TestBackend,
    name: &str,
    native: &str,
    state: JobState,
) -> crate::record::JobRecord {
    open_accepted(backend.store(), &JobSpec::new(name, "true"), native, state)
}

#[tokio::test]
async fn one_unreadable_sacct_row_leaves_that_job_as_it_was_and_settles_the_others() {
    // Defect 14: a sacct row the parser refuses (here an empty state) failed the poll of
    // every job, and ended a watch.
    let mut remote = MockRemote::new();
    remote.expect_run().withf(is_poll).returning(|_| {
        Ok(output(
            0,
            "@@begin 0\n@@end 0 0\n@@begin 1\n\
             O 71|71|COMPLETED|0:0|None|2026-11-30T10:00:00|2026-11-30T10:00:01|2026-11-30T10:00:02|n1|a\n\
             O 72|72||0:0|None|2026-11-30T10:00:00|2026-11-30T10:00:01|2026-11-30T10:00:02|n1|b\n\
             @@end 1 0\n",
            "",
        ))
    });
    let backend = backend(remote);
    let done = accepted(&backend, "done", "71", JobState::Running);
    let odd = accepted(&backend, "odd", "72", JobState::Running);
    let statuses = backend
        .status_many(&[done.id.clone(), odd.id.clone()])
        .await
        .unwrap();
    assert_eq!(statuses[0].state(), JobState::Complete);
    assert_eq!(statuses[1].state(), JobState::Running, "kept as it was");
    let note = statuses[1]
        .native()
        .and_then(|n| n.reason.clone())
        .unwrap_or_default();
    assert!(note.contains("could not be read"), "{note}");
}

#[tokio::test]
async fn with_slurmdbd_down_an_ended_job_is_settled_from_what_slurmctld_still_knows() {
    // Defect 19: sacct's "Problem talking to the database" failed the whole poll before
    // scontrol was asked, so `status` of an ended job failed for the whole outage.
    let mut remote = MockRemote::new();
    remote.expect_run().withf(is_poll).returning(|_| {
        Ok(output(
            0,
            "@@begin 0\nO 81|COMPLETED|None|n1|a\n@@end 0 0\n@@begin 1\n\
             E sacct: error: Problem talking to the database: Connection refused\n@@end 1 1\n",
            "",
        ))
    });
    remote
        .expect_run()
        .withf(|c| c.label().starts_with("round trip of") && c.get_args().iter().any(|a| a == "scontrol"))
        .returning(|_| {
            Ok(output(
                0,
                "@@begin 0\nO JobId=81 JobName=a JobState=COMPLETED Reason=None ExitCode=0:0 NodeList=n1\n@@end 0 0\n",
                "",
            ))
        });
    let backend = backend(remote);
    let record = accepted(&backend, "ended", "81", JobState::Running);
    let status = backend.status(&record.id).await.unwrap();
    assert_eq!(status.state(), JobState::Complete);
    let message = status.record().last_message();
    assert!(message.contains("accounting"), "{message}");
    assert_eq!(status.native().and_then(|n| n.exit_code), Some(0));
}

#[tokio::test]
async fn a_watch_reports_each_poll_that_could_not_ask_and_goes_on() {
    // Defect 19: while the scheduler could not be asked a watch backed off in silence
    // (nothing on a terminal even at RUST_LOG=warn); now it reports the outage and its
    // progress, then the job's end.
    let mut remote = MockRemote::new();
    let polls = std::sync::Arc::new(std::sync::Mutex::new(0u32));
    let count = std::sync::Arc::clone(&polls);
    remote.expect_run().withf(is_poll).returning(move |_| {
        let mut n = count.lock().unwrap();
        *n += 1;
        Ok(if *n <= 2 {
            output(
                0,
                "@@begin 0\nE squeue: error: Unable to contact slurm controller (connect failure)\n@@end 0 1\n@@begin 1\n@@end 1 0\n",
                "",
            )
        } else {
            output(
                0,
                "@@begin 0\n@@end 0 0\n@@begin 1\nO 91|91|COMPLETED|0:0|None|2026-11-30T10:00:00|2026-11-30T10:00:01|2026-11-30T10:00:02|n1|a\n@@end 1 0\n",
                "",
            )
        })
    });
    let backend = backend(remote);
    let record = accepted(&backend, "watched", "91", JobState::Running);
    let options = crate::backend::WatchOptions {
        interval: std::time::Duration::from_millis(5),
        max_backoff: std::time::Duration::from_millis(20),
        ..Default::default()
    };
    let events: Vec<crate::backend::WatchEvent> = futures::StreamExt::collect::<Vec<_>>(
        backend.watch(std::slice::from_ref(&record.id), options),
    )
    .await
    .into_iter()
    .map(|e| e.unwrap())
    .collect();
    let reports: Vec<&crate::backend::WatchEvent> = events
        .iter()
        .filter(|e| {
            !matches!(
                e,
                crate::backend::WatchEvent::Transition { .. }
                    | crate::backend::WatchEvent::Retried { .. }
            )
        })
        .collect();
    assert_eq!(reports.len(), 2, "{events:?}");
    assert!(
        matches!(
            reports[1],
            crate::backend::WatchEvent::Unanswered { failures: 2, reason, .. } if reason.contains("Unable to contact")
        ),
        "{reports:?}"
    );
    assert!(matches!(
        events.last(),
        Some(crate::backend::WatchEvent::Transition { status, .. }) if status.state() == JobState::Complete
    ));
}

/// A record store that counts its listings (each reads every record).
#[derive(Debug, Default)]
struct CountingStore {
    inner: crate::record::MemoryRecordStore,
    listings: std::sync::atomic::AtomicUsize,
}

impl crate::record::RecordStore for CountingStore {
    fn open(&self, record: &crate::record::JobRecord) -> crate::Result<()> {
        self.inner.open(record)
    }
    fn get(&self, id: &crate::record::JobId) -> crate::Result<crate::record::JobRecord> {
        self.inner.get(id)
    }
    fn mark(
        &self,
        id: &crate::record::JobId,
        mark: crate::record::Mark,
    ) -> crate::Result<crate::record::JobRecord> {
        self.inner.mark(id, mark)
    }
    fn update(
        &self,
        id: &crate::record::JobId,
        change: &mut dyn FnMut(&mut crate::record::JobRecord) -> crate::Result<()>,
    ) -> crate::Result<crate::record::JobRecord> {
        self.inner.update(id, change)
    }
    fn list(
        &self,
        filter: &crate::record::RecordFilter,
    ) -> crate::Result<Vec<crate::record::JobRecord>> {
        self.listings
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.list(filter)
    }
    fn open_retry(
        &self,
        retry: &crate::record::JobRecord,
    ) -> crate::Result<crate::record::RetryClaim> {
        self.inner.open_retry(retry)
    }
    fn try_submit_lease(
        &self,
        id: &crate::record::JobId,
    ) -> crate::Result<Option<crate::record::SubmitLease>> {
        self.inner.try_submit_lease(id)
    }
    fn submit_in_progress(&self, id: &crate::record::JobId) -> crate::Result<Option<bool>> {
        self.inner.submit_in_progress(id)
    }
}

/// Open `name` in `store` as accepted (`native`, PENDING), after `after`.
fn accepted_after<S: crate::record::RecordStore>(
    store: &S,
    name: &str,
    native: &str,
    after: &[&crate::record::JobId],
) -> crate::record::JobId {
    let mut spec = JobSpec::new(name, "true");
    spec.after = after
        .iter()
        .map(|id| crate::dependency::Dependency::ok((*id).clone()))
        .collect();
    open_accepted(store, &spec, native, JobState::Pending).id
}

/// A backend over `remote` and `store`, as after a passed preflight.
fn over_store<S: crate::record::RecordStore + 'static>(
    remote: MockRemote,
    store: S,
) -> crate::slurm::SlurmBackend<MockRemote, FakeRenderer, S> {
    let config = crate::slurm::SlurmConfig::builder()
        .with_partition("gpu")
        .with_results_root("/shared/results")
        .with_state_dir("/nonexistent")
        .build()
        .unwrap();
    let backend = crate::slurm::SlurmBackend::new(remote, FakeRenderer::names(), store, config);
    seed_preflight(&backend, vec!["n1".into()]);
    backend
}

/// A poll that answers every job PENDING (squeue rows for ids 11..=20).
fn all_pending() -> MockRemote {
    let mut remote = MockRemote::new();
    remote.expect_run().withf(is_poll).returning(|_| {
        let rows: String = (11..=20)
            .map(|n| format!("O {n}|PENDING|Dependency|(null)|x\n"))
            .collect();
        Ok(output(
            0,
            &format!("@@begin 0\n{rows}@@end 0 0\n@@begin 1\n@@end 1 0\n"),
            "",
        ))
    });
    remote
}

#[tokio::test]
async fn a_poll_of_many_dependants_reads_the_store_once() {
    // Defect 7: each dependant listed the whole store again on every poll: 1,000 probed
    // jobs in a 100k-record store were about 10^8 file reads a cycle.
    let backend = over_store(all_pending(), CountingStore::default());
    let parent = accepted_after(backend.store(), "parent", "11", &[]);
    let dependants: Vec<_> = (12..=16)
        .map(|n| {
            accepted_after(
                backend.store(),
                &format!("child{n}"),
                &n.to_string(),
                &[&parent],
            )
        })
        .collect();
    backend
        .store()
        .listings
        .store(0, std::sync::atomic::Ordering::SeqCst);
    let statuses = backend.status_many(&dependants).await.unwrap();
    assert!(statuses.iter().all(|s| s.state() == JobState::Pending));
    let listings = backend
        .store()
        .listings
        .load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        listings <= 1,
        "{listings} listings of the store for one poll"
    );
}

#[tokio::test]
async fn one_unreadable_record_breaks_no_poll_of_the_others() {
    // Defect 7: a listing returned the first corrupt record's error (a schema newer
    // than this slurm-run, when a newer one shares the folder), so the status of every
    // job behind a parent failed.
    let state = tempfile::tempdir().unwrap();
    let store = crate::record::FileRecordStore::new(state.path()).unwrap();
    let backend = over_store(all_pending(), store);
    let parent = accepted_after(backend.store(), "parent", "11", &[]);
    let child = accepted_after(backend.store(), "child", "12", &[&parent]);
    std::fs::write(
        state.path().join("newer-0123456789abcdef.json"),
        br#"{"schema_version": 99}"#,
    )
    .unwrap();
    let status = backend.status(&child).await.unwrap();
    assert_eq!(status.state(), JobState::Pending);
}

#[tokio::test]
async fn a_watch_goes_on_when_one_watched_record_becomes_unreadable() {
    // Defect 7: a watch of many jobs ended (its last item an error) because one watched
    // record could not be read any more; it says which and follows the others.
    let state = tempfile::tempdir().unwrap();
    let store = crate::record::FileRecordStore::new(state.path()).unwrap();
    let folder = state.path().to_path_buf();
    let broken = std::sync::Arc::new(std::sync::Mutex::new(None::<crate::record::JobId>));
    let to_break = std::sync::Arc::clone(&broken);
    let polls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut remote = MockRemote::new();
    remote.expect_run().withf(is_poll).returning(move |_| {
        let n = polls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if n == 0 {
            // While the first poll runs, one watched record is overwritten by garbage.
            let id = to_break.lock().unwrap().clone().unwrap();
            std::fs::write(folder.join(format!("{id}.json")), b"{ not json").unwrap();
        }
        let second = if n == 0 { "RUNNING|None|n1" } else { "COMPLETED|None|n1" };
        Ok(output(
            0,
            &format!(
                "@@begin 0\nO 11|{second}|a\nO 12|RUNNING|None|n1|b\n@@end 0 0\n@@begin 1\n{}@@end 1 0\n",
                if n == 0 { String::new() } else { "O 11|11|COMPLETED|0:0|None|2026-11-30T10:00:00|2026-11-30T10:00:01|2026-11-30T10:00:02|n1|a\n".to_string() }
            ),
            "",
        ))
    });
    let backend = over_store(remote, store);
    let kept = accepted_after(backend.store(), "kept", "11", &[]);
    let lost = accepted_after(backend.store(), "lost", "12", &[]);
    *broken.lock().unwrap() = Some(lost.clone());
    let options = crate::backend::WatchOptions {
        interval: std::time::Duration::from_millis(5),
        ..Default::default()
    };
    let events: Vec<crate::Result<crate::backend::WatchEvent>> =
        futures::StreamExt::collect::<Vec<_>>(
            backend.watch(&[kept.clone(), lost.clone()], options),
        )
        .await;
    assert!(events.iter().all(|e| e.is_ok()), "{events:?}");
    assert!(
        events.iter().any(|e| matches!(
            e,
            Ok(crate::backend::WatchEvent::Dropped { id, .. }) if id == &lost
        )),
        "{events:?}"
    );
    assert!(events.iter().any(|e| matches!(
        e,
        Ok(crate::backend::WatchEvent::Transition { status, .. }) if status.id() == &kept && status.state() == JobState::Complete
    )), "{events:?}");
}
