//! Unit tests of the SLURM backend's decisions, with a mockall transport for fault injection.

use std::time::Duration;

use async_trait::async_trait;
use mockall::mock;

use super::preflight::PartitionInfo;
use super::{Backend, SlurmBackend, SlurmConfig, SubmitOptions};
use crate::record::{MemoryRecordStore, RecordFilter, RecordStore};
use crate::redact::SecretRegistry;
use crate::render::{Renderer, ScriptContext, TemplateKind};
use crate::spec::{JobSpec, WallTime};
use crate::state::JobState;
use crate::storage::RemotePath;
use crate::transport::{Command, Output, Transport};
use crate::{Error, ErrorKind, Result};

mock! {
    pub Remote {}
    #[async_trait]
    impl Transport for Remote {
        async fn run(&self, command: &Command) -> Result<Output>;
    }
    impl std::fmt::Debug for Remote {
        fn fmt<'a>(&self, f: &mut std::fmt::Formatter<'a>) -> std::fmt::Result;
    }
}

/// Renders the job name only; lints nothing.
#[derive(Debug)]
struct NameRenderer;

impl Renderer for NameRenderer {
    fn render(&self, _: TemplateKind, context: &ScriptContext) -> Result<String> {
        Ok(format!("#!/bin/bash\n# {}\n", context.job_name))
    }
    fn lint(&self, _: &str, _: &SecretRegistry) -> Result<()> {
        Ok(())
    }
}

fn backend(remote: MockRemote) -> SlurmBackend<MockRemote, NameRenderer, MemoryRecordStore> {
    let config = SlurmConfig::builder()
        .with_partition("gpu")
        .with_results_root("/shared/results")
        .with_state_dir("/nonexistent")
        .with_reconcile_wait(Duration::from_millis(10))
        .build()
        .unwrap();
    let backend = SlurmBackend::new(remote, NameRenderer, MemoryRecordStore::new(), config);
    {
        // As after a passed preflight: no preflight round trip in these tests.
        let mut cache = backend.inner.cache.lock().unwrap();
        cache.base_checked = true;
        cache.cluster_name = Some("unit".into());
        cache.results_root = Some(RemotePath::parse("/shared/results").unwrap());
        cache.partitions.insert(
            "gpu".into(),
            PartitionInfo {
                up: true,
                max_time: Some(WallTime::from_hours(4)),
            },
        );
    }
    backend
}

fn output(status: i32, stdout: &str, stderr: &str) -> Output {
    Output {
        status,
        stdout: stdout.as_bytes().to_vec(),
        stderr: stderr.as_bytes().to_vec(),
    }
}

/// A reconcile batch (squeue, sacct) answering with these job ids.
fn reconcile_answer(squeue: &[&str], sacct: &[&str]) -> Output {
    let mut text = String::from("@@begin 0\n");
    for id in squeue {
        text.push_str(&format!("O {id}\n"));
    }
    text.push_str("@@end 0 0\n@@begin 1\n");
    for id in sacct {
        text.push_str(&format!("O {id}\n"));
    }
    text.push_str("@@end 1 0\n");
    output(0, &text, "")
}

fn is_submit(command: &Command) -> bool {
    command.label().starts_with("submit ")
}

fn is_reconcile(command: &Command) -> bool {
    command.label().starts_with("batch of 2: squeue, sacct")
        && command.get_args().iter().any(|a| a.starts_with("--name="))
}

#[tokio::test]
async fn a_steady_state_submit_is_one_round_trip() {
    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(is_submit)
        .times(1)
        .returning(|_| Ok(output(0, "4242\n", "sbatch: warning: something harmless\n")));
    let backend = backend(remote);
    let record = backend
        .submit(&JobSpec::new("hello", "true"), SubmitOptions::default())
        .await
        .unwrap();
    assert_eq!(record.state, JobState::Pending);
    assert_eq!(record.backend_ref.unwrap().slurm_job_id.get(), 4242);
}

