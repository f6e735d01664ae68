//! Unit tests of the SLURM backend's decisions, with a mockall transport for fault injection.

use std::time::Duration;

use async_trait::async_trait;
use mockall::mock;

use super::backend::PartitionInfo;
use super::{SlurmBackend, SlurmConfig};
use crate::backend::{Backend, SubmitOptions};
use crate::record::{BackendRef, MemoryRecordStore, RecordFilter, RecordStore};
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

/// The record names (and attempt counts) a settle command asks about, from its stdin.
fn settle_names(command: &Command) -> Vec<(String, u32)> {
    String::from_utf8_lossy(command.stdin_bytes().unwrap_or_default())
        .lines()
        .filter_map(|line| {
            let mut fields = line.split('\t');
            let _folder = fields.next()?;
            let name = fields.next()?.to_string();
            let attempts = fields.next()?.parse().ok()?;
            Some((name, attempts))
        })
        .collect()
}

/// What the fake cluster says of one attempt in a settle.
#[derive(Clone, Copy)]
enum Fence {
    /// Never reached sbatch (the fence took its folder).
    Fenced,
    /// sbatch ran and printed this (exit status, stdout, stderr).
    Done(i32, &'static str, &'static str),
}

/// A settle answer: `fence(attempt)` for every attempt of every record, then squeue
/// and sacct listing `squeue` / `sacct` as jobs carrying each record's name (`None`:
/// that tool failed, as when the controller or the database is unreachable).
fn settle_answer(
    command: &Command,
    fence: impl Fn(u32) -> Fence,
    squeue: Option<&[&str]>,
    sacct: Option<&[&str]>,
) -> Output {
    let mut text = String::from("@@begin 0\n");
    let names = settle_names(command);
    for (name, attempts) in &names {
        let mut all_fenced = true;
        for n in 1..=*attempts {
            match fence(n) {
                Fence::Fenced => text.push_str(&format!("O {name} {n} fenced\n")),
                Fence::Done(rc, out, err) => {
                    all_fenced = false;
                    let hex_or_dash = |t: &str| {
                        if t.is_empty() {
                            "-".to_string()
                        } else {
                            hex::encode(t)
                        }
                    };
                    text.push_str(&format!(
                        "O {name} {n} done {rc} {} {}\n",
                        hex_or_dash(out),
                        hex_or_dash(err)
                    ))
                }
            }
        }
        if all_fenced {
            text.push_str(&format!("O {name} forgot\n"));
        }
    }
    text.push_str("@@end 0 0\n");
    for (part, listing, tool) in [(1, squeue, "squeue"), (2, sacct, "sacct")] {
        text.push_str(&format!("@@begin {part}\n"));
        match listing {
            Some(ids) => {
                for (name, _) in &names {
                    for id in ids {
                        text.push_str(&format!("O {id}|{name}\n"));
                    }
                }
                text.push_str(&format!("@@end {part} 0\n"));
            }
            None => {
                let why = if tool == "squeue" {
                    "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
                } else {
                    "sacct: error: Problem talking to the database: Connection refused"
                };
                text.push_str(&format!("E {why}\n@@end {part} 1\n"));
            }
        }
    }
    output(0, &text, "")
}

pub(super) fn is_submit(command: &Command) -> bool {
    command.label().starts_with("submit ")
}

fn is_settle(command: &Command) -> bool {
    command.label().starts_with("settle ")
}

/// The attempt number a submit command sends (its third parameter).
fn attempt_of(command: &Command) -> String {
    // bash -c TEXT NAME root id attempt limit image...
    command.get_args()[5].clone()
}

fn is_forget(command: &Command) -> bool {
    command.label().starts_with("round trip of ")
        && command.get_args().iter().any(|a| a == "forget-secrets")
}

/// Answers a `forget-secrets` round trip: every sidecar is gone.
fn forget_answer(command: &Command) -> Output {
    let args = command.get_args();
    let at = args.iter().position(|a| a == "forget-secrets").unwrap();
    let names: Vec<&String> = args[at + 1..].iter().skip(1).step_by(2).collect();
    let mut text = String::from("@@begin 0\n");
    for name in names {
        text.push_str(&format!("O {name}\n"));
    }
    text.push_str("@@end 0 0\n");
    output(0, &text, "")
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
    assert_eq!(record.submit_attempts, Some(1));
}

