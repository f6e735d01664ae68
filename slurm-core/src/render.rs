//! The `Renderer` seam (how a job becomes a batch script), `ScriptContext`, everything a template may see, and the name rules a renderer checks it with.

use std::fmt;

use serde::Serialize;

use crate::redact::SecretRegistry;
use crate::Result;

mod resume_step;
pub use resume_step::resume_step_command;

/// The domain's one rule for names (job names, partitions, accounts, labels) and the one
/// for shell variable names: a renderer checks its context with these, not rules of
/// its own.
pub use crate::names::{validate_safe_name, validate_shell_name, MAX_NAME_LEN};

/// Which built-in template to render.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TemplateKind {
    /// One node: `singlenode`.
    SingleNode,
    /// Several nodes with the rendezvous block: `multinode`.
    MultiNode,
    /// A multi-role job (`ScriptContext::roles`): roles on their own nodes as components
    /// of a heterogeneous job, roles `on` another as steps on its first node: `multirole`.
    MultiRole,
}

impl TemplateKind {
    /// The template's name, also its file stem in a user template directory.
    pub fn name(self) -> &'static str {
        match self {
            TemplateKind::SingleNode => "singlenode",
            TemplateKind::MultiNode => "multinode",
            TemplateKind::MultiRole => "multirole",
        }
    }

    /// The template a job with `nodes` nodes uses.
    pub(crate) fn for_nodes(nodes: u32) -> Self {
        if nodes > 1 {
            TemplateKind::MultiNode
        } else {
            TemplateKind::SingleNode
        }
    }
}

impl fmt::Display for TemplateKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One environment variable with a plain (non-secret) value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EnvVar {
    /// The name, a valid shell identifier.
    pub name: String,
    /// The value, shell-quoted by the renderer.
    pub value: String,
}

/// Everything a batch script template may see. Typed: no untyped map of strings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScriptContext {
    /// The SLURM job name: the record id.
    pub job_name: String,
    /// `#SBATCH --partition`, when set (a comma list is allowed).
    pub partition: Option<String>,
    /// `#SBATCH --account`, when set.
    pub account: Option<String>,
    /// Node count.
    pub nodes: u32,
    /// GPUs per node (`--gres=gpu:N`); 0 asks for none.
    pub gpus_per_node: u32,
    /// CPUs per task.
    pub cpus_per_task: u32,
    /// `#SBATCH --mem`, when set (Slurm's form, e.g. `64G`).
    pub memory: Option<String>,
    /// Wall time in Slurm's form, e.g. `04:00:00` or `1-00:00:00`.
    pub time: String,
    /// The child command's limit in seconds (`timeout <N>s`), strictly below the wall time.
    pub child_timeout_secs: u64,
    /// Absolute folder holding `<job_name>-<slurm id>/main.out` and `main.err`.
    pub log_dir: String,
    /// Absolute results folder (the job folder), made before launch.
    pub results_dir: String,
    /// The job folder as the command sees it: where it is mounted inside the container
    /// (the same path unless configured), else `results_dir`. The command's working
    /// directory, exported as `SLURM_RUN_RESULTS_DIR` (with `SLURM_RUN_SPEC` and
    /// `SLURM_RUN_FILES_DIR` under it).
    pub results_dir_in_job: String,
    /// The container image as a `.sqsh` path (Pyxis form), or none for a plain `srun`.
    pub image: Option<String>,
    /// Container mounts, each `SRC[:DST[:FLAGS]]` with absolute paths.
    pub container_mounts: Vec<String>,
    /// The command, run by `bash -c` inside the job step.
    pub command: String,
    /// The mode-600 env sidecar the script sources and shreds, or none.
    pub env_file: Option<String>,
    /// Plain environment from the spec.
    pub env: Vec<EnvVar>,
    /// Extra environment, e.g. cluster NCCL knobs.
    pub extra_env: Vec<EnvVar>,
    /// `--requeue` when true, `--no-requeue` when false.
    pub requeue: bool,
    /// `--exclusive` when true.
    pub exclusive: bool,
    /// Raw extra `#SBATCH` lines (without the `#SBATCH` prefix).
    pub extra_sbatch: Vec<String>,
    /// `#SBATCH --dependency` (the scheduler's form, e.g. `afterok:12:13`), when the job
    /// waits for others; the scheduler never kills it for an unsatisfiable one (the
    /// backend decides, after following a retried parent).
    pub dependency: Option<String>,
    /// `#SBATCH --exclude`: nodes the job must not run on (a retry's faulty nodes).
    pub exclude: Vec<String>,
    /// The array, when the job is one.
    pub array: Option<ArrayContext>,
    /// The command is an NCCL probe's knob ladder: it runs in the batch step (on the
    /// first node, outside the container) as `bash -c COMMAND slurm-run-probe
    /// <results_dir>`, and starts one step per rung with `slurm_run_step CMD`, a
    /// function the script defines and exports (CMD on every node, in the container,
    /// as the job's command would run).
    pub probe: bool,
    /// A file of NCCL knobs (`NAME=VALUE` lines) the script exports before the job's
    /// own env (whose values win): what the probe this job waited for found.
    pub knobs_file: Option<String>,
    /// A multi-role job's roles (the template `multirole`): the roles on their own nodes
    /// first, in the order of the heterogeneous job's components, then the roles `on`
    /// another. Empty for a single job.
    pub roles: Vec<RoleContext>,
    /// Whether the roles are components of a heterogeneous job (more than one role has
    /// nodes of its own: `#SBATCH hetjob` between them, `srun --het-group=N`).
    pub heterogeneous: bool,
    /// The folder, in the job folder, where each role's exit status is written as it
    /// ends (`<role>.exit`) and the first role to fail is named (`first-failure`).
    pub roles_dir: Option<String>,
    /// The run continues across wall times and preemptions (`--signal`, the trap, the
    /// requeue within the budget), when the spec asks for it.
    pub resume: Option<ResumeContext>,
}

