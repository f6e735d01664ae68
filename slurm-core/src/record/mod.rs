//! Durable job records: the [`JobId`] minted for each job, the [`JobRecord`] kept true to the cluster, and the [`RecordStore`] seam.
//!
//! A record never holds a secret value: it keeps the spec's digest (the spec
//! holds secret names only), and stores redact transition messages with the
//! [`SecretRegistry`] they are given.

mod file;
mod memory;
mod read_cache;
mod tasks;
mod unsettled;

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::classify::ErrorClass;

use crate::names::{validate_safe_name, MAX_NAME_LEN};
use crate::redact::SecretRegistry;
use crate::spec::{CompletionCheck, Dependency, JobSpec};
use crate::state::{JobState, TransitionOutcome};
use crate::storage::RemotePath;
use crate::{Error, Result};

pub use file::FileRecordStore;
pub use memory::MemoryRecordStore;
pub use tasks::{derive_state, state_groups, summary, TaskMark, TaskRecord};
pub use unsettled::{Unsettled, UnsettledKind};

/// The record format written by this version. Version 2 added the array tasks, the
/// dependencies, the nodes and the node exclusions; version 3 made `unsettled` typed
/// ([`Unsettled`]); older records read as they are.
pub const SCHEMA_VERSION: u32 = 3;

/// A record id: `<label>-<6 hex>`, a safe name (`^[A-Za-z0-9][A-Za-z0-9._-]*$`,
/// at most 64 characters) usable as a file name and as the SLURM job name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct JobId(String);

impl JobId {
    /// Parse an existing id (refuses unsafe names and path traversal).
    pub fn parse(text: &str) -> Result<Self> {
        validate_safe_name("job id", text)?;
        Ok(JobId(text.to_string()))
    }

    /// Mint a fresh id from `label`: the label sanitised (unsafe characters become
    /// `-`, cut to fit), a dash, and 6 random hex digits.
    ///
    /// ```
    /// use slurm_core::record::JobId;
    /// let id = JobId::mint("dino/train v2");
    /// assert!(id.as_str().starts_with("dino-train-v2-"));
    /// assert_eq!(id.as_str().len(), "dino-train-v2-".len() + 6);
    /// ```
    pub fn mint(label: &str) -> Self {
        let mut clean: String = label
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        // Start with a letter or digit; no runs of dashes at the ends.
        clean = clean
            .trim_start_matches(|c: char| !c.is_ascii_alphanumeric())
            .trim_end_matches('-')
            .to_string();
        clean.truncate(MAX_NAME_LEN - 7);
        let clean = clean.trim_end_matches('-');
        let label = if clean.is_empty() { "job" } else { clean };
        let suffix: u32 = rand::random::<u32>() & 0x00ff_ffff;
        JobId(format!("{label}-{suffix:06x}"))
    }

    /// Mint an id for `spec` from [`JobSpec::id_label`] (`arch-action`, else the name).
    pub fn mint_for(spec: &JobSpec) -> Self {
        Self::mint(&spec.id_label())
    }

    /// The id text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for JobId {
    type Error = Error;
    fn try_from(value: String) -> Result<Self> {
        JobId::parse(&value)
    }
}

impl From<JobId> for String {
    fn from(value: JobId) -> Self {
        value.0
    }
}

impl std::str::FromStr for JobId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        JobId::parse(s)
    }
}

/// Where the job lives on the backend: the scheduler's own id for it, as text, and
/// the cluster when the scheduler named one. Scheduler neutral: a SLURM job id is
/// `"4242"`, a local process could be its pid.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BackendRef {
    /// The scheduler's id of the job (SLURM: the job id).
    #[serde(alias = "slurm_job_id", deserialize_with = "native_id_text")]
    pub native_id: String,
    /// The cluster, when the scheduler named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
}

impl BackendRef {
    /// A reference to the job `native_id` on the default cluster.
    pub fn new(native_id: impl Into<String>) -> Self {
        BackendRef {
            native_id: native_id.into(),
            cluster: None,
        }
    }

    /// On `cluster`.
    pub fn on_cluster(mut self, cluster: impl Into<String>) -> Self {
        self.cluster = Some(cluster.into());
        self
    }
}

impl fmt::Display for BackendRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cluster {
            Some(cluster) => write!(f, "{}@{cluster}", self.native_id),
            None => f.write_str(&self.native_id),
        }
    }
}

