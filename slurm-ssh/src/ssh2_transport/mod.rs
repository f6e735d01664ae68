//! `Ssh2Transport`: a pool of libssh2 sessions, each owned by one thread that multiplexes framed shell channels.
//!
//! Each session (connection) belongs to one worker thread for its whole life; no
//! other thread ever touches it (libssh2 sessions break when driven from several
//! threads, ssh2-rs issue 322). The async side sends a job over a channel, wakes the
//! worker through a socket pair, and awaits a oneshot answer, so runtime threads
//! never block. The worker runs the session non-blocking and polls its socket: up to
//! `max_channels` long-lived shells per connection run commands side by side, more
//! commands queue.
//!
//! The rooms: this file is the async bridge (and the builder's `build`, which starts it); [`worker`] is the owner thread (queue,
//! reconnect, polling); [`connect`] opens and authenticates a session, failing over
//! across the login hosts; [`shells`] runs the shells of one connection and
//! [`channel`] moves one shell on its channel; [`backoff`] spaces out retries.

mod backoff;
mod channel;
mod connect;
#[cfg(test)]
mod fake;
mod shells;
mod streams;
mod tunnels;
mod worker;

use std::fmt;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use slurm_core::{
    listen_and_forward, Command, Error, ForwardTarget, Forwarding, Output, OutputSink, Result,
    Transport,
};
use tokio::sync::oneshot;

use crate::config::Ssh2TransportBuilder;

/// One command on its way to a session thread, and where its answer goes.
struct Job {
    command: Command,
    deadline: Instant,
    reply: oneshot::Sender<Result<Output>>,
}

/// Answers to hand out: each job and its result.
type Done = Vec<(Job, Result<Output>)>;

/// What the async side asks of a session thread.
enum Msg {
    Job(Job),
    Connect(oneshot::Sender<Result<String>>),
    /// A forwarded local connection to carry over a `direct-tcpip` channel.
    Tunnel(tunnels::TunnelRequest),
    /// A command to stream over an `exec` channel.
    Stream(streams::StreamJob),
}

/// The async side's end of one session thread.
struct WorkerHandle {
    tx: Sender<Msg>,
    wake: UnixStream,
    /// Commands sent and not answered yet (the least loaded session gets the next).
    load: Arc<AtomicUsize>,
}

impl WorkerHandle {
    fn send(&self, msg: Msg) -> bool {
        if self.tx.send(msg).is_err() {
            return false;
        }
        // A full wake socket already holds a wake-up: nothing to do.
        let _ = (&self.wake).write(&[1]);
        true
    }
}

/// Runs commands on a login node over SSH (libssh2). Build it with
/// [`Ssh2TransportBuilder::build`]; see the [crate docs](crate) for the design.
///
/// ```no_run
/// # async fn demo() -> slurm_core::Result<()> {
/// use slurm_core::{Command, Transport};
/// use slurm_ssh::Ssh2TransportBuilder;
/// let ssh = Ssh2TransportBuilder::from_env()?.build()?;
/// let out = ssh.run(&Command::new("squeue").arg("--me")).await?;
/// println!("{}", out.stdout_text());
/// # Ok(()) }
/// ```
pub struct Ssh2Transport {
    settings: Arc<Ssh2TransportBuilder>,
    workers: Vec<WorkerHandle>,
}

impl fmt::Debug for Ssh2Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ssh2Transport")
            .field("settings", &self.settings)
            .finish()
    }
}

impl Ssh2TransportBuilder {
    /// Check the settings and start the transport's session threads (connecting
    /// happens on first use); the same as [`Ssh2Transport::new`].
    pub fn build(self) -> Result<Ssh2Transport> {
        Ssh2Transport::new(self)
    }
}

impl Ssh2Transport {
    /// Start the session threads (the same as [`Ssh2TransportBuilder::build`]).
    /// Connecting happens on first use (or on [`Ssh2Transport::connect`]).
    pub fn new(builder: Ssh2TransportBuilder) -> Result<Self> {
        builder.validate()?;
        let settings = Arc::new(builder);
        let workers = (0..settings.sessions)
            .map(|id| worker::spawn(id, Arc::clone(&settings)))
            .collect::<Result<_>>()?;
        Ok(Ssh2Transport { settings, workers })
    }

