//! Container image references: local `.sqsh` files and registry images, in the forms Pyxis accepts, normalised.
//!
//! Accepted: `/path/image.sqsh`, `registry#image:tag`, `docker://registry#image:tag`,
//! `dockerd://image:tag` and plain `registry/image:tag` or `image:tag`. The Pyxis
//! rules: a path starting with `/` is a squashfs file; when the first part of a
//! registry reference holds `.` or `:` or is `localhost`, it is the registry and
//! is written `registry#rest`.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Where a registry image is pulled from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(crate) enum ImageScheme {
    /// A registry (`docker://`, the default).
    Docker,
    /// The local docker daemon (`dockerd://`).
    Dockerd,
}

/// A parsed container image reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub(crate) enum ImageRef {
    /// A squashfs file on the cluster (absolute path).
    Sqsh(String),
    /// A registry image.
    Registry {
        /// `docker://` or `dockerd://`.
        scheme: ImageScheme,
        /// The registry host (`nvcr.io`, `localhost:5000`), or none for the default registry.
        registry: Option<String>,
        /// The repository with tag or digest (`nvidia/pytorch:24.01-py3`).
        image: String,
    },
}

fn invalid(message: impl Into<String>) -> Error {
    Error::invalid("image", message)
}

fn is_image_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "._-/:@".contains(c)
}

impl ImageRef {
    /// Parse any accepted form (see the module docs).
    pub(crate) fn parse(text: &str) -> Result<Self> {
        let t = text.trim();
        if t.is_empty() {
            return Err(invalid(
                "empty image; give a .sqsh path or a registry image such as nvcr.io/nvidia/pytorch:24.01-py3",
            ));
        }
        if t.chars()
            .any(|c| c.is_control() || c.is_whitespace() || c == ',')
        {
            return Err(invalid(
                "an image reference cannot hold spaces, commas or control characters",
            ));
        }
        if t.starts_with('/') {
            if t.split('/').any(|p| p == "..") {
                return Err(invalid(format!(
                    "`{t}` holds `..`; give a plain absolute path"
                )));
            }
            return Ok(ImageRef::Sqsh(t.to_string()));
        }
        if t.starts_with('.') || t.starts_with('~') {
            return Err(invalid(format!(
                "`{t}` is a relative path; give the absolute path of the .sqsh file on the cluster"
            )));
        }
        let (scheme, rest) = if let Some(r) = t.strip_prefix("docker://") {
            (ImageScheme::Docker, r)
        } else if let Some(r) = t.strip_prefix("dockerd://") {
            (ImageScheme::Dockerd, r)
        } else if t.contains("://") {
            return Err(invalid(format!(
                "`{t}`: unsupported scheme; use docker://, dockerd://, a registry image or a .sqsh path"
            )));
        } else {
            (ImageScheme::Docker, t)
        };
        let (registry, image) = match rest.split_once('#') {
            Some((reg, img)) => (Some(reg), img),
            None => match rest.split_once('/') {
                Some((first, img))
                    if first.contains('.') || first.contains(':') || first == "localhost" =>
                {
                    (Some(first), img)
                }
                _ => (None, rest),
            },
        };
        if let Some(reg) = registry {
            let valid = !reg.is_empty()
                && reg
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || ".-:".contains(c));
            if !valid {
                return Err(invalid(format!("`{t}`: bad registry `{reg}`")));
            }
        }
        if image.is_empty()
            || !image.chars().all(is_image_char)
            || image.starts_with('/')
            || image.ends_with(':')
            || image.ends_with('/')
            || image.contains("//")
        {
            return Err(invalid(format!(
                "`{t}`: bad image name; write it as registry/repository:tag"
            )));
        }
        if image.ends_with(".sqsh") {
            return Err(invalid(format!(
                "`{t}` looks like a relative .sqsh path; give the absolute path of the file on the cluster"
            )));
        }
        Ok(ImageRef::Registry {
            scheme,
            registry: registry.map(str::to_string),
            image: image.to_string(),
        })
    }

    /// Whether this is a squashfs file (no pull needed).
    pub(crate) fn is_sqsh(&self) -> bool {
        matches!(self, ImageRef::Sqsh(_))
    }

    /// Whether this is a registry image (Pyxis would pull it inside the allocation).
    pub(crate) fn is_registry(&self) -> bool {
        !self.is_sqsh()
    }

    /// The form passed to `srun --container-image=`: the path of a `.sqsh`, or
    /// `registry#image:tag` (`dockerd://` kept). In an `#SBATCH` line `#` must be
    /// written `\#`; the renderer does that.
    pub(crate) fn pyxis(&self) -> String {
        match self {
            ImageRef::Sqsh(path) => path.clone(),
            ImageRef::Registry {
                scheme,
                registry,
                image,
            } => {
                let body = match registry {
                    Some(r) => format!("{r}#{image}"),
                    None => image.clone(),
                };
                match scheme {
                    ImageScheme::Docker => body,
                    ImageScheme::Dockerd => format!("dockerd://{body}"),
                }
            }
        }
    }

    /// The URI for `enroot import` (`docker://registry#image:tag`); `None` for a `.sqsh`.
    pub(crate) fn import_uri(&self) -> Option<String> {
        match self {
            ImageRef::Sqsh(_) => None,
            ImageRef::Registry { scheme, .. } => match scheme {
                ImageScheme::Docker => Some(format!("docker://{}", self.pyxis())),
                ImageScheme::Dockerd => Some(self.pyxis()),
            },
        }
    }

    /// The registry host, if any.
    pub(crate) fn registry(&self) -> Option<&str> {
        match self {
            ImageRef::Registry { registry, .. } => registry.as_deref(),
            ImageRef::Sqsh(_) => None,
        }
    }

    /// The tag (`24.01-py3`), if the reference names one (not for digests or files).
    pub(crate) fn tag(&self) -> Option<&str> {
        match self {
            ImageRef::Registry { image, .. } => {
                if image.contains('@') {
                    return None;
                }
                let last = image.rsplit('/').next().unwrap_or(image);
                last.split_once(':').map(|(_, tag)| tag)
            }
            ImageRef::Sqsh(_) => None,
        }
    }

    /// Whether the reference floats: tag `latest`, or no tag and no digest.
    pub(crate) fn is_latest(&self) -> bool {
        match self {
            ImageRef::Registry { image, .. } => {
                !image.contains('@') && self.tag().is_none_or(|t| t == "latest")
            }
            ImageRef::Sqsh(_) => false,
        }
    }

    /// The file name of the converted image in the cache: the Pyxis form with
    /// `/`, `:`, `#` (and any other unsafe character) replaced by `_`, plus
    /// `.sqsh`. `None` for a `.sqsh` file.
    pub(crate) fn cache_file_name(&self) -> Option<String> {
        match self {
            ImageRef::Sqsh(_) => None,
            ImageRef::Registry { .. } => {
                let body: String = self
                    .pyxis()
                    .trim_start_matches("dockerd://")
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' {
                            c
                        } else {
                            '_'
                        }
                    })
                    .collect();
                Some(format!("{body}.sqsh"))
            }
        }
    }
}

