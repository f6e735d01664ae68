//! Validation of the names and values a spec holds: safe names, shell names, partitions, memory, sbatch options.

use crate::names::{short, validate_safe_name};
use crate::{Error, Result};

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
                short(t)
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
