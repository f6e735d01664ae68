//! `LocalBackend`: a complete [`Backend`] that runs each job's command as a process on
//! this machine, with the same records, states, logs, cancel and watch as a cluster;
//! for testing orchestrators without one (as object_store ships `InMemory`).

mod resume;
mod roles;
mod slots;
mod why;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::{self, BoxStream, StreamExt};
use tokio::process::Command;
use tokio::sync::oneshot;

use resume::LocalResume;
use slots::{CancelRequest, Key, Launch, Processes, Queue};

use crate::backend::{
    watch_by_polling, Backend, CheckKind, Forecast, JobStatus, LogOptions, LogStream, NativeStatus,
    PartitionForecast, PreflightReport, SubmitOptions, WaitAnswer, WaitCategory, WatchEvent,
    WatchOptions,
};
use crate::dependency::{check_before_submit, follow_retry, never_satisfied, resolve_dependencies};
use crate::record::{
    AsyncStore, BackendRef, JobId, JobRecord, Mark, RecordFilter, RecordStore, TransitionSource,
};
use crate::redact::SecretRegistry;
use crate::retry::{begin, open_or_follow, prior, retry_spec, Prior, RetryStart};
use crate::spec::{JobSpec, SpecDefaults, TaskSet};
use crate::state::JobState;
use crate::storage::RemotePath;
use crate::{Error, Result};

/// Runs each job's command with `bash -c` in its own folder under a root, at most
/// `max_running` at a time (the others wait PENDING, in submit order), and keeps the
/// records in any [`RecordStore`].
///
/// - A job's folder is `<root>/<id>/`: `specs/spec.json`, and its logs in
///   `logs/<id>-<native id>/main.out` and `main.err`, as on a cluster.
/// - The command sees its spec's `env` and `extra_env`, its secrets (from the submit
///   options or this process's environment; redacted from its logs), `NODE_RANK=0`,
///   `WORLD_SIZE=1`, `MASTER_ADDR=127.0.0.1`, `MASTER_PORT=29500` and `RESULTS_DIR`.
/// - Its child timeout (95% of the wall time unless the spec sets one) is enforced as
///   on a cluster: ERROR, program, with a message saying the command was killed by its
///   own time limit (exit 124); a non-zero exit is ERROR, classed
///   infra or program from its logs like a cluster job; a cancel kills its whole
///   process group.
/// - No containers, GPUs or nodes: a spec with an `image` is refused.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> slurm_core::Result<()> {
/// use std::time::Duration;
/// use slurm_core::{Backend, BackendExt, SubmitOptions};
/// use slurm_core::{JobSpec, JobState, LocalBackend, MemoryRecordStore};
///
/// let root = tempfile::tempdir().unwrap();
/// let backend = LocalBackend::new(root.path(), MemoryRecordStore::new())?;
/// let record = backend.submit(&JobSpec::new("hello", "echo hi"), SubmitOptions::default()).await?;
/// let done = backend.wait(record.id(), Duration::from_millis(20), Duration::from_secs(30)).await?;
/// assert_eq!(done.state(), JobState::Complete);
/// assert_eq!(backend.logs(record.id(), Default::default()).await?, "hi\n");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LocalBackend {
    inner: Arc<Inner>,
}

struct Inner {
    root: PathBuf,
    store: AsyncStore,
    max_running: usize,
    next_native_id: AtomicU64,
    queue: Mutex<Queue>,
    /// The cancel channel of every job (and array task) not yet ended, pending ones included.
    cancels: Mutex<HashMap<Key, oneshot::Sender<CancelRequest>>>,
    exits: Mutex<HashMap<Key, i32>>,
    secrets: Mutex<SecretRegistry>,
    /// Records whose end a status call already reported: a dependant of one that can
    /// never meet its condition ends at the next status (a watch may retry it first).
    ended_seen: Mutex<HashSet<JobId>>,
    /// Wall times, child timeouts and resume warnings run this many times faster.
    time_scale: u32,
}

impl fmt::Debug for LocalBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalBackend")
            .field("root", &self.inner.root)
            .field("store", &self.inner.store)
            .field("max_running", &self.inner.max_running)
            .finish_non_exhaustive()
    }
}

