//! Preflight against a mock cluster.

use super::testkit::*;
use super::{SlurmBackend, SlurmConfig};
use crate::backend::{Backend, SubmitOptions};
use crate::record::MemoryRecordStore;
use crate::spec::JobSpec;

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
    let backend = SlurmBackend::new(
        remote,
        FakeRenderer::names(),
        MemoryRecordStore::new(),
        config,
    );
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