    /// Shorthand for `Ssh2TransportBuilder::from_env()?.build()`.
    pub fn from_env() -> Result<Self> {
        Ssh2TransportBuilder::from_env()?.build()
    }

    /// Open every session of the pool now (instead of on first use) and return the
    /// login host they reached; fails with the reason of each host tried.
    pub async fn connect(&self) -> Result<String> {
        let mut answers = Vec::new();
        for worker in &self.workers {
            let (tx, rx) = oneshot::channel();
            if !worker.send(Msg::Connect(tx)) {
                return Err(stopped());
            }
            answers.push(rx);
        }
        let mut host = String::new();
        for rx in answers {
            host = rx.await.map_err(|_| stopped())??;
        }
        Ok(host)
    }

    /// The session with the fewest commands under way: where new work goes.
    fn least_loaded(&self) -> &WorkerHandle {
        self.workers
            .iter()
            .min_by_key(|w| w.load.load(Ordering::Relaxed))
            .expect("at least one session")
    }
}

/// The answer of a command whose session thread went away before replying.
fn stopped() -> Error {
    Error::Transport {
        message: "the SSH session thread stopped".into(),
        may_have_run: true,
    }
}

#[async_trait]
impl Transport for Ssh2Transport {
    async fn run(&self, command: &Command) -> Result<Output> {
        let worker = self.least_loaded();
        let (reply, answer) = oneshot::channel();
        let job = Job {
            command: command.clone(),
            deadline: Instant::now() + command.effective_timeout(),
            reply,
        };
        worker.load.fetch_add(1, Ordering::Relaxed);
        if !worker.send(Msg::Job(job)) {
            worker.load.fetch_sub(1, Ordering::Relaxed);
            return Err(Error::Transport {
                message: "the SSH session thread stopped".into(),
                may_have_run: false,
            });
        }
        answer.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// An `exec` channel of the least loaded session (its login shell runs the command
    /// line), its stdout and stderr handed on as they arrive, run by that session's
    /// thread. Not one of the framed shells: the command gets no orphan clean-up (it
    /// ends when its channel does) and counts against the server's MaxSessions.
    async fn run_streamed(&self, command: &Command, sink: OutputSink) -> Result<i32> {
        let worker = self.least_loaded();
        let (reply, answer) = oneshot::channel();
        let timeout = command.effective_timeout();
        let job = streams::StreamJob {
            line: command.shell_line()?,
            stdin: command.stdin_bytes().map(<[u8]>::to_vec),
            sink,
            label: command.label(),
            timeout,
            deadline: Instant::now() + timeout,
            reply,
        };
        if !worker.send(Msg::Stream(job)) {
            return Err(Error::Transport {
                message: "the SSH session thread stopped".into(),
                may_have_run: false,
            });
        }
        answer.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// Each accepted connection becomes a `direct-tcpip` channel of one session (the
    /// least loaded when the forward opened), run by that session's thread: no new
    /// login, no process on the login node.
    async fn forward(&self, local_port: u16, target: &ForwardTarget) -> Result<Forwarding> {
        let worker = self.least_loaded();
        let tx = worker.tx.clone();
        let wake = worker
            .wake
            .try_clone()
            .map_err(|e| Error::io("share a session's wake-up socket", e))?;
        let target = target.clone();
        // Tunnels hold a weak reference: they end once the forward (and this closure) is gone.
        let open = Arc::new(());
        listen_and_forward(local_port, move |stream| {
            let request = stream.into_std().map(|stream| tunnels::TunnelRequest {
                stream,
                target: target.clone(),
                open: Arc::downgrade(&open),
            });
            let sent = request
                .map_err(|e| Error::io("take a forwarded connection", e))
                .and_then(|request| {
                    tx.send(Msg::Tunnel(request)).map_err(|_| stopped())?;
                    let _ = (&wake).write(&[1]);
                    Ok(())
                });
            async move { sent }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;
    use std::sync::mpsc::{self, Receiver};
    use std::thread;

    use slurm_core::ErrorKind;

    use super::*;
    use crate::hosts::HostSpec;

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }

    /// A handle whose worker is played by the test, and that worker's inbox.
    fn handle(load: usize) -> (WorkerHandle, Receiver<Msg>) {
        let (tx, rx) = mpsc::channel();
        let (wake, _) = UnixStream::pair().unwrap();
        wake.set_nonblocking(true).unwrap();
        let load = Arc::new(AtomicUsize::new(load));
        (WorkerHandle { tx, wake, load }, rx)
    }

    fn transport(workers: Vec<WorkerHandle>) -> Ssh2Transport {
        let settings = Ssh2TransportBuilder::new().with_hosts(vec![HostSpec::new("h")]);
        Ssh2Transport {
            settings: Arc::new(settings),
            workers,
        }
    }

    /// A port nothing listens on (bound, then released).
    fn closed_port() -> u16 {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    #[test]
    fn a_command_goes_to_the_least_loaded_session() {
        let (busy, busy_rx) = handle(3);
        let (idle, idle_rx) = handle(1);
        // Each played worker answers with its own exit status.
        let answer = |rx: Receiver<Msg>, status: i32| {
            thread::spawn(move || {
                while let Ok(Msg::Job(job)) = rx.recv() {
                    let _ = job.reply.send(Ok(Output {
                        status,
                        ..Output::default()
                    }));
                }
            })
        };
        let threads = [answer(busy_rx, 3), answer(idle_rx, 1)];
        let t = transport(vec![busy, idle]);
        let out = block_on(t.run(&Command::new("true"))).unwrap();
        assert_eq!(out.status, 1, "the idle session ran it");
        assert_eq!(t.workers[1].load.load(Ordering::Relaxed), 2);
        drop(t);
        for t in threads {
            t.join().unwrap();
        }
    }

    #[test]
    fn a_stopped_session_thread_says_whether_the_command_may_have_run() {
        // The thread is gone before the command is sent: it did not run.
        let (gone, rx) = handle(0);
        drop(rx);
        let t = transport(vec![gone]);
        let err = block_on(t.run(&Command::new("true"))).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Transport);
        assert!(!err.may_have_run(), "{err}");
        assert_eq!(t.workers[0].load.load(Ordering::Relaxed), 0);
        // The thread took the command and dropped it unanswered: it may have run.
        let (dropping, rx) = handle(0);
        let worker = thread::spawn(move || while rx.recv().is_ok() {});
        let t = transport(vec![dropping]);
        let err = block_on(t.run(&Command::new("true"))).unwrap_err();
        assert!(err.may_have_run(), "{err}");
        assert!(err.to_string().contains("session thread stopped"), "{err}");
        assert!(block_on(t.connect()).unwrap_err().may_have_run());
        drop(t);
        worker.join().unwrap();
    }

    #[test]
    fn an_unreachable_host_fails_commands_and_connect_with_its_reason() {
        let port = closed_port();
        let t = Ssh2TransportBuilder::new()
            .with_hosts(vec![HostSpec::with_port("127.0.0.1", port)])
            .with_ssh_config(None)
            .with_sessions(1)
            .build()
            .unwrap();
        let err = block_on(t.run(&Command::new("true"))).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Connect, "{err}");
        assert!(!err.may_have_run());
        assert!(
            err.to_string().contains(&format!("[127.0.0.1]:{port}")),
            "{err}"
        );
        // `connect` waits out the backoff, then reports the same failure.
        let err = block_on(t.connect()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Connect, "{err}");
    }

    #[test]
    fn build_checks_the_settings() {
        let err = Ssh2TransportBuilder::new().build().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config);
        assert!(err.to_string().contains("SLURM_HOSTNAME"), "{err}");
        let err = Ssh2TransportBuilder::new()
            .with_hosts(vec![HostSpec::new("h")])
            .with_sessions(0)
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("sessions"), "{err}");
    }
}
