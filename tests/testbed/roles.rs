//! Multi-role jobs on the real test bed (the Backend conformance suite's role cases run
//! on `SlurmBackend` too, in `backend_conformance`): roles in different images through
//! Pyxis talking over TCP with only the exported variables, a role `on` another beside
//! its first node, a failing role ending the job and its siblings' steps, slurmctl's
//! `status --json` line per role and `logs --role`, an infra retry off a role's nodes, and
//! a multi-role job's secrets and dependencies.

use std::collections::BTreeMap;
use std::time::Duration;

use slurm_core::testing::role_cases::{TCP_CLIENT, TCP_SERVER};
use slurm_core::{
    Backend, Command, Dependency, JobRecord, JobSpec, JobState, LogOptions, LogStream, NcclProbe,
    RoleSpec, SlurmSubmitOptions, SubmitOptions, WallTime,
};
use slurm_run_testsupport::backend::{
    harness, registry_image, remote, small_spec, staged_script, wait_terminal, with_credentials,
    Harness,
};
use slurm_run_testsupport::cluster;
use slurm_run_testsupport::examples::{example, run};
use slurm_run_testsupport::testbed_env;

/// A role on one node of its own with one GPU and one CPU.
fn role(command: &str) -> RoleSpec {
    RoleSpec {
        nodes: Some(1),
        gpus_per_node: Some(1),
        cpus_per_task: Some(1),
        ..RoleSpec::new(command)
    }
}

/// A role beside `host`'s first node.
fn beside(host: &str, command: &str) -> RoleSpec {
    RoleSpec {
        on: Some(host.to_string()),
        ..RoleSpec::new(command)
    }
}

/// A multi-role job of `roles` with ten minutes of wall time.
fn roles_spec(name: &str, roles: Vec<(&str, RoleSpec)>) -> JobSpec {
    let mut spec = JobSpec::new(name, "");
    spec.time = Some(WallTime::from_minutes(10));
    spec.roles = roles
        .into_iter()
        .map(|(name, role)| (name.to_string(), role))
        .collect::<BTreeMap<_, _>>();
    spec
}

async fn run_to_end(h: &Harness, spec: &JobSpec) -> JobRecord {
    run_to_end_with(h, spec, SubmitOptions::default()).await
}

async fn run_to_end_with(h: &Harness, spec: &JobSpec, options: SubmitOptions) -> JobRecord {
    let slurm = SlurmSubmitOptions {
        nccl_probe: NcclProbe::Never,
        ..SlurmSubmitOptions::default()
    };
    let record = h
        .backend
        .submit_with(spec, options, slurm)
        .await
        .unwrap_or_else(|e| panic!("submit {}: {e}", spec.name));
    wait_terminal(&h.backend, record.id(), 240)
        .await
        .into_record()
}

async fn role_log(h: &Harness, record: &JobRecord, role: &str) -> String {
    h.backend
        .logs(record.id(), LogOptions::of(LogStream::Out).role(role))
        .await
        .unwrap_or_else(|e| panic!("logs of role {role}: {e}"))
}

/// A controller in the torch image (it has python3) and a worker in the tiny image, one
/// node each (a heterogeneous job of two components), talk over TCP: the worker finds
/// the controller by `SLURM_RUN_ROLE_SERVER_HOST` alone. Each runs in its own image.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_in_different_images_talk_over_tcp_through_pyxis() {
    let _cluster = cluster::shared().await;
    let h = harness();
    with_credentials(&h).await;
    let mut server = role(&format!("cat /etc/slurm-run-image; {TCP_SERVER}"));
    server.image = Some(registry_image(&h, "slurm-run/torch:1"));
    let mut client = role(&format!("cat /etc/slurm-run-image; {TCP_CLIENT}"));
    client.image = Some(registry_image(&h, "slurm-run/tiny:1"));
    let spec = roles_spec("roles-images", vec![("server", server), ("client", client)]);
    let record = run_to_end(&h, &spec).await;
    assert_eq!(record.state(), JobState::Complete, "{record:?}");
    let roles = record.roles();
    let (client_nodes, server_nodes) = (roles["client"].nodes(), roles["server"].nodes());
    assert_eq!(client_nodes.len(), 1, "{record:?}");
    assert_eq!(server_nodes.len(), 1, "{record:?}");
    assert_ne!(
        client_nodes, server_nodes,
        "a component each, on nodes of their own: {record:?}"
    );
    let server_log = role_log(&h, &record, "server").await;
    assert!(
        server_log.starts_with("slurm-run/torch:1\n"),
        "{server_log:?}"
    );
    assert!(
        server_log.contains("server got: ping from client rank 0 as server"),
        "{server_log:?}"
    );
    let client_log = role_log(&h, &record, "client").await;
    assert!(
        client_log.starts_with("slurm-run/tiny:1\n"),
        "{client_log:?}"
    );
    assert!(
        client_log.contains("client got: pong ping from client"),
        "{client_log:?}"
    );
}

