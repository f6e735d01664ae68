//! [`SlurmBackend`]: the `Backend` for SLURM over any `Transport`, `Renderer` and
//! `RecordStore`. It owns the parts and hands each operation a [`Context`] over them;
//! every operation lives in its own module.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;

use super::cancel::{cancel, cancel_many, cancel_tasks};
use super::context::code_progress::CodeSent;
use super::context::poll_memo::PollMemo;
use super::context::{Context, ContextOwner, Hooks, Locks};
use super::conversion::CONVERSION_LABEL;
use super::credentials::{
    check_credentials, install_credentials, remove_credentials, CredentialsStatus,
};
use super::exec::{exec, ExecOptions};
use super::facts::ClusterFacts;
use super::forward::{forward, ForwardOptions, JobForward};
use super::images::stage_image;
use super::logs::{follow_logs, logs};
use super::preflight::{cluster_name, preflight};
use super::probe_on_demand::probe_nccl;
use super::resubmit::resubmit;
use super::secrets::SecretMemory;
use super::status::status_many;
use super::submit::{forecast, render_script, submit};
use super::why::why;
use super::{SlurmConfig, SlurmSubmitOptions};
use crate::backend::{
    watch_by_polling, Backend, Forecast, JobStatus, LogOptions, PreflightReport, SubmitOptions,
    WaitAnswer, WatchEvent, WatchOptions,
};
use crate::nccl::{
    knobs_path, read_knobs, remove_knobs, ClusterKnobs, ProbeOptions, ProbeReport, PROBE_LABEL,
};
use crate::record::{AsyncStore, JobId, JobRecord, RecordFilter, RecordStore};
use crate::render::Renderer;
use crate::spec::{JobSpec, TaskSet};
use crate::transport::{OutputSink, Transport};
use crate::Result;

/// The SLURM backend: submits with `sbatch`, observes with `squeue`/`sacct`/`scontrol`,
/// cancels with `scancel`, all through one [`Transport`], rendering scripts with one
/// [`Renderer`] and keeping [`JobRecord`]s in one [`RecordStore`].
///
/// Cheap to clone: clones share the connection, what was learnt of the cluster, and
/// the store.
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
    inner: Arc<Inner<T, R, S>>,
}

/// What the clones of one backend share.
struct Inner<T, R, S> {
    transport: T,
    renderer: R,
    store: Arc<S>,
    /// `store`, as the operations call it.
    records: AsyncStore,
    config: SlurmConfig,
    facts: ClusterFacts,
    secrets: SecretMemory,
    locks: Locks,
    hooks: Hooks,
    memo: PollMemo,
}

impl<T, R, S> ContextOwner for Inner<T, R, S>
where
    T: Transport + 'static,
    R: Renderer + 'static,
    S: RecordStore + 'static,
{
    fn context(&self) -> Context<'_> {
        Context::new(
            &self.transport,
            &self.renderer,
            &self.records,
            &self.config,
            &self.facts,
            &self.secrets,
            &self.locks,
            &self.hooks,
            &self.memo,
        )
    }
}

