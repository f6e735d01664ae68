//! Multi-role jobs: the spec's `roles` ([`RoleSpec`]), their validation (every error
//! names `roles.<role>.<field>`), the names of the variables every role sees, and each
//! role resolved against the defaults ([`ResolvedRole`]).
//!
//! ```yaml
//! name: rl
//! roles:
//!   controller: {nodes: 1, gpus_per_node: 0, cpus_per_task: 4, command: "python controller.py"}
//!   policy:     {nodes: 2, gpus_per_node: 8, image: "nvcr.io/nvidia/pytorch:24.01-py3", command: "python policy.py"}
//!   monitor:    {on: policy, command: "python monitor.py"}
//! ```
//!
//! A role on its own nodes takes the resource keys a single job takes (`nodes`, `gpus`,
//! `gpus_per_node`, `cpus_per_task`, `memory`, `partition`) and its own `command`,
//! `image`, `mounts` and `env`; the job's `image`, `partition`, `mounts`, `env` and
//! `extra_env` apply to every role (a role's own `image` and `partition` replace the
//! job's, its `env` wins name by name, its `mounts` come after the job's). A role with
//! `on: <role>` runs one process on that role's first node, sharing its allocation.
//! The job's `time`, `child_timeout`, `secrets`, `after`, `requeue` and retry policy
//! apply to the whole job.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::image::ImageRef;
use crate::names::{validate_safe_name, validate_shell_name};
use crate::storage::MountSpec;
use crate::{Error, Result};

use super::{validate_memory, validate_partition, JobSpec, Limits, Resources, SpecDefaults};

/// One role of a multi-role job, as the user writes it under `roles`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleSpec {
    /// The role's command, run by `bash -c` on each of its nodes.
    pub command: String,
    /// Run beside this other role: one process on that role's first node, sharing its
    /// allocation (no resource keys of its own but `cpus_per_task`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on: Option<String>,
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
    /// Memory per node in Slurm's form (`64G`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// The partition (or a comma list); the job's, else the configured one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// The role's container image; the job's when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Container mounts added to the job's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<String>,
    /// Plain environment values (over the job's).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

impl RoleSpec {
    /// A role running `command` on one node of its own.
    pub fn new(command: impl Into<String>) -> Self {
        RoleSpec {
            command: command.into(),
            ..RoleSpec::default()
        }
    }
}

/// The variable every role of a job sees: `SLURM_RUN_ROLE`.
pub const ROLE_VAR: &str = "SLURM_RUN_ROLE";
/// Its node's rank within its role: `SLURM_RUN_ROLE_RANK`.
pub const ROLE_RANK_VAR: &str = "SLURM_RUN_ROLE_RANK";

/// The `<NAME>` of a role in `SLURM_RUN_ROLE_<NAME>_HOSTS`: upper-cased, every
/// character that is not a letter or digit as `_` (`rollout-workers` is
/// `ROLLOUT_WORKERS`).
pub fn role_env_name(role: &str) -> String {
    role.chars()
        .map(|c| match c.is_ascii_alphanumeric() {
            true => c.to_ascii_uppercase(),
            false => '_',
        })
        .collect()
}

/// `SLURM_RUN_ROLE_<NAME>_HOSTS`: every host of `role`, comma-separated, in rank order.
pub fn role_hosts_var(role: &str) -> String {
    format!("SLURM_RUN_ROLE_{}_HOSTS", role_env_name(role))
}

/// `SLURM_RUN_ROLE_<NAME>_HOST`: the first host of `role`.
pub fn role_host_var(role: &str) -> String {
    format!("SLURM_RUN_ROLE_{}_HOST", role_env_name(role))
}

/// A role with every default applied: what a backend launches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResolvedRole {
    /// The role's name.
    pub(crate) name: String,
    /// The role it runs beside, on that role's first node.
    pub(crate) on: Option<String>,
    /// The command.
    pub(crate) command: String,
    /// What it asks of the scheduler (an `on` role: one node, no GPUs of its own).
    pub(crate) resources: Resources,
    /// Its image (its own, else the job's).
    pub(crate) image: Option<String>,
    /// The job's mounts, then its own.
    pub(crate) mounts: Vec<String>,
    /// The job's env, then its own (its own wins).
    pub(crate) env: BTreeMap<String, String>,
}

