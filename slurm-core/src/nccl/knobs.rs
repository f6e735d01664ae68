//! The per-cluster cache of NCCL knobs: `<state_dir>/clusters/<cluster>.json`, one entry
//! per probed shape, written atomically under a lock, read by every submit of a
//! multi-GPU job.

use std::io::Write;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::options::KnobSet;
use crate::record::JobId;
use crate::{Error, Result};

/// The version of the knob cache file format (2: one entry per probed shape).
pub(crate) const KNOBS_SCHEMA_VERSION: u32 = 2;

/// A cluster's cached NCCL knobs, as stored in `<state_dir>/clusters/<cluster>.json`:
/// one entry per shape probed (a passing probe replaces the entry of its own shape).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterKnobs {
    /// The file format version.
    pub schema_version: u32,
    /// The cluster's `ClusterName`.
    pub cluster: String,
    /// What each passing probe found, oldest first.
    pub shapes: Vec<ShapeKnobs>,
}

/// What one passing probe found, at the shape it probed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShapeKnobs {
    /// The env that made the probe pass (empty: none needed).
    pub env: KnobSet,
    /// When slurm-run read the probe's verdict.
    pub probed_at: DateTime<Utc>,
    /// The probe's node count.
    pub nodes: u32,
    /// The probe's GPUs per node.
    pub gpus_per_node: u32,
    /// The probe record that passed.
    pub probe_job: JobId,
}

impl ShapeKnobs {
    /// Whether this probe exercised what a job of this shape needs: the paths between
    /// nodes when it has several, and those inside a node when it has several GPUs per
    /// node. A knob set found on one node says nothing about the network.
    pub fn covers(&self, nodes: u32, gpus_per_node: u32) -> bool {
        (nodes <= 1 || self.nodes >= 2) && (gpus_per_node <= 1 || self.gpus_per_node >= 2)
    }
}

impl ClusterKnobs {
    /// The newest entry covering a job of this shape ([`ShapeKnobs::covers`]), if any.
    pub fn for_shape(&self, nodes: u32, gpus_per_node: u32) -> Option<&ShapeKnobs> {
        self.shapes
            .iter()
            .filter(|s| s.covers(nodes, gpus_per_node))
            .max_by_key(|s| s.probed_at)
    }

