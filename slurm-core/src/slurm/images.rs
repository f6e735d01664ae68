//! Container images on shared storage: a `.sqsh` checked whole (magic and size), a
//! registry image converted once on the CPU partition (never on the GPU allocation) and
//! reused, a `:latest` converted again only on request; never a fall back to pulling the
//! registry image inside the job. Before anything is queued, the gate checks what a
//! conversion needs: enroot, credentials for the registry, the conversion partition.

use std::time::Duration;

use super::commands;
use super::context::Context;
use super::credentials::{credential_machines, install_hint, CredentialsStatus};
use super::paths::converted_image;
use super::preflight::{ensure_ready, parse_partition};
use super::scripts::{CheckSqshExit, ConvertExit, CHECK_SQSH, CONVERT_IMAGE, ENROOT};
use crate::error::CheckKind;
use crate::image::{check_gpu_image, ImageRef};
use crate::spec::JobSpec;
use crate::storage::RemotePath;
use crate::transport::round_trip;
use crate::{Error, Result};

/// How many of enroot's lines an error carries.
const ENROOT_LINES: usize = 15;

/// A registry image a submit converts to a `.sqsh` first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Conversion {
    /// The image as asked.
    pub(crate) image: ImageRef,
    /// The `.sqsh` it becomes (`<results root>/images/<cache name>`).
    pub(crate) path: String,
    /// Convert again although a whole image is there (a `:latest` asked anew).
    pub(crate) force: bool,
}

/// The image a job runs in: what `--container-image` receives, and the conversion that
/// makes it when it is a registry image.
#[derive(Debug, Clone)]
pub(crate) struct PlannedImage {
    /// The `.sqsh` (or, allowed by the spec, the registry image) Pyxis gets.
    pub(crate) container_image: String,
    /// The conversion of a registry image, run before the job is queued.
    pub(crate) conversion: Option<Conversion>,
}

/// What a conversion did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Converted {
    /// A whole image was there already (made by an earlier or a concurrent submit).
    Present,
    /// The SLURM job that converted it.
    ByJob(String),
}

/// Make sure `image` is a whole `.sqsh` on shared storage and return its path: a `.sqsh`
/// path is checked, a registry image is converted once on the CPU partition
/// (`SLURM_CONVERT_PARTITION`, never the GPU allocation) and reused afterwards. A failed
/// conversion is an error; there is never a fall back to the registry.
pub(super) async fn stage_image(ctx: &Context<'_>, image: &str) -> Result<String> {
    let parsed = ImageRef::parse(image)?;
    if parsed.is_sqsh() {
        let path = parsed.pyxis();
        let command = CHECK_SQSH.command([path.clone()]);
        let output = ctx.transport().run(&command).await?;
        if CheckSqshExit::from_status(output.status) == Some(CheckSqshExit::NotWhole) {
            return Err(Error::invalid(
                "image",
                format!(
                    "{}; convert it again or give a whole .sqsh",
                    output.stderr_text().trim()
                ),
            ));
        }
        if !output.success() {
            return Err(Error::Remote {
                command: command.label(),
                status: output.status,
                stderr: output.stderr_text(),
                transient: false,
            });
        }
        return Ok(path);
    }
    let mut spec = JobSpec::new("stage-image", "true");
    spec.image = Some(image.to_string());
    let root = ensure_ready(ctx, &spec).await?;
    let conversion = Conversion {
        path: converted_image(&root, &parsed)?,
        image: parsed,
        force: false,
    };
    gate_conversion(ctx, &conversion).await?;
    convert_image(ctx, &conversion).await?;
    Ok(conversion.path)
}

