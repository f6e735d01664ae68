//! The SLURM side of the NCCL probe. A submit that needs a probe submits the probe job
//! (the whole knob ladder in its one allocation) and the real job at once, the real job
//! held by the scheduler (`--dependency=afterok:<probe>`) and exporting the knobs the
//! probe writes to its job folder: nobody waits on a queue. When a poll sees a probe
//! end, its verdict is read: a pass is cached, anything else ends the jobs that waited
//! for it with the error that says why. `probe_nccl` runs one probe on demand and waits.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Instant;

use chrono::Utc;

use super::backend::SlurmBackend;
use super::commands;
use super::parse::SlurmJobId;
use super::poll::slurm_job;
use super::scripts;
use super::SlurmSubmitOptions;
use crate::backend::{JobStatus, NativeStatus, SubmitOptions};
use crate::classify::ErrorClass;
use crate::nccl::{
    cluster_key, default_ladder, knobs_path, ladder_outcomes, needs_nccl, parse_shape, probe_spec,
    read_knobs, record_knobs, remove_knobs, show_env, verdict_of, ClusterKnobs, KnobSet, NcclProbe,
    ProbeAttempt, ProbeOptions, ProbeReport, ShapeKnobs, KNOBS_FILE, PROBE_DIR, PROBE_LABEL,
    PROBE_SHAPE_LABEL, PROBE_VERDICT_LABEL, VERDICT_FILE,
};
use crate::record::{JobId, JobRecord, Mark, RecordFilter, RecordStore, TransitionSource};
use crate::render::Renderer;
use crate::spec::{JobSpec, Resources};
use crate::state::JobState;
use crate::storage::RemotePath;
use crate::transport::{round_trip, Command, Transport};
use crate::{Error, Result};

type BoxedSubmit<'a> = Pin<Box<dyn Future<Output = Result<JobRecord>> + Send + 'a>>;

/// What a submit does about NCCL for one job.
pub(super) enum NcclPlan {
    /// Nothing: the job needs no NCCL, or the probe and the cache are off for it.
    Nothing,
    /// The cluster's cached knobs for the job's shape, added to its extra env.
    Cached(KnobSet),
    /// The job waits for this probe and exports the knobs it finds.
    Probe {
        /// The probe's record (PENDING or RUNNING).
        probe: Box<JobRecord>,
        /// Whether this submit submitted it (and so cancels it if the job is refused).
        new: bool,
    },
}

/// Where a probe leaves its knobs for the jobs that wait for it.
pub(super) fn knobs_file(probe: &JobRecord) -> Result<RemotePath> {
    probe.results_dir.join(PROBE_DIR)?.join(KNOBS_FILE)
}

/// The rungs a finished (or running) probe tried, from its verdict file's text.
fn attempts_of(
    record: &JobRecord,
    verdict: &str,
    native: Option<&NativeStatus>,
) -> Vec<ProbeAttempt> {
    ladder_outcomes(verdict, record.state, native)
        .into_iter()
        .enumerate()
        .map(|(index, (env, outcome))| ProbeAttempt {
            env,
            outcome,
            job: record.id.clone(),
            native_id: record.backend_ref.as_ref().map(|r| r.native_id.clone()),
            log: Some(format!(
                "{}/{PROBE_DIR}/rung-{index}.out",
                record.results_dir
            )),
        })
        .collect()
}

/// What the poll learnt from probes that ended: the jobs that waited for a failed
/// probe, now ended, and the SLURM jobs to cancel.
#[derive(Default)]
pub(super) struct Settled {
    pub(super) ended: HashMap<JobId, JobRecord>,
    pub(super) cancels: Vec<(Option<String>, SlurmJobId)>,
}

