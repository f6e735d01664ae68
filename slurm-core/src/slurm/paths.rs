//! A job's paths on the cluster: its folder under the results root, and what lives in
//! it (the staged files, the logs of each run, the secrets sidecar, the sweep file,
//! `status.json`, an NCCL probe's knobs and verdict), and converted images.
//!
//! The staging archive names its files relative to the job folder ([`STAGED_SPEC`],
//! [`staged_script`], ...); the batch script and the other scripts see the absolute
//! paths these functions give.

use super::parse::SlurmJobId;
use crate::image::ImageRef;
use crate::nccl::{KNOBS_FILE, PROBE_DIR, VERDICT_FILE};
use crate::record::{JobId, JobRecord};
use crate::storage::RemotePath;
use crate::{Error, Result};

/// The spec as submitted, inside the job folder.
pub(super) const STAGED_SPEC: &str = "specs/spec.json";

/// The sweep file of an array, inside the job folder.
pub(super) const STAGED_SWEEP: &str = "sweep/params.sh";

/// The batch script of `id`, inside the job folder.
pub(super) fn staged_script(id: &JobId) -> String {
    format!("sbatch/job_{id}.sbatch")
}

/// The secrets sidecar of `id`, inside the job folder.
pub(super) fn staged_sidecar(id: &JobId) -> String {
    format!("env/job_{id}.env")
}

/// A supporting file, inside the job folder.
pub(super) fn staged_file(name: &str) -> String {
    format!("files/{name}")
}

/// The folder of job `id` under the results root.
pub(super) fn job_dir(root: &RemotePath, id: &JobId) -> Result<RemotePath> {
    root.join(id.as_str())
}

/// The logs folder of a job folder (the batch script's `--output` lives under it).
pub(super) fn logs_dir(job_dir: &RemotePath) -> Result<RemotePath> {
    job_dir.join("logs")
}

/// The secrets sidecar the batch script sources.
pub(super) fn sidecar(job_dir: &RemotePath, id: &JobId) -> Result<RemotePath> {
    job_dir.join("env")?.join(&format!("job_{id}.env"))
}

/// The file a resumable job's script appends a line to per segment it continues
/// (`<restart count>\t<how>\t<checkpoint>`).
pub(super) fn resume_segments(job_dir: &RemotePath) -> Result<RemotePath> {
    job_dir.join("resume")?.join("segments.tsv")
}

/// The folder where each node's step of a resumable job notes that the command has
/// started there (one empty file per node, named by its `SLURM_NODEID`); the batch
/// script empties it at each segment's start.
pub(super) fn resume_ready(job_dir: &RemotePath) -> Result<RemotePath> {
    job_dir.join("resume")?.join("ready")
}

/// The sweep file an array's batch script sources.
pub(super) fn sweep_file(job_dir: &RemotePath) -> Result<RemotePath> {
    job_dir.join("sweep")?.join("params.sh")
}

/// The spec as submitted (the cluster's copy, read for records that keep none).
pub(super) fn spec_copy(record: &JobRecord) -> Result<RemotePath> {
    record.results_dir.join("specs")?.join("spec.json")
}

/// `<job_dir>/logs/<id>-<slurm id>` of one run; `<id>-<array id>_<task>` of an array
/// task.
pub(super) fn log_folder(
    record: &JobRecord,
    slurm_job_id: SlurmJobId,
    task: Option<u32>,
) -> Result<String> {
    let run = match task {
        Some(task) => format!("{slurm_job_id}_{task}"),
        None => slurm_job_id.to_string(),
    };
    Ok(format!(
        "{}/{}-{run}",
        logs_dir(&record.results_dir)?.as_str(),
        record.id,
    ))
}

/// The log folder of role `role` inside a run's log folder: `<folder>/roles/<role>`
/// (a role name is a safe name: it cannot leave the folder).
pub(super) fn role_log_folder(folder: &str, role: &str) -> String {
    format!("{folder}/{ROLES_DIR}/{role}")
}

/// The folder, in the job folder, where the batch script of a multi-role job writes
/// each role's exit status as it ends (`<role>.exit`) and the first role to fail
/// (`first-failure`).
pub(super) const ROLES_DIR: &str = "roles";

/// `<job folder>/roles` of `record`.
pub(super) fn roles_dir(record: &JobRecord) -> Result<RemotePath> {
    record.results_dir.join(ROLES_DIR)
}

/// The `status.json` a job (or an array task, in `tasks/<n>/`) writes to confirm it
/// finished.
pub(super) fn status_json(record: &JobRecord, task: Option<u32>) -> Result<RemotePath> {
    let dir = match task {
        Some(task) => record.results_dir.join("tasks")?.join(&task.to_string())?,
        None => record.results_dir.clone(),
    };
    dir.join("status.json")
}

/// Where a probe leaves its knobs for the jobs that wait for it.
pub(super) fn probe_knobs(probe: &JobRecord) -> Result<RemotePath> {
    probe.results_dir.join(PROBE_DIR)?.join(KNOBS_FILE)
}

/// Where a probe writes its verdict.
pub(super) fn probe_verdict(probe: &JobRecord) -> Result<RemotePath> {
    probe.results_dir.join(PROBE_DIR)?.join(VERDICT_FILE)
}

/// The log of rung `index` of a probe.
pub(super) fn probe_rung_log(probe: &JobRecord, index: usize) -> String {
    format!("{}/{PROBE_DIR}/rung-{index}.out", probe.results_dir)
}

/// Where the converted `image` lives: `<root>/images/<cache name>`.
pub(super) fn converted_image(root: &RemotePath, image: &ImageRef) -> Result<String> {
    let file = image.cache_file_name().ok_or_else(|| {
        Error::invalid(
            "image",
            "cannot derive a cache file name; give a .sqsh path",
        )
    })?;
    Ok(root.join("images")?.join(&file)?.as_str().to_string())
}
