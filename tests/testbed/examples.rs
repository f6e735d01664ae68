//! The quickstart and the orchestrator examples against the local test bed: output and exit status.

use std::time::Duration;

use slurm_run_testsupport::examples::{example, install_registry_credentials, run, Run};
use slurm_run_testsupport::{cluster, testbed_env};

/// Run example `name` with the test bed's environment (plus `extra`) and a fresh record folder.
fn run_example(name: &str, args: &[&str], extra: &[(&str, &str)]) -> (Run, tempfile::TempDir) {
    let state = tempfile::tempdir().unwrap();
    let mut env = testbed_env().client_env(state.path());
    for (k, v) in extra {
        env.retain(|(name, _)| name != k);
        env.push((k.to_string(), v.to_string()));
    }
    let out = run(&example(name), args, &env, Duration::from_secs(300));
    (out, state)
}

#[test]
fn quickstart_runs_a_two_node_job_to_complete() {
    let _cluster = cluster::shared_blocking();
    let (out, state) = run_example("quickstart", &[], &[]);
    out.expect_code(0);
    let stdout = &out.stdout;
    assert!(stdout.contains("== preflight\nok   ssh"), "{stdout}");
    assert!(!stdout.contains("FAIL"), "{stdout}");
    // Both ranks ran, on the two nodes, and agree on the master.
    assert!(stdout.contains("rank 0 of 2 on n1"), "{stdout}");
    assert!(stdout.contains("rank 1 of 2 on n2"), "{stdout}");
    assert_eq!(stdout.matches("master n1").count(), 2, "{stdout}");
    assert!(stdout.contains("-> COMPLETE"), "{stdout}");
    // No spinner on a pipe.
    assert!(
        !out.stderr.contains('\r') && !out.stderr.contains('\x1b'),
        "{}",
        out.stderr
    );

    // The final record is printed as JSON and is the one in the record folder.
    let json = stdout
        .split("== record\n")
        .nth(1)
        .expect("a record section");
    let record: serde_json::Value = serde_json::from_str(json).expect("the record is JSON");
    assert_eq!(record["state"], "COMPLETE");
    assert!(record["backend_ref"]["native_id"]
        .as_str()
        .is_some_and(|id| id.parse::<u64>().is_ok()));
    let id = record["id"].as_str().unwrap();
    assert!(id.starts_with("quickstart-"));
    // A new state folder keeps its records in SQLite (the default store).
    let store = slurm_records::RecordsLocation::default_for(state.path())
        .open()
        .unwrap();
    let stored = store
        .get(&slurm_core::JobId::parse(id).unwrap())
        .expect("the record in the state folder's database");
    assert_eq!(serde_json::to_value(&stored).unwrap(), record);
}

/// Issue 13, point 4: the quickstart's switch. In the torch image with `--probe always`
/// the job waits on the cluster for its probe (the real one, torchrun in the image)
/// and completes; a bad mode is bad input.
#[test]
fn quickstart_probe_switch_with_the_torch_image() {
    let _cluster = cluster::shared_blocking();
    let env: Vec<(String, String)> = testbed_env().vars.into_iter().collect();
    install_registry_credentials(&env);
    let image = format!(
        "{}/slurm-run/torch:1",
        testbed_env().get("SLURM_RUN_TEST_REGISTRY")
    );
    let (out, state) = run_example("quickstart", &["--image", &image, "--probe", "always"], &[]);
    out.expect_code(0);
    let stdout = &out.stdout;
    assert!(
        stdout.contains("it waits on the cluster for NCCL probe nccl-probe-"),
        "{stdout}"
    );
    assert!(stdout.contains("rank 1 of 2 on n2"), "{stdout}");
    assert!(stdout.contains("-> COMPLETE"), "{stdout}");
    // The probe's record sits beside the job's.
    let store = slurm_records::RecordsLocation::default_for(state.path())
        .open()
        .unwrap();
    let records = store
        .list(&slurm_core::RecordFilter::any().label("slurm-run-probe", "nccl"))
        .unwrap()
        .iter()
        .filter(|r| r.id().as_str().starts_with("nccl-probe-"))
        .count();
    assert_eq!(records, 1);

    let (out, _state) = run_example("quickstart", &["--probe", "sometimes"], &[]);
    out.expect_code(2);
    assert!(
        out.stderr.contains("auto, always or never"),
        "{}",
        out.stderr
    );
}

