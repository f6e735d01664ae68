//! The answer of a preflight: one check per line, each with what it looked at, what it
//! found and, when it failed, the remedy.

use std::fmt;

use serde::Serialize;

pub(crate) use crate::error::CheckKind;
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
    /// Passed in a degraded mode: jobs can run, but something works less well (the
    /// detail says what, the remedy how to restore it), e.g. a cluster without accounting.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub degraded: bool,
    /// What was found.
    pub detail: String,
    /// What to do when it failed or is degraded (empty when it passed fully).
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
            degraded: false,
            detail: detail.into(),
            remedy: if ok { String::new() } else { remedy.into() },
        });
    }

    /// Add a check that passed in a degraded mode (jobs run; `detail` says what works
    /// less well, `remedy` how to restore it).
    pub fn push_degraded(
        &mut self,
        kind: CheckKind,
        check: impl Into<String>,
        detail: impl Into<String>,
        remedy: impl Into<String>,
    ) {
        self.checks.push(PreflightCheck {
            kind,
            check: check.into(),
            ok: true,
            degraded: true,
            detail: detail.into(),
            remedy: remedy.into(),
        });
    }

    /// The checks that passed in a degraded mode.
    pub fn degraded(&self) -> impl Iterator<Item = &PreflightCheck> {
        self.checks.iter().filter(|c| c.degraded)
    }
}

impl fmt::Display for PreflightReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self.checks.iter().map(|c| c.check.len()).max().unwrap_or(0);
        for c in &self.checks {
            write!(
                f,
                "{} {:width$}  {}",
                match (c.ok, c.degraded) {
                    (true, false) => "ok  ",
                    (true, true) => "WARN",
                    (false, _) => "FAIL",
                },
                c.check,
                c.detail
            )?;
            if !c.ok || c.degraded {
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

    #[test]
    fn a_degraded_check_passes_and_says_so() {
        let mut report = PreflightReport::default();
        report.push_degraded(
            CheckKind::Accounting,
            "accounting (sacct)",
            "disabled",
            "enable slurmdbd",
        );
        assert!(report.passed());
        assert_eq!(report.degraded().count(), 1);
        let text = report.to_string();
        assert!(text.starts_with("WARN accounting"), "{text}");
        assert!(text.contains("remedy: enable slurmdbd"), "{text}");
        report.into_result().unwrap();
    }
}
