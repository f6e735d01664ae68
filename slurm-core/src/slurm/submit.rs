//! Submit exactly once: validate, render, lint, open the record, then stage and `sbatch` in one
//! round trip; reconcile by job name whenever the outcome is unknown.

use std::time::Duration;

use sha2::{Digest, Sha256};

use super::backend::SlurmBackend;
use super::depend::dependency_option;
use super::images::{Conversion, Converted};
use super::nccl::{knobs_file, NcclPlan};
use super::parse::{parse_sbatch_parsable, SbatchOutcome};
use super::scripts::{SubmitExit, SUBMIT};
use super::SlurmSubmitOptions;
use crate::backend::SubmitOptions;
use crate::dependency::{check_before_submit, follow_retry};
use crate::image::{check_gpu_image, ImageRef};
use crate::names::validate_safe_name;
use crate::nccl::{is_probe_job, KnobSet};
use crate::record::{BackendRef, JobId, JobRecord, Mark, RecordStore, TransitionSource};
use crate::redact::SecretRegistry;
use crate::render::{ArrayContext, EnvVar, Renderer, ScriptContext, TemplateKind};
use crate::spec::{ArrayPlan, Dependency, JobSpec, Limits, Resources, SpecDefaults};
use crate::state::JobState;
use crate::storage::RemotePath;
use crate::transport::{shell_quote, Command, Transport};
use crate::{Error, ErrorKind, Result};

/// How long one submit round trip may take.
const SUBMIT_TIMEOUT: Duration = Duration::from_secs(120);

/// What the submit round trip said.
enum Answer {
    Submitted(BackendRef),
    ImageMissing(String),
    /// Unknown whether sbatch ran: reconcile.
    Unknown(String),
    /// Nothing ran and trying again may work (the connection failed before sending).
    NotSent(Error),
    /// A definite refusal; nothing was submitted.
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

/// Everything prepared before the record is opened.
struct Prepared {
    record: JobRecord,
    payload: Vec<u8>,
    params: Vec<String>,
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
        self.inner.store.open(&prepared.record)?;
        tracing::info!(job = %id, "record opened; submitting");
        match self.submit_once(&id, &prepared).await {
            Ok(record) => Ok(record),
            Err(error) => {
                if let (Some((probe, true)), false) = (&probe, error.kind() == ErrorKind::Ambiguous)
                {
                    self.drop_probe(probe).await;
                }
                // Keep what is known: a refused submit leaves an ERROR record saying why;
                // an ambiguous one stays SUBMITTING for a person to settle.
                if error.kind() != ErrorKind::Ambiguous {
                    let message = secrets.redact(&error.to_string());
                    let _ = self.inner.store.mark(
                        &id,
                        Mark::new(JobState::Error, TransitionSource::Agent)
                            .message(format!("submit failed: {message}")),
                    );
                }
                Err(error)
            }
        }
    }