impl LocalBackend {
    /// A backend whose jobs live under `root` (created if missing), four at a time.
    pub fn new(root: &Path, store: impl RecordStore + 'static) -> Result<Self> {
        fs::create_dir_all(root)
            .map_err(|e| Error::io(format!("creating {}", root.display()), e))?;
        Ok(LocalBackend {
            inner: Arc::new(Inner {
                root: root.to_path_buf(),
                store: AsyncStore::new(Arc::new(store)),
                max_running: 4,
                next_native_id: AtomicU64::new(1),
                queue: Mutex::new(Queue::default()),
                cancels: Mutex::new(HashMap::new()),
                exits: Mutex::new(HashMap::new()),
                secrets: Mutex::new(SecretRegistry::new()),
                ended_seen: Mutex::new(HashSet::new()),
                time_scale: 1,
            }),
        })
    }

    /// At most `max_running` jobs run at once (at least one); the others wait PENDING.
    /// Only before the first submit: a backend already shared is returned unchanged.
    pub fn with_max_running(mut self, max_running: usize) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.max_running = max_running.max(1);
        }
        self
    }

    /// Run every wall time, child timeout and resume warning `scale` times faster (a
    /// one-minute wall lasts 60/`scale` seconds): for tests and demos of long runs.
    /// Only before the first submit: a backend already shared is returned unchanged.
    pub fn with_time_scale(mut self, scale: u32) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.time_scale = scale.max(1);
        }
        self
    }

    /// The folder the jobs live under.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// `logs/<id>-<native>/` of a job, `logs/<id>-<native>_<task>/` of an array task.
    fn log_dir(record: &JobRecord, task: Option<u32>) -> Option<PathBuf> {
        let native = &record.backend_ref.as_ref()?.native_id;
        let name = match task {
            Some(task) => format!("{}-{native}_{task}", record.id),
            None => format!("{}-{native}", record.id),
        };
        Some(
            Path::new(record.results_dir.as_str())
                .join("logs")
                .join(name),
        )
    }

    fn log_path(record: &JobRecord, task: Option<u32>, stream: LogStream) -> Option<PathBuf> {
        Some(Self::log_dir(record, task)?.join(stream.file_name()))
    }

    /// The log `options` name: the job's (a task's), or a role's.
    fn log_path_of(record: &JobRecord, options: &LogOptions) -> Option<PathBuf> {
        match &options.role {
            Some(role) => Some(
                roles::role_log_dir(&Self::log_dir(record, options.task)?, role)
                    .join(options.stream.file_name()),
            ),
            None => Self::log_path(record, options.task, options.stream),
        }
    }

    /// Run `step`, a step of this backend's own queue (which reads and writes
    /// records through the store as it is), on the runtime's blocking pool: no call
    /// of the store waits on a runtime's thread. A panic of `step` is the caller's.
    pub(super) async fn off_runtime<T: Send + 'static>(
        &self,
        step: impl FnOnce(&LocalBackend) -> T + Send + 'static,
    ) -> T {
        let backend = self.clone();
        match tokio::task::spawn_blocking(move || crate::record::handed_off(|| step(&backend)))
            .await
        {
            Ok(answer) => answer,
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            Err(error) => panic!("the runtime shut down during a step of the local queue: {error}"),
        }
    }

    fn redact(&self, text: &str) -> String {
        self.inner
            .secrets
            .lock()
            .expect("secrets lock")
            .redact(text)
    }

    /// The status of `record` in the scheduler's words (this machine's), with each task's.
    fn native_status(&self, record: JobRecord) -> JobStatus {
        let exits = self.inner.exits.lock().expect("exits lock");
        let native = |state: JobState, key: &Key| NativeStatus {
            reason_note: None,
            state: state.to_string(),
            reason: (state == JobState::Pending).then(|| {
                if record.after.is_empty() {
                    "waiting for a free slot".to_string()
                } else {
                    "waiting for a free slot or a dependency".to_string()
                }
            }),
            exit_code: exits
                .get(key)
                .copied()
                .or((state == JobState::Complete).then_some(0)),
            nodes: (state != JobState::Pending).then(|| "localhost".to_string()),
            source: "local",
            category: Some(match state {
                JobState::Pending if !record.after.is_empty() => WaitCategory::Dependency,
                JobState::Pending => WaitCategory::Resources,
                other => WaitCategory::of_state(other),
            }),
        };
        let tasks: BTreeMap<u32, NativeStatus> = record
            .tasks
            .iter()
            .map(|(index, task)| {
                (
                    *index,
                    native(task.state, &(record.id.clone(), Some(*index))),
                )
            })
            .collect();
        let whole = native(record.state, &(record.id.clone(), None));
        drop(exits);
        JobStatus::new(record, Some(whole), tasks)
    }
}

