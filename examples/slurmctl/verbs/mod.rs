//! The commands, one function each, grouped by what they act on; [`run`] picks one.

mod credentials;
mod into_job;
mod jobs;
mod logs;
mod specs;
mod usage;
mod watch;

use slurm_run::prelude::{LogOptions, LogStream, Result};

use crate::args::{Cli, Cmd, RecordsCmd};
use crate::output::Out;

/// Run the command `cli` names; its exit status.
pub(crate) async fn run(cli: &Cli, out: &Out) -> Result<u8> {
    let global = &cli.global;
    match &cli.command {
        Cmd::Records {
            action: Some(RecordsCmd::Migrate { from }),
            ..
        // The two verbs that call the record store themselves do so off the runtime's
        // worker threads (the multi-thread runtime of `main` lends this one for it).
        } => tokio::task::block_in_place(|| jobs::migrate(global, from.as_deref(), out)),
        Cmd::Records {
            state,
            action: None,
        } => tokio::task::block_in_place(|| jobs::records(global, state, out)),
        Cmd::Preflight { spec } => specs::preflight(global, spec.as_ref(), out).await,
        Cmd::Submit {
            spec,
            forecast: true,
            ..
        } => specs::forecast(global, spec, out).await,
        Cmd::Submit {
            spec,
            after,
            probe,
            over_budget,
            ..
        } => specs::submit(global, spec, after, *probe, *over_budget, out).await,
        Cmd::Usage { since, by, svg } => tokio::task::block_in_place(|| {
            usage::usage(global, since.as_deref(), by, svg.as_deref(), out)
        }),
        Cmd::Timeline { ids, svg } => {
            tokio::task::block_in_place(|| usage::timeline(global, ids, svg, out))
        }
        Cmd::Why { ids } => jobs::why(global, ids, out).await,
        Cmd::Status { ids } => jobs::status(global, ids, out).await,
        Cmd::Watch {
            ids,
            interval,
            retries,
        } => watch::watch(global, ids, *interval, *retries, out).await,
        Cmd::Logs {
            id,
            task,
            role,
            tail,
            err,
            follow,
            interval,
        } => {
            let options = LogOptions {
                stream: if *err { LogStream::Err } else { LogStream::Out },
                tail: *tail,
                task: *task,
                role: role.clone(),
            };
            logs::logs(global, id, options, follow.then_some(*interval), out).await
        }
        Cmd::Cancel { ids, tasks } => jobs::cancel(global, ids, tasks.as_deref(), out).await,
        Cmd::Credentials { action } => credentials::credentials(global, action, out).await,
        Cmd::Render { spec } => specs::render(global, spec, out).await,
        Cmd::Forward {
            id,
            port,
            local,
            node,
            interval,
        } => into_job::forward(global, id, *port, *local, node.choice(), *interval, out).await,
        Cmd::Exec { id, node, command } => into_job::exec(global, id, *node, command, out).await,
    }
}
