//! A job's code tree as it is sent: the files of a local directory (what git ignores
//! and what the spec excludes left out), each named by its content (SHA-256, plus `x`
//! for an executable), a manifest of `OBJECT PATH` lines whose hash names the tree, and
//! the commit git has checked out. Names no scheduler: the SLURM backend sends it.

mod git;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::spec::CodeSpec;
use crate::{Error, Result};

/// The default size limit of a code tree: 100 MiB (code, not data).
pub(crate) const DEFAULT_CODE_LIMIT: u64 = 100 * 1024 * 1024;

/// One distinct file content of a tree, as the cluster stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CodeObject {
    /// Its SHA-256 in hex, with `x` after it for an executable file.
    pub(crate) name: String,
    /// A file on this machine holding it.
    pub(crate) local: PathBuf,
    /// Its size in bytes.
    pub(crate) size: u64,
}

impl CodeObject {
    /// The SHA-256 the content must have.
    pub(crate) fn sha256(&self) -> &str {
        &self.name[..64]
    }
}

/// A code tree ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CodeTree {
    /// The SHA-256 of the manifest: the same files give the same id.
    pub(crate) id: String,
    /// `OBJECT PATH` lines, sorted by path (paths relative, `/`-separated).
    pub(crate) manifest: String,
    /// The distinct objects, by name.
    pub(crate) objects: Vec<CodeObject>,
    /// How many files the tree holds.
    pub(crate) files: usize,
    /// The commit checked out, when the directory is in a git work tree (`-dirty` after
    /// it when uncommitted changes were allowed and present).
    pub(crate) commit: Option<String>,
}

/// Read the tree `spec` names: refused when it is not a directory, holds a symlink or a
/// path that cannot travel, exceeds `limit` bytes, or (in a git work tree) has
/// uncommitted changes unless `allow_dirty`.
pub(crate) fn snapshot(spec: &CodeSpec, limit: u64) -> Result<CodeTree> {
    let dir = PathBuf::from(&spec.path);
    if !dir.is_dir() {
        return Err(Error::invalid(
            "code.path",
            format!(
                "{} is not a directory on this machine; give the directory of your code",
                dir.display()
            ),
        ));
    }
    let git = git::git_state(&dir)?;
    let commit = match &git {
        Some(state) if !state.changes.is_empty() => {
            if !spec.allow_dirty {
                let shown: Vec<&str> = state.changes.iter().take(5).map(String::as_str).collect();
                return Err(Error::invalid(
                    "code",
                    format!(
                        "{} has uncommitted changes ({}{}); commit or stash them so the job runs a known commit, or set code: {{path: {}, allow_dirty: true}}",
                        dir.display(),
                        shown.join("; "),
                        if state.changes.len() > 5 { "; ..." } else { "" },
                        spec.path
                    ),
                ));
            }
            state.commit.as_ref().map(|c| format!("{c}-dirty"))
        }
        Some(state) => state.commit.clone(),
        None => None,
    };

    let mut overrides = ignore::overrides::OverrideBuilder::new(&dir);
    for pattern in &spec.exclude {
        overrides.add(&format!("!{pattern}")).map_err(|e| {
            Error::invalid("code.exclude", format!("{pattern:?} is not a pattern: {e}"))
        })?;
    }
    let overrides = overrides
        .build()
        .map_err(|e| Error::invalid("code.exclude", e.to_string()))?;
    let walk = ignore::WalkBuilder::new(&dir)
        .hidden(false)
        .ignore(false)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(true)
        .require_git(true)
        .parents(true)
        .overrides(overrides)
        .filter_entry(|e| e.file_name() != ".git")
        .build();

    let mut lines: BTreeMap<String, String> = BTreeMap::new();
    let mut objects: BTreeMap<String, CodeObject> = BTreeMap::new();
    let mut total = 0u64;
    for entry in walk {
        let entry =
            entry.map_err(|e| Error::invalid("code.path", format!("cannot read the tree: {e}")))?;
        let file_type = entry.file_type().expect("not stdin");
        if file_type.is_dir() {
            continue;
        }
        let relative = relative_path(&dir, entry.path())?;
        if !file_type.is_file() {
            return Err(Error::invalid(
                "code",
                format!(
                    "{relative} is {}, which is not sent; exclude it (code: {{path: {}, exclude: [{relative:?}]}})",
                    if file_type.is_symlink() { "a symbolic link" } else { "not a regular file" },
                    spec.path
                ),
            ));
        }
        let metadata = entry
            .metadata()
            .map_err(|e| Error::invalid("code.path", format!("cannot read {relative}: {e}")))?;
        total += metadata.len();
        if total > limit {
            return Err(too_big(&dir, limit));
        }
        let sha = hash_file(entry.path())?;
        let executable = metadata.permissions().mode() & 0o111 != 0;
        let name = if executable { format!("{sha}x") } else { sha };
        lines.insert(relative, name.clone());
        objects.entry(name.clone()).or_insert(CodeObject {
            name,
            local: entry.path().to_path_buf(),
            size: metadata.len(),
        });
    }
    let manifest: String = lines
        .iter()
        .map(|(path, object)| format!("{object} {path}\n"))
        .collect();
    let id = hex::encode(Sha256::digest(manifest.as_bytes()));
    Ok(CodeTree {
        id,
        manifest,
        objects: objects.into_values().collect(),
        files: lines.len(),
        commit,
    })
}

/// The refusal of a tree above the limit.
fn too_big(dir: &Path, limit: u64) -> Error {
    Error::invalid(
        "code",
        format!(
            "{} holds more than {} MiB; code is sent with every change, data is not: put data sets and checkpoints on shared storage (datasets:, mounts:) and leave them out (code: {{path, exclude: [\"data/\"]}}), or raise the limit (SlurmConfigBuilder::with_code_limit)",
            dir.display(),
            limit / (1024 * 1024)
        ),
    )
}

/// `path` under `dir` as a `/`-separated relative path that can travel in a manifest line.
fn relative_path(dir: &Path, path: &Path) -> Result<String> {
    let relative = path.strip_prefix(dir).unwrap_or(path);
    let mut parts = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(part) => match part.to_str() {
                Some(p) if !p.contains(['\n', '\r']) => parts.push(p),
                _ => {
                    return Err(Error::invalid(
                        "code",
                        format!(
                            "{} has a name that is not UTF-8 or holds a line break; rename it or exclude it",
                            path.display()
                        ),
                    ))
                }
            },
            _ => {
                return Err(Error::invalid(
                    "code",
                    format!("{} is not a plain path under the tree", path.display()),
                ))
            }
        }
    }
    Ok(parts.join("/"))
}

/// The SHA-256 of a file, in hex.
pub(crate) fn hash_file(path: &Path) -> Result<String> {
    let mut file =
        File::open(path).map_err(|e| Error::io(format!("read {}", path.display()), e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| Error::io(format!("read {}", path.display()), e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests;
