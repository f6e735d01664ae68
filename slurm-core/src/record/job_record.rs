//! The [`JobRecord`]: a job as slurm-run remembers it, and the record format's version.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::classify::ErrorClass;

use crate::spec::{CompletionCheck, Dependency, JobSpec};
use crate::state::JobState;
use crate::storage::RemotePath;
use crate::{Error, Result};

use super::{
    BackendRef, JobId, Segment, TaskRecord, Timeline, Transition, TransitionSource, Unsettled,
    Usage,
};

/// The record format written by this version. Version 2 added the array tasks, the
/// dependencies, the nodes and the node exclusions; version 3 made `unsettled` typed
/// ([`Unsettled`]); version 4 added the scheduler's release and the nodes it named as
/// a failure's cause; version 5 a resumable run's segments and restart count; older
/// records read as they are (without those).
pub(crate) const SCHEMA_VERSION: u32 = 5;

/// A job as slurm-run remembers it: what was submitted, where it runs, every state it
/// entered. Read it through its accessors, one per field (a record changes only
/// through a [`RecordStore`](super::RecordStore), by [`Mark`](super::Mark)s the state
/// machine checks). Stored as JSON, one file per record, the fields by these names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    pub(crate) schema_version: u32,
    pub(crate) id: JobId,
    pub(crate) name: String,
    pub(crate) spec_digest: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) container_image: Option<String>,
    #[serde(default)]
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) results_dir: RemotePath,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) backend_ref: Option<BackendRef>,
    pub(crate) state: JobState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) err_class: Option<ErrorClass>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) retry_of: Option<JobId>,
    pub(crate) attempt: u32,
    #[serde(deserialize_with = "super::timestamp::deserialize")]
    pub(crate) submitted_at: DateTime<Utc>,
    #[serde(deserialize_with = "super::timestamp::deserialize")]
    pub(crate) updated_at: DateTime<Utc>,
    #[serde(default)]
    pub(crate) history: Vec<Transition>,
    #[serde(default)]
    pub(crate) completion_check: CompletionCheck,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) after: Vec<Dependency>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) tasks: BTreeMap<u32, TaskRecord>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) roles: BTreeMap<String, TaskRecord>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) nodes: Vec<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) node_fault: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) failed_nodes: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) excluded_nodes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) scheduler_release: Option<String>,
    /// Shared: a spec is half the size of a record, a listing moves its records by the
    /// hundred thousand, and a poll copies each record it reads from a store's cache;
    /// a shared spec is copied by a count. It is never changed once recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) spec: Option<Arc<JobSpec>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) secret_names: Vec<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub(crate) secrets_staged: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) submit_attempts: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) owner_token: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) candidates: Vec<BackendRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) unsettled: Option<Unsettled>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) retried_as: Option<JobId>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) segments: Vec<Segment>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) restarts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) code_commit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) code_dir: Option<String>,
    #[serde(default, skip_serializing_if = "Timeline::is_empty")]
    pub(crate) timeline: Timeline,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) usage: Option<Usage>,
}

/// What a record says: one read accessor per field.
impl JobRecord {
    /// The version of the record format.
    pub fn schema_version(&self) -> u32 {
        self.schema_version
    }

    /// The id (also the job's name on the scheduler).
    pub fn id(&self) -> &JobId {
        &self.id
    }

    /// The spec's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// SHA-256 of the canonical spec ([`JobSpec::digest`]).
    pub fn spec_digest(&self) -> &str {
        &self.spec_digest
    }

    /// The image as the spec asked for it (Pyxis form: a `.sqsh` path, or `registry#image:tag`), if any.
    pub fn image(&self) -> Option<&str> {
        self.image.as_deref()
    }

    /// What `srun --container-image=` received: the converted `.sqsh` of a registry
    /// image (a registry reference here means the pull happened on the GPUs: only with
    /// `allow_registry_image`). `None` in records written before it was kept.
    pub fn container_image(&self) -> Option<&str> {
        self.container_image.as_deref()
    }

    /// The spec's labels.
    pub fn labels(&self) -> &BTreeMap<String, String> {
        &self.labels
    }

    /// The job's results folder on the cluster.
    pub fn results_dir(&self) -> &RemotePath {
        &self.results_dir
    }

    /// The scheduler's job, once submitted.
    pub fn backend_ref(&self) -> Option<&BackendRef> {
        self.backend_ref.as_ref()
    }

    /// The current state.
    pub fn state(&self) -> JobState {
        self.state
    }

    /// Infra or program, for an ERROR.
    pub fn err_class(&self) -> Option<ErrorClass> {
        self.err_class
    }

    /// The record this one retries.
    pub fn retry_of(&self) -> Option<&JobId> {
        self.retry_of.as_ref()
    }

    /// 1 for the first submit, 2 for the first retry, ...
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// When the record was opened.
    pub fn submitted_at(&self) -> DateTime<Utc> {
        self.submitted_at
    }

    /// When the record last changed.
    pub fn updated_at(&self) -> DateTime<Utc> {
        self.updated_at
    }

