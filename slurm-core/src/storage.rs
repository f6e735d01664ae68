//! Storage on the cluster: absolute remote paths, `lustre://` and `slurm://` URIs, and Pyxis mount specs.
//!
//! For a remote backend, data must already be on shared storage: `file://` URIs
//! and relative paths name files on this machine and are refused with an error
//! saying how to stage them.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// An absolute, normalised path on the cluster: starts with `/`, no `..`, no
/// `.` or empty components, no NUL, newline or comma (Pyxis separates mounts
/// with commas).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RemotePath(String);

impl RemotePath {
    /// Parse and normalise an absolute path; `field` names the spec field in errors.
    pub(crate) fn parse_for(field: &str, text: &str) -> Result<Self> {
        let normal = Self::normal_form(field, text)?;
        Ok(RemotePath(normal.unwrap_or_else(|| text.to_string())))
    }

    /// The normal form of path `text`, checked as [`parse_for`](Self::parse_for) does;
    /// `None` when `text` is already normal (as a record keeps it: reading it back
    /// copies nothing).
    fn normal_form(field: &str, text: &str) -> Result<Option<String>> {
        if !text.starts_with('/') {
            return Err(Error::invalid(
                field,
                format!("`{text}` is not absolute; give a path starting with / on the cluster's shared storage"),
            ));
        }
        if text.chars().any(|c| c.is_control() || c == ',') {
            return Err(Error::invalid(
                field,
                "a cluster path cannot hold control characters or commas",
            ));
        }
        // Normal: `/` alone, or each part after one `/`, none empty or `.`.
        let mut normal = true;
        for part in text[1..].split('/') {
            match part {
                "" | "." => normal = false,
                ".." => {
                    return Err(Error::invalid(
                        field,
                        format!("`{text}` holds `..`; give the plain absolute path"),
                    ))
                }
                _ => {}
            }
        }
        if normal || text == "/" {
            return Ok(None);
        }
        let parts: Vec<&str> = text
            .split('/')
            .filter(|part| !matches!(*part, "" | "."))
            .collect();
        Ok(Some(format!("/{}", parts.join("/"))))
    }

    /// Parse and normalise an absolute path (errors name the field `path`).
    pub fn parse(text: &str) -> Result<Self> {
        Self::parse_for("path", text)
    }

    /// The path text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// This path joined with one safe name (no `/`, not `.` or `..`).
    pub fn join(&self, name: &str) -> Result<RemotePath> {
        crate::names::validate_safe_name("path component", name)?;
        if self.0 == "/" {
            Ok(RemotePath(format!("/{name}")))
        } else {
            Ok(RemotePath(format!("{}/{name}", self.0)))
        }
    }
}

impl fmt::Display for RemotePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for RemotePath {
    type Error = Error;
    fn try_from(value: String) -> Result<Self> {
        let normal = RemotePath::normal_form("path", &value)?;
        Ok(RemotePath(normal.unwrap_or(value)))
    }
}

impl From<RemotePath> for String {
    fn from(value: RemotePath) -> Self {
        value.0
    }
}

/// A storage location given by a user: a URI or an absolute cluster path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum StorageUri {
    /// `lustre:///abs/path`.
    Lustre(RemotePath),
    /// `slurm:///abs/path` (or `slurm://abs/path`, read as `/abs/path`).
    Slurm(RemotePath),
    /// A plain absolute path, taken as a cluster path.
    Path(RemotePath),
}

