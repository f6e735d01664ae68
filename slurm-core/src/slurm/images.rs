//! Container images on shared storage: a `.sqsh` checked whole (magic and size), a
//! registry image converted once on the CPU partition (never on the GPU allocation) and
//! reused, a `:latest` converted again only on request; never a fall back to pulling the
//! registry image inside the job. Before anything is queued, the gate checks what a
//! conversion needs: enroot, credentials for the registry, the conversion partition. A
//! submit queues the conversion as a job of its own ([`conversion`](super::conversion));
//! `stage_image` converts and waits; both read a failure by what enroot said.

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
use crate::transport::{round_trip, Output};
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

/// Whether a registry image must be converted before its job can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ImageNeed {
    /// A whole `.sqsh` is there and need not be made again.
    Present,
    /// It must be converted first (missing, or a `:latest` asked anew).
    Convert,
}

/// The submit gate of a conversion, before anything is queued: a whole `.sqsh` that
/// need not be made again passes ([`ImageNeed::Present`]); otherwise enroot must be on
/// PATH (the conversion step inherits the login environment), credentials for the
/// image's registry must be installed, and the conversion partition must exist and be
/// up ([`ImageNeed::Convert`]). One round trip (none for an image seen whole before); a
/// pass of the conversion checks is remembered per registry, and then only the image
/// is checked.
pub(crate) async fn gate_conversion(
    ctx: &Context<'_>,
    conversion: &Conversion,
) -> Result<ImageNeed> {
    if !conversion.force && ctx.facts().sqsh_present(&conversion.path) {
        return Ok(ImageNeed::Present);
    }
    let present = |ctx: &Context<'_>| {
        ctx.facts()
            .change(|facts| facts.sqsh_present.insert(conversion.path.clone()));
        ImageNeed::Present
    };
    let machines = match conversion.image.registry() {
        Some(registry) => credential_machines(registry)?,
        // Docker Hub: anonymous pulls need no credentials.
        None => Vec::new(),
    };
    let partition = &ctx.config().convert_partition;
    let key = format!("{} @ {partition}", machines.join(" "));
    if ctx.facts().conversion_ready(&key) {
        if conversion.force {
            return Ok(ImageNeed::Convert);
        }
        let whole = ctx
            .transport()
            .run(&CHECK_SQSH.command([conversion.path.clone()]))
            .await?
            .success();
        return Ok(if whole {
            present(ctx)
        } else {
            ImageNeed::Convert
        });
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
        return Ok(present(ctx));
    }
    check_conversion_prerequisites(conversion, &machines, partition, &enroot, &part)?;
    ctx.facts()
        .change(|facts| facts.conversion_ready.insert(key));
    Ok(ImageNeed::Convert)
}

/// The gate's conversion checks, on the answers of its round trip: enroot on PATH of
/// the login shell and credentials installed for the image's registry (both from
/// `enroot`, which looked for the credentials of `machines`), and the conversion
/// `partition` existing and up (from `part`); each failure an error naming its fix.
fn check_conversion_prerequisites(
    conversion: &Conversion,
    machines: &[String],
    partition: &str,
    enroot: &Output,
    part: &Output,
) -> Result<()> {
    if enroot.stdout_text().lines().any(|l| l == "enroot") {
        return Err(Error::Preflight {
            kind: CheckKind::Containers,
            check: "enroot".into(),
            message: "enroot is not on PATH of the login shell (the conversion step inherits it)".into(),
            remedy: "install enroot on the login node and the conversion partition's nodes, or stage a .sqsh and give its path as `image`".into(),
        });
    }
    let registry = conversion.image.registry().unwrap_or_default();
    let credentials = CredentialsStatus::from_enroot_output(registry, machines, enroot);
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
    match parse_partition(part) {
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
    let registry = image.registry().unwrap_or("docker.io");
    let failure = conversion_failure(
        output.status,
        &output.stderr_text(),
        registry,
        &image.to_string(),
        &config.convert_partition,
    );
    Err(failure.into_error())
}

/// Why a conversion failed, from its exit status and what enroot (and srun) said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConversionFailure {
    /// What to fix: credentials, containers (enroot, the image, disk), the partition.
    pub(crate) kind: CheckKind,
    /// What happened, with enroot's decisive lines.
    pub(crate) message: String,
    /// How to fix it.
    pub(crate) remedy: String,
}

impl ConversionFailure {
    /// The error a submit (or `stage_image`) returns.
    pub(crate) fn into_error(self) -> Error {
        Error::Preflight {
            kind: self.kind,
            check: "image conversion".into(),
            message: self.message,
            remedy: self.remedy,
        }
    }
}

/// What slurm-run never does when a conversion failed.
pub(crate) const NEVER_PULLS: &str = "the job is not run: slurm-run never falls back to pulling the registry image inside the GPU allocation";

