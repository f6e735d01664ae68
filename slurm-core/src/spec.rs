//! The job spec users write (YAML or JSON), its validation, the defaults and limits, and the resolved [`Resources`].
//!
//! ```yaml
//! name: hello                 # label, part of the record id
//! command: "python train.py"  # run by bash -c inside the job (inside the container when image is set)
//! image: /lustre/images/pytorch.sqsh
//! nodes: 1
//! gpus_per_node: 4
//! cpus_per_task: 16
//! time: "04:00:00"            # Slurm's forms: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
//! partition: gpu              # optional; defaults from SLURM_PARTITION
//! env: {EPOCHS: "10"}         # plain values
//! secrets: [HF_TOKEN]         # names only; values come from the submitting process's environment
//! mounts: ["lustre:///data/train:/data"]
//! requeue: true
//! ```
//!
//! Further keys: `account`, `gpus` (total), `memory` (`64G`), `child_timeout`
//! (a wall-time form), `datasets` (storage URIs), `supporting_files`, `code` (a local
//! directory sent with the job: `./src` or `{path, exclude, allow_dirty}`),
//! `extra_sbatch` (options such as `--qos=high`), `extra_env`, `labels`
//! (`{arch: ..., action: ...}`), `completion_check` (`exit_code` or
//! `status_json`), `allow_registry_image`, `force_reconvert_latest` (convert a
//! `:latest` image again on this submit), `nccl_probe` (`auto`, `always` or `never`:
//! whether a multi-GPU job is preceded by the NCCL probe), `resume` (`{max_restarts:
//! 10, signal: USR2, warn_before: "00:02:00", checkpoints: "ckpt/*.pt"}`: a run longer
//! than the wall, continued segment after segment; see [`ResumeSpec`]), and for pipelines and sweeps `after`
//! (`[train-a1b2c3, prep-00ff11:any]`: records to wait for), `array`
//! (`{size: 8, max_parallel: 2}` or `{indices: "0-3,8"}`) and `sweep` (`{LR: [0.1,
//! 0.01], BATCH: [32, 64]}`, a grid, or a list of points). Unknown keys are an error.
//!
//! # Resolving GPUs and nodes ([`JobSpec::resolve`])
//! - `gpus_per_node` given: that many per node (at most the per-node maximum);
//!   `nodes` given or derived from `gpus`; `gpus`, if given, must equal nodes x per node.
//! - only `gpus` given: at or above the per-node maximum the job takes whole
//!   exclusive nodes, `nodes = gpus / max` (16 at 8 per node = 2 nodes), and a
//!   total that does not divide evenly is refused; below it, `nodes` (default 1)
//!   must divide `gpus` evenly.
//! - neither: the default GPUs (4) per node on `nodes` nodes (default 1).
//! - a job is exclusive when it uses the per-node maximum on each node.
//!
//! The child timeout (the `timeout` the job's command runs under) defaults to 95%
//! of the wall time, in whole seconds: 13680 s (3.8 h) for the default 4 h, 57 s for
//! a one-minute smoke test; it is always strictly below the wall time.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::image::ImageRef;
use crate::storage::{MountSpec, StorageUri};
use crate::{Error, Result};

mod after;
mod array;
mod code;
mod probe;
mod resume;
mod roles;
mod validate;
mod wall_time;

use crate::id::JobId;
use crate::names::{validate_safe_name, validate_shell_name};
pub use after::{Dependency, DependencyCondition, DependencyVerdict};
pub(crate) use array::{ArrayPlan, MAX_TASKS};
pub use array::{ArraySpec, Scalar, Sweep, TaskSet};
pub use code::CodeSpec;
pub use probe::NcclProbe;
pub use resume::{ResumeSignal, ResumeSpec, RESTART_COUNT_VAR, RESUME_FROM_VAR};
pub(crate) use resume::{BUDGET_USED_UP_EXIT, REQUEUE_REFUSED_EXIT, WARNING_CARRIER};
pub(crate) use roles::ResolvedRole;
pub use roles::{role_env_name, role_host_var, role_hosts_var, RoleSpec, ROLE_RANK_VAR, ROLE_VAR};
pub(crate) use validate::normalise_sbatch_line;
pub use validate::validate_sbatch_line;
pub(crate) use validate::{first_duplicate, validate_memory, validate_partition};
pub use wall_time::WallTime;