    /// Whether `probe` is the probe of one of the entries.
    pub fn holds(&self, probe: &JobId) -> bool {
        self.shapes.iter().any(|s| &s.probe_job == probe)
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

/// Record what a passing probe found for `cluster`: the entry of its shape replaced,
/// the others kept; the file written atomically (temporary file, fsync, rename, fsync of
/// the folder) under an exclusive lock, so processes sharing a state folder merge.
pub(crate) fn record_knobs(state_dir: &Path, cluster: &str, entry: ShapeKnobs) -> Result<PathBuf> {
    let path = knobs_path(state_dir, cluster)?;
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
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(format!("{cluster}.lock")))
        .map_err(|e| Error::io(ctx("opening the lock of"), e))?;
    lock.lock().map_err(|e| Error::io(ctx("locking"), e))?;
    let mut knobs = read_knobs(state_dir, cluster)?.unwrap_or_else(|| ClusterKnobs {
        schema_version: KNOBS_SCHEMA_VERSION,
        cluster: cluster.to_string(),
        shapes: Vec::new(),
    });
    knobs
        .shapes
        .retain(|s| (s.nodes, s.gpus_per_node) != (entry.nodes, entry.gpus_per_node));
    knobs.shapes.push(entry);
    let mut tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .suffix(".partial")
        .tempfile_in(dir)
        .map_err(|e| Error::io(ctx("creating a temporary file for"), e))?;
    let text = serde_json::to_vec_pretty(&knobs)
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

    fn entry(env: &[(&str, &str)], nodes: u32, gpus: u32, at: i64) -> ShapeKnobs {
        ShapeKnobs {
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            probed_at: DateTime::from_timestamp(at, 0).unwrap(),
            nodes,
            gpus_per_node: gpus,
            probe_job: JobId::parse(&format!("nccl-probe-{nodes:03}{gpus:03}")).unwrap(),
        }
    }

    #[test]
    fn the_cache_keeps_one_entry_per_shape_atomically_and_clears() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_knobs(dir.path(), "c1").unwrap(), None);
        let path = record_knobs(
            dir.path(),
            "c1",
            entry(&[("NCCL_P2P_DISABLE", "1")], 2, 8, 10),
        )
        .unwrap();
        assert_eq!(path, dir.path().join("clusters").join("c1.json"));
        record_knobs(dir.path(), "c1", entry(&[], 2, 1, 20)).unwrap();
        // The same shape again replaces its entry.
        record_knobs(
            dir.path(),
            "c1",
            entry(&[("NCCL_IB_DISABLE", "1")], 2, 8, 30),
        )
        .unwrap();
        let knobs = read_knobs(dir.path(), "c1").unwrap().unwrap();
        assert_eq!(knobs.schema_version, KNOBS_SCHEMA_VERSION);
        assert_eq!(knobs.shapes.len(), 2, "{knobs:?}");
        assert_eq!(knobs.for_shape(2, 8).unwrap().env["NCCL_IB_DISABLE"], "1");
        // A 2x1 job takes the newest covering entry; a 1x1 job any.
        assert_eq!(knobs.for_shape(2, 1).unwrap().gpus_per_node, 8);
        assert!(knobs.holds(&JobId::parse("nccl-probe-002001").unwrap()));
        // Only the lock and the file are left beside it.
        let mut names: Vec<String> = std::fs::read_dir(dir.path().join("clusters"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, vec!["c1.json".to_string(), "c1.lock".to_string()]);
        // Another cluster has its own file.
        assert_eq!(read_knobs(dir.path(), "c2").unwrap(), None);
        // A broken file, or one of the first format, is ignored, not fatal.
        std::fs::write(&path, b"{not json").unwrap();
        assert_eq!(read_knobs(dir.path(), "c1").unwrap(), None);
        std::fs::write(
            &path,
            br#"{"schema_version":1,"cluster":"c1","env":{},"probed_at":"2024-05-01T10:00:00Z","nodes":2,"gpus_per_node":8,"probe_job":"nccl-probe-abcdef"}"#,
        )
        .unwrap();
        assert_eq!(read_knobs(dir.path(), "c1").unwrap(), None);
        assert!(remove_knobs(dir.path(), "c1").unwrap());
        assert!(!remove_knobs(dir.path(), "c1").unwrap());
        // A hostile cluster name never becomes a path.
        assert!(knobs_path(dir.path(), "../x").is_err());
    }

    #[test]
    fn coverage_needs_the_paths_the_job_uses() {
        assert!(entry(&[], 2, 8, 0).covers(4, 8));
        assert!(entry(&[], 2, 8, 0).covers(1, 2));
        assert!(
            !entry(&[], 1, 8, 0).covers(2, 8),
            "one node says nothing of the network"
        );
        assert!(
            !entry(&[], 2, 1, 0).covers(2, 4),
            "one GPU a node says nothing of P2P"
        );
        assert!(entry(&[], 2, 1, 0).covers(2, 1));
        let knobs = ClusterKnobs {
            schema_version: KNOBS_SCHEMA_VERSION,
            cluster: "c".into(),
            shapes: vec![entry(&[], 2, 1, 0), entry(&[], 1, 8, 1)],
        };
        assert!(
            knobs.for_shape(2, 8).is_none(),
            "no entry covers both paths"
        );
        assert_eq!(knobs.for_shape(1, 4).unwrap().nodes, 1);
    }

    #[test]
    fn cluster_names_become_safe_keys() {
        assert_eq!(cluster_key("testbed\n"), "testbed");
        assert_eq!(cluster_key(""), "default");
        assert_eq!(cluster_key("my cluster/../x"), "my_cluster_.._x");
        assert_eq!(cluster_key(".hidden"), "c.hidden");
    }
}
