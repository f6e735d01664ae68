//! Submit exactly once: validate, render, lint, open the record, then stage and `sbatch` in one
//! round trip; whenever the outcome is unknown, settle it by what the cluster says
//! ([`reconcile`](super::reconcile)) before anything is sent again.

use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::backend::SlurmBackend;
use super::depend::dependency_option;
use super::images::{Conversion, Converted};
use super::nccl::{knobs_file, NcclPlan};
use super::parse::{parse_sbatch_parsable, SbatchOutcome};
use super::reconcile::Verdict;
use super::scripts::{SubmitExit, SUBMIT};
use super::SlurmSubmitOptions;
use crate::backend::SubmitOptions;
use crate::dependency::{check_before_submit, follow_retry};
use crate::image::{check_gpu_image, ImageRef};
use crate::names::validate_safe_name;
use crate::nccl::{is_probe_job, KnobSet};
use crate::record::{
    claim_retry, BackendRef, JobId, JobRecord, Mark, RecordStore, RetryClaim, TransitionSource,
};
use crate::redact::SecretRegistry;
use crate::render::{ArrayContext, EnvVar, Renderer, ScriptContext, TemplateKind};
use crate::spec::{
    normalise_sbatch_line, ArrayPlan, Dependency, JobSpec, Limits, Resources, SpecDefaults,
};
use crate::state::JobState;
use crate::storage::RemotePath;
use crate::transport::{shell_quote, Command, Transport};
use crate::{Error, Result};

/// How long one submit round trip may take.
const SUBMIT_TIMEOUT: Duration = Duration::from_secs(120);

/// How long sbatch itself may run on the login node (`timeout` there): an attempt whose
/// answer was lost can still create a job only this long after it began.
const SBATCH_LIMIT: Duration = Duration::from_secs(90);

/// The most sbatch attempts one submit makes (each only after the previous one was
/// settled as "no job" by the scheduler).
const MAX_ATTEMPTS: u32 = 3;

/// How long the settle inside a submit waits for an attempt still running sbatch.
const SUBMIT_FENCE_WAIT: Duration = Duration::from_secs(30);

/// What the submit round trip said.
enum Answer {
    Submitted(BackendRef),
    ImageMissing(String),
    /// Unknown whether sbatch ran: settle.
    Unknown(String),
    /// Nothing ran and trying again may work (the connection failed before sending).
    NotSent(Error),
    /// Nothing ran and trying again will not help now (host key, authentication,
    /// configuration): the attempt never reached the scheduler.
    NeverSent(Error),
    /// A definite refusal (sbatch's, or a check before it); nothing was submitted.
    Refused(Error),
}

/// What a submit adds to the spec's own script: the dependency on the parents still
/// running, the nodes to avoid, and the array.
#[derive(Default)]
pub(super) struct Placement {
    /// Whether the script sources a secrets sidecar.
    pub(super) sidecar: bool,
    pub(super) dependency: Option<String>,
    pub(super) exclude: Vec<String>,
    pub(super) plan: Option<ArrayPlan>,
    /// The NCCL probe the job waits for (and whose knobs it exports).
    pub(super) probe: Option<JobRecord>,
}

/// The sweep file of an array: `case` on the task index, each branch exporting that
/// point's values, quoted once.
fn sweep_file(spec: &JobSpec, plan: &ArrayPlan) -> Result<Option<String>> {
    if spec.sweep.is_none() {
        return Ok(None);
    }
    let mut text = String::from(
        "# The sweep values of each task, by index (written by slurm-run).\ncase \"$SLURM_ARRAY_TASK_ID\" in\n",
    );
    for index in plan.indices.iter() {
        let point = spec.sweep_point(index).unwrap_or_default();
        text.push_str(&format!("  {index})"));
        for (name, value) in &point {
            text.push_str(&format!(" export {name}={};", shell_quote(value)?));
        }
        text.push_str(" ;;\n");
    }
    text.push_str("esac\n");
    Ok(Some(text))
}

/// How a submit loop ended, when it did not submit.
enum Failure {
    /// Nothing was submitted, for certain: the record ends in `state` (ERROR for a
    /// refusal, NOT_SUBMITTED when the request never reached the scheduler).
    Ended { error: Error, state: JobState },
    /// The outcome stays unknown: the record stays SUBMITTING, with the jobs seen.
    Unsettled { error: Error, seen: Vec<BackendRef> },
}

/// Everything prepared before the record is opened.
struct Prepared {
    record: JobRecord,
    payload: Vec<u8>,
    /// The submit script's parameters after the attempt number and time limit: the
    /// image, then the datasets.
    tail: Vec<String>,
    root: String,
    conversion: Option<Conversion>,
    /// What the PENDING mark adds to "sbatch accepted the job" (the probe waited for).
    note: String,
}