#[tokio::test]
async fn an_empty_sbatch_answer_is_reconciled_and_the_job_adopted() {
    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(is_submit)
        .times(1)
        .returning(|_| Ok(output(0, "", "")));
    remote
        .expect_run()
        .withf(is_reconcile)
        .times(1)
        .returning(|_| Ok(reconcile_answer(&["77"], &["77"])));
    let backend = backend(remote);
    let record = backend
        .submit(&JobSpec::new("hello", "true"), SubmitOptions::default())
        .await
        .unwrap();
    assert_eq!(record.backend_ref.unwrap().slurm_job_id.get(), 77);
    assert!(record
        .history
        .last()
        .unwrap()
        .message
        .as_deref()
        .unwrap()
        .contains("adopted"));
}

#[tokio::test]
async fn a_lost_answer_with_no_job_found_allows_exactly_one_new_attempt() {
    let mut remote = MockRemote::new();
    let submits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&submits);
    remote
        .expect_run()
        .withf(is_submit)
        .times(2)
        .returning(move |_| {
            if counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                Err(Error::Transport {
                    message: "connection reset".into(),
                    may_have_run: true,
                })
            } else {
                Ok(output(0, "88;cluster2\n", ""))
            }
        });
    remote
        .expect_run()
        .withf(is_reconcile)
        .times(1..)
        .returning(|_| Ok(reconcile_answer(&[], &[])));
    let backend = backend(remote);
    let record = backend
        .submit(&JobSpec::new("hello", "true"), SubmitOptions::default())
        .await
        .unwrap();
    let backend_ref = record.backend_ref.unwrap();
    assert_eq!(backend_ref.slurm_job_id.get(), 88);
    assert_eq!(backend_ref.cluster.as_deref(), Some("cluster2"));
}

#[tokio::test]
async fn two_jobs_with_the_record_name_stop_for_a_person() {
    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(is_submit)
        .times(1)
        .returning(|_| {
            Err(Error::Timeout {
                what: "submit".into(),
                after: Duration::from_secs(1),
                may_have_run: true,
            })
        });
    remote
        .expect_run()
        .withf(is_reconcile)
        .times(1)
        .returning(|_| Ok(reconcile_answer(&["5"], &["5", "6"])));
    let backend = backend(remote);
    let err = backend
        .submit(&JobSpec::new("hello", "true"), SubmitOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Ambiguous);
    assert!(err.to_string().contains("5, 6"), "{err}");
    let records = backend.records(&RecordFilter::any()).unwrap();
    assert_eq!(records.len(), 1, "the record is kept");
    assert_eq!(records[0].state, JobState::Submitting);
}

#[tokio::test]
async fn a_refused_submit_keeps_an_error_record_without_secrets() {
    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(is_submit)
        .times(1)
        .returning(|_| {
            Ok(output(
                1,
                "",
                "sbatch: error: Batch job submission failed: Invalid partition name specified\n",
            ))
        });
    let backend = backend(remote);
    let mut spec = JobSpec::new("hello", "true");
    spec.secrets = vec!["MY_TOKEN".into()];
    let options = SubmitOptions {
        secret_values: Some([("MY_TOKEN".to_string(), "tok-very-secret".to_string())].into()),
        ..SubmitOptions::default()
    };
    let err = backend.submit(&spec, options).await.unwrap_err();
    assert!(err.to_string().contains("Invalid partition"), "{err}");
    let records = backend.store().list(&RecordFilter::any()).unwrap();
    assert_eq!(records[0].state, JobState::Error);
    let json = serde_json::to_string(&records[0]).unwrap();
    assert!(!json.contains("tok-very-secret"));
}

#[tokio::test]
async fn a_wall_time_above_the_partition_maximum_is_refused_before_anything_runs() {
    let remote = MockRemote::new(); // any command would panic: none may run
    let backend = backend(remote);
    let mut spec = JobSpec::new("hello", "true");
    spec.time = Some(WallTime::from_hours(5));
    let err = backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("time"), "{err}");
    assert!(backend.records(&RecordFilter::any()).unwrap().is_empty());
}