/// Three roles, one `on` another: the monitor runs one process on the server's first
/// node (a step beside it), and every role sees every role's hosts, its name and rank;
/// a two-node role sees its rendezvous.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_on_another_runs_beside_its_first_node() {
    let _cluster = cluster::exclusive().await;
    let h = harness();
    let report = r#"echo "role=$SLURM_RUN_ROLE rank=$SLURM_RUN_ROLE_RANK node=$SLURMD_NODENAME world=${WORLD_SIZE:-} node_rank=${NODE_RANK:-} master=${MASTER_ADDR:-} trainer_hosts=$SLURM_RUN_ROLE_TRAINER_HOSTS trainer_host=$SLURM_RUN_ROLE_TRAINER_HOST monitor_host=$SLURM_RUN_ROLE_MONITOR_HOST""#;
    let mut trainer = role(report);
    trainer.nodes = Some(2);
    let spec = roles_spec(
        "roles-beside",
        vec![("trainer", trainer), ("monitor", beside("trainer", report))],
    );
    let record = run_to_end(&h, &spec).await;
    assert_eq!(record.state(), JobState::Complete, "{record:?}");
    let trainer_nodes = record.roles()["trainer"].nodes().to_vec();
    assert_eq!(trainer_nodes, ["n1", "n2"], "{record:?}");
    assert_eq!(record.roles()["monitor"].nodes(), ["n1"], "{record:?}");
    let trainer_log = role_log(&h, &record, "trainer").await;
    for rank in ["0", "1"] {
        let node = &trainer_nodes[rank.parse::<usize>().unwrap()];
        let line = format!("role=trainer rank={rank} node={node} world=2 node_rank={rank} master=n1 trainer_hosts=n1,n2 trainer_host=n1 monitor_host=n1");
        assert!(trainer_log.contains(&line), "{line}\n{trainer_log}");
    }
    let monitor_log = role_log(&h, &record, "monitor").await;
    assert!(
        monitor_log.contains("role=monitor rank=0 node=n1 world= node_rank=0 master= trainer_hosts=n1,n2 trainer_host=n1 monitor_host=n1"),
        "{monitor_log}"
    );
}

/// The first role to fail ends the job with its status, and its sibling's step is
/// stopped on the cluster (no step of the job is left running); the job's log names the
/// failed role and carries the end of its error log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_role_ends_the_job_and_stops_its_siblings_steps() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let spec = roles_spec(
        "roles-fail",
        vec![
            ("steady", role("touch steady-up; sleep 300")),
            (
                "crash",
                role("for _ in $(seq 1 600); do [ -e steady-up ] && break; sleep 0.2; done; echo 'reward model exploded' >&2; exit 7"),
            ),
        ],
    );
    let record = run_to_end(&h, &spec).await;
    assert_eq!(record.state(), JobState::Error, "{record:?}");
    assert_eq!(
        record.roles()["crash"].state(),
        JobState::Error,
        "{record:?}"
    );
    assert_eq!(
        record.roles()["steady"].state(),
        JobState::Canceled,
        "{record:?}"
    );
    assert!(
        record
            .last_message()
            .contains("role crash failed first (exit 7)"),
        "{record:?}"
    );
    let job = record.backend_ref().unwrap().native_id.clone();
    let steps = remote(
        &h,
        Command::new("squeue")
            .args(["--steps", "--noheader", "-j"])
            .arg(&job),
    )
    .await;
    assert!(steps.trim().is_empty(), "no step left running: {steps}");
    let err = h
        .backend
        .logs(record.id(), LogOptions::of(LogStream::Err))
        .await
        .unwrap();
    assert!(
        err.contains("slurm-run: role crash failed (exit 7)"),
        "{err}"
    );
    assert!(err.contains("reward model exploded"), "{err}");
}

