//! Streamed commands on a session: one `exec` channel per command, its stdout and
//! stderr handed on as they arrive, its exit status answered; opened and pumped by the
//! session's worker thread without blocking.

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use slurm_core::{Error, OutputChunk, OutputSink, Result};
use ssh2::{Channel, Session};
use tokio::sync::oneshot;

use super::channel::would_block;

/// A command to stream, as the async side hands it over.
pub(crate) struct StreamJob {
    /// The command line the login shell runs.
    pub(crate) line: String,
    /// Its standard input, if any.
    pub(crate) stdin: Option<Vec<u8>>,
    /// Where its output goes.
    pub(crate) sink: OutputSink,
    /// Its label, for errors.
    pub(crate) label: String,
    /// How long it may run, and until when.
    pub(crate) timeout: Duration,
    pub(crate) deadline: Instant,
    /// Where its exit status goes.
    pub(crate) reply: oneshot::Sender<Result<i32>>,
}

/// Where a streamed command's channel is.
enum Stage {
    /// Waiting for its channel to open.
    Waiting,
    /// Open; the exec request is under way.
    Exec(Channel),
    /// Running: stdin going out, output coming in.
    Running(Channel),
    /// Both streams ended: closing, then the exit status.
    Closing(Channel),
}

struct Streamed {
    job: StreamJob,
    stage: Stage,
    stdin_sent: usize,
    eof_sent: bool,
}

/// The streamed commands of one session.
#[derive(Default)]
pub(crate) struct Streams {
    running: Vec<Streamed>,
    /// The first waiting command's channel open is under way in libssh2.
    open_pending: bool,
}

const CHUNK: usize = 32 * 1024;

impl Streams {
    /// Run `job` once its channel opens.
    pub(crate) fn add(&mut self, job: StreamJob) {
        self.running.push(Streamed {
            job,
            stage: Stage::Waiting,
            stdin_sent: 0,
            eof_sent: false,
        });
    }

    /// Whether any command is waiting or running.
    pub(crate) fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// Whether a channel open of ours is under way (no other may start meanwhile).
    pub(crate) fn open_pending(&self) -> bool {
        self.open_pending
    }

    /// The earliest deadline of the commands.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.running.iter().map(|s| s.job.deadline).min()
    }

    /// Move every command as far as it can go without blocking; answer those that
    /// ended (or passed their deadline). A new channel opens only when `others_opening`
    /// is false (libssh2 opens one channel at a time per session). Returns whether
    /// anything happened.
    pub(crate) fn step(&mut self, session: &Session, others_opening: bool) -> bool {
        let mut progress = false;
        let mut may_open = self.open_pending || !others_opening;
        let now = Instant::now();
        let mut kept = Vec::with_capacity(self.running.len());
        for mut s in std::mem::take(&mut self.running) {
            if s.job.deadline <= now && !(matches!(s.stage, Stage::Waiting) && self.open_pending) {
                let may_have_run = !matches!(s.stage, Stage::Waiting);
                let _ = s.job.reply.send(Err(Error::Timeout {
                    what: format!("`{}`", s.job.label),
                    after: s.job.timeout,
                    may_have_run,
                }));
                progress = true;
                continue;
            }
            let outcome = match s.stage {
                Stage::Waiting if !may_open => Ok(None),
                Stage::Waiting => {
                    may_open = false;
                    match session.channel_session() {
                        Ok(channel) => {
                            self.open_pending = false;
                            s.stage = Stage::Exec(channel);
                            progress = true;
                            Ok(None)
                        }
                        Err(e) if would_block(&e) => {
                            self.open_pending = true;
                            Ok(None)
                        }
                        Err(e) => {
                            self.open_pending = false;
                            Err(Error::Transport {
                                message: format!(
                                    "the server refused a channel for `{}`: {e}",
                                    s.job.label
                                ),
                                may_have_run: false,
                            })
                        }
                    }
                }
                _ => s.pump(&mut progress),
            };
            match outcome {
                Ok(None) => kept.push(s),
                Ok(Some(status)) => {
                    progress = true;
                    let _ = s.job.reply.send(Ok(status));
                }
                Err(error) => {
                    progress = true;
                    let _ = s.job.reply.send(Err(error));
                }
            }
        }
        self.running = kept;
        progress
    }

    /// The connection could not be made: every command fails with `error`.
    pub(crate) fn fail_all(&mut self, error: impl Fn() -> Error) {
        for s in std::mem::take(&mut self.running) {
            let _ = s.job.reply.send(Err(error()));
        }
        self.open_pending = false;
    }

    /// The connection died: every command fails, saying whether it may have run.
    pub(crate) fn abandon(&mut self, reason: &str) {
        for s in std::mem::take(&mut self.running) {
            let may_have_run = !matches!(s.stage, Stage::Waiting);
            let _ = s.job.reply.send(Err(Error::Transport {
                message: format!("SSH connection lost while `{}` ran: {reason}", s.job.label),
                may_have_run,
            }));
        }
        self.open_pending = false;
    }
}

