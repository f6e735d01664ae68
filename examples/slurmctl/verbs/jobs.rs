//! The commands on jobs already submitted: `status`, `cancel`, and `records` (local only).

use std::path::PathBuf;

use slurm_run::default_state_dir;
use slurm_run::prelude::*;

use crate::args::{parse_ids, Global};
use crate::connect::backend;
use crate::exit::OK;
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

/// `records [--state S]`: the local job records, oldest first (no remote call).
pub(crate) fn records(global: &Global, states: &[String], out: &Out) -> Result<u8> {
    let mut filter = RecordFilter::any();
    for s in states {
        filter = filter.state(s.parse::<JobState>()?);
    }
    let dir = match global.lookup("SLURM_RUN_STATE_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => default_state_dir()?,
    };
    let records = FileRecordStore::new(dir)?.list(&filter)?;
    out.jobs(records.iter().map(|r| (r, None)));
    Ok(OK)
}
