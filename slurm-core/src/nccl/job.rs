//! The probe job standing for a real one: its resources and env without its command,
//! our all-reduce under torchrun and `timeout`, and the markers it prints.

use std::time::Duration;

use super::options::{KnobSet, ProbeOptions};
use crate::names::validate_shell_name;
use crate::spec::{JobSpec, Resources, WallTime};
use crate::transport::shell_quote;
use crate::Result;

/// The label every probe record carries (value `nccl`).
pub const PROBE_LABEL: &str = "slurm-run-probe";

/// Printed by rank 0 when the all-reduce gave the right sum on every rank.
pub(crate) const PROBE_OK: &str = "NCCL_PROBE_OK";

/// Printed by rank 0 as `NCCL_PROBE_BAD sum=X expected=Y` when it did not.
pub(crate) const PROBE_BAD: &str = "NCCL_PROBE_BAD";

/// Printed by the probe's wrapper when `timeout` stopped the probe command (a hang).
pub(crate) const PROBE_TIMEOUT: &str = "NCCL_PROBE_TIMEOUT";

/// The line the probe wrapper prints when the probe command failed without a verdict.
pub(crate) const PROBE_EXIT: &str = "NCCL_PROBE_EXIT";

/// The all-reduce script (our own), run by torchrun on every GPU.
const PROBE_SCRIPT: &str = include_str!("nccl_probe.py");

/// The environment variable the script travels in.
const PROBE_SCRIPT_ENV: &str = "SLURM_RUN_NCCL_PROBE_PY";

/// The global world size the script must see (nodes x GPUs per node).
const PROBE_WORLD_ENV: &str = "SLURM_RUN_NCCL_PROBE_WORLD";

/// The markers, as an extended regular expression for `grep -E`.
pub(crate) const MARKER_PATTERN: &str = "NCCL_PROBE_(OK|BAD|TIMEOUT|EXIT)";

/// The seconds `timeout` waits after its TERM before it kills the probe.
pub(crate) const KILL_AFTER_SECS: u64 = 10;

/// Whether a job of these resources uses NCCL between GPUs (and so may hang).
pub(crate) fn needs_nccl(resources: &Resources) -> bool {
    resources.nodes > 1 || resources.gpus_per_node > 1
}

/// The shell text each node runs: `inner` under `timeout`, a marker when it fired.
pub(crate) fn wrap_in_timeout(inner: &str, timeout: Duration) -> Result<String> {
    let secs = timeout.as_secs().max(1);
    // Every task exits 0 once it has printed what it knows: a task exiting non-zero
    // makes `srun --kill-on-bad-exit` end the step at once, and Slurm can then drop the
    // output still on its way from the other tasks (seen on the test bed: rank 0's BAD
    // line lost). The verdict travels in the markers, never in the exit code.
    Ok(format!(
        "timeout --kill-after={KILL_AFTER_SECS} {secs}s bash -c {inner}; slurm_run_probe_rc=$?\n\
         if [ \"$slurm_run_probe_rc\" -eq 124 ] || [ \"$slurm_run_probe_rc\" -eq 137 ]; then\n  \
         echo \"{PROBE_TIMEOUT} node_rank=${{NODE_RANK:-0}} after {secs}s\"\n\
         elif [ \"$slurm_run_probe_rc\" -ne 0 ]; then\n  \
         echo \"{PROBE_EXIT} node_rank=${{NODE_RANK:-0}} exit code $slurm_run_probe_rc\"\n\
         fi\n\
         exit 0",
        inner = shell_quote(inner)?,
    ))
}

/// The default per-node command: torchrun over every GPU, running our script.
pub(crate) fn default_probe_command(nodes: u32, gpus_per_node: u32) -> String {
    format!(
        "torchrun --nnodes={nodes} --nproc_per_node={gpus_per_node} --node_rank=\"${{NODE_RANK:-0}}\" \
         --master_addr=\"${{MASTER_ADDR:-127.0.0.1}}\" --master_port=\"${{MASTER_PORT:-29500}}\" \
         --no-python python3 -c \"${PROBE_SCRIPT_ENV}\""
    )
}

