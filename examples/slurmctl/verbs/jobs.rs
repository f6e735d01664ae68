//! The commands on jobs already submitted: `status`, `cancel`, and `records` (no remote
//! call; `records migrate` moves a folder of JSON records into a database).

use std::path::Path;

use slurm_run::prelude::*;
use slurm_run::{migrate_folder, DEFAULT_DATABASE, RECORDS_VAR};

use crate::args::{parse_ids, Global};
use crate::connect::{self, backend};
use crate::exit::{BAD_INPUT, OK};
use crate::output::Out;
use crate::progress::Progress;

/// `status ID...`: the current state of every job, one remote round trip for all.
pub(crate) async fn status(global: &Global, ids: &[String], out: &Out) -> Result<u8> {
    let ids = parse_ids(ids)?;
    let backend = backend(global)?;
    let progress = Progress::start("status");
    let statuses = backend.status_many(&ids).await?;
    progress.finish();
    out.statuses(&statuses);
    Ok(OK)
}

/// `why ID...`: why each job waits, when it will start, and what releases it.
pub(crate) async fn why(global: &Global, ids: &[String], out: &Out) -> Result<u8> {
    let ids = parse_ids(ids)?;
    let backend = backend(global)?;
    let progress = Progress::start("why");
    let answers = backend.why(&ids).await?;
    progress.finish();
    out.wait_answers(&answers);
    Ok(OK)
}

/// `cancel ID... [--tasks LIST]`: every job in one scancel (or some tasks of each array).
pub(crate) async fn cancel(
    global: &Global,
    ids: &[String],
    tasks: Option<&str>,
    out: &Out,
) -> Result<u8> {
    let ids = parse_ids(ids)?;
    let tasks = tasks.map(|t| TaskSet::parse("--tasks", t)).transpose()?;
    let backend = backend(global)?;
    let records = match &tasks {
        Some(tasks) => {
            let mut records = Vec::new();
            for id in &ids {
                let progress = Progress::start(&format!("cancelling {id}"));
                records.push(backend.cancel_tasks(id, tasks).await?);
                progress.finish();
            }
            records
        }
        // Every job in one scancel, confirmed by one poll for all.
        None => {
            let progress = Progress::start(&format!("cancelling {} job(s)", ids.len()));
            let records = backend.cancel_many(&ids).await?;
            progress.finish();
            records
        }
    };
    out.jobs(records.iter().map(|r| (r, None)));
    Ok(OK)
}

/// `records [--state S]`: the job records, oldest first (no remote call), from wherever
/// they live; a record that cannot be read is named on stderr (exit 2) and the others
/// are listed.
pub(crate) fn records(global: &Global, states: &[String], out: &Out) -> Result<u8> {
    let mut filter = RecordFilter::any();
    for s in states {
        filter = filter.state(s.parse::<JobState>()?);
    }
    let store = connect::records(global, &connect::state_dir(global)?)?.open()?;
    let listing = store.list_readable(&filter)?;
    out.jobs(listing.records.iter().map(|r| (r, None)));
    for error in &listing.unreadable {
        out.error(error, BAD_INPUT);
    }
    Ok(if listing.unreadable.is_empty() {
        OK
    } else {
        BAD_INPUT
    })
}

/// `records migrate [--from DIR]`: a folder of JSON records into the database.
pub(crate) fn migrate(global: &Global, from: Option<&Path>, out: &Out) -> Result<u8> {
    let state_dir = connect::state_dir(global)?;
    let to = match global.lookup(RECORDS_VAR) {
        Some(_) => connect::records(global, &state_dir)?,
        None => RecordsLocation::Sqlite(state_dir.join(DEFAULT_DATABASE)),
    };
    if let RecordsLocation::Folder(dir) = &to {
        return Err(Error::config(
            RECORDS_VAR,
            format!(
                "{} is a folder: records migrate moves a folder into a database; give --records sqlite://PATH or postgres://...",
                dir.display()
            ),
        ));
    }
    let from = from.map(Path::to_path_buf).unwrap_or(state_dir);
    let store = to.open()?;
    let progress = Progress::start(&format!("moving {} into {to}", from.display()));
    let migration = migrate_folder(&from, store.as_ref())?;
    progress.finish();
    out.migration(&from, &to, &migration);
    Ok(if migration.complete() { OK } else { BAD_INPUT })
}
