//! Reconcile by job name: after a submit whose answer was lost, the SLURM jobs that
//! carry the record's id as their name, from squeue and sacct in one round trip.

use std::time::{Duration, Instant};

use super::backend::SlurmBackend;
use super::commands;
use super::parse::{SlurmIdField, SlurmJobId};
use crate::record::{BackendRef, JobId, RecordStore};
use crate::render::Renderer;
use crate::transport::{round_trip, Transport};
use crate::{Error, Result};

impl<T, R, S> SlurmBackend<T, R, S>
where
    T: Transport + 'static,
    R: Renderer + 'static,
    S: RecordStore + 'static,
{
    /// The SLURM jobs named `id`, from squeue and sacct in one round trip; when there
    /// is none, asked again until the configured wait passes (sacct may lag).
    pub(super) async fn reconcile(&self, id: &JobId) -> Result<Vec<BackendRef>> {
        let deadline = Instant::now() + self.inner.config.reconcile_wait;
        let commands = [
            commands::squeue_by_name(id.as_str()),
            commands::sacct_by_name(id.as_str()),
        ];
        let command = round_trip::join(&commands).timeout(Duration::from_secs(60));
        loop {
            let found = match self.inner.transport.run(&command).await {
                Ok(output) => {
                    let parts = round_trip::split(&output, commands.len())?;
                    let mut ids = std::collections::BTreeSet::new();
                    for part in &parts {
                        for line in part.stdout_text().lines() {
                            if let Ok(field) = SlurmIdField::parse(line.trim()) {
                                if field.is_job_itself() {
                                    ids.insert(field.job);
                                }
                            }
                        }
                    }
                    Some(ids)
                }
                Err(error) if error.is_transient() => {
                    tracing::warn!(job = %id, %error, "reconcile query failed; retrying");
                    None
                }
                Err(error) => return Err(error),
            };
            if let Some(ids) = found {
                if !ids.is_empty() || Instant::now() >= deadline {
                    return Ok(ids
                        .into_iter()
                        .map(|job_id: SlurmJobId| BackendRef::new(job_id.to_string()))
                        .collect());
                }
            } else if Instant::now() >= deadline {
                return Err(Error::Ambiguous(format!(
                    "the submit of {id} has an unknown outcome and the cluster could not be asked; check `squeue --name={id}` and `sacct --name={id}`"
                )));
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
}