/// The image `--container-image` receives for `spec` (a job of `gpus` GPUs in all,
/// on a cluster where preflight found Pyxis or not), and the conversion that makes it
/// when it is a registry image (unless the spec allows the registry form). What reaches
/// the GPU job is a `.sqsh`, or a registry image the spec explicitly allowed.
pub(crate) fn container_image(
    spec: &JobSpec,
    root: &RemotePath,
    gpus: u32,
    pyxis: Option<bool>,
) -> Result<Option<PlannedImage>> {
    let Some(image) = spec.image_ref()? else {
        return Ok(None);
    };
    if pyxis == Some(false) {
        return Err(Error::Preflight {
            kind: CheckKind::Containers,
            check: "pyxis (srun --container-image)".into(),
            message: "the spec names an image but srun has no --container-image".into(),
            remedy: "ask the cluster admins for the Pyxis SPANK plugin, or remove `image`".into(),
        });
    }
    let planned = if image.is_sqsh() || spec.allow_registry_image {
        PlannedImage {
            container_image: image.pyxis(),
            conversion: None,
        }
    } else {
        let path = converted_image(root, &image)?;
        PlannedImage {
            container_image: path.clone(),
            conversion: Some(Conversion {
                image,
                path,
                force: spec.force_reconvert_latest,
            }),
        }
    };
    check_gpu_image(
        &ImageRef::parse(&planned.container_image)?,
        gpus,
        spec.allow_registry_image,
    )?;
    Ok(Some(planned))
}

/// The submit gate of a conversion, before anything is queued: a whole `.sqsh` that
/// need not be made again passes; otherwise enroot must be on PATH (the conversion
/// step inherits the login environment), credentials for the image's registry must
/// be installed, and the conversion partition must exist and be up. One round trip;
/// a pass of the conversion checks is remembered per registry.
pub(crate) async fn gate_conversion(ctx: &Context<'_>, conversion: &Conversion) -> Result<()> {
    let machines = match conversion.image.registry() {
        Some(registry) => credential_machines(registry)?,
        // Docker Hub: anonymous pulls need no credentials.
        None => Vec::new(),
    };
    let partition = &ctx.config().convert_partition;
    let key = format!("{} @ {partition}", machines.join(" "));
    if ctx.facts().conversion_ready(&key) {
        return Ok(());
    }
    let commands = [
        CHECK_SQSH.command([conversion.path.clone()]),
        ENROOT.command(machines.clone()),
        commands::scontrol_show_partition(partition),
    ];
    let output = ctx.transport().run(&round_trip::join(&commands)).await?;
    let [sqsh, enroot, part]: [_; 3] = round_trip::split(&output, commands.len())?
        .try_into()
        .map_err(|_| Error::parse("image gate", "three answers expected"))?;
    if sqsh.success() && !conversion.force {
        return Ok(());
    }
    if enroot.stdout_text().lines().any(|l| l == "enroot") {
        return Err(Error::Preflight {
            kind: CheckKind::Containers,
            check: "enroot".into(),
            message: "enroot is not on PATH of the login shell (the conversion step inherits it)".into(),
            remedy: "install enroot on the login node and the conversion partition's nodes, or stage a .sqsh and give its path as `image`".into(),
        });
    }
    let registry = conversion.image.registry().unwrap_or_default();
    let credentials = CredentialsStatus::from_enroot_output(registry, &machines, &enroot);
    if !credentials.is_present() {
        return Err(Error::Preflight {
            kind: CheckKind::Credentials,
            check: "enroot credentials".into(),
            message: format!(
                "{credentials}: enroot would pull {} anonymously and a private registry refuses that",
                conversion.image
            ),
            remedy: format!("install them once: {}", install_hint(registry)),
        });
    }
    match parse_partition(&part) {
        Some(info) if info.up => {}
        found => {
            let state = if found.is_some() {
                "is not UP"
            } else {
                "does not exist"
            };
            return Err(Error::Preflight {
                kind: CheckKind::Partition,
                check: format!("conversion partition {partition}"),
                message: format!("{state}; registry images are converted there, off the GPUs"),
                remedy: "set SLURM_CONVERT_PARTITION to a CPU partition that exists and is up (sinfo -s), or stage a .sqsh and give its path as `image`".into(),
            });
        }
    }
    ctx.facts()
        .change(|facts| facts.conversion_ready.insert(key));
    Ok(())
}

