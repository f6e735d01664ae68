//! The batch script of a plan: its [`ScriptContext`] (everything the template sees),
//! rendered and linted (secrets, syntax) by the backend's renderer.

use crate::redact::SecretRegistry;
use crate::render::{
    resume_step_command, ArrayContext, EnvVar, ResumeContext, RoleContext, ScriptContext,
    TemplateKind,
};
use crate::slurm::config::SlurmConfig;
use crate::slurm::context::Context;
use crate::slurm::paths::{
    logs_dir, probe_knobs, resume_ready, resume_segments, sidecar, sweep_file, ROLES_DIR,
};
use crate::spec::{
    role_host_var, role_hosts_var, JobSpec, Resources, BUDGET_USED_UP_EXIT, REQUEUE_REFUSED_EXIT,
    WARNING_CARRIER,
};
use crate::storage::RemotePath;
use crate::Result;

use super::plan::{extra_sbatch_lines, PlannedRole, SubmitPlan};

/// Where the job finds its code tree (`code:` in the spec).
pub(crate) const CODE_DIR_VAR: &str = "SLURM_RUN_CODE_DIR";

/// How a job's steps see its folder: inside a container (`in_container`) the job folder
/// is mounted (at the same path unless configured) and is the working directory, beside
/// the configured and the spec's mounts; without one, the folder itself and no mounts.
/// The batch script's steps and a step beside a running job (exec) see the same.
pub(crate) fn job_view(
    job_dir: &RemotePath,
    in_container: bool,
    config: &SlurmConfig,
    spec: &crate::spec::JobSpec,
    code_dir: Option<&RemotePath>,
) -> Result<(String, Vec<String>)> {
    let results_dir_in_job = match (in_container, &config.container_results_dir) {
        (true, Some(dir)) => dir.clone(),
        _ => job_dir.as_str().to_string(),
    };
    let mut mounts: Vec<String> = Vec::new();
    if in_container {
        mounts.push(format!("{}:{results_dir_in_job}", job_dir.as_str()));
        mounts.extend(config.container_mounts.iter().cloned());
        for mount in spec.mount_specs()? {
            mounts.push(mount.to_pyxis());
        }
        // The code tree, at the same path, read-only.
        if let Some(dir) = code_dir {
            mounts.push(format!("{dir}:{dir}:ro"));
        }
    }
    Ok((results_dir_in_job, mounts))
}

/// The template's view of `plan`. The cluster's NCCL knobs come after the spec's own
/// extra env (a name the spec sets in `env` or `extra_env` keeps the spec's value).
pub(crate) fn script_context(plan: &SubmitPlan, config: &SlurmConfig) -> Result<ScriptContext> {
    let spec = &plan.spec;
    let resources = &plan.resources;
    let job_dir = &plan.job_dir;
    let image = plan.image.as_ref().map(|i| i.container_image.clone());
    let code_dir = plan.code.as_ref().map(|c| &c.dir);
    let (results_dir_in_job, mounts) = job_view(job_dir, image.is_some(), config, spec, code_dir)?;
    let resume = resume_context(spec, resources, job_dir)?;
    let command = step_command(spec, &results_dir_in_job)?;
    let env_var = |(name, value): (&String, &String)| EnvVar {
        name: name.clone(),
        value: value.clone(),
    };
    Ok(ScriptContext {
        job_name: plan.id.as_str().to_string(),
        partition: resources.partition.clone(),
        account: resources.account.clone(),
        nodes: resources.nodes,
        gpus_per_node: resources.gpus_per_node,
        cpus_per_task: resources.cpus_per_task,
        memory: resources.memory.clone(),
        time: resources.wall.to_slurm(),
        child_timeout_secs: resources.child_timeout_secs,
        log_dir: logs_dir(job_dir)?.as_str().to_string(),
        results_dir: job_dir.as_str().to_string(),
        results_dir_in_job,
        image,
        container_mounts: mounts,
        command,
        env_file: match plan.sidecar {
            true => Some(sidecar(job_dir, &plan.id)?.as_str().to_string()),
            false => None,
        },
        env: spec
            .env
            .iter()
            .map(env_var)
            .chain(code_dir.map(|dir| EnvVar {
                name: CODE_DIR_VAR.to_string(),
                value: dir.as_str().to_string(),
            }))
            .collect(),
        extra_env: spec
            .extra_env
            .iter()
            .chain(plan.knobs.iter().filter(|(name, _)| {
                !spec.extra_env.contains_key(*name) && !spec.env.contains_key(*name)
            }))
            .map(env_var)
            .collect(),
        requeue: resources.requeue,
        exclusive: resources.exclusive,
        probe: crate::nccl::is_probe_job(spec),
        knobs_file: match &plan.probe {
            Some(probe) => Some(probe_knobs(probe)?.as_str().to_string()),
            None => None,
        },
        extra_sbatch: extra_sbatch_lines(spec)?,
        resume,
        dependency: plan.dependency.clone(),
        exclude: plan.exclude.clone(),
        array: array_context(plan)?,
        roles: role_contexts(plan, config, &results_dir_in_job_of(plan, config, true))?,
        heterogeneous: plan.roles.iter().filter(|r| r.role.on.is_none()).count() > 1,
        roles_dir: match plan.roles.is_empty() {
            true => None,
            false => Some(job_dir.join(ROLES_DIR)?.as_str().to_string()),
        },
    })
}

