//! Preflight against a mock cluster.

use super::testkit::*;
use crate::backend::{Backend, CheckKind, SubmitOptions};
use crate::spec::JobSpec;
use crate::transport::{Command, Output};
use crate::{Error, ErrorKind};

/// The answer to a preflight round trip: each part answered by `answer(argv)` (stdout,
/// stderr, exit status), framed as the round trip reads it.
fn framed_answer(command: &Command, answer: impl Fn(&[String]) -> (String, String, i32)) -> Output {
    let args = command.get_args();
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
        let (out, err, status) = answer(argv);
        for line in out.lines() {
            text.push_str(&format!("O {line}\n"));
        }
        for line in err.lines() {
            text.push_str(&format!("E {line}\n"));
        }
        text.push_str(&format!("@@end {i} {status}\n"));
    }
    output(0, &text, "")
}

/// A cluster that answers every preflight query well; its `scontrol show config` and
/// `scontrol --version` say `cluster_config`, its sacct says `sacct_error` on stderr.
fn cluster(cluster_config: &'static str, sacct_error: &'static str) -> MockRemote {
    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(|c| {
            c.label().starts_with("round trip of ") && c.get_args().iter().any(|a| a == "sacct")
        })
        .returning(move |c| {
            Ok(framed_answer(c, |argv| {
                let (out, err, status) = match argv[0].as_str() {
                    "sacct" if !sacct_error.is_empty() => ("", sacct_error, 1),
                    "scontrol" => ("PartitionName=gpu MaxTime=04:00:00 State=UP", "", 0),
                    _ if argv.iter().any(|a| a == "results-root") => ("/shared/results", "", 0),
                    _ if argv.iter().any(|a| a == "cluster-config") => (cluster_config, "", 0),
                    _ => ("", "", 0),
                };
                (out.to_string(), err.to_string(), status)
            }))
        });
    remote
}

/// What the cluster-config script prints on Slurm 24.11.5: the two lines of
/// `scontrol show config` (as the test bed printed them) and the client's release.
const CONFIG_24_11: &str =
    "ClusterName             = testbed\nSLURM_VERSION           = 24.11.5\nclient slurm-wlm 24.11.5\n";

#[tokio::test]
async fn a_cluster_without_accounting_passes_preflight_degraded_and_submits() {
    // Issue 11, item 15.
    let mut remote = cluster(
        CONFIG_24_11,
        "sacct: error: Slurm accounting storage is disabled",
    );
    remote
        .expect_run()
        .withf(is_submit)
        .times(1)
        .returning(|_| Ok(output(0, "31\n", "")));
    let backend = unprepared_backend(remote);
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
async fn preflight_reports_the_release_and_the_record_notes_it() {
    let mut remote = cluster(CONFIG_24_11, "");
    remote
        .expect_run()
        .withf(is_submit)
        .times(1)
        .returning(|_| Ok(output(0, "32\n", "")));
    let backend = unprepared_backend(remote);
    let report = backend.preflight(None).await.unwrap();
    assert!(report.passed(), "{report}");
    let release = report
        .checks
        .iter()
        .find(|c| c.check == "slurm release")
        .unwrap_or_else(|| panic!("no release check: {report}"));
    assert_eq!(release.kind, CheckKind::Scheduler);
    assert_eq!(release.detail, "Slurm 24.11.5");
    let record = backend
        .submit(&JobSpec::new("noted", "true"), SubmitOptions::default())
        .await
        .unwrap();
    assert_eq!(record.scheduler_release(), Some("24.11.5"));
    assert_eq!(
        backend
            .record(record.id())
            .await
            .unwrap()
            .scheduler_release(),
        Some("24.11.5")
    );
}

#[tokio::test]
async fn a_release_older_than_the_oldest_tested_is_refused_naming_it_and_nothing_is_submitted() {
    let remote = cluster(
        "ClusterName = old\nSLURM_VERSION = 21.08.8\nclient slurm 21.08.8\n",
        "",
    );
    // No sbatch expectation: a submit that reached the cluster would fail the mock.
    let backend = unprepared_backend(remote);
    let report = backend.preflight(None).await.unwrap();
    assert!(!report.passed(), "{report}");
    let failed: Vec<_> = report.failures().collect();
    assert_eq!(failed.len(), 1, "{report}");
    assert_eq!(failed[0].check, "slurm release");
    assert!(failed[0].detail.contains("21.08.8"), "{report}");
    assert!(failed[0].remedy.contains("22.05 or newer"), "{report}");
    let error = backend
        .submit(&JobSpec::new("old", "true"), SubmitOptions::default())
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Preflight, "{error}");
    let Error::Preflight { kind, message, .. } = &error else {
        panic!("{error}");
    };
    assert_eq!(*kind, CheckKind::Scheduler);
    assert!(message.contains("older than 22.05"), "{error}");
    assert!(backend
        .records(&Default::default())
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn a_release_that_cannot_be_read_passes_degraded() {
    let backend = unprepared_backend(cluster("client \n", ""));
    let report = backend.preflight(None).await.unwrap();
    assert!(report.passed(), "{report}");
    let release = report.degraded().find(|c| c.check == "slurm release");
    assert!(
        release.is_some_and(|c| c.detail.starts_with("unknown")),
        "{report}"
    );
}
