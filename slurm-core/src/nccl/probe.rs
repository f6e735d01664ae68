//! What an NCCL probe is: its options, the knob ladder, the probe job standing for a
//! real one, its outcome read from the markers, and the verdict over the ladder.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::backend::NativeStatus;
use crate::error::CheckKind;
use crate::names::validate_shell_name;
use crate::record::JobId;
use crate::spec::{JobSpec, Resources, WallTime};
use crate::state::JobState;
use crate::transport::shell_quote;
use crate::{Error, Result};

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

/// Extra environment for NCCL: variable name to value.
pub type KnobSet = BTreeMap<String, String>;

/// Whether a submit runs the NCCL probe first.
///
/// Only jobs that need NCCL are concerned: more than one node, or more than one GPU
/// per node (the intra-node P2P hang needs no second node). Other jobs never probe
/// and never get knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NcclProbe {
    /// Probe when the job has a container image (the probe runs the container's
    /// torchrun) and the cluster's cached knobs were not probed at this shape
    /// ([`ClusterKnobs::covers`]); otherwise submit with the cached knobs, if any.
    #[default]
    Auto,
    /// Probe before every such job (and refresh the cache).
    Always,
    /// Neither probe nor add cached knobs: the job runs with its own env only.
    Never,
}

/// How a probe runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeOptions {
    /// The command each node runs instead of the default `torchrun ... python3 -c
    /// <all-reduce script>`; it runs in `bash -c`, inside the container when the job
    /// has an image, with `NODE_RANK`, `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`
    /// (nodes) and `NUM_GPU_PER_NODE` set on multi-node jobs. Rank 0 must print
    /// [`PROBE_OK`] or [`PROBE_BAD`]. It always runs under `timeout`.
    pub command: Option<String>,
    /// The time one probe may take before it counts as hung.
    pub timeout: Duration,
    /// The env sets tried in order while the probe hangs; `None` is
    /// [`default_ladder`] with the configured `SLURM_NCCL_SOCKET_IFNAME`.
    pub ladder: Option<Vec<KnobSet>>,
    /// Time between two polls of a probe job.
    pub poll_interval: Duration,
    /// How long one probe job may take, queue time included, before it is cancelled.
    pub max_wait: Duration,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            command: None,
            timeout: Duration::from_secs(120),
            ladder: None,
            poll_interval: Duration::from_secs(5),
            max_wait: Duration::from_secs(30 * 60),
        }
    }
}

impl ProbeOptions {
    /// Run `command` on each node instead of the default torchrun probe.
    pub fn with_command(mut self, command: impl Into<String>) -> Self {
        self.command = Some(command.into());
        self
    }

    /// The time one probe may take before it counts as hung.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The env sets tried in order while the probe hangs.
    pub fn with_ladder(mut self, ladder: Vec<KnobSet>) -> Self {
        self.ladder = Some(ladder);
        self
    }

    /// Time between two polls of a probe job.
    pub fn with_poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// How long one probe job may take, queue time included.
    pub fn with_max_wait(mut self, wait: Duration) -> Self {
        self.max_wait = wait;
        self
    }
}

/// The default ladder: nothing; `NCCL_P2P_DISABLE=1`; also `NCCL_IB_DISABLE=1`; also
/// `NCCL_SOCKET_IFNAME=<socket_ifname>`.
pub fn default_ladder(socket_ifname: &str) -> Vec<KnobSet> {
    let knob = |pairs: &[(&str, &str)]| -> KnobSet {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    vec![
        KnobSet::new(),
        knob(&[("NCCL_P2P_DISABLE", "1")]),
        knob(&[("NCCL_P2P_DISABLE", "1"), ("NCCL_IB_DISABLE", "1")]),
        knob(&[
            ("NCCL_P2P_DISABLE", "1"),
            ("NCCL_IB_DISABLE", "1"),
            ("NCCL_SOCKET_IFNAME", socket_ifname),
        ]),
    ]
}

/// What one probe job showed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ProbeOutcome {
    /// Rank 0 printed [`PROBE_OK`]: the collective works with this env.
    Ok,
    /// Rank 0 printed [`PROBE_BAD`]: the collective finished with a wrong sum. A
    /// hard fault (fabric, driver), not a hang: no knob is tried.
    Bad {
        /// The marker line.
        detail: String,
    },
    /// The probe did not finish in time ([`PROBE_TIMEOUT`], exit code 124, or the
    /// job's wall time).
    Hung {
        /// What showed the hang.
        detail: String,
    },
    /// The job ended otherwise, without a marker (no torchrun in the image, a node
    /// failure, a cancel): trying NCCL knobs would not help.
    Failed {
        /// How the job ended.
        detail: String,
    },
}

