//! Validation of a `ScriptContext` before rendering: every error names the field and the fix.

use std::sync::LazyLock;

use regex::Regex;
use slurm_core::{
    validate_safe_name, validate_shell_name, Error, Result, ScriptContext, TemplateKind,
};

static MEMORY: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[0-9]+[KMGTkmgt]?$").expect("valid regex"));
static TIME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:(\d+)-(\d+)(?::(\d+))?(?::(\d+))?|(\d+)(?::(\d+))?(?::(\d+))?)$")
        .expect("valid regex")
});

/// Variables the multinode template sets itself; a spec may not set them.
const RENDEZVOUS: [&str; 8] = [
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "NUM_GPU_PER_NODE",
    "NODE_RANK",
    "TAO_NODE_COUNT",
    "TAO_GPUS_PER_NODE",
    "TAO_NODE_RANK",
];

/// Check that `context` can be rendered with template `kind` into a safe script:
/// names by slurm-core's rules ([`validate_safe_name`], [`validate_shell_name`]),
/// directive values in Slurm's forms, absolute paths, no control
/// characters where a line could be broken, no NUL anywhere, and a child timeout
/// strictly below the wall time.
pub(crate) fn validate_context(kind: TemplateKind, context: &ScriptContext) -> Result<()> {
    let c = context;
    // The record id and the SLURM job name.
    validate_safe_name("job_name", &c.job_name)?;
    match kind {
        TemplateKind::SingleNode if c.nodes != 1 => {
            return Err(Error::invalid(
                "nodes",
                format!(
                    "the singlenode template runs one node, not {}; render multinode for several",
                    c.nodes
                ),
            ));
        }
        TemplateKind::MultiNode if c.nodes == 0 => {
            return Err(Error::invalid("nodes", "must be at least 1"));
        }
        _ => {}
    }
    if c.cpus_per_task == 0 {
        return Err(Error::invalid("cpus_per_task", "must be at least 1"));
    }
    if let Some(partition) = &c.partition {
        // One name or a comma list of them, as the directive takes it (no spaces).
        for part in partition.split(',') {
            validate_safe_name("partition", part)?;
        }
    }
    if let Some(account) = &c.account {
        validate_safe_name("account", account)?;
    }
    if let Some(memory) = &c.memory {
        if !MEMORY.is_match(memory) {
            return Err(Error::invalid(
                "memory",
                "must be Slurm's form: a number with an optional K, M, G or T suffix, e.g. 64G",
            ));
        }
    }
    let wall_seconds = wall_seconds(&c.time).ok_or_else(|| {
        Error::invalid(
            "time",
            "must be Slurm's form: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS, e.g. 04:00:00",
        )
    })?;
    if c.child_timeout_secs == 0 || c.child_timeout_secs >= wall_seconds {
        return Err(Error::invalid(
            "child_timeout_secs",
            format!(
                "must be at least 1 and strictly below the wall time ({wall_seconds} seconds) so the job ends cleanly before the wall"
            ),
        ));
    }
    check_path("log_dir", &c.log_dir)?;
    if c.log_dir.chars().any(|ch| ch.is_whitespace() || ch == '%') {
        return Err(Error::invalid(
            "log_dir",
            "must not hold whitespace or `%` (it goes into #SBATCH --output, where sbatch splits on spaces and expands %); choose another folder",
        ));
    }
    check_path("results_dir", &c.results_dir)?;
    check_path("results_dir_in_job", &c.results_dir_in_job)?;
    if let Some(env_file) = &c.env_file {
        check_path("env_file", env_file)?;
    }
    if let Some(knobs_file) = &c.knobs_file {
        check_path("knobs_file", knobs_file)?;
    }
    if let Some(resume) = &c.resume {
        check_resume(c, resume)?;
    }
    if c.probe && c.array.is_some() {
        return Err(Error::invalid(
            "array",
            "an NCCL probe is one job, not an array; drop the array or the probe",
        ));
    }
    match &c.image {
        Some(image) => {
            check_path("image", image)?;
            if image.chars().any(char::is_whitespace) {
                return Err(Error::invalid("image", "must not hold whitespace"));
            }
        }
        None if !c.container_mounts.is_empty() => {
            return Err(Error::invalid(
                "container_mounts",
                "mounts need a container image; set image or drop the mounts",
            ));
        }
        None => {}
    }
    for mount in &c.container_mounts {
        check_mount(mount)?;
    }
    if kind == TemplateKind::MultiRole {
        validate_roles(c)?;
    } else if c.command.trim().is_empty() {
        return Err(Error::invalid(
            "command",
            "is empty; give the command to run",
        ));
    }
    if c.command.contains('\0') {
        return Err(Error::invalid("command", "holds a NUL byte; remove it"));
    }
    for (field, vars) in [("env", &c.env), ("extra_env", &c.extra_env)] {
        for var in vars {
            validate_shell_name(field, &var.name)?;
            if var.name.starts_with("slurm_run_") {
                return Err(Error::invalid(
                    field,
                    format!(
                        "`{}`: names starting with slurm_run_ belong to the script; rename it",
                        var.name
                    ),
                ));
            }
            if matches!(kind, TemplateKind::MultiNode | TemplateKind::MultiRole)
                && RENDEZVOUS.contains(&var.name.as_str())
            {
                return Err(Error::invalid(
                    field,
                    format!(
                        "`{}` is set by the multinode template's rendezvous block; remove it",
                        var.name
                    ),
                ));
            }
            if var.value.contains('\0') {
                return Err(Error::invalid(
                    field,
                    format!("the value of `{}` holds a NUL byte; remove it", var.name),
                ));
            }
        }
    }
    for line in &c.extra_sbatch {
        slurm_core::validate_sbatch_line(line)?;
    }
    let only = |field: &str, value: &str, allowed: &dyn Fn(char) -> bool, form: &str| {
        if value.is_empty() || !value.chars().all(allowed) {
            return Err(Error::invalid(field, format!("must be {form}")));
        }
        Ok(())
    };
    if let Some(dependency) = &c.dependency {
        only(
            "dependency",
            dependency,
            &|ch| ch.is_ascii_alphanumeric() || ":,?_+".contains(ch),
            "Slurm's --dependency form, e.g. afterok:12:13",
        )?;
    }
    for node in &c.exclude {
        validate_safe_name("exclude", node)?;
    }
    if let Some(array) = &c.array {
        only(
            "array",
            &array.tasks,
            &|ch| ch.is_ascii_digit() || ",-%:".contains(ch),
            "Slurm's --array form, e.g. 0-7%2",
        )?;
        if let Some(file) = &array.sweep_file {
            check_path("array.sweep_file", file)?;
        }
    }
    Ok(())
}

