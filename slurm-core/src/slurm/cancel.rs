//! Cancel: `scancel` (of a job, a whole array, or some of its tasks), then the record goes
//! CANCELED once the scheduler confirms; a finished job is left as it is.

use std::time::{Duration, Instant};

use super::backend::SlurmBackend;
use super::commands;
use super::poll::slurm_job;
use crate::record::{JobId, JobRecord, Mark, RecordStore, TaskMark, TransitionSource};
use crate::render::Renderer;
use crate::spec::TaskSet;
use crate::state::JobState;
use crate::transport::Transport;
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
        let Some((cluster, slurm_id)) = slurm_job(&record)? else {
            return Err(Error::invalid(
                "id",
                format!(
                    "{id} was never accepted by the scheduler (state {}); nothing to cancel",
                    record.state
                ),
            ));
        };
        let command = commands::scancel(slurm_id, cluster.as_deref());
        let tasks: TaskSet = record.tasks.keys().copied().collect();
        self.scancel_and_confirm(id, command, &tasks, |record| record.state.is_terminal())
            .await
    }

    pub(super) async fn cancel_array_tasks(
        &self,
        id: &JobId,
        tasks: &TaskSet,
    ) -> Result<JobRecord> {
        let record = self.inner.store.get(id)?;
        record.check_tasks(tasks)?;
        let ended = |r: &JobRecord| tasks.iter().all(|t| r.tasks[&t].state.is_terminal());
        if ended(&record) {
            return Ok(record);
        }
        let Some((cluster, slurm_id)) = slurm_job(&record)? else {
            return Err(Error::invalid(
                "id",
                format!("{id} was never accepted by the scheduler; nothing to cancel"),
            ));
        };
        let command = commands::scancel_tasks(slurm_id, &tasks.to_string(), cluster.as_deref());
        self.scancel_and_confirm(id, command, tasks, ended).await
    }

    /// Run `command` (an scancel), then poll `id` until `done` holds for its record.
    /// Array tasks among `tasks` the scheduler no longer knows were cancelled before
    /// they started (SLURM keeps no record of those): they are marked CANCELED.
    async fn scancel_and_confirm(
        &self,
        id: &JobId,
        command: crate::transport::Command,
        tasks: &TaskSet,
        done: impl Fn(&JobRecord) -> bool,
    ) -> Result<JobRecord> {
        let output = self.inner.transport.run(&command).await?;
        // scancel of a finished or unknown id exits 0; anything else is a real failure.
        output.check(&command)?;
        let deadline = Instant::now() + CANCEL_CONFIRM;
        loop {
            let mut status = self.poll(std::slice::from_ref(id)).await?.remove(0);
            let vanished: Vec<u32> = tasks
                .iter()
                .filter(|t| status.record.tasks.get(t).map(|t| t.state) == Some(JobState::Unknown))
                .collect();
            if !vanished.is_empty() {
                let mut mark = Mark::new(JobState::Canceled, TransitionSource::User);
                for task in vanished {
                    let mut task_mark = TaskMark::new(JobState::Canceled);
                    task_mark.message = Some(
                        "cancelled before it started (the scheduler keeps no record of it)".into(),
                    );
                    mark = mark.task(task, task_mark);
                }
                status.record = self.inner.store.mark(id, mark)?;
            }
            if done(&status.record) {
                return Ok(status.record);
            }
            if status.record.is_array() && Instant::now() >= deadline {
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
