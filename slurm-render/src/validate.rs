//! Validation of a `ScriptContext` before rendering: every error names the field and the fix.

use std::sync::LazyLock;

use regex::Regex;
use slurm_core::{Error, Result, ScriptContext, TemplateKind};

static JOB_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z0-9][A-Za-z0-9._-]*$").expect("valid regex"));
static PARTITION: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*$").expect("valid regex"));
static ACCOUNT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z0-9_.-]+$").expect("valid regex"));
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

/// Whether `name` is a shell variable name (`[A-Za-z_][A-Za-z0-9_]*`).
pub(crate) fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Check that `context` can be rendered with template `kind` into a safe script:
/// identifiers and directive values in Slurm's forms, absolute paths, no control
/// characters where a line could be broken, no NUL anywhere, and a child timeout
/// strictly below the wall time.
pub(crate) fn validate_context(kind: TemplateKind, context: &ScriptContext) -> Result<()> {
    let c = context;
    if !JOB_NAME.is_match(&c.job_name) {
        return Err(Error::invalid(
            "job_name",
            "must match ^[A-Za-z0-9][A-Za-z0-9._-]*$ (it is the record id and the SLURM job name)",
        ));
    }
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
        if !PARTITION.is_match(partition) {
            return Err(Error::invalid(
                "partition",
                "must be one partition name or a comma list of them ([A-Za-z0-9_.-]); leave it unset for the cluster default",
            ));
        }
    }
    if let Some(account) = &c.account {
        if !ACCOUNT.is_match(account) {
            return Err(Error::invalid(
                "account",
                "must be one account name ([A-Za-z0-9_.-]); leave it unset for the default account",
            ));
        }
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
    if c.command.trim().is_empty() {
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
            if !is_identifier(&var.name) {
                return Err(Error::invalid(
                    field,
                    format!(
                        "`{}` is not a shell variable name ([A-Za-z_][A-Za-z0-9_]*); rename it",
                        printable(&var.name)
                    ),
                ));
            }
            if var.name.starts_with("slurm_run_") {
                return Err(Error::invalid(
                    field,
                    format!(
                        "`{}`: names starting with slurm_run_ belong to the script; rename it",
                        var.name
                    ),
                ));
            }
            if kind == TemplateKind::MultiNode && RENDEZVOUS.contains(&var.name.as_str()) {
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
        only(
            "exclude",
            node,
            &|ch| ch.is_ascii_alphanumeric() || "._-".contains(ch),
            "node names ([A-Za-z0-9._-])",
        )?;
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

/// A name shown in an error with control characters replaced.
fn printable(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn identifiers() {
        assert!(is_identifier("HF_HOME"));
        assert!(is_identifier("_x1"));
        assert!(!is_identifier("1X"));
        assert!(!is_identifier("A-B"));
        assert!(!is_identifier(""));
        assert!(!is_identifier("A B"));
    }
}