/// The roles of a multi-role context: names by the core's rule, one per role, an `on`
/// naming a role of its own nodes, the components numbered in order, the same checks of
/// each role's resources, image, mounts, command and env as a job's (errors name
/// `roles.<name>.<field>`).
fn validate_roles(c: &ScriptContext) -> Result<()> {
    if c.roles.is_empty() {
        return Err(Error::invalid(
            "roles",
            "the multirole template needs at least one role",
        ));
    }
    let roles_dir = c.roles_dir.as_deref().ok_or_else(|| {
        Error::invalid(
            "roles_dir",
            "a multi-role job needs the folder its roles' exit statuses go to",
        )
    })?;
    check_path("roles_dir", roles_dir)?;
    let mut seen = std::collections::BTreeSet::new();
    let mut components = 0u32;
    for role in &c.roles {
        let field = |f: &str| format!("roles.{}.{f}", role.name);
        validate_safe_name("roles", &role.name)?;
        if !seen.insert(role.name.as_str()) {
            return Err(Error::invalid(
                "roles",
                format!("`{}` is listed twice", role.name),
            ));
        }
        validate_shell_name(&field("hosts_var"), &role.hosts_var)?;
        validate_shell_name(&field("host_var"), &role.host_var)?;
        match (&role.on, &role.on_host_var) {
            (None, None) => {
                if role.component != components {
                    return Err(Error::invalid(
                        field("component"),
                        format!("must be {components}: the roles of their own nodes come first, their components numbered in order"),
                    ));
                }
                components += 1;
            }
            (Some(host), Some(var)) => {
                validate_shell_name(&field("on_host_var"), var)?;
                let target = c.roles.iter().find(|r| &r.name == host && r.on.is_none());
                if target.is_none_or(|t| t.component != role.component) {
                    return Err(Error::invalid(
                        field("on"),
                        format!(
                            "`{host}` is not a role of its own nodes in component {}",
                            role.component
                        ),
                    ));
                }
            }
            _ => {
                return Err(Error::invalid(
                    field("on_host_var"),
                    "is set exactly when `on` is",
                ))
            }
        }
        if role.nodes == 0 || role.cpus_per_task == 0 {
            return Err(Error::invalid(
                field("nodes"),
                "nodes and cpus_per_task must be at least 1",
            ));
        }
        if let Some(partition) = &role.partition {
            for part in partition.split(',') {
                validate_safe_name(&field("partition"), part)?;
            }
        }
        if let Some(memory) = &role.memory {
            if !MEMORY.is_match(memory) {
                return Err(Error::invalid(
                    field("memory"),
                    "must be Slurm's form, e.g. 64G",
                ));
            }
        }
        check_path(&field("workdir"), &role.workdir)?;
        match &role.image {
            Some(image) => {
                check_path(&field("image"), image)?;
                if image.chars().any(char::is_whitespace) {
                    return Err(Error::invalid(field("image"), "must not hold whitespace"));
                }
            }
            None if !role.container_mounts.is_empty() => {
                return Err(Error::invalid(
                    field("container_mounts"),
                    "mounts need a container image; set image or drop the mounts",
                ));
            }
            None => {}
        }
        for mount in &role.container_mounts {
            check_mount(mount)?;
        }
        if role.command.trim().is_empty() || role.command.contains('\0') {
            return Err(Error::invalid(
                field("command"),
                "is empty or holds a NUL byte; give the role's command",
            ));
        }
        for var in &role.env {
            validate_shell_name(&field("env"), &var.name)?;
            if var.name.starts_with("slurm_run_") || RENDEZVOUS.contains(&var.name.as_str()) {
                return Err(Error::invalid(
                    field("env"),
                    format!("`{}` is set by the multirole template; rename it", var.name),
                ));
            }
            if var.value.contains('\0') {
                return Err(Error::invalid(
                    field("env"),
                    format!("the value of `{}` holds a NUL byte; remove it", var.name),
                ));
            }
        }
    }
    if c.heterogeneous != (components > 1) {
        return Err(Error::invalid(
            "heterogeneous",
            format!(
                "must be {} for {components} role(s) of their own nodes",
                components > 1
            ),
        ));
    }
    Ok(())
}