impl<T, R, S> Clone for SlurmBackend<T, R, S> {
    fn clone(&self) -> Self {
        SlurmBackend {
            inner: Arc::clone(&self.inner),
        }
    }
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
        let store = Arc::new(store);
        let records = AsyncStore::new(Arc::clone(&store) as Arc<dyn RecordStore>);
        SlurmBackend {
            inner: Arc::new(Inner {
                transport,
                renderer,
                store,
                records,
                config,
                facts: ClusterFacts::default(),
                secrets: SecretMemory::default(),
                locks: Locks::default(),
                hooks: Hooks::default(),
                memo: PollMemo::default(),
            }),
        }
    }

    /// The context the operations work with.
    pub(super) fn context(&self) -> Context<'_> {
        self.inner.context()
    }

    /// What the backend learnt of the cluster (tests seed it as a preflight would).
    #[cfg(test)]
    pub(super) fn facts(&self) -> &ClusterFacts {
        &self.inner.facts
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
        submit(&self.context(), spec, options, slurm).await
    }

    /// Render the script for `spec` as a submit would, without submitting (secrets
    /// are named, never shown: the script only sources the sidecar). Cached NCCL
    /// knobs are applied as a submit would; no probe runs.
    pub async fn render_script(&self, spec: &JobSpec) -> Result<String> {
        render_script(&self.context(), spec).await
    }

    /// Make sure `image` is a whole `.sqsh` on shared storage and return its path: a
    /// `.sqsh` path is checked, a registry image is converted once on the CPU partition
    /// (`SLURM_CONVERT_PARTITION`, never the GPU allocation) and reused afterwards. A
    /// failed conversion is an error; there is never a fall back to the registry.
    pub async fn stage_image(&self, image: &str) -> Result<String> {
        stage_image(&self.context(), image).await
    }

    /// Run the NCCL probe for jobs like `spec` (its resources, image, mounts and env;
    /// not its command): one probe job climbing the whole knob ladder in its allocation.
    /// Waits for it (see [`ProbeOptions::max_wait`]) and caches the first env that
    /// passed for this cluster and shape. Always probes, whatever is cached.
    ///
    /// Errors ([`crate::Error::Preflight`], check `nccl probe`) name the outcome that
    /// stopped the ladder and the remedy: BAD (a wrong sum: a fault no knob fixes),
    /// FAILED (the probe could not run, e.g. no torchrun in the image), HUNG on every
    /// rung (with the env sets tried and the rungs' outputs). Nothing is cached then.
    pub async fn probe_nccl(&self, spec: &JobSpec, options: ProbeOptions) -> Result<ProbeReport> {
        probe_nccl(&self.context(), spec, options).await
    }

    /// The cluster's name (`ClusterName` of `scontrol show config`), the key of the
    /// knob cache: learnt by preflight, else asked once.
    pub async fn cluster_name(&self) -> Result<String> {
        cluster_name(&self.context()).await
    }

    /// The cached NCCL knobs of `cluster` (see [`SlurmBackend::cluster_name`]), if any.
    pub fn knob_cache(&self, cluster: &str) -> Result<Option<ClusterKnobs>> {
        read_knobs(&self.inner.config.state_dir, cluster)
    }

    /// Forget the cached NCCL knobs of `cluster` (the next job that needs NCCL probes
    /// again under [`NcclProbe::Auto`](crate::nccl::NcclProbe::Auto)); whether there
    /// were any.
    pub fn clear_knob_cache(&self, cluster: &str) -> Result<bool> {
        remove_knobs(&self.inner.config.state_dir, cluster)
    }

    /// Where the knobs of `cluster` are cached.
    pub fn knob_cache_path(&self, cluster: &str) -> Result<PathBuf> {
        knobs_path(&self.inner.config.state_dir, cluster)
    }

    /// Install enroot credentials for `registry` (`host` or `host:port`) as `user` on the
    /// cluster, once per cluster and user: the lines of its machines
    /// ([`credential_machines`](super::credential_machines)) replace any earlier ones,
    /// every other line is kept, under `umask 077` (mode 600). `password` travels on the
    /// command's stdin only: never in an argv, a log, a record or an error.
    pub async fn install_credentials(
        &self,
        registry: &str,
        user: &str,
        password: &str,
    ) -> Result<CredentialsStatus> {
        install_credentials(&self.context(), registry, user, password).await
    }

    /// Remove the credential lines of `registry`'s machines, keeping every other line.
    pub async fn remove_credentials(&self, registry: &str) -> Result<CredentialsStatus> {
        remove_credentials(&self.context(), registry).await
    }

    /// Call `progress` as a submit sends a code tree (`code:` in the spec): once the
    /// objects the cluster lacks are known, then after each archive sent. Replaces an
    /// earlier callback; shared by the backend's clones.
    pub fn on_code_progress(&self, progress: impl Fn(CodeSent) + Send + Sync + 'static) {
        self.inner.hooks.set_code_progress(Some(Arc::new(progress)));
    }

    /// Forward a local port into running job `id` (see [`ForwardOptions`]): connections
    /// to [`JobForward::local`] reach the port on the job's node, through the transport's
    /// open connection (no new login). A job that is not running, or a node, task or
    /// role it does not have, is refused naming the fix. The forward lasts until the
    /// [`JobForward`] is dropped: watch the job and drop it when the job ends.
    pub async fn forward(&self, id: &JobId, options: &ForwardOptions) -> Result<JobForward> {
        forward(&self.context(), id, options).await
    }

    /// Run a command beside running job `id` (see [`ExecOptions`]): one step that
    /// overlaps its allocation on the chosen node, in the job's container image when it
    /// has one, with the job folder as working directory. Its output goes to `sink` as
    /// it arrives; the answer is its exit status.
    pub async fn exec(&self, id: &JobId, options: &ExecOptions, sink: OutputSink) -> Result<i32> {
        exec(&self.context(), id, options, sink).await
    }

    /// Whether the cluster holds credentials for `registry`, without reading the secret back.
    pub async fn check_credentials(&self, registry: &str) -> Result<CredentialsStatus> {
        check_credentials(&self.context(), registry).await
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
        preflight(&self.context(), spec).await
    }

    async fn submit(&self, spec: &JobSpec, options: SubmitOptions) -> Result<JobRecord> {
        submit(
            &self.context(),
            spec,
            options,
            self.inner.config.submit.clone(),
        )
        .await
    }

    async fn resubmit(&self, id: &JobId) -> Result<JobRecord> {
        resubmit(&self.context(), id).await
    }

    async fn status(&self, id: &JobId) -> Result<JobStatus> {
        let mut all = status_many(&self.context(), std::slice::from_ref(id)).await?;
        Ok(all.remove(0))
    }

    async fn why(&self, ids: &[JobId]) -> Result<Vec<WaitAnswer>> {
        why(&self.context(), ids).await
    }

    async fn forecast(&self, spec: &JobSpec) -> Result<Forecast> {
        forecast(&self.context(), spec).await
    }

    async fn status_many(&self, ids: &[JobId]) -> Result<Vec<JobStatus>> {
        status_many(&self.context(), ids).await
    }

    async fn logs(&self, id: &JobId, options: LogOptions) -> Result<String> {
        logs(&self.context(), id, options).await
    }

    fn follow_logs(
        &self,
        id: &JobId,
        options: LogOptions,
        interval: Duration,
    ) -> BoxStream<'static, Result<String>> {
        let owner: Arc<dyn ContextOwner> = self.inner.clone();
        follow_logs(owner, id.clone(), options, interval)
    }

    async fn cancel(&self, id: &JobId) -> Result<JobRecord> {
        cancel(&self.context(), id).await
    }

    async fn cancel_many(&self, ids: &[JobId]) -> Result<Vec<JobRecord>> {
        cancel_many(&self.context(), ids).await
    }

    async fn cancel_tasks(&self, id: &JobId, tasks: &TaskSet) -> Result<JobRecord> {
        cancel_tasks(&self.context(), id, tasks).await
    }

    fn watch(
        &self,
        ids: &[JobId],
        options: WatchOptions,
    ) -> BoxStream<'static, Result<WatchEvent>> {
        watch_by_polling(self.clone(), ids, options)
    }

    async fn record(&self, id: &JobId) -> Result<JobRecord> {
        self.inner.records.get(id).await
    }

    /// NCCL probe jobs (labelled [`PROBE_LABEL`]) and image conversion jobs (labelled
    /// [`CONVERSION_LABEL`](crate::CONVERSION_LABEL)) are left out unless the filter asks
    /// for that label.
    async fn records(&self, filter: &RecordFilter) -> Result<Vec<JobRecord>> {
        let mut records = self.inner.records.list(filter).await?;
        for label in [PROBE_LABEL, CONVERSION_LABEL] {
            if !filter.labels.contains_key(label) {
                records.retain(|r| !r.labels.contains_key(label));
            }
        }
        Ok(records)
    }
}
