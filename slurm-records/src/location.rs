//! [`RecordsLocation`]: the one setting that chooses where records live
//! (`SLURM_RUN_RECORDS`, or slurmctl's `--records`), and the store it opens.

use std::fmt;
use std::path::{Path, PathBuf};

use slurm_core::{Error, FileRecordStore, JobId, RecordStore, Result};

use crate::postgres::without_password;
use crate::{PostgresRecordStore, SqliteRecordStore};

/// The environment variable that chooses where records live.
pub const RECORDS_VAR: &str = "SLURM_RUN_RECORDS";

/// The database file of a state folder when nothing else is chosen.
pub const DEFAULT_DATABASE: &str = "records.sqlite";

/// Where records live: `sqlite://PATH`, `postgres://...` (or `postgresql://...`), or a
/// folder of JSON records (any other text is a folder's path).
#[derive(Clone, PartialEq, Eq)]
pub enum RecordsLocation {
    /// A folder of one JSON file per record ([`FileRecordStore`]).
    Folder(PathBuf),
    /// One SQLite database file ([`SqliteRecordStore`]).
    Sqlite(PathBuf),
    /// A PostgreSQL database, by its URL ([`PostgresRecordStore`]).
    Postgres(String),
}

impl fmt::Debug for RecordsLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the password of a URL.
        write!(f, "RecordsLocation({self})")
    }
}

impl fmt::Display for RecordsLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordsLocation::Folder(dir) => write!(f, "{}", dir.display()),
            RecordsLocation::Sqlite(path) => write!(f, "sqlite://{}", path.display()),
            RecordsLocation::Postgres(url) => f.write_str(&without_password(url)),
        }
    }
}

/// Whether `dir` holds JSON records (files `<id>.json` the file store wrote).
fn holds_json_records(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|entry| {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        !name.starts_with('.')
            && name
                .strip_suffix(".json")
                .is_some_and(|stem| JobId::parse(stem).is_ok())
    })
}

