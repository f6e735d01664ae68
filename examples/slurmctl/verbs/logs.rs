//! `logs`: the last lines of a job's log, or the log followed until the job ends.

use futures::StreamExt;
use slurm_run::prelude::*;

use crate::args::{seconds, Global};
use crate::connect::backend;
use crate::exit::OK;
use crate::json;
use crate::output::Out;
use crate::progress::Progress;

/// `logs ID [--task N] [--role NAME] [--tail N] [--err] [--follow [--interval SECS]]`: `options` say
/// which file and how much; `follow` is the seconds between reads when following.
pub(crate) async fn logs(
    global: &Global,
    id: &str,
    options: LogOptions,
    follow: Option<f64>,
    out: &Out,
) -> Result<u8> {
    let id = JobId::parse(id)?;
    let stream = options.stream;
    let backend = backend(global)?;
    let print = |record: &JobRecord, text: &str| {
        if out.json {
            out.line(&json::logs(record, stream, text).to_string());
        } else {
            out.raw(text);
        }
    };
    match follow {
        Some(interval) => {
            let interval = seconds("interval", interval)?;
            let record = backend.record(&id).await?;
            let mut chunks = backend.follow_logs(&id, options, interval);
            while let Some(chunk) = chunks.next().await {
                print(&record, &chunk?);
            }
        }
        None => {
            let progress = Progress::start("reading the log");
            let text = backend.logs(&id, options).await?;
            progress.finish();
            print(&backend.record(&id).await?, &text);
        }
    }
    Ok(OK)
}
