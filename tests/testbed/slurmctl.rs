//! Every slurmctl command against the local test bed: output (human and JSON Lines) and exit status,
//! including bad input (a missing field, an unknown partition, a wall time above the limit, hostile names).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use slurm_run_testsupport::examples::{example, install_registry_credentials, run, Run};
use slurm_run_testsupport::{cluster, testbed_env, Testbed};

const VOCABULARY: &[&str] = &[
    "SUBMITTING",
    "PENDING",
    "RUNNING",
    "COMPLETE",
    "ERROR",
    "CANCELED",
    "NOT_SUBMITTED",
    "UNKNOWN",
];

/// slurmctl with the test bed's environment and a record folder of its own.
struct Ctl {
    tb: Testbed,
    state: tempfile::TempDir,
    specs: tempfile::TempDir,
}

impl Ctl {
    fn new() -> Ctl {
        Ctl {
            tb: testbed_env(),
            state: tempfile::tempdir().unwrap(),
            specs: tempfile::tempdir().unwrap(),
        }
    }

    fn env(&self) -> Vec<(String, String)> {
        self.tb.client_env(self.state.path())
    }

    fn run(&self, args: &[&str]) -> Run {
        self.run_with(args, &[], &[])
    }

    /// Run with extra variables, and without the variables named in `remove`.
    fn run_with(&self, args: &[&str], extra: &[(&str, &str)], remove: &[&str]) -> Run {
        let mut env: Vec<(String, String)> = self
            .env()
            .into_iter()
            .filter(|(k, _)| !remove.contains(&k.as_str()))
            .collect();
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        run(&example("slurmctl"), args, &env, Duration::from_secs(240))
    }

    /// Write a spec file and return its path.
    fn spec(&self, file: &str, text: &str) -> String {
        let path: PathBuf = self.specs.path().join(file);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    /// The number of records in this test's state folder (in its SQLite database, or
    /// its JSON records, whichever slurmctl chose).
    fn record_count(&self) -> usize {
        slurm_records::RecordsLocation::default_for(self.state.path())
            .open()
            .unwrap()
            .list(&slurm_core::RecordFilter::any())
            .unwrap()
            .len()
    }

    /// Submit a spec with `--json` and return its one JSON object.
    fn submit(&self, spec: &str) -> Value {
        let out = self.run(&["submit", spec, "--json"]);
        out.expect_code(0);
        let lines = out.json_lines();
        assert_eq!(lines.len(), 1, "{}", out.stdout);
        lines.into_iter().next().unwrap()
    }
}

fn small_spec(name: &str, command: &str) -> String {
    format!(
        "name: {name}\ncommand: {}\ngpus_per_node: 1\ncpus_per_task: 1\ntime: \"00:05:00\"\n",
        serde_json::to_string(command).unwrap()
    )
}

fn id_of(job: &Value) -> String {
    job["id"].as_str().expect("an id").to_string()
}

fn assert_job_object(job: &Value) {
    for key in ["id", "state", "slurm_job_id", "results_dir", "retry_of"] {
        assert!(job.get(key).is_some(), "no `{key}` in {job}");
    }
    let state = job["state"].as_str().unwrap();
    assert!(
        VOCABULARY.contains(&state),
        "state {state} is not in the vocabulary"
    );
}

#[test]
fn preflight_passes_in_text_and_json() {
    let _cluster = cluster::shared_blocking();
    let ctl = Ctl::new();
    let out = ctl.run(&["preflight"]);
    out.expect_code(0);
    assert!(out.stdout.contains("partition gpu"), "{}", out.stdout);
    for line in out.stdout.lines() {
        assert!(line.starts_with("ok "), "a failed or odd line: {line}");
    }
    assert!(!out.stdout.contains('\x1b'), "colour on a pipe");
    assert!(out.stderr.is_empty(), "progress on a pipe: {}", out.stderr);

    let out = ctl.run(&["preflight", "--json"]);
    out.expect_code(0);
    let checks = out.json_lines();
    assert!(checks.len() >= 5, "{}", out.stdout);
    for check in &checks {
        assert_eq!(check["ok"], Value::Bool(true), "{check}");
        assert!(
            check["check"].is_string() && check["remedy"].is_string(),
            "{check}"
        );
    }
    let names: Vec<&str> = checks
        .iter()
        .map(|c| c["check"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"ssh") && names.contains(&"partition gpu"),
        "{names:?}"
    );
}

#[test]
fn a_job_through_submit_status_watch_logs_and_records() {
    let _cluster = cluster::shared_blocking();
    let ctl = Ctl::new();
    let spec = ctl.spec(
        "hello.yaml",
        &small_spec(
            "hello",
            "sleep 2; echo slurmctl-out-marker; echo slurmctl-err-marker >&2; echo last-line",
        ),
    );
    let out = ctl.run(&["submit", &spec, "--json"]);
    out.expect_code(0);
    assert!(out.stderr.is_empty(), "stderr on a pipe: {}", out.stderr);
    let job = out.json_lines().remove(0);
    assert_job_object(&job);
    let id = id_of(&job);
    assert!(id.starts_with("hello-"), "{id}");
    assert_eq!(job["state"], "PENDING");
    assert!(job["slurm_job_id"].as_u64().is_some(), "{job}");
    assert!(job["retry_of"].is_null());
    let root = ctl.tb.get("SLURM_BASE_RESULTS_DIR");
    assert_eq!(job["results_dir"].as_str().unwrap(), format!("{root}/{id}"));

    let out = ctl.run(&["status", &id, "--json"]);
    out.expect_code(0);
    let status = out.json_lines().remove(0);
    assert_job_object(&status);
    assert_eq!(id_of(&status), id);
    assert_eq!(status["slurm_job_id"], job["slurm_job_id"]);

    let out = ctl.run(&["watch", &id, "--json", "--interval", "0.5"]);
    out.expect_code(0);
    let events = out.json_lines();
    assert!(!events.is_empty(), "watch printed nothing");
    for event in &events {
        assert_job_object(event);
        assert_eq!(id_of(event), id);
    }
    let last = events.last().unwrap();
    assert_eq!(last["state"], "COMPLETE", "{}", out.stdout);

    // Human status: an aligned table, no colour on a pipe.
    let out = ctl.run(&["status", &id]);
    out.expect_code(0);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("STATE"),
        "{}",
        out.stdout
    );
    assert_eq!(
        lines[0].find("STATE"),
        lines[1].find("COMPLETE"),
        "columns do not line up:\n{}",
        out.stdout
    );
    assert!(!out.stdout.contains('\x1b'));