/// An absolute path without control characters.
fn check_path(field: &str, path: &str) -> Result<()> {
    if !path.starts_with('/') {
        return Err(Error::invalid(
            field,
            "must be an absolute path (starting with /)",
        ));
    }
    if path.chars().any(char::is_control) {
        return Err(Error::invalid(
            field,
            "holds a newline or control character; remove it",
        ));
    }
    Ok(())
}

/// A Pyxis mount `SRC[:DST[:FLAGS]]` with absolute paths, no comma (the list separator).
fn check_mount(mount: &str) -> Result<()> {
    let field = "container_mounts";
    if mount.contains(',')
        || mount
            .chars()
            .any(|ch| ch.is_control() || ch.is_whitespace())
    {
        return Err(Error::invalid(
            field,
            "a mount holds a comma, whitespace or a control character; give one SRC[:DST[:FLAGS]] per entry",
        ));
    }
    let parts: Vec<&str> = mount.split(':').collect();
    let absolute = |p: &str| p.starts_with('/');
    let ok = match parts.as_slice() {
        [src] => absolute(src),
        [src, dst] => absolute(src) && absolute(dst),
        [src, dst, flags] => absolute(src) && absolute(dst) && !flags.is_empty(),
        _ => false,
    };
    if !ok {
        return Err(Error::invalid(
            field,
            "each mount is SRC[:DST[:FLAGS]] with absolute paths; resolve URIs to paths first",
        ));
    }
    Ok(())
}

/// Slurm's time forms, in seconds; `None` when not one of them.
pub(crate) fn wall_seconds(time: &str) -> Option<u64> {
    let caps = TIME.captures(time)?;
    let n = |i: usize| -> Option<u64> {
        caps.get(i)
            .map(|m| m.as_str().parse().ok())
            .unwrap_or(Some(0))
    };
    if caps.get(1).is_some() {
        // D-H, D-H:M, D-H:M:S
        Some(n(1)? * 86_400 + n(2)? * 3_600 + n(3)? * 60 + n(4)?)
    } else {
        // M, M:S, H:M:S
        let a = n(5)?;
        match (caps.get(6), caps.get(7)) {
            (None, _) => Some(a * 60),
            (Some(_), None) => Some(a * 60 + n(6)?),
            (Some(_), Some(_)) => Some(a * 3_600 + n(6)? * 60 + n(7)?),
        }
    }
}