impl ProbeOutcome {
    /// `OK`, `BAD`, `HUNG` or `FAILED`.
    pub fn name(&self) -> &'static str {
        match self {
            ProbeOutcome::Ok => "OK",
            ProbeOutcome::Bad { .. } => "BAD",
            ProbeOutcome::Hung { .. } => "HUNG",
            ProbeOutcome::Failed { .. } => "FAILED",
        }
    }
}

impl fmt::Display for ProbeOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeOutcome::Ok => f.write_str("OK"),
            ProbeOutcome::Bad { detail }
            | ProbeOutcome::Hung { detail }
            | ProbeOutcome::Failed { detail } => write!(f, "{} ({detail})", self.name()),
        }
    }
}

/// One rung of the ladder, as it ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeAttempt {
    /// The knob env of this rung.
    pub env: KnobSet,
    /// What it showed.
    pub outcome: ProbeOutcome,
    /// The probe's record.
    pub job: JobId,
    /// The scheduler's id of the probe job (SLURM: its job id).
    pub native_id: Option<String>,
    /// Its `main.out` on the cluster (with the `NCCL_DEBUG=INFO` lines).
    pub log: Option<String>,
}

/// A probe that passed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeReport {
    /// The cluster (its `ClusterName`), the key of the cache.
    pub cluster: String,
    /// The env that worked (empty when nothing was needed), now cached.
    pub knobs: KnobSet,
    /// Every rung tried, in order; the last one passed.
    pub attempts: Vec<ProbeAttempt>,
    /// The cache file written.
    pub cache_file: PathBuf,
}

/// Whether a job of these resources uses NCCL between GPUs (and so may hang).
pub(crate) fn needs_nccl(resources: &Resources) -> bool {
    resources.nodes > 1 || resources.gpus_per_node > 1
}

/// The outcome of a finished probe job from its marker lines and how it ended.
pub(crate) fn probe_outcome(
    state: JobState,
    native: Option<&NativeStatus>,
    markers: &str,
) -> ProbeOutcome {
    let line = |marker: &str| {
        markers
            .lines()
            .map(str::trim)
            .find(|l| l.contains(marker))
            .map(str::to_string)
    };
    if let Some(detail) = line(PROBE_BAD) {
        return ProbeOutcome::Bad { detail };
    }
    if line(PROBE_OK).is_some() {
        return ProbeOutcome::Ok;
    }
    if let Some(detail) = line(PROBE_TIMEOUT) {
        return ProbeOutcome::Hung { detail };
    }
    let scheduler = native.map(|n| n.state.as_str()).unwrap_or("");
    if native.and_then(|n| n.exit_code) == Some(124) {
        return ProbeOutcome::Hung {
            detail: "the probe exited 124 (timeout)".to_string(),
        };
    }
    if scheduler.starts_with("TIMEOUT") {
        return ProbeOutcome::Hung {
            detail: "the probe job reached its wall time".to_string(),
        };
    }
    let mut detail = format!("the probe job ended {state} without a probe marker");
    if let Some(native) = native {
        detail.push_str(&format!(" (SLURM {}", native.state));
        if let Some(code) = native.exit_code {
            detail.push_str(&format!(", exit code {code}"));
        }
        if let Some(reason) = &native.reason {
            detail.push_str(&format!(", {reason}"));
        }
        detail.push(')');
    }
    let exits: Vec<&str> = markers
        .lines()
        .map(str::trim)
        .filter(|l| l.contains(PROBE_EXIT))
        .collect();
    if !exits.is_empty() {
        detail.push_str(&format!("; {}", exits.join("; ")));
    }
    ProbeOutcome::Failed { detail }
}

