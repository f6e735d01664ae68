//! Unit tests of the SLURM backend's decisions, with a mockall transport for fault injection.

use std::time::Duration;

use async_trait::async_trait;
use mockall::mock;

use super::backend::PartitionInfo;
use super::{SlurmBackend, SlurmConfig};
use crate::backend::{Backend, SubmitOptions};
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
    prepared_backend(remote, NameRenderer, std::path::Path::new("/nonexistent"))
}

/// A backend as after a passed preflight (no preflight round trip in these tests),
/// rendering with `renderer`, caching knobs under `state_dir`.
pub(super) fn prepared_backend<R: Renderer + 'static>(
    remote: MockRemote,
    renderer: R,
    state_dir: &std::path::Path,
) -> SlurmBackend<MockRemote, R, MemoryRecordStore> {
    let config = SlurmConfig::builder()
        .with_partition("gpu")
        .with_results_root("/shared/results")
        .with_state_dir(state_dir)
        .with_reconcile_wait(Duration::from_millis(10))
        .build()
        .unwrap();
    let backend = SlurmBackend::new(remote, renderer, MemoryRecordStore::new(), config);
    {
        let mut cache = backend.inner.cache.lock().unwrap();
        cache.base_checked = true;
        cache.cluster_name = Some("unit".into());
        cache.results_root = Some(RemotePath::parse("/shared/results").unwrap());
        cache.partitions.insert(
            "gpu".into(),
            PartitionInfo {
                up: true,
                max_time: Some(WallTime::from_hours(4)),
                nodes: vec!["n1".into(), "n2".into()],
            },
        );
    }
    backend
}

pub(super) fn output(status: i32, stdout: &str, stderr: &str) -> Output {
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

pub(super) fn is_submit(command: &Command) -> bool {
    command.label().starts_with("submit ")
}

fn is_reconcile(command: &Command) -> bool {
    command
        .label()
        .starts_with("round trip of 2: squeue, sacct")
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
    assert_eq!(record.backend_ref.unwrap().native_id, "4242");
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
    assert_eq!(record.backend_ref.unwrap().native_id, "77");
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
    assert_eq!(backend_ref.native_id, "88");
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

/// Renders the job name, the dependency, the probe's knobs file, whether it is a
/// probe, and the extra env (one `export` a line); lints nothing.
#[derive(Debug)]
pub(super) struct EnvRenderer;

impl Renderer for EnvRenderer {
    fn render(&self, _: TemplateKind, context: &ScriptContext) -> Result<String> {
        let mut script = format!("#!/bin/bash\n# {}\n", context.job_name);
        if let Some(dependency) = &context.dependency {
            script.push_str(&format!("#SBATCH --dependency={dependency}\n"));
        }
        if let Some(file) = &context.knobs_file {
            script.push_str(&format!("# knobs from {file}\n"));
        }
        if context.probe {
            script.push_str("# the NCCL probe's ladder\n");
        }
        for var in &context.extra_env {
            script.push_str(&format!("export {}={}\n", var.name, var.value));
        }
        Ok(script)
    }
    fn lint(&self, _: &str, _: &SecretRegistry) -> Result<()> {
        Ok(())
    }
}

pub(super) fn env_backend(
    remote: MockRemote,
    state_dir: &std::path::Path,
) -> SlurmBackend<MockRemote, EnvRenderer, MemoryRecordStore> {
    prepared_backend(remote, EnvRenderer, state_dir)
}

/// The batch script inside a submit's staging archive.
pub(super) fn staged_script(command: &Command) -> String {
    let mut archive = tar::Archive::new(command.stdin_bytes().unwrap());
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let path = entry.path().unwrap().display().to_string();
        if path.contains("/sbatch/") {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut entry, &mut text).unwrap();
            return text;
        }
    }
    panic!("no batch script staged");
}