/// Reads a native id written as text, or as a number (records written before the id
/// became scheduler neutral hold `"slurm_job_id": 4242`).
fn native_id_text<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Text {
        Text(String),
        Number(u64),
    }
    Ok(match Text::deserialize(deserializer)? {
        Text::Text(text) => text,
        Text::Number(number) => number.to_string(),
    })
}

/// Who caused a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransitionSource {
    /// slurm-run itself (submit, retry).
    Agent,
    /// A status poll of the scheduler.
    Poll,
    /// A person (cancel).
    User,
}

/// One entry of a record's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    /// When.
    pub at: DateTime<Utc>,
    /// The state entered.
    pub state: JobState,
    /// Who.
    pub source: TransitionSource,
    /// Why (the scheduler's own state, a reason); redacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A job as slurm-run remembers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    /// The format version ([`SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// The id (also the job's name on the scheduler).
    pub id: JobId,
    /// The spec's name.
    pub name: String,
    /// SHA-256 of the canonical spec ([`JobSpec::digest`]).
    pub spec_digest: String,
    /// The image as the spec asked for it (Pyxis form: a `.sqsh` path, or `registry#image:tag`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// What `srun --container-image=` received: the converted `.sqsh` of a registry
    /// image (a registry reference here means the pull happened on the GPUs: only with
    /// `allow_registry_image`). `None` in records written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_image: Option<String>,
    /// The spec's labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The job's results folder on the cluster.
    pub results_dir: RemotePath,
    /// The scheduler's job, once submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_ref: Option<BackendRef>,
    /// The current state.
    pub state: JobState,
    /// Infra or program, for an ERROR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub err_class: Option<ErrorClass>,
    /// The record this one retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<JobId>,
    /// 1 for the first submit, 2 for the first retry, ...
    pub attempt: u32,
    /// When the record was opened.
    pub submitted_at: DateTime<Utc>,
    /// When the record last changed.
    pub updated_at: DateTime<Utc>,
    /// Every state entered, oldest first.
    #[serde(default)]
    pub history: Vec<Transition>,
    /// How a COMPLETED job is confirmed (from the spec).
    #[serde(default)]
    pub completion_check: CompletionCheck,
    /// The records this job waits for (each pointing at the parent's attempt it follows).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<Dependency>,
    /// An array's tasks by index, one state each; the record's state is derived from
    /// them ([`derive_state`]). Empty for a single job.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tasks: BTreeMap<u32, TaskRecord>,
    /// The nodes the job runs or ran on (a single job; an array's are per task).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// Whether the job's failure is tied to its nodes (NODE_FAIL, an Xid, ...): a retry
    /// excludes them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub node_fault: bool,
    /// The nodes this attempt was kept off (earlier attempts' faulty nodes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excluded_nodes: Vec<String>,
    /// The spec as submitted, kept by the client: a retry submits this copy, never one
    /// read back from the cluster (which the job itself could rewrite). It holds secret
    /// names only, never values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<JobSpec>,
    /// The names of the secrets the job receives (never their values): what log
    /// redaction looks up in the viewer's environment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_names: Vec<String>,
    /// Whether a secrets sidecar may still be on the cluster's shared storage: set when
    /// one is staged, cleared once its removal is confirmed (the record has ended).
    #[serde(default, skip_serializing_if = "is_false")]
    pub secrets_staged: bool,
    /// How many times the scheduler was asked to take this job, each attempt counted
    /// before it is sent (`None`: a record of a backend that does not count them, or
    /// written before they were counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submit_attempts: Option<u32>,
    /// The scheduler's jobs seen carrying this record's name while its submit was not
    /// settled (every one is kept, for a person and for the next settle).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<BackendRef>,
    /// While `SUBMITTING`: why the submit is not settled yet (the outcome was lost and
    /// the scheduler has not answered, or several jobs carry the name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsettled: Option<Unsettled>,
    /// The record that retries this one: claimed once, under the record's lock, so two
    /// watchers (in one process or several) retry a failure once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retried_as: Option<JobId>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl JobRecord {
    /// A new record in state SUBMITTING for `spec`, attempt 1, with one history entry.
    pub fn new(id: JobId, spec: &JobSpec, results_dir: RemotePath) -> Result<Self> {
        let now = Utc::now();
        let image = spec.image_ref()?.map(|i| i.pyxis());
        Ok(JobRecord {
            schema_version: SCHEMA_VERSION,
            id,
            name: spec.name.clone(),
            spec_digest: spec.digest(),
            image,
            container_image: None,
            labels: spec.labels.clone(),
            results_dir,
            backend_ref: None,
            state: JobState::Submitting,
            err_class: None,
            retry_of: None,
            attempt: 1,
            submitted_at: now,
            updated_at: now,
            history: vec![Transition {
                at: now,
                state: JobState::Submitting,
                source: TransitionSource::Agent,
                message: Some("record opened".to_string()),
            }],
            completion_check: spec.completion_check,
            after: spec.after.clone(),
            tasks: BTreeMap::new(),
            nodes: Vec::new(),
            node_fault: false,
            excluded_nodes: Vec::new(),
            spec: Some(spec.clone()),
            secret_names: spec.secrets.clone(),
            secrets_staged: false,
            submit_attempts: None,
            candidates: Vec::new(),
            unsettled: None,
            retried_as: None,
        })
    }

    /// As an array of the tasks `indices` (each SUBMITTING, like the record).
    pub fn with_tasks(mut self, indices: impl IntoIterator<Item = u32>) -> Self {
        let at = self.submitted_at;
        self.tasks = indices
            .into_iter()
            .map(|i| (i, TaskRecord::new(JobState::Submitting, at)))
            .collect();
        self
    }

    /// The tasks a retry of this array runs again: those that ended ERROR (`None` for a
    /// single job or an array with none).
    pub fn tasks_to_retry(&self) -> Option<crate::spec::TaskSet> {
        let failed: crate::spec::TaskSet = self
            .tasks
            .iter()
            .filter(|(_, t)| t.state == JobState::Error)
            .map(|(i, _)| *i)
            .collect();
        (!failed.is_empty()).then_some(failed)
    }

    /// Check that `tasks` are tasks of this array (an error names the first that is not).
    pub fn check_tasks(&self, tasks: &crate::spec::TaskSet) -> Result<()> {
        if !self.is_array() {
            return Err(Error::invalid(
                "tasks",
                format!("{} is a single job, not an array; cancel it whole", self.id),
            ));
        }
        match tasks.iter().find(|i| !self.tasks.contains_key(i)) {
            Some(missing) => Err(Error::invalid(
                "tasks",
                format!(
                    "{} has no task {missing}; its tasks are {}",
                    self.id,
                    self.tasks.keys().copied().collect::<crate::spec::TaskSet>()
                ),
            )),
            None => Ok(()),
        }
    }

    /// The message of the last transition (empty when it has none).
    pub fn last_message(&self) -> &str {
        self.history
            .last()
            .and_then(|t| t.message.as_deref())
            .unwrap_or_default()
    }

    /// Whether the record is an array (it has tasks).
    pub fn is_array(&self) -> bool {
        !self.tasks.is_empty()
    }

    /// The nodes this job's retry must avoid: the exclusions it inherited, and the
    /// nodes of its failures tied to a node (the job's, or its failed tasks').
    pub fn nodes_to_exclude(&self) -> Vec<String> {
        let mut nodes = self.excluded_nodes.clone();
        let mut add = |list: &[String]| {
            for node in list {
                if !nodes.contains(node) {
                    nodes.push(node.clone());
                }
            }
        };
        if self.node_fault {
            add(&self.nodes);
        }
        for task in self.tasks.values() {
            if task.node_fault && task.state == JobState::Error {
                add(&task.nodes);
            }
        }
        nodes
    }

    /// The spec to submit again for a retry: the client's own copy ([`JobRecord::spec`]);
    /// for a record without one, `cluster_copy` (read back from the cluster) only when it
    /// has the digest the record was submitted with. A copy the job could have rewritten
    /// is never trusted.
    pub fn spec_for_retry(&self, cluster_copy: Option<&str>) -> Result<JobSpec> {
        if let Some(spec) = &self.spec {
            if spec.digest() != self.spec_digest {
                return Err(Error::CorruptRecord {
                    path: self.id.to_string(),
                    message: "the kept spec does not match the record's spec_digest; submit the spec again by hand".into(),
                });
            }
            return Ok(spec.clone());
        }
        let text = cluster_copy.ok_or_else(|| {
            Error::NotFound(format!(
                "{}: the record keeps no copy of its spec; submit the spec again by hand",
                self.id
            ))
        })?;
        let spec = JobSpec::from_json_str(text)?;
        if spec.digest() != self.spec_digest {
            return Err(Error::invalid(
                "spec",
                format!(
                    "{}: specs/spec.json on the cluster no longer matches the submitted spec (digest {} instead of {}): the job or someone else rewrote it; it is not submitted again. Submit the spec again by hand",
                    self.id,
                    crate::names::short(&spec.digest()),
                    crate::names::short(&self.spec_digest)
                ),
            ));
        }
        Ok(spec)
    }

    /// This record as the retry of `previous`: `retry_of` set and the attempt one higher.
    pub fn retry_of(mut self, previous: &JobRecord) -> Self {
        self.retry_of = Some(previous.id.clone());
        self.attempt = previous.attempt.saturating_add(1);
        self
    }

    /// Whether the state is terminal.
    pub fn is_terminal(&self) -> bool {
        self.state.is_terminal()
    }
}

