//! SLURM job ids: the plain numeric id of a job, and the id column of squeue / sacct / scontrol (arrays, het jobs, steps).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::names::short;
use crate::{Error, Result};

/// The numeric id of one SLURM job, as `sbatch --parsable` prints it (`123`).
///
/// Array tasks (`123_7`), pending array ranges (`123_[1-5]`), het components
/// (`123+0`) and steps (`123.batch`, `123.0`) are not job ids; parse those with
/// `SlurmIdField::parse`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "IdRepr", into = "IdRepr")]
pub struct SlurmJobId(u64);

/// Serde form of [`SlurmJobId`]: a number or a numeric string.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum IdRepr {
    Num(u64),
    Text(String),
}

impl TryFrom<IdRepr> for SlurmJobId {
    type Error = Error;
    fn try_from(value: IdRepr) -> Result<Self> {
        match value {
            IdRepr::Num(n) => SlurmJobId::new(n),
            IdRepr::Text(s) => SlurmJobId::parse(&s),
        }
    }
}

impl From<SlurmJobId> for IdRepr {
    fn from(value: SlurmJobId) -> Self {
        IdRepr::Num(value.0)
    }
}

impl SlurmJobId {
    /// A job id from its number; zero is refused (SLURM never hands it out).
    pub fn new(id: u64) -> Result<Self> {
        if id == 0 {
            return Err(Error::invalid(
                "slurm job id",
                "0 is not a SLURM job id; give the number sbatch printed",
            ));
        }
        Ok(SlurmJobId(id))
    }

    /// Parse a plain numeric id (surrounding whitespace allowed). Anything else,
    /// including array and step forms, is an error naming the form.
    pub fn parse(text: &str) -> Result<Self> {
        let t = text.trim();
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            let hint = if t.contains('_') || t.contains('.') || t.contains('+') {
                "an array task, het component or step is not a job; give the job's own number"
            } else {
                "give the digits sbatch printed, e.g. 12345"
            };
            return Err(Error::invalid(
                "slurm job id",
                format!("`{}` is not a plain SLURM job id; {hint}", short(t)),
            ));
        }
        let n: u64 = t.parse().map_err(|_| {
            Error::invalid(
                "slurm job id",
                format!("`{}` is too large for a SLURM job id", short(t)),
            )
        })?;
        Self::new(n)
    }

    /// The number.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for SlurmJobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for SlurmJobId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        SlurmJobId::parse(s)
    }
}

/// The array part of an id column.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum ArrayPart {
    /// One task: `123_7`.
    Task(u32),
    /// Tasks not yet split off the pending array record: `123_[1-5%2]` (the text inside brackets).
    Pending(String),
}

/// A parsed id column of squeue, sacct or scontrol: the job, and what part of
/// it the row describes. Only [`SlurmIdField::is_job_itself`] rows describe the job.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SlurmIdField {
    /// The job (or array master) number.
    pub job: SlurmJobId,
    /// The array task or pending range, for array jobs.
    pub array: Option<ArrayPart>,
    /// The het-job component (`123+1`).
    pub het: Option<u32>,
    /// The step name (`batch`, `extern`, `interactive`, `0`, `1`...).
    pub step: Option<String>,
}