    /// Every state entered, oldest first.
    pub fn history(&self) -> &[Transition] {
        &self.history
    }

    /// How a COMPLETED job is confirmed (from the spec).
    pub fn completion_check(&self) -> CompletionCheck {
        self.completion_check
    }

    /// The records this job waits for (each pointing at the parent's attempt it follows).
    pub fn after(&self) -> &[Dependency] {
        &self.after
    }

    /// An array's tasks by index, one state each; the record's state is derived from
    /// them (an array ends when its last task ends). Empty for a single job.
    pub fn tasks(&self) -> &BTreeMap<u32, TaskRecord> {
        &self.tasks
    }

    /// A multi-role job's roles by name, one state each (with their nodes); the record's
    /// state is derived from them (the job ends when its last role ends). Empty for a
    /// single job or an array.
    pub fn roles(&self) -> &BTreeMap<String, TaskRecord> {
        &self.roles
    }

    /// The nodes the job runs or ran on (a single job; an array's are per task).
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// Whether the job's failure is tied to its nodes (NODE_FAIL, an Xid, ...): a retry
    /// excludes them.
    pub fn node_fault(&self) -> bool {
        self.node_fault
    }

    /// The nodes the scheduler named as the cause of the job's failure (SLURM's
    /// `FailedNode`, read from Slurm 23.02 on): a retry avoids these rather than every
    /// node the job ran on. Empty when it named none, or the release cannot say.
    pub fn failed_nodes(&self) -> &[String] {
        &self.failed_nodes
    }

    /// The nodes this attempt was kept off (earlier attempts' faulty nodes).
    pub fn excluded_nodes(&self) -> &[String] {
        &self.excluded_nodes
    }

    /// The release of the scheduler the job was submitted to (SLURM: slurmctld's
    /// `SLURM_VERSION`, `24.11.5`), when the backend knew it; `None` in records written
    /// before schema 4.
    pub fn scheduler_release(&self) -> Option<&str> {
        self.scheduler_release.as_deref()
    }

    /// The spec as submitted, kept by the client: a retry submits this copy, never one
    /// read back from the cluster (which the job itself could rewrite). It holds secret
    /// names only, never values.
    pub fn spec(&self) -> Option<&JobSpec> {
        self.spec.as_deref()
    }

    /// The names of the secrets the job receives (never their values): what log
    /// redaction looks up in the viewer's environment.
    pub fn secret_names(&self) -> &[String] {
        &self.secret_names
    }

    /// Whether a secrets sidecar may still be on the cluster's shared storage: set when
    /// one is staged, cleared once its removal is confirmed (the record has ended).
    pub fn secrets_staged(&self) -> bool {
        self.secrets_staged
    }

    /// How many times the scheduler was asked to take this job, each attempt counted
    /// before it is sent (`None`: a record of a backend that does not count them, or
    /// written before they were counted).
    pub fn submit_attempts(&self) -> Option<u32> {
        self.submit_attempts
    }

    /// The scheduler's jobs seen carrying this record's name while its submit was not
    /// settled (every one is kept, for a person and for the next settle).
    pub fn candidates(&self) -> &[BackendRef] {
        &self.candidates
    }

    /// While `SUBMITTING`: why the submit is not settled yet (the outcome was lost and
    /// the scheduler has not answered, or several jobs carry the name).
    pub fn unsettled(&self) -> Option<&Unsettled> {
        self.unsettled.as_ref()
    }

    /// This record's claim on its job's folder on the backend (random, made with the
    /// record): the folder is claimed with it once, exclusively, and every later attempt
    /// and settle checks it, so another store's record of the same id (sharing the
    /// results root) never takes this record's job, attempts or secrets as its own.
    /// `None` for a record made before claims.
    pub fn owner_token(&self) -> Option<&str> {
        self.owner_token.as_deref()
    }

    /// The record that retries this one: claimed once, under the record's lock, so two
    /// watchers (in one process or several) retry a failure once.
    pub fn retried_as(&self) -> Option<&JobId> {
        self.retried_as.as_ref()
    }

