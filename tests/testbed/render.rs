//! Rendered scripts run for real on the local SLURM test bed: log layout, rendezvous, env sidecar.
//!
//! The test bed is reached through the library's own `Ssh2Transport` (strict host keys).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use slurm_core::{
    Command, Output, Renderer, ScriptContext, SecretRegistry, TemplateKind, Transport,
};
use slurm_render::HandlebarsRenderer;
use slurm_run_testsupport::{cluster, testbed_env};
use slurm_ssh::{Ssh2Transport, Ssh2TransportBuilder};

/// How long a test job may take from sbatch to a terminal state.
const JOB_DEADLINE: Duration = Duration::from_secs(240);
/// How often sacct is asked while waiting.
const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// The test bed as `testbed/env` describes it.
struct TestBed {
    transport: Ssh2Transport,
    runtime: tokio::runtime::Runtime,
    partition: String,
    results_root: String,
}

impl TestBed {
    fn from_env() -> Self {
        let tb = testbed_env();
        let transport = Ssh2Transport::new(
            Ssh2TransportBuilder::from_lookup(tb.lookup()).expect("the test bed's ssh settings"),
        )
        .expect("an ssh2 transport");
        TestBed {
            transport,
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime"),
            partition: tb.get("SLURM_PARTITION").to_string(),
            results_root: tb.get("SLURM_BASE_RESULTS_DIR").to_string(),
        }
    }

    /// Run `command` on the login host with `stdin`.
    fn ssh(&self, command: &Command, stdin: &[u8]) -> Output {
        let command = command.clone().stdin(stdin.to_vec());
        self.runtime
            .block_on(self.transport.run(&command))
            .unwrap_or_else(|e| panic!("`{}` did not run on the test bed: {e}", command.label()))
    }

    /// Like [`TestBed::ssh`], and the command must succeed; returns its stdout.
    fn run(&self, command: &Command, stdin: &[u8]) -> String {
        let out = self.ssh(command, stdin);
        assert!(
            out.success(),
            "`{}` failed on the test bed ({}): {}",
            command.label(),
            out.status,
            out.stderr_text()
        );
        String::from_utf8(out.stdout).expect("utf-8 output")
    }

    /// Write `contents` to `path` with mode 600.
    fn write_private(&self, path: &str, contents: &[u8]) {
        self.run(
            &Command::bash_script(r#"umask 077 && cat > "$1""#, [path]),
            contents,
        );
    }

    /// Remove a scratch folder made by [`TestBed::scratch`].
    fn remove(&self, dir: &str) {
        assert!(dir.contains("/render-testbed/"));
        self.run(&Command::new("rm").arg("-rf").arg(dir), b"");
    }

    fn read(&self, path: &str) -> String {
        self.run(&Command::new("cat").arg(path), b"")
    }

    fn exists(&self, path: &str) -> bool {
        let out = self.ssh(&Command::new("test").arg("-e").arg(path), b"");
        match out.status {
            0 => true,
            1 => false,
            other => panic!("`test -e` over ssh ended with {other}"),
        }
    }

    /// A fresh folder under the shared results root, seen by both nodes.
    fn scratch(&self, label: &str) -> String {
        let unique = format!("{label}-{}-{}", std::process::id(), rand::random::<u32>());
        let dir = format!("{}/render-testbed/{unique}", self.results_root);
        self.run(
            &Command::new("mkdir").arg("-p").arg(format!("{dir}/logs")),
            b"",
        );
        dir
    }

    /// `sbatch --parsable` the script at `path`; the SLURM job id.
    fn sbatch(&self, path: &str) -> String {
        let out = self.run(&Command::new("sbatch").arg("--parsable").arg(path), b"");
        let line = out
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        let id = line.split(';').next().unwrap_or("").trim().to_string();
        assert!(
            !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()),
            "sbatch --parsable printed {out:?}"
        );
        id
    }

    /// The job's state per sacct (first word, `+` dropped), or `None` before sacct knows it.
    fn state(&self, id: &str) -> Option<String> {
        let out = self.run(
            &Command::new("sacct").args(["-j", id, "-X", "-n", "-P", "-o", "State"]),
            b"",
        );
        let first = out.lines().next()?.split_whitespace().next()?;
        Some(first.trim_end_matches('+').to_string())
    }