/// A failed conversion of `image` (from `registry`) on `partition`, as its exit status
/// and enroot's output (`stderr`) tell it: enroot's words decide (the registry refused
/// the credentials, the registry could not be reached, the image or tag is not there,
/// squashfs or the disk failed), never the absence of an `[ERROR]` line alone.
pub(crate) fn conversion_failure(
    status: i32,
    stderr: &str,
    registry: &str,
    image: &str,
    partition: &str,
) -> ConversionFailure {
    let lines = enroot_lines(stderr);
    let (kind, what, remedy) = match ConvertExit::from_status(status) {
        Some(ConvertExit::NoEnroot) => (
            CheckKind::Containers,
            format!("enroot is not on PATH on the conversion node of partition {partition}"),
            "install enroot on the conversion partition's nodes, or set SLURM_CONVERT_PARTITION to one that has it".to_string(),
        ),
        Some(ConvertExit::JobFailed) => (
            CheckKind::Partition,
            format!("the conversion job did not start on partition {partition}"),
            "set SLURM_CONVERT_PARTITION to a CPU partition you may use (sinfo -s; its limits allow 4 CPUs, 7200M and the conversion time)".to_string(),
        ),
        Some(ConvertExit::NotAnImage) => (
            CheckKind::Containers,
            format!("converting {image} produced no whole squashfs image"),
            "check the disk of the results root (df) and convert again".to_string(),
        ),
        _ => cause_told_by_enroot(stderr, registry, image, partition),
    };
    ConversionFailure {
        kind,
        message: format!("{what}; {NEVER_PULLS}; enroot said: {lines}"),
        remedy,
    }
}

/// The cause of a failed conversion whose exit status named none, as enroot's output
/// (`stderr`) tells it: what to fix, what happened and how to fix it. enroot's words
/// decide, never the absence of an `[ERROR]` line alone.
fn cause_told_by_enroot(
    stderr: &str,
    registry: &str,
    image: &str,
    partition: &str,
) -> (CheckKind, String, String) {
    let said = |patterns: &[&str]| {
        stderr.lines().any(|line| {
            let line = line.to_ascii_lowercase();
            patterns.iter().any(|p| line.contains(p))
        })
    };
    let authenticated = said(&["authentication succeeded"]);
    let anonymous = said(&["authenticating with user: <anonymous>"]);
    let check = format!("slurmctl credentials check {registry}");
    // A table: the first row whose words enroot said decides.
    match () {
        _ if said(&["slurm-run-no-enroot"]) => (
            CheckKind::Containers,
            format!("enroot is not on PATH on the conversion node of partition {partition}"),
            "install enroot on the conversion partition's nodes, or set SLURM_CONVERT_PARTITION to one that has it".to_string(),
        ),
        _ if said(&["slurm-run-conversion: not-an-image"]) => (
            CheckKind::Containers,
            format!("converting {image} produced no whole squashfs image"),
            "check the disk of the results root (df) and convert again".to_string(),
        ),
        _ if said(&["no space left on device", "disk quota exceeded", "no-images-folder", "enroot-mksquashovlfs", "mksquashfs", "failed to write", "write failed", "read-only file system"]) => (
            CheckKind::Containers,
            format!("making the squashfs image of {image} failed (squashfs or the disk: see enroot's lines)"),
            "free space on the results root (or the node's temporary folder, ENROOT_TEMP_PATH) and submit again".to_string(),
        ),
        _ if said(&["error code: 404", "manifest unknown", "name unknown", "could not parse digest information"]) => (
            CheckKind::Containers,
            format!("image {image} was not found in registry {registry} (no such repository or tag)"),
            format!("check the image's name and tag (the registry answered; {check} shows the credentials are fine)"),
        ),
        _ if said(&["error code: 401", "error code: 403"]) => (
            CheckKind::Credentials,
            format!("registry {registry} refused the credentials for {image}"),
            format!("{check}; if the password changed: {}", install_hint(registry)),
        ),
        _ if said(&["curl: (", "could not resolve host", "failed to connect", "connection refused", "timed out", "ssl"]) => (
            CheckKind::Containers,
            format!("registry {registry} was unreachable from the conversion node"),
            format!("check that the conversion partition's nodes reach {registry} (proxy, firewall, DNS), then submit again"),
        ),
        _ if authenticated => (
            CheckKind::Containers,
            format!("converting {image} failed after registry {registry} let enroot in (see enroot's lines)"),
            "fix what enroot says on the conversion partition, then submit again".to_string(),
        ),
        _ if anonymous => (
            CheckKind::Credentials,
            format!("registry {registry} refused or was unreachable; check `credentials check {registry}` (enroot found no credentials for it and pulled anonymously)"),
            format!("install them once: {}", install_hint(registry)),
        ),
        _ if !said(&["[error]"]) => (
            CheckKind::Credentials,
            format!("registry {registry} refused or was unreachable; check `credentials check {registry}` (enroot sent the installed credentials and exited without a message: a wrong password or user, or no access to {image})"),
            format!("{check}; if the password changed: {}", install_hint(registry)),
        ),
        _ => (
            CheckKind::Containers,
            format!("converting {image} failed"),
            "fix what enroot says on the conversion partition, then submit again".to_string(),
        ),
    }
}

/// enroot's and srun's own lines of a failed conversion (the last few, and always the
/// ones that name a cause: squashfs, the disk, a checksum), on one line.
fn enroot_lines(stderr: &str) -> String {
    let decisive = |l: &str| {
        [
            "enroot-mksquashovlfs",
            "mksquashfs",
            "FATAL ERROR",
            "No space left",
            "Disk quota",
            "Checksum mismatch",
        ]
        .iter()
        .any(|p| l.contains(p))
    };
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| {
            decisive(l)
                || [
                    "[INFO]",
                    "[WARN]",
                    "[ERROR]",
                    "srun:",
                    "curl:",
                    "slurm-run-no-enroot",
                    "slurm-run-conversion",
                    "the conversion",
                ]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .collect();
    if lines.is_empty() {
        return "(nothing)".to_string();
    }
    let start = lines.len().saturating_sub(ENROOT_LINES);
    // A decisive line older than the last few is kept too, first.
    let mut kept: Vec<&str> = lines[..start]
        .iter()
        .copied()
        .filter(|l| decisive(l))
        .collect();
    kept.extend(&lines[start..]);
    kept.join(" | ")
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