/// What a resumable job's script needs: the signal before the wall, the budget, where
/// its checkpoints and segments are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResumeContext {
    /// The signal's name without `SIG` (`USR2`): `#SBATCH --signal=B:<signal>@<warn>`.
    pub signal: String,
    /// The signal's number (`12`): a command killed by it exits 128 + it.
    pub signal_number: u8,
    /// The number of the signal the batch script sends the command's step
    /// (`scancel --signal=<carrier>`); each node's step shell passes `signal` on to the
    /// command's process group, so the container runtime's processes never get it.
    pub carrier_number: u8,
    /// How many seconds before the wall the signal comes.
    pub warn_before_secs: u64,
    /// The wall time in seconds (a signal well before `wall - warn` is a preemption's).
    pub wall_secs: u64,
    /// How many times the run may be continued. `SLURM_RUN_RESTART_COUNT` is Slurm's own
    /// count plus `SLURM_RUN_RESTART_BASE` (set by the library on a run continued as a
    /// fresh job: the restarts before it).
    pub max_restarts: u32,
    /// A glob under the job folder whose newest non-empty match is `SLURM_RUN_RESUME_FROM`.
    pub checkpoints: Option<String>,
    /// The file (in the job folder) the script appends one line to per segment that
    /// ends by the wall or a preemption: `<restart count>\t<how>\t<checkpoint>`.
    pub segments_file: String,
    /// The folder (in the job folder) where the command's step notes, on each node,
    /// that the command has started (`<SLURM_NODEID>`, an empty file): a signal that
    /// comes before every node's is there waits for them, since a step shell that is
    /// not yet listening would never pass it on.
    pub ready_dir: String,
    /// The exit status of a job whose budget is used up.
    pub budget_exit: u8,
    /// The exit status of a job whose requeue Slurm refused.
    pub refused_exit: u8,
}

/// One role of a multi-role job, as the template sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RoleContext {
    /// The role's name (`SLURM_RUN_ROLE`), a safe name.
    pub name: String,
    /// `SLURM_RUN_ROLE_<NAME>_HOSTS`: its hosts, comma-separated.
    pub hosts_var: String,
    /// `SLURM_RUN_ROLE_<NAME>_HOST`: its first host.
    pub host_var: String,
    /// Its component of the heterogeneous job (an `on` role: its host role's).
    pub component: u32,
    /// The role it runs beside (on that role's first node), if any.
    pub on: Option<String>,
    /// The `SLURM_RUN_ROLE_<NAME>_HOST` of the role it runs beside.
    pub on_host_var: Option<String>,
    /// Node count (1 for an `on` role).
    pub nodes: u32,
    /// GPUs per node (`--gres=gpu:N` of its component); 0 asks for none.
    pub gpus_per_node: u32,
    /// CPUs per task.
    pub cpus_per_task: u32,
    /// `--mem` of its component, when set.
    pub memory: Option<String>,
    /// `--partition` of its component, when set.
    pub partition: Option<String>,
    /// `--exclusive` for its component.
    pub exclusive: bool,
    /// Its container image as a `.sqsh` path (Pyxis form), or none for a plain `srun`.
    pub image: Option<String>,
    /// Its container mounts, each `SRC[:DST[:FLAGS]]`.
    pub container_mounts: Vec<String>,
    /// Its working directory: the job folder, as its container sees it when it has an image.
    pub workdir: String,
    /// Its command, run by `bash -c` on each of its nodes.
    pub command: String,
    /// Its environment (the job's `env` with its own over it).
    pub env: Vec<EnvVar>,
}

/// What an array job's script needs: its tasks, and the sweep file each task sources.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArrayContext {
    /// `#SBATCH --array` (the scheduler's form, e.g. `0-7%2`).
    pub tasks: String,
    /// A file the script sources, setting the task's sweep values from its index
    /// (`SLURM_ARRAY_TASK_ID`); none without a sweep.
    pub sweep_file: Option<String>,
}

/// One problem the lint found: the line, the rule and the variable, never the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LintFinding {
    /// 1-based line number.
    pub line: usize,
    /// The rule, e.g. `secret-assignment` or `bash-syntax`.
    pub rule: String,
    /// The variable or flag involved, when there is one.
    pub variable: Option<String>,
}

impl fmt::Display for LintFinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.rule)?;
        if let Some(variable) = &self.variable {
            write!(f, " ({variable})")?;
        }
        Ok(())
    }
}

/// Turns a [`ScriptContext`] into a batch script, and refuses scripts that must not be submitted.
pub trait Renderer: Send + Sync + fmt::Debug {
    /// Render the template `kind` with `context`. A missing variable is an error.
    fn render(&self, kind: TemplateKind, context: &ScriptContext) -> Result<String>;

    /// Check a script before submit: the secret scan (values in `secrets`, key blocks,
    /// literal credentials) and a syntax check. `Ok(())` or [`crate::Error::Lint`].
    fn lint(&self, script: &str, secrets: &SecretRegistry) -> Result<()>;
}