impl<T, R, S> SlurmBackend<T, R, S>
where
    T: Transport + 'static,
    R: Renderer + 'static,
    S: RecordStore + 'static,
{
    pub(super) async fn submit_job(
        &self,
        spec: &JobSpec,
        options: SubmitOptions,
        slurm: SlurmSubmitOptions,
    ) -> Result<JobRecord> {
        let spec = &spec.with_after(&options.after);
        spec.validate()?;
        let secrets = collect_secrets(spec, &options)?;
        let previous = match &options.retry_of {
            Some(id) => Some(self.inner.store.get(id)?),
            None => None,
        };
        if let Some(winner) = previous.as_ref().and_then(|p| p.retried_as.clone()) {
            // Another watcher or process already retried it: follow that retry.
            return self.inner.store.get(&winner);
        }
        // The parents: each accepted by the scheduler, able to meet its condition; the
        // scheduler waits for those still running.
        let mut waiting = check_before_submit(&self.inner.store, &spec.after)?;
        let root = self.ensure_ready(spec).await?;
        // What converting the image needs, before anything (an NCCL probe too) is queued.
        if let Some((_, Some(conversion))) = self.container_image(spec, &root)? {
            self.gate_conversion(&conversion).await?;
        }
        let exclude = previous
            .as_ref()
            .map(JobRecord::nodes_to_exclude)
            .unwrap_or_default();
        self.check_exclusions(spec, &exclude, previous.as_ref())?;
        // The cluster's NCCL knobs: cached, or those of a probe the job waits for
        // (on the scheduler: this submit never waits for it).
        let (knobs, probe) = match self.nccl_plan(spec, &slurm).await? {
            NcclPlan::Nothing => (KnobSet::new(), None),
            NcclPlan::Cached(knobs) => (knobs, None),
            NcclPlan::Probe { probe, new } => {
                waiting.extend(check_before_submit(
                    &self.inner.store,
                    &[Dependency::ok(probe.id.clone())],
                )?);
                (KnobSet::new(), Some((*probe, new)))
            }
        };
        let placement = Placement {
            sidecar: !secrets.is_empty(),
            dependency: dependency_option(&waiting)?,
            plan: spec.array_plan()?,
            exclude,
            probe: probe.as_ref().map(|(probe, _)| probe.clone()),
        };
        let prepared =
            match self.prepare(spec, &secrets, &root, previous.as_ref(), &knobs, &placement) {
                Ok(prepared) => prepared,
                Err(error) => {
                    if let Some((probe, true)) = &probe {
                        self.drop_probe(probe).await;
                    }
                    return Err(error);
                }
            };
        let id = prepared.record.id.clone();
        if let Some(previous) = &previous {
            // Retried meanwhile (preflight and rendering take a while): follow that retry.
            if let Some(winner) = self.inner.store.get(&previous.id)?.retried_as {
                return self.inner.store.get(&winner);
            }
        }
        // The lease tells `status` elsewhere not to settle this record while it is submitted.
        let _lease = self.inner.store.submit_lease(&id)?;
        self.inner.store.open(&prepared.record)?;
        self.remember_secrets(&id, &secrets);
        tracing::info!(job = %id, "record opened; submitting");
        if let Some(previous) = &previous {
            if let RetryClaim::Taken(winner) = claim_retry(&self.inner.store, &previous.id, &id)? {
                let _ = self.inner.store.mark(
                    &id,
                    Mark::new(JobState::NotSubmitted, TransitionSource::Agent).message(format!(
                        "not submitted: {winner} already retries {}",
                        previous.id
                    )),
                );
                return self.inner.store.get(&winner);
            }
        }
        match self.submit_once(&id, &prepared).await {
            Ok(record) => Ok(record),
            Err(Failure::Ended { error, state }) => {
                // Nothing was submitted: a probe queued for this job alone goes too.
                if let Some((probe, true)) = &probe {
                    self.drop_probe(probe).await;
                }
                let message = secrets.redact(&error.to_string());
                let _ = self.inner.store.mark(
                    &id,
                    Mark::new(state, TransitionSource::Agent)
                        .message(format!("submit failed: {message}")),
                );
                // Nothing was submitted: the staged secrets go now (or at the next
                // status, if the cluster cannot be reached).
                if prepared.record.secrets_staged {
                    if let Ok(record) = self.inner.store.get(&id) {
                        self.forget_secrets(&[record]).await;
                    }
                }
                Err(error)
            }
            Err(Failure::Unsettled { error, seen }) => {
                let message = secrets.redact(&error.to_string());
                let _ = self.inner.store.update(&id, &mut |record| {
                    for job in &seen {
                        if !record.candidates.contains(job) {
                            record.candidates.push(job.clone());
                        }
                    }
                    record.unsettled = Some(message.clone());
                    Ok(())
                });
                Err(error)
            }
        }
    }

    pub(super) async fn resubmit_job(&self, id: &JobId) -> Result<JobRecord> {
        let previous = self.inner.store.get(id)?;
        if let Some(winner) = &previous.retried_as {
            // Retried once already (by another watcher or process): that retry is the answer.
            return self.inner.store.get(winner);
        }
        if !previous.state.is_terminal() {
            return Err(Error::invalid(
                "id",
                format!(
                    "{id} is {}; only a finished job can be submitted again (cancel it first)",
                    previous.state
                ),
            ));
        }
        // The client's own copy of the spec; the cluster's only for records without
        // one, and then only with the submitted digest.
        let cluster_copy = match previous.spec {
            Some(_) => None,
            None => {
                let spec_path = previous.results_dir.join("specs")?.join("spec.json")?;
                let text = self.inner.transport.read_file(spec_path.as_str()).await?;
                Some(String::from_utf8_lossy(&text).into_owned())
            }
        };
        let mut spec = previous.spec_for_retry(cluster_copy.as_deref())?;
        // An array retries only its failed tasks: a smaller array, linked.
        if let Some(failed) = previous.tasks_to_retry() {
            spec = spec.for_tasks(failed);
        }
        // The secrets' values this backend submitted the failed record with (kept in
        // memory only), else this process's environment.
        let secret_values = self
            .inner
            .submitted_secrets
            .lock()
            .expect("secrets lock")
            .get(id)
            .cloned();
        let record = self
            .submit_job(
                &spec,
                SubmitOptions {
                    retry_of: Some(id.clone()),
                    secret_values,
                    ..SubmitOptions::default()
                },
                self.inner.config.submit.clone(),
            )
            .await?;
        // Dependants of the failed attempt wait for this one instead (on the cluster too).
        let dependants = follow_retry(&self.inner.store, id, &record.id)?;
        if let Err(error) = self.follow_retries(&dependants).await {
            tracing::warn!(job = %record.id, %error, "re-pointing the dependants of a retry failed; the next poll tries again");
        }
        Ok(record)
    }
    /// Refuse a retry whose node exclusions (inherited along its retry chain) leave the
    /// partition too few nodes for the job.
    fn check_exclusions(
        &self,
        spec: &JobSpec,
        exclude: &[String],
        previous: Option<&JobRecord>,
    ) -> Result<()> {
        if exclude.is_empty() {
            return Ok(());
        }
        let needed = self.resources(spec)?.nodes as usize;
        let cache = self.inner.cache.lock().expect("cache lock");
        let partition = spec
            .partition
            .clone()
            .unwrap_or_else(|| self.inner.config.partition.clone());
        let mut nodes: Vec<&String> = Vec::new();
        for name in partition.split(',') {
            match cache.partitions.get(name.trim()) {
                Some(info) if !info.nodes.is_empty() => nodes.extend(&info.nodes),
                _ => return Ok(()), // unknown membership: the scheduler decides
            }
        }
        nodes.sort();
        nodes.dedup();
        let left = nodes.iter().filter(|n| !exclude.contains(n)).count();
        if left < needed {
            let of = previous.map(|p| p.id.to_string()).unwrap_or_default();
            return Err(Error::invalid(
                "excluded_nodes",
                format!(
                    "the retry of {of} must avoid {} (node failures along its retry chain), which leaves {left} of the {} node(s) of partition {partition} for a job that needs {needed}; return the nodes to service (scontrol update nodename=... state=resume) and submit the job afresh, or choose another partition",
                    exclude.join(", "),
                    nodes.len()
                ),
            ));
        }
        Ok(())
    }

    /// Render the script for `spec` as a submit would, without submitting (secrets
    /// are named, never shown: the script only sources the sidecar). Cached NCCL
    /// knobs are applied as a submit would; no probe runs.
    pub async fn render_script(&self, spec: &JobSpec) -> Result<String> {
        spec.validate()?;
        let root = self.ensure_ready(spec).await?;
        let registry = SecretRegistry::new();
        let id = JobId::mint_for(spec);
        let job_dir = root.join(id.as_str())?;
        let knobs = self.cached_knobs_for(spec).await?;
        let placement = Placement {
            sidecar: !spec.secrets.is_empty(),
            plan: spec.array_plan()?,
            ..Placement::default()
        };
        let (context, _) = self.script_context(spec, &id, &job_dir, &root, &knobs, &placement)?;
        let script = self
            .inner
            .renderer
            .render(TemplateKind::for_nodes(context.nodes), &context)?;
        self.inner.renderer.lint(&script, &registry)?;
        Ok(script)
    }

    /// The spec's resources with the backend's defaults and the partition's limits.
    pub(super) fn resources(&self, spec: &JobSpec) -> Result<Resources> {
        let config = &self.inner.config;
        let limits = Limits {
            max_wall: self.max_wall(spec),
            ..Limits::default()
        };
        let mut defaults = SpecDefaults {
            limits,
            ..SpecDefaults::default()
        }
        .with_partition(config.partition.clone());
        if let Some(account) = &config.account {
            defaults = defaults.with_account(account.clone());
        }
        spec.resolve(&defaults)
    }

    /// `knobs` are the cluster's NCCL knobs, added to the extra env after the spec's
    /// own (a name the spec sets in `env` or `extra_env` keeps the spec's value).
    fn script_context(
        &self,
        spec: &JobSpec,
        id: &JobId,
        job_dir: &RemotePath,
        root: &RemotePath,
        knobs: &KnobSet,
        placement: &Placement,
    ) -> Result<(ScriptContext, Option<Conversion>)> {
        let with_sidecar = placement.sidecar;
        let config = &self.inner.config;
        let resources = self.resources(spec)?;

        // A registry image never reaches the GPU job unless the spec opts in: it is
        // converted to a .sqsh first.
        let (image, conversion) = match self.container_image(spec, root)? {
            Some((image, conversion)) => (Some(image), conversion),
            None => (None, None),
        };
        if let Some(final_image) = &image {
            // The invariant this function keeps: what reaches the GPU job is a .sqsh,
            // or a registry image the spec explicitly allowed.
            check_gpu_image(
                &ImageRef::parse(final_image)?,
                resources.gpus,
                spec.allow_registry_image,
            )?;
        }
        // Inside a container the job folder is mounted (at the same path unless
        // configured) and is the working directory.
        let results_dir_in_job = match (&image, &config.container_results_dir) {
            (Some(_), Some(dir)) => dir.clone(),
            _ => job_dir.as_str().to_string(),
        };
        let mut mounts: Vec<String> = Vec::new();
        if image.is_some() {
            mounts.push(format!("{}:{results_dir_in_job}", job_dir.as_str()));
            mounts.extend(config.container_mounts.iter().cloned());
            for mount in spec.mount_specs()? {
                mounts.push(mount.to_pyxis());
            }
        }
        let env_var = |(name, value): (&String, &String)| EnvVar {
            name: name.clone(),
            value: value.clone(),
        };
        let context = ScriptContext {
            job_name: id.as_str().to_string(),
            partition: resources.partition.clone(),
            account: resources.account.clone(),
            nodes: resources.nodes,
            gpus_per_node: resources.gpus_per_node,
            cpus_per_task: resources.cpus_per_task,
            memory: resources.memory.clone(),
            time: resources.wall.to_slurm(),
            child_timeout_secs: resources.child_timeout_secs,
            log_dir: job_dir.join("logs")?.as_str().to_string(),
            results_dir: job_dir.as_str().to_string(),
            results_dir_in_job,
            image,
            container_mounts: mounts,
            command: spec.command.clone(),
            env_file: if with_sidecar {
                Some(
                    job_dir
                        .join("env")?
                        .join(&format!("job_{id}.env"))?
                        .as_str()
                        .to_string(),
                )
            } else {
                None
            },
            env: spec.env.iter().map(env_var).collect(),
            extra_env: spec
                .extra_env
                .iter()
                .chain(knobs.iter().filter(|(name, _)| {
                    !spec.extra_env.contains_key(*name) && !spec.env.contains_key(*name)
                }))
                .map(env_var)
                .collect(),
            requeue: resources.requeue,
            exclusive: resources.exclusive,
            probe: is_probe_job(spec),
            knobs_file: match &placement.probe {
                Some(probe) => Some(knobs_file(probe)?.as_str().to_string()),
                None => None,
            },
            extra_sbatch: spec
                .extra_sbatch
                .iter()
                .map(|line| normalise_sbatch_line(line))
                .collect::<Result<_>>()?,
            dependency: placement.dependency.clone(),
            exclude: placement.exclude.clone(),
            array: match &placement.plan {
                Some(plan) => Some(ArrayContext {
                    tasks: match plan.max_parallel {
                        Some(max) => format!("{}%{max}", plan.indices),
                        None => plan.indices.to_string(),
                    },
                    sweep_file: match spec.sweep {
                        Some(_) => Some(
                            job_dir
                                .join("sweep")?
                                .join("params.sh")?
                                .as_str()
                                .to_string(),
                        ),
                        None => None,
                    },
                }),
                None => None,
            },
        };
        Ok((context, conversion))
    }

    fn prepare(
        &self,
        spec: &JobSpec,
        secrets: &SecretRegistry,
        root: &RemotePath,
        previous: Option<&JobRecord>,
        knobs: &KnobSet,
        placement: &Placement,
    ) -> Result<Prepared> {
        let id = JobId::mint_for(spec);
        let job_dir = root.join(id.as_str())?;
        let (context, conversion) =
            self.script_context(spec, &id, &job_dir, root, knobs, placement)?;
        let script = self
            .inner
            .renderer
            .render(TemplateKind::for_nodes(context.nodes), &context)?;
        self.inner.renderer.lint(&script, secrets)?;

        let mut files: Vec<(String, Vec<u8>, u32)> = vec![
            (
                "specs/spec.json".to_string(),
                serde_json::to_vec_pretty(spec).map_err(|e| Error::parse("spec", e.to_string()))?,
                0o600,
            ),
            (
                format!("sbatch/job_{id}.sbatch"),
                script.into_bytes(),
                0o700,
            ),
        ];
        if let Some(plan) = &placement.plan {
            if let Some(text) = sweep_file(spec, plan)? {
                files.push(("sweep/params.sh".to_string(), text.into_bytes(), 0o600));
            }
        }
        if !secrets.is_empty() {
            let mut sidecar = String::new();
            for (name, value) in secrets.entries() {
                sidecar.push_str(&format!("export {name}={}\n", shell_quote(value)?));
            }
            files.push((format!("env/job_{id}.env"), sidecar.into_bytes(), 0o600));
        }
        let mut seen = std::collections::BTreeSet::new();
        for local in &spec.supporting_files {
            let path = std::path::Path::new(local);
            let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
                Error::invalid("supporting_files", format!("`{local}` has no file name"))
            })?;
            validate_safe_name("supporting_files", name)?;
            if !seen.insert(name.to_string()) {
                return Err(Error::invalid(
                    "supporting_files",
                    format!("two files are named `{name}`; rename one (they share the job's files/ folder)"),
                ));
            }
            let bytes = std::fs::read(path).map_err(|e| {
                Error::invalid(
                    "supporting_files",
                    format!("cannot read `{local}`: {e}; give a readable local file"),
                )
            })?;
            files.push((format!("files/{name}"), bytes, 0o600));
        }
        let payload = build_payload(id.as_str(), &files)?;

        let mut record = JobRecord::new(id.clone(), spec, job_dir.clone())?;
        record.container_image = context.image.clone();
        if let Some(plan) = &placement.plan {
            record = record.with_tasks(plan.indices.iter());
        }
        if let Some(previous) = previous {
            record = record.retrying(previous);
        }
        record.excluded_nodes = placement.exclude.clone();
        record.submit_attempts = Some(1);
        record.secrets_staged = !secrets.is_empty();
        let mut note = String::new();
        if let Some(probe) = &placement.probe {
            record.after.push(Dependency::ok(probe.id.clone()));
            note = format!(
                "; it waits for NCCL probe {} (SLURM job {}) and exports the knobs it finds",
                probe.id,
                probe
                    .backend_ref
                    .as_ref()
                    .map_or("?", |r| r.native_id.as_str())
            );
        }
        let image_param = if conversion.is_some() || spec.image_ref()?.is_some_and(|i| i.is_sqsh())
        {
            context.image.clone().unwrap_or_default()
        } else {
            String::new()
        };
        let mut tail = vec![image_param];
        for uri in spec.dataset_uris()? {
            tail.push(uri.resolve().as_str().to_string());
        }
        Ok(Prepared {
            record,
            payload,
            tail,
            root: root.as_str().to_string(),
            conversion,
            note,
        })
    }

    /// The submit command of attempt `attempt`.
    fn submit_command(&self, id: &JobId, prepared: &Prepared, attempt: u32) -> Command {
        let mut params = vec![
            prepared.root.clone(),
            id.as_str().to_string(),
            attempt.to_string(),
            SBATCH_LIMIT.as_secs().to_string(),
        ];
        params.extend(prepared.tail.iter().cloned());
        SUBMIT
            .command(params)
            .stdin(prepared.payload.clone())
            .timeout(SUBMIT_TIMEOUT)
            .display_as(format!("submit {id}"))
    }

    /// The submit loop: one round trip in the steady state; conversion when the image
    /// is missing; whenever the outcome is unknown, a settle by what the cluster says
    /// before anything is sent again (and a new attempt only once the scheduler said
    /// there is no job).
    async fn submit_once(
        &self,
        id: &JobId,
        prepared: &Prepared,
    ) -> std::result::Result<JobRecord, Failure> {
        let mut attempt = 1u32;
        let mut converted = false;
        let mut accepted = format!("sbatch accepted the job{}", prepared.note);
        // A `:latest` asked anew is converted before the first send.
        if let Some(conversion) = prepared.conversion.as_ref().filter(|c| c.force) {
            match self.convert_image(conversion).await {
                Ok(done) => accepted.push_str(&conversion_note(conversion, &done)),
                Err(error) => {
                    return Err(Failure::Ended {
                        error,
                        state: JobState::Error,
                    })
                }
            }
            converted = true;
        }
        let mut resent_unsent = false;
        // Every failure below comes while no attempt's outcome is unknown (the first
        // attempt, or one sent after a settle said "no job"): it ends the record. Once an
        // outcome is unknown, only the settle decides, and every error there leaves the
        // record SUBMITTING (the job may exist).
        let fail = |error: Error, state: JobState| Failure::Ended { error, state };
        loop {
            let answer = self.send(&self.submit_command(id, prepared, attempt)).await;
            let reason = match answer {
                Answer::Submitted(backend_ref) => {
                    return self
                        .mark_submitted(id, backend_ref, &accepted)
                        .map_err(|error| Failure::Unsettled {
                            error,
                            seen: Vec::new(),
                        })
                }
                Answer::Refused(error) => return Err(fail(error, JobState::Error)),
                Answer::NeverSent(error) => {
                    return Err(fail(error, JobState::NotSubmitted))
                }
                Answer::ImageMissing(detail) => match (&prepared.conversion, converted) {
                    (Some(conversion), false) => {
                        match self.convert_image(conversion).await {
                            Ok(done) => accepted.push_str(&conversion_note(conversion, &done)),
                            Err(error) => return Err(fail(error, JobState::Error)),
                        }
                        converted = true;
                        continue;
                    }
                    _ => {
                        return Err(fail(
                            Error::invalid(
                                "image",
                                format!("{detail}; stage a valid .sqsh image (slurm-run never falls back to pulling a registry image inside the GPU allocation)"),
                            ),
                            JobState::Error,
                        ))
                    }
                },
                Answer::NotSent(error) if !resent_unsent => {
                    tracing::warn!(job = %id, %error, "submit not sent; trying once more");
                    resent_unsent = true;
                    continue;
                }
                Answer::NotSent(error) => {
                    return Err(fail(error, JobState::NotSubmitted))
                }
                Answer::Unknown(reason) => reason,
            };
            tracing::warn!(job = %id, attempt, %reason, "submit outcome unknown; settling it by what the cluster says");
            match self.settle_own(id, &reason).await {
                Ok(record) => return Ok(record),
                Err(SettleOwn::NoJob(why)) if attempt < MAX_ATTEMPTS => {
                    // The scheduler said there is no job, and no earlier attempt can
                    // still make one: one more attempt, counted before it is sent.
                    attempt += 1;
                    let counted = self.inner.store.update(id, &mut |record| {
                        if record.state != JobState::Submitting {
                            return Err(Error::invalid(
                                "state",
                                format!("{id} was settled elsewhere ({})", record.state),
                            ));
                        }
                        record.submit_attempts = Some(attempt);
                        Ok(())
                    });
                    if let Err(error) = counted {
                        return Err(Failure::Unsettled {
                            error,
                            seen: Vec::new(),
                        });
                    }
                    tracing::warn!(job = %id, attempt, %why, "no job after an unknown outcome; sending attempt {attempt}");
                    resent_unsent = false;
                }
                Err(SettleOwn::NoJob(why)) => {
                    return Err(Failure::Ended {
                        error: Error::Remote {
                            command: format!("submit {id}"),
                            status: 0,
                            stderr: format!(
                                "{attempt} attempts had an unknown outcome and the scheduler has no job named {id} ({why}); check the connection and submit again"
                            ),
                            transient: true,
                        },
                        state: JobState::NotSubmitted,
                    })
                }
                Err(SettleOwn::Refused(error)) => {
                    return Err(Failure::Ended {
                        error,
                        state: JobState::Error,
                    })
                }
                Err(SettleOwn::Unsettled { error, seen }) => {
                    return Err(Failure::Unsettled { error, seen })
                }
            }
        }
    }

    /// Settle this submit's own unknown outcome: fence and ask, again until the
    /// configured wait passes while the cluster cannot answer. Adopts the one job that
    /// carries the name; several stop for a person.
    async fn settle_own(
        &self,
        id: &JobId,
        reason: &str,
    ) -> std::result::Result<JobRecord, SettleOwn> {
        let deadline = Instant::now() + self.inner.config.reconcile_wait;
        loop {
            let record = self
                .inner
                .store
                .get(id)
                .map_err(|error| SettleOwn::Unsettled {
                    error,
                    seen: Vec::new(),
                })?;
            let remaining = deadline.saturating_duration_since(Instant::now());
            let wait = remaining.clamp(Duration::from_secs(1), SUBMIT_FENCE_WAIT);
            let settled = self
                .settle_records(std::slice::from_ref(&record), wait)
                .await
                .pop()
                .expect("one answer per record");
            if settled.secrets_removed {
                let _ = self.inner.store.update(id, &mut |r| {
                    r.secrets_staged = false;
                    Ok(())
                });
            }
            match settled.verdict {
                Verdict::Adopt(job) => {
                    return self
                        .mark_submitted(
                            id,
                            job,
                            &format!("adopted after an unknown submit outcome ({reason})"),
                        )
                        .map_err(|error| SettleOwn::Unsettled {
                            error,
                            seen: Vec::new(),
                        })
                }
                Verdict::NoJob(why) => return Err(SettleOwn::NoJob(why)),
                Verdict::Refused(error) => return Err(SettleOwn::Refused(error)),
                Verdict::Several(jobs) => {
                    let ids: Vec<&str> = jobs.iter().map(|r| r.native_id.as_str()).collect();
                    let message = format!(
                        "{} SLURM jobs carry the name {id} ({}); a person must decide which to keep (scancel the others; `cancel` cancels them all)",
                        jobs.len(),
                        ids.join(", ")
                    );
                    return Err(SettleOwn::Unsettled {
                        error: Error::Ambiguous(message),
                        seen: jobs,
                    });
                }
                Verdict::Unsettled { seen, why } => {
                    if Instant::now() >= deadline {
                        return Err(SettleOwn::Unsettled {
                            error: Error::Ambiguous(format!(
                                "the submit of {id} has an unknown outcome ({reason}) and is not settled yet: {why}. The record stays SUBMITTING; `status` settles it once the cluster answers"
                            )),
                            seen,
                        });
                    }
                    if !seen.is_empty() {
                        let _ = self.inner.store.update(id, &mut |r| {
                            for job in &seen {
                                if !r.candidates.contains(job) {
                                    r.candidates.push(job.clone());
                                }
                            }
                            Ok(())
                        });
                    }
                    tracing::warn!(job = %id, %why, "submit not settled yet; asking again");
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
            }
        }
    }

    async fn send(&self, command: &Command) -> Answer {
        let output = match self.inner.transport.run(command).await {
            Ok(output) => output,
            Err(error) if error.may_have_run() => return Answer::Unknown(error.to_string()),
            Err(error) if error.is_transient() => return Answer::NotSent(error),
            // Host key, authentication, configuration: the request never left.
            Err(error) => return Answer::NeverSent(error),
        };
        let stdout = output.stdout_text();
        let stderr = output.stderr_text();
        match SubmitExit::from_status(output.status) {
            Some(SubmitExit::ChecksumMismatch) => Answer::NotSent(Error::Remote {
                command: command.label(),
                status: output.status,
                stderr: format!(
                    "staged files failed their checksum check: {}",
                    stderr.trim()
                ),
                transient: true,
            }),
            Some(SubmitExit::ImageMissing) => Answer::ImageMissing(stderr.trim().to_string()),
            Some(SubmitExit::DatasetsMissing) => Answer::Refused(Error::invalid(
                "datasets",
                format!(
                    "{}; stage the data on shared storage first and give lustre:///absolute/path",
                    stderr.trim()
                ),
            )),
            Some(SubmitExit::NoJobFolder | SubmitExit::UnpackFailed) => {
                Answer::Refused(Error::Remote {
                    command: command.label(),
                    status: output.status,
                    stderr: format!("staging the job folder failed: {}", stderr.trim()),
                    transient: false,
                })
            }
            // The attempt was made before (its answer is on disk) or fenced: settle.
            Some(SubmitExit::Fenced) => Answer::Unknown(stderr.trim().to_string()),
            None => match parse_sbatch_parsable(&stdout, &stderr) {
                Ok(SbatchOutcome::Submitted {
                    job_id, cluster, ..
                }) => Answer::Submitted(BackendRef {
                    native_id: job_id.to_string(),
                    cluster,
                }),
                Ok(SbatchOutcome::Unknown { stderr }) => Answer::Unknown(format!(
                    "sbatch exited {} without a job id: {stderr}",
                    output.status
                )),
                // sbatch ended by itself with its reasons, and the scheduler answered.
                Err(error)
                    if output.status != 0 && output.status < 124 && !error.is_transient() =>
                {
                    Answer::Refused(error)
                }
                Err(error) => Answer::Unknown(error.to_string()),
            },
        }
    }

    fn mark_submitted(
        &self,
        id: &JobId,
        backend_ref: BackendRef,
        message: &str,
    ) -> Result<JobRecord> {
        tracing::info!(job = %id, slurm_job_id = %backend_ref.native_id, "submitted");
        self.inner.store.mark(
            id,
            Mark::new(JobState::Pending, TransitionSource::Agent)
                .message(message)
                .backend_ref(backend_ref),
        )
    }
}