/// Refuse a registry image for a GPU job unless the caller opted in: Pyxis would
/// pull and convert it on idle, billed GPUs. Convert it to a `.sqsh` on a CPU
/// partition first.
pub(crate) fn check_gpu_image(
    image: &ImageRef,
    gpus: u32,
    allow_registry_image: bool,
) -> Result<()> {
    if image.is_registry() && gpus > 0 && !allow_registry_image {
        return Err(invalid(format!(
            "registry image `{}` would be pulled inside the GPU allocation; convert it to a .sqsh on a CPU partition first (stage it) and use that path, or set allow_registry_image: true",
            image.pyxis()
        )));
    }
    Ok(())
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.pyxis())
    }
}

impl std::str::FromStr for ImageRef {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        ImageRef::parse(s)
    }
}

impl TryFrom<String> for ImageRef {
    type Error = Error;
    fn try_from(value: String) -> Result<Self> {
        ImageRef::parse(&value)
    }
}

impl From<ImageRef> for String {
    fn from(value: ImageRef) -> Self {
        value.pyxis()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_gives_the_pyxis_form_and_cache_name() {
        let img = ImageRef::parse("nvcr.io/nvidia/pytorch:24.01-py3").unwrap();
        assert_eq!(img.pyxis(), "nvcr.io#nvidia/pytorch:24.01-py3");
        assert_eq!(
            img.cache_file_name().unwrap(),
            "nvcr.io_nvidia_pytorch_24.01-py3.sqsh"
        );
        assert!(ImageRef::parse("/lustre/images/pt.sqsh").unwrap().is_sqsh());
    }

    #[test]
    fn each_accepted_form() {
        let cases = [
            ("/lustre/img/pt.sqsh", "/lustre/img/pt.sqsh", true),
            (
                "nvcr.io#nvidia/pytorch:24.01-py3",
                "nvcr.io#nvidia/pytorch:24.01-py3",
                false,
            ),
            (
                "docker://nvcr.io#nvidia/tao:5",
                "nvcr.io#nvidia/tao:5",
                false,
            ),
            ("nvcr.io/nvidia/tao:5", "nvcr.io#nvidia/tao:5", false),
            ("localhost/img:1", "localhost#img:1", false),
            (
                "localhost:5000/team/img:1",
                "localhost:5000#team/img:1",
                false,
            ),
            ("ubuntu:22.04", "ubuntu:22.04", false),
            ("library/ubuntu:22.04", "library/ubuntu:22.04", false),
            ("dockerd://myimg:dev", "dockerd://myimg:dev", false),
        ];
        for (input, pyxis, sqsh) in cases {
            let img = ImageRef::parse(input).unwrap();
            assert_eq!(img.pyxis(), pyxis, "{input}");
            assert_eq!(img.is_sqsh(), sqsh, "{input}");
            // The normal form parses back to the same reference.
            assert_eq!(ImageRef::parse(&img.pyxis()).unwrap(), img, "{input}");
        }
        assert_eq!(
            ImageRef::parse("nvcr.io/nvidia/tao:5")
                .unwrap()
                .import_uri()
                .unwrap(),
            "docker://nvcr.io#nvidia/tao:5"
        );
        assert_eq!(ImageRef::parse("/x.sqsh").unwrap().import_uri(), None);
    }

    #[test]
    fn cache_names_tags_and_latest() {
        let img = ImageRef::parse("nvcr.io/nvidia/tao/tao-toolkit:5.5.0-pyt").unwrap();
        assert_eq!(
            img.cache_file_name().unwrap(),
            "nvcr.io_nvidia_tao_tao-toolkit_5.5.0-pyt.sqsh"
        );
        assert_eq!(img.tag(), Some("5.5.0-pyt"));
        assert!(!img.is_latest());
        assert!(ImageRef::parse("ubuntu").unwrap().is_latest());
        assert!(ImageRef::parse("nvcr.io/x/y:latest").unwrap().is_latest());
        assert!(ImageRef::parse("localhost:5000/y").unwrap().is_latest());
        assert!(!ImageRef::parse("repo/y@sha256:abcd").unwrap().is_latest());
        assert_eq!(ImageRef::parse("/a.sqsh").unwrap().cache_file_name(), None);
        assert_eq!(ImageRef::parse("a/b:1").unwrap().registry(), None);
        assert!(ImageRef::parse("images/pt.sqsh").is_err());
    }

    #[test]
    fn refused_forms_name_the_field() {
        for bad in [
            "",
            " ",
            "./img.sqsh",
            "~/img.sqsh",
            "img with space",
            "/a/../b.sqsh",
            "s3://bucket/img",
            "nvcr.io#",
            "#img",
            "nvcr.io/",
            "a,b",
            "img:",
            "bad$reg#img",
        ] {
            let err = ImageRef::parse(bad).unwrap_err();
            assert!(err.to_string().starts_with("invalid image"), "{bad}: {err}");
        }
    }

    #[test]
    fn registry_images_need_opt_in_for_gpu_jobs() {
        let reg = ImageRef::parse("nvcr.io/nvidia/tao:5").unwrap();
        let err = check_gpu_image(&reg, 4, false).unwrap_err();
        assert!(err.to_string().contains("allow_registry_image"));
        assert!(check_gpu_image(&reg, 4, true).is_ok());
        assert!(check_gpu_image(&reg, 0, false).is_ok());
        assert!(check_gpu_image(&ImageRef::parse("/i.sqsh").unwrap(), 8, false).is_ok());
        let json = serde_json::to_string(&reg).unwrap();
        assert_eq!(json, "\"nvcr.io#nvidia/tao:5\"");
        assert_eq!(serde_json::from_str::<ImageRef>(&json).unwrap(), reg);
    }
}
