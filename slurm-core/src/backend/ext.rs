//! [`BackendExt`]: conveniences built on the [`Backend`] operations, for every backend.

use std::time::Duration;

use async_trait::async_trait;

use super::{Backend, JobStatus};
use crate::record::JobId;
use crate::Result;

/// Conveniences on every [`Backend`].
#[async_trait]
pub trait BackendExt: Backend {
    /// Poll `id` every `interval` until it is terminal; returns the final status.
    async fn wait(&self, id: &JobId, interval: Duration) -> Result<JobStatus> {
        loop {
            let status = self.status(id).await?;
            if status.state().is_terminal() {
                return Ok(status);
            }
            tokio::time::sleep(interval).await;
        }
    }
}

impl<B: Backend + ?Sized> BackendExt for B {}