/// What the PENDING mark says of the image a submit converted (or found converted).
fn conversion_note(conversion: &Conversion, converted: &Converted) -> String {
    match converted {
        Converted::ByJob(job) => format!(
            "; image {} converted to {} by SLURM job {job}",
            conversion.image, conversion.path
        ),
        Converted::Present => format!(
            "; image {} found converted at {} (a concurrent submit made it)",
            conversion.image, conversion.path
        ),
    }
}

/// How settling this submit's own unknown outcome went, when it did not adopt a job.
enum SettleOwn {
    NoJob(String),
    Refused(Error),
    Unsettled { error: Error, seen: Vec<BackendRef> },
}

/// The secret values a spec names, from the options or this process's environment.
fn collect_secrets(spec: &JobSpec, options: &SubmitOptions) -> Result<SecretRegistry> {
    let mut registry = SecretRegistry::new();
    for name in &spec.secrets {
        let value = match &options.secret_values {
            Some(values) => values.get(name).cloned(),
            None => std::env::var(name).ok(),
        };
        let value = value.filter(|v| !v.is_empty()).ok_or_else(|| {
            Error::config(
                name.clone(),
                format!("the spec names the secret {name} but it is not set in the submitting environment; export {name}=... (its value travels only in a mode-600 sidecar)"),
            )
        })?;
        if value.contains('\0') || value.contains('\n') {
            return Err(Error::config(
                name.clone(),
                "the secret's value holds a NUL or newline; give a one-line value",
            ));
        }
        if !registry.register(name.clone(), value) {
            return Err(Error::config(
                name.clone(),
                format!(
                    "the secret's value is shorter than {} characters, too short to redact safely",
                    crate::redact::MIN_SECRET_LEN
                ),
            ));
        }
    }
    Ok(registry)
}