#[tokio::test]
async fn an_empty_sbatch_answer_is_settled_and_the_job_adopted() {
    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(is_submit)
        .times(1)
        .returning(|_| Ok(output(0, "", "")));
    remote
        .expect_run()
        .withf(is_settle)
        .times(1)
        .returning(|c| {
            Ok(settle_answer(
                c,
                |_| Fence::Done(0, "", ""),
                Some(&["77"]),
                Some(&["77"]),
            ))
        });
    let backend = backend(remote);
    let record = backend
        .submit(&JobSpec::new("hello", "true"), SubmitOptions::default())
        .await
        .unwrap();
    assert_eq!(record.backend_ref.as_ref().unwrap().native_id, "77");
    assert!(record.last_message().contains("adopted"));
}

#[tokio::test]
async fn a_lost_answer_is_read_back_from_the_attempt_without_asking_the_scheduler() {
    // The connection dropped after sbatch accepted the job: its answer is on disk.
    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(is_submit)
        .times(1)
        .returning(|_| {
            Err(Error::Transport {
                message: "connection reset".into(),
                may_have_run: true,
            })
        });
    remote
        .expect_run()
        .withf(is_settle)
        .times(1)
        .returning(|c| {
            // squeue and sacct both down: the attempt's own answer settles it.
            Ok(settle_answer(
                c,
                |_| Fence::Done(0, "991\n", ""),
                None,
                None,
            ))
        });
    let backend = backend(remote);
    let record = backend
        .submit(&JobSpec::new("hello", "true"), SubmitOptions::default())
        .await
        .unwrap();
    assert_eq!(record.state, JobState::Pending);
    assert_eq!(record.backend_ref.unwrap().native_id, "991");
}

#[tokio::test]
async fn a_fenced_attempt_allows_exactly_one_new_attempt() {
    let mut remote = MockRemote::new();
    let attempts = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = std::sync::Arc::clone(&attempts);
    remote
        .expect_run()
        .withf(is_submit)
        .times(2)
        .returning(move |command| {
            let mut seen = seen.lock().unwrap();
            seen.push(attempt_of(command));
            if seen.len() == 1 {
                Err(Error::Transport {
                    message: "connection reset".into(),
                    may_have_run: true,
                })
            } else {
                Ok(output(0, "88;cluster2\n", ""))
            }
        });
    // The first attempt never reached sbatch: the fence took its folder.
    remote
        .expect_run()
        .withf(is_settle)
        .times(1)
        .returning(|c| Ok(settle_answer(c, |_| Fence::Fenced, None, None)));
    let backend = backend(remote);
    let record = backend
        .submit(&JobSpec::new("hello", "true"), SubmitOptions::default())
        .await
        .unwrap();
    let backend_ref = record.backend_ref.clone().unwrap();
    assert_eq!(backend_ref.native_id, "88");
    assert_eq!(backend_ref.cluster.as_deref(), Some("cluster2"));
    assert_eq!(
        *attempts.lock().unwrap(),
        ["1", "2"],
        "a new attempt number"
    );
    assert_eq!(record.submit_attempts, Some(2));
}

#[tokio::test]
async fn a_settle_that_cannot_ask_the_scheduler_never_counts_as_no_job() {
    // Issue 11, item 1: sbatch's answer was lost (socket timeout), then squeue and sacct
    // both fail (controller and database unreachable): the record stays SUBMITTING, and
    // sbatch is never sent again.
    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(is_submit)
        .times(1)
        .returning(|_| {
            Ok(output(
            1,
            "",
            "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation\n",
        ))
        });
    remote.expect_run().withf(is_settle).times(1..).returning(|c| {
        Ok(settle_answer(
            c,
            |_| {
                Fence::Done(
                    1,
                    "",
                    "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation\n",
                )
            },
            None,
            None,
        ))
    });
    let backend = backend(remote);
    let err = backend
        .submit(&JobSpec::new("hello", "true"), SubmitOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Ambiguous, "{err}");
    let records = backend.records(&RecordFilter::any()).unwrap();
    assert_eq!(records[0].state, JobState::Submitting);
    assert!(
        records[0]
            .unsettled
            .as_deref()
            .unwrap()
            .contains("could not be asked"),
        "{:?}",
        records[0].unsettled
    );
}

