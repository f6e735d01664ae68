//! Safe names: the one rule for record ids, labels, partitions and cluster names, and the one for shell variable names.
//!
//! Both are public through [`crate::render`], so renderers check their context with
//! the same rules the domain applies to a spec.

use crate::{Error, Result};

/// The longest safe name (record ids, labels, partitions, clusters).
pub const MAX_NAME_LEN: usize = 64;

/// Check a safe name: `^[A-Za-z0-9][A-Za-z0-9._-]*$`, at most [`MAX_NAME_LEN`]
/// characters. Such a name is a valid file name and SLURM job name and cannot
/// traverse paths.
///
/// The error is [`Error::Invalid`] naming `field` and the fix.
///
/// ```
/// use slurm_core::validate_safe_name;
/// assert!(validate_safe_name("partition", "gpu-a100").is_ok());
/// let err = validate_safe_name("partition", "../gpu").unwrap_err();
/// assert!(err.to_string().starts_with("invalid partition: `../gpu` is not a safe name"));
/// ```
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
                short(value)
            ),
        ))
    }
}

/// Check a shell identifier (`^[A-Za-z_][A-Za-z0-9_]*$`, at most 128 characters), for
/// env and secret names. The error is [`Error::Invalid`] naming `field` and the fix.
///
/// ```
/// use slurm_core::validate_shell_name;
/// assert!(validate_shell_name("env", "HF_HOME").is_ok());
/// assert!(validate_shell_name("env", "1X").unwrap_err().to_string().starts_with("invalid env:"));
/// ```
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
                short(value)
            ),
        ))
    }
}

/// At most 40 characters of `text`, for error messages.
pub(crate) fn short(text: &str) -> String {
    let mut out: String = text.chars().take(40).collect();
    if text.chars().count() > 40 {
        out.push('…');
    }
    out
}
