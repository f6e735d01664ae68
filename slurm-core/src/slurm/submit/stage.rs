//! What a submit sends: one tar archive of the job folder (the spec, the batch script,
//! the sweep file, the secrets sidecar, the supporting files, each listed with its
//! checksum in `SHA256SUMS`), the record it opens, and the submit script's parameters.

use sha2::{Digest, Sha256};

use super::plan::SubmitPlan;
use crate::names::validate_safe_name;
use crate::record::JobRecord;
use crate::redact::SecretRegistry;
use crate::slurm::images::Conversion;
use crate::slurm::paths::{staged_file, staged_script, staged_sidecar, STAGED_SPEC, STAGED_SWEEP};
use crate::spec::{ArrayPlan, Dependency, JobSpec};
use crate::transport::shell_quote;
use crate::{Error, Result};

/// A plan made ready to send.
#[derive(Debug)]
pub(crate) struct Staged {
    /// The record to open (SUBMITTING, attempt 1 counted).
    pub(crate) record: JobRecord,
    /// The staging archive, on the submit script's stdin.
    pub(crate) payload: Vec<u8>,
    /// The results root (the submit script's first parameter).
    pub(crate) root: String,
    /// The script's parameters after the attempt number and sbatch's time limit: the
    /// image to check (a `.sqsh`, or empty), then the datasets.
    pub(crate) tail: Vec<String>,
    /// The `.sqsh` the submit script checks whole before sbatch (none while a
    /// conversion job makes it: the job waits for that).
    pub(crate) image: Option<String>,
    /// A multi-role job's conversions (each role's registry image), made before the
    /// first send: the job never starts with a role's image missing.
    pub(crate) role_conversions: Vec<Conversion>,
    /// What the PENDING mark adds to "sbatch accepted the job" (the probe and the
    /// conversion waited for).
    pub(crate) note: String,
}

/// Stage `plan` with its rendered `script`; `secrets` go in the sidecar (mode 600).
pub(crate) fn stage(plan: &SubmitPlan, script: String, secrets: &SecretRegistry) -> Result<Staged> {
    let spec = &plan.spec;
    let id = &plan.id;
    let files = archive_files(plan, script, secrets)?;
    let payload = build_payload(id.as_str(), &files)?;

    let mut record = record_to_open(plan, secrets)?;
    let mut note = String::new();
    if let Some(probe) = &plan.probe {
        record.after.push(Dependency::ok(probe.id.clone()));
        note = format!(
            "; it waits for NCCL probe {} (SLURM job {}) and exports the knobs it finds",
            probe.id,
            probe
                .backend_ref
                .as_ref()
                .map_or("?", |r| r.native_id.as_str())
        );
    }
    if let Some(code) = &plan.code {
        note.push_str(&format!("; {}", code.note));
    }
    if let Some(job) = &plan.conversion_job {
        record.after.push(Dependency::ok(job.id.clone()));
        let conversion = plan.conversion();
        note.push_str(&format!(
            "; image {} is converted to {} by SLURM job {} first (record {}, on the CPU partition), and the job waits for it",
            conversion.map_or("?".to_string(), |c| c.image.to_string()),
            conversion.map_or("?", |c| c.path.as_str()),
            job.backend_ref.as_ref().map_or("?", |r| r.native_id.as_str()),
            job.id
        ));
    }
    // The submit script checks a .sqsh image whole before sbatch (a registry image the
    // spec allows reaches Pyxis unchecked, and one a conversion job makes is waited for).
    let sqsh = plan.conversion().is_some() || spec.image_ref()?.is_some_and(|i| i.is_sqsh());
    let image = match (&plan.image, sqsh, &plan.conversion_job) {
        (Some(image), true, None) => Some(image.container_image.clone()),
        _ => None,
    };
    let mut tail = vec![image.clone().unwrap_or_default()];
    for uri in spec.dataset_uris()? {
        tail.push(uri.resolve().as_str().to_string());
    }
    Ok(Staged {
        record,
        payload,
        root: plan.root.as_str().to_string(),
        tail,
        image,
        role_conversions: plan
            .roles
            .is_empty()
            .then(Vec::new)
            .unwrap_or_else(|| plan.conversions().into_iter().cloned().collect()),
        note,
    })
}

/// The files of `plan`'s staging archive (path, bytes, mode): the spec, the rendered
/// `script`, the sweep file of an array, the sidecar of `secrets` (mode 600) and the
/// supporting files.
fn archive_files(
    plan: &SubmitPlan,
    script: String,
    secrets: &SecretRegistry,
) -> Result<Vec<(String, Vec<u8>, u32)>> {
    let spec = &plan.spec;
    let id = &plan.id;
    let mut files: Vec<(String, Vec<u8>, u32)> = vec![
        (
            STAGED_SPEC.to_string(),
            serde_json::to_vec_pretty(spec).map_err(|e| Error::parse("spec", e.to_string()))?,
            0o600,
        ),
        (staged_script(id), script.into_bytes(), 0o700),
    ];
    if let Some(array) = &plan.array {
        if let Some(text) = sweep_file(spec, array)? {
            files.push((STAGED_SWEEP.to_string(), text.into_bytes(), 0o600));
        }
    }
    if !secrets.is_empty() {
        let mut sidecar = String::new();
        for (name, value) in secrets.entries() {
            sidecar.push_str(&format!("export {name}={}\n", shell_quote(value)?));
        }
        files.push((staged_sidecar(id), sidecar.into_bytes(), 0o600));
    }
    files.extend(supporting_files(spec)?);
    Ok(files)
}