/// slurmctl: `status --json` prints one line per role with `role` and the role's own
/// `usage`, the text status a line per role, and `logs ID --role NAME` that role's log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurmctl_shows_each_role_and_its_logs() {
    let _cluster = cluster::shared().await;
    let tb = testbed_env();
    let state = tempfile::tempdir().unwrap();
    let specs = tempfile::tempdir().unwrap();
    let env = tb.client_env(state.path());
    let path = specs.path().join("rl.yaml");
    std::fs::write(
        &path,
        "name: rl-ctl\ntime: \"00:10:00\"\nnccl_probe: never\nroles:\n  controller: {nodes: 1, gpus_per_node: 0, cpus_per_task: 1, command: \"echo controller-says-hi\"}\n  rollout: {nodes: 1, gpus_per_node: 1, cpus_per_task: 1, command: \"echo rollout-says-hi\", env: {WORKERS: \"16\"}}\n",
    )
    .unwrap();
    let ctl = |args: &[&str]| run(&example("slurmctl"), args, &env, Duration::from_secs(240));
    let submitted = ctl(&["submit", path.to_str().unwrap(), "--json"]);
    submitted.expect_code(0);
    let id = submitted.json_lines()[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    ctl(&["watch", &id, "--interval", "0.5"]).expect_code(0);
    let status = ctl(&["status", &id, "--json"]);
    status.expect_code(0);
    let lines = status.json_lines();
    let roles: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| (l["role"].as_str().unwrap(), l["state"].as_str().unwrap()))
        .collect();
    assert_eq!(roles, [("controller", "COMPLETE"), ("rollout", "COMPLETE")]);
    assert!(lines.iter().all(|l| l["id"] == id.as_str()));
    assert!(lines
        .iter()
        .all(|l| l["role_nodes"].as_array().is_some_and(|n| n.len() == 1)));
    // Each line's usage is its role's own: the controller holds no GPU, the rollout one.
    let gpus: Vec<u64> = lines
        .iter()
        .map(|l| l["usage"]["gpus"].as_u64().unwrap_or_else(|| panic!("{l}")))
        .collect();
    assert_eq!(gpus, [0, 1], "{lines:?}");
    let text = ctl(&["status", &id]);
    text.expect_code(0);
    assert!(
        text.stdout.contains(&format!("{id} roles:")),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("  rollout     COMPLETE"),
        "{}",
        text.stdout
    );
    let log = ctl(&["logs", &id, "--role", "rollout"]);
    log.expect_code(0);
    assert_eq!(log.stdout.trim(), "rollout-says-hi");
    let unknown = ctl(&["logs", &id, "--role", "critic"]);
    unknown.expect_code(2);
    assert!(
        unknown.stderr.contains("controller, rollout"),
        "{}",
        unknown.stderr
    );
}

/// An infra failure of one role (an Xid on its node) is retried as the whole job, kept
/// off that role's node: the retry runs every role again, elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_infra_failure_of_a_role_retries_the_job_off_its_nodes() {
    let _cluster = cluster::exclusive().await;
    let h = harness();
    let marker = format!(
        "$HOME/.slurm-run-roles-xid-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let spec = roles_spec(
        "roles-xid",
        vec![
            (
                "gpu",
                role(&format!(
                    "for _ in $(seq 1 600); do [ -e helper-up ] && break; sleep 0.2; done; if [ -e {marker} ]; then echo fine; touch gpu-done; else touch {marker}; echo 'NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus' >&2; exit 1; fi"
                )),
            ),
            (
                "helper",
                beside(
                    "gpu",
                    "touch helper-up; for _ in $(seq 1 1500); do [ -e gpu-done ] && exit 0; sleep 0.2; done; exit 1",
                ),
            ),
        ],
    );
    let first = h
        .backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap();
    let (retries, errors) = slurm_run_testsupport::backend::watch_retrying(
        &h.backend,
        std::slice::from_ref(first.id()),
        1,
        240,
    )
    .await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(retries.len(), 1, "{retries:?}");
    let first = h.backend.record(first.id()).await.unwrap();
    let retry = h.backend.record(retries[0].id()).await.unwrap();
    assert_eq!(first.roles()["gpu"].state(), JobState::Error, "{first:?}");
    assert!(first.roles()["gpu"].node_fault(), "{first:?}");
    assert_eq!(
        first.roles()["helper"].state(),
        JobState::Canceled,
        "{first:?}"
    );
    assert_eq!(retry.state(), JobState::Complete, "{retry:?}");
    assert_eq!(
        retry.excluded_nodes(),
        first.roles()["gpu"].nodes(),
        "{retry:?}"
    );
    assert_ne!(retry.roles()["gpu"].nodes(), first.roles()["gpu"].nodes());
    assert!(retry
        .roles()
        .values()
        .all(|r| r.state() == JobState::Complete));
}