#[tokio::test]
async fn a_settle_with_only_squeue_answering_keeps_the_job_it_saw() {
    // squeue lists a job carrying the name; sacct cannot answer: the record stays
    // SUBMITTING (both must answer) with the job it saw kept.
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
        .withf(is_settle)
        .times(1..)
        .returning(|c| {
            Ok(settle_answer(
                c,
                |_| Fence::Done(124, "", ""),
                Some(&["314"]),
                None,
            ))
        });
    let backend = backend(remote);
    let err = backend
        .submit(&JobSpec::new("hello", "true"), SubmitOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Ambiguous);
    let record = &backend.records(&RecordFilter::any()).unwrap()[0];
    assert_eq!(record.state, JobState::Submitting);
    assert_eq!(record.candidates, vec![BackendRef::new("314")]);
}

#[tokio::test]
async fn errors_after_an_unknown_outcome_never_end_the_record() {
    // Issue 11, item 3: the connection drops mid-submit, then every reconnect fails with
    // a host-key, authentication or configuration error, or the login node's /tmp is
    // full (the framing cannot start): the job may be running; the record stays
    // SUBMITTING and no second sbatch is sent.
    let failures: Vec<fn() -> Error> = vec![
        || Error::HostKey {
            host: "login".into(),
            message: "the host key changed".into(),
        },
        || Error::Auth {
            host: "login".into(),
            message: "publickey refused".into(),
        },
        || Error::config("SSH_KEY_PATH", "the key file is gone"),
        || {
            Error::Remote {
            command: "settle".into(),
            status: 70,
            stderr: "mktemp: failed to create directory via template '/tmp/slurm-run-frame.XXXXXXXX': No space left on device".into(),
            transient: false,
        }
        },
    ];
    for failure in failures {
        let mut remote = MockRemote::new();
        remote
            .expect_run()
            .withf(is_submit)
            .times(1)
            .returning(|_| {
                Err(Error::Transport {
                    message: "connection reset".into(),
                    may_have_run: true,
                })
            });
        remote
            .expect_run()
            .withf(is_settle)
            .times(1..)
            .returning(move |_| Err(failure()));
        let backend = backend(remote);
        let err = backend
            .submit(&JobSpec::new("hello", "true"), SubmitOptions::default())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Ambiguous, "{err}");
        let record = &backend.records(&RecordFilter::any()).unwrap()[0];
        assert_eq!(record.state, JobState::Submitting, "{err}");
        assert!(record.unsettled.is_some());
    }
}