impl SlurmIdField {
    /// Parse `123`, `123_7`, `123_[1-5]`, `123+0`, `123.batch`, `123_7.0`, ...
    pub(crate) fn parse(text: &str) -> Result<Self> {
        let bad = |why: &str| {
            Error::parse(
                "SLURM job id field",
                format!("`{}`: {why}", short(text.trim())),
            )
        };
        let t = text.trim();
        let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        if digits_end == 0 {
            return Err(bad("does not start with a job number"));
        }
        let job = SlurmJobId::parse(&t[..digits_end]).map_err(|_| bad("bad job number"))?;
        let mut rest = &t[digits_end..];
        let mut field = SlurmIdField {
            job,
            array: None,
            het: None,
            step: None,
        };
        if let Some(after) = rest.strip_prefix('_') {
            if let Some(inner) = after.strip_prefix('[') {
                let close = inner.find(']').ok_or_else(|| bad("unclosed array range"))?;
                let range = &inner[..close];
                if range.is_empty()
                    || !range
                        .bytes()
                        .all(|b| b.is_ascii_digit() || b",-%:".contains(&b))
                {
                    return Err(bad("bad array range"));
                }
                field.array = Some(ArrayPart::Pending(range.to_string()));
                rest = &inner[close + 1..];
            } else {
                let end = after
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(after.len());
                let task: u32 = after[..end].parse().map_err(|_| bad("bad array task"))?;
                field.array = Some(ArrayPart::Task(task));
                rest = &after[end..];
            }
        } else if let Some(after) = rest.strip_prefix('+') {
            let end = after
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(after.len());
            let het: u32 = after[..end].parse().map_err(|_| bad("bad het component"))?;
            field.het = Some(het);
            rest = &after[end..];
        }
        if let Some(step) = rest.strip_prefix('.') {
            if step.is_empty()
                || !step
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'+')
            {
                return Err(bad("bad step name"));
            }
            field.step = Some(step.to_string());
            rest = "";
        }
        if !rest.is_empty() {
            return Err(bad("unexpected text after the job number"));
        }
        Ok(field)
    }

    /// Whether the row describes the job itself (not an array task, het component or step).
    #[cfg(test)]
    pub(crate) fn is_job_itself(&self) -> bool {
        self.array.is_none() && self.het.is_none() && self.step.is_none()
    }

    /// Whether the row stands for a whole job in a listing by name: a job itself, an
    /// array by any of its task or pending-range rows, a heterogeneous job by its leader.
    pub(crate) fn names_a_job(&self) -> bool {
        self.het.is_none_or(|h| h == 0) && self.step.is_none()
    }

    /// The component of a heterogeneous job the row describes (`123+1`: 1), not a step.
    pub(crate) fn component(&self) -> Option<u32> {
        self.het
            .filter(|_| self.array.is_none() && self.step.is_none())
    }

    /// Whether the row describes job `job` itself (`task` None) or its array task
    /// `task`: that task's own row (`123_4`) or a pending range holding it
    /// (`123_[4-9%2]`); a heterogeneous job by its leader (`123+0`); never a step or
    /// another component.
    pub(crate) fn describes(&self, job: SlurmJobId, task: Option<u32>) -> bool {
        if self.job != job || self.het.is_some_and(|h| h != 0) || self.step.is_some() {
            return false;
        }
        match (task, &self.array) {
            (None, None) => true,
            (Some(t), Some(ArrayPart::Task(own))) => *own == t,
            (Some(t), Some(ArrayPart::Pending(range))) => range_holds(range, t),
            _ => false,
        }
    }

    /// Whether the row is a step of job `job` itself or of its array task `task` (of a
    /// heterogeneous job: a step of any component).
    pub(crate) fn is_step_of(&self, job: SlurmJobId, task: Option<u32>) -> bool {
        let own = match (&self.array, task) {
            (None, None) => true,
            (Some(ArrayPart::Task(own)), Some(t)) => *own == t,
            _ => false,
        };
        self.job == job && self.step.is_some() && own
    }

    /// Whether the row describes a step (`.batch`, `.extern`, `.0`, ...).
    pub(crate) fn is_step(&self) -> bool {
        self.step.is_some()
    }
}

/// Whether a pending array range (`4-9%2`, `1,3,5-7`, `0-15:4`) holds task `task`.
pub(crate) fn range_holds(range: &str, task: u32) -> bool {
    let list = range.split('%').next().unwrap_or("");
    list.split(',').any(|part| {
        let (span, step) = match part.split_once(':') {
            Some((span, step)) => (span, step.parse::<u32>().unwrap_or(1).max(1)),
            None => (part, 1),
        };
        let (low, high) = span.split_once('-').unwrap_or((span, span));
        match (low.parse::<u32>(), high.parse::<u32>()) {
            (Ok(low), Ok(high)) => task >= low && task <= high && (task - low).is_multiple_of(step),
            _ => false,
        }
    })
}

