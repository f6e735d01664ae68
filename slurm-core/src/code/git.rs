//! What git says of a code tree: whether it is inside a work tree, its commit, and
//! whether it has uncommitted changes (the `git` program, run on this machine).

use std::path::Path;
use std::process::Command;

use crate::{Error, Result};

/// A code tree's place in git.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GitState {
    /// The commit checked out (`HEAD`), if it has one.
    pub(crate) commit: Option<String>,
    /// `git status --porcelain` of the tree's directory: what is not committed (changed,
    /// staged, or new and not ignored).
    pub(crate) changes: Vec<String>,
}

/// Run `git -C dir ARGS`; `None` when git is not installed.
fn git(dir: &Path, args: &[&str]) -> Result<Option<std::process::Output>> {
    match Command::new("git").arg("-C").arg(dir).args(args).output() {
        Ok(output) => Ok(Some(output)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(format!("run git in {}", dir.display()), e)),
    }
}

/// What git says of `dir`: `None` outside a git work tree (or without git, when `dir`
/// holds no `.git` of its own).
pub(crate) fn git_state(dir: &Path) -> Result<Option<GitState>> {
    let Some(inside) = git(dir, &["rev-parse", "--is-inside-work-tree"])? else {
        if dir.join(".git").exists() {
            return Err(Error::invalid(
                "code.path",
                format!(
                    "{} is a git work tree but git is not installed; install git (it decides what is ignored and whether the tree is committed)",
                    dir.display()
                ),
            ));
        }
        return Ok(None);
    };
    if !inside.status.success() || String::from_utf8_lossy(&inside.stdout).trim() != "true" {
        return Ok(None);
    }
    let head = git(dir, &["rev-parse", "--verify", "--quiet", "HEAD"])?.expect("git ran");
    let commit = head
        .status
        .success()
        .then(|| String::from_utf8_lossy(&head.stdout).trim().to_string())
        .filter(|c| !c.is_empty());
    let status = git(
        dir,
        &["status", "--porcelain", "--untracked-files=all", "--", "."],
    )?
    .expect("git ran");
    if !status.status.success() {
        return Err(Error::invalid(
            "code.path",
            format!(
                "git status failed in {}: {}",
                dir.display(),
                String::from_utf8_lossy(&status.stderr).trim()
            ),
        ));
    }
    let changes = String::from_utf8_lossy(&status.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    Ok(Some(GitState { commit, changes }))
}