impl Streamed {
    /// Move an open channel along: the exit status once it closed.
    fn pump(&mut self, progress: &mut bool) -> Result<Option<i32>> {
        let failed = |e: &dyn std::fmt::Display, label: &str| Error::Transport {
            message: format!("streaming `{label}` failed: {e}"),
            may_have_run: true,
        };
        if let Stage::Exec(channel) = &mut self.stage {
            match channel.exec(&self.job.line) {
                Ok(()) => {
                    *progress = true;
                    let Stage::Exec(channel) = std::mem::replace(&mut self.stage, Stage::Waiting)
                    else {
                        unreachable!()
                    };
                    self.stage = Stage::Running(channel);
                }
                Err(e) if would_block(&e) => return Ok(None),
                Err(e) => return Err(failed(&e, &self.job.label)),
            }
        }
        if let Stage::Running(channel) = &mut self.stage {
            if !self.eof_sent {
                let input = self.job.stdin.as_deref().unwrap_or_default();
                while self.stdin_sent < input.len() {
                    match channel.write(&input[self.stdin_sent..]) {
                        Ok(n) => {
                            self.stdin_sent += n;
                            *progress = true;
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => return Err(failed(&e, &self.job.label)),
                    }
                }
                if self.stdin_sent == input.len() {
                    match channel.send_eof() {
                        Ok(()) => self.eof_sent = true,
                        Err(e) if would_block(&e) => {}
                        Err(e) => return Err(failed(&e, &self.job.label)),
                    }
                }
            }
            let mut buf = [0u8; CHUNK];
            for stderr in [false, true] {
                loop {
                    let read = if stderr {
                        channel.stderr().read(&mut buf)
                    } else {
                        channel.stream(0).read(&mut buf)
                    };
                    match read {
                        Ok(0) => break,
                        Ok(n) => {
                            *progress = true;
                            let bytes = buf[..n].to_vec();
                            let _ = self.job.sink.send(if stderr {
                                OutputChunk::Stderr(bytes)
                            } else {
                                OutputChunk::Stdout(bytes)
                            });
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => return Err(failed(&e, &self.job.label)),
                    }
                }
            }
            if channel.eof() {
                let Stage::Running(channel) = std::mem::replace(&mut self.stage, Stage::Waiting)
                else {
                    unreachable!()
                };
                self.stage = Stage::Closing(channel);
                *progress = true;
            }
        }
        if let Stage::Closing(channel) = &mut self.stage {
            match channel.close().and_then(|()| channel.wait_close()) {
                Ok(()) => {
                    *progress = true;
                    return Ok(Some(
                        channel
                            .exit_status()
                            .map_err(|e| failed(&e, &self.job.label))?,
                    ));
                }
                Err(e) if would_block(&e) => {}
                Err(e) => return Err(failed(&e, &self.job.label)),
            }
        }
        Ok(None)
    }
}
