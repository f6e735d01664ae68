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