/// The process of a job's (or a role's) `command` in folder `dir`, its output in
/// `log_dir/main.out` and `main.err`, with the spec's env, its secrets and a single
/// node's rendezvous (and `SLURM_RUN_CODE_DIR`, the code tree, when the job has one), in a
/// process group of its own.
fn job_command(
    command_text: &str,
    dir: &Path,
    log_dir: &Path,
    spec: &JobSpec,
    secrets: &SecretRegistry,
    code_dir: Option<&str>,
) -> Result<Command> {
    fs::create_dir_all(log_dir)
        .map_err(|e| Error::io(format!("creating {}", log_dir.display()), e))?;
    let open = |name: &str| {
        fs::File::create(log_dir.join(name)).map_err(|e| Error::io(format!("creating {name}"), e))
    };
    let (out, err) = (open("main.out")?, open("main.err")?);
    let mut command = Command::new("bash");
    command
        .arg("-c")
        .arg(command_text)
        .current_dir(dir)
        .envs(&spec.env)
        .envs(&spec.extra_env)
        .envs(secrets.entries())
        .env("NODE_RANK", "0")
        .env("WORLD_SIZE", "1")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", "29500")
        .env("RESULTS_DIR", dir)
        .envs(code_dir.map(|d| ("SLURM_RUN_CODE_DIR", d)))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .kill_on_drop(true);
    Ok(command)
}

/// The last `n` lines of a file, or nothing when it does not exist.
fn last_lines(path: &Path, n: usize) -> String {
    let text = fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().collect();
    let mut tail = lines[lines.len().saturating_sub(n)..].join("\n");
    if !tail.is_empty() {
        tail.push('\n');
    }
    tail
}

#[async_trait]
impl Backend for LocalBackend {
    async fn preflight(&self, spec: Option<&JobSpec>) -> Result<PreflightReport> {
        let mut report = PreflightReport::default();
        let bash = Command::new("bash").arg("-c").arg("true").status().await;
        report.push(
            CheckKind::Scheduler,
            "bash",
            matches!(&bash, Ok(s) if s.success()),
            match &bash {
                Ok(_) => "bash runs".to_string(),
                Err(e) => e.to_string(),
            },
            "install bash",
        );
        let probe = tempfile::tempfile_in(&self.inner.root);
        report.push(
            CheckKind::Storage,
            "results root",
            probe.is_ok(),
            match &probe {
                Ok(_) => format!("{} is writable", self.inner.root.display()),
                Err(e) => e.to_string(),
            },
            "give the local backend a folder it can write",
        );
        if let Some(spec) = spec {
            report.push(
                CheckKind::Containers,
                "image",
                spec.image.is_none(),
                match &spec.image {
                    None => "not needed".to_string(),
                    Some(image) => format!("{image}: the local backend runs no containers"),
                },
                "remove `image`, or run the job on the SLURM backend",
            );
            let missing: Vec<&str> = spec
                .secrets
                .iter()
                .filter(|name| std::env::var_os(name).is_none())
                .map(String::as_str)
                .collect();
            report.push(
                CheckKind::Credentials,
                "secrets",
                missing.is_empty(),
                if missing.is_empty() {
                    format!("{} present", spec.secrets.len())
                } else {
                    format!("not in the environment: {}", missing.join(", "))
                },
                "export each secret the spec names before submitting",
            );
        }
        Ok(report)
    }

