//! How an NCCL probe runs: the probe's options and the ladder of knob sets tried while
//! it hangs (whether a submit probes first, [`NcclProbe`], is the spec's).

use std::collections::BTreeMap;
use std::time::Duration;

pub(crate) use crate::spec::NcclProbe;

/// Extra environment for NCCL: variable name to value.
pub type KnobSet = BTreeMap<String, String>;

/// How a probe runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeOptions {
    /// The command each node runs on each rung instead of the default `torchrun ...
    /// python3 -c <all-reduce script>`; it runs in `bash -c`, inside the container when
    /// the job has an image, with the rung's knobs, `NODE_RANK`, `MASTER_ADDR` and a
    /// fresh `MASTER_PORT` set (and `WORLD_SIZE` (nodes) and `NUM_GPU_PER_NODE` on
    /// multi-node jobs). Rank 0 must print `NCCL_PROBE_OK` or `NCCL_PROBE_BAD`. Each
    /// rung runs under `timeout`.
    pub command: Option<String>,
    /// The time one rung may take before it counts as hung.
    pub timeout: Duration,
    /// The env sets tried in order while the probe hangs; `None` is the default ladder:
    /// nothing; `NCCL_P2P_DISABLE=1`; also `NCCL_IB_DISABLE=1`; also
    /// `NCCL_SOCKET_IFNAME=` the configured `SLURM_NCCL_SOCKET_IFNAME`.
    pub ladder: Option<Vec<KnobSet>>,
    /// Time between two polls while `probe_nccl` waits for its probe job.
    pub poll_interval: Duration,
    /// How long `probe_nccl` waits for its probe job, queue time included (`None`, the
    /// default: as long as it takes; long queue waits are normal). When it runs out the
    /// call returns an error and the probe keeps its place: its result is cached when a
    /// later poll sees it end. A submit never waits for a probe.
    pub max_wait: Option<Duration>,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            command: None,
            timeout: Duration::from_secs(120),
            ladder: None,
            poll_interval: Duration::from_secs(5),
            max_wait: None,
        }
    }
}

impl ProbeOptions {
    /// Run `command` on each node instead of the default torchrun probe.
    pub fn with_command(mut self, command: impl Into<String>) -> Self {
        self.command = Some(command.into());
        self
    }

    /// The time one rung may take before it counts as hung.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The env sets tried in order while the probe hangs.
    pub fn with_ladder(mut self, ladder: Vec<KnobSet>) -> Self {
        self.ladder = Some(ladder);
        self
    }

    /// Time between two polls while `probe_nccl` waits.
    pub fn with_poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// How long `probe_nccl` waits for its probe, queue time included.
    pub fn with_max_wait(mut self, wait: Duration) -> Self {
        self.max_wait = Some(wait);
        self
    }
}

/// The default ladder: nothing; `NCCL_P2P_DISABLE=1`; also `NCCL_IB_DISABLE=1`; also
/// `NCCL_SOCKET_IFNAME=<socket_ifname>`.
pub(crate) fn default_ladder(socket_ifname: &str) -> Vec<KnobSet> {
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
