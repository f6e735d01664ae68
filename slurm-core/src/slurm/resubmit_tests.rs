//! Retries against a mock cluster: the kept spec, one retry for two processes, the
//! secret values of the first submit.

use super::testkit::*;
use super::{SlurmBackend, SlurmConfig};
use crate::backend::{Backend, SubmitOptions};
use crate::record::RecordStore;
use crate::spec::JobSpec;
use crate::state::JobState;
use crate::testing::RuntimeGuardStore;

#[tokio::test]
async fn a_retry_submits_the_spec_the_client_kept_never_the_clusters_copy() {
    // Issue 11, item 5: the job rewrote specs/spec.json (adding a local private key to
    // upload and an environment secret), then failed as infra.
    let mut remote = MockRemote::new();
    let staged: Scripts = Default::default();
    let seen = std::sync::Arc::clone(&staged);
    remote.expect_run().withf(is_submit).returning(move |c| {
        let mut archive = tar::Archive::new(c.stdin_bytes().unwrap());
        let mut names = Vec::new();
        let mut spec_json = String::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let path = entry.path().unwrap().display().to_string();
            if path.ends_with("specs/spec.json") {
                std::io::Read::read_to_string(&mut entry, &mut spec_json).unwrap();
            }
            names.push(path);
        }
        let mut seen = seen.lock().unwrap();
        seen.push((names.join(" "), spec_json));
        Ok(output(0, &format!("{}\n", 500 + seen.len()), ""))
    });
    // read_file of the cluster's spec.json must never be asked.
    let backend = backend(remote);
    let first = backend
        .submit(&JobSpec::new("kept", "true"), SubmitOptions::default())
        .await
        .unwrap();
    backend
        .store()
        .mark(
            &first.id,
            crate::record::Mark::new(JobState::Error, crate::record::TransitionSource::Poll)
                .err_class(crate::classify::ErrorClass::Infra),
        )
        .unwrap();
    let retry = backend.resubmit(&first.id).await.unwrap();
    assert_eq!(retry.retry_of.as_ref(), Some(&first.id));
    assert_eq!(retry.spec_digest, first.spec_digest, "the same spec");
    let staged = staged.lock().unwrap();
    assert_eq!(staged.len(), 2);
    assert!(!staged[1].0.contains("files/"), "no supporting file staged");
    assert!(!staged[1].0.contains("env/"), "no secret staged");
    assert_eq!(staged[0].1, staged[1].1);

    // A record without a kept spec (older versions): the cluster's copy is taken only
    // with the submitted digest.
    let mut legacy = first.clone();
    legacy.spec = None;
    let mut rewritten = JobSpec::new("kept", "true");
    rewritten.supporting_files = vec!["/home/me/.ssh/id_ed25519".into()];
    rewritten.secrets = vec!["AWS_SECRET_ACCESS_KEY".into()];
    let err = legacy
        .spec_for_retry(Some(&serde_json::to_string(&rewritten).unwrap()))
        .unwrap_err();
    assert!(err.to_string().contains("no longer matches"), "{err}");
    let same = serde_json::to_string(&JobSpec::new("kept", "true")).unwrap();
    assert_eq!(
        legacy.spec_for_retry(Some(&same)).unwrap(),
        JobSpec::new("kept", "true")
    );
}

