//! What the backend learnt of its cluster and keeps for later operations: the results
//! root, the partitions preflight saw, whether Pyxis and accounting are there, the
//! cluster's name and Slurm releases, and the registries whose conversion checks passed.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use super::release::ClusterRelease;
use crate::spec::{Limits, WallTime};
use crate::storage::RemotePath;

/// A partition as `scontrol show partition` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartitionInfo {
    /// `State=UP`.
    pub(crate) up: bool,
    /// `MaxTime`, `None` for UNLIMITED.
    pub(crate) max_time: Option<WallTime>,
    /// Its nodes (`Nodes=n[1-2]` expanded), for the node-exclusion guard.
    pub(crate) nodes: Vec<String>,
}

/// What preflight and later round trips learnt of the cluster.
#[derive(Debug, Default, Clone)]
pub(super) struct Facts {
    /// The results root, resolved on the cluster when not configured.
    pub(super) results_root: Option<RemotePath>,
    /// Partitions seen by preflight.
    pub(super) partitions: HashMap<String, PartitionInfo>,
    /// Whether the static preflight checks (tools, accounting, storage) passed.
    pub(super) base_checked: bool,
    /// Whether Pyxis is installed (`srun --container-image`).
    pub(super) pyxis: Option<bool>,
    /// Whether sacct answers (accounting enabled).
    pub(super) accounting: Option<bool>,
    /// The cluster's `ClusterName` (the key of the NCCL knob cache).
    pub(super) cluster_name: Option<String>,
    /// The cluster's Slurm releases (`None` until read).
    pub(super) release: Option<ClusterRelease>,
    /// Registries (their credential machines) and conversion partition whose
    /// conversion checks passed (the submit gate of a conversion).
    pub(super) conversion_ready: HashSet<String>,
    /// Code trees known whole on the cluster (`<store>/<tree id>`): not asked about again.
    pub(super) code_trees: HashSet<String>,
}

/// [`Facts`] shared by the clones of one backend (a lock held only to read or write,
/// never across a round trip).
#[derive(Debug, Default)]
pub(super) struct ClusterFacts(Mutex<Facts>);

impl ClusterFacts {
    /// Run `read` on the facts.
    pub(super) fn read<V>(&self, read: impl FnOnce(&Facts) -> V) -> V {
        read(&self.0.lock().expect("facts lock"))
    }

    /// Run `change` on the facts.
    pub(super) fn change<V>(&self, change: impl FnOnce(&mut Facts) -> V) -> V {
        change(&mut self.0.lock().expect("facts lock"))
    }

    /// The results root, once preflight passed and knows every one of `partitions`.
    pub(super) fn ready_root(&self, partitions: &[String]) -> Option<RemotePath> {
        self.read(|facts| {
            let known = partitions.iter().all(|p| facts.partitions.contains_key(p));
            match (&facts.results_root, facts.base_checked && known) {
                (Some(root), true) => Some(root.clone()),
                _ => None,
            }
        })
    }

    /// The wall-time cap of `partitions` as preflight saw them: the smallest MaxTime
    /// among those that have one, `None` when every one is UNLIMITED, and the default
    /// cap (4 h) while a partition is not known yet.
    pub(super) fn max_wall(&self, partitions: &[String]) -> Option<WallTime> {
        self.read(|facts| {
            let mut cap: Option<WallTime> = None;
            for name in partitions {
                match facts.partitions.get(name) {
                    None => return Limits::default().max_wall,
                    Some(info) => {
                        if let Some(max) = info.max_time {
                            cap = Some(cap.map_or(max, |c| c.min(max)));
                        }
                    }
                }
            }
            cap
        })
    }

    /// Every node of `partitions` (sorted, once each), or `None` when the membership of
    /// one is unknown (then the scheduler decides).
    pub(super) fn nodes_of(&self, partitions: &[String]) -> Option<Vec<String>> {
        self.read(|facts| {
            let mut nodes: Vec<String> = Vec::new();
            for name in partitions {
                match facts.partitions.get(name) {
                    Some(info) if !info.nodes.is_empty() => nodes.extend(info.nodes.clone()),
                    _ => return None,
                }
            }
            nodes.sort();
            nodes.dedup();
            Some(nodes)
        })
    }

    /// Whether preflight found Pyxis (`None` before any preflight).
    pub(super) fn pyxis(&self) -> Option<bool> {
        self.read(|facts| facts.pyxis)
    }

    /// The cluster's name, when learnt.
    pub(super) fn cluster_name(&self) -> Option<String> {
        self.read(|facts| facts.cluster_name.clone())
    }

    /// The cluster's Slurm releases, once read (by preflight or with the cluster's name).
    pub(super) fn release(&self) -> Option<ClusterRelease> {
        self.read(|facts| facts.release)
    }

    /// Whether the conversion checks of `key` passed before.
    pub(super) fn conversion_ready(&self, key: &str) -> bool {
        self.read(|facts| facts.conversion_ready.contains(key))
    }
}