/// How slurm-run decides that a COMPLETED job really succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompletionCheck {
    /// The exit code of the command (0 is success). The default.
    #[default]
    ExitCode,
    /// A `status.json` in the results folder saying success (the TAO convention).
    StatusJson,
}

/// A job as the user describes it. Secret values are never part of a spec:
/// `secrets` holds names only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// A label; part of the record id and the SLURM job name.
    pub name: String,
    /// The command, run by `bash -c` inside the job (inside the container when `image` is set);
    /// empty in a multi-role job (each role has its own).
    #[serde(default)]
    pub command: String,
    /// The container image (`.sqsh` path or registry reference), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Allow a registry image to reach a GPU job (Pyxis then pulls inside the allocation).
    #[serde(default, skip_serializing_if = "is_false")]
    pub allow_registry_image: bool,
    /// Convert a floating registry image (`:latest`, or no tag) again on this submit
    /// although a converted `.sqsh` is there; without it the `.sqsh` is reused.
    #[serde(default, skip_serializing_if = "is_false")]
    pub force_reconvert_latest: bool,
    /// Container mounts, `SRC[:DST[:FLAGS]]`, SRC a URI or absolute path.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<String>,
    /// Plain environment values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Names of secrets whose values come from the submitting process's environment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// Datasets on shared storage (storage URIs), checked before submit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub datasets: Vec<String>,
    /// Local files to stage next to the job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub supporting_files: Vec<String>,
    /// A local directory sent with the job, content-addressed, read-only at
    /// `SLURM_RUN_CODE_DIR` (see [`CodeSpec`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<CodeSpec>,
    /// The partition (or a comma list); defaults from SLURM_PARTITION.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// The account; defaults from SLURM_ACCOUNT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// Number of nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u32>,
    /// Total GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    /// GPUs per node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_per_node: Option<u32>,
    /// CPUs per task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus_per_task: Option<u32>,
    /// Memory per node in Slurm's form (`64G`, `7200M`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// Wall time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<WallTime>,
    /// The child timeout (a wall-time form), strictly below the wall time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_timeout: Option<WallTime>,
    /// Let SLURM requeue the job after a node failure or preemption (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue: Option<bool>,
    /// Extra sbatch options, one per entry (`--qos=high`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_sbatch: Vec<String>,
    /// Extra environment (cluster knobs such as `NCCL_P2P_DISABLE`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra_env: BTreeMap<String, String>,
    /// Labels (`arch`, `action`, ...); `arch` and `action` name the record id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// How success is decided.
    #[serde(default, skip_serializing_if = "is_default_check")]
    pub completion_check: CompletionCheck,
    /// The records this job waits for, `ID` (after success) or `ID:ok|any|notok|start`;
    /// the scheduler enforces the wait.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<Dependency>,
    /// Run as an array of tasks: a size or index list, and a maximum in parallel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<ArraySpec>,
    /// Named parameter values, one point per task (an array of as many tasks, unless
    /// `array` picks some of them); each task sees its values in its environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<Sweep>,
    /// Whether the NCCL probe runs first (`auto`, `always`, `never`; also written
    /// `probe:`); unset: the submit's option, by default the configuration's.
    #[serde(default, alias = "probe", skip_serializing_if = "Option::is_none")]
    pub nccl_probe: Option<NcclProbe>,
    /// The roles of a multi-role job by name (a controller, policy trainers, rollout
    /// workers; a server and its clients): each runs its own command on nodes of its own,
    /// or `on` another role's first node, all launched at once as one job. Empty for a
    /// single job.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub roles: BTreeMap<String, RoleSpec>,
    /// Continue the run across wall times and preemptions (see [`ResumeSpec`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<ResumeSpec>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_default_check(c: &CompletionCheck) -> bool {
    *c == CompletionCheck::ExitCode
}

