//! Cancel: `scancel`, then the record goes CANCELED once the scheduler confirms; a finished job is left as it is.

use std::time::{Duration, Instant};

use super::slurm::SlurmBackend;
use crate::record::{JobId, JobRecord, Mark, RecordStore, TransitionSource};
use crate::render::Renderer;
use crate::transport::{Command, Transport};
use crate::{Error, Result};

/// How long a cancel waits for the scheduler to confirm.
const CANCEL_CONFIRM: Duration = Duration::from_secs(60);

impl<T, R, S> SlurmBackend<T, R, S>
where
    T: Transport + 'static,
    R: Renderer + 'static,
    S: RecordStore + 'static,
{
    pub(super) async fn cancel_job(&self, id: &JobId) -> Result<JobRecord> {
        let record = self.inner.store.get(id)?;
        if record.state.is_terminal() {
            return Ok(record);
        }
        let Some(backend_ref) = record.backend_ref.clone() else {
            return Err(Error::invalid(
                "id",
                format!(
                    "{id} was never accepted by the scheduler (state {}); nothing to cancel",
                    record.state
                ),
            ));
        };
        let mut command = Command::new("scancel");
        if let Some(cluster) = &backend_ref.cluster {
            command = command.arg("-M").arg(cluster.as_str());
        }
        let command = command.arg(backend_ref.slurm_job_id.to_string());
        let output = self.inner.transport.run(&command).await?;
        // scancel of a finished or unknown id exits 0; anything else is a real failure.
        output.check(&command)?;
        let deadline = Instant::now() + CANCEL_CONFIRM;
        loop {
            let status = self.poll(std::slice::from_ref(id)).await?.remove(0);
            if status.state().is_terminal() {
                return Ok(status.record);
            }
            if Instant::now() >= deadline {
                // The scheduler accepted the cancel; note it and let the next poll confirm.
                return self.inner.store.mark(
                    id,
                    Mark::new(status.state(), TransitionSource::User)
                        .message("scancel sent; waiting for the scheduler to confirm"),
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}
