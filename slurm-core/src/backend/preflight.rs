//! The answer of a preflight: one check per line, each with what it looked at, what it
//! found and, when it failed, the remedy.

use std::fmt;

use serde::Serialize;

pub use crate::error::CheckKind;
use crate::{Error, Result};

/// One preflight check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PreflightCheck {
    /// What the check looked at; decide by this, not by the name.
    pub kind: CheckKind,
    /// The check's name for people, e.g. `ssh`, `partition gpu`.
    pub check: String,
    /// Whether it passed.
    pub ok: bool,
    /// What was found.
    pub detail: String,
    /// What to do when it failed (empty when it passed).
    pub remedy: String,
}

/// The outcome of a preflight: one [`PreflightCheck`] per line.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct PreflightReport {
    /// The checks, in the order they ran.
    pub checks: Vec<PreflightCheck>,
}

impl PreflightReport {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }

    /// The checks that failed.
    pub fn failures(&self) -> impl Iterator<Item = &PreflightCheck> {
        self.checks.iter().filter(|c| !c.ok)
    }

    /// `Ok(())` when every check passed, else [`Error::Preflight`] for the first failure.
    pub fn into_result(self) -> Result<()> {
        match self.checks.into_iter().find(|c| !c.ok) {
            None => Ok(()),
            Some(failed) => Err(Error::Preflight {
                kind: failed.kind,
                check: failed.check,
                message: failed.detail,
                remedy: failed.remedy,
            }),
        }
    }

    /// Add a check: `remedy` is kept only when it failed.
    pub fn push(
        &mut self,
        kind: CheckKind,
        check: impl Into<String>,
        ok: bool,
        detail: impl Into<String>,
        remedy: impl Into<String>,
    ) {
        self.checks.push(PreflightCheck {
            kind,
            check: check.into(),
            ok,
            detail: detail.into(),
            remedy: if ok { String::new() } else { remedy.into() },
        });
    }
}

impl fmt::Display for PreflightReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self.checks.iter().map(|c| c.check.len()).max().unwrap_or(0);
        for c in &self.checks {
            write!(
                f,
                "{} {:width$}  {}",
                if c.ok { "ok  " } else { "FAIL" },
                c.check,
                c.detail
            )?;
            if !c.ok {
                write!(f, "\n     {:width$}  remedy: {}", "", c.remedy)?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_fails_with_the_first_failure() {
        let mut report = PreflightReport::default();
        report.push(CheckKind::Scheduler, "a", true, "fine", "none");
        report.push(CheckKind::Storage, "b", false, "broken", "fix b");
        assert!(!report.passed());
        let text = report.to_string();
        assert!(
            text.contains("FAIL b") && text.contains("remedy: fix b"),
            "{text}"
        );
        let err = report.into_result().unwrap_err();
        assert!(err.to_string().contains("fix b"));
        assert!(matches!(
            err,
            Error::Preflight {
                kind: CheckKind::Storage,
                ..
            }
        ));
    }
}