/// Hard limits of the target partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// The longest wall time allowed (the reference's partitions: 4 h); `None` when the
    /// partition has no limit (MaxTime=UNLIMITED): the spec's time is taken as it is.
    pub max_wall: Option<WallTime>,
    /// GPUs on one node (8); at or above it a job takes whole exclusive nodes.
    pub max_gpus_per_node: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_wall: Some(WallTime::from_hours(4)),
            max_gpus_per_node: 8,
        }
    }
}

/// What a spec falls back to, and the limits it must respect. `Default` is the reference's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecDefaults {
    /// The partition's limits.
    pub limits: Limits,
    /// Nodes (1).
    pub nodes: u32,
    /// GPUs per node when the spec says nothing (4).
    pub gpus_per_node: u32,
    /// CPUs per task (16).
    pub cpus_per_task: u32,
    /// Wall time (4 h).
    pub wall: WallTime,
    /// Partition (from SLURM_PARTITION).
    pub partition: Option<String>,
    /// Account (from SLURM_ACCOUNT).
    pub account: Option<String>,
    /// Requeue (true).
    pub requeue: bool,
}

impl Default for SpecDefaults {
    fn default() -> Self {
        SpecDefaults {
            limits: Limits::default(),
            nodes: 1,
            gpus_per_node: 4,
            cpus_per_task: 16,
            wall: WallTime::from_hours(4),
            partition: None,
            account: None,
            requeue: true,
        }
    }
}

impl SpecDefaults {
    /// The reference defaults with this partition.
    pub fn with_partition(mut self, partition: impl Into<String>) -> Self {
        self.partition = Some(partition.into());
        self
    }

    /// The reference defaults with this account.
    pub fn with_account(mut self, account: impl Into<String>) -> Self {
        self.account = Some(account.into());
        self
    }
}

/// What a spec asks of the scheduler, every default applied and every limit checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    /// Nodes.
    pub nodes: u32,
    /// GPUs on each node.
    pub gpus_per_node: u32,
    /// GPUs in total (`nodes * gpus_per_node`).
    pub gpus: u32,
    /// Whether the job takes whole nodes (`--exclusive`).
    pub exclusive: bool,
    /// CPUs per task.
    pub cpus_per_task: u32,
    /// Memory per node, if set.
    pub memory: Option<String>,
    /// Wall time.
    pub wall: WallTime,
    /// The child timeout in seconds, strictly below the wall time.
    pub child_timeout_secs: u64,
    /// The partition, if any.
    pub partition: Option<String>,
    /// The account, if any.
    pub account: Option<String>,
    /// `--requeue` (true) or `--no-requeue`.
    pub requeue: bool,
}

impl JobSpec {
    /// A minimal spec: a name and a command, everything else default.
    pub fn new(name: impl Into<String>, command: impl Into<String>) -> Self {
        JobSpec {
            name: name.into(),
            command: command.into(),
            image: None,
            allow_registry_image: false,
            force_reconvert_latest: false,
            mounts: Vec::new(),
            env: BTreeMap::new(),
            secrets: Vec::new(),
            datasets: Vec::new(),
            supporting_files: Vec::new(),
            code: None,
            partition: None,
            account: None,
            nodes: None,
            gpus: None,
            gpus_per_node: None,
            cpus_per_task: None,
            memory: None,
            time: None,
            child_timeout: None,
            requeue: None,
            extra_sbatch: Vec::new(),
            extra_env: BTreeMap::new(),
            labels: BTreeMap::new(),
            completion_check: CompletionCheck::ExitCode,
            after: Vec::new(),
            array: None,
            sweep: None,
            nccl_probe: None,
            roles: BTreeMap::new(),
            resume: None,
        }
    }

    /// Read and validate a YAML spec.
    pub fn from_yaml_str(text: &str) -> Result<Self> {
        let spec: JobSpec =
            serde_yaml_ng::from_str(text).map_err(|e| serde_error(&e.to_string()))?;
        spec.validate()?;
        Ok(spec)
    }

    /// Read and validate a JSON spec.
    pub fn from_json_str(text: &str) -> Result<Self> {
        let spec: JobSpec = serde_json::from_str(text).map_err(|e| serde_error(&e.to_string()))?;
        spec.validate()?;
        Ok(spec)
    }