/// The probe job standing for `spec` with the knobs `rung`.
pub(crate) fn probe_spec(
    spec: &JobSpec,
    resources: &Resources,
    options: &ProbeOptions,
    rung: &KnobSet,
) -> Result<JobSpec> {
    let inner = match &options.command {
        Some(command) => command.clone(),
        None => default_probe_command(resources.nodes, resources.gpus_per_node),
    };
    let mut probe = JobSpec::new("nccl-probe", wrap_in_timeout(&inner, options.timeout)?);
    probe.image = spec.image.clone();
    probe.allow_registry_image = spec.allow_registry_image;
    probe.mounts = spec.mounts.clone();
    probe.env = spec.env.clone();
    if options.command.is_none() {
        probe
            .env
            .insert(PROBE_SCRIPT_ENV.to_string(), PROBE_SCRIPT.to_string());
    }
    probe.env.insert(
        PROBE_WORLD_ENV.to_string(),
        (u64::from(resources.nodes) * u64::from(resources.gpus_per_node)).to_string(),
    );
    probe.partition = spec.partition.clone();
    probe.account = spec.account.clone();
    probe.nodes = Some(resources.nodes);
    probe.gpus_per_node = Some(resources.gpus_per_node);
    probe.cpus_per_task = spec.cpus_per_task;
    probe.memory = spec.memory.clone();
    // The timeout, the kill grace, and a minute for the job to start and end,
    // at least two minutes (the child timeout needs a whole minute below the wall).
    let minutes = (options.timeout.as_secs() + KILL_AFTER_SECS + 60)
        .div_ceil(60)
        .max(2);
    probe.time = Some(WallTime::from_minutes(minutes));
    probe.requeue = Some(false);
    probe.extra_sbatch = spec.extra_sbatch.clone();
    probe.extra_env = spec.extra_env.clone();
    for (name, value) in rung {
        validate_shell_name("ladder", name)?;
        probe.extra_env.insert(name.clone(), value.clone());
    }
    probe.labels = [(PROBE_LABEL.to_string(), "nccl".to_string())].into();
    Ok(probe)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl::default_ladder;

    #[test]
    fn the_probe_spec_takes_the_resources_not_the_command() {
        let mut spec = JobSpec::new("train", "python train.py --secret-sauce");
        spec.image = Some("/images/pt.sqsh".into());
        spec.mounts = vec!["/data:/data".into()];
        spec.nodes = Some(2);
        spec.gpus_per_node = Some(8);
        spec.extra_env = [("NCCL_P2P_DISABLE".to_string(), "0".to_string())].into();
        spec.secrets = vec!["HF_TOKEN".into()];
        spec.datasets = vec!["lustre:///data/set".into()];
        let resources = spec.resolve(&Default::default()).unwrap();
        let rung = default_ladder("eth0")[1].clone();
        let probe = probe_spec(&spec, &resources, &ProbeOptions::default(), &rung).unwrap();
        probe.validate().unwrap();
        assert!(!probe.command.contains("train.py"));
        assert!(
            probe
                .command
                .starts_with("timeout --kill-after=10 120s bash -c "),
            "{}",
            probe.command
        );
        assert!(
            probe
                .command
                .contains("torchrun --nnodes=2 --nproc_per_node=8"),
            "{}",
            probe.command
        );
        assert!(probe.command.contains(PROBE_TIMEOUT));
        assert_eq!(probe.image, spec.image);
        assert_eq!(probe.mounts, spec.mounts);
        assert_eq!((probe.nodes, probe.gpus_per_node), (Some(2), Some(8)));
        // The rung overrides the spec's own value inside the probe.
        assert_eq!(probe.extra_env["NCCL_P2P_DISABLE"], "1");
        assert_eq!(probe.env[PROBE_WORLD_ENV], "16");
        assert!(probe.env[PROBE_SCRIPT_ENV].contains("NCCL_PROBE_OK"));
        assert!(probe.env[PROBE_SCRIPT_ENV].contains("NCCL_PROBE_BAD sum="));
        assert!(probe.secrets.is_empty() && probe.datasets.is_empty());
        assert_eq!(probe.labels[PROBE_LABEL], "nccl");
        let wall = probe.time.unwrap();
        assert!(wall.as_secs() >= 120 + 60, "{wall}");
        // The probe spec resolves with the usual rules (wall leaves a child minute).
        probe.resolve(&Default::default()).unwrap();
        // A fake command replaces torchrun and carries no script.
        let fake = ProbeOptions::default()
            .with_command("echo NCCL_PROBE_OK")
            .with_timeout(Duration::from_secs(3));
        let probe = probe_spec(&spec, &resources, &fake, &KnobSet::new()).unwrap();
        assert!(
            probe.command.contains("3s bash -c 'echo NCCL_PROBE_OK'"),
            "{}",
            probe.command
        );
        assert!(!probe.env.contains_key(PROBE_SCRIPT_ENV));
        assert_eq!(probe.time.unwrap().as_secs(), 120);
        // A rung with a name that is not a shell variable is refused.
        let bad_rung = KnobSet::from([("NCCL P2P".to_string(), "1".to_string())]);
        assert!(probe_spec(&spec, &resources, &fake, &bad_rung).is_err());
    }

    #[test]
    fn every_task_of_the_wrapper_exits_0_and_names_a_failed_exit() {
        // The wrapper exits 0 (so srun keeps every task's output) and names the exit.
        let wrapped = wrap_in_timeout("torchrun x", Duration::from_secs(5)).unwrap();
        assert!(wrapped.ends_with("exit 0"), "{wrapped}");
        assert!(wrapped.contains(PROBE_EXIT));
    }
}