/// A state change asked of a store: validated by the state machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// The observed or decided state.
    pub state: JobState,
    /// Who.
    pub source: TransitionSource,
    /// Why (redacted by the store).
    pub message: Option<String>,
    /// The scheduler's job, set on the move to PENDING once the scheduler accepted it.
    pub backend_ref: Option<BackendRef>,
    /// The error class; only with state ERROR.
    pub err_class: Option<ErrorClass>,
    /// The nodes the job runs or ran on, when observed.
    pub nodes: Option<Vec<String>>,
    /// Whether an ERROR is tied to the job's nodes.
    pub node_fault: bool,
    /// Changes of an array's tasks (the record's state is then derived from them; a
    /// mark without tasks on an array applies its state to every task not ended).
    pub tasks: BTreeMap<u32, TaskMark>,
}

impl Mark {
    /// A mark to `state` by `source`.
    pub fn new(state: JobState, source: TransitionSource) -> Self {
        Mark {
            state,
            source,
            message: None,
            backend_ref: None,
            err_class: None,
            nodes: None,
            node_fault: false,
            tasks: BTreeMap::new(),
        }
    }

    /// With the nodes the job runs or ran on.
    pub fn nodes(mut self, nodes: Vec<String>) -> Self {
        self.nodes = Some(nodes);
        self
    }