    async fn submit(&self, spec: &JobSpec, options: SubmitOptions) -> Result<JobRecord> {
        let spec = spec.with_after(&options.after);
        spec.validate()?;
        let resources = match spec.is_multi_role() {
            true => roles::resources(&spec)?,
            false => spec.resolve(&SpecDefaults::default())?,
        };
        if spec.image.is_some() {
            return Err(Error::invalid(
                "image",
                "the local backend runs commands on this machine, without containers; remove `image` or use the SLURM backend",
            ));
        }
        let plan = spec.array_plan()?;
        let secrets = options.secrets_for(&spec)?;
        let (retry_of, after) = (options.retry_of.clone(), spec.after.clone());
        let previous = match self
            .inner
            .store
            .run(move |store| {
                let previous = prior(store, retry_of.as_ref())?;
                // Parents must be accepted and able to meet their condition; this queue
                // waits.
                if !matches!(previous, Prior::Followed(_)) {
                    check_before_submit(store, &after)?;
                }
                Ok(previous)
            })
            .await?
        {
            Prior::Followed(winner) => return Ok(*winner),
            other => other.previous().cloned(),
        };

        let id = JobId::mint_for(&spec);
        let dir = self.inner.root.join(id.as_str());
        let results_dir = RemotePath::parse_for("results_dir", &dir.to_string_lossy())?;
        let mut record = JobRecord::new(id.clone(), &spec, results_dir)?;
        // Code runs where it is (this machine): the same checks (dirty, size), no copy.
        if let Some(code) = &spec.code {
            let tree = crate::code::snapshot(code, crate::code::DEFAULT_CODE_LIMIT)?;
            record.code_commit = tree.commit;
            let dir = std::fs::canonicalize(&code.path)
                .map_err(|e| Error::io(format!("resolve {}", code.path), e))?;
            record.code_dir = Some(dir.to_string_lossy().into_owned());
        }
        if let Some(plan) = &plan {
            record = record.with_tasks(plan.indices.iter());
        }
        if let Some(previous) = &previous {
            record = record.retrying(previous);
        }
        let native_id = self
            .inner
            .next_native_id
            .fetch_add(1, Ordering::SeqCst)
            .to_string();
        let tasks: Vec<Option<u32>> = match &plan {
            Some(plan) => plan.indices.iter().map(Some).collect(),
            None => vec![None],
        };
        fs::create_dir_all(dir.join("specs"))
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let spec_json =
            serde_json::to_vec_pretty(&spec).map_err(|e| Error::parse("spec", e.to_string()))?;
        fs::write(dir.join("specs/spec.json"), spec_json)
            .map_err(|e| Error::io("writing specs/spec.json", e))?;
        record.backend_ref = Some(BackendRef::new(native_id.clone()));
        let mut launches = Vec::new();
        for task in &tasks {
            let log_dir = Self::log_dir(&record, *task).expect("the native id is set");
            let task_dir = match task {
                Some(task) => dir.join("tasks").join(task.to_string()),
                None => dir.clone(),
            };
            for folder in [&log_dir, &task_dir] {
                fs::create_dir_all(folder)
                    .map_err(|e| Error::io(format!("creating {}", folder.display()), e))?;
            }
            let code_dir = record.code_dir.as_deref();
            let mut command =
                job_command(&spec.command, &dir, &log_dir, &spec, &secrets, code_dir)?;
            if let Some(task) = task {
                command
                    .env("TASK_INDEX", task.to_string())
                    .env("TASK_RESULTS_DIR", &task_dir)
                    .envs(spec.sweep_point(*task).unwrap_or_default());
            }
            let processes = match spec.is_multi_role() {
                true => roles::role_processes(&spec, &dir, &log_dir, &secrets, code_dir)?,
                false => Processes::One(command),
            };
            launches.push((*task, processes));
        }
        record.backend_ref = None;
        // A retry's record is opened with its claim in one step: a second watcher
        // opens nothing and follows the first one's retry.
        let opened = self
            .inner
            .store
            .run(move |store| {
                if let Some(winner) = open_or_follow(store, &record)? {
                    return Ok(Some(winner));
                }
                // Dependants of the failed attempt wait for this one, before it can run
                // (a fast retry could otherwise end, and its dependants run, before they
                // were re-pointed: their records would still name the failed attempt).
                if let Some(previous) = &record.retry_of {
                    follow_retry(store, previous, &record.id)?;
                }
                Ok(None)
            })
            .await?;
        if let Some(winner) = opened {
            return Ok(winner);
        }
        {
            let mut registry = self.inner.secrets.lock().expect("secrets lock");
            for (name, value) in secrets.entries() {
                registry.register(name, value);
            }
        }
        let scale = self.inner.time_scale;
        let scaled = |secs: u64| Duration::from_millis(secs * 1000 / u64::from(scale));
        let mut queued = Vec::new();
        for (task, processes) in launches {
            let (cancel_tx, cancel_rx) = oneshot::channel();
            self.inner
                .cancels
                .lock()
                .expect("cancels lock")
                .insert((id.clone(), task), cancel_tx);
            queued.push(Launch {
                id: id.clone(),
                task,
                processes,
                cancel: cancel_rx,
                limit: scaled(resources.child_timeout_secs),
                max_parallel: plan.as_ref().and_then(|p| p.max_parallel),
                resume: spec.resume.as_ref().map(|resume| {
                    LocalResume::new(
                        resume,
                        &dir,
                        scaled(resources.wall.as_secs()),
                        scaled(resume.warn_before.as_secs()),
                    )
                }),
            });
        }
        self.inner
            .store
            .mark(
                &id,
                Mark::new(JobState::Pending, TransitionSource::Agent)
                    .message(if spec.after.is_empty() {
                        "queued on this machine".to_string()
                    } else {
                        let parents: Vec<String> =
                            spec.after.iter().map(ToString::to_string).collect();
                        format!("queued on this machine after {}", parents.join(", "))
                    })
                    .backend_ref(BackendRef::new(native_id)),
            )
            .await?;
        self.off_runtime(move |backend| backend.enqueue(queued))
            .await;
        self.inner.store.get(&id).await
    }