    let out = ctl.run(&["logs", &id]);
    out.expect_code(0);
    assert!(out.stdout.contains("slurmctl-out-marker"), "{}", out.stdout);
    assert!(!out.stdout.contains("slurmctl-err-marker"));
    let out = ctl.run(&["logs", &id, "--err"]);
    out.expect_code(0);
    assert!(out.stdout.contains("slurmctl-err-marker"), "{}", out.stdout);
    let out = ctl.run(&["logs", &id, "--tail", "1"]);
    out.expect_code(0);
    assert_eq!(out.stdout.trim(), "last-line");
    let out = ctl.run(&["logs", &id, "--json"]);
    out.expect_code(0);
    let log = out.json_lines().remove(0);
    assert_job_object(&log);
    assert_eq!(log["stream"], "main.out");
    assert!(log["text"]
        .as_str()
        .unwrap()
        .contains("slurmctl-out-marker"));
    // Following a finished job prints what it wrote and ends.
    let out = ctl.run(&["logs", &id, "--follow", "--interval", "0.5"]);
    out.expect_code(0);
    assert!(out.stdout.contains("slurmctl-out-marker") && out.stdout.contains("last-line"));

    let out = ctl.run(&["records", "--json", "--state", "COMPLETE"]);
    out.expect_code(0);
    let records = out.json_lines();
    assert_eq!(records.len(), 1, "{}", out.stdout);
    assert_eq!(id_of(&records[0]), id);
    let out = ctl.run(&["records", "--json", "--state", "running,pending"]);
    out.expect_code(0);
    assert!(out.json_lines().is_empty(), "{}", out.stdout);
    let out = ctl.run(&["records"]);
    out.expect_code(0);
    assert!(out.stdout.contains(&id) && out.stdout.contains("COMPLETE"));
    let out = ctl.run(&["records", "--state", "DONE"]);
    out.expect_code(2);
    assert!(out.stderr.contains("state"), "{}", out.stderr);