#[tokio::test]
async fn banner_lines_around_the_job_id_are_no_error_and_garbage_is_settled() {
    // Issue 11, item 4: a site wrapper prints banners around sbatch's id (exit 0).
    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(is_submit)
        .times(1)
        .returning(|_| {
            Ok(output(
                0,
                "*** GPU quota: 80% used ***\n5150\nHave a nice day\n",
                "",
            ))
        });
    let first = backend(remote);
    let record = first
        .submit(&JobSpec::new("hello", "true"), SubmitOptions::default())
        .await
        .unwrap();
    assert_eq!(record.backend_ref.unwrap().native_id, "5150");

    // Output with no recognisable id: settled by name, never an ERROR.
    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(is_submit)
        .times(1)
        .returning(|_| Ok(output(0, "Your job was queued. Good luck!\n", "")));
    remote
        .expect_run()
        .withf(is_settle)
        .times(1)
        .returning(|c| {
            Ok(settle_answer(
                c,
                |_| Fence::Done(0, "Your job was queued. Good luck!\n", ""),
                Some(&["6006"]),
                Some(&["6006"]),
            ))
        });
    let backend = backend(remote);
    let record = backend
        .submit(&JobSpec::new("hello", "true"), SubmitOptions::default())
        .await
        .unwrap();
    assert_eq!(record.state, JobState::Pending);
    assert_eq!(record.backend_ref.unwrap().native_id, "6006");
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
    assert_eq!(records[0].candidates.len(), 2, "every job seen is kept");
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
    // The staged secrets go at once (item 8: an sbatch refusal).
    let forgets = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&forgets);
    remote.expect_run().withf(is_forget).returning(move |c| {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(forget_answer(c))
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
    assert_eq!(forgets.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(
        !records[0].secrets_staged,
        "the sidecar's removal is confirmed"
    );
    assert_eq!(
        records[0].secret_names,
        ["MY_TOKEN"],
        "names kept, never values"
    );
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

/// A record a submit left SUBMITTING (its process died after sbatch, or it ended
/// unsettled), `age` seconds old, with one counted attempt.
fn left_submitting(
    backend: &SlurmBackend<MockRemote, NameRenderer, MemoryRecordStore>,
    name: &str,
    age: i64,
) -> crate::record::JobRecord {
    let spec = JobSpec::new(name, "true");
    let id = crate::record::JobId::mint_for(&spec);
    let dir = RemotePath::parse("/shared/results")
        .unwrap()
        .join(id.as_str())
        .unwrap();
    let mut record = crate::record::JobRecord::new(id, &spec, dir).unwrap();
    record.submit_attempts = Some(1);
    record.submitted_at -= chrono::Duration::seconds(age);
    backend.store().open(&record).unwrap();
    record
}

fn is_poll(command: &Command) -> bool {
    command.label().starts_with("poll ")
}

/// A poll answer: squeue lists `line` (`ID|STATE|REASON|NODES|NAME`), sacct nothing.
fn poll_answer(line: &str) -> Output {
    output(
        0,
        &format!("@@begin 0\nO {line}\n@@end 0 0\n@@begin 1\n@@end 1 0\n"),
        "",
    )
}

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
        .as_deref()
        .unwrap()
        .contains("Problem talking to the database"));
}

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

/// What a fake transport saw staged, shared with the test.
type Scripts = std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>;

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
    // Issue 11, item 6: two backends (two processes) share one record folder.
    let dir = tempfile::tempdir().unwrap();
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
        let backend = SlurmBackend::new(remote, NameRenderer, store, config);
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
                    nodes: Vec::new(),
                },
            );
        }
        backend
    };
    let a = make(std::sync::Arc::clone(&submits));
    let b = make(std::sync::Arc::clone(&submits));
    let first = a
        .submit(&JobSpec::new("flaky", "true"), SubmitOptions::default())
        .await
        .unwrap();
    a.store()
        .mark(
            &first.id,
            crate::record::Mark::new(JobState::Error, crate::record::TransitionSource::Poll)
                .err_class(crate::classify::ErrorClass::Infra),
        )
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
        a.record(&first.id).unwrap().retried_as.as_ref(),
        Some(&ra.id)
    );
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

    let redactor = backend.log_redactor(&status.record);
    assert_eq!(
        redactor.redact("key=wandb-0123456789 pass=hunter2-but-longer"),
        "key=[REDACTED] pass=[REDACTED]"
    );
    // A viewer in another process: the values come from its environment, by the
    // names the record keeps (never the values).
    let other = backend_without_memory();
    std::env::set_var("SLURM_RUN_TEST_DECLARED_NAME", "declared-secret-value");
    let mut declared = status.record.clone();
    declared.secret_names = vec!["SLURM_RUN_TEST_DECLARED_NAME".into()];
    assert_eq!(
        other
            .log_redactor(&declared)
            .redact("v=declared-secret-value"),
        "v=[REDACTED]"
    );
    std::env::remove_var("SLURM_RUN_TEST_DECLARED_NAME");
}

fn backend_without_memory() -> SlurmBackend<MockRemote, NameRenderer, MemoryRecordStore> {
    backend(MockRemote::new())
}