impl RecordsLocation {
    /// Read a location as `SLURM_RUN_RECORDS` gives it: `sqlite://PATH` (relative or
    /// absolute: `sqlite:///var/lib/runs/records.sqlite`), `postgres://...` or
    /// `postgresql://...`, else the path of a folder of JSON records.
    pub fn parse(text: &str) -> Result<Self> {
        let text = text.trim();
        let refuse = |why: String| {
            Error::config(
                RECORDS_VAR,
                format!("{why}; give sqlite://PATH, postgres://user:password@host:port/database, or a folder of JSON records"),
            )
        };
        if text.is_empty() {
            return Err(refuse("empty".into()));
        }
        if let Some(path) = text.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(refuse("`sqlite://` names no database file".into()));
            }
            return Ok(RecordsLocation::Sqlite(PathBuf::from(path)));
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(RecordsLocation::Postgres(text.to_string()));
        }
        if let Some((scheme, _)) = text.split_once("://") {
            return Err(refuse(format!(
                "`{scheme}://` is not a store slurm-run knows"
            )));
        }
        Ok(RecordsLocation::Folder(PathBuf::from(text)))
    }

    /// Where the records of state folder `state_dir` live when nothing is chosen: its
    /// JSON records when it holds some (and no database yet), else its SQLite database
    /// ([`DEFAULT_DATABASE`]): a new state folder's records go to SQLite.
    pub fn default_for(state_dir: &Path) -> Self {
        let database = state_dir.join(DEFAULT_DATABASE);
        if !database.exists() && holds_json_records(state_dir) {
            RecordsLocation::Folder(state_dir.to_path_buf())
        } else {
            RecordsLocation::Sqlite(database)
        }
    }

    /// The location `lookup` names (by [`RECORDS_VAR`]; empty counts as unset), else
    /// [`RecordsLocation::default_for`] `state_dir`.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>, state_dir: &Path) -> Result<Self> {
        match lookup(RECORDS_VAR).filter(|v| !v.trim().is_empty()) {
            Some(text) => Self::parse(&text),
            None => Ok(Self::default_for(state_dir)),
        }
    }

    /// [`RecordsLocation::from_lookup`] on the process environment.
    pub fn from_env(state_dir: &Path) -> Result<Self> {
        Self::from_lookup(|name| std::env::var(name).ok(), state_dir)
    }

    /// Open the store (a folder or a database file is made when missing; a server is
    /// connected to).
    pub fn open(&self) -> Result<Box<dyn RecordStore>> {
        Ok(match self {
            RecordsLocation::Folder(dir) => Box::new(FileRecordStore::new(dir)?),
            RecordsLocation::Sqlite(path) => Box::new(SqliteRecordStore::open(path)?),
            RecordsLocation::Postgres(url) => Box::new(PostgresRecordStore::connect(url)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_form_of_the_setting_names_its_store_and_bad_ones_say_the_fix() {
        assert_eq!(
            RecordsLocation::parse("sqlite:///var/lib/runs/records.sqlite").unwrap(),
            RecordsLocation::Sqlite("/var/lib/runs/records.sqlite".into())
        );
        assert_eq!(
            RecordsLocation::parse("sqlite://records.sqlite").unwrap(),
            RecordsLocation::Sqlite("records.sqlite".into())
        );
        let url = "postgres://run:s3cret@db:5432/records";
        let pg = RecordsLocation::parse(url).unwrap();
        assert_eq!(pg, RecordsLocation::Postgres(url.into()));
        assert_eq!(pg.to_string(), "postgres://run@db:5432/records");
        assert!(!format!("{pg:?}").contains("s3cret"));
        assert_eq!(
            RecordsLocation::parse("postgresql://db/records").unwrap(),
            RecordsLocation::Postgres("postgresql://db/records".into())
        );
        assert_eq!(
            RecordsLocation::parse(" /home/me/.slurm-run/jobs ").unwrap(),
            RecordsLocation::Folder("/home/me/.slurm-run/jobs".into())
        );
        for bad in ["", "  ", "sqlite://", "mysql://db/records"] {
            let error = RecordsLocation::parse(bad).unwrap_err();
            let text = error.to_string();
            assert!(
                text.contains(RECORDS_VAR) && text.contains("sqlite://PATH"),
                "{text}"
            );
        }
    }

    #[test]
    fn a_new_state_folder_uses_sqlite_and_one_of_json_records_keeps_them() {
        let fresh = tempfile::tempdir().unwrap();
        assert_eq!(
            RecordsLocation::default_for(fresh.path()),
            RecordsLocation::Sqlite(fresh.path().join(DEFAULT_DATABASE))
        );
        let missing = fresh.path().join("not-yet");
        assert_eq!(
            RecordsLocation::default_for(&missing),
            RecordsLocation::Sqlite(missing.join(DEFAULT_DATABASE))
        );
        // The knob cache and stray files are no records.
        std::fs::create_dir(fresh.path().join("clusters")).unwrap();
        std::fs::write(fresh.path().join("clusters/testbed.json"), "{}").unwrap();
        std::fs::write(fresh.path().join(".tmp-x.json"), "{}").unwrap();
        assert!(matches!(
            RecordsLocation::default_for(fresh.path()),
            RecordsLocation::Sqlite(_)
        ));
        std::fs::write(fresh.path().join("hello-abcdef.json"), "{}").unwrap();
        assert_eq!(
            RecordsLocation::default_for(fresh.path()),
            RecordsLocation::Folder(fresh.path().to_path_buf())
        );
        // Once migrated (the database exists), the database.
        std::fs::write(fresh.path().join(DEFAULT_DATABASE), "").unwrap();
        assert!(matches!(
            RecordsLocation::default_for(fresh.path()),
            RecordsLocation::Sqlite(_)
        ));
        let lookup = |name: &str| (name == RECORDS_VAR).then(|| "/elsewhere".to_string());
        assert_eq!(
            RecordsLocation::from_lookup(lookup, fresh.path()).unwrap(),
            RecordsLocation::Folder("/elsewhere".into())
        );
        let empty = |_: &str| Some(" ".to_string());
        assert!(matches!(
            RecordsLocation::from_lookup(empty, fresh.path()).unwrap(),
            RecordsLocation::Sqlite(_)
        ));
    }
}