    /// With a failure tied to the job's nodes.
    pub fn node_fault(mut self, fault: bool) -> Self {
        self.node_fault = fault;
        self
    }

    /// With a change of task `index`.
    pub fn task(mut self, index: u32, mark: TaskMark) -> Self {
        self.tasks.insert(index, mark);
        self
    }

    /// With a message.
    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    /// With the scheduler's job.
    pub fn backend_ref(mut self, backend_ref: BackendRef) -> Self {
        self.backend_ref = Some(backend_ref);
        self
    }

    /// With an error class.
    pub fn err_class(mut self, class: ErrorClass) -> Self {
        self.err_class = Some(class);
        self
    }
}

/// Which records [`RecordStore::list`] returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordFilter {
    /// Only these states (empty: any).
    pub states: Vec<JobState>,
    /// Only records with all these labels.
    pub labels: BTreeMap<String, String>,
    /// Only records not yet terminal.
    pub active_only: bool,
}

impl RecordFilter {
    /// Every record.
    pub fn any() -> Self {
        Self::default()
    }

    /// Also accept `state`.
    pub fn state(mut self, state: JobState) -> Self {
        self.states.push(state);
        self
    }

    /// Require label `key` = `value`.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Only non-terminal records.
    pub fn active(mut self) -> Self {
        self.active_only = true;
        self
    }

    /// Whether `record` passes.
    pub fn matches(&self, record: &JobRecord) -> bool {
        (self.states.is_empty() || self.states.contains(&record.state))
            && (!self.active_only || !record.state.is_terminal())
            && self
                .labels
                .iter()
                .all(|(k, v)| record.labels.get(k) == Some(v))
    }
}

/// Where records live. Synchronous (file I/O is short), object safe, shared by
/// threads and by processes (the file store locks).
pub trait RecordStore: Send + Sync + fmt::Debug {
    /// Store a new record; refuses an id that exists ([`Error::Invalid`] on `id`).
    fn open(&self, record: &JobRecord) -> Result<()>;

    /// The record `id`, or [`Error::NotFound`].
    fn get(&self, id: &JobId) -> Result<JobRecord>;