/// The record `plan` opens (SUBMITTING, attempt 1 counted), before what it waits for
/// is added: its image, tasks, the record it retries, the nodes it avoids, its code
/// tree, the cluster's release, and whether `secrets` are staged.
fn record_to_open(plan: &SubmitPlan, secrets: &SecretRegistry) -> Result<JobRecord> {
    let spec = &plan.spec;
    let id = &plan.id;
    let mut record = JobRecord::new(id.clone(), spec, plan.job_dir.clone())?;
    record.container_image = plan.image.as_ref().map(|i| i.container_image.clone());
    if let Some(array) = &plan.array {
        record = record.with_tasks(array.indices.iter());
    }
    if let Some(previous) = &plan.retry_of {
        record = record.retrying(previous);
    }
    record.excluded_nodes = plan.exclude.clone();
    if let Some(code) = &plan.code {
        record.code_commit = code.commit.clone();
        record.code_dir = Some(code.dir.as_str().to_string());
    }
    record.scheduler_release = plan.release.clone();
    record.submit_attempts = Some(1);
    record.secrets_staged = !secrets.is_empty();
    Ok(record)
}

/// The spec's supporting files, read from this machine, for the job's `files/` folder.
fn supporting_files(spec: &JobSpec) -> Result<Vec<(String, Vec<u8>, u32)>> {
    let mut seen = std::collections::BTreeSet::new();
    let mut files = Vec::new();
    for local in &spec.supporting_files {
        let path = std::path::Path::new(local);
        let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
            Error::invalid("supporting_files", format!("`{local}` has no file name"))
        })?;
        validate_safe_name("supporting_files", name)?;
        if !seen.insert(name.to_string()) {
            return Err(Error::invalid(
                "supporting_files",
                format!(
                    "two files are named `{name}`; rename one (they share the job's files/ folder)"
                ),
            ));
        }
        let bytes = std::fs::read(path).map_err(|e| {
            Error::invalid(
                "supporting_files",
                format!("cannot read `{local}`: {e}; give a readable local file"),
            )
        })?;
        files.push((staged_file(name), bytes, 0o600));
    }
    Ok(files)
}

/// The sweep file of an array: `case` on the task index, each branch exporting that
/// point's values, quoted once.
fn sweep_file(spec: &JobSpec, array: &ArrayPlan) -> Result<Option<String>> {
    if spec.sweep.is_none() {
        return Ok(None);
    }
    let mut text = String::from(
        "# The sweep values of each task, by index (written by slurm-run).\ncase \"$SLURM_ARRAY_TASK_ID\" in\n",
    );
    for index in array.indices.iter() {
        let point = spec.sweep_point(index).unwrap_or_default();
        text.push_str(&format!("  {index})"));
        for (name, value) in &point {
            text.push_str(&format!(" export {name}={};", shell_quote(value)?));
        }
        text.push_str(" ;;\n");
    }
    text.push_str("esac\n");
    Ok(Some(text))
}

/// A tar archive of the job folder `<folder>/`: its `logs/` folder, `files` (path,
/// bytes, mode) and `SHA256SUMS` listing each file by its path inside the folder.
pub(crate) fn build_payload(folder: &str, files: &[(String, Vec<u8>, u32)]) -> Result<Vec<u8>> {
    let mut sums = String::new();
    let mut builder = tar::Builder::new(Vec::new());
    let mtime = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let append = |builder: &mut tar::Builder<Vec<u8>>,
                  path: &str,
                  bytes: &[u8],
                  mode: u32,
                  kind: tar::EntryType|
     -> Result<()> {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(mode);
        header.set_mtime(mtime);
        header.set_entry_type(kind);
        builder
            .append_data(&mut header, format!("{folder}/{path}"), bytes)
            .map_err(|e| Error::io(format!("packing {path}"), e))
    };
    append(&mut builder, "logs/", &[], 0o700, tar::EntryType::Directory)?;
    for (path, bytes, mode) in files {
        sums.push_str(&format!("{}  {path}\n", hex::encode(Sha256::digest(bytes))));
        append(&mut builder, path, bytes, *mode, tar::EntryType::Regular)?;
    }
    append(
        &mut builder,
        "SHA256SUMS",
        sums.as_bytes(),
        0o600,
        tar::EntryType::Regular,
    )?;
    builder
        .into_inner()
        .map_err(|e| Error::io("finishing the staging archive", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_lists_every_file_with_its_checksum() {
        let payload =
            build_payload("job-1", &[("a/b.txt".into(), b"hello".to_vec(), 0o600)]).unwrap();
        let mut archive = tar::Archive::new(payload.as_slice());
        let mut names = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let mut text = String::new();
            std::io::Read::read_to_string(&mut entry, &mut text).unwrap();
            names.push((
                entry.path().unwrap().display().to_string(),
                entry.header().mode().unwrap(),
                text,
            ));
        }
        assert_eq!(names[0].0, "job-1/logs/");
        assert_eq!(names[1].0, "job-1/a/b.txt");
        assert_eq!(names[1].1, 0o600);
        assert_eq!(names[2].0, "job-1/SHA256SUMS");
        assert!(names[2].2.starts_with(
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824  a/b.txt"
        ));
    }
}