    // A watch of a job already finished ends at once with its final word.
    let out = ctl.run(&["watch", &id, "--json"]);
    out.expect_code(0);
    let events = out.json_lines();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["event"], "final");
    assert_eq!(events[0]["state"], "COMPLETE");
}

#[test]
fn watch_exits_4_when_a_job_fails() {
    let _cluster = cluster::shared_blocking();
    let ctl = Ctl::new();
    let spec = ctl.spec(
        "fail.yaml",
        &small_spec("fails", "echo about to fail; exit 3"),
    );
    let id = id_of(&ctl.submit(&spec));
    let out = ctl.run(&["watch", &id, "--json", "--interval", "0.5"]);
    out.expect_code(4);
    let last = out.json_lines().pop().unwrap();
    assert_eq!(last["state"], "ERROR");
    assert_eq!(last["err_class"], "ERR_PROGRAM");
    // Human form: the final table says ERROR.
    let out = ctl.run(&["watch", &id]);
    out.expect_code(4);
    assert!(out.stdout.contains("ERROR"), "{}", out.stdout);
}

#[test]
fn cancel_a_running_job() {
    let _cluster = cluster::shared_blocking();
    let ctl = Ctl::new();
    let spec = ctl.spec("sleep.yaml", &small_spec("sleeper", "sleep 300"));
    let id = id_of(&ctl.submit(&spec));
    let out = ctl.run(&["cancel", &id, "--json"]);
    out.expect_code(0);
    let job = out.json_lines().remove(0);
    assert_job_object(&job);
    assert_eq!(job["state"], "CANCELED", "{job}");
    // Cancelling again is a success that changes nothing; watch reports CANCELED with 4.
    let out = ctl.run(&["cancel", &id]);
    out.expect_code(0);
    assert!(out.stdout.contains("CANCELED"));
    ctl.run(&["watch", &id]).expect_code(4);
}