/// The template's view of `spec`'s resume (none without one): its signal, warning and
/// budget, with `resources`' wall time and the files under `job_dir` it uses.
fn resume_context(
    spec: &JobSpec,
    resources: &Resources,
    job_dir: &RemotePath,
) -> Result<Option<ResumeContext>> {
    Ok(match &spec.resume {
        Some(resume) => Some(ResumeContext {
            signal: resume.signal.name().to_string(),
            signal_number: resume.signal.number(),
            carrier_number: WARNING_CARRIER.1,
            warn_before_secs: resume.warn_before.as_secs(),
            wall_secs: resources.wall.as_secs(),
            max_restarts: resume.max_restarts,
            checkpoints: resume.checkpoints.clone(),
            segments_file: resume_segments(job_dir)?.as_str().to_string(),
            ready_dir: resume_ready(job_dir)?.as_str().to_string(),
            budget_exit: BUDGET_USED_UP_EXIT,
            refused_exit: REQUEUE_REFUSED_EXIT,
        }),
        None => None,
    })
}

/// The command the job's step runs: `spec`'s own, or for a resumable job the shell that
/// runs it and passes the resume signal on to it (see [`resume_step_command`]), noting
/// its start in `resume_ready` under the job folder as the step sees it
/// (`results_dir_in_job`).
fn step_command(spec: &JobSpec, results_dir_in_job: &str) -> Result<String> {
    Ok(match &spec.resume {
        Some(resume) => resume_step_command(
            &spec.command,
            resume.signal.name(),
            // The step's view of `resume_ready` (the job folder as the step sees it).
            &format!("{results_dir_in_job}/resume/ready"),
        )?,
        None => spec.command.clone(),
    })
}

/// The template's view of `plan`'s array of tasks (none for a single job): its task
/// range with the most run at once, and the sweep file when the spec sweeps.
fn array_context(plan: &SubmitPlan) -> Result<Option<ArrayContext>> {
    let spec = &plan.spec;
    let job_dir = &plan.job_dir;
    Ok(match &plan.array {
        Some(array) => Some(ArrayContext {
            tasks: match array.max_parallel {
                Some(max) => format!("{}%{max}", array.indices),
                None => array.indices.to_string(),
            },
            sweep_file: match spec.sweep {
                Some(_) => Some(sweep_file(job_dir)?.as_str().to_string()),
                None => None,
            },
        }),
        None => None,
    })
}

/// The job folder as a command in a container sees it (`image`: whether it runs in one).
fn results_dir_in_job_of(plan: &SubmitPlan, config: &SlurmConfig, image: bool) -> String {
    match (image, &config.container_results_dir) {
        (true, Some(dir)) => dir.clone(),
        _ => plan.job_dir.as_str().to_string(),
    }
}

/// The template's view of each role of `plan` (none for a single job): its component,
/// resources, image with the job folder and the mounts, and env.
fn role_contexts(
    plan: &SubmitPlan,
    config: &SlurmConfig,
    in_container: &str,
) -> Result<Vec<RoleContext>> {
    let own: Vec<&PlannedRole> = plan.roles.iter().filter(|r| r.role.on.is_none()).collect();
    let component_of = |name: &str| {
        own.iter()
            .position(|r| r.role.name == name)
            .map_or(0, |i| i as u32)
    };
    let mut contexts = Vec::with_capacity(plan.roles.len());
    for planned in &plan.roles {
        let role = &planned.role;
        let image = planned.image.as_ref().map(|i| i.container_image.clone());
        let mut mounts: Vec<String> = Vec::new();
        if image.is_some() {
            mounts.push(format!("{}:{in_container}", plan.job_dir.as_str()));
            mounts.extend(config.container_mounts.iter().cloned());
            for mount in &role.mounts {
                mounts.push(crate::storage::MountSpec::parse(mount)?.to_pyxis());
            }
            // The job's code tree, as in `job_view`: at the same path, read-only.
            if let Some(code) = &plan.code {
                mounts.push(format!("{0}:{0}:ro", code.dir));
            }
        }
        let resources = &role.resources;
        contexts.push(RoleContext {
            name: role.name.clone(),
            hosts_var: role_hosts_var(&role.name),
            host_var: role_host_var(&role.name),
            component: component_of(role.on.as_deref().unwrap_or(&role.name)),
            on: role.on.clone(),
            on_host_var: role.on.as_deref().map(role_host_var),
            nodes: resources.nodes,
            gpus_per_node: resources.gpus_per_node,
            cpus_per_task: resources.cpus_per_task,
            memory: resources.memory.clone(),
            partition: resources.partition.clone(),
            exclusive: resources.exclusive,
            workdir: match image {
                Some(_) => in_container.to_string(),
                None => plan.job_dir.as_str().to_string(),
            },
            image,
            container_mounts: mounts,
            command: role.command.clone(),
            env: role
                .env
                .iter()
                .map(|(name, value)| EnvVar {
                    name: name.clone(),
                    value: value.clone(),
                })
                .collect(),
        });
    }
    Ok(contexts)
}

/// Render `plan`'s batch script and lint it against `secrets` (the values it must not
/// hold; the script only sources the sidecar).
pub(crate) fn render(
    ctx: &Context<'_>,
    plan: &SubmitPlan,
    secrets: &SecretRegistry,
) -> Result<String> {
    let context = script_context(plan, ctx.config())?;
    let kind = match context.roles.is_empty() {
        true => TemplateKind::for_nodes(context.nodes),
        false => TemplateKind::MultiRole,
    };
    let script = ctx.renderer().render(kind, &context)?;
    ctx.renderer().lint(&script, secrets)?;
    Ok(script)
}
