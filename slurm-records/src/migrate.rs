//! Moving a folder of JSON records into another store (`slurmctl records migrate`),
//! losing nothing: each record is copied under its lock in the folder, read back from
//! the new store and compared, and only then moved out of the folder (into its
//! `moved/` folder, kept as it was). A record that cannot be read, whose submit is in
//! progress, or that the new store holds otherwise, stays where it was and is named in
//! the [`Migration`]; running the migration again moves what is left.

use std::fmt;
use std::path::Path;

use slurm_core::{Error, ErrorKind, FileRecordStore, JobId, RecordFilter, RecordStore, Result};

/// What a migration did.
#[derive(Debug, Default)]
pub struct Migration {
    /// Records copied into the new store and moved out of the folder.
    pub moved: Vec<JobId>,
    /// Records the new store held already, the same (an earlier run copied them): moved
    /// out of the folder.
    pub already: Vec<JobId>,
    /// What stayed in the folder, and why (nothing of it was changed).
    pub left: Vec<(String, Error)>,
}

impl Migration {
    /// Whether every record of the folder is in the new store now.
    pub fn complete(&self) -> bool {
        self.left.is_empty()
    }
}

impl fmt::Display for Migration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} record(s) moved, {} already there, {} left in the folder",
            self.moved.len(),
            self.already.len(),
            self.left.len()
        )?;
        for (what, why) in &self.left {
            write!(f, "\n  {what}: {why}")?;
        }
        Ok(())
    }
}

/// Move every record of the folder `folder` into `to` (see the module's documentation).
pub fn migrate_folder(folder: &Path, to: &dyn RecordStore) -> Result<Migration> {
    if !folder.is_dir() {
        return Err(Error::NotFound(format!(
            "the record folder {} (nothing to migrate)",
            folder.display()
        )));
    }
    let from = FileRecordStore::new(folder)?;
    let listing = from.list_readable(&RecordFilter::any())?;
    let mut migration = Migration::default();
    for error in listing.unreadable {
        migration.left.push(("a record file".into(), error));
    }
    for record in listing.records {
        let id = record.id().clone();
        if from.submit_in_progress(&id)? == Some(true) {
            migration.left.push((
                id.to_string(),
                Error::invalid(
                    "records",
                    "its submit is in progress; run the migration again once it has returned",
                ),
            ));
            continue;
        }
        let mut already = false;
        let moved = from.move_out(&id, |current| {
            match to.open(current) {
                Ok(()) => {}
                Err(error) if error.kind() == ErrorKind::Invalid => already = true,
                Err(error) => return Err(error),
            }
            let stored = to.get(current.id())?;
            if &stored != current {
                return Err(Error::invalid(
                    "records",
                    format!(
                        "the new store holds another record {} (updated {}, state {}) than the folder (updated {}, state {}); settle which to keep, then run the migration again",
                        current.id(),
                        stored.updated_at(),
                        stored.state(),
                        current.updated_at(),
                        current.state()
                    ),
                ));
            }
            Ok(())
        });
        match moved {
            Ok(()) if already => migration.already.push(id),
            Ok(()) => migration.moved.push(id),
            // Changed or removed by another process meanwhile: the next run sees it.
            Err(error) => migration.left.push((id.to_string(), error)),
        }
    }
    Ok(migration)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SqliteRecordStore;
    use slurm_core::{JobRecord, JobSpec, JobState, Mark, RemotePath, TransitionSource};

    fn record(label: &str) -> JobRecord {
        let id = JobId::mint(label);
        let dir = RemotePath::parse("/shared/results")
            .unwrap()
            .join(id.as_str())
            .unwrap();
        let mut spec = JobSpec::new(label, "true");
        spec.labels.insert("arch".into(), "dino".into());
        JobRecord::new(id, &spec, dir).unwrap()
    }

    #[test]
    fn a_folder_moves_into_the_database_losing_nothing_and_again_moves_what_was_left() {
        let state = tempfile::tempdir().unwrap();
        let folder = FileRecordStore::new(state.path()).unwrap();
        let mut ids = Vec::new();
        for (i, label) in ["one", "two", "three"].iter().enumerate() {
            let r = record(label);
            folder.open(&r).unwrap();
            if i > 0 {
                folder
                    .mark(
                        r.id(),
                        Mark::new(JobState::Pending, TransitionSource::Agent),
                    )
                    .unwrap();
            }
            ids.push(r.id().clone());
        }
        // One of them is being submitted right now; one file is torn.
        let lease = folder.submit_lease(&ids[2]).unwrap();
        std::fs::write(state.path().join("torn-abcdef.json"), b"{\"id\": ").unwrap();
        let before: Vec<JobRecord> = ids.iter().map(|id| folder.get(id).unwrap()).collect();

        let database = SqliteRecordStore::open(state.path().join("records.sqlite")).unwrap();
        let first = migrate_folder(state.path(), &database).unwrap();
        assert_eq!(first.moved, vec![ids[0].clone(), ids[1].clone()], "{first}");
        assert_eq!(first.left.len(), 2, "{first}");
        assert!(!first.complete());
        assert!(
            first.to_string().contains("submit is in progress"),
            "{first}"
        );
        assert!(first.to_string().contains("torn-abcdef.json"), "{first}");
        for (id, was) in ids.iter().zip(&before).take(2) {
            assert_eq!(&database.get(id).unwrap(), was, "copied whole");
            assert_eq!(folder.get(id).unwrap_err().kind(), ErrorKind::NotFound);
            let kept = state.path().join("moved").join(format!("{id}.json"));
            let kept = JobRecord::from_stored_json(&std::fs::read(kept).unwrap(), "kept").unwrap();
            assert_eq!(&kept, was, "the original is kept in moved/");
        }
        assert_eq!(folder.get(&ids[2]).unwrap(), before[2], "left untouched");

        // The submit returned: the next run moves it.
        drop(lease);
        let second = migrate_folder(state.path(), &database).unwrap();
        assert_eq!(second.moved, vec![ids[2].clone()], "{second}");
        assert_eq!(second.left.len(), 1, "only the torn file: {second}");
        let listed = database
            .list(&RecordFilter::any().label("arch", "dino"))
            .unwrap();
        assert_eq!(listed.len(), 3);
        assert_eq!(listed, before, "every record, as it was, oldest first");
    }

    #[test]
    fn a_record_the_database_holds_otherwise_stays_in_the_folder() {
        let state = tempfile::tempdir().unwrap();
        let folder = FileRecordStore::new(state.path()).unwrap();
        let r = record("twice");
        folder.open(&r).unwrap();
        let database = SqliteRecordStore::open(state.path().join("records.sqlite")).unwrap();
        database.open(&r).unwrap();
        // The same record: moved out, counted as there already.
        let same = migrate_folder(state.path(), &database).unwrap();
        assert_eq!(same.already, vec![r.id().clone()], "{same}");
        // A different one under the same id: left, and said so.
        let other = record("other");
        folder.open(&other).unwrap();
        database.open(&other).unwrap();
        database
            .mark(
                other.id(),
                Mark::new(JobState::Pending, TransitionSource::Agent),
            )
            .unwrap();
        let conflict = migrate_folder(state.path(), &database).unwrap();
        assert!(
            conflict.moved.is_empty() && conflict.already.is_empty(),
            "{conflict}"
        );
        assert!(
            conflict.to_string().contains("another record"),
            "{conflict}"
        );
        assert_eq!(folder.get(other.id()).unwrap(), other, "left as it was");
        let missing = migrate_folder(&state.path().join("nowhere"), &database).unwrap_err();
        assert_eq!(missing.kind(), ErrorKind::NotFound);
    }
}
