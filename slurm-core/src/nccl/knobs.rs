//! The per-cluster cache of NCCL knobs: `<state_dir>/clusters/<cluster>.json`, written
//! atomically, read by every submit of a multi-GPU job.

use std::io::Write;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::options::KnobSet;
use crate::record::JobId;
use crate::{Error, Result};

/// The version of the knob cache file format.
pub(crate) const KNOBS_SCHEMA_VERSION: u32 = 1;

/// A cluster's cached NCCL knobs, as stored in `<state_dir>/clusters/<cluster>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterKnobs {
    /// The file format version.
    pub schema_version: u32,
    /// The cluster's `ClusterName`.
    pub cluster: String,
    /// The env that made the probe pass (empty: none needed).
    pub env: KnobSet,
    /// When the probe passed.
    pub probed_at: DateTime<Utc>,
    /// The probe's node count.
    pub nodes: u32,
    /// The probe's GPUs per node.
    pub gpus_per_node: u32,
    /// The probe record that passed.
    pub probe_job: JobId,
}

impl ClusterKnobs {
    /// Whether this probe exercised what a job of this shape needs: the paths between
    /// nodes when it has several, and those inside a node when it has several GPUs per
    /// node. A knob set found on one node says nothing about the network.
    pub fn covers(&self, nodes: u32, gpus_per_node: u32) -> bool {
        (nodes <= 1 || self.nodes >= 2) && (gpus_per_node <= 1 || self.gpus_per_node >= 2)
    }
}

/// The cache key from `scontrol show config`'s `ClusterName` (its first line): kept
/// when it is a safe file name, otherwise made one; `default` when empty.
pub(crate) fn cluster_key(raw: &str) -> String {
    let name = raw.lines().next().unwrap_or("").trim();
    let mut key: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(crate::names::MAX_NAME_LEN)
        .collect();
    if !key.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        key = format!("c{key}");
        key.truncate(crate::names::MAX_NAME_LEN);
    }
    if name.is_empty() {
        "default".to_string()
    } else {
        key
    }
}

/// `<state_dir>/clusters/<cluster>.json`; refuses a name that is not a safe file name.
pub(crate) fn knobs_path(state_dir: &Path, cluster: &str) -> Result<PathBuf> {
    crate::names::validate_safe_name("cluster", cluster)?;
    Ok(state_dir.join("clusters").join(format!("{cluster}.json")))
}

/// The cached knobs of `cluster`, `None` when there are none. A file that no longer
/// parses is reported and ignored (the next probe replaces it).
pub(crate) fn read_knobs(state_dir: &Path, cluster: &str) -> Result<Option<ClusterKnobs>> {
    let path = knobs_path(state_dir, cluster)?;
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::io(
                format!("reading the NCCL knob cache {}", path.display()),
                e,
            ))
        }
    };
    match serde_json::from_slice::<ClusterKnobs>(&bytes) {
        Ok(knobs) if knobs.schema_version == KNOBS_SCHEMA_VERSION => Ok(Some(knobs)),
        Ok(knobs) => {
            tracing::warn!(path = %path.display(), version = knobs.schema_version, "NCCL knob cache of another format version; ignored");
            Ok(None)
        }
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "NCCL knob cache does not parse; ignored (the next probe replaces it)");
            Ok(None)
        }
    }
}

/// Write `knobs` atomically (temporary file, fsync, rename, fsync of the folder).
pub(crate) fn write_knobs(state_dir: &Path, knobs: &ClusterKnobs) -> Result<PathBuf> {
    let path = knobs_path(state_dir, &knobs.cluster)?;
    let dir = path.parent().expect("a cache file has a folder");
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    let ctx = |what: &str| format!("{what} the NCCL knob cache {}", path.display());
    builder
        .create(dir)
        .map_err(|e| Error::io(ctx("creating the folder of"), e))?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .suffix(".partial")
        .tempfile_in(dir)
        .map_err(|e| Error::io(ctx("creating a temporary file for"), e))?;
    let text = serde_json::to_vec_pretty(knobs)
        .map_err(|e| Error::io(ctx("serialising"), std::io::Error::other(e)))?;
    tmp.write_all(&text)
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|e| Error::io(ctx("writing"), e))?;
    tmp.persist(&path)
        .map_err(|e| Error::io(ctx("storing"), e.error))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(ctx("syncing the folder of"), e))?;
    Ok(path)
}

/// Remove the cache of `cluster`; whether there was one.
pub(crate) fn remove_knobs(state_dir: &Path, cluster: &str) -> Result<bool> {
    let path = knobs_path(state_dir, cluster)?;
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(
            format!("removing the NCCL knob cache {}", path.display()),
            e,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_round_trips_atomically_and_clears() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_knobs(dir.path(), "c1").unwrap(), None);
        let knobs = ClusterKnobs {
            schema_version: KNOBS_SCHEMA_VERSION,
            cluster: "c1".into(),
            env: KnobSet::from([("NCCL_P2P_DISABLE".to_string(), "1".to_string())]),
            probed_at: Utc::now(),
            nodes: 2,
            gpus_per_node: 8,
            probe_job: JobId::parse("nccl-probe-abcdef").unwrap(),
        };
        let path = write_knobs(dir.path(), &knobs).unwrap();
        assert_eq!(path, dir.path().join("clusters").join("c1.json"));
        assert_eq!(read_knobs(dir.path(), "c1").unwrap(), Some(knobs.clone()));
        // No temporary file is left beside it.
        let names: Vec<String> = std::fs::read_dir(dir.path().join("clusters"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["c1.json".to_string()]);
        // Another cluster has its own file.
        assert_eq!(read_knobs(dir.path(), "c2").unwrap(), None);
        // A broken file is ignored, not fatal.
        std::fs::write(&path, b"{not json").unwrap();
        assert_eq!(read_knobs(dir.path(), "c1").unwrap(), None);
        assert!(remove_knobs(dir.path(), "c1").unwrap());
        assert!(!remove_knobs(dir.path(), "c1").unwrap());
        // A hostile cluster name never becomes a path.
        assert!(knobs_path(dir.path(), "../x").is_err());
    }

    #[test]
    fn coverage_needs_the_paths_the_job_uses() {
        let knobs = |nodes, gpus| ClusterKnobs {
            schema_version: KNOBS_SCHEMA_VERSION,
            cluster: "c".into(),
            env: KnobSet::new(),
            probed_at: Utc::now(),
            nodes,
            gpus_per_node: gpus,
            probe_job: JobId::parse("nccl-probe-abcdef").unwrap(),
        };
        assert!(knobs(2, 8).covers(4, 8));
        assert!(knobs(2, 8).covers(1, 2));
        assert!(
            !knobs(1, 8).covers(2, 8),
            "one node says nothing of the network"
        );
        assert!(
            !knobs(2, 1).covers(2, 4),
            "one GPU a node says nothing of P2P"
        );
        assert!(knobs(2, 1).covers(2, 1));
    }

    #[test]
    fn cluster_names_become_safe_keys() {
        assert_eq!(cluster_key("testbed\n"), "testbed");
        assert_eq!(cluster_key(""), "default");
        assert_eq!(cluster_key("my cluster/../x"), "my_cluster_.._x");
        assert_eq!(cluster_key(".hidden"), "c.hidden");
    }
}
