//! The probe job standing for a real one: its resources and env without its command;
//! the whole knob ladder in its one allocation (`probe_ladder.sh`), each rung our
//! all-reduce under torchrun and `timeout` on every node; the markers it prints and the
//! files it leaves in its job folder.

use std::time::Duration;

use super::options::{KnobSet, ProbeOptions};
use crate::names::validate_shell_name;
use crate::spec::{JobSpec, NcclProbe, Resources, WallTime};
use crate::transport::shell_quote;
use crate::{Error, Result};

/// The label every probe record carries (value `nccl`).
pub const PROBE_LABEL: &str = "slurm-run-probe";

/// The label of a probe record naming the shape it probed: `<nodes>x<gpus per node>`.
pub const PROBE_SHAPE_LABEL: &str = "slurm-run-probe-shape";

/// The label slurm-run sets on a probe record once it has read the probe's verdict:
/// `OK`, `BAD`, `HUNG` or `FAILED`.
pub const PROBE_VERDICT_LABEL: &str = "slurm-run-probe-verdict";

/// Printed by a node whose probe command failed without a verdict, or that cannot run
/// it (no torchrun, python3 or timeout).
pub(crate) const PROBE_EXIT: &str = "NCCL_PROBE_EXIT";

/// Printed by a node whose probe command `timeout` stopped (a hang).
pub(crate) const PROBE_TIMEOUT: &str = "NCCL_PROBE_TIMEOUT";

/// The all-reduce script (our own), run by torchrun on every GPU.
const PROBE_SCRIPT: &str = include_str!("nccl_probe.py");

/// The ladder the probe job's batch step runs (see the file's header).
pub(crate) const PROBE_LADDER: &str = include_str!("probe_ladder.sh");

/// The folder of a probe job's files inside its job folder.
pub(crate) const PROBE_DIR: &str = "nccl";

/// The verdict file in [`PROBE_DIR`].
pub(crate) const VERDICT_FILE: &str = "verdict";

/// The passing rung's knobs in [`PROBE_DIR`], `NAME=VALUE` lines: what the jobs that
/// waited for the probe export.
pub(crate) const KNOBS_FILE: &str = "knobs.env";

/// The seconds `timeout` waits after its TERM before it kills a rung.
pub(crate) const KILL_AFTER_SECS: u64 = 10;

/// What a rung's step may take beyond its command's timeout (the step's start and end,
/// the container's) before the ladder stops it.
const STEP_OVERHEAD_SECS: u64 = 60;

/// The environment the probe's pieces travel in (see `probe_ladder.sh`).
const SCRIPT_ENV: &str = "SLURM_RUN_NCCL_PROBE_PY";
const COMMAND_ENV: &str = "SLURM_RUN_NCCL_PROBE_CMD";
const TIMEOUT_ENV: &str = "SLURM_RUN_NCCL_PROBE_TIMEOUT";
const STEP_TIMEOUT_ENV: &str = "SLURM_RUN_NCCL_PROBE_STEP_TIMEOUT";
const KILL_AFTER_ENV: &str = "SLURM_RUN_NCCL_PROBE_KILL_AFTER";
const RUNGS_ENV: &str = "SLURM_RUN_NCCL_PROBE_RUNGS";
const RUNG_ENV: &str = "SLURM_RUN_NCCL_PROBE_RUNG_";
/// The global world size the script must see (nodes x GPUs per node).
const WORLD_ENV: &str = "SLURM_RUN_NCCL_PROBE_WORLD";

/// Whether a job of these resources uses NCCL between GPUs (and so may hang).
pub(crate) fn needs_nccl(resources: &Resources) -> bool {
    resources.nodes > 1 || resources.gpus_per_node > 1
}

/// `<nodes>x<gpus per node>`, the value of [`PROBE_SHAPE_LABEL`].
pub(crate) fn shape_label(nodes: u32, gpus_per_node: u32) -> String {
    format!("{nodes}x{gpus_per_node}")
}

/// The shape a [`PROBE_SHAPE_LABEL`] value names.
pub(crate) fn parse_shape(label: &str) -> Option<(u32, u32)> {
    let (nodes, gpus) = label.split_once('x')?;
    Some((nodes.parse().ok()?, gpus.parse().ok()?))
}

