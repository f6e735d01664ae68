//! A multi-role job on a `LocalBackend`: every role a process group of its own, started
//! at once with the variables a cluster gives it (its name, its rank, every role's hosts:
//! this machine), supervised together. The first role to fail ends the job: the others
//! are killed (CANCELED, saying which role failed) and the job ends ERROR with that
//! role's exit status; a role ending 0 while others run is fine.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::slots::{kill_group_of, CancelRequest, Key, Processes};
use super::{job_command, last_lines, LocalBackend};
use crate::backend::LogStream;
use crate::classify::{
    classify_failure, Ending, ErrorClass, CHILD_TIMEOUT_EXIT, CHILD_TIMEOUT_NOTE, LOG_TAIL_LINES,
};
use crate::record::{JobRecord, Mark, TaskMark, TransitionSource};
use crate::redact::SecretRegistry;
use crate::spec::{
    role_host_var, role_hosts_var, JobSpec, Resources, SpecDefaults, ROLE_RANK_VAR, ROLE_VAR,
};
use crate::state::JobState;
use crate::{Error, Result};

/// The host every role of a local job runs on.
const LOCALHOST: &str = "127.0.0.1";

/// The resources of a multi-role `spec` on this machine (the job-wide time limits are
/// every role's); a role with an image is refused, naming it.
pub(super) fn resources(spec: &JobSpec) -> Result<Resources> {
    let roles = spec.resolve_roles(&SpecDefaults::default())?;
    if let Some(role) = roles.iter().find(|r| r.image.is_some()) {
        return Err(Error::invalid(
            format!("roles.{}.image", role.name),
            "the local backend runs commands on this machine, without containers; remove `image` or use the SLURM backend",
        ));
    }
    Ok(roles[0].resources.clone())
}

/// The log folder of role `role` in a run's log folder (as on a cluster).
pub(super) fn role_log_dir(log_dir: &Path, role: &str) -> std::path::PathBuf {
    log_dir.join("roles").join(role)
}

/// One process per role of `spec`, each logging to `log_dir/roles/<role>/`.
pub(super) fn role_processes(
    spec: &JobSpec,
    dir: &Path,
    log_dir: &Path,
    secrets: &SecretRegistry,
    code_dir: Option<&str>,
) -> Result<Processes> {
    let roles = spec.resolve_roles(&SpecDefaults::default())?;
    let mut processes = Vec::with_capacity(roles.len());
    for role in &roles {
        let mut view = spec.clone();
        view.env = role.env.clone();
        let mut command = job_command(
            &role.command,
            dir,
            &role_log_dir(log_dir, &role.name),
            &view,
            secrets,
            code_dir,
        )?;
        command.env(ROLE_VAR, &role.name).env(ROLE_RANK_VAR, "0");
        for other in &roles {
            command
                .env(role_hosts_var(&other.name), LOCALHOST)
                .env(role_host_var(&other.name), LOCALHOST);
        }
        processes.push((role.name.clone(), command));
    }
    Ok(Processes::Roles(processes))
}

/// How the roles of a job ended, together.
enum RolesEnd {
    /// Every role exited 0.
    Completed,
    /// This role failed first (its exit status; `None`: killed by a signal).
    Failed(String, Option<i32>),
    Canceled(Option<CancelRequest>),
    TimedOut,
}

impl LocalBackend {
    /// Start every role of job `key` at once and supervise them; whether they started
    /// (one that cannot start kills those that did and ends the job).
    pub(super) fn start_roles(
        &self,
        key: Key,
        roles: Vec<(String, tokio::process::Command)>,
        cancel: oneshot::Receiver<CancelRequest>,
        limit: Duration,
    ) -> bool {
        let mut children = Vec::with_capacity(roles.len());
        for (name, mut command) in roles {
            match command.spawn() {
                Ok(child) => children.push((name, child)),
                Err(e) => {
                    for (_, child) in &children {
                        if let Some(pid) = child.id() {
                            kill_group_of(pid);
                        }
                    }
                    self.finish(
                        &key,
                        super::slots::Outcome::Lost(format!(
                            "role {name}: bash did not start: {e}"
                        )),
                    );
                    return false;
                }
            }
        }
        let mut mark = Mark::new(JobState::Running, TransitionSource::Poll)
            .message(format!("{} roles started", children.len()));
        for (name, child) in &children {
            let mut role = TaskMark::new(JobState::Running);
            role.message = Some(format!("started as pid {}", child.id().unwrap_or_default()));
            role.nodes = Some(vec!["localhost".to_string()]);
            mark = mark.role(name.clone(), role);
        }
        if let Err(error) = self.inner.store.blocking().mark(&key.0, mark) {
            tracing::warn!(job = %key.0, %error, "cannot record the start of a local job");
        }
        tokio::spawn(self.clone().supervise_roles(key, children, cancel, limit));
        true
    }

