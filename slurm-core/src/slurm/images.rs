//! Container images on shared storage: a `.sqsh` checked by its magic, a registry image
//! converted once on the CPU partition (never on the GPU allocation) and reused; never a
//! fall back to pulling the registry image inside the job.

use std::time::Duration;

use super::backend::SlurmBackend;
use super::scripts::CONVERT_IMAGE;
use crate::image::ImageRef;
use crate::record::RecordStore;
use crate::render::Renderer;
use crate::spec::JobSpec;
use crate::transport::{Command, Transport};
use crate::{Error, Result};

/// The first four bytes of `path`: `hsqs` for a squashfs image.
fn image_magic(path: &str) -> Command {
    Command::new("head").args(["-c", "4", "--"]).arg(path)
}

impl<T, R, S> SlurmBackend<T, R, S>
where
    T: Transport + 'static,
    R: Renderer + 'static,
    S: RecordStore + 'static,
{
    /// Make sure `image` is a `.sqsh` file on shared storage and return its path: a
    /// `.sqsh` path is checked, a registry image is converted once on the CPU partition
    /// (`SLURM_CONVERT_PARTITION`, never the GPU allocation) and reused afterwards. A
    /// failed conversion is an error; there is never a fall back to the registry.
    pub async fn stage_image(&self, image: &str) -> Result<String> {
        let parsed = ImageRef::parse(image)?;
        if parsed.is_sqsh() {
            let path = parsed.pyxis();
            let command = image_magic(&path);
            let output = self.inner.transport.run(&command).await?;
            if output.stdout != b"hsqs" {
                return Err(Error::invalid(
                    "image",
                    format!("{path} is missing or not a squashfs image; convert it again"),
                ));
            }
            return Ok(path);
        }
        let root = self
            .ensure_ready(&JobSpec::new("stage-image", "true"))
            .await?;
        let file = parsed.cache_file_name().ok_or_else(|| {
            Error::invalid(
                "image",
                "cannot derive a cache file name; give a .sqsh path",
            )
        })?;
        let path = root.join("images")?.join(&file)?;
        self.convert_image(&parsed, path.as_str()).await?;
        Ok(path.as_str().to_string())
    }

    pub(super) async fn convert_image(&self, image: &ImageRef, path: &str) -> Result<()> {
        let uri = image
            .import_uri()
            .ok_or_else(|| Error::invalid("image", "not a registry image; give a .sqsh path"))?;
        let minutes = self.inner.config.convert_minutes;
        tracing::info!(image = %uri, %path, "converting the image once on the CPU partition");
        let command = CONVERT_IMAGE
            .command([
                self.inner.config.convert_partition.clone(),
                minutes.to_string(),
                path.to_string(),
                uri.clone(),
            ])
            .timeout(Duration::from_secs(u64::from(minutes) * 60 + 600))
            .display_as(format!("convert {uri}"));
        let output = self.inner.transport.run(&command).await?;
        if !output.success() {
            return Err(Error::Remote {
                command: command.label(),
                status: output.status,
                stderr: format!(
                    "{} (the job is not submitted: slurm-run never falls back to pulling the registry image inside the GPU allocation; fix the conversion and submit again)",
                    output.stderr_text().trim()
                ),
                transient: false,
            });
        }
        Ok(())
    }
}