    /// Read and validate a spec file: `.yaml` / `.yml` as YAML, `.json` as JSON.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        let yaml = match ext.as_deref() {
            Some("yaml") | Some("yml") => true,
            Some("json") => false,
            _ => {
                return Err(Error::invalid(
                    "spec path",
                    format!("{}: name the file .yaml, .yml or .json", path.display()),
                ))
            }
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::io(format!("reading spec {}", path.display()), e))?;
        if yaml {
            Self::from_yaml_str(&text)
        } else {
            Self::from_json_str(&text)
        }
    }

    /// Check everything that does not depend on the defaults: names, command,
    /// env and secret names, image, mounts, datasets, sbatch lines, labels.
    pub fn validate(&self) -> Result<()> {
        validate_safe_name("name", &self.name)?;
        self.validate_roles()?;
        if self.is_multi_role() && self.resume.is_some() {
            return Err(Error::invalid(
                "resume",
                "a multi-role job cannot be continued across wall times yet (the multirole template has no signal trap or requeue); remove the resume block, or run the long-running role as a job of its own with resume",
            ));
        }
        if self.command.is_empty() && !self.is_multi_role() {
            // As serde said it before `command` had a default (a multi-role job has none).
            return Err(Error::invalid(
                "command",
                "missing field `command`: give the command to run, e.g. python train.py (or the job's `roles`)",
            ));
        }
        if self.command.trim().is_empty() && !self.is_multi_role() {
            return Err(Error::invalid(
                "command",
                "empty; give the command to run, e.g. python train.py",
            ));
        }
        if self.command.contains('\0') {
            return Err(Error::invalid("command", "holds a NUL byte; remove it"));
        }
        for (field, map) in [("env", &self.env), ("extra_env", &self.extra_env)] {
            for (k, v) in map {
                validate_shell_name(field, k)?;
                if v.contains('\0') {
                    return Err(Error::invalid(
                        field,
                        format!("the value of {k} holds a NUL byte; remove it"),
                    ));
                }
            }
        }
        for name in &self.secrets {
            validate_shell_name("secrets", name)?;
            if self.env.contains_key(name) || self.extra_env.contains_key(name) {
                return Err(Error::invalid(
                    "secrets",
                    format!("{name} is both a secret and a plain env value; remove it from env (secret values come from the environment)"),
                ));
            }
        }
        if let Some(dup) = first_duplicate(&self.secrets) {
            return Err(Error::invalid(
                "secrets",
                format!("{dup} is listed twice; list it once"),
            ));
        }
        let image = self.image.as_deref().map(ImageRef::parse).transpose()?;
        if self.force_reconvert_latest {
            match image {
                Some(image) if image.is_latest() && !self.allow_registry_image => {}
                Some(image) if image.is_latest() => {
                    return Err(Error::invalid(
                        "force_reconvert_latest",
                        "the image is not converted at all (allow_registry_image is set); drop one of the two",
                    ))
                }
                Some(image) => {
                    return Err(Error::invalid(
                        "force_reconvert_latest",
                        format!("`{image}` is not a floating (`:latest`) registry image, so its .sqsh is never converted again; remove the key, or name the :latest tag"),
                    ))
                }
                None => {
                    return Err(Error::invalid(
                        "force_reconvert_latest",
                        "the spec names no image; remove the key or set `image`",
                    ))
                }
            }
        }
        for m in &self.mounts {
            MountSpec::parse(m)?;
        }
        for d in &self.datasets {
            StorageUri::parse_for("datasets", d)?;
        }
        for f in &self.supporting_files {
            if f.trim().is_empty() || f.contains('\0') || f.contains('\n') {
                return Err(Error::invalid(
                    "supporting_files",
                    "an entry is empty or holds NUL/newline; give a file path",
                ));
            }
        }
        if let Some(code) = &self.code {
            code.validate()?;
        }
        if let Some(p) = &self.partition {
            validate_partition(p)?;
        }
        if let Some(a) = &self.account {
            validate_safe_name("account", a)?;
        }
        if let Some(mem) = &self.memory {
            validate_memory(mem)?;
        }
        for line in &self.extra_sbatch {
            validate_sbatch_line(line)?;
        }
        for (k, v) in &self.labels {
            validate_safe_name("labels", k)?;
            validate_safe_name(&format!("labels.{k}"), v)?;
        }
        if let Some(sweep) = &self.sweep {
            sweep.validate()?;
            for name in sweep.names() {
                if self.env.contains_key(&name)
                    || self.extra_env.contains_key(&name)
                    || self.secrets.contains(&name)
                {
                    return Err(Error::invalid(
                        "sweep",
                        format!("{name} is swept and also set in env, extra_env or secrets; set it in one place"),
                    ));
                }
            }
        }
        self.array_plan()?;
        if let Some(resume) = &self.resume {
            resume.validate()?;
            if self.requeue == Some(false) {
                return Err(Error::invalid(
                    "requeue",
                    "false, but the spec has a resume block, which continues the run by requeueing it; remove `requeue: false` or the resume block",
                ));
            }
            if self.array.is_some() || self.sweep.is_some() {
                return Err(Error::invalid(
                    "resume",
                    "an array or sweep cannot be resumed yet (each task would need its own segments); remove the resume block or run the tasks as single jobs",
                ));
            }
        }
        Ok(())
    }

    /// The tasks of an array or sweep (`None` for a single job): `array.size` or
    /// `array.indices`, or one task per sweep point; with a sweep, `array` may pick some
    /// of its points (`indices`) and set `max_parallel`.
    pub(crate) fn array_plan(&self) -> Result<Option<ArrayPlan>> {
        let points = self.sweep.as_ref().map(|s| s.points().len());
        let Some(array) = self
            .array
            .clone()
            .or_else(|| points.map(|_| ArraySpec::default()))
        else {
            return Ok(None);
        };
        let indices = match (&array.size, &array.indices, points) {
            (Some(_), Some(_), _) => {
                return Err(Error::invalid("array", "give size or indices, not both"))
            }
            (Some(0), None, _) => return Err(Error::invalid("array.size", "must be at least 1")),
            (Some(size), None, Some(n)) if *size as usize != n => {
                return Err(Error::invalid(
                    "array.size",
                    format!(
                    "{size} does not match the sweep's {n} points; drop size (the sweep sets it)"
                ),
                ))
            }
            (Some(size), None, _) if *size as usize > MAX_TASKS => {
                return Err(Error::invalid(
                    "array.size",
                    format!("{size} is more than {MAX_TASKS} tasks; split the array"),
                ))
            }
            (Some(size), None, _) => TaskSet::first(*size),
            (None, Some(indices), Some(n)) => {
                if indices.max().is_some_and(|m| m as usize >= n) {
                    return Err(Error::invalid(
                        "array.indices",
                        format!(
                            "{indices} goes past the sweep's {n} points (0-{}); pick among them",
                            n - 1
                        ),
                    ));
                }
                indices.clone()
            }
            (None, Some(indices), None) => indices.clone(),
            (None, None, Some(n)) => TaskSet::first(n as u32),
            (None, None, None) => {
                return Err(Error::invalid(
                    "array",
                    "give size (tasks 0..size) or indices (e.g. 0-3,8)",
                ))
            }
        };
        if indices.is_empty() {
            return Err(Error::invalid(
                "array.indices",
                "is empty; give at least one task",
            ));
        }
        if array.max_parallel == Some(0) {
            return Err(Error::invalid("array.max_parallel", "must be at least 1"));
        }
        Ok(Some(ArrayPlan {
            indices,
            max_parallel: array.max_parallel,
        }))
    }

    /// This spec waiting also for `after` (a submit's options beside the spec's own).
    pub(crate) fn with_after(&self, after: &[Dependency]) -> JobSpec {
        let mut spec = self.clone();
        for dependency in after {
            if !spec.after.contains(dependency) {
                spec.after.push(dependency.clone());
            }
        }
        spec
    }

    /// This spec narrowed to the array tasks `indices` (a retry of the failed tasks
    /// of an array: the same sweep values for the same indices).
    pub(crate) fn for_tasks(&self, indices: TaskSet) -> JobSpec {
        let mut spec = self.clone();
        let max_parallel = spec.array.as_ref().and_then(|a| a.max_parallel);
        spec.array = Some(ArraySpec {
            size: None,
            indices: Some(indices),
            max_parallel,
        });
        spec
    }

    /// The parameter values task `index` of a sweep gets (`None` without a sweep or
    /// for an index past its points).
    pub(crate) fn sweep_point(&self, index: u32) -> Option<BTreeMap<String, String>> {
        self.sweep
            .as_ref()?
            .points()
            .into_iter()
            .nth(index as usize)
    }

    /// The parsed image, if any.
    pub(crate) fn image_ref(&self) -> Result<Option<ImageRef>> {
        self.image.as_deref().map(ImageRef::parse).transpose()
    }

    /// The parsed mounts.
    pub(crate) fn mount_specs(&self) -> Result<Vec<MountSpec>> {
        self.mounts.iter().map(|m| MountSpec::parse(m)).collect()
    }

    /// The parsed datasets.
    pub(crate) fn dataset_uris(&self) -> Result<Vec<StorageUri>> {
        self.datasets
            .iter()
            .map(|d| StorageUri::parse_for("datasets", d))
            .collect()
    }

    /// The label the record id is minted from: `arch-action` when both labels
    /// are set, else the name.
    pub(crate) fn id_label(&self) -> String {
        match (self.labels.get("arch"), self.labels.get("action")) {
            (Some(arch), Some(action)) => format!("{arch}-{action}"),
            _ => self.name.clone(),
        }
    }

    /// The SHA-256 (hex) of the spec's canonical JSON form (fields in declaration
    /// order, maps sorted). Holds no secret values because the spec holds none.
    pub fn digest(&self) -> String {
        let bytes = serde_json::to_vec(self).expect("a JobSpec always serialises");
        hex::encode(Sha256::digest(&bytes))
    }

    /// Apply the defaults and check the limits (see the module docs). Errors name
    /// the field and the fix. Also refuses a registry image for a GPU job unless
    /// `allow_registry_image` is set.
    pub fn resolve(&self, defaults: &SpecDefaults) -> Result<Resources> {
        self.validate()?;
        let max = defaults.limits.max_gpus_per_node;
        let positive = |field: &str, v: Option<u32>| -> Result<Option<u32>> {
            match v {
                Some(0) => Err(Error::invalid(field, "must be at least 1")),
                other => Ok(other),
            }
        };
        let spec_nodes = positive("nodes", self.nodes)?;
        let (nodes, per_node) = match (self.gpus_per_node, self.gpus) {
            (Some(per), total) => {
                if per > max {
                    return Err(Error::invalid(
                        "gpus_per_node",
                        format!("{per} exceeds the {max} GPUs of a node; set gpus: {per} instead to get whole exclusive nodes, or use at most {max} per node"),
                    ));
                }
                let nodes = match (spec_nodes, total) {
                    (Some(n), _) => n,
                    (None, Some(t)) if per > 0 => {
                        if t % per != 0 {
                            return Err(Error::invalid(
                                "gpus",
                                format!("{t} GPUs do not divide evenly into nodes of {per}; use a multiple of {per}"),
                            ));
                        }
                        (t / per).max(1)
                    }
                    _ => defaults.nodes,
                };
                if let Some(t) = total {
                    if u64::from(t) != u64::from(nodes) * u64::from(per) {
                        return Err(Error::invalid(
                            "gpus",
                            format!("{t} GPUs do not match {nodes} node(s) x {per} per node; drop gpus or make it {}", u64::from(nodes) * u64::from(per)),
                        ));
                    }
                }
                (nodes, per)
            }
            (None, Some(total)) if max > 0 && total >= max => {
                if total % max != 0 {
                    return Err(Error::invalid(
                        "gpus",
                        format!("{total} GPUs do not divide evenly into whole nodes of {max}; use a multiple of {max} (e.g. {}) or fewer than {max} on one node", (u64::from(total / max) + 1) * u64::from(max)),
                    ));
                }
                let derived = total / max;
                if let Some(n) = spec_nodes {
                    if n != derived {
                        return Err(Error::invalid(
                            "nodes",
                            format!("{total} GPUs take {derived} exclusive node(s) of {max}, not {n}; drop nodes or set it to {derived}"),
                        ));
                    }
                }
                (derived, max)
            }
            (None, Some(total)) => {
                let nodes = spec_nodes.unwrap_or(defaults.nodes);
                if total % nodes != 0 {
                    return Err(Error::invalid(
                        "gpus",
                        format!("{total} GPUs do not divide evenly over {nodes} nodes; use a multiple of {nodes} or set gpus_per_node"),
                    ));
                }
                (nodes, total / nodes)
            }
            (None, None) => (
                spec_nodes.unwrap_or(defaults.nodes),
                defaults.gpus_per_node.min(max),
            ),
        };
        if nodes == 0 {
            return Err(Error::invalid("nodes", "must be at least 1"));
        }
        let cpus_per_task =
            positive("cpus_per_task", self.cpus_per_task)?.unwrap_or(defaults.cpus_per_task);
        let wall = self.time.unwrap_or(defaults.wall);
        if wall.as_secs() < 60 {
            return Err(Error::invalid(
                "time",
                "must be at least one minute (e.g. 00:10:00)",
            ));
        }
        if let Some(max_wall) = defaults.limits.max_wall {
            if wall > max_wall {
                return Err(Error::invalid(
                    "time",
                    format!(
                        "{wall} exceeds the partition's maximum {max_wall}; shorten time, or choose a partition with a longer limit (or none)"
                    ),
                ));
            }
        }
        if let Some(resume) = &self.resume {
            resume.check_wall(wall)?;
        }
        let child_timeout_secs = match self.child_timeout {
            Some(ct) => {
                if ct.as_secs() == 0 {
                    return Err(Error::invalid(
                        "child_timeout",
                        "must be at least one second",
                    ));
                }
                if ct >= wall {
                    return Err(Error::invalid(
                        "child_timeout",
                        format!("{ct} must be strictly below the wall time {wall}, so the job can requeue itself; shorten it (default: 95% of the wall)"),
                    ));
                }
                ct.as_secs()
            }
            // At least a minute of wall (checked above): 95% of it is at least 57 s.
            None => wall.as_secs() * 95 / 100,
        };
        let partition = self
            .partition
            .clone()
            .or_else(|| defaults.partition.clone());
        if let Some(p) = &partition {
            validate_partition(p)?;
        }
        let account = self.account.clone().or_else(|| defaults.account.clone());
        let gpus = nodes
            .checked_mul(per_node)
            .ok_or_else(|| Error::invalid("gpus", "too many GPUs"))?;
        Ok(Resources {
            nodes,
            gpus_per_node: per_node,
            gpus,
            exclusive: max > 0 && per_node >= max,
            cpus_per_task,
            memory: self.memory.clone(),
            wall,
            child_timeout_secs,
            partition,
            account,
            // A resumable job continues by requeueing itself.
            requeue: self.resume.is_some() || self.requeue.unwrap_or(defaults.requeue),
        })
    }
}

impl JobId {
    /// Mint an id for `spec` from its labels `arch` and `action` (`arch-action`), else
    /// from its name.
    pub fn mint_for(spec: &JobSpec) -> Self {
        Self::mint(&spec.id_label())
    }
}

/// A serde error as [`Error::Invalid`], naming the unknown or bad field when serde says which.
fn serde_error(message: &str) -> Error {
    let field = ["unknown field `", "missing field `", "duplicate field `"]
        .iter()
        .find_map(|prefix| {
            let start = message.find(prefix)? + prefix.len();
            let end = message[start..].find('`')?;
            Some(message[start..start + end].to_string())
        })
        .or_else(|| {
            // serde_yaml_ng prefixes a bad value with its path: `time: invalid ...`.
            let (path, _) = message.split_once(": ")?;
            (!path.contains(' ')).then(|| path.to_string())
        })
        .unwrap_or_else(|| "spec".to_string());
    let hint = if message.contains("unknown field") {
        " (remove it or fix its spelling)"
    } else {
        ""
    };
    Error::invalid(field, format!("{message}{hint}"))
}

#[cfg(test)]
mod tests;
