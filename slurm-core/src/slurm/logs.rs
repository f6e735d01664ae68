//! Logs: the tail of a job's `main.out` / `main.err`, and following them until the job ends, secrets redacted.

use std::time::Duration;

use futures::stream::{self, BoxStream, StreamExt};

use std::sync::Arc;

use super::context::{Context, ContextOwner};
use super::job::slurm_job;
use super::paths::{log_folder, role_log_folder};
use super::scripts::{ReadFromExit, READ_FROM};
use super::status::status_many;
use crate::backend::LogOptions;
use crate::record::{JobId, JobRecord};
use crate::redact::StreamRedactor;
use crate::spec::TaskSet;
use crate::{Error, Result};

/// The most bytes one read of a followed log returns; a log that grew more is read in
/// further chunks, from where the last one stopped.
pub(super) const FOLLOW_CHUNK: u64 = 1024 * 1024;

/// The path of the log `options` name: `stream` of `record`'s job (of `task`, for an
/// array; of `role`, for a multi-role job).
fn log_path(record: &JobRecord, options: &LogOptions) -> Result<String> {
    let (task, stream) = (options.task, options.stream);
    let (_, slurm_id) = slurm_job(record)?.ok_or_else(|| {
        Error::NotFound(format!(
            "{}: no log yet, the job was never accepted by the scheduler",
            record.id
        ))
    })?;
    match (record.is_array(), task) {
        (true, None) => {
            return Err(Error::invalid(
                "task",
                format!("{} is an array; name the task whose log to read", record.id),
            ))
        }
        (false, Some(_)) => {
            return Err(Error::invalid(
                "task",
                format!("{} is a single job; it has no tasks", record.id),
            ))
        }
        (true, Some(task)) => record.check_tasks(&TaskSet::from_iter([task]))?,
        (false, None) => {}
    }
    let folder = log_folder(record, slurm_id, task)?;
    match &options.role {
        Some(role) => {
            record.check_role(role)?;
            Ok(format!(
                "{}/{}",
                role_log_folder(&folder, role),
                stream.file_name()
            ))
        }
        None => Ok(format!("{folder}/{}", stream.file_name())),
    }
}

/// The tail of a job's log, secrets redacted.
pub(super) async fn logs(ctx: &Context<'_>, id: &JobId, options: LogOptions) -> Result<String> {
    let record = ctx.records().get(id).await?;
    let path = log_path(&record, &options)?;
    let registry = ctx.secrets().redactor_for(&record);
    match ctx.transport().tail_file(&path, options.tail).await {
        Ok(bytes) => Ok(registry.redact(&String::from_utf8_lossy(&bytes))),
        Err(Error::NotFound(_)) => Err(Error::NotFound(format!(
            "{id}: {path} does not exist yet (the job is {}; logs appear once it starts)",
            record.state
        ))),
        Err(error) => Err(error),
    }
}

/// Where a followed log stands between reads.
struct Follow {
    owner: Arc<dyn ContextOwner>,
    id: JobId,
    options: LogOptions,
    offset: u64,
    done: bool,
    /// Read again at once (the last read was a full chunk: more is waiting).
    more: bool,
    first: bool,
    /// What was read and not shown yet (a secret or a character cut by a read).
    redactor: StreamRedactor,
}

/// Follow a job's log until the job ends: each new piece, secrets redacted (a secret or
/// a character cut between two reads is held back until it is whole). A log that
/// cannot be read (anything but "not there yet") ends the follow with the error.
pub(super) fn follow_logs(
    owner: Arc<dyn ContextOwner>,
    id: JobId,
    options: LogOptions,
    interval: Duration,
) -> BoxStream<'static, Result<String>> {
    let state = Follow {
        owner,
        id,
        options,
        offset: 0,
        done: false,
        more: false,
        first: true,
        redactor: StreamRedactor::default(),
    };
    stream::unfold(state, move |mut st| async move {
        loop {
            if st.done {
                return None;
            }
            if !st.first && !st.more {
                tokio::time::sleep(interval).await;
            }
            st.first = false;
            // Whether the job is over is read before the log, so the last read
            // after the end sees everything the job wrote. While catching up on a
            // large log (full chunks), the status is not asked again.
            let owner = Arc::clone(&st.owner);
            let ctx = owner.context();
            let terminal = if st.more {
                false
            } else {
                match status_many(&ctx, std::slice::from_ref(&st.id)).await {
                    Ok(statuses) => statuses[0].state().is_terminal(),
                    Err(error) if error.is_transient() => false,
                    Err(error) => {
                        st.done = true;
                        return Some((Err(error), st));
                    }
                }
            };
            st.more = false;
            let record = match ctx.records().get(&st.id).await {
                Ok(record) => record,
                Err(error) => {
                    st.done = true;
                    return Some((Err(error), st));
                }
            };
            let chunk = match log_path(&record, &st.options) {
                Ok(path) => match read_chunk(&ctx, &path, st.offset).await {
                    Ok(Some((size, body))) => {
                        st.offset = st.offset.max(size.min(st.offset + body.len() as u64));
                        st.more = st.offset < size;
                        body
                    }
                    Ok(None) => Vec::new(),
                    Err(error) => {
                        st.done = true;
                        return Some((Err(error), st));
                    }
                },
                Err(_) => Vec::new(),
            };
            let registry = ctx.secrets().redactor_for(&record);
            let mut text = st.redactor.push(&registry, &chunk);
            if terminal && !st.more {
                st.done = true;
                text.push_str(&st.redactor.finish(&registry));
            }
            if !text.is_empty() {
                return Some((Ok(text), st));
            }
        }
    })
    .boxed()
}

/// One read of the log at `path` from `offset`: its size and the bytes read, `None`
/// when there is nothing to read now (the file is not there yet, or the connection
/// failed for a moment: the next read tries again), or the error of a read that failed.
async fn read_chunk(ctx: &Context<'_>, path: &str, offset: u64) -> Result<Option<(u64, Vec<u8>)>> {
    let command = READ_FROM.command([
        path.to_string(),
        offset.to_string(),
        FOLLOW_CHUNK.to_string(),
    ]);
    let output = match ctx.transport().run(&command).await {
        Ok(output) => output,
        Err(error) if error.is_transient() => {
            tracing::warn!(%error, path, "reading the followed log failed for now; trying again");
            return Ok(None);
        }
        Err(error) => return Err(error),
    };
    if !output.success() {
        if ReadFromExit::from_status(output.status) == Some(ReadFromExit::NoFile) {
            return Ok(None);
        }
        return Err(Error::Remote {
            command: format!("read {path}"),
            status: output.status,
            stderr: format!(
                "following the log failed: {}",
                output
                    .stderr_text()
                    .trim()
                    .chars()
                    .take(500)
                    .collect::<String>()
            ),
            transient: false,
        });
    }
    let text = output.stdout;
    let newline = text.iter().position(|b| *b == b'\n').unwrap_or(text.len());
    let size: u64 = String::from_utf8_lossy(&text[..newline])
        .trim()
        .parse()
        .unwrap_or(offset);
    let body = text.get(newline + 1..).unwrap_or_default().to_vec();
    Ok(Some((size, body)))
}
