//! `scontrol show job` as a fallback when sacct cannot answer: key=value records, one per job.

use std::collections::BTreeMap;

use super::id::SlurmJobId;
use crate::names::short;
use crate::slurm::states::SlurmState;
use crate::{Error, Result};

/// One job as `scontrol show job` prints it: every key and value, plus typed
/// accessors for the fields slurm-run reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScontrolJob {
    /// Every `Key=Value` pair (a value with spaces is kept whole).
    pub fields: BTreeMap<String, String>,
}

impl ScontrolJob {
    /// The raw value of `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }

    /// `JobId` (for an array task, its own number).
    pub(crate) fn job_id(&self) -> Result<SlurmJobId> {
        let v = self
            .get("JobId")
            .ok_or_else(|| Error::parse("scontrol show job", "no JobId field"))?;
        SlurmJobId::parse(v)
    }

    /// `JobState`, parsed.
    pub(crate) fn state(&self) -> Result<SlurmState> {
        SlurmState::parse(self.get("JobState").unwrap_or(""))
    }

    /// `Reason` (absent when `None`).
    pub(crate) fn reason(&self) -> Option<&str> {
        self.get("Reason").filter(|r| *r != "None")
    }

    /// The exit code of `ExitCode=2:0`.
    pub(crate) fn exit_code(&self) -> Option<i32> {
        self.get("ExitCode")?.split(':').next()?.parse().ok()
    }

    /// `NodeList` (absent when `(null)`).
    pub(crate) fn nodelist(&self) -> Option<&str> {
        self.get("NodeList")
            .filter(|n| *n != "(null)" && !n.is_empty())
    }
}

/// Whether `token` opens a new `Key=` pair (a key is letters, digits, `_`, `/`, `:`, starting with a letter).
fn split_key(token: &str) -> Option<(&str, &str)> {
    let (key, value) = token.split_once('=')?;
    let mut chars = key.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '/' || c == ':'))
    .then_some((key, value))
}

/// Parse `scontrol show job` output, multi-line (records separated by blank
/// lines) or `--oneliner` (one record per line). A record starts at each
/// `JobId=`. A token without `=` continues the previous value (values may hold
/// spaces). Unknown-id stderr is for [`is_invalid_job_id`](crate::slurm::is_invalid_job_id).
pub(crate) fn parse_scontrol_show_job(stdout: &str) -> Result<Vec<ScontrolJob>> {
    let mut jobs: Vec<ScontrolJob> = Vec::new();
    let mut current: Option<BTreeMap<String, String>> = None;
    let mut last_key: Option<String> = None;
    for (n, line) in stdout.lines().enumerate() {
        if line.trim().is_empty() {
            if let Some(fields) = current.take() {
                jobs.push(ScontrolJob { fields });
            }
            last_key = None;
            continue;
        }
        for token in line.split_whitespace() {
            match split_key(token) {
                Some((key, value)) => {
                    if key == "JobId" {
                        if let Some(fields) = current.take() {
                            jobs.push(ScontrolJob { fields });
                        }
                        current = Some(BTreeMap::new());
                    }
                    let fields = current.as_mut().ok_or_else(|| {
                        Error::parse(
                            "scontrol show job output",
                            format!(
                                "line {}: a record must start with JobId=: `{}`",
                                n + 1,
                                short(line)
                            ),
                        )
                    })?;
                    fields.insert(key.to_string(), value.to_string());
                    last_key = Some(key.to_string());
                }
                None => {
                    let (Some(fields), Some(key)) = (current.as_mut(), last_key.as_ref()) else {
                        return Err(Error::parse(
                            "scontrol show job output",
                            format!("line {}: expected Key=Value, got `{}`", n + 1, short(token)),
                        ));
                    };
                    if let Some(v) = fields.get_mut(key) {
                        v.push(' ');
                        v.push_str(token);
                    }
                }
            }
        }
    }
    if let Some(fields) = current.take() {
        jobs.push(ScontrolJob { fields });
    }
    for job in &jobs {
        job.job_id()
            .map_err(|e| Error::parse("scontrol show job output", format!("bad JobId: {e}")))?;
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::states::SlurmBaseState;

    const MULTI: &str = "\
JobId=42 JobName=train-abc123
   UserId=slurmrun(1001) GroupId=slurmrun(1001) MCS_label=N/A
   Priority=1 Nice=0 Account=(null) QOS=normal
   JobState=CANCELLED Reason=None Dependency=(null)
   Requeue=1 Restarts=2 BatchFlag=1 Reboot=0 ExitCode=0:15
   NodeList=n[1-2]
   TRES=cpu=64,mem=1G,node=2,billing=64,gres/gpu=16
   Command=/shared/job dir/run.sbatch
   Comment=two words

JobId=43 ArrayJobId=40 ArrayTaskId=3 JobName=arr
   JobState=PENDING Reason=BeginTime NodeList=(null) ExitCode=0:0
";

    #[test]
    fn multi_line_records() {
        let jobs = parse_scontrol_show_job(MULTI).unwrap();
        assert_eq!(jobs.len(), 2);
        let a = &jobs[0];
        assert_eq!(a.job_id().unwrap().get(), 42);
        assert_eq!(a.state().unwrap().base, SlurmBaseState::Cancelled);
        assert_eq!(a.reason(), None);
        assert_eq!(a.exit_code(), Some(0));
        assert_eq!(a.get("Restarts"), Some("2"));
        assert_eq!(a.nodelist(), Some("n[1-2]"));
        assert_eq!(
            a.get("TRES"),
            Some("cpu=64,mem=1G,node=2,billing=64,gres/gpu=16")
        );
        assert_eq!(a.get("Command"), Some("/shared/job dir/run.sbatch"));
        assert_eq!(a.get("Comment"), Some("two words"));
        assert_eq!(a.get("ArrayTaskId"), None);
        let b = &jobs[1];
        assert_eq!(b.reason(), Some("BeginTime"));
        assert_eq!(b.nodelist(), None);
        assert_eq!(
            (b.get("ArrayJobId"), b.get("ArrayTaskId")),
            (Some("40"), Some("3"))
        );
    }

    #[test]
    fn oneliner_records_and_odd_input() {
        let out = "JobId=7 JobName=a JobState=RUNNING Reason=None\nJobId=8 JobName=b JobState=COMPLETED Reason=None\n";
        let jobs = parse_scontrol_show_job(out).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[1].state().unwrap().base, SlurmBaseState::Completed);
        assert!(parse_scontrol_show_job("").unwrap().is_empty());
        for bad in ["JobName=a", "hello world", "JobId=abc JobState=RUNNING"] {
            assert_eq!(
                parse_scontrol_show_job(bad).unwrap_err().kind(),
                crate::ErrorKind::Parse,
                "{bad}"
            );
        }
    }
}