    /// The scheduler's times of the job's newest run (submitted, eligible, started,
    /// ended), as accounting told them; empty until it did (it is asked once the job
    /// ended, or when the scheduler requeued it).
    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }

    /// What the job's newest scheduler job used, from accounting (every run of it a
    /// requeue made, its components summed), once it ended; see [`JobRecord::usage_total`]
    /// for the whole record.
    pub fn usage(&self) -> Option<&Usage> {
        self.usage.as_ref()
    }

    /// What the whole record used: its segments summed (a resumed run), or its tasks
    /// (an array), else its job's usage; `None` until accounting told any of it.
    pub fn usage_total(&self) -> Option<Usage> {
        let segments: Vec<&Usage> = self
            .segments
            .iter()
            .filter_map(|s| s.usage.as_ref())
            .collect();
        if !segments.is_empty() {
            let mut total = Usage::sum(segments.iter().copied())?;
            let missing = self
                .segments
                .iter()
                .filter(|s| s.ended_at.is_some() && s.usage.is_none())
                .count();
            if missing > 0 {
                total.notes.push(format!(
                    "{missing} ended segment(s) without accounting figures"
                ));
            }
            return Some(total);
        }
        let tasks: Vec<&Usage> = self
            .tasks
            .values()
            .filter_map(|t| t.usage.as_ref())
            .collect();
        if !tasks.is_empty() {
            return Usage::sum(tasks);
        }
        self.usage.clone()
    }

    /// A resumable run's segments, oldest first: each time the job ran, with its
    /// scheduler job, nodes, start, end and how it ended. Empty for other records.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// How many times a resumable run was continued (after the wall, a preemption or
    /// a node failure): what its command saw as `SLURM_RUN_RESTART_COUNT` in the
    /// latest segment.
    pub fn restarts(&self) -> u32 {
        self.restarts
    }

    /// The git commit of the job's code tree (`code:` in the spec), when it came from a
    /// git work tree; `-dirty` after it when uncommitted changes were sent
    /// (`allow_dirty: true`).
    pub fn code_commit(&self) -> Option<&str> {
        self.code_commit.as_deref()
    }

    /// Where the job's code tree is on the cluster (read-only; the job sees it at
    /// `SLURM_RUN_CODE_DIR`).
    pub fn code_dir(&self) -> Option<&str> {
        self.code_dir.as_deref()
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u32) -> bool {
    *n == 0
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
            roles: spec
                .roles
                .keys()
                .map(|name| (name.clone(), TaskRecord::new(JobState::Submitting, now)))
                .collect(),
            nodes: Vec::new(),
            node_fault: false,
            failed_nodes: Vec::new(),
            excluded_nodes: Vec::new(),
            scheduler_release: None,
            spec: Some(Arc::new(spec.clone())),
            secret_names: spec.secrets.clone(),
            secrets_staged: false,
            submit_attempts: None,
            owner_token: Some(format!("{:032x}", rand::random::<u128>())),
            candidates: Vec::new(),
            unsettled: None,
            retried_as: None,
            segments: Vec::new(),
            restarts: 0,
            code_commit: None,
            code_dir: None,
            timeline: Timeline::default(),
            usage: None,
        })
    }

    /// As an array of the tasks `indices` (each SUBMITTING, like the record).
    pub(crate) fn with_tasks(mut self, indices: impl IntoIterator<Item = u32>) -> Self {
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
    pub(crate) fn check_tasks(&self, tasks: &crate::spec::TaskSet) -> Result<()> {
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

    /// Whether the record is a multi-role job (it has roles).
    pub fn is_multi_role(&self) -> bool {
        !self.roles.is_empty()
    }

    /// Check that `role` is a role of this job (the error names its roles).
    pub(crate) fn check_role(&self, role: &str) -> Result<()> {
        if self.roles.contains_key(role) {
            return Ok(());
        }
        let message = match self.is_multi_role() {
            true => format!(
                "{} has no role `{role}`; its roles are {}",
                self.id,
                self.roles.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
            false => format!("{} is not a multi-role job; it has no roles", self.id),
        };
        Err(Error::invalid("role", message))
    }

    /// The nodes this job's retry must avoid: the exclusions it inherited, and the
    /// nodes of its failures tied to a node (the job's, or its failed tasks'). Of a job
    /// whose failure the scheduler pinned on some of its nodes ([`failed_nodes`]), only
    /// those.
    ///
    /// [`failed_nodes`]: JobRecord::failed_nodes
    pub fn nodes_to_exclude(&self) -> Vec<String> {
        let mut nodes = self.excluded_nodes.clone();
        let mut add = |list: &[String]| {
            for node in list {
                if !nodes.contains(node) {
                    nodes.push(node.clone());
                }
            }
        };
        if self.node_fault && self.failed_nodes.is_empty() {
            add(&self.nodes);
        } else if self.node_fault {
            add(&self.failed_nodes);
        }
        for part in self.tasks.values().chain(self.roles.values()) {
            if part.node_fault && part.state == JobState::Error {
                add(&part.nodes);
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
            return Ok(JobSpec::clone(spec));
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
    pub(crate) fn retrying(mut self, previous: &JobRecord) -> Self {
        self.retry_of = Some(previous.id.clone());
        self.attempt = previous.attempt.saturating_add(1);
        self
    }

    /// Whether the state is terminal.
    pub fn is_terminal(&self) -> bool {
        self.state.is_terminal()
    }
}

/// An array's tasks, told in short.
impl JobRecord {
    /// The task indices grouped by state, as ranges: `[(COMPLETE, "0-1"), (PENDING,
    /// "2-7")]` (empty for a single job).
    pub fn task_groups(&self) -> Vec<(JobState, String)> {
        super::tasks::state_groups(&self.tasks)
    }

    /// `8 tasks: 2 COMPLETE, 2 RUNNING, 4 PENDING` (`0 tasks: ` for a single job).
    pub fn task_summary(&self) -> String {
        super::tasks::summary(&self.tasks)
    }
}