    /// Poll sacct until the job is terminal or the deadline passes.
    fn wait_terminal(&self, id: &str) -> String {
        let start = Instant::now();
        loop {
            if let Some(state) = self.state(id) {
                let terminal = !matches!(
                    state.as_str(),
                    "PENDING" | "RUNNING" | "REQUEUED" | "RESIZING" | "SUSPENDED" | "COMPLETING"
                );
                if terminal {
                    return state;
                }
            }
            assert!(
                start.elapsed() < JOB_DEADLINE,
                "job {id} not terminal after {JOB_DEADLINE:?}"
            );
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// Everything in the job's log files, for failure messages.
    fn diagnostics(&self, log_dir: &str) -> String {
        self.ssh(
            &Command::bash_script(r#"for f in "$1"/* "$1"/*/*; do [ -f "$f" ] && { echo "== $f"; tail -n 40 "$f"; }; done"#, [log_dir]),
            b"",
        )
        .stdout
        .into_iter()
        .map(char::from)
        .collect()
    }
}

/// The hex sha-256 of `text`, computed locally with `sha256sum`.
fn sha256_hex(text: &str) -> String {
    use std::io::Write;
    use std::process::{Command as Process, Stdio};
    let mut child = Process::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sha256sum runs");
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("sha256sum finishes");
    String::from_utf8(out.stdout).expect("utf-8")[..64].to_string()
}

/// A secret value for one test, never printed.
fn fresh_secret() -> String {
    format!(
        "s3cr3t-{:016x}{:016x}",
        rand::random::<u64>(),
        rand::random::<u64>()
    )
}

/// Prints the secret's length and hash (never the value) and the rendezvous view of this node.
const PROBE: &str = r#"echo "probe host=${SLURMD_NODENAME:-$(hostname)} WORLD_SIZE=${WORLD_SIZE:-unset} NODE_RANK=${NODE_RANK:-unset} TAO_NODE_RANK=${TAO_NODE_RANK:-unset} MASTER_ADDR=${MASTER_ADDR:-unset} MASTER_PORT=${MASTER_PORT:-unset} TAO_NODE_COUNT=${TAO_NODE_COUNT:-unset} TAO_GPUS_PER_NODE=${TAO_GPUS_PER_NODE:-unset} secret_len=${#MY_SECRET} secret_sha=$(printf %s "$MY_SECRET" | sha256sum | cut -c1-64)"; echo "probe-stderr $(hostname)" >&2"#;

struct Job {
    dir: String,
    name: String,
    id: String,
    log_dir: String,
    env_file: String,
}

/// Render, lint, upload and submit one job with an env sidecar holding `secret`.
fn submit_job(
    bed: &TestBed,
    kind: TemplateKind,
    nodes: u32,
    label: &str,
    command: &str,
    secret: &str,
) -> Job {
    let dir = bed.scratch(label);
    let name = format!("render-{label}-{:06x}", rand::random::<u32>() & 0xff_ffff);
    let env_file = format!("{dir}/{name}.env");
    bed.write_private(&env_file, format!("export MY_SECRET={secret}\n").as_bytes());
    assert_eq!(
        bed.run(&Command::new("stat").args(["-c", "%a"]).arg(&env_file), b"")
            .trim(),
        "600"
    );
    let context = ScriptContext {
        job_name: name.clone(),
        partition: Some(bed.partition.clone()),
        account: None,
        nodes,
        gpus_per_node: 1,
        cpus_per_task: 1,
        memory: None,
        time: "00:10:00".into(),
        child_timeout_secs: 300,
        log_dir: format!("{dir}/logs"),
        results_dir: format!("{dir}/results"),

        results_dir_in_job: format!("{dir}/results"),
        image: None,
        container_mounts: Vec::new(),
        command: command.into(),
        env_file: Some(env_file.clone()),
        env: Vec::new(),
        extra_env: Vec::new(),
        requeue: false,
        exclusive: false,
        extra_sbatch: Vec::new(),
        dependency: None,
        exclude: Vec::new(),
        array: None,
        probe: false,
        knobs_file: None,
        roles: Vec::new(),
        heterogeneous: false,
        roles_dir: None,
        resume: None,
    };
    let renderer = HandlebarsRenderer::new();
    let script = renderer.render(kind, &context).expect("renders");
    let mut secrets = SecretRegistry::new();
    secrets.register("MY_SECRET", secret);
    renderer
        .lint(&script, &secrets)
        .expect("the rendered script passes the lint");
    let script_path = format!("{dir}/{name}.sbatch");
    bed.run(
        &Command::bash_script(r#"cat > "$1""#, [&script_path]),
        script.as_bytes(),
    );
    let id = bed.sbatch(&script_path);
    Job {
        dir,
        name,
        id,
        log_dir: context.log_dir,
        env_file,
    }
}

/// The `probe` lines of main.out as maps of key to value.
fn probes(main_out: &str) -> Vec<std::collections::BTreeMap<String, String>> {
    main_out
        .lines()
        .filter_map(|l| l.strip_prefix("probe "))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

#[test]
fn single_node_job_logs_in_the_reference_layout_and_shreds_its_sidecar() {
    let _cluster = cluster::shared_blocking();
    let bed = TestBed::from_env();
    let secret = fresh_secret();
    let job = submit_job(&bed, TemplateKind::SingleNode, 1, "single", PROBE, &secret);
    let folder = format!("{}/{}-{}", job.log_dir, job.name, job.id);
    assert_eq!(
        bed.wait_terminal(&job.id),
        "COMPLETED",
        "{}",
        bed.diagnostics(&job.log_dir)
    );
    let main_out = bed.read(&format!("{folder}/main.out"));
    let main_err = bed.read(&format!("{folder}/main.err"));
    assert!(main_err.contains("probe-stderr"), "main.err: {main_err}");
    assert!(!main_out.contains(&secret) && !main_err.contains(&secret));
    let probes = probes(&main_out);
    assert_eq!(probes.len(), 1, "main.out: {main_out}");
    let p = &probes[0];
    assert_eq!(p["secret_len"], secret.len().to_string());
    assert_eq!(p["secret_sha"], sha256_hex(&secret));
    assert_eq!(p["WORLD_SIZE"], "unset", "single node has no rendezvous");
    // Slurm's own files sit next to the folder, where sbatch could open them.
    assert!(bed.exists(&format!(
        "{}/{}-{}.slurm.out",
        job.log_dir, job.name, job.id
    )));
    assert!(
        !bed.exists(&job.env_file),
        "the env sidecar survived the job"
    );
    bed.remove(&job.dir);
}

#[test]
fn two_node_job_sees_the_rendezvous_on_each_node() {
    let _cluster = cluster::shared_blocking();
    let bed = TestBed::from_env();
    let secret = fresh_secret();
    let job = submit_job(&bed, TemplateKind::MultiNode, 2, "multi", PROBE, &secret);
    let folder = format!("{}/{}-{}", job.log_dir, job.name, job.id);
    assert_eq!(
        bed.wait_terminal(&job.id),
        "COMPLETED",
        "{}",
        bed.diagnostics(&job.log_dir)
    );
    let main_out = bed.read(&format!("{folder}/main.out"));
    let probes = probes(&main_out);
    assert_eq!(
        probes.len(),
        2,
        "one probe line per node; main.out: {main_out}"
    );
    let ranks: BTreeSet<&str> = probes.iter().map(|p| p["NODE_RANK"].as_str()).collect();
    assert_eq!(ranks, BTreeSet::from(["0", "1"]), "{main_out}");
    let hosts: BTreeSet<&str> = probes.iter().map(|p| p["host"].as_str()).collect();
    assert_eq!(hosts.len(), 2, "the two tasks ran on two nodes: {main_out}");
    let masters: BTreeSet<&str> = probes.iter().map(|p| p["MASTER_ADDR"].as_str()).collect();
    assert_eq!(masters.len(), 1, "one MASTER_ADDR: {main_out}");
    assert!(
        hosts.contains(masters.first().unwrap()),
        "MASTER_ADDR is a node of the job"
    );
    for p in &probes {
        assert_eq!(p["WORLD_SIZE"], "2");
        assert_eq!(p["TAO_NODE_COUNT"], "2");
        assert_eq!(p["TAO_GPUS_PER_NODE"], "1");
        assert_eq!(p["TAO_NODE_RANK"], p["NODE_RANK"]);
        assert_eq!(p["MASTER_PORT"], "29500");
        assert_eq!(
            p["secret_len"],
            secret.len().to_string(),
            "each node saw the secret"
        );
        assert_eq!(p["secret_sha"], sha256_hex(&secret));
    }
    assert!(!main_out.contains(&secret));
    assert!(
        !bed.exists(&job.env_file),
        "the env sidecar survived the job"
    );
    bed.remove(&job.dir);
}

#[test]
fn a_cancelled_job_still_shreds_its_sidecar() {
    let _cluster = cluster::shared_blocking();
    let bed = TestBed::from_env();
    let secret = fresh_secret();
    let command = "echo started; sleep 300";
    let job = submit_job(
        &bed,
        TemplateKind::SingleNode,
        1,
        "cancel",
        command,
        &secret,
    );
    let main_out = format!("{}/{}-{}/main.out", job.log_dir, job.name, job.id);
    // Wait until the step runs (its first line is in main.out), then cancel.
    let start = Instant::now();
    loop {
        if bed.exists(&main_out) && bed.read(&main_out).contains("started") {
            break;
        }
        assert!(
            start.elapsed() < JOB_DEADLINE,
            "job {} never started: {}",
            job.id,
            bed.diagnostics(&job.log_dir)
        );
        std::thread::sleep(POLL_INTERVAL);
    }
    assert!(
        bed.exists(&job.env_file),
        "the sidecar is there while the job runs"
    );
    bed.run(&Command::new("scancel").arg(&job.id), b"");
    let state = bed.wait_terminal(&job.id);
    assert_eq!(state, "CANCELLED");
    // The trap runs as the batch shell exits; give it the same deadline as the job.
    let start = Instant::now();
    while bed.exists(&job.env_file) {
        assert!(
            start.elapsed() < JOB_DEADLINE,
            "the env sidecar survived the cancel"
        );
        std::thread::sleep(POLL_INTERVAL);
    }
    bed.remove(&job.dir);
}
