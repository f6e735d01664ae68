//! Why a `SUBMITTING` record's submit is not settled yet, as a typed state: the
//! scheduler could not answer (or an attempt may still be running sbatch), or several
//! of its jobs carry the record's name and a person must choose.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What keeps a submit from being settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnsettledKind {
    /// The outcome is unknown and the scheduler has not answered yet (or an attempt may
    /// still be running sbatch): a later status settles it.
    Unanswered,
    /// Several SLURM jobs carry the record's name: a person decides which to keep;
    /// `cancel` cancels them all.
    SeveralJobs,
}

/// Why a submit is not settled: its kind, and the words of the settle that found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unsettled {
    /// What keeps it unsettled.
    pub kind: UnsettledKind,
    /// What the settle found (redacted).
    pub why: String,
}

impl Unsettled {
    /// Not answered yet, because `why`.
    pub fn unanswered(why: impl Into<String>) -> Self {
        Unsettled {
            kind: UnsettledKind::Unanswered,
            why: why.into(),
        }
    }

    /// Several jobs carry the name, as `why` lists.
    pub fn several_jobs(why: impl Into<String>) -> Self {
        Unsettled {
            kind: UnsettledKind::SeveralJobs,
            why: why.into(),
        }
    }
}

impl fmt::Display for Unsettled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.why)
    }
}

/// Records of schema 2 and older keep only the settle's words: their kind is read from
/// the one phrase both writers of "several jobs" used ("SLURM jobs carry").
impl<'de> Deserialize<'de> for Unsettled {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Typed { kind: UnsettledKind, why: String },
            Words(String),
        }
        Ok(match Form::deserialize(deserializer)? {
            Form::Typed { kind, why } => Unsettled { kind, why },
            Form::Words(why) if why.contains("SLURM jobs carry") => Unsettled::several_jobs(why),
            Form::Words(why) => Unsettled::unanswered(why),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_and_older_forms_read_back() {
        let typed = Unsettled::several_jobs("2 SLURM jobs carry its name (5, 6)");
        let json = serde_json::to_string(&typed).unwrap();
        assert_eq!(
            json,
            r#"{"kind":"several_jobs","why":"2 SLURM jobs carry its name (5, 6)"}"#
        );
        assert_eq!(serde_json::from_str::<Unsettled>(&json).unwrap(), typed);
        // Schema 2 kept the words only; both writers' wordings of "several" read as such.
        for words in [
            "\"2 SLURM jobs carry its name (5, 6); a person decides\"",
            "\"2 SLURM jobs carry the name job-1 (5, 6); a person must decide\"",
        ] {
            let old: Unsettled = serde_json::from_str(words).unwrap();
            assert_eq!(old.kind, UnsettledKind::SeveralJobs, "{words}");
        }
        let old: Unsettled = serde_json::from_str("\"sacct: Problem talking\"").unwrap();
        assert_eq!(old, Unsettled::unanswered("sacct: Problem talking"));
    }
}