/// A multi-role job as any job: it waits for its parent (`after`), a child waits for
/// it by its id, and its secret reaches every role (one in a container, one bare)
/// through the sidecar, shredded at the end, never in its script, logs or record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_and_dependencies_work_for_a_multi_role_job() {
    let _cluster = cluster::shared().await;
    let h = harness();
    with_credentials(&h).await;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let (parent_done, roles_done) = (
        format!("$HOME/.slurm-run-roles-parent-{stamp}"),
        format!("$HOME/.slurm-run-roles-done-{stamp}"),
    );
    let parent = h
        .backend
        .submit(
            &small_spec("roles-parent", &format!("sleep 2; touch {parent_done}")),
            SubmitOptions::default(),
        )
        .await
        .unwrap();
    let secret = "role-tok-51e2d84b7f3f9a0c";
    let report = format!(
        "echo \"role=$SLURM_RUN_ROLE parent=$([ -e {parent_done} ] && echo done || echo missing) len=${{#SLURM_RUN_TEST_ROLES_TOKEN}} leak=$SLURM_RUN_TEST_ROLES_TOKEN\""
    );
    let mut boxed = role(&report);
    boxed.image = Some(registry_image(&h, "slurm-run/tiny:1"));
    let bare = role(&format!("{report}; touch {roles_done}"));
    let mut spec = roles_spec("roles-deps", vec![("boxed", boxed), ("bare", bare)]);
    spec.secrets = vec!["SLURM_RUN_TEST_ROLES_TOKEN".into()];
    let options = SubmitOptions {
        after: vec![Dependency::ok(parent.id().clone())],
        secret_values: Some(
            [("SLURM_RUN_TEST_ROLES_TOKEN".to_string(), secret.to_string())].into(),
        ),
        ..SubmitOptions::default()
    };
    let roles_job = h.backend.submit(&spec, options).await.unwrap();
    let child = h
        .backend
        .submit(
            &small_spec(
                "roles-child",
                &format!("[ -e {roles_done} ] && echo roles-were-done"),
            ),
            SubmitOptions {
                after: vec![Dependency::ok(roles_job.id().clone())],
                ..SubmitOptions::default()
            },
        )
        .await
        .unwrap();
    let script = staged_script(&h, &roles_job).await;
    let parent_native = parent.backend_ref().unwrap().native_id.clone();
    assert!(
        script.contains(&format!("#SBATCH --dependency=afterok:{parent_native}\n")),
        "{script}"
    );
    assert!(script.contains("source") && !script.contains(secret));
    let record = wait_terminal(&h.backend, roles_job.id(), 240)
        .await
        .into_record();
    assert_eq!(record.state(), JobState::Complete, "{record:?}");
    let len = secret.len();
    // The parent's marker is in the cluster's home, which the container need not mount:
    // the bare role checks it.
    for name in ["boxed", "bare"] {
        let log = role_log(&h, &record, name).await;
        assert!(
            log.contains(&format!("role={name} parent=")),
            "{name}: {log}"
        );
        assert!(log.contains(&format!(" len={len} leak=")), "{name}: {log}");
        assert!(name != "bare" || log.contains("parent=done"), "{log}");
        assert!(!log.contains(secret), "{name}: {log}");
    }
    let sidecar = format!("{}/env/job_{}.env", record.results_dir(), record.id());
    let gone = remote(
        &h,
        Command::new("bash")
            .arg("-c")
            .arg("test -e \"$1\" && echo present || echo gone")
            .arg("x")
            .arg(&sidecar),
    )
    .await;
    assert_eq!(gone.trim(), "gone");
    let json = serde_json::to_string(&record).unwrap();
    assert!(!json.contains(secret));
    let child = wait_terminal(&h.backend, child.id(), 240)
        .await
        .into_record();
    assert_eq!(child.state(), JobState::Complete, "{child:?}");
    let child_log = h
        .backend
        .logs(child.id(), LogOptions::of(LogStream::Out))
        .await
        .unwrap();
    assert_eq!(child_log.trim(), "roles-were-done");
    remote(
        &h,
        Command::new("bash")
            .arg("-c")
            .arg("rm -f -- \"$HOME/.slurm-run-roles-parent-$1\" \"$HOME/.slurm-run-roles-done-$1\"")
            .arg("x")
            .arg(stamp.to_string()),
    )
    .await;
}

/// The multirole batch script, as a submit renders it, passes shellcheck at warning level
/// (the remote scripts' own check is in `scripts`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_multirole_script_passes_shellcheck() {
    let _cluster = cluster::shared().await;
    let h = harness();
    let mut spec = roles_spec(
        "roles-lint",
        vec![
            ("a", role("true")),
            ("b", role("true")),
            ("c", beside("a", "true")),
        ],
    );
    spec.secrets = vec!["SLURM_RUN_TEST_ROLES_TOKEN".into()];
    let script = h.backend.render_script(&spec).await.unwrap();
    assert!(script.contains("#SBATCH hetjob"), "{script}");
    let mut child = std::process::Command::new("shellcheck")
        .args(["-s", "bash", "-S", "warning", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("shellcheck runs (testbed/up installs it)");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}\n{script}",
        String::from_utf8_lossy(&output.stdout)
    );
}