impl<T, R, S> SlurmBackend<T, R, S>
where
    T: Transport + 'static,
    R: Renderer + 'static,
    S: RecordStore + 'static,
{
    /// Run the NCCL probe for jobs like `spec` (its resources, image, mounts and env;
    /// not its command): one probe job climbing the whole knob ladder in its allocation.
    /// Waits for it (see [`ProbeOptions::max_wait`]) and caches the first env that
    /// passed for this cluster and shape. Always probes, whatever is cached.
    ///
    /// Errors ([`Error::Preflight`], check `nccl probe`) name the outcome that stopped
    /// the ladder and the remedy: BAD (a wrong sum: a fault no knob fixes), FAILED (the
    /// probe could not run, e.g. no torchrun in the image), HUNG on every rung (with
    /// the env sets tried and the rungs' outputs). Nothing is cached then.
    pub async fn probe_nccl(&self, spec: &JobSpec, options: ProbeOptions) -> Result<ProbeReport> {
        spec.validate()?;
        self.ensure_ready(spec).await?;
        let resources = self.resources(spec)?;
        let cluster = self.cluster_name().await?;
        let probe = self.submit_probe(spec, &resources, &options).await?;
        let status = self.wait_probe(&probe.id, &options).await?;
        let verdict = self
            .read_verdicts(std::slice::from_ref(&status.record))
            .await?
            .remove(0);
        let attempts = attempts_of(&status.record, &verdict, status.native.as_ref());
        let knobs = verdict_of(&cluster, &attempts)?;
        // The poll that saw the end cached it already; a second write is harmless.
        let cache_file = self.cache_pass(&cluster, &status.record, &knobs)?;
        Ok(ProbeReport {
            cluster,
            knobs,
            attempts,
            cache_file,
            job: status.record.id,
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

    /// What a submit does about NCCL for `spec` (see [`NcclProbe`]; the spec's
    /// `nccl_probe` wins over the submit's option): nothing, the cached knobs, or a
    /// probe to wait for: one in flight for a covering shape and the same image, or a
    /// new one, submitted here. Never waits for a probe to run.
    pub(super) async fn nccl_plan(
        &self,
        spec: &JobSpec,
        options: &SlurmSubmitOptions,
    ) -> Result<NcclPlan> {
        let mode = spec.nccl_probe.unwrap_or(options.nccl_probe);
        if mode == NcclProbe::Never || spec.labels.contains_key(PROBE_LABEL) {
            return Ok(NcclPlan::Nothing);
        }
        let resources = self.resources(spec)?;
        if !needs_nccl(&resources) {
            return Ok(NcclPlan::Nothing);
        }
        let cluster = self.cluster_name().await?;
        let cached = |backend: &Self| -> Result<Option<KnobSet>> {
            Ok(
                read_knobs(&backend.inner.config.state_dir, &cluster)?.and_then(|k| {
                    k.for_shape(resources.nodes, resources.gpus_per_node)
                        .map(|s| s.env.clone())
                }),
            )
        };
        if mode == NcclProbe::Auto {
            // Without an image there is no container torchrun to probe with.
            if spec.image.is_none() {
                return Ok(NcclPlan::Cached(cached(self)?.unwrap_or_default()));
            }
            if let Some(knobs) = cached(self)? {
                return Ok(NcclPlan::Cached(knobs));
            }
        }
        // One decision at a time: concurrent submits share one probe.
        let _once = self.inner.probe_once.lock().await;
        let in_flight = self.probes_in_flight(spec, &resources).await?;
        if mode == NcclProbe::Auto {
            if let Some(knobs) = cached(self)? {
                return Ok(NcclPlan::Cached(knobs));
            }
        }
        if let Some(probe) = in_flight {
            tracing::info!(job = %spec.name, probe = %probe.id, "waiting for the NCCL probe already in flight");
            return Ok(NcclPlan::Probe {
                probe: Box::new(probe),
                new: false,
            });
        }
        let probe = self.submit_probe(spec, &resources, &options.probe).await?;
        Ok(NcclPlan::Probe {
            probe: Box::new(probe),
            new: true,
        })
    }

    /// A probe not yet ended of the same image at a shape covering `resources`, after a
    /// poll of the candidates (which settles any that ended meanwhile).
    async fn probes_in_flight(
        &self,
        spec: &JobSpec,
        resources: &Resources,
    ) -> Result<Option<JobRecord>> {
        let covers = |record: &JobRecord| {
            let shape = record
                .labels
                .get(PROBE_SHAPE_LABEL)
                .and_then(|l| parse_shape(l));
            record.image == spec.image
                && shape.is_some_and(|(nodes, gpus)| {
                    (resources.nodes <= 1 || nodes >= 2)
                        && (resources.gpus_per_node <= 1 || gpus >= 2)
                })
        };
        let candidates: Vec<JobId> = self
            .inner
            .store
            .list(&RecordFilter::any().label(PROBE_LABEL, "nccl").active())?
            .into_iter()
            .filter(|r| r.backend_ref.is_some() && covers(r))
            .map(|r| r.id)
            .collect();
        if candidates.is_empty() {
            return Ok(None);
        }
        let statuses = self.poll(&candidates).await?;
        Ok(statuses
            .into_iter()
            .map(|s| s.record)
            .find(|r| !r.state.is_terminal()))
    }

    /// The cached knobs a submit would add to `spec` (no probe).
    pub(super) async fn cached_knobs_for(&self, spec: &JobSpec) -> Result<KnobSet> {
        let resources = self.resources(spec)?;
        if spec.nccl_probe == Some(NcclProbe::Never)
            || spec.labels.contains_key(PROBE_LABEL)
            || !needs_nccl(&resources)
        {
            return Ok(KnobSet::new());
        }
        let cluster = self.cluster_name().await?;
        Ok(read_knobs(&self.inner.config.state_dir, &cluster)?
            .and_then(|k| {
                k.for_shape(resources.nodes, resources.gpus_per_node)
                    .map(|s| s.env.clone())
            })
            .unwrap_or_default())
    }

    /// Submit the probe job standing for `spec` (the whole ladder; never probing
    /// itself). A named, boxed future: a submit may probe, so the submit and probe
    /// futures would otherwise contain each other.
    fn submit_probe<'a>(
        &'a self,
        spec: &'a JobSpec,
        resources: &'a Resources,
        options: &'a ProbeOptions,
    ) -> BoxedSubmit<'a> {
        Box::pin(async move {
            let ladder = options
                .ladder
                .clone()
                .unwrap_or_else(|| default_ladder(&self.inner.config.nccl_socket_ifname));
            let probe = probe_spec(spec, resources, options, &ladder)?;
            let record = self
                .submit_job(
                    &probe,
                    SubmitOptions::default(),
                    SlurmSubmitOptions {
                        nccl_probe: NcclProbe::Never,
                        ..SlurmSubmitOptions::default()
                    },
                )
                .await?;
            tracing::info!(probe = %record.id, rungs = ladder.len(), "NCCL probe submitted");
            Ok(record)
        })
    }

    /// Poll the probe `id` until it ends, or until `max_wait` (the probe keeps its place).
    async fn wait_probe(&self, id: &JobId, options: &ProbeOptions) -> Result<JobStatus> {
        let started = Instant::now();
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
            if let Some(max) = options.max_wait {
                if started.elapsed() >= max {
                    return Err(Error::Timeout {
                        what: format!(
                            "NCCL probe {id} (still queued or running; it keeps its place, and its result is cached when a later poll or submit sees it end)"
                        ),
                        after: max,
                        may_have_run: false,
                    });
                }
            }
            tokio::time::sleep(options.poll_interval).await;
        }
    }

    /// The verdict files of `probes` (empty when a probe wrote none), in one round trip.
    async fn read_verdicts(&self, probes: &[JobRecord]) -> Result<Vec<String>> {
        let mut commands = Vec::with_capacity(probes.len());
        for probe in probes {
            let path = probe.results_dir.join(PROBE_DIR)?.join(VERDICT_FILE)?;
            commands.push(Command::new("cat").arg("--").arg(path.as_str()));
        }
        let outputs = match commands.as_slice() {
            [one] => vec![
                self.inner
                    .transport
                    .run(&one.clone().display_as("read the NCCL probe's verdict"))
                    .await?,
            ],
            _ => {
                let joined = round_trip::join(&commands)
                    .display_as(format!("read {} NCCL probe verdicts", commands.len()));
                round_trip::split(&self.inner.transport.run(&joined).await?, commands.len())?
            }
        };
        // cat exits 1 when the file is missing: the probe wrote no verdict.
        Ok(outputs
            .iter()
            .map(|o| {
                if o.success() {
                    o.stdout_text()
                } else {
                    String::new()
                }
            })
            .collect())
    }

    /// Cache a passing probe's knobs for its cluster and shape.
    fn cache_pass(&self, cluster: &str, probe: &JobRecord, knobs: &KnobSet) -> Result<PathBuf> {
        let (nodes, gpus_per_node) = probe
            .labels
            .get(PROBE_SHAPE_LABEL)
            .and_then(|l| parse_shape(l))
            .ok_or_else(|| {
                Error::invalid(
                    "labels",
                    format!("probe {} has no {PROBE_SHAPE_LABEL} label", probe.id),
                )
            })?;
        let path = record_knobs(
            &self.inner.config.state_dir,
            cluster,
            ShapeKnobs {
                env: knobs.clone(),
                probed_at: Utc::now(),
                nodes,
                gpus_per_node,
                probe_job: probe.id.clone(),
            },
        )?;
        tracing::info!(%cluster, probe = %probe.id, knobs = %show_env(knobs), file = %path.display(), "NCCL probe passed; knobs cached");
        Ok(path)
    }

    /// Read the verdict of every probe among `records` that has ended and not been
    /// read yet (one round trip for all): cache a pass; on anything else end the jobs
    /// still waiting for it, ERROR with the error that says why (and the switch that
    /// skips the probe), to be cancelled on the cluster. A failure to read is logged
    /// and tried again by a later poll or submit. `natives` are what this poll saw.
    pub(super) async fn settle_probes(
        &self,
        records: &[&JobRecord],
        natives: &BTreeMap<JobId, NativeStatus>,
    ) -> Settled {
        let mut seen = HashSet::new();
        let ended: Vec<JobRecord> = records
            .iter()
            .filter(|r| {
                r.labels.get(PROBE_LABEL).map(String::as_str) == Some("nccl")
                    && r.state.is_terminal()
                    && !r.labels.contains_key(PROBE_VERDICT_LABEL)
                    && seen.insert(r.id.clone())
            })
            .map(|r| (*r).clone())
            .collect();
        if ended.is_empty() {
            return Settled::default();
        }
        match self.settle(&ended, natives).await {
            Ok(settled) => settled,
            Err(error) => {
                tracing::warn!(%error, "reading the verdict of an NCCL probe failed; a later poll tries again");
                Settled::default()
            }
        }
    }

    async fn settle(
        &self,
        probes: &[JobRecord],
        natives: &BTreeMap<JobId, NativeStatus>,
    ) -> Result<Settled> {
        let store = &self.inner.store;
        let cluster = self.cluster_name().await?;
        let verdicts = self.read_verdicts(probes).await?;
        let mut settled = Settled::default();
        let waiting = store.list(&RecordFilter::any().active())?;
        for (probe, verdict) in probes.iter().zip(&verdicts) {
            let attempts = attempts_of(probe, verdict, natives.get(&probe.id));
            let outcome = attempts
                .last()
                .map_or("FAILED", |a| a.outcome.name())
                .to_string();
            match verdict_of(&cluster, &attempts) {
                Ok(knobs) => {
                    self.cache_pass(&cluster, probe, &knobs)?;
                }
                Err(error) if probe.state == JobState::Complete => {
                    // The ladder exits 0 only after a pass: its jobs may run already.
                    tracing::warn!(probe = %probe.id, %error, "an NCCL probe COMPLETED without a readable pass; nothing cached");
                }
                Err(error) => {
                    // The probe's own class decides: a node failure before the ladder
                    // finished is worth a retry (which probes again), a verdict is not.
                    let finished = verdict.lines().any(|l| l.starts_with("end "));
                    let class = match (probe.err_class, finished) {
                        (Some(ErrorClass::Infra), false) => ErrorClass::Infra,
                        _ => ErrorClass::Program,
                    };
                    let why = match &error {
                        Error::Preflight {
                            message, remedy, ..
                        } => format!("{message}; remedy: {remedy}"),
                        other => other.to_string(),
                    };
                    for job in waiting
                        .iter()
                        .filter(|r| r.after.iter().any(|d| d.job == probe.id))
                    {
                        let message = format!(
                            "the NCCL probe it waited for ended {outcome}: {why}; cancelled on the cluster"
                        );
                        let updated = store.mark(
                            &job.id,
                            Mark::new(JobState::Error, TransitionSource::Poll)
                                .message(message)
                                .err_class(class),
                        )?;
                        if let Some(native) = slurm_job(&updated)? {
                            settled.cancels.push(native);
                        }
                        settled.ended.insert(job.id.clone(), updated);
                    }
                }
            }
            store.update(&probe.id, &mut |record| {
                record
                    .labels
                    .insert(PROBE_VERDICT_LABEL.to_string(), outcome.clone());
                Ok(())
            })?;
        }
        Ok(settled)
    }

    /// Cancel a probe this submit made for a job that was then refused (best effort:
    /// the probe would only refresh the cache).
    pub(super) async fn drop_probe(&self, probe: &JobRecord) {
        if let Some((cluster, id)) = slurm_job(probe).ok().flatten() {
            let command = commands::scancel(id, cluster.as_deref());
            if let Err(error) = self.inner.transport.run(&command).await {
                tracing::warn!(probe = %probe.id, %error, "cancelling the NCCL probe of a refused job failed");
            }
        }
    }
}
