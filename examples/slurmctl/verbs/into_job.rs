//! Into a running job: `forward` (a local port to a port of the job's node) and `exec`
//! (a command beside the job, its output streamed).

use std::io::Write;

use serde_json::json;
use slurm_run::prelude::*;
use slurm_run::{ExecOptions, ForwardOptions, NodeChoice, OutputChunk};
use tokio::signal::unix::{signal, SignalKind};

use crate::args::{seconds, Global};
use crate::connect::backend;
use crate::exit::OK;
use crate::output::Out;

/// The exit status of a forward stopped by SIGINT or SIGTERM (128 + SIGINT, as shells do).
const INTERRUPTED: u8 = 130;

/// `forward ID --port REMOTE [--local LOCAL] [--node N | --task N | --role NAME]`: prints
/// `http://127.0.0.1:LOCAL` (with `--json` an object naming the node and port), then
/// keeps the forward open until interrupted (exit 130) or the job ends (exit 0), and says
/// which on stderr.
pub(crate) async fn forward(
    global: &Global,
    id: &str,
    port: u16,
    local: u16,
    node: NodeChoice,
    interval: f64,
    out: &Out,
) -> Result<u8> {
    let id = JobId::parse(id)?;
    let interval = seconds("interval", interval)?;
    let backend = backend(global)?;
    let options = ForwardOptions {
        port,
        local_port: local,
        node,
    };
    // Listen for SIGINT and SIGTERM before the URL is out: whoever reads it may interrupt
    // at once, and a signal before these exist would kill the process with no word.
    let mut interrupt =
        signal(SignalKind::interrupt()).map_err(|e| Error::io("listen for SIGINT", e))?;
    let mut terminate =
        signal(SignalKind::terminate()).map_err(|e| Error::io("listen for SIGTERM", e))?;
    let forward = backend.forward(&id, &options).await?;
    let local = forward.local();
    let target = format!("{}:{}", forward.node(), forward.port());
    if out.json {
        out.line(
            &json!({"local": local.to_string(), "node": forward.node(), "port": forward.port()})
                .to_string(),
        );
    } else {
        out.line(&format!("http://{local}"));
    }
    let mut ticks = tokio::time::interval(interval);
    ticks.tick().await;
    loop {
        tokio::select! {
            _ = interrupt.recv() => break,
            _ = terminate.recv() => break,
            _ = ticks.tick() => {
                match backend.status(&id).await {
                    Ok(status) if status.record().is_terminal() => {
                        drop(forward);
                        eprintln!(
                            "slurmctl: job {id} ended ({}); the forward to {target} is closed",
                            status.state(),
                        );
                        return Ok(OK);
                    }
                    Ok(_) => {}
                    // A poll that failed (a connection blip) is tried again next tick.
                    Err(error) => eprintln!("slurmctl: could not check job {id}: {error}"),
                }
            }
        }
    }
    drop(forward);
    eprintln!("slurmctl: interrupted; the forward to {target} (job {id}) is closed");
    Ok(INTERRUPTED)
}

/// `exec ID [--node N] -- CMD...`: the command's output as it comes (stdout to stdout,
/// stderr to stderr), then its exit status as ours (above 255: 255).
pub(crate) async fn exec(
    global: &Global,
    id: &str,
    node: Option<usize>,
    command: &[String],
    _out: &Out,
) -> Result<u8> {
    let id = JobId::parse(id)?;
    let backend = backend(global)?;
    let mut options = ExecOptions::new(command.iter().cloned());
    if let Some(n) = node {
        options.node = NodeChoice::Index(n);
    }
    let (sink, mut chunks) = tokio::sync::mpsc::unbounded_channel();
    let printer = tokio::spawn(async move {
        while let Some(chunk) = chunks.recv().await {
            match chunk {
                OutputChunk::Stdout(bytes) => {
                    let mut stdout = std::io::stdout().lock();
                    let _ = stdout.write_all(&bytes).and_then(|_| stdout.flush());
                }
                OutputChunk::Stderr(bytes) => {
                    let mut stderr = std::io::stderr().lock();
                    let _ = stderr.write_all(&bytes).and_then(|_| stderr.flush());
                }
            }
        }
    });
    let status = backend.exec(&id, &options, sink).await;
    let _ = printer.await;
    Ok(status?.clamp(0, 255) as u8)
}