impl StorageUri {
    /// Parse a URI or path; `field` names the spec field in errors.
    pub(crate) fn parse_for(field: &str, text: &str) -> Result<Self> {
        let t = text.trim();
        if t.is_empty() {
            return Err(Error::invalid(
                field,
                "empty; give lustre:///abs/path or an absolute cluster path",
            ));
        }
        if let Some(rest) = t.strip_prefix("lustre://") {
            if !rest.starts_with('/') {
                return Err(Error::invalid(
                    field,
                    format!(
                        "`{t}`: a lustre URI has no host; write lustre:///abs/path (three slashes)"
                    ),
                ));
            }
            return Ok(StorageUri::Lustre(RemotePath::parse_for(field, rest)?));
        }
        if let Some(rest) = t.strip_prefix("slurm://") {
            let path = if rest.starts_with('/') {
                rest.to_string()
            } else {
                format!("/{rest}")
            };
            if path == "/" && rest.is_empty() {
                return Err(Error::invalid(
                    field,
                    format!("`{t}` names no path; write slurm:///abs/path"),
                ));
            }
            return Ok(StorageUri::Slurm(RemotePath::parse_for(field, &path)?));
        }
        if t.starts_with("file://") {
            return Err(Error::invalid(
                field,
                format!("`{t}` is a file on this machine, which the cluster cannot see; stage it to shared storage and use lustre:///abs/path"),
            ));
        }
        if let Some((scheme, _)) = t.split_once("://") {
            return Err(Error::invalid(
                field,
                format!("scheme `{scheme}://` is not supported for cluster data; stage it to shared storage before submit and use lustre:///abs/path"),
            ));
        }
        if t.starts_with('/') {
            return Ok(StorageUri::Path(RemotePath::parse_for(field, t)?));
        }
        Err(Error::invalid(
            field,
            format!("`{t}` is a relative local path, refused for a remote backend; give an absolute cluster path or lustre:///abs/path"),
        ))
    }

    /// [`StorageUri::parse_for`] with the field name `storage uri`.
    #[cfg(test)]
    pub(crate) fn parse(text: &str) -> Result<Self> {
        Self::parse_for("storage uri", text)
    }

    /// The absolute cluster path this location names.
    pub(crate) fn resolve(&self) -> RemotePath {
        match self {
            StorageUri::Lustre(p) | StorageUri::Slurm(p) | StorageUri::Path(p) => p.clone(),
        }
    }
}

impl fmt::Display for StorageUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageUri::Lustre(p) => write!(f, "lustre://{p}"),
            StorageUri::Slurm(p) => write!(f, "slurm://{p}"),
            StorageUri::Path(p) => write!(f, "{p}"),
        }
    }
}

/// One container mount, `SRC[:DST[:FLAGS]]` with SRC a URI or absolute path,
/// resolved to absolute cluster paths.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct MountSpec {
    /// The cluster path mounted.
    pub(crate) source: RemotePath,
    /// Where it appears in the container (defaults to the source path).
    pub(crate) target: RemotePath,
    /// Pyxis mount flags (`ro`, `rw`, ...), if any.
    pub(crate) flags: Option<String>,
}

impl MountSpec {
    /// Parse `SRC[:DST[:FLAGS]]`, e.g. `lustre:///data/train:/data:ro`.
    pub(crate) fn parse(text: &str) -> Result<Self> {
        const FIELD: &str = "mounts";
        let t = text.trim();
        // A URI source keeps the `:` of its scheme.
        let (scheme_len, after_scheme) = match t.find("://") {
            Some(i) if t[..i].chars().all(|c| c.is_ascii_alphanumeric()) && i > 0 => {
                (i + 3, &t[i + 3..])
            }
            _ => (0, t),
        };
        let mut parts = after_scheme.splitn(3, ':');
        let src_rest = parts.next().unwrap_or("");
        let src_text = &t[..scheme_len + src_rest.len()];
        let source = StorageUri::parse_for(FIELD, src_text)?.resolve();
        let target = match parts.next() {
            None => source.clone(),
            Some(dst) => RemotePath::parse_for(FIELD, dst).map_err(|_| {
                Error::invalid(
                    FIELD,
                    format!("`{t}`: the target `{dst}` must be an absolute path inside the container without `..`"),
                )
            })?,
        };
        let flags = match parts.next() {
            None => None,
            Some(f)
                if !f.is_empty()
                    && f.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "+=_-".contains(c)) =>
            {
                Some(f.to_string())
            }
            Some(f) => {
                return Err(Error::invalid(
                    FIELD,
                    format!("`{t}`: bad mount flags `{f}`; use Pyxis flags such as ro or rw"),
                ))
            }
        };
        Ok(MountSpec {
            source,
            target,
            flags,
        })
    }

    /// The Pyxis form, `SRC:DST[:FLAGS]`.
    pub(crate) fn to_pyxis(&self) -> String {
        match &self.flags {
            Some(f) => format!("{}:{}:{f}", self.source, self.target),
            None => format!("{}:{}", self.source, self.target),
        }
    }
}

