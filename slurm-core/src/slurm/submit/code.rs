//! The job's code tree sent to the cluster, content-addressed under the results root
//! (`.code/objects/<sha256>[x]`, trees of hard links at `.code/trees/<id>`): one round
//! trip asks which objects are missing (or finds the tree whole), then only those are
//! sent, in archives of a few MiB (each checked against its SHA-256 on arrival), the
//! last with the manifest that makes the tree. A tree this backend already made is not
//! asked about again, so a sweep's jobs send it once and ask once.

use sha2::{Digest, Sha256};

use crate::code::{CodeObject, CodeTree};
use crate::slurm::context::code_progress::CodeSent;
use crate::slurm::context::Context;
use crate::slurm::scripts::{CodePutExit, CODE_MISSING, CODE_PUT};
use crate::storage::RemotePath;
use crate::{Error, Result};

/// The objects of one archive: a few MiB at most (an object larger than that goes alone).
const ARCHIVE_BYTES: u64 = 8 * 1024 * 1024;

/// A tree on the cluster, for the script and the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StagedCode {
    /// The tree's folder (read-only), mounted into the container and exported as
    /// `SLURM_RUN_CODE_DIR`.
    pub(crate) dir: RemotePath,
    /// The commit git had checked out.
    pub(crate) commit: Option<String>,
    /// What the PENDING mark says of it.
    pub(crate) note: String,
}

/// The code store under `root`.
fn store(root: &RemotePath) -> Result<RemotePath> {
    RemotePath::parse_for("results root", &format!("{}/.code", root.as_str()))
}

/// Send `tree` to the cluster's store under `root` (only what it lacks) and answer
/// where the job finds it.
pub(crate) async fn send_code(
    ctx: &Context<'_>,
    tree: &CodeTree,
    root: &RemotePath,
) -> Result<StagedCode> {
    let store = store(root)?;
    let dir = RemotePath::parse_for(
        "code tree",
        &format!("{}/trees/{}", store.as_str(), tree.id),
    )?;
    let known = format!("{}/{}", store.as_str(), tree.id);
    let short = &tree.id[..12];
    let staged = |note: String| StagedCode {
        dir: dir.clone(),
        commit: tree.commit.clone(),
        note,
    };
    if ctx.facts().read(|f| f.code_trees.contains(&known)) {
        return Ok(staged(format!("code tree {short}: already on the cluster")));
    }
    let names: String = tree
        .objects
        .iter()
        .map(|o| format!("{}\n", o.name))
        .collect();
    let ask = CODE_MISSING
        .command([store.as_str().to_string(), tree.id.clone()])
        .stdin(names.into_bytes())
        .display_as("code-missing");
    let answer = ctx.transport().run(&ask).await?.check(&ask)?;
    let answer = answer.stdout_text();
    let note = if answer.trim() == "tree present" {
        format!(
            "code tree {short}: already on the cluster ({} files)",
            tree.files
        )
    } else {
        let missing: Vec<&CodeObject> = {
            let lacking: std::collections::HashSet<&str> = answer.lines().collect();
            tree.objects
                .iter()
                .filter(|o| lacking.contains(o.name.as_str()))
                .collect()
        };
        let sent = put(ctx, tree, &store, &missing).await?;
        format!(
            "code tree {short}: {} of {} files sent ({sent} bytes)",
            missing.len(),
            tree.objects.len()
        )
    };
    ctx.facts().change(|f| f.code_trees.insert(known));
    Ok(staged(note))
}

/// Send `missing` in archives, the last with the manifest; the bytes sent.
async fn put(
    ctx: &Context<'_>,
    tree: &CodeTree,
    store: &RemotePath,
    missing: &[&CodeObject],
) -> Result<u64> {
    let missing_bytes: u64 = missing.iter().map(|o| o.size).sum();
    let mut progress = CodeSent {
        sent_bytes: 0,
        missing_bytes,
        sent_objects: 0,
        missing_objects: missing.len(),
    };
    let report = |p: CodeSent| {
        if let Some(callback) = ctx.hooks().code_progress() {
            callback(p);
        }
    };
    report(progress);
    let mut batches: Vec<Vec<&CodeObject>> = vec![Vec::new()];
    let mut size = 0;
    for object in missing {
        if size + object.size > ARCHIVE_BYTES && !batches.last().expect("a batch").is_empty() {
            batches.push(Vec::new());
            size = 0;
        }
        size += object.size;
        batches.last_mut().expect("a batch").push(object);
    }
    let count = batches.len();
    for (i, batch) in batches.into_iter().enumerate() {
        let last = i + 1 == count;
        let archive = archive(&batch, last.then_some(tree.manifest.as_str()))?;
        let part = if last { "tree" } else { "objects" };
        let command = CODE_PUT
            .command([
                store.as_str().to_string(),
                tree.id.clone(),
                part.to_string(),
            ])
            .stdin(archive)
            .display_as("code-put");
        let output = ctx.transport().run(&command).await?;
        if !output.success() {
            let why = match CodePutExit::from_status(output.status) {
                Some(CodePutExit::ChecksumMismatch) => "an object arrived damaged (its SHA-256 does not match); submit again",
                Some(CodePutExit::ObjectMissing) => "an object of the tree is missing from the store (removed meanwhile?); submit again",
                Some(CodePutExit::StoreUnwritable) => "the code store under the results root cannot be written; check its permissions and free space",
                Some(CodePutExit::UnpackFailed) | None => "the archive did not unpack",
            };
            return Err(Error::Remote {
                command: "code-put".into(),
                status: output.status,
                stderr: format!("{why}: {}", output.stderr_text().trim()),
                transient: matches!(
                    CodePutExit::from_status(output.status),
                    Some(CodePutExit::ChecksumMismatch)
                ),
            });
        }
        progress.sent_objects += batch.len();
        progress.sent_bytes += batch.iter().map(|o| o.size).sum::<u64>();
        report(progress);
    }
    Ok(progress.sent_bytes)
}

/// A tar archive of `objects` (each read again and checked against its name: a file
/// changed since it was read is refused) and the `manifest`, when given.
fn archive(objects: &[&CodeObject], manifest: Option<&str>) -> Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    {
        let mut append = |path: &str, bytes: &[u8]| {
            let mut header = tar::Header::new_gnu();
            header.set_size(bytes.len() as u64);
            header.set_mode(0o644);
            header.set_entry_type(tar::EntryType::Regular);
            builder
                .append_data(&mut header, path, bytes)
                .map_err(|e| Error::io(format!("pack {path}"), e))
        };
        for object in objects {
            let bytes = std::fs::read(&object.local)
                .map_err(|e| Error::io(format!("read {}", object.local.display()), e))?;
            if hex::encode(Sha256::digest(&bytes)) != object.sha256()
                || bytes.len() as u64 != object.size
            {
                return Err(Error::invalid(
                    "code",
                    format!(
                        "{} changed while it was being sent; submit again once it is saved",
                        object.local.display()
                    ),
                ));
            }
            append(&format!("objects/{}", object.name), &bytes)?;
        }
        if let Some(manifest) = manifest {
            append("manifest", manifest.as_bytes())?;
        }
    }
    builder
        .into_inner()
        .map_err(|e| Error::io("finish a code archive", e))
}
