//! How an NCCL probe runs: whether a submit probes first, the probe's options, and the
//! ladder of knob sets tried while it hangs.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

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
    /// ([`ClusterKnobs::covers`](super::ClusterKnobs::covers)); otherwise submit with the cached knobs, if any.
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
    /// `NCCL_PROBE_OK` or `NCCL_PROBE_BAD`. It always runs under `timeout`.
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