/// Whether `spec` is a probe job of ours (its batch step runs the ladder): the label
/// and the ladder as its command, never a user's job that happens to carry the label.
pub(crate) fn is_probe_job(spec: &JobSpec) -> bool {
    spec.labels.get(PROBE_LABEL).map(String::as_str) == Some("nccl") && spec.command == PROBE_LADDER
}

/// The default per-node command of a rung: torchrun over every GPU of the node,
/// running our script; a node without torchrun or python3 says so (and the probe
/// stops: no knob would help; the check's `exit 127` becomes the wrapper's marker). The TAO rendezvous values are kept (set by the
/// multi-node script; defaulted here for one node) before torchrun overwrites
/// `WORLD_SIZE` with the number of processes.
pub(crate) fn default_probe_command(nodes: u32, gpus_per_node: u32) -> String {
    format!(
        r#"for slurm_run_tool in torchrun python3; do
  if ! command -v "$slurm_run_tool" >/dev/null 2>&1; then
    echo "{PROBE_EXIT} node_rank=${{NODE_RANK:-0}} cannot run: no $slurm_run_tool on the PATH (in the job image, if any)"
    exit 127
  fi
done
export TAO_NODE_COUNT="${{TAO_NODE_COUNT:-{nodes}}}" TAO_GPUS_PER_NODE="${{TAO_GPUS_PER_NODE:-{gpus_per_node}}}" TAO_NODE_RANK="${{TAO_NODE_RANK:-${{NODE_RANK:-0}}}}"
exec torchrun --nnodes={nodes} --nproc_per_node={gpus_per_node} --node_rank="${{NODE_RANK:-0}}" --master_addr="${{MASTER_ADDR:-127.0.0.1}}" --master_port="${{MASTER_PORT:-29500}}" --monitor_interval=0.5 --no_python python3 -c "${SCRIPT_ENV}""#
    )
}

/// The shell text each node runs on a rung: `inner` under `timeout`, a marker when it
/// fired or `inner` failed. Every task exits 0 once it has printed what it knows: a task
/// exiting non-zero makes `srun --kill-on-bad-exit` end the step at once (Slurm can then
/// drop the output still on its way from the other tasks), and a step the ladder had to
/// cancel would mark the probe job as not finished. The verdict travels in the markers.
pub(crate) fn wrap_in_timeout(inner: &str, timeout: Duration) -> Result<String> {
    let secs = timeout.as_secs().max(1);
    Ok(format!(
        r#"if ! command -v timeout >/dev/null 2>&1; then
  echo "{PROBE_EXIT} node_rank=${{NODE_RANK:-0}} cannot run: no timeout on the PATH (in the job image, if any)"
  exit 0
fi
timeout --kill-after={KILL_AFTER_SECS} {secs}s bash -c {inner}
slurm_run_probe_rc=$?
if [ "$slurm_run_probe_rc" -eq 124 ] || [ "$slurm_run_probe_rc" -eq 137 ]; then
  echo "{PROBE_TIMEOUT} node_rank=${{NODE_RANK:-0}} after {secs}s"
elif [ "$slurm_run_probe_rc" -ne 0 ]; then
  echo "{PROBE_EXIT} node_rank=${{NODE_RANK:-0}} exit code $slurm_run_probe_rc"
fi
exit 0"#,
        inner = shell_quote(inner)?,
    ))
}

/// The seconds the whole ladder may take in the allocation.
fn ladder_secs(rungs: usize, timeout: Duration) -> u64 {
    rungs as u64 * (timeout.as_secs().max(1) + KILL_AFTER_SECS + STEP_OVERHEAD_SECS)
}