    /// Change the state of `id` through the state machine
    /// ([`JobState::check_transition`]): an applied change appends to the history
    /// and sets `backend_ref` / `err_class` when given; a no-op only fills
    /// `backend_ref` / `err_class` that were unset; an ignored observation changes
    /// nothing; an illegal one is [`Error::InvalidTransition`]. Returns the record
    /// as stored.
    fn mark(&self, id: &JobId, mark: Mark) -> Result<JobRecord>;

    /// Change fields other than the state, id and history (e.g. `results_dir`,
    /// labels) under the record's lock. Returns the record as stored.
    fn update(
        &self,
        id: &JobId,
        change: &mut dyn FnMut(&mut JobRecord) -> Result<()>,
    ) -> Result<JobRecord>;

    /// The records passing `filter`, oldest first.
    fn list(&self, filter: &RecordFilter) -> Result<Vec<JobRecord>>;

    /// Mark a submit of `id` as in progress for as long as the returned lease lives
    /// (taken before the record is opened, dropped when the submit returns or its
    /// process dies), so that [`RecordStore::submit_in_progress`] tells others not to
    /// settle a record whose submitter is still at work. The default cannot tell
    /// anyone: it returns a lease that marks nothing.
    fn submit_lease(&self, id: &JobId) -> Result<SubmitLease> {
        let _ = id;
        Ok(SubmitLease::none())
    }

    /// Whether a submit of `id` is in progress (its lease is held, by this process or
    /// another sharing the store); `None` when this store cannot tell (callers then
    /// wait longer before they settle a record).
    fn submit_in_progress(&self, id: &JobId) -> Result<Option<bool>> {
        let _ = id;
        Ok(None)
    }
}

/// A held submit lease (see [`RecordStore::submit_lease`]); released on drop.
pub struct SubmitLease {
    _held: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl SubmitLease {
    /// A lease that marks nothing (stores that cannot tell).
    pub fn none() -> Self {
        SubmitLease { _held: None }
    }

    /// A lease that holds `guard` until it is dropped.
    pub fn holding(guard: impl std::any::Any + Send + Sync) -> Self {
        SubmitLease {
            _held: Some(Box::new(guard)),
        }
    }
}

impl fmt::Debug for SubmitLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubmitLease")
            .field("held", &self._held.is_some())
            .finish()
    }
}

/// How [`claim_retry`] went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryClaim {
    /// `next` now holds the claim: submit it.
    Won,
    /// Another record already retries `previous`: follow it, submit nothing.
    Taken(JobId),
}

/// Claim the retry of `previous` for the record `next` (already opened), under
/// `previous`'s lock: the first claim wins and is kept in
/// [`JobRecord::retried_as`]; every later claim, from this process or another sharing
/// the store, sees the winner.
pub fn claim_retry(store: &dyn RecordStore, previous: &JobId, next: &JobId) -> Result<RetryClaim> {
    let mut winner: Option<JobId> = None;
    store.update(previous, &mut |record| {
        match &record.retried_as {
            Some(existing) if existing != next => winner = Some(existing.clone()),
            _ => record.retried_as = Some(next.clone()),
        }
        Ok(())
    })?;
    Ok(match winner {
        Some(other) => RetryClaim::Taken(other),
        None => RetryClaim::Won,
    })
}

#[allow(dead_code)]
fn _record_store_is_object_safe(_: &dyn RecordStore) {}