/// A tar archive of the job folder `<folder>/`: its `logs/` folder, `files` (path,
/// bytes, mode) and `SHA256SUMS` listing each file by its path inside the folder.
pub(super) fn build_payload(folder: &str, files: &[(String, Vec<u8>, u32)]) -> Result<Vec<u8>> {
    let mut sums = String::new();
    let mut builder = tar::Builder::new(Vec::new());
    let mtime = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let append = |builder: &mut tar::Builder<Vec<u8>>,
                  path: &str,
                  bytes: &[u8],
                  mode: u32,
                  kind: tar::EntryType|
     -> Result<()> {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(mode);
        header.set_mtime(mtime);
        header.set_entry_type(kind);
        builder
            .append_data(&mut header, format!("{folder}/{path}"), bytes)
            .map_err(|e| Error::io(format!("packing {path}"), e))
    };
    append(&mut builder, "logs/", &[], 0o700, tar::EntryType::Directory)?;
    for (path, bytes, mode) in files {
        sums.push_str(&format!("{}  {path}\n", hex::encode(Sha256::digest(bytes))));
        append(&mut builder, path, bytes, *mode, tar::EntryType::Regular)?;
    }
    append(
        &mut builder,
        "SHA256SUMS",
        sums.as_bytes(),
        0o600,
        tar::EntryType::Regular,
    )?;
    builder
        .into_inner()
        .map_err(|e| Error::io("finishing the staging archive", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_lists_every_file_with_its_checksum() {
        let payload =
            build_payload("job-1", &[("a/b.txt".into(), b"hello".to_vec(), 0o600)]).unwrap();
        let mut archive = tar::Archive::new(payload.as_slice());
        let mut names = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let mut text = String::new();
            std::io::Read::read_to_string(&mut entry, &mut text).unwrap();
            names.push((
                entry.path().unwrap().display().to_string(),
                entry.header().mode().unwrap(),
                text,
            ));
        }
        assert_eq!(names[0].0, "job-1/logs/");
        assert_eq!(names[1].0, "job-1/a/b.txt");
        assert_eq!(names[1].1, 0o600);
        assert_eq!(names[2].0, "job-1/SHA256SUMS");
        assert!(names[2].2.starts_with(
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824  a/b.txt"
        ));
    }

    #[test]
    fn a_missing_secret_names_the_variable() {
        let mut spec = JobSpec::new("job", "true");
        spec.secrets = vec!["SLURM_RUN_TEST_SURELY_UNSET".into()];
        let err = collect_secrets(&spec, &SubmitOptions::default()).unwrap_err();
        assert!(
            err.to_string().contains("SLURM_RUN_TEST_SURELY_UNSET"),
            "{err}"
        );
        let options = SubmitOptions {
            secret_values: Some(
                [(
                    "SLURM_RUN_TEST_SURELY_UNSET".to_string(),
                    "s3cr3t-value".to_string(),
                )]
                .into(),
            ),
            ..SubmitOptions::default()
        };
        let registry = collect_secrets(&spec, &options).unwrap();
        assert_eq!(registry.redact("x s3cr3t-value y"), "x [REDACTED] y");
    }
}