/// Convert once on the CPU partition (the script holds a lock per image: a submit
/// that waited finds the image made). Failures name their fix and carry enroot's lines.
pub(crate) async fn convert_image(ctx: &Context<'_>, conversion: &Conversion) -> Result<Converted> {
    let image = &conversion.image;
    let uri = image
        .import_uri()
        .ok_or_else(|| Error::invalid("image", "not a registry image; give a .sqsh path"))?;
    let config = ctx.config();
    let minutes = config.convert_minutes;
    tracing::info!(image = %uri, path = %conversion.path, force = conversion.force, "converting the image on the CPU partition");
    let command = CONVERT_IMAGE
        .command([
            config.convert_partition.clone(),
            minutes.to_string(),
            conversion.path.clone(),
            uri.clone(),
            if conversion.force { "force" } else { "reuse" }.to_string(),
        ])
        .timeout(Duration::from_secs(u64::from(minutes) * 60 + 600))
        .display_as(format!("convert {uri}"));
    let output = ctx.transport().run(&command).await?;
    let stdout = output.stdout_text();
    if output.success() {
        return Ok(match stdout.trim().strip_prefix("converted ") {
            Some(job) => Converted::ByJob(job.trim().to_string()),
            None => Converted::Present,
        });
    }
    let lines = enroot_lines(&output.stderr_text());
    let never = "the job is not submitted: slurm-run never falls back to pulling the registry image inside the GPU allocation";
    let registry = image.registry().unwrap_or("docker.io");
    let (kind, message, remedy) = match ConvertExit::from_status(output.status) {
        Some(ConvertExit::RegistryRefused) => (
            CheckKind::Credentials,
            format!("registry {registry} refused or was unreachable; check `credentials check {registry}` (enroot sent the installed credentials and exited without a message: a wrong password or user, or no access to {image})"),
            format!("slurmctl credentials check {registry}; if the password changed: {}", install_hint(registry)),
        ),
        Some(ConvertExit::AnonymousRefused) => (
            CheckKind::Credentials,
            format!("registry {registry} refused or was unreachable; check `credentials check {registry}` (enroot found no credentials for it and pulled anonymously)"),
            format!("install them once: {}", install_hint(registry)),
        ),
        Some(ConvertExit::NoEnroot) => (
            CheckKind::Containers,
            format!("enroot is not on PATH on the conversion node of partition {}", config.convert_partition),
            "install enroot on the conversion partition's nodes, or set SLURM_CONVERT_PARTITION to one that has it".to_string(),
        ),
        Some(ConvertExit::JobFailed) => (
            CheckKind::Partition,
            format!("the conversion job did not start on partition {}", config.convert_partition),
            "set SLURM_CONVERT_PARTITION to a CPU partition you may use (sinfo -s; its limits allow 4 CPUs, 7200M and the conversion time)".to_string(),
        ),
        Some(ConvertExit::NotAnImage | ConvertExit::ConvertFailed) | None => (
            CheckKind::Containers,
            format!("converting {image} failed"),
            "fix what enroot says on the conversion partition, then submit again".to_string(),
        ),
    };
    Err(Error::Preflight {
        kind,
        check: "image conversion".into(),
        message: format!("{message}; {never}; enroot said: {lines}"),
        remedy,
    })
}

/// enroot's and srun's own lines of a failed conversion (the last few), on one line.
fn enroot_lines(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| {
            [
                "[INFO]",
                "[WARN]",
                "[ERROR]",
                "srun:",
                "curl:",
                "slurm-run-no-enroot",
                "the conversion",
            ]
            .iter()
            .any(|p| l.starts_with(p))
        })
        .collect();
    let start = lines.len().saturating_sub(ENROOT_LINES);
    if lines.is_empty() {
        "(nothing)".to_string()
    } else {
        lines[start..].join(" | ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enroot_lines_keep_its_own_words_only() {
        let stderr = "Parallel noise\n[INFO] Querying registry for permission grant\n[INFO] Authenticating with user: u\nsquashfs chatter\nsrun: error: task 0: Exited with exit code 1\n";
        assert_eq!(
            enroot_lines(stderr),
            "[INFO] Querying registry for permission grant | [INFO] Authenticating with user: u | srun: error: task 0: Exited with exit code 1"
        );
        assert_eq!(enroot_lines(""), "(nothing)");
        let many: String = (0..40).map(|i| format!("[INFO] line {i}\n")).collect();
        assert!(enroot_lines(&many).starts_with("[INFO] line 25 |"));
    }
}