/// Apply `mark` to `record` (shared by the stores). Returns whether anything changed.
pub(crate) fn apply_mark(
    record: &mut JobRecord,
    mark: Mark,
    redactor: Option<&SecretRegistry>,
) -> Result<bool> {
    if record.is_array() {
        return apply_array_mark(record, mark, redactor);
    }
    if mark.err_class.is_some() && mark.state != JobState::Error {
        return Err(Error::invalid(
            "err_class",
            format!(
                "only an ERROR mark carries an error class, not {}",
                mark.state
            ),
        ));
    }
    let outcome = JobState::check_transition_for(record.id.as_str(), record.state, mark.state)?;
    let now = Utc::now();
    match outcome {
        TransitionOutcome::Apply => {
            if record.state == JobState::Submitting {
                // The submit is settled now (or ended): no note of why it was not.
                record.unsettled = None;
            }
            record.state = mark.state;
            if let Some(r) = mark.backend_ref {
                record.backend_ref = Some(r);
            }
            if let Some(c) = mark.err_class {
                record.err_class = Some(c);
            }
            if let Some(nodes) = mark.nodes.filter(|n| !n.is_empty()) {
                record.nodes = nodes;
            }
            record.node_fault = mark.node_fault;
            let message = mark
                .message
                .map(|m| redactor.map_or_else(|| m.clone(), |r| r.redact(&m)));
            record.history.push(Transition {
                at: now,
                state: mark.state,
                source: mark.source,
                message,
            });
            record.updated_at = now;
            Ok(true)
        }
        TransitionOutcome::NoOp => {
            let mut changed = false;
            if record.backend_ref.is_none() && mark.backend_ref.is_some() {
                record.backend_ref = mark.backend_ref;
                changed = true;
            }
            if record.err_class.is_none() && mark.err_class.is_some() {
                record.err_class = mark.err_class;
                changed = true;
            }
            if changed {
                record.updated_at = now;
            }
            Ok(changed)
        }
        TransitionOutcome::Ignore => Ok(false),
    }
}

/// [`apply_mark`] for an array: the task changes (or the mark's state for every task
/// not ended), then the array's state derived from its tasks, through the state machine.
fn apply_array_mark(
    record: &mut JobRecord,
    mark: Mark,
    redactor: Option<&SecretRegistry>,
) -> Result<bool> {
    let now = Utc::now();
    let redact = |m: String| redactor.map_or_else(|| m.clone(), |r| r.redact(&m));
    let mut changed = false;
    if mark.tasks.is_empty() {
        let task_mark = TaskMark {
            state: mark.state,
            err_class: mark.err_class,
            message: mark.message.clone().map(redact),
            nodes: None,
            node_fault: mark.node_fault,
        };
        for task in record.tasks.values_mut() {
            if !task.state.is_terminal() {
                changed |= tasks::apply_task(task, &task_mark, now);
            }
        }
    } else {
        for (index, task_mark) in mark.tasks {
            if task_mark.err_class.is_some() && task_mark.state != JobState::Error {
                return Err(Error::invalid(
                    "err_class",
                    format!("task {index}: only an ERROR carries an error class"),
                ));
            }
            let mut task_mark = task_mark;
            task_mark.message = task_mark.message.map(redact);
            if let Some(task) = record.tasks.get_mut(&index) {
                changed |= tasks::apply_task(task, &task_mark, now);
            }
        }
    }
    if record.backend_ref.is_none() && mark.backend_ref.is_some() {
        record.backend_ref = mark.backend_ref;
        changed = true;
    }
    let (state, class) = derive_state(&record.tasks);
    match JobState::check_transition_for(record.id.as_str(), record.state, state)? {
        TransitionOutcome::Apply => {
            record.state = state;
            record.err_class = class;
            let summary = summary(&record.tasks);
            let message = match mark.message {
                Some(m) if state.is_terminal() || mark.source != TransitionSource::Poll => {
                    format!("{}; {summary}", redact(m))
                }
                _ => summary,
            };
            record.history.push(Transition {
                at: now,
                state,
                source: mark.source,
                message: Some(message),
            });
            changed = true;
        }
        TransitionOutcome::NoOp => {
            if record.err_class != class {
                record.err_class = class;
                changed = true;
            }
        }
        TransitionOutcome::Ignore => {}
    }
    if changed {
        record.updated_at = now;
    }
    Ok(changed)
}

/// Run `change` on a copy of `record`, refusing changes to the id, state, history or schema.
pub(crate) fn apply_update(
    record: &JobRecord,
    change: &mut dyn FnMut(&mut JobRecord) -> Result<()>,
) -> Result<JobRecord> {
    let mut next = record.clone();
    change(&mut next)?;
    if next.id != record.id {
        return Err(Error::invalid(
            "id",
            "a record's id cannot change; open a new record",
        ));
    }
    if next.state != record.state || next.history != record.history || next.tasks != record.tasks {
        return Err(Error::invalid(
            "state",
            "update cannot change the state or history; use mark",
        ));
    }
    if next.schema_version != record.schema_version {
        return Err(Error::invalid(
            "schema_version",
            "update cannot change the schema version",
        ));
    }
    next.updated_at = Utc::now();
    Ok(next)
}

#[cfg(test)]
mod tests;
