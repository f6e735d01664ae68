//! The SLURM side of the NCCL probe: probe jobs submitted, watched and read like any
//! job, the knob ladder climbed, the cache kept; and the submit hook that adds cached
//! knobs (or probes first) before a job that needs NCCL.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Instant;

use chrono::Utc;

use super::backend::SlurmBackend;
use super::scripts;
use super::SlurmSubmitOptions;
use crate::backend::{JobStatus, LogStream, SubmitOptions};
use crate::nccl::{
    climb, cluster_key, default_ladder, knobs_path, needs_nccl, probe_outcome, probe_spec,
    read_knobs, remove_knobs, show_env, verdict, write_knobs, ClusterKnobs, KnobSet, NcclProbe,
    ProbeAttempt, ProbeOptions, ProbeReport, KNOBS_SCHEMA_VERSION, MARKER_PATTERN, PROBE_LABEL,
};
use crate::record::{JobId, JobRecord, RecordStore};
use crate::render::Renderer;
use crate::spec::{JobSpec, Resources};
use crate::transport::{Command, Transport};
use crate::{Error, Result};

type BoxedSubmit<'a> = Pin<Box<dyn Future<Output = Result<JobRecord>> + Send + 'a>>;

impl<T, R, S> SlurmBackend<T, R, S>
where
    T: Transport + 'static,
    R: Renderer + 'static,
    S: RecordStore + 'static,
{
    /// Run the NCCL probe for jobs like `spec` (its resources, image, mounts and env;
    /// not its command), climbing the knob ladder while the probe hangs, and cache the
    /// first env that passes for this cluster. Always probes, whatever is cached.
    ///
    /// Errors ([`Error::Preflight`], check `nccl probe`) name the outcome that stopped
    /// the ladder and the remedy: BAD (a wrong sum: a fault no knob fixes), FAILED (the
    /// probe could not run), HUNG on every rung (with the env sets tried and the logs).
    /// Nothing is cached then.
    pub async fn probe_nccl(&self, spec: &JobSpec, options: ProbeOptions) -> Result<ProbeReport> {
        spec.validate()?;
        self.ensure_ready(spec).await?;
        let resources = self.resources(spec)?;
        let cluster = self.cluster_name().await?;
        let ladder = options
            .ladder
            .clone()
            .unwrap_or_else(|| default_ladder(&self.inner.config.nccl_socket_ifname));
        if ladder.is_empty() {
            return Err(Error::invalid(
                "ladder",
                "empty; give at least one env set (an empty set probes without knobs)",
            ));
        }
        // Every rung is checked before the first job runs.
        for rung in &ladder {
            probe_spec(spec, &resources, &options, rung)?.validate()?;
        }
        let attempts = climb(&ladder, |rung| {
            self.run_probe(spec, &resources, &options, rung)
        })
        .await?;
        let knobs = verdict(&cluster, &attempts)?;
        let last = attempts.last().expect("a passed ladder has an attempt");
        let entry = ClusterKnobs {
            schema_version: KNOBS_SCHEMA_VERSION,
            cluster: cluster.clone(),
            env: knobs.clone(),
            probed_at: Utc::now(),
            nodes: resources.nodes,
            gpus_per_node: resources.gpus_per_node,
            probe_job: last.job.clone(),
        };
        let cache_file = write_knobs(&self.inner.config.state_dir, &entry)?;
        tracing::info!(%cluster, knobs = %show_env(&knobs), file = %cache_file.display(), "NCCL probe passed; knobs cached");
        Ok(ProbeReport {
            cluster,
            knobs,
            attempts,
            cache_file,
        })
    }

    /// The cluster's name (`ClusterName` of `scontrol show config`), the key of the
    /// knob cache: learnt by preflight, else asked once.
    pub async fn cluster_name(&self) -> Result<String> {
        if let Some(name) = self
            .inner
            .cache
            .lock()
            .expect("cache lock")
            .cluster_name
            .clone()
        {
            return Ok(name);
        }
        let command = scripts::CLUSTER_NAME
            .command(Vec::<String>::new())
            .display_as("scontrol show config (ClusterName)");
        let output = self.inner.transport.run(&command).await?;
        let name = cluster_key(&output.stdout_text());
        self.inner.cache.lock().expect("cache lock").cluster_name = Some(name.clone());
        Ok(name)
    }

    /// The cached NCCL knobs of `cluster` (see [`SlurmBackend::cluster_name`]), if any.
    pub fn knob_cache(&self, cluster: &str) -> Result<Option<ClusterKnobs>> {
        read_knobs(&self.inner.config.state_dir, cluster)
    }

    /// Forget the cached NCCL knobs of `cluster` (the next job that needs NCCL probes
    /// again under [`NcclProbe::Auto`]); whether there were any.
    pub fn clear_knob_cache(&self, cluster: &str) -> Result<bool> {
        remove_knobs(&self.inner.config.state_dir, cluster)
    }

    /// Where the knobs of `cluster` are cached.
    pub fn knob_cache_path(&self, cluster: &str) -> Result<PathBuf> {
        knobs_path(&self.inner.config.state_dir, cluster)
    }

    /// The knobs a submit adds to `spec`'s extra env, probing first when the options
    /// ask for it (see [`NcclProbe`]).
    pub(super) async fn nccl_knobs_for(
        &self,
        spec: &JobSpec,
        options: &SlurmSubmitOptions,
    ) -> Result<KnobSet> {
        if options.nccl_probe == NcclProbe::Never || spec.labels.contains_key(PROBE_LABEL) {
            return Ok(KnobSet::new());
        }
        let resources = self.resources(spec)?;
        if !needs_nccl(&resources) {
            return Ok(KnobSet::new());
        }
        let cluster = self.cluster_name().await?;
        let state_dir = &self.inner.config.state_dir;
        let fresh = |cached: &Option<ClusterKnobs>| match options.nccl_probe {
            NcclProbe::Always => false,
            _ => {
                spec.image.is_none()
                    || cached
                        .as_ref()
                        .is_some_and(|c| c.covers(resources.nodes, resources.gpus_per_node))
            }
        };
        let cached = read_knobs(state_dir, &cluster)?;
        if fresh(&cached) {
            return Ok(cached.map(|c| c.env).unwrap_or_default());
        }
        // One probe at a time: submits that arrive together use the first one's result.
        let _once = self.inner.probe_once.lock().await;
        if options.nccl_probe == NcclProbe::Auto {
            let cached = read_knobs(state_dir, &cluster)?;
            if fresh(&cached) {
                return Ok(cached.map(|c| c.env).unwrap_or_default());
            }
        }
        let report = self.probe_nccl(spec, options.probe.clone()).await?;
        Ok(report.knobs)
    }

    /// The cached knobs a submit would add to `spec` (no probe).
    pub(super) async fn cached_knobs_for(&self, spec: &JobSpec) -> Result<KnobSet> {
        if spec.labels.contains_key(PROBE_LABEL) || !needs_nccl(&self.resources(spec)?) {
            return Ok(KnobSet::new());
        }
        let cluster = self.cluster_name().await?;
        Ok(read_knobs(&self.inner.config.state_dir, &cluster)?
            .map(|c| c.env)
            .unwrap_or_default())
    }

    /// Submit one probe job with `rung`, wait for its end, read its markers.
    async fn run_probe(
        &self,
        spec: &JobSpec,
        resources: &Resources,
        options: &ProbeOptions,
        rung: &KnobSet,
    ) -> Result<ProbeAttempt> {
        let probe = probe_spec(spec, resources, options, rung)?;
        let record = self.submit_probe(&probe).await?;
        let status = self.wait_probe(&record.id, options).await?;
        let log = self.log_path(&status.record, None, LogStream::Out).ok();
        let markers = match &log {
            Some(path) => self.probe_markers(path).await?,
            None => String::new(),
        };
        Ok(ProbeAttempt {
            env: rung.clone(),
            outcome: probe_outcome(status.state(), status.native.as_ref(), &markers),
            job: record.id,
            native_id: status.native_id().map(str::to_string),
            log,
        })
    }

    /// Submit a probe job (never probing itself). A named, boxed future: a submit may
    /// probe, so the submit and probe futures would otherwise contain each other.
    fn submit_probe<'a>(&'a self, probe: &'a JobSpec) -> BoxedSubmit<'a> {
        Box::pin(async move {
            self.submit_job(
                probe,
                SubmitOptions::default(),
                SlurmSubmitOptions {
                    nccl_probe: NcclProbe::Never,
                    ..SlurmSubmitOptions::default()
                },
            )
            .await
        })
    }

    /// Poll the probe `id` until it ends; cancel it after `max_wait`.
    async fn wait_probe(&self, id: &JobId, options: &ProbeOptions) -> Result<JobStatus> {
        let deadline = Instant::now() + options.max_wait;
        loop {
            match self.poll(std::slice::from_ref(id)).await {
                Ok(mut statuses) => {
                    let status = statuses.remove(0);
                    if status.state().is_terminal() {
                        return Ok(status);
                    }
                }
                Err(error) if error.is_transient() => {
                    tracing::warn!(job = %id, %error, "polling the NCCL probe failed; retrying");
                }
                Err(error) => return Err(error),
            }
            if Instant::now() >= deadline {
                let _ = self.cancel_job(id).await;
                return Err(Error::Timeout {
                    what: format!(
                        "NCCL probe {id} (queued or running; cancelled). The partition may be busy: raise ProbeOptions::max_wait, or submit with nccl_probe: Never and set the NCCL knobs in extra_env"
                    ),
                    after: options.max_wait,
                    may_have_run: false,
                });
            }
            tokio::time::sleep(options.poll_interval).await;
        }
    }

    /// The marker lines of a probe's `main.out` (empty when it has none or no log).
    async fn probe_markers(&self, path: &str) -> Result<String> {
        let command = Command::new("grep")
            .args(["-a", "-m", "20", "-E", MARKER_PATTERN, "--"])
            .arg(path)
            .display_as("grep probe markers");
        let output = self.inner.transport.run(&command).await?;
        // 1: no marker; 2: no log (the job never started).
        Ok(if output.status == 0 {
            output.stdout_text()
        } else {
            String::new()
        })
    }
}
