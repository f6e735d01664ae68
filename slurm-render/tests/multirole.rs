//! The `multirole` template: a heterogeneous job of the roles with nodes of their own and
//! steps beside them (snapshot, `bash -n`), and the validation of the roles' context
//! (each refusal names `roles.<role>.<field>`).

use slurm_core::{
    EnvVar, ErrorKind, Renderer, RoleContext, ScriptContext, SecretRegistry, TemplateKind,
};
use slurm_render::{check_syntax, HandlebarsRenderer};

const JOB: &str = "/lustre/users/me/results/rl-00aa11";

fn role(name: &str, component: u32, nodes: u32, gpus: u32) -> RoleContext {
    let upper = name.to_ascii_uppercase();
    RoleContext {
        name: name.into(),
        hosts_var: format!("SLURM_RUN_ROLE_{upper}_HOSTS"),
        host_var: format!("SLURM_RUN_ROLE_{upper}_HOST"),
        component,
        on: None,
        on_host_var: None,
        nodes,
        gpus_per_node: gpus,
        cpus_per_task: 4,
        memory: None,
        partition: Some("gpu".into()),
        exclusive: gpus == 8,
        image: None,
        container_mounts: Vec::new(),
        workdir: JOB.into(),
        command: format!("python {name}.py"),
        env: Vec::new(),
    }
}

/// The RL example: a controller without GPUs, two policy nodes of eight GPUs in
/// a container, a rollout worker with its own env, and a monitor beside the policy.
fn rl_context() -> ScriptContext {
    let mut base: ScriptContext = include!("fixtures/example_context.rs");
    base.job_name = "rl-00aa11".into();
    base.results_dir = JOB.into();
    base.results_dir_in_job = JOB.into();
    base.log_dir = format!("{JOB}/logs");
    base.image = None;
    base.container_mounts = Vec::new();
    base.command = String::new();
    base.env_file = Some(format!("{JOB}/env/job_rl-00aa11.env"));
    let controller = role("controller", 0, 1, 0);
    let mut policy = role("policy", 1, 2, 8);
    policy.image = Some("/lustre/images/nvcr.io+nvidia+pytorch+24.01-py3.sqsh".into());
    policy.container_mounts = vec![format!("{JOB}:{JOB}"), "/data:/data:ro".into()];
    let mut rollout = role("rollout", 2, 1, 4);
    rollout.env = vec![EnvVar {
        name: "WORKERS".into(),
        value: "16".into(),
    }];
    let mut monitor = role("monitor", 1, 1, 0);
    monitor.on = Some("policy".into());
    monitor.on_host_var = Some("SLURM_RUN_ROLE_POLICY_HOST".into());
    monitor.partition = None;
    base.roles = vec![controller, policy, rollout, monitor];
    base.heterogeneous = true;
    base.roles_dir = Some(format!("{JOB}/roles"));
    base
}

#[test]
fn the_rl_example_renders_as_one_heterogeneous_job() {
    let script = HandlebarsRenderer::new()
        .render(TemplateKind::MultiRole, &rl_context())
        .unwrap();
    assert_eq!(check_syntax(&script).unwrap(), vec![], "bash -n");
    HandlebarsRenderer::new()
        .lint(&script, &SecretRegistry::new())
        .unwrap();
    // Three components: two `hetjob` separators, one --het-group each, the monitor a
    // step on the policy's first node.
    assert_eq!(script.matches("#SBATCH hetjob").count(), 2, "{script}");
    for group in 0..3 {
        assert!(script.contains(&format!("\"$SLURM_JOB_NODELIST_HET_GROUP_{group}\"")));
    }
    // Each step carries its role's name (sacct's JobName: the role's usage).
    assert!(script.contains(
        "srun --job-name=monitor --het-group=1 --overlap --nodes=1 --ntasks=1 --nodelist=\"$SLURM_RUN_ROLE_POLICY_HOST\""
    ));
    insta::assert_snapshot!("multirole_rl", script);
}

#[test]
fn one_role_of_its_own_nodes_is_a_plain_job() {
    let mut context = rl_context();
    context
        .roles
        .retain(|r| r.name == "policy" || r.name == "monitor");
    context.roles[0].component = 0;
    context.roles[1].component = 0;
    context.heterogeneous = false;
    let script = HandlebarsRenderer::new()
        .render(TemplateKind::MultiRole, &context)
        .unwrap();
    assert_eq!(check_syntax(&script).unwrap(), vec![], "bash -n");
    assert!(
        !script.contains("#SBATCH hetjob") && !script.contains("--het-group"),
        "{script}"
    );
    assert!(script.contains("slurm_run_hosts_of \"$SLURM_JOB_NODELIST\""));
}

#[test]
fn a_bad_role_is_refused_naming_it_and_its_field() {
    let renderer = HandlebarsRenderer::new();
    let refused = |change: &dyn Fn(&mut ScriptContext)| {
        let mut context = rl_context();
        change(&mut context);
        let error = renderer
            .render(TemplateKind::MultiRole, &context)
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Invalid);
        error.to_string()
    };
    assert!(
        refused(&|c| c.roles[1].image = Some("relative.sqsh".into()))
            .starts_with("invalid roles.policy.image:")
    );
    assert!(refused(&|c| c.roles[2].env[0].name = "WORLD_SIZE".into())
        .starts_with("invalid roles.rollout.env:"));
    assert!(refused(&|c| c.roles[3].on = Some("rollout".into()))
        .starts_with("invalid roles.monitor.on:"));
    assert!(refused(&|c| c.roles[2].component = 5).starts_with("invalid roles.rollout.component:"));
    assert!(refused(&|c| c.roles[0].command = " ".into())
        .starts_with("invalid roles.controller.command:"));
    assert!(refused(&|c| c.heterogeneous = false).starts_with("invalid heterogeneous:"));
    assert!(refused(&|c| c.roles.clear()).starts_with("invalid roles:"));
}
