//! A command beside a running job: one step that overlaps the job's allocation on one
//! of its nodes (`srun --jobid --overlap`), in the job's container image when it has
//! one, its output streamed and its exit status answered.

use std::time::Duration;

use super::commands;
use super::context::Context;
use super::job::slurm_job;
use super::node_choice::{choose_node, NodeChoice};
use super::status::status_many;
use super::submit::job_view;
use crate::record::JobId;
use crate::transport::OutputSink;
use crate::{Error, Result};

/// What to run beside a running job, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOptions {
    /// The command and its arguments (each quoted on its way; no shell unless you run one).
    pub command: Vec<String>,
    /// Which node of the job (default: its first).
    pub node: NodeChoice,
    /// How long the command may run (default one hour).
    pub timeout: Duration,
}

impl ExecOptions {
    /// Run `command` on the job's first node.
    pub fn new<I, S>(command: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ExecOptions {
            command: command.into_iter().map(Into::into).collect(),
            node: NodeChoice::First,
            timeout: Duration::from_secs(3600),
        }
    }
}

/// Run `options.command` beside job `id`: a poll says whether it runs and where, then
/// one step on the chosen node, its output sent to `sink`; answers its exit status.
pub(super) async fn exec(
    ctx: &Context<'_>,
    id: &JobId,
    options: &ExecOptions,
    sink: OutputSink,
) -> Result<i32> {
    if options.command.is_empty() {
        return Err(Error::invalid(
            "command",
            "give the command to run, e.g. -- nvidia-smi",
        ));
    }
    let status = status_many(ctx, std::slice::from_ref(id)).await?.remove(0);
    let record = status.record();
    if record.is_array() {
        return Err(Error::invalid(
            "job",
            format!("job {id} is an array; exec beside an array's task is not supported yet"),
        ));
    }
    let node = choose_node(record, &options.node)?;
    let (cluster, job) = slurm_job(record)?
        .ok_or_else(|| Error::invalid("job", format!("job {id} has no SLURM job yet")))?;
    let container = match (record.container_image(), record.spec()) {
        (Some(image), Some(spec)) => {
            let code_dir = record.code_dir().map(|d| d.to_string());
            let code_dir = code_dir
                .map(|d| crate::storage::RemotePath::parse_for("code tree", &d))
                .transpose()?;
            let (workdir, mounts) = job_view(
                record.results_dir(),
                true,
                ctx.config(),
                spec,
                code_dir.as_ref(),
            )?;
            Some(commands::StepContainer {
                image: image.to_string(),
                mounts,
                workdir,
            })
        }
        _ => None,
    };
    let command = commands::srun_beside(
        job,
        cluster.as_deref(),
        &node,
        container.as_ref(),
        record.results_dir().as_str(),
        &options.command,
    )?
    .timeout(options.timeout);
    ctx.transport().run_streamed(&command, sink).await
}
