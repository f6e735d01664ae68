//! The `Transport` seam (where commands run): typed remote commands, the one shell-quoting
//! function, `LocalTransport`, the framing that runs several commands in one round trip,
//! and [`Script`], a fixed remote script with its exit statuses named once.

mod command;
mod forward;
mod local;
mod quote;
pub mod round_trip;
pub(crate) mod script;
mod stream;

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::{Error, Result};

pub use command::{Command, FixedScript, Output};
pub(crate) use forward::not_supported as forward_not_supported;
pub use forward::{free_local_port, listen_and_forward, ForwardTarget, Forwarding};
pub use local::LocalTransport;
pub use quote::shell_quote;
pub use script::Script;
pub use stream::{stream_process, OutputChunk, OutputSink};

/// Where commands run: this host, or a login node over SSH.
///
/// Implementations must pass the Transport conformance suite (`testing::transport_suite`,
/// feature `testing`: `transport_conformance!`). Only [`Transport::run`]
/// is required; the file operations have default implementations built on it, which
/// a transport may replace with something faster.
#[async_trait]
pub trait Transport: Send + Sync + fmt::Debug {
    /// Run a command and return its output, whatever its exit status. Errors are for
    /// failures to run it at all (connection lost, deadline passed).
    async fn run(&self, command: &Command) -> Result<Output>;

    /// Write `contents` to `path`, created with `mode` (e.g. `0o600`): the file is
    /// written under a temporary name created with umask 077 and renamed into place,
    /// so it is never readable by others, even for an instant, and never half-written.
    async fn write_file(&self, path: &str, contents: &[u8], mode: u32) -> Result<()> {
        let command = WRITE_FILE
            .command([path.to_string(), format!("{mode:o}")])
            .stdin(contents.to_vec())
            .display_as(format!("write {path}"));
        self.run(&command).await?.check(&command).map(|_| ())
    }

    /// Read a whole file.
    async fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        let command = Command::new("cat").arg("--").arg(path);
        let output = self.run(&command).await?;
        if output.success() {
            Ok(output.stdout)
        } else if output.stderr_text().contains("No such file") {
            Err(Error::NotFound(path.to_string()))
        } else {
            output.check(&command).map(|o| o.stdout)
        }
    }

    /// The last `lines` lines of a file.
    async fn tail_file(&self, path: &str, lines: usize) -> Result<Vec<u8>> {
        let command = Command::new("tail")
            .arg("-n")
            .arg(lines.to_string())
            .arg("--")
            .arg(path);
        let output = self.run(&command).await?;
        if output.success() {
            Ok(output.stdout)
        } else if output.stderr_text().contains("No such file") {
            Err(Error::NotFound(path.to_string()))
        } else {
            output.check(&command).map(|o| o.stdout)
        }
    }

    /// Run a command, sending its output to `sink` as it arrives, and return its exit
    /// status: for commands that run a while (a step beside a running job). The default
    /// runs it with [`Transport::run`] and hands on the whole output at the end; a
    /// transport that can stream replaces it.
    async fn run_streamed(&self, command: &Command, sink: OutputSink) -> Result<i32> {
        let output = self.run(command).await?;
        if !output.stdout.is_empty() {
            let _ = sink.send(OutputChunk::Stdout(output.stdout));
        }
        if !output.stderr.is_empty() {
            let _ = sink.send(OutputChunk::Stderr(output.stderr));
        }
        Ok(output.status)
    }

    /// Forward `127.0.0.1:local_port` on this machine (`0`: a free port) to `target` as
    /// the far side reaches it, through the connection the transport already has (no
    /// new login); the forward lasts as long as the returned [`Forwarding`]. The
    /// default refuses: a transport that can forward replaces it.
    async fn forward(&self, local_port: u16, target: &ForwardTarget) -> Result<Forwarding> {
        let _ = (local_port, target);
        Err(forward_not_supported(std::any::type_name::<Self>()))
    }
}

/// The remote side of [`Transport::write_file`]: `$1` the path, `$2` the octal mode.
pub(crate) const WRITE_FILE: script::Script =
    script::Script::new("write-file", include_str!("write_file.sh"));

/// A `Transport` behind a smart pointer is a `Transport`.
macro_rules! forward_transport {
    ($pointer:ident) => {
        #[async_trait]
        impl<T: Transport + ?Sized> Transport for $pointer<T> {
            async fn run(&self, command: &Command) -> Result<Output> {
                (**self).run(command).await
            }
            async fn write_file(&self, path: &str, contents: &[u8], mode: u32) -> Result<()> {
                (**self).write_file(path, contents, mode).await
            }
            async fn read_file(&self, path: &str) -> Result<Vec<u8>> {
                (**self).read_file(path).await
            }
            async fn tail_file(&self, path: &str, lines: usize) -> Result<Vec<u8>> {
                (**self).tail_file(path, lines).await
            }
            async fn run_streamed(&self, command: &Command, sink: OutputSink) -> Result<i32> {
                (**self).run_streamed(command, sink).await
            }
            async fn forward(&self, local_port: u16, target: &ForwardTarget) -> Result<Forwarding> {
                (**self).forward(local_port, target).await
            }
        }
    };
}

forward_transport!(Arc);
forward_transport!(Box);