    pub(super) async fn resubmit_job(&self, id: &JobId) -> Result<JobRecord> {
        let previous = self.inner.store.get(id)?;
        if !previous.state.is_terminal() {
            return Err(Error::invalid(
                "id",
                format!(
                    "{id} is {}; only a finished job can be submitted again (cancel it first)",
                    previous.state
                ),
            ));
        }
        let spec_path = previous.results_dir.join("specs")?.join("spec.json")?;
        let text = self.inner.transport.read_file(spec_path.as_str()).await?;
        let mut spec = JobSpec::from_json_str(&String::from_utf8_lossy(&text))?;
        // An array retries only its failed tasks: a smaller array, linked.
        if let Some(failed) = previous.tasks_to_retry() {
            spec = spec.for_tasks(failed);
        }
        let record = self
            .submit_job(
                &spec,
                SubmitOptions {
                    retry_of: Some(id.clone()),
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
            extra_sbatch: spec.extra_sbatch.clone(),
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
            record = record.retry_of(previous);
        }
        record.excluded_nodes = placement.exclude.clone();
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
        let mut params = vec![
            root.as_str().to_string(),
            id.as_str().to_string(),
            image_param,
        ];
        for uri in spec.dataset_uris()? {
            params.push(uri.resolve().as_str().to_string());
        }
        Ok(Prepared {
            record,
            payload,
            params,
            conversion,
            note,
        })
    }

    /// The submit loop: one round trip in the steady state; conversion when the image
    /// is missing; reconcile by name whenever the outcome is unknown.
    async fn submit_once(&self, id: &JobId, prepared: &Prepared) -> Result<JobRecord> {
        let command = SUBMIT
            .command(prepared.params.clone())
            .stdin(prepared.payload.clone())
            .timeout(SUBMIT_TIMEOUT)
            .display_as(format!("submit {id}"));
        let mut converted = false;
        let mut accepted = format!("sbatch accepted the job{}", prepared.note);
        // A `:latest` asked anew is converted before the first send.
        if let Some(conversion) = prepared.conversion.as_ref().filter(|c| c.force) {
            accepted.push_str(&conversion_note(
                conversion,
                &self.convert_image(conversion).await?,
            ));
            converted = true;
        }
        let mut resent_unsent = false;
        let mut attempted_after_reconcile = false;
        loop {
            let answer = self.send(&command).await;
            let reason = match answer {
                Answer::Submitted(backend_ref) => return self.mark_submitted(id, backend_ref, &accepted),
                Answer::Refused(error) => return Err(error),
                Answer::ImageMissing(detail) => match (&prepared.conversion, converted) {
                    (Some(conversion), false) => {
                        accepted.push_str(&conversion_note(conversion, &self.convert_image(conversion).await?));
                        converted = true;
                        continue;
                    }
                    _ => {
                        return Err(Error::invalid(
                            "image",
                            format!("{detail}; stage a valid .sqsh image (slurm-run never falls back to pulling a registry image inside the GPU allocation)"),
                        ))
                    }
                },
                Answer::NotSent(error) if !resent_unsent => {
                    tracing::warn!(job = %id, %error, "submit not sent; trying once more");
                    resent_unsent = true;
                    continue;
                }
                Answer::NotSent(error) => return Err(error),
                Answer::Unknown(reason) => reason,
            };
            tracing::warn!(job = %id, %reason, "submit outcome unknown; reconciling by job name");
            let found = self.reconcile(id).await?;
            match found.as_slice() {
                [one] => {
                    return self.mark_submitted(id, one.clone(), &format!("adopted after an unknown submit outcome ({reason})"))
                }
                [] if !attempted_after_reconcile => {
                    attempted_after_reconcile = true;
                    continue;
                }
                [] => {
                    return Err(Error::Ambiguous(format!(
                        "the submit of {id} has an unknown outcome twice ({reason}) and no job named {id} exists; check the connection and submit again"
                    )))
                }
                many => {
                    let ids: Vec<&str> = many.iter().map(|r| r.native_id.as_str()).collect();
                    let message = format!(
                        "{} SLURM jobs carry the name {id} ({}); a person must decide which to keep (scancel the others), then mark the record",
                        many.len(),
                        ids.join(", ")
                    );
                    let _ = self.inner.store.mark(
                        id,
                        Mark::new(JobState::Submitting, TransitionSource::Agent).message(message.clone()),
                    );
                    return Err(Error::Ambiguous(message));
                }
            }
        }
    }

    async fn send(&self, command: &Command) -> Answer {
        let output = match self.inner.transport.run(command).await {
            Ok(output) => output,
            Err(error) if error.may_have_run() => return Answer::Unknown(error.to_string()),
            Err(error) if error.is_transient() => return Answer::NotSent(error),
            Err(error) => return Answer::Refused(error),
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
            None => match parse_sbatch_parsable(&stdout, &stderr) {
                Ok(SbatchOutcome::Submitted {
                    job_id, cluster, ..
                }) => Answer::Submitted(BackendRef {
                    native_id: job_id.to_string(),
                    cluster,
                }),
                Ok(SbatchOutcome::Unknown { .. }) if output.status == 0 => {
                    Answer::Unknown("sbatch printed no job id".to_string())
                }
                Ok(SbatchOutcome::Unknown { stderr }) => Answer::Refused(Error::Remote {
                    command: command.label(),
                    status: output.status,
                    stderr,
                    transient: false,
                }),
                Err(error) if error.is_transient() => Answer::Unknown(error.to_string()),
                Err(error) => Answer::Refused(error),
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
fn build_payload(folder: &str, files: &[(String, Vec<u8>, u32)]) -> Result<Vec<u8>> {
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