/// Try the rungs in order until one does not hang; the attempts made.
pub(crate) async fn climb<'a, F, Fut>(
    ladder: &'a [KnobSet],
    mut attempt: F,
) -> Result<Vec<ProbeAttempt>>
where
    F: FnMut(&'a KnobSet) -> Fut,
    Fut: Future<Output = Result<ProbeAttempt>>,
{
    let mut attempts: Vec<ProbeAttempt> = Vec::new();
    for rung in ladder {
        let done = attempt(rung).await?;
        let hung = matches!(done.outcome, ProbeOutcome::Hung { .. });
        tracing::info!(job = %done.job, env = ?done.env, outcome = %done.outcome, "NCCL probe");
        attempts.push(done);
        if !hung {
            break;
        }
    }
    Ok(attempts)
}

pub(crate) fn show_env(env: &KnobSet) -> String {
    let pairs: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{{{}}}", pairs.join(", "))
}

/// The knobs that worked, or the error that says which outcome stopped the ladder
/// and what to do.
pub(crate) fn verdict(cluster: &str, attempts: &[ProbeAttempt]) -> Result<KnobSet> {
    let check = "nccl probe".to_string();
    let Some(last) = attempts.last() else {
        return Err(Error::invalid(
            "ladder",
            "empty; give at least one env set (an empty set probes without knobs)",
        ));
    };
    let log = last.log.as_deref().unwrap_or("its main.out");
    match &last.outcome {
        ProbeOutcome::Ok => Ok(last.env.clone()),
        ProbeOutcome::Bad { detail } => Err(Error::Preflight {
            kind: CheckKind::NcclProbe,
            check,
            message: format!(
                "BAD on {cluster}: the all-reduce of probe {} finished with a wrong sum ({detail}) with env {}",
                last.job,
                show_env(&last.env)
            ),
            remedy: format!(
                "a hardware or driver fault, not a hang: NCCL knobs will not fix it; check the GPU fabric and drivers of the nodes (NCCL_DEBUG=INFO log: {log}), exclude the bad nodes or ask the cluster admins"
            ),
        }),
        ProbeOutcome::Failed { detail } => Err(Error::Preflight {
            kind: CheckKind::NcclProbe,
            check,
            message: format!("FAILED on {cluster}: probe {}: {detail}", last.job),
            remedy: format!(
                "read the probe's logs ({log} and main.err beside it): the image needs torchrun and python3 with torch, and the nodes must start the job; or submit with nccl_probe: Never and set NCCL knobs in extra_env yourself"
            ),
        }),
        ProbeOutcome::Hung { .. } => {
            let tried: Vec<String> = attempts.iter().map(|a| show_env(&a.env)).collect();
            let logs: Vec<&str> = attempts.iter().filter_map(|a| a.log.as_deref()).collect();
            Err(Error::Preflight {
                kind: CheckKind::NcclProbe,
                check,
                message: format!(
                    "HUNG on {cluster}: the all-reduce hung with every env set tried: {}",
                    tried.join(" -> ")
                ),
                remedy: format!(
                    "read the NCCL_DEBUG=INFO logs of the probes ({}) for the transport that stalls; try other knobs (ProbeOptions::ladder, SLURM_NCCL_SOCKET_IFNAME for the right interface) or ask the cluster admins",
                    if logs.is_empty() { "none was written".to_string() } else { logs.join(", ") }
                ),
            })
        }
    }
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

    fn attempt(env: KnobSet, outcome: ProbeOutcome) -> ProbeAttempt {
        ProbeAttempt {
            env,
            outcome,
            job: JobId::parse("nccl-probe-abcdef").unwrap(),
            native_id: None,
            log: Some("/r/nccl-probe-abcdef/logs/x/main.out".into()),
        }
    }

    fn hung() -> ProbeOutcome {
        ProbeOutcome::Hung { detail: "t".into() }
    }

    fn native(state: &str, exit: Option<i32>) -> NativeStatus {
        NativeStatus {
            state: state.into(),
            reason: None,
            exit_code: exit,
            nodes: None,
            source: "sacct",
        }
    }

    #[test]
    fn markers_decide_before_the_exit_code() {
        let ok = probe_outcome(
            JobState::Complete,
            Some(&native("COMPLETED", Some(0))),
            "NCCL_PROBE_OK world=16\n",
        );
        assert_eq!(ok, ProbeOutcome::Ok);
        let bad = probe_outcome(
            JobState::Error,
            Some(&native("FAILED", Some(3))),
            "NCCL_PROBE_BAD sum=10 expected=136\n",
        );
        assert_eq!(bad.name(), "BAD");
        assert!(bad.to_string().contains("sum=10 expected=136"), "{bad}");
        let hung = probe_outcome(
            JobState::Error,
            Some(&native("FAILED", Some(1))),
            "NCCL_PROBE_TIMEOUT node_rank=1 after 3s\n",
        );
        assert_eq!(hung.name(), "HUNG");
        assert_eq!(
            probe_outcome(JobState::Error, Some(&native("FAILED", Some(124))), "").name(),
            "HUNG"
        );
        assert_eq!(
            probe_outcome(JobState::Error, Some(&native("TIMEOUT", None)), "").name(),
            "HUNG"
        );
        let failed = probe_outcome(JobState::Error, Some(&native("FAILED", Some(127))), "");
        assert_eq!(failed.name(), "FAILED");
        assert!(failed.to_string().contains("exit code 127"), "{failed}");
        // Finished, but the command printed nothing: not OK.
        assert_eq!(
            probe_outcome(JobState::Complete, Some(&native("COMPLETED", Some(0))), "").name(),
            "FAILED"
        );
    }

    #[tokio::test]
    async fn the_ladder_stops_at_the_first_rung_that_does_not_hang() {
        let ladder = default_ladder("ib0");
        let mut seen = Vec::new();
        let attempts = climb(&ladder, |rung| {
            seen.push(rung.clone());
            let outcome = if rung.contains_key("NCCL_IB_DISABLE") {
                ProbeOutcome::Ok
            } else {
                hung()
            };
            let done = attempt(rung.clone(), outcome);
            async move { Ok(done) }
        })
        .await
        .unwrap();
        assert_eq!(seen.len(), 3, "the fourth rung is not tried: {seen:?}");
        assert_eq!(attempts.len(), 3);
        let knobs = verdict("c1", &attempts).unwrap();
        assert_eq!(
            knobs,
            KnobSet::from([
                ("NCCL_IB_DISABLE".to_string(), "1".to_string()),
                ("NCCL_P2P_DISABLE".to_string(), "1".to_string()),
            ])
        );
    }

    #[tokio::test]
    async fn bad_stops_the_ladder_at_once_and_names_the_remedy() {
        let ladder = default_ladder("eth0");
        let mut calls = 0;
        let attempts = climb(&ladder, |rung| {
            calls += 1;
            let done = attempt(
                rung.clone(),
                ProbeOutcome::Bad {
                    detail: "NCCL_PROBE_BAD sum=3 expected=10".into(),
                },
            );
            async move { Ok(done) }
        })
        .await
        .unwrap();
        assert_eq!(calls, 1);
        let err = verdict("c1", &attempts).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Preflight);
        let text = err.to_string();
        assert!(text.contains("BAD") && text.contains("admins"), "{text}");
        assert!(text.contains("sum=3 expected=10"), "{text}");
    }

    #[tokio::test]
    async fn every_rung_hung_lists_the_env_sets_and_the_logs() {
        let ladder = default_ladder("ib0");
        let attempts = climb(&ladder, |rung| {
            let done = attempt(rung.clone(), hung());
            async move { Ok(done) }
        })
        .await
        .unwrap();
        assert_eq!(attempts.len(), 4);
        let text = verdict("c1", &attempts).unwrap_err().to_string();
        assert!(text.contains("HUNG"), "{text}");
        assert!(text.contains("{} -> {NCCL_P2P_DISABLE=1} ->"), "{text}");
        assert!(text.contains("NCCL_SOCKET_IFNAME=ib0"), "{text}");
        assert!(text.contains("NCCL_DEBUG=INFO"), "{text}");
        assert!(text.contains("/main.out"), "{text}");
        // An error of one attempt (not an outcome) stops the climb and is returned.
        let err = climb(&ladder, |_| async {
            Err::<ProbeAttempt, _>(Error::invalid("x", "boom"))
        })
        .await
        .unwrap_err();
        assert!(err.to_string().contains("boom"));
    }

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
    fn a_probe_that_failed_without_a_verdict_says_how() {
        // The wrapper exits 0 (so srun keeps every task's output) and names the exit.
        let outcome = probe_outcome(
            JobState::Complete,
            Some(&native("COMPLETED", Some(0))),
            "NCCL_PROBE_EXIT node_rank=0 exit code 127\n",
        );
        match outcome {
            ProbeOutcome::Failed { detail } => {
                assert!(detail.contains("exit code 127"), "{detail}")
            }
            other => panic!("expected Failed, got {other:?}"),
        }
        let wrapped = wrap_in_timeout("torchrun x", Duration::from_secs(5)).unwrap();
        assert!(wrapped.ends_with("exit 0"), "{wrapped}");
        assert!(wrapped.contains(PROBE_EXIT));
    }
}