/// The probe job standing for `spec`: its resources, image, mounts and env, not its
/// command; the whole `ladder` in one allocation.
pub(crate) fn probe_spec(
    spec: &JobSpec,
    resources: &Resources,
    options: &ProbeOptions,
    ladder: &[KnobSet],
) -> Result<JobSpec> {
    if ladder.is_empty() {
        return Err(Error::invalid(
            "ladder",
            "empty; give at least one env set (an empty set probes without knobs)",
        ));
    }
    let mut probe = JobSpec::new("nccl-probe", PROBE_LADDER);
    probe.image = spec.image.clone();
    probe.allow_registry_image = spec.allow_registry_image;
    probe.mounts = spec.mounts.clone();
    probe.env = spec.env.clone();
    let command = match &options.command {
        Some(command) => command.clone(),
        None => {
            probe
                .env
                .insert(SCRIPT_ENV.to_string(), PROBE_SCRIPT.to_string());
            default_probe_command(resources.nodes, resources.gpus_per_node)
        }
    };
    let timeout = options.timeout.as_secs().max(1);
    probe.env.insert(
        COMMAND_ENV.to_string(),
        wrap_in_timeout(&command, options.timeout)?,
    );
    probe
        .env
        .insert(TIMEOUT_ENV.to_string(), timeout.to_string());
    probe.env.insert(
        STEP_TIMEOUT_ENV.to_string(),
        (timeout + KILL_AFTER_SECS + STEP_OVERHEAD_SECS).to_string(),
    );
    probe
        .env
        .insert(KILL_AFTER_ENV.to_string(), KILL_AFTER_SECS.to_string());
    probe
        .env
        .insert(RUNGS_ENV.to_string(), ladder.len().to_string());
    for (index, rung) in ladder.iter().enumerate() {
        let mut lines = String::new();
        for (name, value) in rung {
            validate_shell_name("ladder", name)?;
            if value.contains(['\n', '\r', '\0']) {
                return Err(Error::invalid(
                    "ladder",
                    format!("the value of {name} holds a newline or NUL; give a one-line value"),
                ));
            }
            lines.push_str(&format!("{name}={value}\n"));
        }
        probe.env.insert(format!("{RUNG_ENV}{index}"), lines);
    }
    probe.env.insert(
        WORLD_ENV.to_string(),
        (u64::from(resources.nodes) * u64::from(resources.gpus_per_node)).to_string(),
    );
    probe.partition = spec.partition.clone();
    probe.account = spec.account.clone();
    probe.nodes = Some(resources.nodes);
    probe.gpus_per_node = Some(resources.gpus_per_node);
    probe.cpus_per_task = spec.cpus_per_task;
    probe.memory = spec.memory.clone();
    // The ladder with the child timeout's 5% and a minute to start and end the job,
    // at least two minutes (the child timeout needs a whole minute below the wall).
    let secs = ladder_secs(ladder.len(), options.timeout) * 100 / 95 + 60;
    probe.time = Some(WallTime::from_minutes(secs.div_ceil(60).max(2)));
    probe.requeue = Some(false);
    probe.extra_sbatch = spec.extra_sbatch.clone();
    probe.extra_env = spec.extra_env.clone();
    probe.nccl_probe = Some(NcclProbe::Never);
    probe.labels = [
        (PROBE_LABEL.to_string(), "nccl".to_string()),
        (
            PROBE_SHAPE_LABEL.to_string(),
            shape_label(resources.nodes, resources.gpus_per_node),
        ),
    ]
    .into();
    Ok(probe)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl::default_ladder;

    #[test]
    fn the_probe_spec_takes_the_resources_not_the_command_and_the_whole_ladder() {
        let mut spec = JobSpec::new("train", "python train.py --secret-sauce");
        spec.image = Some("/images/pt.sqsh".into());
        spec.mounts = vec!["/data:/data".into()];
        spec.nodes = Some(2);
        spec.gpus_per_node = Some(8);
        spec.extra_env = [("NCCL_P2P_DISABLE".to_string(), "0".to_string())].into();
        spec.secrets = vec!["HF_TOKEN".into()];
        spec.datasets = vec!["lustre:///data/set".into()];
        let resources = spec.resolve(&Default::default()).unwrap();
        let ladder = default_ladder("ib0");
        let probe = probe_spec(&spec, &resources, &ProbeOptions::default(), &ladder).unwrap();
        probe.validate().unwrap();
        assert!(is_probe_job(&probe));
        assert!(!probe.command.contains("train.py"));
        assert_eq!(probe.command, PROBE_LADDER);
        let command = &probe.env[COMMAND_ENV];
        assert!(
            command.contains("timeout --kill-after=10 120s bash -c "),
            "{command}"
        );
        assert!(command.ends_with("exit 0"), "every task exits 0: {command}");
        assert!(
            command.contains("exec torchrun --nnodes=2 --nproc_per_node=8"),
            "{command}"
        );
        assert!(command.contains("--no_python python3 -c"), "{command}");
        assert!(
            command.contains("TAO_NODE_COUNT=\"${TAO_NODE_COUNT:-2}\""),
            "{command}"
        );
        assert_eq!(probe.env[TIMEOUT_ENV], "120");
        assert_eq!(probe.env[STEP_TIMEOUT_ENV], "190");
        assert_eq!(probe.env[RUNGS_ENV], "4");
        assert_eq!(probe.env["SLURM_RUN_NCCL_PROBE_RUNG_0"], "");
        assert_eq!(
            probe.env["SLURM_RUN_NCCL_PROBE_RUNG_3"],
            "NCCL_IB_DISABLE=1\nNCCL_P2P_DISABLE=1\nNCCL_SOCKET_IFNAME=ib0\n"
        );
        assert_eq!(probe.image, spec.image);
        assert_eq!(probe.mounts, spec.mounts);
        assert_eq!((probe.nodes, probe.gpus_per_node), (Some(2), Some(8)));
        // The spec's own value is kept in the probe's env; each rung overrides it.
        assert_eq!(probe.extra_env["NCCL_P2P_DISABLE"], "0");
        assert_eq!(probe.env[WORLD_ENV], "16");
        assert!(probe.env[SCRIPT_ENV].contains("NCCL_PROBE_OK"));
        assert!(probe.env[SCRIPT_ENV].contains("NCCL_PROBE_BAD sum="));
        assert!(probe.secrets.is_empty() && probe.datasets.is_empty());
        assert_eq!(probe.labels[PROBE_LABEL], "nccl");
        assert_eq!(probe.labels[PROBE_SHAPE_LABEL], "2x8");
        assert_eq!(parse_shape("2x8"), Some((2, 8)));
        assert_eq!(probe.nccl_probe, Some(NcclProbe::Never));
        // The wall covers every rung with the child timeout's margin below it.
        let resolved = probe.resolve(&Default::default()).unwrap();
        assert!(
            resolved.child_timeout_secs >= 4 * (120 + KILL_AFTER_SECS + STEP_OVERHEAD_SECS),
            "{resolved:?}"
        );
        // A user's job carrying the label is not a probe job.
        let mut labelled = JobSpec::new("mine", "echo hi");
        labelled.labels = probe.labels.clone();
        assert!(!is_probe_job(&labelled));
    }

    #[test]
    fn a_fake_command_replaces_torchrun_and_bad_rungs_are_refused() {
        let mut spec = JobSpec::new("train", "true");
        spec.nodes = Some(2);
        let resources = spec.resolve(&Default::default()).unwrap();
        let fake = ProbeOptions::default()
            .with_command("echo NCCL_PROBE_OK")
            .with_timeout(Duration::from_secs(3));
        let probe = probe_spec(&spec, &resources, &fake, &[KnobSet::new()]).unwrap();
        assert!(probe.env[COMMAND_ENV].contains("3s bash -c 'echo NCCL_PROBE_OK'"));
        assert_eq!(probe.env[TIMEOUT_ENV], "3");
        assert!(!probe.env.contains_key(SCRIPT_ENV));
        assert_eq!(probe.time.unwrap().as_secs(), 180);
        let bad_name = KnobSet::from([("NCCL P2P".to_string(), "1".to_string())]);
        assert!(probe_spec(&spec, &resources, &fake, &[bad_name]).is_err());
        let bad_value = KnobSet::from([("NCCL_X".to_string(), "1\nrm -rf /".to_string())]);
        let err = probe_spec(&spec, &resources, &fake, &[bad_value]).unwrap_err();
        assert!(err.to_string().contains("newline"), "{err}");
        assert!(probe_spec(&spec, &resources, &fake, &[]).is_err());
    }

    /// Run the ladder here as a batch step would, one local "node": `slurm_run_step`
    /// runs its command with bash. Returns the exit status and the job folder.
    fn run_ladder(
        command: &str,
        ladder: &[KnobSet],
        path: Option<&str>,
    ) -> (i32, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = JobSpec::new("train", "true");
        spec.nodes = Some(2);
        let resources = spec.resolve(&Default::default()).unwrap();
        let options = ProbeOptions::default().with_timeout(Duration::from_secs(1));
        let options = if command.is_empty() {
            options
        } else {
            options.with_command(command)
        };
        let probe = probe_spec(&spec, &resources, &options, ladder).unwrap();
        let mut bash = std::process::Command::new("bash");
        bash.arg("-c")
            .arg(r#"slurm_run_step() { bash -c "$1"; }; export -f slurm_run_step; bash -c "$0" slurm-run-probe "$1""#)
            .arg(PROBE_LADDER)
            .arg(dir.path())
            .env(KILL_AFTER_ENV, "1");
        for (name, value) in &probe.env {
            bash.env(name, value);
        }
        bash.env(KILL_AFTER_ENV, "1");
        if let Some(path) = path {
            bash.env("PATH", path);
        }
        let status = bash.output().unwrap().status.code().unwrap();
        (status, dir)
    }

    fn read(dir: &tempfile::TempDir, file: &str) -> String {
        std::fs::read_to_string(dir.path().join(PROBE_DIR).join(file)).unwrap_or_default()
    }

    #[test]
    fn the_ladder_climbs_past_a_hang_in_one_run_and_leaves_its_verdict_and_knobs() {
        let hangs = r#"echo "port=$MASTER_PORT"; if [ "${NCCL_P2P_DISABLE:-0}" = 1 ]; then echo "NCCL_PROBE_OK world=2"; else sleep 30; fi"#;
        let (status, dir) = run_ladder(hangs, &default_ladder("eth0"), None);
        assert_eq!(status, 0);
        let verdict = read(&dir, VERDICT_FILE);
        assert!(
            verdict.starts_with("rung 0 HUNG NCCL_PROBE_TIMEOUT node_rank=0 after 1s"),
            "{verdict}"
        );
        assert!(
            verdict
                .contains("env 1 NCCL_P2P_DISABLE=1\nrung 1 OK NCCL_PROBE_OK world=2\nend OK 1\n"),
            "{verdict}"
        );
        assert_eq!(read(&dir, KNOBS_FILE), "NCCL_P2P_DISABLE=1\n");
        let rung = read(&dir, "rung-1.out");
        let port: u32 = rung
            .trim_start_matches("port=")
            .lines()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!((20000..50000).contains(&port), "{rung}");
        let outcomes =
            crate::nccl::ladder_outcomes(&verdict, crate::state::JobState::Complete, None);
        assert_eq!(outcomes.last().unwrap().0, default_ladder("eth0")[1]);
    }

    #[test]
    fn the_ladder_stops_at_bad_at_a_probe_that_cannot_run_and_after_the_last_hang() {
        let bad = "echo NCCL_PROBE_BAD sum=3 expected=10; exit 3";
        let (status, dir) = run_ladder(bad, &default_ladder("eth0"), None);
        assert_eq!(status, 3);
        assert_eq!(
            read(&dir, VERDICT_FILE),
            "rung 0 BAD NCCL_PROBE_BAD sum=3 expected=10\nend BAD 0\n"
        );
        assert_eq!(read(&dir, KNOBS_FILE), "");
        // The default command on a node without torchrun (the real script's check).
        let (status, dir) = run_ladder("", &default_ladder("eth0"), Some("/usr/bin:/bin"));
        assert_eq!(status, 3);
        let verdict = read(&dir, VERDICT_FILE);
        assert!(
            verdict.contains(
                "rung 0 FAILED NCCL_PROBE_EXIT node_rank=0 cannot run: no torchrun on the PATH"
            ),
            "{verdict}"
        );
        assert!(verdict.ends_with("end FAILED 0\n"), "{verdict}");
        // Silence on every rung: HUNG at the end, after each rung was tried.
        let (status, dir) = run_ladder("sleep 30", &default_ladder("eth0")[..2], None);
        assert_eq!(status, 3);
        let verdict = read(&dir, VERDICT_FILE);
        assert_eq!(
            verdict.matches("HUNG NCCL_PROBE_TIMEOUT").count(),
            2,
            "{verdict}"
        );
        assert!(verdict.ends_with("end HUNG 1\n"), "{verdict}");
        // A command that fails without a marker: FAILED with its last words.
        let (status, dir) = run_ladder("echo boom >&2; exit 7", &default_ladder("eth0"), None);
        assert_eq!(status, 3);
        let verdict = read(&dir, VERDICT_FILE);
        assert!(
            verdict.contains("rung 0 FAILED NCCL_PROBE_EXIT node_rank=0 exit code 7"),
            "{verdict}"
        );
    }
}