    /// Wait for the roles of job `key`: each that exits 0 is marked COMPLETE; the first
    /// to fail, a cancel or the time limit ends the others.
    async fn supervise_roles(
        self,
        key: Key,
        children: Vec<(String, tokio::process::Child)>,
        mut cancel: oneshot::Receiver<CancelRequest>,
        limit: Duration,
    ) {
        let (tx, mut exits) = mpsc::unbounded_channel();
        let mut pids = BTreeMap::new();
        for (name, mut child) in children {
            pids.insert(name.clone(), child.id());
            let tx = tx.clone();
            tokio::spawn(async move {
                let code = child.wait().await.ok().and_then(|s| s.code());
                let _ = tx.send((name, code));
            });
        }
        drop(tx);
        let mut running: BTreeSet<String> = pids.keys().cloned().collect();
        let deadline = tokio::time::sleep(limit);
        tokio::pin!(deadline);
        let end = loop {
            tokio::select! {
                exit = exits.recv() => match exit {
                    Some((name, Some(0))) => {
                        running.remove(&name);
                        let mut role = TaskMark::new(JobState::Complete);
                        role.message = Some("exit 0".to_string());
                        let mark = Mark::new(JobState::Running, TransitionSource::Poll).role(name, role);
                        if let Err(error) = self.inner.store.mark(&key.0, mark).await {
                            tracing::warn!(job = %key.0, %error, "cannot record a role's end");
                        }
                        if running.is_empty() {
                            break RolesEnd::Completed;
                        }
                    }
                    Some((name, code)) => {
                        running.remove(&name);
                        break RolesEnd::Failed(name, code);
                    }
                    None => break RolesEnd::Completed,
                },
                request = &mut cancel => break RolesEnd::Canceled(request.ok()),
                _ = &mut deadline => break RolesEnd::TimedOut,
            }
        };
        for name in &running {
            if let Some(Some(pid)) = pids.get(name) {
                kill_group_of(*pid);
            }
        }
        // Every process is gone before the record says so.
        while exits.recv().await.is_some() {}
        self.off_runtime(move |backend| {
            backend.end_roles(&key, end, &running);
            backend
                .inner
                .cancels
                .lock()
                .expect("cancels lock")
                .remove(&key);
            backend.free_slot(&key.0);
            backend.start_waiting();
        })
        .await;
    }

    /// Record how the roles of job `key` ended (`stopped`: the roles still running
    /// when it did) and answer a cancel that asked for it.
    fn end_roles(&self, key: &Key, end: RolesEnd, stopped: &BTreeSet<String>) {
        let ended = |state: JobState, message: String| {
            let mut role = TaskMark::new(state);
            role.message = Some(message);
            role
        };
        let mut mark = Mark::new(JobState::Running, TransitionSource::Poll);
        let mut answer = None;
        match end {
            RolesEnd::Completed => return,
            RolesEnd::Failed(name, code) => {
                if let Some(code) = code {
                    self.inner
                        .exits
                        .lock()
                        .expect("exits lock")
                        .insert(key.clone(), code);
                }
                let class = match self.inner.store.blocking().get(&key.0) {
                    Ok(record) => {
                        let tail = role_log_tail(&record, &name);
                        classify_failure(Ending::Failed { exit_code: code }, &tail)
                    }
                    Err(_) => ErrorClass::Program,
                };
                let why = match code {
                    Some(code) => format!("role {name} failed: exit {code}"),
                    None => format!("role {name} failed: killed by a signal"),
                };
                let mut failed = ended(JobState::Error, why.clone());
                failed.err_class = Some(class);
                mark = mark.role(name.clone(), failed).message(why);
                for other in stopped {
                    mark = mark.role(
                        other.clone(),
                        ended(JobState::Canceled, format!("stopped: role {name} failed")),
                    );
                }
            }
            RolesEnd::Canceled(request) => {
                answer = request;
                mark = Mark::new(JobState::Canceled, TransitionSource::User).message("cancelled");
                for name in stopped {
                    mark = mark.role(name.clone(), ended(JobState::Canceled, "cancelled".into()));
                }
            }
            RolesEnd::TimedOut => {
                self.inner
                    .exits
                    .lock()
                    .expect("exits lock")
                    .insert(key.clone(), CHILD_TIMEOUT_EXIT);
                let why = format!("exit {CHILD_TIMEOUT_EXIT}: {CHILD_TIMEOUT_NOTE}");
                mark = mark.message(why.clone());
                for name in stopped {
                    let mut role = ended(JobState::Error, why.clone());
                    role.err_class = Some(ErrorClass::Program);
                    mark = mark.role(name.clone(), role);
                }
            }
        }
        self.mark_roles(key, mark);
        if let Some(done) = answer {
            let _ = done.send(());
        }
    }

    fn mark_roles(&self, key: &Key, mark: Mark) {
        if let Err(error) = self.inner.store.blocking().mark(&key.0, mark) {
            tracing::warn!(job = %key.0, %error, "cannot record a role of a local job");
        }
    }
}

/// The last lines of role `role`'s logs (to class its failure).
fn role_log_tail(record: &JobRecord, role: &str) -> String {
    let Some(dir) = LocalBackend::log_dir(record, None) else {
        return String::new();
    };
    let dir = role_log_dir(&dir, role);
    let mut tail = String::new();
    for stream in [LogStream::Out, LogStream::Err] {
        tail.push_str(&last_lines(&dir.join(stream.file_name()), LOG_TAIL_LINES));
    }
    tail
}