    async fn resubmit(&self, id: &JobId) -> Result<JobRecord> {
        let asked = id.clone();
        let previous = match self
            .inner
            .store
            .run(move |store| begin(store, &asked))
            .await?
        {
            RetryStart::Followed(winner) => return Ok(*winner),
            RetryStart::Retry(previous) => previous,
        };
        // The record's own copy of the spec; the job folder's only for records without
        // one, and then only with the submitted digest (the job could rewrite it).
        let cluster_copy = match previous.spec {
            Some(_) => None,
            None => {
                let path = Path::new(previous.results_dir.as_str()).join("specs/spec.json");
                Some(
                    fs::read_to_string(&path)
                        .map_err(|e| Error::io(format!("reading {}", path.display()), e))?,
                )
            }
        };
        let spec = retry_spec(&previous, cluster_copy.as_deref())?;
        // The submit re-points the failed attempt's dependants at the retry.
        self.submit(&spec, SubmitOptions::for_retry_of(&previous, None))
            .await
    }

    async fn status(&self, id: &JobId) -> Result<JobStatus> {
        Ok(self.status_many(std::slice::from_ref(id)).await?.remove(0))
    }

    async fn why(&self, ids: &[JobId]) -> Result<Vec<WaitAnswer>> {
        let statuses = self.status_many(ids).await?;
        let mut answers = Vec::with_capacity(statuses.len());
        for status in &statuses {
            let mut parents = Vec::new();
            for dependency in &status.record().after {
                if let Ok(parent) = self.inner.store.get(&dependency.job).await {
                    parents.push(parent);
                }
            }
            answers.push(self.wait_answer(status, &parents));
        }
        Ok(answers)
    }

    async fn forecast(&self, spec: &JobSpec) -> Result<Forecast> {
        spec.validate()?;
        let free = {
            let queue = self.inner.queue.lock().expect("queue lock");
            queue.running < self.inner.max_running && queue.waiting.is_empty()
        };
        // Busy: it starts when a running job ends, which this machine cannot foresee.
        let line = PartitionForecast {
            partition: "local".to_string(),
            start_estimate: free.then(chrono::Utc::now),
            nodes: Some("localhost".to_string()),
            why_not: None,
            preempts: Vec::new(),
            source: "local queue".to_string(),
        };
        Ok(Forecast {
            partitions: vec![line],
        })
    }

