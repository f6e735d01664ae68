//! The slots of a `LocalBackend`: jobs wait for a free slot in submit order, run as a
//! process group under a supervisor (exit, cancel or wall time), and are marked when
//! they end.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::sync::oneshot;

use super::{last_lines, LocalBackend};
use crate::backend::LogStream;
use crate::classify::{
    classify_failure, Ending, ErrorClass, CHILD_TIMEOUT_EXIT, CHILD_TIMEOUT_NOTE, LOG_TAIL_LINES,
};
use crate::record::{JobId, Mark, TransitionSource};
use crate::state::JobState;

/// A cancel request, answered once the job's process is gone and its record marked.
pub(super) type CancelRequest = oneshot::Sender<()>;

/// The jobs running and the ones waiting for a slot.
#[derive(Default)]
pub(super) struct Queue {
    pub(super) running: usize,
    pub(super) waiting: VecDeque<Launch>,
}

/// What it takes to start a job.
pub(super) struct Launch {
    pub(super) id: JobId,
    pub(super) command: Command,
    pub(super) cancel: oneshot::Receiver<CancelRequest>,
    pub(super) limit: Duration,
}

/// How a job's process ended.
pub(super) enum Outcome {
    Exited(Option<i32>),
    Canceled(Option<CancelRequest>),
    TimedOut,
    Lost(String),
}

impl LocalBackend {
    /// Queue `launch` and start every job a free slot allows.
    pub(super) fn enqueue(&self, launch: Launch) {
        self.inner
            .queue
            .lock()
            .expect("queue lock")
            .waiting
            .push_back(launch);
        self.start_waiting();
    }

    /// Start waiting jobs while slots are free.
    fn start_waiting(&self) {
        loop {
            let launch = {
                let mut queue = self.inner.queue.lock().expect("queue lock");
                if queue.running >= self.inner.max_running {
                    return;
                }
                let Some(launch) = queue.waiting.pop_front() else {
                    return;
                };
                queue.running += 1;
                launch
            };
            if !self.start(launch) {
                let mut queue = self.inner.queue.lock().expect("queue lock");
                queue.running = queue.running.saturating_sub(1);
            }
        }
    }

    /// Spawn the process of `launch` and its supervisor (which frees the slot when the
    /// job ends); whether it did. A job cancelled while it waited is not started.
    fn start(&self, launch: Launch) -> bool {
        let Launch {
            id,
            mut command,
            mut cancel,
            limit,
        } = launch;
        if let Ok(request) = cancel.try_recv() {
            self.finish(&id, Outcome::Canceled(Some(request)));
            return false;
        }
        match command.spawn() {
            Ok(child) => {
                let started = self.inner.store.mark(
                    &id,
                    Mark::new(JobState::Running, TransitionSource::Poll)
                        .message(format!("started as pid {}", child.id().unwrap_or_default())),
                );
                if let Err(error) = started {
                    tracing::warn!(job = %id, %error, "cannot record the start of a local job");
                }
                tokio::spawn(self.clone().supervise(id, child, cancel, limit));
                true
            }
            Err(e) => {
                self.finish(&id, Outcome::Lost(format!("bash did not start: {e}")));
                false
            }
        }
    }

    /// Wait for the job's process, a cancel or the wall time; then mark the record.
    async fn supervise(
        self,
        id: JobId,
        mut child: Child,
        mut cancel: oneshot::Receiver<CancelRequest>,
        limit: Duration,
    ) {
        let outcome = tokio::select! {
            status = child.wait() => match status {
                Ok(status) => Outcome::Exited(status.code()),
                Err(e) => Outcome::Lost(e.to_string()),
            },
            request = &mut cancel => {
                kill_group(&mut child).await;
                Outcome::Canceled(request.ok())
            }
            _ = tokio::time::sleep(limit) => {
                kill_group(&mut child).await;
                Outcome::TimedOut
            }
        };
        self.finish(&id, outcome);
        {
            let mut queue = self.inner.queue.lock().expect("queue lock");
            queue.running = queue.running.saturating_sub(1);
        }
        self.start_waiting();
    }

    /// Record how job `id` ended and answer a cancel that asked for it.
    pub(super) fn finish(&self, id: &JobId, outcome: Outcome) {
        let mark = match &outcome {
            Outcome::Exited(Some(0)) => {
                Mark::new(JobState::Complete, TransitionSource::Poll).message("exit 0")
            }
            Outcome::Exited(code) => {
                if let Some(code) = code {
                    self.inner
                        .exits
                        .lock()
                        .expect("exits lock")
                        .insert(id.clone(), *code);
                }
                let class = match self.inner.store.get(id) {
                    Ok(record) => {
                        let mut tail = String::new();
                        for stream in [LogStream::Out, LogStream::Err] {
                            if let Some(path) = Self::log_path(&record, stream) {
                                tail.push_str(&last_lines(&path, LOG_TAIL_LINES));
                            }
                        }
                        classify_failure(Ending::Failed { exit_code: *code }, &tail)
                    }
                    Err(_) => ErrorClass::Program,
                };
                Mark::new(JobState::Error, TransitionSource::Poll)
                    .message(match code {
                        Some(code) => format!("exit {code}"),
                        None => "killed by a signal".to_string(),
                    })
                    .err_class(class)
            }
            Outcome::Canceled(_) => {
                Mark::new(JobState::Canceled, TransitionSource::User).message("cancelled")
            }
            Outcome::TimedOut => {
                self.inner
                    .exits
                    .lock()
                    .expect("exits lock")
                    .insert(id.clone(), CHILD_TIMEOUT_EXIT);
                Mark::new(JobState::Error, TransitionSource::Poll)
                    .message(format!("exit {CHILD_TIMEOUT_EXIT}: {CHILD_TIMEOUT_NOTE}"))
                    .err_class(ErrorClass::Program)
            }
            Outcome::Lost(why) => Mark::new(JobState::Error, TransitionSource::Poll)
                .message(format!("lost the process: {why}"))
                .err_class(ErrorClass::Infra),
        };
        if let Err(error) = self.inner.store.mark(id, mark) {
            tracing::warn!(job = %id, %error, "cannot record the end of a local job");
        }
        self.inner.cancels.lock().expect("cancels lock").remove(id);
        if let Outcome::Canceled(Some(done)) = outcome {
            let _ = done.send(());
        }
    }
}

/// Kill the job's whole process group (the shell and what it started), then reap it.
async fn kill_group(child: &mut Child) {
    if let Some(pid) = child.id() {
        // SAFETY: kill(2) with a negative pid signals the process group the child leads
        // (it was spawned with process_group(0)); it touches no memory of ours.
        unsafe {
            libc::kill(-(pid as libc::pid_t), libc::SIGKILL);
        }
    }
    let _ = child.kill().await;
}
