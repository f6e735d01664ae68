//! The submit flow against a mock cluster: one round trip in the steady state, every
//! lost answer settled by the scheduler's answers, refusals before anything runs.
use std::time::Duration;

use crate::backend::{Backend, SubmitOptions};
use crate::record::{BackendRef, RecordFilter, RecordStore};
use crate::slurm::testkit::*;
use crate::spec::{JobSpec, WallTime};
use crate::state::JobState;
use crate::storage::RemotePath;
use crate::{Error, ErrorKind};

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
    let records = backend.records(&RecordFilter::any()).await.unwrap();
    assert_eq!(records[0].state, JobState::Submitting);
    assert!(
        records[0]
            .unsettled
            .as_ref()
            .unwrap()
            .why
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
    let record = &backend.records(&RecordFilter::any()).await.unwrap()[0];
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
        let record = &backend.records(&RecordFilter::any()).await.unwrap()[0];
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
    let records = backend.records(&RecordFilter::any()).await.unwrap();
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
    assert!(backend
        .records(&RecordFilter::any())
        .await
        .unwrap()
        .is_empty());
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
    backend.facts().change(|facts| {
        facts.partitions.insert(
            "long".into(),
            super::super::facts::PartitionInfo {
                up: true,
                max_time: None,
                nodes: Vec::new(),
            },
        )
    });
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
        after: vec![crate::dependency::Dependency::ok(parent.id.clone())],
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
    assert_eq!(
        backend.records(&RecordFilter::any()).await.unwrap().len(),
        1
    );
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

#[tokio::test]
async fn an_sbatch_that_cannot_read_its_configuration_is_settled_and_sent_again() {
    // Defect 13: a login node mid-reconfigure (`sbatch: fatal: Unable to process
    // configuration file`) ended the submit ERROR after one sbatch.
    let mut remote = MockRemote::new();
    let sent = std::sync::Arc::new(std::sync::Mutex::new(0u32));
    let count = std::sync::Arc::clone(&sent);
    remote.expect_run().withf(is_submit).returning(move |_| {
        let mut n = count.lock().unwrap();
        *n += 1;
        Ok(if *n == 1 {
            output(
                1,
                "",
                "sbatch: fatal: Unable to process configuration file\n",
            )
        } else {
            output(0, "555\n", "")
        })
    });
    remote
        .expect_run()
        .withf(is_settle)
        .times(1)
        .returning(|c| {
            Ok(settle_answer(
                c,
                |_| {
                    Fence::Done(
                        1,
                        "",
                        "sbatch: fatal: Unable to process configuration file\n",
                    )
                },
                Some(&[]),
                Some(&[]),
            ))
        });
    let backend = backend(remote);
    let record = backend
        .submit(&JobSpec::new("reconf", "true"), SubmitOptions::default())
        .await
        .unwrap();
    assert_eq!(record.state, JobState::Pending);
    assert_eq!(record.backend_ref.unwrap().native_id, "555");
    assert_eq!(*sent.lock().unwrap(), 2);
}

/// The plan of `spec` on a cluster whose partition `gpu` has nodes n1..n4.
fn plan_of(
    spec: JobSpec,
    retry_of: Option<crate::record::JobRecord>,
) -> crate::Result<super::plan::SubmitPlan> {
    let config = crate::slurm::SlurmConfig::builder()
        .with_partition("gpu")
        .with_results_root("/shared/results")
        .build()
        .unwrap();
    let facts = crate::slurm::facts::ClusterFacts::default();
    facts.change(|facts| {
        facts.partitions.insert(
            "gpu".into(),
            crate::slurm::facts::PartitionInfo {
                up: true,
                max_time: None,
                nodes: (1..=4).map(|n| format!("n{n}")).collect(),
            },
        );
    });
    super::plan::SubmitPlan::new(
        spec,
        RemotePath::parse("/shared/results").unwrap(),
        retry_of,
        false,
        &config,
        &facts,
    )
}

#[test]
fn extra_sbatch_cannot_replace_what_slurm_run_writes() {
    // Defect 6: --dependency dropped the probe's afterok and the pipeline's parents,
    // --nodelist undid a retry's exclusions, --kill-on-invalid-dep the poll's rule.
    for line in [
        "--dependency=afterok:12",
        "-d afterok:12",
        "--depend=singleton",
        "--nodelist=n1",
        "-w n1",
        "--kill-on-invalid-dep=yes",
    ] {
        let mut spec = JobSpec::new("x", "true");
        spec.extra_sbatch = vec![line.into()];
        let error = spec.validate().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Invalid, "{line}");
        assert!(
            error.to_string().contains("extra_sbatch"),
            "{line}: {error}"
        );
    }
}

