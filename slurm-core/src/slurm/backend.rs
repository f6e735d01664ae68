//! `SlurmBackend`: the `Backend` for SLURM over any `Transport`, `Renderer` and `RecordStore`.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;

use super::{SlurmConfig, SlurmSubmitOptions};
use crate::backend::{
    watch_by_polling, Backend, JobStatus, LogOptions, LogStream, PreflightReport, SubmitOptions,
    WatchEvent, WatchOptions,
};
use crate::nccl::PROBE_LABEL;
use crate::record::{JobId, JobRecord, RecordFilter, RecordStore};
use crate::render::Renderer;
use crate::spec::WallTime;
use crate::spec::{JobSpec, TaskSet};
use crate::storage::RemotePath;
use crate::transport::Transport;
use crate::Result;

/// The SLURM backend: submits with `sbatch`, observes with `squeue`/`sacct`/`scontrol`,
/// cancels with `scancel`, all through one [`Transport`], rendering scripts with one
/// [`Renderer`] and keeping [`JobRecord`]s in one [`RecordStore`].
///
/// Cheap to clone: clones share the connection, the caches and the store.
///
/// ```no_run
/// # async fn demo() -> slurm_core::Result<()> {
/// use std::sync::Arc;
/// use slurm_core::{Backend, SubmitOptions};
/// use slurm_core::{SlurmBackend, SlurmConfig};
/// use slurm_core::{FileRecordStore, JobSpec};
/// # #[derive(Debug)] struct MyRenderer;
/// # impl slurm_core::Renderer for MyRenderer {
/// #   fn render(&self, _: slurm_core::TemplateKind, _: &slurm_core::ScriptContext) -> slurm_core::Result<String> { Ok(String::new()) }
/// #   fn lint(&self, _: &str, _: &slurm_core::SecretRegistry) -> slurm_core::Result<()> { Ok(()) }
/// # }
/// let config = SlurmConfig::from_env()?;
/// let store = FileRecordStore::new(&config.state_dir)?;
/// let transport = slurm_core::LocalTransport::new(); // on the login node itself
/// let backend: Arc<dyn Backend> = Arc::new(SlurmBackend::new(transport, MyRenderer, store, config));
/// let record = backend.submit(&JobSpec::new("hello", "nvidia-smi"), SubmitOptions::default()).await?;
/// println!("{} is {}", record.id(), record.state());
/// # Ok(()) }
/// ```
pub struct SlurmBackend<T, R, S> {
    pub(super) inner: Arc<Inner<T, R, S>>,
}

impl<T, R, S> Clone for SlurmBackend<T, R, S> {
    fn clone(&self) -> Self {
        SlurmBackend {
            inner: Arc::clone(&self.inner),
        }
    }
}

pub(super) struct Inner<T, R, S> {
    pub(super) transport: T,
    pub(super) renderer: R,
    pub(super) store: S,
    pub(super) config: SlurmConfig,
    pub(super) cache: Mutex<Cache>,
    /// Held while the base preflight runs, so concurrent first submits run it once.
    pub(super) preflight_once: tokio::sync::Mutex<()>,
    /// Held while a submit-time NCCL probe runs, so concurrent submits probe once.
    pub(super) probe_once: tokio::sync::Mutex<()>,
    /// The secret values this backend submitted (never stored): logs are redacted of them.
    pub(super) secrets: Mutex<crate::redact::SecretRegistry>,
    /// The same values by record (memory only), for the retries this backend makes.
    pub(super) submitted_secrets: Mutex<HashMap<JobId, std::collections::BTreeMap<String, String>>>,
}

/// A partition as `scontrol show partition` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartitionInfo {
    /// `State=UP`.
    pub(crate) up: bool,
    /// `MaxTime`, `None` for UNLIMITED.
    pub(crate) max_time: Option<WallTime>,
    /// Its nodes (`Nodes=n[1-2]` expanded), for the node-exclusion guard.
    pub(crate) nodes: Vec<String>,
}

/// What the backend learnt of the cluster and keeps for later submits.
#[derive(Debug, Default)]
pub(super) struct Cache {
    /// The results root, resolved on the cluster when not configured.
    pub(super) results_root: Option<RemotePath>,
    /// Partitions seen by preflight.
    pub(super) partitions: HashMap<String, PartitionInfo>,
    /// Whether the static preflight checks (tools, accounting, storage) passed.
    pub(super) base_checked: bool,
    /// Whether Pyxis is installed (`srun --container-image`).
    pub(super) pyxis: Option<bool>,
    /// Whether sacct answers (accounting enabled).
    pub(super) accounting: Option<bool>,
    /// The cluster's `ClusterName` (the key of the NCCL knob cache).
    pub(super) cluster_name: Option<String>,
    /// Registries (their credential machines) and conversion partition whose
    /// conversion checks passed (the submit gate of a conversion).
    pub(super) conversion_ready: HashSet<String>,
}

