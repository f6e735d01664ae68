//! The slots of a `LocalBackend`: jobs (and array tasks) wait for a free slot in submit
//! order, their array's maximum in parallel and their dependencies (this queue enforces
//! them), run as a process group under a supervisor (exit, cancel or child timeout), and
//! are marked when they end.

use std::collections::{HashMap, VecDeque};
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::sync::oneshot;

use super::resume::LocalResume;
use super::{last_lines, LocalBackend};
use crate::backend::LogStream;
use crate::classify::{
    classify_failure, Ending, ErrorClass, CHILD_TIMEOUT_EXIT, CHILD_TIMEOUT_NOTE, LOG_TAIL_LINES,
};
use crate::dependency::resolve_dependencies;
use crate::record::{JobId, JobRecord, Mark, TaskMark, TransitionSource};
use crate::spec::DependencyVerdict;
use crate::state::JobState;

/// A cancel request, answered once the job's process is gone and its record marked.
pub(super) type CancelRequest = oneshot::Sender<()>;

/// A job, or one task of an array.
pub(super) type Key = (JobId, Option<u32>);

/// The jobs running and the ones waiting for a slot.
#[derive(Default)]
pub(super) struct Queue {
    pub(super) running: usize,
    /// Tasks running per array.
    pub(super) running_tasks: HashMap<JobId, usize>,
    pub(super) waiting: VecDeque<Launch>,
}

/// What it takes to start a job or an array task.
pub(super) struct Launch {
    pub(super) id: JobId,
    pub(super) task: Option<u32>,
    pub(super) processes: Processes,
    pub(super) cancel: oneshot::Receiver<CancelRequest>,
    pub(super) limit: Duration,
    /// The array's maximum in parallel.
    pub(super) max_parallel: Option<u32>,
    /// A resumable run's signal, budget and checkpoints.
    pub(super) resume: Option<LocalResume>,
}

/// What a launch starts: one process (a job, an array task), or one per role of a
/// multi-role job (each its own process group, started at once).
pub(super) enum Processes {
    One(Command),
    Roles(Vec<(String, Command)>),
}

/// How a job's process ended.
pub(super) enum Outcome {
    Exited(Option<i32>),
    Canceled(Option<CancelRequest>),
    TimedOut,
    Lost(String),
    /// A resumable run's segment ended by the wall with no restart left: the message.
    BudgetUsedUp(String),
}

impl LocalBackend {
    /// Queue `launches` and start every job a free slot allows.
    pub(super) fn enqueue(&self, launches: Vec<Launch>) {
        self.inner
            .queue
            .lock()
            .expect("queue lock")
            .waiting
            .extend(launches);
        self.start_waiting();
    }

    /// Whether every dependency of `id` holds now (its parents' latest attempts).
    fn dependencies_met(&self, id: &JobId) -> bool {
        let Ok(record) = self.inner.store.blocking().get(id) else {
            return false;
        };
        if record.after.is_empty() {
            return true;
        }
        resolve_dependencies(self.inner.store.blocking(), &record.after)
            .map(|all| {
                all.iter()
                    .all(|r| r.verdict == DependencyVerdict::Satisfied)
            })
            .unwrap_or(false)
    }

    /// Start waiting jobs while slots are free: the first in submit order whose array
    /// is below its maximum in parallel and whose dependencies hold.
    pub(super) fn start_waiting(&self) {
        let mut met: HashMap<JobId, bool> = HashMap::new();
        loop {
            let launch = {
                let mut queue = self.inner.queue.lock().expect("queue lock");
                if queue.running >= self.inner.max_running {
                    return;
                }
                let position = queue.waiting.iter().position(|launch| {
                    let running = queue.running_tasks.get(&launch.id).copied().unwrap_or(0);
                    let room = launch.max_parallel.is_none_or(|max| running < max as usize);
                    room && *met
                        .entry(launch.id.clone())
                        .or_insert_with(|| self.dependencies_met(&launch.id))
                });
                let Some(launch) = position.and_then(|p| queue.waiting.remove(p)) else {
                    return;
                };
                queue.running += 1;
                *queue.running_tasks.entry(launch.id.clone()).or_default() += 1;
                launch
            };
            let id = launch.id.clone();
            if !self.start(launch) {
                self.free_slot(&id);
            }
        }
    }

    /// A job or task ended (or never started): its slot is free.
    pub(super) fn free_slot(&self, id: &JobId) {
        let mut queue = self.inner.queue.lock().expect("queue lock");
        queue.running = queue.running.saturating_sub(1);
        if let Some(n) = queue.running_tasks.get_mut(id) {
            *n = n.saturating_sub(1);
        }
    }