#[test]
fn a_users_exclude_joins_the_computed_exclusions() {
    // Defect 6: a user's --exclude replaced the --exclude a retry computes (its bad
    // nodes); it is merged into that list instead, written once.
    let failed = {
        let mut record = crate::record::JobRecord::new(
            crate::record::JobId::parse("x-abcdef").unwrap(),
            &JobSpec::new("x", "true"),
            RemotePath::parse("/shared/results/x-abcdef").unwrap(),
        )
        .unwrap();
        record.excluded_nodes = vec!["n4".into()];
        record
    };
    let mut spec = JobSpec::new("x", "true");
    spec.extra_sbatch = vec!["--qos=high".into(), "-x n[1-2]".into()];
    let plan = plan_of(spec, Some(failed)).unwrap();
    let context = super::script::script_context(
        &plan,
        &crate::slurm::SlurmConfig::builder()
            .with_partition("gpu")
            .with_results_root("/shared/results")
            .build()
            .unwrap(),
    )
    .unwrap();
    let mut exclude = context.exclude.clone();
    exclude.sort();
    assert_eq!(exclude, ["n1", "n2", "n4"]);
    assert_eq!(context.extra_sbatch, ["--qos=high"]);
}

#[test]
fn oversubscribe_with_whole_nodes_is_refused_before_anything_is_sent() {
    // Defect 6: sbatch refuses --oversubscribe with the --exclusive slurm-run writes at
    // 8 GPUs per node from Slurm 23.02 (fatal): the pair is refused here.
    for line in ["--oversubscribe", "-s"] {
        let mut spec = JobSpec::new("x", "true");
        spec.gpus_per_node = Some(8);
        spec.extra_sbatch = vec![line.into()];
        let error = plan_of(spec, None).unwrap_err();
        assert!(
            error.to_string().contains("--oversubscribe"),
            "{line}: {error}"
        );
    }
    let mut shared = JobSpec::new("x", "true");
    shared.gpus_per_node = Some(2);
    shared.extra_sbatch = vec!["--oversubscribe".into()];
    plan_of(shared, None).unwrap();
}

/// A parent record the scheduler accepted as `native`, left in `state`.
fn accepted_parent(backend: &TestBackend, native: &str, state: JobState) -> crate::record::JobId {
    open_accepted(
        backend.store(),
        &JobSpec::new("parent", "true"),
        native,
        state,
    )
    .id
}

#[tokio::test]
async fn a_submit_reads_its_parents_afresh_before_it_names_them_to_sbatch() {
    // Defect 11: a submit trusted the parent's record (RUNNING, last polled long ago);
    // the parent had ended and been purged, so sbatch refused `--dependency` and the
    // dependant ended ERROR without a useful word. The parents are polled first.
    let dir = tempfile::tempdir().unwrap();
    let scripts: Scripts = Default::default();
    let staged = std::sync::Arc::clone(&scripts);
    let mut remote = MockRemote::new();
    remote.expect_run().withf(is_poll).returning(|_| {
        Ok(output(
            0,
            "@@begin 0\n@@end 0 0\n@@begin 1\nO 11|11|COMPLETED|0:0|None|2026-11-30T10:00:00|2026-11-30T10:00:01|2026-11-30T10:00:02|n1|parent\n@@end 1 0\n",
            "",
        ))
    });
    remote.expect_run().withf(is_submit).returning(move |c| {
        staged.lock().unwrap().push((c.label(), staged_script(c)));
        Ok(output(0, "12\n", ""))
    });
    let backend = prepared_backend(remote, FakeRenderer::with_env(), dir.path());
    let parent = accepted_parent(&backend, "11", JobState::Running);
    let options = SubmitOptions {
        after: vec![crate::dependency::Dependency::ok(parent.clone())],
        ..SubmitOptions::default()
    };
    let record = backend
        .submit(&JobSpec::new("child", "true"), options)
        .await
        .unwrap();
    assert_eq!(record.state, JobState::Pending);
    assert_eq!(
        backend.store().get(&parent).unwrap().state,
        JobState::Complete
    );
    let scripts = scripts.lock().unwrap();
    assert!(!scripts[0].1.contains("--dependency"), "{}", scripts[0].1);
}