impl ResolvedRole {
    /// The spec a role is checked and resolved as: the job's with the role's keys.
    fn as_job(spec: &JobSpec, role: &RoleSpec) -> JobSpec {
        let mut job = spec.clone();
        job.roles = BTreeMap::new();
        job.command = role.command.clone();
        job.nodes = role.nodes;
        job.gpus = role.gpus;
        job.gpus_per_node = role.gpus_per_node;
        job.cpus_per_task = role.cpus_per_task;
        job.memory = role.memory.clone();
        if role.partition.is_some() {
            job.partition = role.partition.clone();
        }
        if role.image.is_some() {
            job.image = role.image.clone();
        }
        job.mounts.extend(role.mounts.iter().cloned());
        job.env.extend(role.env.clone());
        job
    }
}

/// `error` as an error of role `role`: its field as `roles.<role>.<field>`.
fn in_role(role: &str, error: Error) -> Error {
    match error {
        Error::Invalid { field, message } => {
            Error::invalid(format!("roles.{role}.{field}"), message)
        }
        other => other,
    }
}

/// Job-level keys a multi-role job refuses, and why.
const ROLE_ONLY_KEYS: &str = "set it on each role under `roles`";

impl JobSpec {
    /// Whether the spec declares roles.
    pub fn is_multi_role(&self) -> bool {
        !self.roles.is_empty()
    }

    /// Check `roles` (nothing without them): the job-level keys that belong to a role,
    /// names that collide once upper-cased, each role's keys, `on` targets.
    pub(crate) fn validate_roles(&self) -> Result<()> {
        if self.roles.is_empty() {
            return Ok(());
        }
        if !self.command.trim().is_empty() {
            return Err(Error::invalid(
                "command",
                "a multi-role job runs each role's command; move it into a role under `roles`",
            ));
        }
        let job_level = [
            ("nodes", self.nodes.is_some()),
            ("gpus", self.gpus.is_some()),
            ("gpus_per_node", self.gpus_per_node.is_some()),
            ("cpus_per_task", self.cpus_per_task.is_some()),
            ("memory", self.memory.is_some()),
        ];
        if let Some((field, _)) = job_level.iter().find(|(_, set)| *set) {
            return Err(Error::invalid(
                *field,
                format!("a multi-role job has no job-level {field}; {ROLE_ONLY_KEYS}"),
            ));
        }
        if self.array.is_some() || self.sweep.is_some() {
            let field = if self.array.is_some() {
                "array"
            } else {
                "sweep"
            };
            return Err(Error::invalid(
                field,
                "a multi-role job cannot also be an array or sweep; submit one multi-role job per point",
            ));
        }
        let mut env_names: BTreeMap<String, &str> = BTreeMap::new();
        for (name, role) in &self.roles {
            validate_safe_name("roles", name)?;
            if let Some(other) = env_names.insert(role_env_name(name), name) {
                return Err(Error::invalid(
                    format!("roles.{name}"),
                    format!(
                        "names the same variables as role `{other}` ({}); rename one of them",
                        role_hosts_var(name)
                    ),
                ));
            }
            self.validate_role(name, role)?;
        }
        if self.roles.values().all(|r| r.on.is_some()) {
            return Err(Error::invalid(
                "roles",
                "every role is `on` another; give at least one role nodes of its own",
            ));
        }
        Ok(())
    }