/// A resumable job's context: a signal name `kill -s` and `--signal` take, a warning
/// inside the wall, a budget, an absolute segments file and a one-line glob.
fn check_resume(c: &ScriptContext, resume: &slurm_core::ResumeContext) -> Result<()> {
    if resume.signal.is_empty()
        || !resume
            .signal
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
    {
        return Err(Error::invalid(
            "resume.signal",
            "must be a signal name without SIG, such as USR2",
        ));
    }
    if resume.warn_before_secs == 0 || resume.warn_before_secs >= resume.wall_secs {
        return Err(Error::invalid(
            "resume.warn_before_secs",
            "must be at least one second and below the wall time",
        ));
    }
    if resume.max_restarts == 0 {
        return Err(Error::invalid("resume.max_restarts", "must be at least 1"));
    }
    check_path("resume.segments_file", &resume.segments_file)?;
    if let Some(glob) = &resume.checkpoints {
        if glob.is_empty() || glob.chars().any(char::is_control) || glob.starts_with('/') {
            return Err(Error::invalid(
                "resume.checkpoints",
                "must be a one-line glob relative to the job folder, e.g. ckpt/*.pt",
            ));
        }
    }
    if c.array.is_some() || c.probe {
        return Err(Error::invalid(
            "resume",
            "an array or an NCCL probe is not resumed; drop the resume block",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use slurm_core::{EnvVar, MAX_NAME_LEN};

    use super::*;

    /// The validation of the example context with `change` applied.
    fn check(kind: TemplateKind, change: impl FnOnce(&mut ScriptContext)) -> Result<()> {
        let mut context: ScriptContext = include!("../tests/fixtures/example_context.rs");
        if kind == TemplateKind::MultiNode {
            context.nodes = 2;
        }
        change(&mut context);
        validate_context(kind, &context)
    }

    /// Each check agrees with the core's rule (`core_ok`), and a refusal names its field.
    fn agree(name: &str, core_ok: bool, checks: &[(&str, Result<()>)]) {
        for (field, result) in checks {
            match result {
                Ok(()) => assert!(core_ok, "{field} {name:?}: accepted, the core refuses it"),
                Err(err) => {
                    assert!(
                        !core_ok,
                        "{field} {name:?}: refused, the core accepts it: {err}"
                    );
                    let text = err.to_string();
                    assert!(text.starts_with(&format!("invalid {field}:")), "{text}");
                }
            }
        }
    }

    #[test]
    fn names_follow_the_cores_one_rule() {
        let single = TemplateKind::SingleNode;
        let long = "a".repeat(MAX_NAME_LEN + 1);
        let names = [
            long.as_str(),
            "-lead",
            ".x",
            "ok.name_1-2",
            "a b",
            "",
            "x/y",
            "é",
        ];
        for name in names {
            let core_ok = slurm_core::validate_safe_name("x", name).is_ok();
            let checks = [
                ("job_name", check(single, |c| c.job_name = name.into())),
                (
                    "partition",
                    check(single, |c| c.partition = Some(format!("gpu,{name}"))),
                ),
                ("account", check(single, |c| c.account = Some(name.into()))),
                ("exclude", check(single, |c| c.exclude = vec![name.into()])),
            ];
            agree(name, core_ok, &checks);
        }
        let long = "A".repeat(129);
        for name in [long.as_str(), "1X", "A-B", "", "_x1", "HF_HOME"] {
            let core_ok = slurm_core::validate_shell_name("x", name).is_ok();
            let var = EnvVar {
                name: name.into(),
                value: "1".into(),
            };
            let multi = TemplateKind::MultiNode;
            let checks = [
                ("env", check(single, |c| c.env = vec![var.clone()])),
                (
                    "extra_env",
                    check(multi, |c| c.extra_env = vec![var.clone()]),
                ),
            ];
            agree(name, core_ok, &checks);
        }
    }

    #[test]
    fn wall_time_forms() {
        assert_eq!(wall_seconds("04:00:00"), Some(4 * 3600));
        assert_eq!(wall_seconds("90"), Some(90 * 60));
        assert_eq!(wall_seconds("10:30"), Some(10 * 60 + 30));
        assert_eq!(wall_seconds("1-00:00:00"), Some(86_400));
        assert_eq!(wall_seconds("2-3"), Some(2 * 86_400 + 3 * 3600));
        assert_eq!(wall_seconds("1-2:30"), Some(86_400 + 2 * 3600 + 30 * 60));
        assert_eq!(wall_seconds("4h"), None);
        assert_eq!(wall_seconds(""), None);
        assert_eq!(wall_seconds("1:2:3:4"), None);
    }
}