#[test]
fn quickstart_exits_3_when_the_cluster_does_not_answer() {
    let _cluster = cluster::shared_blocking();
    let (out, state) = run_example("quickstart", &[], &[("SLURM_HOSTNAME", "127.0.0.1:1")]);
    out.expect_code(3);
    assert!(out.stdout.contains("FAIL ssh"), "{}", out.stdout);
    // Nothing recorded: the state folder holds at most its (empty) records database.
    let files: Vec<String> = std::fs::read_dir(state.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        files
            .iter()
            .all(|f| f.starts_with(slurm_records::DEFAULT_DATABASE)),
        "{files:?}"
    );
    let store = slurm_records::RecordsLocation::default_for(state.path())
        .open()
        .unwrap();
    assert!(store
        .list(&slurm_core::RecordFilter::any())
        .unwrap()
        .is_empty());
}

#[test]
fn quickstart_exits_2_naming_a_missing_variable() {
    let _cluster = cluster::shared_blocking();
    let (out, _state) = run_example("quickstart", &[], &[("SLURM_PARTITION", "")]);
    out.expect_code(2);
    assert!(out.stderr.contains("SLURM_PARTITION"), "{}", out.stderr);
}

#[test]
fn orchestrator_on_slurm_retries_the_flaky_job_and_cancels_the_straggler() {
    let _cluster = cluster::shared_blocking();
    let (out, _state) = run_example(
        "orchestrator",
        &["--backend", "slurm", "--interval", "0.5"],
        &[],
    );
    out.expect_code(0);
    let stdout = &out.stdout;
    assert!(stdout.contains("backend: slurm"), "{stdout}");
    let finals: Vec<Vec<&str>> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("FINAL "))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(finals.len(), 5, "{stdout}");
    let find = |prefix: &str| {
        finals
            .iter()
            .find(|f| f[0].starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in {stdout}"))
    };
    for shard in ["shard-1-", "shard-2-", "shard-3-"] {
        assert_eq!(find(shard)[1], "COMPLETE", "{stdout}");
    }
    let flaky = find("flaky-");
    assert_eq!(&flaky[1..3], ["COMPLETE", "attempt=2"], "{stdout}");
    let first = flaky[3].trim_start_matches("retry_of=");
    assert!(
        stdout.contains(&format!("{first}  PENDING -> ERROR ERR_INFRA"))
            || stdout.contains(&format!("{first}  RUNNING -> ERROR ERR_INFRA")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("retried as {} (attempt 2)", flaky[0])),
        "{stdout}"
    );
    assert!(
        stdout.contains("log: flaky: succeeded on its retry"),
        "{stdout}"
    );
    assert!(stdout.contains("log: shard 2 step 3"), "{stdout}");
    assert_eq!(find("straggler-")[1], "CANCELED", "{stdout}");
}

#[test]
fn pipeline_runs_three_stages_in_order_and_a_sweep_task_by_task() {
    let _cluster = cluster::shared_blocking();
    let (out, _state) = run_example("pipeline", &[], &[]);
    out.expect_code(0);
    let stdout = &out.stdout;
    for stage in ["train", "evaluate", "export", "sweep"] {
        assert!(stdout.contains(&format!("submitted {stage}-")), "{stdout}");
    }
    let finals = stdout
        .lines()
        .filter(|l| !l.starts_with(' ') && l.ends_with(": COMPLETE"))
        .count();
    assert_eq!(finals, 4, "{stdout}");
    assert!(stdout.contains("  tasks 0-3: COMPLETE"), "{stdout}");
    for line in [
        "task 0: lr=0.1 batch=32",
        "task 1: lr=0.01 batch=32",
        "task 2: lr=0.1 batch=64",
        "task 3: lr=0.01 batch=64",
    ] {
        assert!(stdout.contains(line), "{line}: {stdout}");
    }
}