impl fmt::Display for SlurmIdField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.job)?;
        match &self.array {
            Some(ArrayPart::Task(t)) => write!(f, "_{t}")?,
            Some(ArrayPart::Pending(r)) => write!(f, "_[{r}]")?,
            None => {}
        }
        if let Some(h) = self.het {
            write!(f, "+{h}")?;
        }
        if let Some(s) = &self.step {
            write!(f, ".{s}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_ids_parse_and_everything_else_is_refused() {
        assert_eq!(SlurmJobId::parse("123").unwrap().get(), 123);
        assert_eq!(SlurmJobId::parse(" 42\n").unwrap().get(), 42);
        for bad in [
            "",
            "0",
            "abc",
            "123_7",
            "123_[1-5]",
            "123.batch",
            "123.0",
            "123+0",
            "-5",
            "+5",
            "99999999999999999999999",
        ] {
            assert!(SlurmJobId::parse(bad).is_err(), "{bad}");
        }
        assert!(SlurmJobId::parse("123_7")
            .unwrap_err()
            .to_string()
            .contains("array task"));
    }

    #[test]
    fn id_fields_tell_jobs_from_tasks_and_steps() {
        let job = SlurmIdField::parse("123").unwrap();
        assert!(job.is_job_itself());
        let task = SlurmIdField::parse("123_7").unwrap();
        assert_eq!(task.array, Some(ArrayPart::Task(7)));
        assert!(!task.is_job_itself());
        let range = SlurmIdField::parse("123_[1-5%2]").unwrap();
        assert_eq!(range.array, Some(ArrayPart::Pending("1-5%2".into())));
        assert!(!range.is_job_itself());
        for (text, step) in [
            ("123.batch", "batch"),
            ("123.0", "0"),
            ("123.extern", "extern"),
        ] {
            let f = SlurmIdField::parse(text).unwrap();
            assert_eq!(f.step.as_deref(), Some(step));
            assert!(f.is_step() && !f.is_job_itself());
            assert_eq!(f.job.get(), 123);
        }
        let het = SlurmIdField::parse("123+1.0").unwrap();
        assert_eq!((het.het, het.step.as_deref()), (Some(1), Some("0")));
        let task_step = SlurmIdField::parse("123_7.batch").unwrap();
        assert_eq!(task_step.to_string(), "123_7.batch");
        for bad in [
            "", "_7", "123_", "123_[", "123_[]", "123.", "123x", "123_7x", "123.a b",
        ] {
            assert!(SlurmIdField::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rows_describe_a_job_or_one_of_its_tasks() {
        let job = SlurmJobId::new(123).unwrap();
        let row = |t: &str| SlurmIdField::parse(t).unwrap();
        assert!(row("123").describes(job, None));
        assert!(!row("123").describes(job, Some(1)));
        assert!(row("123_4").describes(job, Some(4)));
        assert!(!row("123_4").describes(job, Some(5)));
        assert!(!row("123_4").describes(job, None));
        assert!(row("123_[4-9%2]").describes(job, Some(7)));
        assert!(!row("123_[4-9%2]").describes(job, Some(3)));
        assert!(row("123_[1,3,10-12]").describes(job, Some(11)));
        assert!(row("123_[0-15:4]").describes(job, Some(8)));
        assert!(!row("123_[0-15:4]").describes(job, Some(9)));
        assert!(!row("123_4.batch").describes(job, Some(4)));
        assert!(row("123_4.batch").is_step_of(job, Some(4)));
        assert!(!row("123_4.batch").is_step_of(job, None));
        assert!(row("123.batch").is_step_of(job, None));
        assert!(!row("124_4").describes(job, Some(4)));
        // A heterogeneous job: its leader stands for it, other components do not.
        assert!(row("123+0").describes(job, None));
        assert!(!row("123+1").describes(job, None));
        assert!(row("123+1.0").is_step_of(job, None));
        assert_eq!(row("123+1").component(), Some(1));
        assert_eq!(row("123+1.0").component(), None);
        assert!(row("123+0").names_a_job() && !row("123+1").names_a_job());
        assert!(row("123_4").names_a_job() && row("123_[5-9]").names_a_job());
        assert!(!row("123+0.batch").names_a_job() && !row("123_4.0").names_a_job());
    }

    #[test]
    fn serde_accepts_numbers_and_strings() {
        let id: SlurmJobId = serde_json::from_str("\"77\"").unwrap();
        assert_eq!(serde_json::to_string(&id).unwrap(), "77");
        assert!(serde_json::from_str::<SlurmJobId>("0").is_err());
        assert!(serde_json::from_str::<SlurmJobId>("\"7_1\"").is_err());
    }
}