#[tokio::test]
async fn a_parent_the_scheduler_no_longer_knows_is_named_in_the_error() {
    // Defect 11: the same, without accounting to say how the parent ended.
    let mut remote = MockRemote::new();
    remote.expect_run().withf(is_poll).returning(|_| {
        Ok(output(
            0,
            "@@begin 0\n@@end 0 0\n@@begin 1\n@@end 1 0\n",
            "",
        ))
    });
    remote
        .expect_run()
        .withf(|c| {
            c.label().starts_with("round trip of") && c.get_args().iter().any(|a| a == "scontrol")
        })
        .returning(|_| {
            Ok(output(
                0,
                "@@begin 0\nE slurm_load_jobs error: Invalid job id specified\n@@end 0 1\n",
                "",
            ))
        });
    let backend = backend(remote);
    let parent = accepted_parent(&backend, "11", JobState::Running);
    let options = SubmitOptions {
        after: vec![crate::dependency::Dependency::ok(parent.clone())],
        ..SubmitOptions::default()
    };
    let error = backend
        .submit(&JobSpec::new("child", "true"), options)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Invalid, "{error}");
    let text = error.to_string();
    assert!(
        text.contains(parent.as_str()) && text.contains("no longer knows"),
        "{text}"
    );
}

/// A multi-role job is one SLURM job: one round trip, one record with a state per role,
/// rendered with the multirole template.
#[tokio::test]
async fn a_multi_role_job_is_one_submit_with_a_state_per_role() {
    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(is_submit)
        .times(1)
        .returning(|_| Ok(output(0, "4343\n", "")));
    let backend = backend(remote);
    let spec = JobSpec::from_yaml_str(
        "name: rl\nroles:\n  controller: {gpus_per_node: 0, cpus_per_task: 4, command: c}\n  rollout: {gpus_per_node: 1, command: r}\n  watch: {on: rollout, command: w}\n",
    )
    .unwrap();
    let record = backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap();
    assert_eq!(record.state, JobState::Pending);
    assert_eq!(record.backend_ref.unwrap().native_id, "4343");
    let roles: Vec<(&str, JobState)> = record
        .roles
        .iter()
        .map(|(name, role)| (name.as_str(), role.state))
        .collect();
    assert_eq!(
        roles,
        [
            ("controller", JobState::Pending),
            ("rollout", JobState::Pending),
            ("watch", JobState::Pending)
        ]
    );
    let script = backend.render_script(&spec).await.unwrap();
    assert!(
        script.contains("# template multirole: roles controller,rollout,watch"),
        "{script}"
    );
}

/// A role the partitions cannot take is refused before anything is sent, naming it.
#[tokio::test]
async fn a_role_beyond_the_limits_is_refused_naming_it() {
    let backend = backend(MockRemote::new());
    let spec = JobSpec::from_yaml_str("name: rl\ntime: \"08:00:00\"\nroles:\n  a: {command: x}\n")
        .unwrap();
    let error = backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Invalid, "{error}");
    assert!(
        error.to_string().starts_with("invalid roles.a.time:"),
        "{error}"
    );
}

/// Every role's registry image is gated and converted before anything is queued: the
/// gate for each image, a conversion for each, and only then the one sbatch.
#[tokio::test]
async fn every_roles_image_is_converted_before_the_job_is_queued() {
    let ran = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let mut remote = MockRemote::new();
    let keep = std::sync::Arc::clone(&ran);
    remote.expect_run().returning(move |command| {
        let label = command.label();
        keep.lock().unwrap().push(label.clone());
        Ok(if is_submit(command) {
            output(0, "4444\n", "")
        } else if label.starts_with("convert ") {
            output(0, "converted 90\n", "")
        } else {
            // The gate's round trip of three: the .sqsh is whole already, so the gate
            // passes (the conversion still runs, and finds it or makes it).
            empty_round_trip(command)
        })
    });
    let backend = backend(remote);
    let spec = JobSpec::from_yaml_str(
        "name: rl\nroles:\n  policy: {gpus_per_node: 0, image: \"registry.example.com:5000/team/policy:1\", command: p}\n  rollout: {gpus_per_node: 0, image: \"registry.example.com:5000/team/rollout:1\", command: r}\n",
    )
    .unwrap();
    let record = backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap();
    assert_eq!(record.state, JobState::Pending);
    let ran = ran.lock().unwrap().clone();
    let converts: Vec<&String> = ran.iter().filter(|l| l.starts_with("convert ")).collect();
    assert_eq!(converts.len(), 2, "{ran:?}");
    assert!(converts[0].contains("team/policy:1") && converts[1].contains("team/rollout:1"));
    let submit_at = ran.iter().position(|l| l.starts_with("submit ")).unwrap();
    assert_eq!(submit_at, ran.len() - 1, "sbatch last: {ran:?}");
    assert!(
        record.last_message().contains("converted to")
            && record.last_message().contains("by SLURM job 90"),
        "{}",
        record.last_message()
    );
}