impl<T, R, S> fmt::Debug for SlurmBackend<T, R, S>
where
    T: fmt::Debug,
    R: fmt::Debug,
    S: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlurmBackend")
            .field("transport", &self.inner.transport)
            .field("renderer", &self.inner.renderer)
            .field("store", &self.inner.store)
            .field("config", &self.inner.config)
            .finish()
    }
}

impl<T, R, S> SlurmBackend<T, R, S>
where
    T: Transport + 'static,
    R: Renderer + 'static,
    S: RecordStore + 'static,
{
    /// A backend over `transport`, rendering with `renderer`, recording in `store`.
    pub fn new(transport: T, renderer: R, store: S, config: SlurmConfig) -> Self {
        SlurmBackend {
            inner: Arc::new(Inner {
                transport,
                renderer,
                store,
                config,
                cache: Mutex::new(Cache::default()),
                preflight_once: tokio::sync::Mutex::new(()),
                probe_once: tokio::sync::Mutex::new(()),
                secrets: Mutex::new(crate::redact::SecretRegistry::new()),
                submitted_secrets: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Remember the values of `secrets` of record `id` (in memory only): for log
    /// redaction, and for a retry of `id` from this backend.
    pub(super) fn remember_secrets(&self, id: &JobId, secrets: &crate::redact::SecretRegistry) {
        if secrets.is_empty() {
            return;
        }
        let mut known = self.inner.secrets.lock().expect("secrets lock");
        for (name, value) in secrets.entries() {
            if !known.entries().any(|(_, v)| v == value) {
                known.register(name, value);
            }
        }
        self.inner
            .submitted_secrets
            .lock()
            .expect("secrets lock")
            .insert(
                id.clone(),
                secrets
                    .entries()
                    .map(|(n, v)| (n.to_string(), v.to_string()))
                    .collect(),
            );
    }

    /// The configuration.
    pub fn config(&self) -> &SlurmConfig {
        &self.inner.config
    }

    /// The transport (for callers that run their own commands on the cluster).
    pub fn transport(&self) -> &T {
        &self.inner.transport
    }

    /// The record store.
    pub fn store(&self) -> &S {
        &self.inner.store
    }

    /// Submit `spec` with SLURM-only options (the NCCL probe) instead of the
    /// configuration's ([`SlurmConfig::submit`]); otherwise as [`Backend::submit`].
    pub async fn submit_with(
        &self,
        spec: &JobSpec,
        options: SubmitOptions,
        slurm: SlurmSubmitOptions,
    ) -> Result<JobRecord> {
        self.submit_job(spec, options, slurm).await
    }
}

#[async_trait]
impl<T, R, S> Backend for SlurmBackend<T, R, S>
where
    T: Transport + 'static,
    R: Renderer + 'static,
    S: RecordStore + 'static,
{
    async fn preflight(&self, spec: Option<&JobSpec>) -> Result<PreflightReport> {
        self.run_preflight(spec).await
    }

    async fn submit(&self, spec: &JobSpec, options: SubmitOptions) -> Result<JobRecord> {
        self.submit_job(spec, options, self.inner.config.submit.clone())
            .await
    }

    async fn resubmit(&self, id: &JobId) -> Result<JobRecord> {
        self.resubmit_job(id).await
    }

    async fn status(&self, id: &JobId) -> Result<JobStatus> {
        let mut all = self.poll(std::slice::from_ref(id)).await?;
        Ok(all.remove(0))
    }

    async fn status_many(&self, ids: &[JobId]) -> Result<Vec<JobStatus>> {
        self.poll(ids).await
    }

    async fn logs(&self, id: &JobId, options: LogOptions) -> Result<String> {
        self.read_logs(id, options).await
    }

    fn follow_logs(
        &self,
        id: &JobId,
        stream: LogStream,
        interval: Duration,
    ) -> BoxStream<'static, Result<String>> {
        self.clone().follow(id.clone(), stream, interval)
    }

    async fn cancel(&self, id: &JobId) -> Result<JobRecord> {
        self.cancel_job(id).await
    }

    async fn cancel_many(&self, ids: &[JobId]) -> Result<Vec<JobRecord>> {
        self.cancel_jobs(ids).await
    }

    async fn cancel_tasks(&self, id: &JobId, tasks: &TaskSet) -> Result<JobRecord> {
        self.cancel_array_tasks(id, tasks).await
    }

    fn watch(
        &self,
        ids: &[JobId],
        options: WatchOptions,
    ) -> BoxStream<'static, Result<WatchEvent>> {
        watch_by_polling(self.clone(), ids, options)
    }

    fn record(&self, id: &JobId) -> Result<JobRecord> {
        self.inner.store.get(id)
    }

    /// NCCL probe jobs (labelled [`PROBE_LABEL`]) are left out unless the filter asks
    /// for that label.
    fn records(&self, filter: &RecordFilter) -> Result<Vec<JobRecord>> {
        let mut records = self.inner.store.list(filter)?;
        if !filter.labels.contains_key(PROBE_LABEL) {
            records.retain(|r| !r.labels.contains_key(PROBE_LABEL));
        }
        Ok(records)
    }
}