impl fmt::Display for MountSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_pyxis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_forms_resolve_to_absolute_paths() {
        let cases = [
            ("lustre:///data/train", "/data/train"),
            ("lustre:///data//train/./x/", "/data/train/x"),
            ("slurm:///lustre/fs/ds", "/lustre/fs/ds"),
            ("slurm://lustre/fs/ds", "/lustre/fs/ds"),
            ("/scratch/ds", "/scratch/ds"),
            ("/", "/"),
        ];
        for (input, path) in cases {
            let uri = StorageUri::parse(input).unwrap();
            assert_eq!(uri.resolve().as_str(), path, "{input}");
        }
        assert!(matches!(
            StorageUri::parse("lustre:///a").unwrap(),
            StorageUri::Lustre(_)
        ));
        assert_eq!(
            StorageUri::parse("lustre:///a/b").unwrap().to_string(),
            "lustre:///a/b"
        );
    }

    #[test]
    fn local_and_odd_forms_are_refused_clearly() {
        let cases = [
            ("file:///home/me/data", "cannot see"),
            ("data/train", "relative local path"),
            ("./data", "relative local path"),
            ("~/data", "relative local path"),
            ("s3://bucket/x", "not supported"),
            ("lustre://host/data", "three slashes"),
            ("lustre:///a/../etc", "`..`"),
            ("/a,b", "commas"),
            ("", "empty"),
            ("slurm://", "names no path"),
        ];
        for (input, needle) in cases {
            let err = StorageUri::parse_for("datasets", input).unwrap_err();
            let msg = err.to_string();
            assert!(msg.starts_with("invalid datasets"), "{input}: {msg}");
            assert!(msg.contains(needle), "{input}: {msg}");
        }
    }

    #[test]
    fn a_path_reads_in_normal_form_whether_parsed_or_read_back() {
        for (text, normal) in [
            ("/", "/"),
            ("/lustre/results/job-1", "/lustre/results/job-1"),
            ("/a.b/.c/d..e", "/a.b/.c/d..e"),
            ("//", "/"),
            ("/.", "/"),
            ("/lustre//results/", "/lustre/results"),
            ("/lustre/./results/.", "/lustre/results"),
            ("//lustre///x", "/lustre/x"),
        ] {
            assert_eq!(RemotePath::parse(text).unwrap().as_str(), normal, "{text}");
            let read: RemotePath = serde_json::from_value(serde_json::json!(text)).unwrap();
            assert_eq!(read.as_str(), normal, "{text}");
        }
        for bad in ["relative", "/a/../b", "/..", "/a,b", "/a\nb", ""] {
            assert!(RemotePath::parse(bad).is_err(), "{bad}");
            assert!(serde_json::from_value::<RemotePath>(serde_json::json!(bad)).is_err());
        }
    }

    #[test]
    fn remote_paths_join_safe_names_only() {
        let p = RemotePath::parse("/base").unwrap();
        assert_eq!(p.join("job-1").unwrap().as_str(), "/base/job-1");
        assert_eq!(
            RemotePath::parse("/").unwrap().join("x").unwrap().as_str(),
            "/x"
        );
        for bad in ["..", "a/b", "", ".hidden"] {
            assert!(p.join(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn mount_specs() {
        let m = MountSpec::parse("lustre:///data/train:/data").unwrap();
        assert_eq!(
            (m.source.as_str(), m.target.as_str(), m.flags.as_deref()),
            ("/data/train", "/data", None)
        );
        let m = MountSpec::parse("/scratch/x:/x:ro").unwrap();
        assert_eq!(m.to_pyxis(), "/scratch/x:/x:ro");
        let m = MountSpec::parse("slurm:///shared/ckpt").unwrap();
        assert_eq!(m.to_pyxis(), "/shared/ckpt:/shared/ckpt");
        let m = MountSpec::parse("lustre:///a/b:/c:rw").unwrap();
        assert_eq!(m.to_string(), "/a/b:/c:rw");
        for bad in [
            "",
            "rel:/x",
            "file:///x:/x",
            "/a:rel",
            "/a:/b:r o",
            "/a:/b:",
            "/a:/../b",
        ] {
            assert!(MountSpec::parse(bad).is_err(), "{bad}");
        }
    }
}