/// Issue 14, point 5: a partition whose MaxTime is UNLIMITED takes the spec's time;
/// the 4-hour cap applies only where the partition has one.
#[tokio::test]
async fn an_unlimited_partition_accepts_a_long_wall_time() {
    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(is_submit)
        .times(1)
        .returning(|_| Ok(output(0, "4343\n", "")));
    let backend = backend(remote);
    backend.inner.cache.lock().unwrap().partitions.insert(
        "long".into(),
        PartitionInfo {
            up: true,
            max_time: None,
            nodes: Vec::new(),
        },
    );
    let mut spec = JobSpec::new("long", "true");
    spec.partition = Some("long".into());
    spec.time = Some(WallTime::from_hours(30));
    let record = backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap();
    assert_eq!(record.state, JobState::Pending);
    // The default partition keeps its 4-hour cap.
    let mut capped = JobSpec::new("capped", "true");
    capped.time = Some(WallTime::from_hours(5));
    let error = backend
        .submit(&capped, SubmitOptions::default())
        .await
        .unwrap_err();
    assert!(error.to_string().contains("04:00:00"), "{error}");
}

/// Issue 14: a dependant of a parent the scheduler has not accepted yet is refused,
/// before anything runs or is recorded for it.
#[tokio::test]
async fn a_parent_not_yet_accepted_is_an_error() {
    let remote = MockRemote::new(); // any command would panic: none may run
    let backend = backend(remote);
    let parent = crate::record::JobRecord::new(
        crate::record::JobId::mint("parent"),
        &JobSpec::new("parent", "true"),
        RemotePath::parse("/shared/results/parent").unwrap(),
    )
    .unwrap();
    backend.store().open(&parent).unwrap();
    let options = SubmitOptions {
        after: vec![crate::spec::Dependency::ok(parent.id.clone())],
        ..SubmitOptions::default()
    };
    let error = backend
        .submit(&JobSpec::new("child", "true"), options)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Invalid, "{error}");
    let text = error.to_string();
    assert!(
        text.contains("after") && text.contains(parent.id.as_str()),
        "{text}"
    );
    assert!(text.contains("not accepted by the scheduler"), "{text}");
    assert_eq!(backend.records(&RecordFilter::any()).unwrap().len(), 1);
}

/// Issue 14: an array's sweep values are staged once as a file (quoted), and the
/// values never reach argv.
#[tokio::test]
async fn a_sweep_is_staged_as_one_file_never_in_argv() {
    let mut remote = MockRemote::new();
    let staged = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = std::sync::Arc::clone(&staged);
    remote
        .expect_run()
        .withf(is_submit)
        .times(1)
        .returning(move |command| {
            keep.lock().unwrap().push(command.clone());
            Ok(output(0, "500\n", ""))
        });
    let backend = backend(remote);
    let spec = JobSpec::from_yaml_str(
        "name: sweep\ncommand: echo $LR\nsweep: {LR: [\"0.1\", \"it's; rm -rf /\"]}\narray: {max_parallel: 1}\n",
    )
    .unwrap();
    let record = backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap();
    assert_eq!(record.tasks.keys().copied().collect::<Vec<_>>(), [0, 1]);
    let command = staged.lock().unwrap()[0].clone();
    let payload = command.stdin_bytes().expect("the staged archive").to_vec();
    let mut archive = tar::Archive::new(payload.as_slice());
    let mut files = std::collections::BTreeMap::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut entry, &mut text).unwrap();
        files.insert(entry.path().unwrap().display().to_string(), text);
    }
    let params = &files[&format!("{}/sweep/params.sh", record.id)];
    // Sourced as the job does, task 1 gets its value back, byte for byte.
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("{params}\nprintf %s \"$LR\""))
        .env("SLURM_ARRAY_TASK_ID", "1")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "it's; rm -rf /",
        "{params}"
    );
    let argv = command.get_args().join(" ");
    assert!(!argv.contains("rm -rf"), "values never in argv");
}