    fn validate_role(&self, name: &str, role: &RoleSpec) -> Result<()> {
        let field = |f: &str| format!("roles.{name}.{f}");
        if role.command.trim().is_empty() {
            return Err(Error::invalid(
                field("command"),
                "empty; give the role's command, e.g. python worker.py",
            ));
        }
        if role.command.contains('\0') {
            return Err(Error::invalid(
                field("command"),
                "holds a NUL byte; remove it",
            ));
        }
        for (k, v) in &role.env {
            validate_shell_name(&field("env"), k)?;
            if v.contains('\0') {
                return Err(Error::invalid(
                    field("env"),
                    format!("the value of {k} holds a NUL byte; remove it"),
                ));
            }
            if self.secrets.contains(k) {
                return Err(Error::invalid(
                    field("env"),
                    format!("{k} is also a secret; remove it from env (secret values come from the environment)"),
                ));
            }
        }
        if let Some(image) = &role.image {
            ImageRef::parse(image).map_err(|e| in_role(name, e))?;
        }
        for m in &role.mounts {
            MountSpec::parse(m).map_err(|e| in_role(name, e))?;
        }
        if let Some(p) = &role.partition {
            validate_partition(p).map_err(|e| in_role(name, e))?;
        }
        if let Some(mem) = &role.memory {
            validate_memory(mem).map_err(|e| in_role(name, e))?;
        }
        if let Some(host) = &role.on {
            let Some(target) = self.roles.get(host) else {
                return Err(Error::invalid(
                    field("on"),
                    format!(
                        "`{host}` is not a role of this job; name one of: {}",
                        self.roles.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                ));
            };
            if host == name {
                return Err(Error::invalid(
                    field("on"),
                    "names the role itself; name another role",
                ));
            }
            if target.on.is_some() {
                return Err(Error::invalid(
                    field("on"),
                    format!(
                        "`{host}` is itself `on` another role; name a role with nodes of its own"
                    ),
                ));
            }
            let own = [
                ("nodes", role.nodes.is_some()),
                ("gpus", role.gpus.is_some()),
                ("gpus_per_node", role.gpus_per_node.is_some()),
                ("memory", role.memory.is_some()),
                ("partition", role.partition.is_some()),
            ];
            if let Some((key, _)) = own.iter().find(|(_, set)| *set) {
                return Err(Error::invalid(
                    field(key),
                    format!("a role `on` {host} runs one process on {host}'s first node and shares its allocation; remove {key}"),
                ));
            }
        }
        Ok(())
    }

    /// The GPUs sbatch is asked for by a job of this spec, by part: the job's own
    /// (`None`), or each role's (a role `on` another: 0); the backend's defaults applied
    /// (no GPU keys: 4 per node), the spec's wall taken as it is (the partition's limit
    /// is checked at submit).
    pub(crate) fn gpus_by_part(&self) -> Result<Vec<(Option<String>, u32)>> {
        let defaults = SpecDefaults {
            limits: Limits {
                max_wall: None,
                ..Limits::default()
            },
            ..SpecDefaults::default()
        };
        if self.roles.is_empty() {
            return Ok(vec![(None, self.resolve(&defaults)?.gpus)]);
        }
        Ok(self
            .resolve_roles(&defaults)?
            .into_iter()
            .map(|role| (Some(role.name), role.resources.gpus))
            .collect())
    }

    /// The roles with every default applied, roles on their own nodes first (in name
    /// order: their order is the heterogeneous job's components), then the roles `on`
    /// another. Errors name `roles.<role>.<field>`.
    pub(crate) fn resolve_roles(&self, defaults: &SpecDefaults) -> Result<Vec<ResolvedRole>> {
        self.validate()?;
        let mut own: Vec<ResolvedRole> = Vec::new();
        let mut beside = Vec::new();
        for pass_on in [false, true] {
            for (name, role) in self.roles.iter().filter(|(_, r)| r.on.is_some() == pass_on) {
                let mut job = ResolvedRole::as_job(self, role);
                if let Some(host) = &role.on {
                    // One process on the host role's first node, inside its allocation:
                    // at most the CPUs a task of the host has there (its default).
                    let host_cpus = own
                        .iter()
                        .find(|r| &r.name == host)
                        .map_or(1, |r| r.resources.cpus_per_task);
                    if role.cpus_per_task.is_some_and(|c| c > host_cpus) {
                        return Err(Error::invalid(
                            format!("roles.{name}.cpus_per_task"),
                            format!("a role `on` {host} runs inside {host}'s allocation, which has {host_cpus} CPU(s) per task on its first node; ask at most {host_cpus}, or more for {host}"),
                        ));
                    }
                    job.nodes = Some(1);
                    job.gpus_per_node = Some(0);
                    job.cpus_per_task = Some(role.cpus_per_task.unwrap_or(host_cpus));
                }
                let resources = job.resolve(defaults).map_err(|e| in_role(name, e))?;
                let resolved = ResolvedRole {
                    name: name.clone(),
                    on: role.on.clone(),
                    command: role.command.clone(),
                    resources,
                    image: job_image(self, role),
                    mounts: self.mounts.iter().chain(&role.mounts).cloned().collect(),
                    env: {
                        let mut env = self.env.clone();
                        env.extend(role.env.clone());
                        env
                    },
                };
                match pass_on {
                    false => own.push(resolved),
                    true => beside.push(resolved),
                }
            }
        }
        own.extend(beside);
        Ok(own)
    }

    /// The spec of role `name` alone, as a single job (its image, resources, env and
    /// command): how its image and resources are checked.
    pub(crate) fn role_as_job(&self, name: &str) -> Option<JobSpec> {
        self.roles
            .get(name)
            .map(|role| ResolvedRole::as_job(self, role))
    }
}

fn job_image(spec: &JobSpec, role: &RoleSpec) -> Option<String> {
    role.image.clone().or_else(|| spec.image.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    const RL: &str = r#"
name: rl
roles:
  controller: {nodes: 1, gpus_per_node: 0, cpus_per_task: 4, command: "python controller.py"}
  policy:     {nodes: 2, gpus_per_node: 8, image: "nvcr.io/nvidia/pytorch:24.01-py3", command: "python policy.py"}
  rollout:    {nodes: 1, gpus_per_node: 4, command: "python rollout.py", env: {WORKERS: "16"}}
"#;

    fn field_of(error: Error) -> String {
        match error {
            Error::Invalid { field, .. } => field,
            other => panic!("not an Invalid error: {other}"),
        }
    }

    fn refused(yaml: &str) -> String {
        field_of(JobSpec::from_yaml_str(yaml).expect_err("refused"))
    }

    #[test]
    fn the_issues_rl_example_reads_and_resolves() {
        let spec = JobSpec::from_yaml_str(RL).unwrap();
        assert!(spec.is_multi_role());
        let roles = spec
            .resolve_roles(&SpecDefaults::default().with_partition("gpu"))
            .unwrap();
        let names: Vec<&str> = roles.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["controller", "policy", "rollout"]);
        assert_eq!(roles[0].resources.gpus_per_node, 0);
        assert_eq!(roles[0].resources.cpus_per_task, 4);
        assert_eq!((roles[1].resources.nodes, roles[1].resources.gpus), (2, 16));
        assert!(roles[1].resources.exclusive);
        assert_eq!(
            roles[1].image.as_deref(),
            Some("nvcr.io/nvidia/pytorch:24.01-py3")
        );
        assert_eq!(roles[2].env["WORKERS"], "16");
        assert_eq!(roles[2].resources.partition.as_deref(), Some("gpu"));
    }

    #[test]
    fn a_single_job_is_untouched_by_roles() {
        let spec = JobSpec::from_yaml_str("name: one\ncommand: echo hi\n").unwrap();
        assert!(!spec.is_multi_role());
        let json = serde_json::to_string(&spec).unwrap();
        assert!(!json.contains("roles"), "{json}");
        // Without roles a command is still required, in serde's words of before.
        let missing = JobSpec::from_yaml_str("name: one\ngpus_per_node: 1\n").unwrap_err();
        assert!(
            missing
                .to_string()
                .starts_with("invalid command: missing field `command`"),
            "{missing}"
        );
    }

    #[test]
    fn validation_names_the_role_and_the_field() {
        let bad_gpus = "name: rl\nroles:\n  policy: {gpus_per_node: 9, command: x}\n";
        let err = JobSpec::from_yaml_str(bad_gpus)
            .unwrap()
            .resolve_roles(&SpecDefaults::default())
            .unwrap_err();
        assert_eq!(field_of(err), "roles.policy.gpus_per_node");
        assert_eq!(
            refused("name: rl\nroles:\n  policy: {command: x, nodes: 1, colour: red}\n"),
            "colour"
        );
        assert_eq!(
            refused("name: rl\nroles:\n  policy: {command: ' '}\n"),
            "roles.policy.command"
        );
        assert_eq!(
            refused("name: rl\nroles:\n  a: {command: x, env: {1X: y}}\n"),
            "roles.a.env"
        );
        assert_eq!(
            refused("name: rl\nroles:\n  a: {command: x, memory: lots}\n"),
            "roles.a.memory"
        );
        assert_eq!(
            refused("name: rl\nroles:\n  a: {command: x}\n  b: {command: y, on: c}\n"),
            "roles.b.on"
        );
        assert_eq!(
            refused("name: rl\nroles:\n  a: {command: x}\n  b: {command: y, on: a, nodes: 2}\n"),
            "roles.b.nodes"
        );
        assert_eq!(
            refused("name: rl\nroles:\n  a: {command: x, on: b}\n  b: {command: y, on: a}\n"),
            "roles.a.on"
        );
        assert_eq!(
            refused("name: rl\ncommand: x\nroles:\n  a: {command: x}\n"),
            "command"
        );
        assert_eq!(
            refused("name: rl\nnodes: 2\nroles:\n  a: {command: x}\n"),
            "nodes"
        );
        assert_eq!(
            refused("name: rl\narray: {size: 2}\nroles:\n  a: {command: x}\n"),
            "array"
        );
        assert_eq!(refused("name: rl\nroles:\n  ../a: {command: x}\n"), "roles");
    }

    #[test]
    fn a_role_on_another_fits_in_its_hosts_cpus() {
        let spec = JobSpec::from_yaml_str(
            "name: rl\nroles:\n  t: {command: x, cpus_per_task: 2}\n  m: {command: y, on: t, cpus_per_task: 3}\n",
        )
        .unwrap();
        let err = spec.resolve_roles(&SpecDefaults::default()).unwrap_err();
        assert_eq!(field_of(err), "roles.m.cpus_per_task");
        let spec = JobSpec::from_yaml_str(
            "name: rl\nroles:\n  t: {command: x, cpus_per_task: 2}\n  m: {command: y, on: t}\n",
        )
        .unwrap();
        let roles = spec.resolve_roles(&SpecDefaults::default()).unwrap();
        assert_eq!(roles[1].resources.cpus_per_task, 2);
    }

    #[test]
    fn names_colliding_once_upper_cased_are_refused() {
        let err = JobSpec::from_yaml_str(
            "name: rl\nroles:\n  roll-out: {command: x}\n  roll_out: {command: y}\n",
        )
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Invalid);
        assert!(
            err.to_string().contains("SLURM_RUN_ROLE_ROLL_OUT_HOSTS"),
            "{err}"
        );
        assert_eq!(field_of(err), "roles.roll_out");
    }