    async fn status_many(&self, ids: &[JobId]) -> Result<Vec<JobStatus>> {
        let known_ended = self.inner.ended_seen.lock().expect("ended lock").clone();
        let mut seen_now = Vec::new();
        let mut all = Vec::with_capacity(ids.len());
        for id in ids {
            let mut record = self.inner.store.get(id).await?;
            if !record.after.is_empty() && !record.state.is_terminal() {
                let after = record.after.clone();
                let resolved = self
                    .inner
                    .store
                    .run(move |store| resolve_dependencies(store, &after))
                    .await?;
                seen_now.extend(
                    resolved
                        .iter()
                        .filter(|r| r.parent.state.is_terminal())
                        .map(|r| r.parent.id.clone()),
                );
                if let Some(why) = never_satisfied(&resolved, &known_ended) {
                    record = self
                        .off_runtime(move |backend| backend.end_unsatisfiable(&record, why))
                        .await;
                }
            }
            if record.state.is_terminal() {
                seen_now.push(record.id.clone());
            }
            all.push(self.native_status(record));
        }
        self.inner
            .ended_seen
            .lock()
            .expect("ended lock")
            .extend(seen_now);
        Ok(all)
    }

    async fn logs(&self, id: &JobId, options: LogOptions) -> Result<String> {
        let record = self.inner.store.get(id).await?;
        match (record.is_array(), options.task) {
            (true, None) => {
                return Err(Error::invalid(
                    "task",
                    format!("{id} is an array; name the task whose log to read"),
                ))
            }
            (false, Some(_)) => {
                return Err(Error::invalid(
                    "task",
                    format!("{id} is a single job; it has no tasks"),
                ))
            }
            (true, Some(task)) => record.check_tasks(&TaskSet::from_iter([task]))?,
            (false, None) => {}
        }
        if let Some(role) = &options.role {
            record.check_role(role)?;
        }
        let path = Self::log_path_of(&record, &options)
            .filter(|path| path.exists())
            .ok_or_else(|| {
                Error::NotFound(format!("{id}: no {} yet", options.stream.file_name()))
            })?;
        Ok(self.redact(&last_lines(&path, options.tail)))
    }