#[tokio::test]
async fn a_cluster_without_accounting_passes_preflight_degraded_and_submits() {
    // Issue 11, item 15.
    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(|c| {
            c.label().starts_with("round trip of ") && c.get_args().iter().any(|a| a == "sacct")
        })
        .returning(|c| {
            // Answer each part of the preflight round trip in order.
            let args = c.get_args();
            let mut parts: Vec<Vec<String>> = vec![Vec::new()];
            let start = args.iter().position(|a| a == "round-trip").unwrap() + 1;
            for arg in &args[start..] {
                if arg == "--slurm-run-next--" {
                    parts.push(Vec::new());
                } else {
                    parts.last_mut().unwrap().push(arg.clone());
                }
            }
            let mut text = String::new();
            for (i, argv) in parts.iter().enumerate() {
                text.push_str(&format!("@@begin {i}\n"));
                let (out, err, status) = match argv[0].as_str() {
                    "sacct" => ("", "sacct: error: Slurm accounting storage is disabled", 1),
                    "scontrol" => ("PartitionName=gpu MaxTime=04:00:00 State=UP", "", 0),
                    "srun" => ("", "", 0),
                    _ if argv.iter().any(|a| a == "results-root") => ("/shared/results", "", 0),
                    _ => ("", "", 0),
                };
                if !out.is_empty() {
                    text.push_str(&format!("O {out}\n"));
                }
                if !err.is_empty() {
                    text.push_str(&format!("E {err}\n"));
                }
                text.push_str(&format!("@@end {i} {status}\n"));
            }
            Ok(output(0, &text, ""))
        });
    remote
        .expect_run()
        .withf(is_submit)
        .times(1)
        .returning(|_| Ok(output(0, "31\n", "")));
    let config = SlurmConfig::builder()
        .with_partition("gpu")
        .with_state_dir("/nonexistent")
        .build()
        .unwrap();
    let backend = SlurmBackend::new(remote, NameRenderer, MemoryRecordStore::new(), config);
    let report = backend.preflight(None).await.unwrap();
    assert!(report.passed(), "{report}");
    let degraded: Vec<_> = report.degraded().collect();
    assert_eq!(degraded.len(), 1, "{report}");
    assert!(degraded[0].detail.contains("disabled"), "{report}");
    let record = backend
        .submit(&JobSpec::new("noacct", "true"), SubmitOptions::default())
        .await
        .unwrap();
    assert_eq!(record.backend_ref.unwrap().native_id, "31");
}

#[tokio::test]
async fn following_a_large_log_reads_bounded_chunks_from_the_last_offset() {
    // Issue 11, item 12: a 2.5 MiB log is read in chunks of at most 1 MiB, each from
    // where the last stopped; the stream ends once everything is read.
    let size: u64 = 2 * 1024 * 1024 + 512 * 1024;
    let offsets = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(u64, u64)>::new()));
    let seen = std::sync::Arc::clone(&offsets);
    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(|c| c.get_args().iter().any(|a| a == "read-from"))
        .returning(move |c| {
            let args = c.get_args();
            let at = args.iter().position(|a| a == "read-from").unwrap();
            let offset: u64 = args[at + 2].parse().unwrap();
            let most: u64 = args[at + 3].parse().unwrap();
            seen.lock().unwrap().push((offset, most));
            let n = (size - offset).min(most) as usize;
            let mut stdout = format!("{size}\n").into_bytes();
            stdout.extend(std::iter::repeat_n(b'x', n));
            Ok(Output {
                status: 0,
                stdout,
                stderr: Vec::new(),
            })
        });
    let backend = backend(remote);
    let spec = JobSpec::new("biglog", "true");
    let id = crate::record::JobId::mint_for(&spec);
    let dir = RemotePath::parse("/shared/results")
        .unwrap()
        .join(id.as_str())
        .unwrap();
    let record = crate::record::JobRecord::new(id.clone(), &spec, dir).unwrap();
    backend.store().open(&record).unwrap();
    backend
        .store()
        .mark(
            &id,
            crate::record::Mark::new(JobState::Complete, crate::record::TransitionSource::Poll)
                .backend_ref(BackendRef::new("77")),
        )
        .unwrap();
    let chunks: Vec<String> = futures::StreamExt::collect::<Vec<_>>(backend.follow_logs(
        &id,
        crate::backend::LogStream::Out,
        Duration::from_millis(1),
    ))
    .await
    .into_iter()
    .map(|c| c.unwrap())
    .collect();
    let total: usize = chunks.iter().map(String::len).sum();
    assert_eq!(total as u64, size);
    assert!(chunks.iter().all(|c| c.len() <= 1024 * 1024));
    let offsets = offsets.lock().unwrap();
    let starts: Vec<u64> = offsets.iter().map(|(o, _)| *o).collect();
    assert_eq!(
        starts[..3],
        [0, 1024 * 1024, 2 * 1024 * 1024],
        "each read starts where the last stopped"
    );
    assert!(starts[3..].iter().all(|o| *o == size), "{starts:?}");
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
