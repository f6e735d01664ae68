//! Validation of the names and values a spec holds: safe names, shell names, partitions, memory, sbatch options.

use crate::{Error, Result};

/// The longest safe name (record ids, labels, partitions, clusters).
pub const MAX_NAME_LEN: usize = 64;

/// Check a safe name: `^[A-Za-z0-9][A-Za-z0-9._-]*$`, at most [`MAX_NAME_LEN`]
/// characters. Such a name is a valid file name and SLURM job name and cannot
/// traverse paths.
pub fn validate_safe_name(field: &str, value: &str) -> Result<()> {
    let ok = value.len() <= MAX_NAME_LEN
        && value
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-');
    if ok {
        Ok(())
    } else if value.is_empty() {
        Err(Error::invalid(
            field,
            "empty; give a name of letters, digits, `.`, `_` or `-`",
        ))
    } else {
        Err(Error::invalid(
            field,
            format!(
                "`{}` is not a safe name; use at most {MAX_NAME_LEN} letters, digits, `.`, `_` or `-`, starting with a letter or digit",
                crate::slurm::id::short(value)
            ),
        ))
    }
}

/// Check a shell identifier (`^[A-Za-z_][A-Za-z0-9_]*$`), for env and secret names.
pub fn validate_shell_name(field: &str, value: &str) -> Result<()> {
    let ok = value
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && value.len() <= 128;
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            field,
            format!(
                "`{}` is not a shell variable name; use letters, digits and `_`, not starting with a digit",
                crate::slurm::id::short(value)
            ),
        ))
    }
}

/// sbatch options a spec may not set: slurm-run owns the job name and the log layout.
const RESERVED_SBATCH: &[&str] = &[
    "--job-name",
    "-J",
    "--output",
    "-o",
    "--error",
    "-e",
    "--open-mode",
    "--parsable",
    "--wrap",
];

pub(crate) fn first_duplicate(items: &[String]) -> Option<&str> {
    let mut seen = std::collections::BTreeSet::new();
    items
        .iter()
        .find(|i| !seen.insert(i.as_str()))
        .map(String::as_str)
}

/// A partition or a comma list of partitions (`polar,polar3`).
pub(crate) fn validate_partition(p: &str) -> Result<()> {
    for part in p.split(',') {
        validate_safe_name("partition", part.trim()).map_err(|_| {
            Error::invalid(
                "partition",
                format!("`{p}` is not a partition name or comma list of names"),
            )
        })?;
    }
    Ok(())
}

/// Slurm memory: digits with an optional K/M/G/T suffix.
pub(crate) fn validate_memory(mem: &str) -> Result<()> {
    let digits = mem.trim_end_matches(['K', 'M', 'G', 'T', 'k', 'm', 'g', 't']);
    let ok = !digits.is_empty()
        && digits.len() + 1 >= mem.len()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && digits.len() <= 12;
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "memory",
            format!("`{mem}` is not a Slurm memory size; write e.g. 64G or 7200M"),
        ))
    }
}

/// One extra sbatch option: a single line starting with `-`, not one slurm-run owns.
/// Check one `extra_sbatch` entry: a single-line option such as `--qos=high`, not one
/// slurm-run sets itself (job name, output files, `--wrap`, `--parsable`).
pub fn validate_sbatch_line(line: &str) -> Result<()> {
    if line.chars().any(char::is_control) {
        return Err(Error::invalid(
            "extra_sbatch",
            "an entry holds a newline or control character, which would break out of its #SBATCH line; write one option per entry",
        ));
    }
    let t = line.trim();
    if !t.starts_with('-') {
        return Err(Error::invalid(
            "extra_sbatch",
            format!(
                "`{}`: write one sbatch option per entry, e.g. --qos=high (no #SBATCH prefix)",
                crate::slurm::id::short(t)
            ),
        ));
    }
    let opt = t.split(['=', ' ']).next().unwrap_or(t);
    if RESERVED_SBATCH.contains(&opt) {
        return Err(Error::invalid(
            "extra_sbatch",
            format!("`{opt}` is set by slurm-run (job name = record id, log layout); remove it"),
        ));
    }
    Ok(())
}