    fn follow_logs(
        &self,
        id: &JobId,
        options: LogOptions,
        interval: Duration,
    ) -> BoxStream<'static, Result<String>> {
        let state = (self.clone(), id.clone(), 0u64, false);
        stream::unfold(state, move |(backend, id, offset, done)| {
            let options = options.clone();
            async move {
                if done {
                    return None;
                }
                let mut offset = offset;
                loop {
                    // Terminal is read before the file, so the last read sees everything.
                    let record = match backend.inner.store.get(&id).await {
                        Ok(record) => record,
                        Err(error) => return Some((Err(error), (backend, id, offset, true))),
                    };
                    let terminal = record.state.is_terminal();
                    if let Some(role) = &options.role {
                        if let Err(error) = record.check_role(role) {
                            return Some((Err(error), (backend, id, offset, true)));
                        }
                    }
                    let mut chunk = Vec::new();
                    if let Some(Ok(mut file)) =
                        Self::log_path_of(&record, &options).map(fs::File::open)
                    {
                        if file.seek(SeekFrom::Start(offset)).is_ok() {
                            let _ = file.read_to_end(&mut chunk);
                        }
                    }
                    offset += chunk.len() as u64;
                    if !chunk.is_empty() {
                        let text = backend.redact(&String::from_utf8_lossy(&chunk));
                        return Some((Ok(text), (backend, id, offset, terminal)));
                    }
                    if terminal {
                        return None;
                    }
                    tokio::time::sleep(interval).await;
                }
            }
        })
        .boxed()
    }

    async fn cancel(&self, id: &JobId) -> Result<JobRecord> {
        let record = self.inner.store.get(id).await?;
        if record.state.is_terminal() {
            return Ok(record);
        }
        let keys: Vec<Key> = match record.is_array() {
            true => record
                .tasks
                .keys()
                .map(|t| (id.clone(), Some(*t)))
                .collect(),
            false => vec![(id.clone(), None)],
        };
        self.cancel_keys(&keys).await;
        self.inner.store.get(id).await
    }

    async fn cancel_tasks(&self, id: &JobId, tasks: &TaskSet) -> Result<JobRecord> {
        let record = self.inner.store.get(id).await?;
        record.check_tasks(tasks)?;
        let keys: Vec<Key> = tasks.iter().map(|t| (id.clone(), Some(t))).collect();
        self.cancel_keys(&keys).await;
        self.inner.store.get(id).await
    }

    fn watch(
        &self,
        ids: &[JobId],
        options: WatchOptions,
    ) -> BoxStream<'static, Result<WatchEvent>> {
        watch_by_polling(self.clone(), ids, options)
    }

    async fn record(&self, id: &JobId) -> Result<JobRecord> {
        self.inner.store.get(id).await
    }

    async fn records(&self, filter: &RecordFilter) -> Result<Vec<JobRecord>> {
        self.inner.store.list(filter).await
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::record::MemoryRecordStore;
    use crate::testing::backend_suite::BackendFixture;
    use crate::testing::RuntimeGuardStore;

    /// The local backend in a folder of its own, one job at a time (so a blocker fills it),
    /// its records in memory behind a [`RuntimeGuardStore`]: a case that ends well fails
    /// when the backend called its store on a runtime's thread.
    pub(crate) struct Local {
        backend: LocalBackend,
        guard: RuntimeGuardStore,
        _root: tempfile::TempDir,
    }

    impl Drop for Local {
        fn drop(&mut self) {
            if !std::thread::panicking() {
                assert_eq!(
                    self.guard.on_runtime_threads(),
                    Vec::<&str>::new(),
                    "store calls on a runtime's thread (of {} calls)",
                    self.guard.calls()
                );
            }
        }
    }

    impl BackendFixture for Local {
        fn backend(&self) -> &dyn Backend {
            &self.backend
        }
        fn spec(&self, name: &str, command: &str) -> JobSpec {
            JobSpec::new(name, command)
        }
        fn blocker(&self, name: &str, command: &str) -> JobSpec {
            JobSpec::new(name, command)
        }
        fn poll_interval(&self) -> Duration {
            Duration::from_millis(50)
        }
        fn deadline(&self) -> Duration {
            Duration::from_secs(30)
        }
        fn resume_step(&self) -> Duration {
            Duration::from_millis(1000 / u64::from(TIME_SCALE))
        }
        fn resume_segment(&self) -> Duration {
            Duration::from_secs(90 / u64::from(TIME_SCALE))
        }
    }

    /// How much faster walls run in the conformance cases (a one-minute wall: 6 s).
    const TIME_SCALE: u32 = 10;

    pub(crate) fn local() -> Local {
        let root = tempfile::tempdir().unwrap();
        let guard = RuntimeGuardStore::new(Arc::new(MemoryRecordStore::new()));
        let backend = LocalBackend::new(root.path(), guard.clone())
            .unwrap()
            .with_max_running(1)
            .with_time_scale(TIME_SCALE);
        Local {
            backend,
            guard,
            _root: root,
        }
    }

    crate::backend_conformance!(conformance, local());

    async fn wait_terminal(backend: &LocalBackend, id: &JobId) -> JobRecord {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let record = backend.record(id).await.unwrap();
            if record.state.is_terminal() {
                return record;
            }
            assert!(std::time::Instant::now() < deadline, "{id} never ended");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Two backends (two replicas) on one record folder retry an array's failed task
    /// at once: one retry record, of that task alone, whoever won; the other answers it.
    #[tokio::test]
    async fn two_replicas_retrying_an_arrays_failed_task_open_one_retry() {
        let records = tempfile::tempdir().unwrap();
        let (root_a, root_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let replica = |root: &std::path::Path| {
            let store = crate::record::FileRecordStore::new(records.path()).unwrap();
            LocalBackend::new(root, store).unwrap()
        };
        let (a, b) = (replica(root_a.path()), replica(root_b.path()));
        let mut spec = JobSpec::new(
            "array-retry",
            "if [ \"$TASK_INDEX\" = 1 ]; then echo 'NCCL error: unhandled system error' >&2; exit 1; fi",
        );
        spec.array = Some(crate::spec::ArraySpec {
            size: Some(3),
            ..crate::spec::ArraySpec::default()
        });
        let first = a.submit(&spec, SubmitOptions::default()).await.unwrap();
        let failed = wait_terminal(&a, &first.id).await;
        assert_eq!(failed.err_class, Some(crate::classify::ErrorClass::Infra));
        let (ra, rb) = futures::future::join(a.resubmit(&first.id), b.resubmit(&first.id)).await;
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        assert_eq!(ra.id, rb.id, "both answer one retry");
        let all = a.records(&RecordFilter::any()).await.unwrap();
        let retries: Vec<&JobRecord> = all
            .iter()
            .filter(|r| r.retry_of.as_ref() == Some(&first.id))
            .collect();
        assert_eq!(retries.len(), 1, "one retry record: {all:?}");
        assert_eq!(retries[0].tasks.keys().copied().collect::<Vec<_>>(), [1]);
    }

    #[tokio::test]
    async fn a_watch_retries_a_job_that_had_failed_before_it_began() {
        let root = tempfile::tempdir().unwrap();
        let backend = LocalBackend::new(root.path(), MemoryRecordStore::new()).unwrap();
        let spec = JobSpec::new(
            "early",
            "echo 'NCCL error: unhandled system error' >&2; exit 1",
        );
        let first = backend
            .submit(&spec, SubmitOptions::default())
            .await
            .unwrap();
        let failed = wait_terminal(&backend, &first.id).await;
        assert_eq!(failed.err_class, Some(crate::classify::ErrorClass::Infra));
        let options = WatchOptions {
            interval: Duration::from_millis(20),
            retry: Some(crate::classify::RetryPolicy {
                budget: 1,
                ..Default::default()
            }),
            ..WatchOptions::default()
        };
        let events: Vec<WatchEvent> = backend
            .watch(std::slice::from_ref(&first.id), options)
            .map(|e| e.unwrap())
            .collect()
            .await;
        let retried: Vec<&JobRecord> = events
            .iter()
            .filter_map(|e| match e {
                WatchEvent::Retried { previous, record } if previous == &first.id => {
                    Some(&**record)
                }
                _ => None,
            })
            .collect();
        assert_eq!(retried.len(), 1, "{events:?}");
        assert_eq!(retried[0].retry_of.as_ref(), Some(&first.id));
    }

    #[tokio::test]
    async fn jobs_beyond_the_slots_wait_pending_and_start_in_order() {
        let root = tempfile::tempdir().unwrap();
        let backend = LocalBackend::new(root.path(), MemoryRecordStore::new())
            .unwrap()
            .with_max_running(1);
        let first = backend
            .submit(
                &JobSpec::new("first", "sleep 0.3"),
                SubmitOptions::default(),
            )
            .await
            .unwrap();
        let second = backend
            .submit(&JobSpec::new("second", "true"), SubmitOptions::default())
            .await
            .unwrap();
        assert_eq!(first.state, JobState::Running);
        assert_eq!(second.state, JobState::Pending);
        assert_eq!(
            backend
                .status(&second.id)
                .await
                .unwrap()
                .native
                .unwrap()
                .reason
                .as_deref(),
            Some("waiting for a free slot")
        );
        assert_eq!(
            wait_terminal(&backend, &second.id).await.state,
            JobState::Complete
        );
        let first = backend.record(&first.id).await.unwrap();
        let second = backend.record(&second.id).await.unwrap();
        let started = |r: &JobRecord| {
            r.history
                .iter()
                .find(|t| t.state == JobState::Running)
                .unwrap()
                .at
        };
        assert_eq!(first.state, JobState::Complete);
        assert!(started(&first) <= started(&second));
    }

    #[tokio::test]
    async fn a_cancel_kills_the_whole_process_group() {
        let root = tempfile::tempdir().unwrap();
        let backend = LocalBackend::new(root.path(), MemoryRecordStore::new()).unwrap();
        let marker = root.path().join("grandchild-pid");
        let spec = JobSpec::new(
            "tree",
            format!("sleep 300 & echo $! > {}; wait", marker.display()),
        );
        let record = backend
            .submit(&spec, SubmitOptions::default())
            .await
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !marker.exists() || fs::read_to_string(&marker).unwrap().trim().is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "the job never started"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let pid: i32 = fs::read_to_string(&marker).unwrap().trim().parse().unwrap();
        let cancelled = backend.cancel(&record.id).await.unwrap();
        assert_eq!(cancelled.state, JobState::Canceled);
        // Gone, or a zombie waiting for init to reap it.
        let alive = |pid: i32| {
            fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|stat| {
                    let state = stat.rsplit(')').next().unwrap_or("").trim_start();
                    !state.starts_with('Z')
                })
                .unwrap_or(false)
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while alive(pid) {
            assert!(
                std::time::Instant::now() < deadline,
                "the job's child {pid} outlived the cancel"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
