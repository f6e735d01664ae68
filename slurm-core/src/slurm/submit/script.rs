//! The batch script of a plan: its [`ScriptContext`] (everything the template sees),
//! rendered and linted (secrets, syntax) by the backend's renderer.

use crate::redact::SecretRegistry;
use crate::render::{ArrayContext, EnvVar, ScriptContext, TemplateKind};
use crate::slurm::config::SlurmConfig;
use crate::slurm::context::Context;
use crate::slurm::paths::{logs_dir, probe_knobs, sidecar, sweep_file};
use crate::Result;

use super::plan::{extra_sbatch_lines, SubmitPlan};

/// The template's view of `plan`. The cluster's NCCL knobs come after the spec's own
/// extra env (a name the spec sets in `env` or `extra_env` keeps the spec's value).
pub(crate) fn script_context(plan: &SubmitPlan, config: &SlurmConfig) -> Result<ScriptContext> {
    let spec = &plan.spec;
    let resources = &plan.resources;
    let job_dir = &plan.job_dir;
    let image = plan.image.as_ref().map(|i| i.container_image.clone());
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
        command: spec.command.clone(),
        env_file: match plan.sidecar {
            true => Some(sidecar(job_dir, &plan.id)?.as_str().to_string()),
            false => None,
        },
        env: spec.env.iter().map(env_var).collect(),
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
        dependency: plan.dependency.clone(),
        exclude: plan.exclude.clone(),
        array: match &plan.array {
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
        },
    })
}

/// Render `plan`'s batch script and lint it against `secrets` (the values it must not
/// hold; the script only sources the sidecar).
pub(crate) fn render(
    ctx: &Context<'_>,
    plan: &SubmitPlan,
    secrets: &SecretRegistry,
) -> Result<String> {
    let context = script_context(plan, ctx.config())?;
    let script = ctx
        .renderer()
        .render(TemplateKind::for_nodes(context.nodes), &context)?;
    ctx.renderer().lint(&script, secrets)?;
    Ok(script)
}