    #[test]
    fn the_variable_names_follow_the_rule() {
        assert_eq!(role_env_name("rollout-workers.v2"), "ROLLOUT_WORKERS_V2");
        assert_eq!(role_hosts_var("policy"), "SLURM_RUN_ROLE_POLICY_HOSTS");
        assert_eq!(role_host_var("policy"), "SLURM_RUN_ROLE_POLICY_HOST");
    }

    #[test]
    fn roles_on_another_come_last_and_inherit_the_job() {
        let spec = JobSpec::from_yaml_str(
            "name: rl\nimage: /img/a.sqsh\nenv: {A: job, B: job}\nroles:\n  a-mon: {on: z, command: m, env: {B: role}}\n  z: {command: w, nodes: 2, gpus_per_node: 0}\n",
        )
        .unwrap();
        let roles = spec.resolve_roles(&SpecDefaults::default()).unwrap();
        assert_eq!(roles[0].name, "z");
        assert_eq!(roles[1].name, "a-mon");
        assert_eq!(roles[1].on.as_deref(), Some("z"));
        assert_eq!((roles[1].resources.nodes, roles[1].resources.gpus), (1, 0));
        assert_eq!(
            roles[1].resources.cpus_per_task,
            roles[0].resources.cpus_per_task
        );
        assert_eq!(roles[1].image.as_deref(), Some("/img/a.sqsh"));
        assert_eq!(
            (roles[1].env["A"].as_str(), roles[1].env["B"].as_str()),
            ("job", "role")
        );
    }
}