#[tokio::test]
async fn two_processes_retrying_one_failure_submit_once() {
    // Issue 11, item 6: two backends (two processes) share one record folder. Issue 37:
    // the one that loses opens no record, and neither calls its store on the runtime's
    // thread (this test's runtime has one thread: a blocking call would stall the other).
    let dir = tempfile::tempdir().unwrap();
    let guards: std::sync::Arc<std::sync::Mutex<Vec<RuntimeGuardStore>>> = Default::default();
    let submits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let make = |submits: std::sync::Arc<std::sync::atomic::AtomicUsize>| {
        let mut remote = MockRemote::new();
        remote.expect_run().withf(is_submit).returning(move |_| {
            let n = submits.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(output(0, &format!("{}\n", 700 + n), ""))
        });
        let config = SlurmConfig::builder()
            .with_partition("gpu")
            .with_results_root("/shared/results")
            .with_state_dir(dir.path())
            .build()
            .unwrap();
        let store = crate::record::FileRecordStore::new(dir.path().join("jobs")).unwrap();
        let store = RuntimeGuardStore::new(std::sync::Arc::new(store));
        guards.lock().unwrap().push(store.clone());
        let backend = SlurmBackend::new(remote, FakeRenderer::names(), store, config);
        seed_preflight(&backend, Vec::new());
        backend
    };
    let a = make(std::sync::Arc::clone(&submits));
    let b = make(std::sync::Arc::clone(&submits));
    let first = a
        .submit(&JobSpec::new("flaky", "true"), SubmitOptions::default())
        .await
        .unwrap();
    crate::record::AsyncStore::new(std::sync::Arc::new(a.store().clone()))
        .mark(
            &first.id,
            crate::record::Mark::new(JobState::Error, crate::record::TransitionSource::Poll)
                .err_class(crate::classify::ErrorClass::Infra),
        )
        .await
        .unwrap();
    let (ra, rb) = futures::future::join(a.resubmit(&first.id), b.resubmit(&first.id)).await;
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert_eq!(ra.id, rb.id, "both follow one retry");
    assert_eq!(
        submits.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "the first submit and one retry"
    );
    assert_eq!(
        a.record(&first.id).await.unwrap().retried_as.as_ref(),
        Some(&ra.id)
    );
    let all = a
        .records(&crate::record::RecordFilter::any())
        .await
        .unwrap();
    let retries: Vec<_> = all
        .iter()
        .filter(|r| r.retry_of.as_ref() == Some(&first.id))
        .collect();
    assert_eq!(retries.len(), 1, "one retry record: {all:?}");
    for guard in guards.lock().unwrap().iter() {
        assert!(guard.calls() > 0, "the guard saw the backend's calls");
        assert_eq!(
            guard.on_runtime_threads(),
            Vec::<&str>::new(),
            "store calls made on the runtime's thread"
        );
    }
}

#[tokio::test]
async fn a_retry_gets_the_secret_values_its_first_submit_was_given() {
    // Values given in `SubmitOptions::secret_values` (not in the environment) reach the
    // retry a watch makes, from memory; the record holds only their names.
    let mut remote = MockRemote::new();
    let sidecars = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = std::sync::Arc::clone(&sidecars);
    remote.expect_run().withf(is_submit).returning(move |c| {
        let mut archive = tar::Archive::new(c.stdin_bytes().unwrap());
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            if entry
                .path()
                .unwrap()
                .display()
                .to_string()
                .contains("/env/")
            {
                let mut text = String::new();
                std::io::Read::read_to_string(&mut entry, &mut text).unwrap();
                seen.lock().unwrap().push(text);
            }
        }
        Ok(output(0, "321\n", ""))
    });
    let backend = backend(remote);
    let mut spec = JobSpec::new("secret-retry", "true");
    spec.secrets = vec!["SLURM_RUN_TEST_ONLY_IN_OPTIONS".into()];
    let options = SubmitOptions {
        secret_values: Some(
            [(
                "SLURM_RUN_TEST_ONLY_IN_OPTIONS".to_string(),
                "opt-secret-value".to_string(),
            )]
            .into(),
        ),
        ..SubmitOptions::default()
    };
    let first = backend.submit(&spec, options).await.unwrap();
    backend
        .store()
        .mark(
            &first.id,
            crate::record::Mark::new(JobState::Error, crate::record::TransitionSource::Poll)
                .err_class(crate::classify::ErrorClass::Infra),
        )
        .unwrap();
    backend.resubmit(&first.id).await.unwrap();
    let sidecars = sidecars.lock().unwrap();
    assert_eq!(sidecars.len(), 2);
    assert!(sidecars[1].contains("opt-secret-value"), "{}", sidecars[1]);
}
