//! The spec's `code` key: a local directory sent to the cluster with the job (a path,
//! or `{path, exclude, allow_dirty}`).

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The job's code: a local directory, sent content-addressed and seen read-only by the
/// job at `SLURM_RUN_CODE_DIR`. Written `code: ./src` or
/// `code: {path: ./src, exclude: ["*.ckpt"], allow_dirty: false}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CodeSpec {
    /// The directory on this machine (relative to the current directory, or absolute).
    pub path: String,
    /// Patterns (gitignore syntax) of files to leave out, beside what git ignores.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// Send a git work tree with uncommitted changes (refused otherwise).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_dirty: bool,
}

impl CodeSpec {
    /// The directory at `path`, nothing excluded, a dirty tree refused.
    pub fn new(path: impl Into<String>) -> Self {
        CodeSpec {
            path: path.into(),
            exclude: Vec::new(),
            allow_dirty: false,
        }
    }

    /// Check the key's form (the directory itself is read at submit).
    pub(crate) fn validate(&self) -> Result<()> {
        if self.path.trim().is_empty() || self.path.contains(['\0', '\n']) {
            return Err(Error::invalid(
                "code.path",
                "give the local directory to send, e.g. code: ./src",
            ));
        }
        for pattern in &self.exclude {
            if pattern.trim().is_empty() || pattern.contains(['\0', '\n']) {
                return Err(Error::invalid(
                    "code.exclude",
                    "an entry is empty or holds NUL/newline; give a gitignore pattern such as \"*.ckpt\"",
                ));
            }
        }
        Ok(())
    }
}

/// The two written forms.
#[derive(Deserialize)]
#[serde(
    untagged,
    expecting = "a directory path, or {path: DIR, exclude: [PATTERN...], allow_dirty: BOOL}"
)]
enum Written {
    Path(String),
    Full(Full),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Full {
    path: String,
    #[serde(default)]
    exclude: Vec<String>,
    #[serde(default)]
    allow_dirty: bool,
}

impl<'de> Deserialize<'de> for CodeSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        Ok(match Written::deserialize(d)? {
            Written::Path(path) => CodeSpec::new(path),
            Written::Full(f) => CodeSpec {
                path: f.path,
                exclude: f.exclude,
                allow_dirty: f.allow_dirty,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_read_and_a_stray_key_is_refused() {
        let short: CodeSpec = serde_yaml_ng::from_str("./src").unwrap();
        assert_eq!(short, CodeSpec::new("./src"));
        let full: CodeSpec =
            serde_yaml_ng::from_str("{path: ./src, exclude: ['*.ckpt'], allow_dirty: true}")
                .unwrap();
        assert_eq!(full.exclude, ["*.ckpt"]);
        assert!(full.allow_dirty);
        let err =
            serde_yaml_ng::from_str::<CodeSpec>("{path: ./src, allow_dirt: true}").unwrap_err();
        assert!(err.to_string().contains("allow_dirty: BOOL"), "{err}");
        assert!(CodeSpec::new(" ").validate().is_err());
        let mut bad = CodeSpec::new("./src");
        bad.exclude.push(String::new());
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("code.exclude"));
    }
}