#[test]
fn render_prints_the_script_and_never_a_secret() {
    let _cluster = cluster::shared_blocking();
    let ctl = Ctl::new();
    let secret = "s3cr3t-value-5d41402abc4b2a76";
    let spec = ctl.spec(
        "secret.yaml",
        "name: render-me\ncommand: \"python train.py --token-from-env\"\nsecrets: [SLURMCTL_TEST_TOKEN]\nnodes: 2\ngpus_per_node: 1\ncpus_per_task: 1\ntime: \"00:05:00\"\n",
    );
    let env = [("SLURMCTL_TEST_TOKEN", secret)];
    let out = ctl.run_with(&["render", &spec], &env, &[]);
    out.expect_code(0);
    assert!(
        out.stdout
            .starts_with("#!/bin/bash\n#SBATCH --job-name=render-me-"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("#SBATCH --nodes=2"));
    assert!(
        out.stdout.contains("source \"$slurm_run_env_file\""),
        "the script sources the sidecar"
    );
    assert!(!out.stdout.contains(secret) && !out.stderr.contains(secret));

    let out = ctl.run_with(&["render", &spec, "--json"], &env, &[]);
    out.expect_code(0);
    let rendered = out.json_lines().remove(0);
    assert!(rendered["id"].as_str().unwrap().starts_with("render-me-"));
    assert!(rendered["script"]
        .as_str()
        .unwrap()
        .contains("#SBATCH --partition=gpu"));
    assert!(!out.stdout.contains(secret));
    assert_eq!(ctl.record_count(), 0, "render must not submit");
}

#[test]
fn a_spec_missing_a_field_is_exit_2_naming_it() {
    let _cluster = cluster::shared_blocking();
    let ctl = Ctl::new();
    let spec = ctl.spec("nocommand.yaml", "name: incomplete\ngpus_per_node: 1\n");
    for command in ["submit", "render", "preflight"] {
        let out = ctl.run(&[command, &spec]);
        out.expect_code(2);
        assert!(
            out.stderr.contains("invalid command")
                && out.stderr.contains("missing field `command`"),
            "{command}: {}",
            out.stderr
        );
    }
    let out = ctl.run(&["submit", &spec, "--json"]);
    out.expect_code(2);
    let error: Value = serde_json::from_str(out.stderr.trim()).unwrap();
    assert_eq!(error["field"], "command");
    assert_eq!(error["exit_code"], 2);
    assert!(out.stdout.is_empty());
    assert_eq!(ctl.record_count(), 0);
}

#[test]
fn an_unknown_partition_is_exit_2_naming_it() {
    let _cluster = cluster::shared_blocking();
    let ctl = Ctl::new();
    let out = ctl.run(&["preflight", "--partition", "nopart-xyz"]);
    out.expect_code(2);
    assert!(
        out.stdout.contains("FAIL partition nopart-xyz"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("remedy:"), "{}", out.stdout);

    let out = ctl.run(&["preflight", "--partition", "nopart-xyz", "--json"]);
    out.expect_code(2);
    let failed: Vec<Value> = out
        .json_lines()
        .into_iter()
        .filter(|c| c["ok"] == Value::Bool(false))
        .collect();
    assert_eq!(failed.len(), 1, "{}", out.stdout);
    assert_eq!(failed[0]["check"], "partition nopart-xyz");
    assert!(!failed[0]["remedy"].as_str().unwrap().is_empty());

    let spec = ctl.spec(
        "nopart.yaml",
        &format!("{}partition: nopart-xyz\n", small_spec("nopart", "true")),
    );
    let out = ctl.run(&["submit", &spec]);
    out.expect_code(2);
    assert!(
        out.stderr.contains("partition nopart-xyz"),
        "{}",
        out.stderr
    );
    assert_eq!(ctl.record_count(), 0, "nothing may be recorded or staged");
}

#[test]
fn a_wall_time_above_the_partition_limit_is_exit_2_naming_time() {
    let _cluster = cluster::shared_blocking();
    let ctl = Ctl::new();
    let spec = ctl.spec(
        "long.json",
        r#"{"name": "too-long", "command": "true", "gpus_per_node": 1, "time": "05:00:00"}"#,
    );
    let out = ctl.run(&["submit", &spec]);
    out.expect_code(2);
    assert!(out.stderr.contains("invalid time"), "{}", out.stderr);
    assert!(out.stderr.contains("04:00:00"), "{}", out.stderr);
    assert_eq!(ctl.record_count(), 0);

    let out = ctl.run(&["preflight", &spec]);
    out.expect_code(2);
    assert!(out.stdout.contains("FAIL partition gpu"), "{}", out.stdout);
    assert!(out.stdout.contains("lower `time`"), "{}", out.stdout);
}

#[test]
fn hostile_job_names_are_exit_2_naming_name() {
    let _cluster = cluster::shared_blocking();
    let ctl = Ctl::new();
    for (i, name) in ["a;rm -rf ~", "../x", "$(touch /tmp/pwned)"]
        .iter()
        .enumerate()
    {
        let spec = ctl.spec(
            &format!("hostile{i}.yaml"),
            &small_spec(&format!("'{}'", name.replace('\'', "''")), "true"),
        );
        for command in ["submit", "render"] {
            let out = ctl.run(&[command, &spec]);
            out.expect_code(2);
            assert!(
                out.stderr.contains("invalid name"),
                "{name} {command}: {}",
                out.stderr
            );
        }
    }
    assert_eq!(ctl.record_count(), 0);
    // Hostile ids on the command line are refused the same way.
    let out = ctl.run(&["status", "../x"]);
    out.expect_code(2);
    assert!(out.stderr.contains("job id"), "{}", out.stderr);
}

#[test]
fn configuration_and_connection_failures() {
    let _cluster = cluster::shared_blocking();
    let ctl = Ctl::new();
    // A missing variable: exit 2, naming it.
    let spec = ctl.spec("ok.yaml", &small_spec("cfg", "true"));
    let out = ctl.run_with(&["submit", &spec], &[], &["SLURM_PARTITION"]);
    out.expect_code(2);
    assert!(out.stderr.contains("SLURM_PARTITION"), "{}", out.stderr);
    // ...which a flag can supply.
    let out = ctl.run_with(
        &["preflight", "--partition", "gpu"],
        &[],
        &["SLURM_PARTITION"],
    );
    out.expect_code(0);

    // An unknown record: exit 2.
    let out = ctl.run(&["status", "nothing-000000"]);
    out.expect_code(2);
    assert!(out.stderr.contains("nothing-000000"), "{}", out.stderr);

    // A login host that does not answer: exit 3, before anything is recorded.
    let out = ctl.run(&["preflight", "--host", "127.0.0.1:1"]);
    out.expect_code(3);
    assert!(out.stdout.contains("FAIL ssh"), "{}", out.stdout);
    let out = ctl.run(&["submit", &spec, "--host", "127.0.0.1:1"]);
    out.expect_code(3);
    assert!(out.stderr.contains("ssh"), "{}", out.stderr);
    assert_eq!(ctl.record_count(), 0);
}

#[test]
fn submit_after_and_an_array_status_task_by_task() {
    let _cluster = cluster::shared_blocking();
    let ctl = Ctl::new();
    let parent = ctl.spec("parent.yaml", &small_spec("ctl-parent", "sleep 2"));
    let out = ctl.run(&["submit", &parent, "--json"]);
    out.expect_code(0);
    let parent_id = id_of(&out.json_lines()[0]);
    let array = ctl.spec(
        "array.yaml",
        &format!(
            "{}array: {{size: 4, max_parallel: 2}}\n",
            small_spec("ctl-array", "sleep 300")
        ),
    );
    let out = ctl.run(&[
        "submit",
        &array,
        "--after",
        &format!("{parent_id}:ok"),
        "--json",
    ]);
    out.expect_code(0);
    let array_id = id_of(&out.json_lines()[0]);
    // A bad condition names the flag's field and the forms.
    let out = ctl.run(&[
        "submit",
        &array,
        "--after",
        &format!("{parent_id}:sometimes"),
    ]);
    out.expect_code(2);
    assert!(
        out.stderr.contains("after") && out.stderr.contains("notok"),
        "{}",
        out.stderr
    );

    // --json: one object per task, each with the array's fields and its own.
    let out = ctl.run(&["status", &array_id, "--json"]);
    out.expect_code(0);
    let tasks = out.json_lines();
    assert_eq!(tasks.len(), 4, "{}", out.stdout);
    for (index, task) in tasks.iter().enumerate() {
        assert_job_object(task);
        assert_eq!(task["task"], index as u64, "{task}");
        assert_eq!(id_of(task), array_id);
        assert!(task["slurm_task_id"]
            .as_str()
            .unwrap()
            .ends_with(&format!("_{index}")));
    }
    // Text: the array's line, then one line per group of tasks in the same state.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let out = ctl.run(&["status", &array_id]);
        out.expect_code(0);
        let groups: Vec<&str> = out
            .stdout
            .lines()
            .skip_while(|l| !l.ends_with(" tasks:"))
            .skip(1)
            .collect();
        if groups
            .iter()
            .any(|l| l.contains("RUNNING") && l.contains("0-1"))
            && groups
                .iter()
                .any(|l| l.contains("PENDING") && l.contains("2-3"))
        {
            assert_eq!(groups.len(), 2, "{}", out.stdout);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{}", out.stdout);
        std::thread::sleep(Duration::from_millis(500));
    }
    // Cancel two tasks, then the rest.
    let out = ctl.run(&["cancel", &array_id, "--tasks", "2-3", "--json"]);
    out.expect_code(0);
    let out = ctl.run(&["status", &array_id, "--json"]);
    let states: Vec<String> = out
        .json_lines()
        .iter()
        .map(|t| t["state"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(&states[2..], ["CANCELED", "CANCELED"], "{}", out.stdout);
    let out = ctl.run(&["cancel", &array_id, "--json"]);
    out.expect_code(0);
    assert_eq!(out.json_lines()[0]["state"], "CANCELED", "{}", out.stdout);
}

/// Issue 13, point 4: `submit --probe never|always` (overriding the spec), on a
/// two-node job in an image without torchrun: `never` runs it without a probe;
/// `always` queues the probe and the job at once, and `watch` ends the job ERROR with
/// the error naming the switch; a bad mode is bad input.
#[test]
fn submit_probe_switch_never_and_always() {
    let _cluster = cluster::shared_blocking();
    let ctl = Ctl::new();
    let registry = ctl.tb.get("SLURM_RUN_TEST_REGISTRY").to_string();
    install_registry_credentials(&ctl.env());
    let spec = ctl.spec(
        "tiny.yaml",
        &format!(
            "{}nodes: 2\nimage: {registry}/slurm-run/tiny:1\nnccl_probe: always\n",
            small_spec("twonode", "echo ran-without-probe")
        ),
    );

    let out = ctl.run(&["submit", &spec, "--probe", "never", "--json"]);
    out.expect_code(0);
    let id = id_of(&out.json_lines()[0]);
    assert_eq!(ctl.record_count(), 1, "no probe record");
    let out = ctl.run(&["watch", &id]);
    out.expect_code(0);
    let out = ctl.run(&["logs", &id]);
    assert_eq!(
        out.stdout.matches("ran-without-probe").count(),
        2,
        "{}",
        out.stdout
    );

    let out = ctl.run(&["submit", &spec, "--probe", "always"]);
    out.expect_code(0);
    assert!(
        out.stdout
            .contains("it waits on the cluster for NCCL probe nccl-probe-"),
        "{}",
        out.stdout
    );
    assert_eq!(ctl.record_count(), 3, "the job and its probe");
    let id = out
        .stdout
        .split_whitespace()
        .nth(1)
        .expect("submitted ID ...")
        .to_string();
    let out = ctl.run(&["watch", &id, "--json"]);
    out.expect_code(4);
    let last = out.json_lines().pop().unwrap();
    assert_eq!(last["state"], "ERROR", "{}", out.stdout);
    let message = last["message"].as_str().unwrap();
    assert!(
        message.contains("no torchrun") && message.contains("--probe never"),
        "{message}"
    );

    let out = ctl.run(&["submit", &spec, "--probe", "sometimes"]);
    out.expect_code(2);
    assert!(
        out.stderr.contains("auto") && out.stderr.contains("never"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_completed_arrays_tasks_keep_their_exit_codes() {
    // Issue 26, defect 20: once COMPLETE (sacct says 0:0), an array's tasks reported
    // `exit_code` null: a terminal task is not polled again, and its code was not kept.
    let _cluster = cluster::shared_blocking();
    let ctl = Ctl::new();
    let array = ctl.spec(
        "array.yaml",
        &format!(
            "{}array: {{size: 2}}\n",
            small_spec("ctl-array-codes", "true")
        ),
    );
    let out = ctl.run(&["submit", &array, "--json"]);
    out.expect_code(0);
    let id = id_of(&out.json_lines()[0]);
    ctl.run(&["watch", &id, "--interval", "0.5"]).expect_code(0);
    let out = ctl.run(&["status", &id, "--json"]);
    out.expect_code(0);
    let tasks = out.json_lines();
    assert_eq!(tasks.len(), 2, "{}", out.stdout);
    for task in &tasks {
        assert_eq!(task["state"], "COMPLETE", "{task}");
        assert_eq!(task["exit_code"], 0, "{task}");
    }
}

#[test]
fn why_and_a_forecast_in_text_and_json_and_the_timeline_in_status() {
    let _cluster = cluster::exclusive_blocking();
    let ctl = Ctl::new();
    let blocker = ctl.spec(
        "blocker.yaml",
        "name: ctl-why-blocker\ncommand: sleep 600\nnodes: 2\ngpus_per_node: 0\ntime: \"00:20:00\"\nextra_sbatch: [\"--exclusive\"]\n",
    );
    let small = ctl.spec(
        "small.yaml",
        "name: ctl-why\ncommand: \"true\"\ngpus_per_node: 1\ncpus_per_task: 1\ntime: \"00:05:00\"\n",
    );
    let id_of = |run: &Run| run.json_lines()[0]["id"].as_str().unwrap().to_string();
    let block = id_of(ctl.run(&["--json", "submit", &blocker]).expect_code(0));
    let job = id_of(ctl.run(&["--json", "submit", &small]).expect_code(0));
    // Text: the category, the nodes and the remedy; JSON: one object per job.
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let text = loop {
        let run = ctl.run(&["why", &job, &block]);
        run.expect_code(0);
        // The start estimate comes with the backfill pass after the submit.
        if run.stdout.contains("resources [Resources]")
            && run.stdout.contains("RUNNING: running")
            && run.stdout.contains("expected start: 20")
        {
            break run.stdout;
        }
        assert!(std::time::Instant::now() < deadline, "{}", run.stdout);
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(text.contains("partition gpu: 0 idle"), "{text}");
    assert!(text.contains("  remedy: "), "{text}");
    let json = ctl.run(&["--json", "why", &job]);
    let answer = &json.expect_code(0).json_lines()[0];
    assert_eq!(answer["id"], job.as_str());
    assert_eq!(answer["category"], "resources");
    assert_eq!(answer["evidence"]["nodes"]["allocated"], 2);
    assert!(
        answer["start_estimate"].as_str().unwrap().ends_with('Z'),
        "{answer}"
    );
    assert_eq!(answer["evidence"]["limit"], Value::Null);
    // A forecast: one line per partition, the soonest marked, nothing submitted.
    let records = ctl.record_count();
    let several = ctl.spec(
        "several.yaml",
        "name: ctl-why-forecast\ncommand: \"true\"\npartition: \"gpu,nosuch\"\ngpus_per_node: 1\ntime: \"00:05:00\"\n",
    );
    let forecast = ctl.run(&["submit", &several, "--forecast"]);
    let out = &forecast.expect_code(0).stdout;
    assert!(out.contains("gpu") && out.contains("<- soonest"), "{out}");
    assert!(out.contains("nosuch  cannot run: "), "{out}");
    assert!(out.contains("nothing was submitted"), "{out}");
    let lines = ctl
        .run(&["--json", "submit", &several, "--forecast"])
        .expect_code(0)
        .json_lines();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(
        (&lines[0]["partition"], &lines[0]["soonest"]),
        (&Value::from("gpu"), &Value::Bool(true))
    );
    assert!(lines[1]["why_not"].as_str().unwrap().contains("nosuch"));
    let nowhere = ctl.spec(
        "nowhere.yaml",
        "name: ctl-why-nowhere\ncommand: \"true\"\npartition: nosuch\ntime: \"00:05:00\"\n",
    );
    let refused = ctl.run(&["submit", &nowhere, "--forecast"]);
    assert!(refused
        .expect_code(2)
        .stdout
        .contains("no partition of the list can run this job"));
    assert_eq!(ctl.record_count(), records);
    // Once it ran: its timeline in status --json.
    ctl.run(&["cancel", &block]).expect_code(0);
    ctl.run(&["watch", &job]).expect_code(0);
    let status = &ctl
        .run(&["--json", "status", &job])
        .expect_code(0)
        .json_lines()[0];
    for key in ["started_at", "ended_at"] {
        assert!(status[key].as_str().is_some(), "{key}: {status}");
    }
    assert!(status["queue_wait_s"].as_i64().unwrap() >= 1, "{status}");
    // The eligible time is accounting's: null while slurmdbd has not recorded it when the
    // end is read (a job that starts the second it becomes eligible may end first there).
    match status["eligible_at"].as_str() {
        Some(_) => assert!(status["eligible_wait_s"].as_i64().is_some(), "{status}"),
        None => assert_eq!(status["eligible_wait_s"], Value::Null, "{status}"),
    }
}

/// Issue 41: `usage` (table, JSON Lines, SVG) and `timeline --svg` from the records, the
/// cluster's own figures in `status --json`, and a budget that refuses a submit whose
/// worst case exceeds what is left, unless `--over-budget`.
#[test]
fn usage_a_timeline_picture_and_a_budget_that_refuses_unless_over_budget() {
    let _cluster = cluster::shared_blocking();
    let ctl = Ctl::new();
    let spec = ctl.spec("usage.yaml", &small_spec("ctl-usage", "sleep 3"));
    let id = id_of(&ctl.submit(&spec));
    ctl.run(&["watch", &id, "--json", "--interval", "0.5"])
        .expect_code(0);
    let status = ctl.run(&["--json", "status", &id]);
    let job = &status.expect_code(0).json_lines()[0];
    let usage = &job["usage"];
    assert_eq!(usage["gpus"], 1, "{job}");
    let elapsed = usage["elapsed_s"].as_u64().expect("elapsed_s");
    assert!(elapsed >= 3, "{usage}");
    let gpu_hours = usage["gpu_hours"].as_f64().expect("gpu_hours");
    assert!(
        (gpu_hours - elapsed as f64 / 3600.0).abs() < 1e-9,
        "{usage}"
    );
    assert_eq!(
        usage["gpu_util_percent"],
        Value::Null,
        "not accounted: {usage}"
    );
    // One group per name and a total, in JSON Lines; the table; the picture.
    let svg = ctl.specs.path().join("usage.svg");
    let svg_arg = svg.display().to_string();
    let lines = ctl
        .run(&[
            "--json", "usage", "--by", "name", "--since", "1d", "--svg", &svg_arg,
        ])
        .expect_code(0)
        .json_lines();
    let group = lines
        .iter()
        .find(|l| l["key"] == "ctl-usage")
        .expect("a row");
    assert_eq!(group["jobs"], 1, "{group}");
    assert_eq!(group["elapsed_s"], elapsed, "{group}");
    assert!((group["gpu_hours"].as_f64().unwrap() - gpu_hours).abs() < 1e-9);
    assert!(lines.iter().any(|l| l["key"] == "total"), "{lines:?}");
    let picture = std::fs::read_to_string(&svg).expect("the SVG written");
    assert!(
        picture.starts_with("<svg") || picture.starts_with("<?xml"),
        "{picture}"
    );
    assert!(
        picture.contains("<rect") && picture.contains("ctl-usage"),
        "{picture}"
    );
    let table = ctl
        .run(&["usage", "--by", "day"])
        .expect_code(0)
        .stdout
        .clone();
    assert!(
        table.contains("total") && table.contains("GPU-h"),
        "{table}"
    );
    let bad = ctl.run(&["usage", "--by", "colour"]);
    bad.expect_code(2);
    assert!(bad.stderr.contains("--by"), "{}", bad.stderr);
    let timeline = ctl.specs.path().join("timeline.svg");
    let timeline_arg = timeline.display().to_string();
    ctl.run(&["timeline", &id, "--svg", &timeline_arg])
        .expect_code(0);
    let picture = std::fs::read_to_string(&timeline).expect("the timeline written");
    assert!(
        picture.contains("<rect") && picture.contains(&id),
        "{picture}"
    );
    // A budget of 0.01 GPU-hours over a week: the job above used some of it, and one of
    // four GPUs for five minutes (0.33 GPU-hours at worst) is refused; --over-budget
    // submits it.
    let budgets = ctl.spec(
        "budgets.yaml",
        "budgets:\n  - name: team\n    gpu_hours: 0.01\n    window: 7d\n",
    );
    let big = ctl.spec(
        "big.yaml",
        "name: ctl-usage-big\ncommand: \"true\"\ngpus_per_node: 4\ncpus_per_task: 1\ntime: \"00:05:00\"\n",
    );
    let records = ctl.record_count();
    let refused = ctl.run_with(&["submit", &big], &[("SLURM_RUN_BUDGETS", &budgets)], &[]);
    refused.expect_code(2);
    assert!(
        refused.stderr.contains("budget team") && refused.stderr.contains("--over-budget"),
        "{}",
        refused.stderr
    );
    assert_eq!(
        ctl.record_count(),
        records,
        "nothing recorded for a refused submit"
    );
    let used = ctl
        .run_with(
            &["--json", "usage"],
            &[("SLURM_RUN_BUDGETS", &budgets)],
            &[],
        )
        .expect_code(0)
        .json_lines();
    let team = used
        .iter()
        .find(|l| l["budget"] == "team")
        .expect("the budget's use");
    assert!(team["used"].as_f64().unwrap() > 0.0, "{team}");
    let passed = ctl.run_with(
        &["--json", "submit", &big, "--over-budget"],
        &[("SLURM_RUN_BUDGETS", &budgets)],
        &[],
    );
    passed.expect_code(0);
    let big_id = id_of(&passed.json_lines()[0]);
    ctl.run(&["cancel", &big_id]).expect_code(0);
}