    /// Cancel the jobs or tasks `keys`: a waiting one is taken off the queue, a running
    /// one killed; answered once each is marked.
    pub(super) async fn cancel_keys(&self, keys: &[Key]) {
        for key in keys {
            let sender = self.inner.cancels.lock().expect("cancels lock").remove(key);
            let Some(sender) = sender else { continue };
            let (done_tx, done_rx) = oneshot::channel();
            if sender.send(done_tx).is_err() {
                continue;
            }
            let waiting = {
                let mut queue = self.inner.queue.lock().expect("queue lock");
                let index = queue
                    .waiting
                    .iter()
                    .position(|l| l.id == key.0 && l.task == key.1);
                index.and_then(|i| queue.waiting.remove(i))
            };
            if let Some(mut launch) = waiting {
                let request = launch.cancel.try_recv().ok();
                let key = key.clone();
                self.off_runtime(move |backend| backend.finish(&key, Outcome::Canceled(request)))
                    .await;
            }
            // Answered once the process is gone and the record marked (or dropped when
            // the job ended by itself first).
            let _ = done_rx.await;
        }
    }

    /// End the waiting dependant `record` whose dependency can never hold: off the
    /// queue, ERROR (program: a retry would wait for the same parent) saying why.
    pub(super) fn end_unsatisfiable(&self, record: &JobRecord, why: String) -> JobRecord {
        let removed: Vec<Launch> = {
            let mut queue = self.inner.queue.lock().expect("queue lock");
            let (gone, kept): (Vec<Launch>, Vec<Launch>) =
                queue.waiting.drain(..).partition(|l| l.id == record.id);
            queue.waiting = kept.into();
            gone
        };
        for launch in &removed {
            self.inner
                .cancels
                .lock()
                .expect("cancels lock")
                .remove(&(launch.id.clone(), launch.task));
        }
        let mark = Mark::new(JobState::Error, TransitionSource::Poll)
            .message(why.clone())
            .err_class(ErrorClass::Program);
        let mark = removed
            .iter()
            .filter_map(|l| l.task)
            .fold(mark, |mark, task| {
                let mut task_mark = TaskMark::new(JobState::Error);
                task_mark.err_class = Some(ErrorClass::Program);
                task_mark.message = Some(why.clone());
                mark.task(task, task_mark)
            });
        match self.inner.store.blocking().mark(&record.id, mark) {
            Ok(updated) => updated,
            Err(error) => {
                tracing::warn!(job = %record.id, %error, "cannot record an unsatisfiable dependency");
                record.clone()
            }
        }
    }

    /// Spawn the process of `launch` and its supervisor (which frees the slot when the
    /// job ends); whether it did. A job cancelled while it waited is not started.
    fn start(&self, launch: Launch) -> bool {
        let Launch {
            id,
            task,
            processes,
            mut cancel,
            limit,
            mut resume,
            ..
        } = launch;
        let key = (id, task);
        if let Ok(request) = cancel.try_recv() {
            self.finish(&key, Outcome::Canceled(Some(request)));
            return false;
        }
        let mut command = match processes {
            Processes::One(command) => command,
            Processes::Roles(roles) => return self.start_roles(key, roles, cancel, limit),
        };
        if let Some(resume) = &mut resume {
            resume.prepare(&mut command);
        }
        match self.spawn_marked(&key, &mut command) {
            Ok(child) => {
                let segment = Segment {
                    key,
                    child,
                    command,
                    limit,
                    resume,
                };
                tokio::spawn(self.clone().supervise(segment, cancel));
                true
            }
            Err(why) => {
                self.finish(&key, Outcome::Lost(why));
                false
            }
        }
    }

    /// Spawn `command` for `key` and mark the record RUNNING.
    fn spawn_marked(&self, key: &Key, command: &mut Command) -> Result<Child, String> {
        let child = command
            .spawn()
            .map_err(|e| format!("bash did not start: {e}"))?;
        let message = format!("started as pid {}", child.id().unwrap_or_default());
        let mut mark = Mark::new(JobState::Running, TransitionSource::Poll);
        match key.1 {
            Some(task) => {
                let mut task_mark = TaskMark::new(JobState::Running);
                task_mark.message = Some(message);
                task_mark.nodes = Some(vec!["localhost".to_string()]);
                mark = mark.task(task, task_mark);
            }
            None => mark = mark.message(message).nodes(vec!["localhost".to_string()]),
        }
        if let Err(error) = self.inner.store.blocking().mark(&key.0, mark) {
            tracing::warn!(job = %key.0, %error, "cannot record the start of a local job");
        }
        Ok(child)
    }

    /// Wait for the job's process, a cancel or the wall time (a resumable run: the
    /// signal before it, and a continued segment when the command ended by the signal
    /// or the child timeout, within the budget); then mark the record.
    async fn supervise(self, segment: Segment, mut cancel: oneshot::Receiver<CancelRequest>) {
        let Segment {
            key,
            mut child,
            mut command,
            limit,
            mut resume,
        } = segment;
        let outcome = loop {
            let started = tokio::time::Instant::now();
            let warn_at = started + resume.as_ref().map_or(limit, |r| r.warn_after);
            let mut signalled = false;
            let mut killed_by = None;
            let ended = loop {
                tokio::select! {
                    status = child.wait() => break match status {
                        Ok(status) => {
                            killed_by = status.signal();
                            Outcome::Exited(status.code())
                        }
                        Err(e) => Outcome::Lost(e.to_string()),
                    },
                    request = &mut cancel => {
                        kill_group(&mut child).await;
                        break Outcome::Canceled(request.ok());
                    }
                    _ = tokio::time::sleep_until(warn_at), if resume.is_some() && !signalled => {
                        signalled = true;
                        if let Some(resume) = &resume {
                            signal_group(&child, resume.signal);
                        }
                    }
                    _ = tokio::time::sleep_until(started + limit) => {
                        kill_group(&mut child).await;
                        break Outcome::TimedOut;
                    }
                }
            };
            let Some(run) = resume.as_mut() else {
                break ended;
            };
            let by_signal = signalled
                && match ended {
                    Outcome::Exited(Some(code)) => code == 0 || code == 128 + run.signal,
                    Outcome::Exited(None) => killed_by == Some(run.signal),
                    _ => false,
                };
            if !(by_signal || matches!(ended, Outcome::TimedOut)) {
                break ended;
            }
            if run.restarts >= run.max_restarts {
                break Outcome::BudgetUsedUp(run.budget_message());
            }
            run.restarts += 1;
            if let Err(error) = self.inner.store.mark(&key.0, run.continued_mark()).await {
                tracing::warn!(job = %key.0, %error, "cannot record a continued segment");
            }
            run.prepare(&mut command);
            let (marked, spawned) = self
                .off_runtime({
                    let key = key.clone();
                    move |backend| {
                        let spawned = backend.spawn_marked(&key, &mut command);
                        (command, spawned)
                    }
                })
                .await;
            command = marked;
            match spawned {
                Ok(next) => child = next,
                Err(why) => break Outcome::Lost(why),
            }
        };
        self.off_runtime(move |backend| {
            backend.finish(&key, outcome);
            backend.free_slot(&key.0);
            backend.start_waiting();
        })
        .await;
    }

    /// Record how job or task `key` ended and answer a cancel that asked for it.
    pub(super) fn finish(&self, key: &Key, outcome: Outcome) {
        let (id, task) = (&key.0, key.1);
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
                        .insert(key.clone(), *code);
                }
                let class = match self.inner.store.blocking().get(id) {
                    Ok(record) => {
                        let mut tail = String::new();
                        for stream in [LogStream::Out, LogStream::Err] {
                            if let Some(path) = Self::log_path(&record, task, stream) {
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
                    .insert(key.clone(), CHILD_TIMEOUT_EXIT);
                Mark::new(JobState::Error, TransitionSource::Poll)
                    .message(format!("exit {CHILD_TIMEOUT_EXIT}: {CHILD_TIMEOUT_NOTE}"))
                    .err_class(ErrorClass::Program)
            }
            Outcome::Lost(why) => Mark::new(JobState::Error, TransitionSource::Poll)
                .message(format!("lost the process: {why}"))
                .err_class(ErrorClass::Infra),
            Outcome::BudgetUsedUp(why) => Mark::new(JobState::Error, TransitionSource::Poll)
                .message(why.clone())
                .err_class(ErrorClass::Program),
        };
        let mark = match task {
            // A task's end is a task mark; the array's state follows from its tasks.
            Some(task) => Mark::new(mark.state, mark.source).task(
                task,
                TaskMark {
                    state: mark.state,
                    err_class: mark.err_class,
                    message: mark.message,
                    nodes: None,
                    node_fault: false,
                    exit_code: None,
                    usage: None,
                },
            ),
            None => mark,
        };
        if let Err(error) = self.inner.store.blocking().mark(id, mark) {
            tracing::warn!(job = %id, %error, "cannot record the end of a local job");
        }
        self.inner.cancels.lock().expect("cancels lock").remove(key);
        if let Outcome::Canceled(Some(done)) = outcome {
            let _ = done.send(());
        }
    }
}

/// A running job's process and what it takes to run its next segment.
struct Segment {
    key: Key,
    child: Child,
    command: Command,
    limit: Duration,
    resume: Option<LocalResume>,
}

/// Send `signal` to the job's whole process group (the warning before the wall).
fn signal_group(child: &Child, signal: i32) {
    if let Some(pid) = child.id() {
        // SAFETY: kill(2) with a negative pid signals the process group the child leads
        // (it was spawned with process_group(0)); it touches no memory of ours.
        unsafe {
            libc::kill(-(pid as libc::pid_t), signal);
        }
    }
}

/// Kill the job's whole process group (the shell and what it started), then reap it.
pub(super) async fn kill_group(child: &mut Child) {
    if let Some(pid) = child.id() {
        kill_group_of(pid);
    }
    let _ = child.kill().await;
}

/// Kill the process group led by `pid` (a child spawned with `process_group(0)`).
pub(super) fn kill_group_of(pid: u32) {
    // SAFETY: kill(2) with a negative pid signals the process group the child leads
    // (it was spawned with process_group(0)); it touches no memory of ours.
    unsafe {
        libc::kill(-(pid as libc::pid_t), libc::SIGKILL);
    }
}
