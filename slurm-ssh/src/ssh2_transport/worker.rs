//! The owner thread of one session: its queue of commands, (re)connecting with backoff, expiry of queued commands, and polling.

use std::collections::VecDeque;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use slurm_core::{Error, Output, Result};
use ssh2::BlockDirections;
use tokio::sync::oneshot;

use super::backoff::Backoff;
use super::channel::ConnFailure;
use super::connect::{connect, Conn, ConnectFailure};
use super::streams::Streams;
use super::tunnels::Tunnels;
use super::{Done, Job, Msg, WorkerHandle};
use crate::config::Ssh2TransportBuilder;
use crate::framing::Orphan;

/// A connection that dies sooner than this after it opened counts as a failed connect.
const MIN_HEALTHY_LIFE: Duration = Duration::from_secs(5);
/// Longest single poll, so deadlines are checked at least this often.
const MAX_POLL: Duration = Duration::from_millis(500);

/// Start session thread `id`; the handle is its only way in.
pub(crate) fn spawn(id: usize, settings: Arc<Ssh2TransportBuilder>) -> Result<WorkerHandle> {
    let (tx, rx) = mpsc::channel();
    let (wake_tx, wake_rx) =
        UnixStream::pair().map_err(|e| Error::io("create a wake-up socket", e))?;
    for s in [&wake_tx, &wake_rx] {
        s.set_nonblocking(true)
            .map_err(|e| Error::io("configure a wake-up socket", e))?;
    }
    let load = Arc::new(AtomicUsize::new(0));
    let worker = Worker::new(settings, rx, wake_rx, Arc::clone(&load));
    thread::Builder::new()
        .name(format!("slurm-ssh2-{id}"))
        .spawn(move || worker.run())
        .map_err(|e| Error::io("start a session thread", e))?;
    Ok(WorkerHandle {
        tx,
        wake: wake_tx,
        load,
    })
}

/// The owner thread of one session.
struct Worker {
    settings: Arc<Ssh2TransportBuilder>,
    rx: Receiver<Msg>,
    wake: UnixStream,
    load: Arc<AtomicUsize>,
    queue: VecDeque<Job>,
    waiters: Vec<oneshot::Sender<Result<String>>>,
    conn: Option<Conn>,
    backoff: Backoff,
    last_failure: Option<ConnectFailure>,
    /// Process groups of commands a lost connection left running, and their host.
    orphans: Option<(String, Vec<Orphan>)>,
    /// Forwarded connections: each a `direct-tcpip` channel of the connection.
    tunnels: Tunnels,
    /// Streamed commands: each an `exec` channel of the connection.
    streams: Streams,
}

impl Worker {
    fn new(
        settings: Arc<Ssh2TransportBuilder>,
        rx: Receiver<Msg>,
        wake: UnixStream,
        load: Arc<AtomicUsize>,
    ) -> Self {
        Worker {
            settings,
            rx,
            wake,
            load,
            queue: VecDeque::new(),
            waiters: Vec::new(),
            conn: None,
            backoff: Backoff::new(Instant::now()),
            last_failure: None,
            orphans: None,
            tunnels: Tunnels::default(),
            streams: Streams::default(),
        }
    }

    fn reply(&self, job: Job, result: Result<Output>) {
        self.load.fetch_sub(1, Ordering::Relaxed);
        let _ = job.reply.send(result);
    }

    fn run(mut self) {
        loop {
            loop {
                match self.rx.try_recv() {
                    Ok(Msg::Job(job)) => self.queue.push_back(job),
                    Ok(Msg::Connect(waiter)) => self.waiters.push(waiter),
                    Ok(Msg::Tunnel(request)) => self.tunnels.add(request),
                    Ok(Msg::Stream(job)) => self.streams.add(job),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        if let Some(conn) = self.conn.take() {
                            conn.shutdown();
                        }
                        return;
                    }
                }
            }
            let now = Instant::now();
            self.expire_queued(now);
            let wanted = !self.queue.is_empty()
                || !self.waiters.is_empty()
                || !self.tunnels.is_empty()
                || !self.streams.is_empty();
            if self.conn.is_none() && wanted && self.backoff.allows(now) {
                self.connect();
                continue;
            }
            let mut progress = false;
            if let Some(conn) = self.conn.as_mut() {
                for waiter in self.waiters.drain(..) {
                    let _ = waiter.send(Ok(conn.host().to_string()));
                }
                if server_spoke(conn.fd, &mut conn.received) {
                    conn.shells.heard();
                }
                let mut done = Vec::new();
                let max_channels = self.settings.max_channels;
                // libssh2 opens one channel at a time per session: shells, forwarded
                // connections and streamed commands take turns.
                conn.shells.open_elsewhere =
                    self.tunnels.open_pending() || self.streams.open_pending();
                match conn
                    .shells
                    .step(&conn.session, &mut self.queue, max_channels, &mut done)
                {
                    Ok(p) => {
                        let shells_opening = conn.shells.opening();
                        progress = p | self
                            .tunnels
                            .step(&conn.session, shells_opening || self.streams.open_pending());
                        progress |= self
                            .streams
                            .step(&conn.session, shells_opening || self.tunnels.open_pending());
                    }
                    Err(reason) => {
                        let conn = self.conn.take().expect("connection present");
                        self.lost(conn, reason, &mut done);
                        progress = true;
                    }
                }
                for (job, result) in done {
                    self.reply(job, result);
                }
            }
            if !progress {
                self.wait();
            }
        }
    }

    /// The connection died: fail its commands, remember what it left running, and
    /// back off when it died young.
    fn lost(&mut self, conn: Conn, reason: ConnFailure, done: &mut Done) {
        let lived = conn.opened.elapsed();
        let host = conn.host().to_string();
        tracing::warn!(%host, %reason, "SSH connection lost");
        let (answers, kills) = conn.shells.abandon(&reason);
        done.extend(answers);
        // Commands left running remotely are killed by the next connection's first
        // shell, if it reaches the same host.
        self.orphans = Some((host, kills));
        // Forwarded connections end with their channels (their local sockets close);
        // streamed commands fail, saying whether they may have run.
        self.tunnels = Tunnels::default();
        self.streams.abandon(&reason.to_string());
        if lived < MIN_HEALTHY_LIFE {
            self.backoff.failed(Instant::now());
        }
    }

    /// Fail queued (never sent) commands whose deadline passed.
    fn expire_queued(&mut self, now: Instant) {
        let mut kept = VecDeque::with_capacity(self.queue.len());
        for job in std::mem::take(&mut self.queue) {
            if job.reply.is_closed() {
                self.load.fetch_sub(1, Ordering::Relaxed);
            } else if job.deadline <= now {
                let error = match (&self.last_failure, &self.conn) {
                    (Some(f), None) => f.to_error(),
                    _ => Error::Timeout {
                        what: format!(
                            "`{}` (waiting for a free SSH channel{})",
                            job.command.label(),
                            self.conn
                                .as_ref()
                                .and_then(|c| c.shells.shell_failure.as_ref())
                                .map(|r| format!("; last shell start failed: {r}"))
                                .unwrap_or_default()
                        ),
                        after: job.command.effective_timeout(),
                        may_have_run: false,
                    },
                };
                self.reply(job, Err(error));
            } else {
                kept.push_back(job);
            }
        }
        self.queue = kept;
    }

    fn connect(&mut self) {
        match connect(&self.settings) {
            Ok(mut conn) => {
                tracing::debug!(host = %conn.host(), "SSH session open");
                if let Some((host, kills)) = self.orphans.take() {
                    if host == conn.host() {
                        conn.shells.kills = kills;
                    }
                }
                self.backoff.succeeded();
                self.last_failure = None;
                self.conn = Some(conn);
            }
            Err(failure) => {
                tracing::warn!(host = %failure.host, reason = %failure.message, "SSH connect failed");
                self.backoff.failed(Instant::now());
                for job in std::mem::take(&mut self.queue) {
                    self.reply(job, Err(failure.to_error()));
                }
                for waiter in self.waiters.drain(..) {
                    let _ = waiter.send(Err(failure.to_error()));
                }
                self.streams.fail_all(|| failure.to_error());
                self.last_failure = Some(failure);
            }
        }
    }

    /// Sleep until the socket is ready, a message arrives, or the next deadline.
    fn wait(&mut self) {
        let now = Instant::now();
        let mut until = now + MAX_POLL;
        for job in &self.queue {
            until = until.min(job.deadline);
        }
        if self.conn.is_none() && !self.queue.is_empty() {
            until = until.min(self.backoff.next_attempt());
        }
        let mut fds = vec![libc::pollfd {
            fd: self.wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        if let Some(deadline) = self.streams.next_deadline() {
            until = until.min(deadline);
        }
        if let Some(conn) = &self.conn {
            until = until.min(conn.shells.next_deadline());
            let mut events = libc::POLLIN;
            if matches!(
                conn.session.block_directions(),
                BlockDirections::Outbound | BlockDirections::Both
            ) {
                events |= libc::POLLOUT;
            }
            fds.push(libc::pollfd {
                fd: conn.fd,
                events,
                revents: 0,
            });
            for (fd, events) in self.tunnels.poll_fds() {
                fds.push(libc::pollfd {
                    fd,
                    events,
                    revents: 0,
                });
            }
        }
        let timeout = until
            .saturating_duration_since(now)
            .as_millis()
            .min(i32::MAX as u128) as i32;
        // SAFETY: `fds` is a valid array of initialised pollfd for its whole length.
        unsafe {
            libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout.max(0));
        }
        let mut buf = [0u8; 64];
        while matches!((&self.wake).read(&mut buf), Ok(n) if n > 0) {}
    }
}

/// Whether the server sent something not read yet: looked at before each step, so
/// libssh2 has not consumed it (keepalive answers included).
/// Whether the server sent anything since the last look: the kernel received more
/// bytes on the socket than `received` (kept up to date here), or data waits on it.
/// Data waiting alone is not enough: libssh2 reads the answer to a keepalive while it
/// drives a channel, which leaves nothing waiting, and a connection whose commands
/// printed nothing for a few keepalive intervals was then dropped as silent.
fn server_spoke(fd: std::os::fd::RawFd, received: &mut u64) -> bool {
    let grew = match bytes_received(fd) {
        Some(now) if now > *received => {
            *received = now;
            true
        }
        _ => false,
    };
    grew || readable(fd)
}

/// The bytes the kernel received on TCP socket `fd` (`TCP_INFO`), if it tells.
fn bytes_received(fd: std::os::fd::RawFd) -> Option<u64> {
    // SAFETY: a zeroed tcp_info is a valid value of a plain C struct.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` and `len` are valid for the kernel to write, and `len` is its size.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            std::ptr::addr_of_mut!(info).cast(),
            &mut len,
        )
    };
    (rc == 0 && len as usize >= std::mem::size_of::<libc::tcp_info>())
        .then_some(info.tcpi_bytes_received)
}

fn readable(fd: std::os::fd::RawFd) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    n > 0 && pfd.revents & libc::POLLIN != 0
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::mpsc::Sender;

    use slurm_core::Command;
    use slurm_core::ErrorKind;
    use ssh2::Session;

    use super::super::connect::FailureKind;
    use super::super::shells::{Keepalive, ShellPool};
    use super::*;
    use crate::hosts::HostSpec;

    type Answer = oneshot::Receiver<Result<Output>>;

    /// A worker not running on a thread, for one closed port; and its inbox's sender.
    fn worker() -> (Worker, Sender<Msg>) {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let settings = Ssh2TransportBuilder::new()
            .with_hosts(vec![HostSpec::with_port("127.0.0.1", port)])
            .with_ssh_config(None);
        let (tx, rx) = mpsc::channel();
        let (wake, _) = UnixStream::pair().unwrap();
        let load = Arc::new(AtomicUsize::new(0));
        (Worker::new(Arc::new(settings), rx, wake, load), tx)
    }

    /// Queue a command due at `deadline`, as the bridge would (counting it in the load).
    fn enqueue(worker: &mut Worker, deadline: Instant) -> Answer {
        let (reply, answer) = oneshot::channel();
        let command = Command::new("squeue");
        worker.queue.push_back(Job {
            command,
            deadline,
            reply,
        });
        worker.load.fetch_add(1, Ordering::Relaxed);
        answer
    }

    fn error(mut answer: Answer) -> Error {
        answer.try_recv().expect("answered").expect_err("an error")
    }

    #[test]
    fn queued_commands_past_their_deadline_fail_saying_what_they_waited_for() {
        let (mut w, _tx) = worker();
        let now = Instant::now();
        let overdue = enqueue(&mut w, now);
        let mut waiting = enqueue(&mut w, now + Duration::from_secs(60));
        drop(enqueue(&mut w, now)); // its caller left
        w.expire_queued(now);
        let err = error(overdue);
        assert_eq!(err.kind(), ErrorKind::Timeout);
        assert!(!err.may_have_run());
        assert!(
            err.to_string().contains("waiting for a free SSH channel"),
            "{err}"
        );
        assert!(waiting.try_recv().is_err(), "not answered yet");
        assert_eq!(w.queue.len(), 1);
        assert_eq!(
            w.load.load(Ordering::Relaxed),
            1,
            "answered and abandoned jobs are counted out"
        );
        // Without a connection, the last connect failure is the better answer.
        w.last_failure = Some(ConnectFailure::new(
            FailureKind::Auth,
            "login1",
            "key refused",
        ));
        w.queue[0].deadline = now;
        w.expire_queued(now);
        assert_eq!(error(waiting).kind(), ErrorKind::Auth);
    }

    #[test]
    fn a_failed_connect_answers_every_caller_and_backs_off() {
        let (mut w, _tx) = worker();
        let answer = enqueue(&mut w, Instant::now() + Duration::from_secs(60));
        let (waiter, mut connected) = oneshot::channel();
        w.waiters.push(waiter);
        w.connect();
        let err = error(answer);
        assert_eq!(err.kind(), ErrorKind::Connect, "{err}");
        assert!(!err.may_have_run());
        let err = connected.try_recv().unwrap().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Connect);
        assert!(w.queue.is_empty() && w.waiters.is_empty() && w.conn.is_none());
        assert_eq!(w.load.load(Ordering::Relaxed), 0);
        assert!(w.last_failure.is_some());
        assert!(!w.backoff.allows(Instant::now()), "the next attempt waits");
    }

    #[test]
    fn a_connection_lost_young_backs_off_and_leaves_its_orphans_to_kill() {
        let reason = || ConnFailure::Read(std::io::Error::other("reset"));
        for (age, backs_off) in [(Duration::ZERO, true), (MIN_HEALTHY_LIFE, false)] {
            let (mut w, _tx) = worker();
            let keepalive = Keepalive {
                interval: Duration::from_secs(30),
                max_missed: 3,
            };
            let mut shells = ShellPool::new("login1".into(), 8, keepalive);
            let orphan = Orphan {
                pgid: 42,
                start: "7".into(),
                boot: "b".into(),
                marker: "SRM1".into(),
            };
            shells.kills = vec![orphan.clone()];
            let conn = Conn {
                session: Session::new().unwrap(),
                fd: -1,
                received: 0,
                opened: Instant::now() - age,
                shells,
            };
            let mut done = Vec::new();
            w.lost(conn, reason(), &mut done);
            assert!(done.is_empty(), "no command was in flight");
            assert_eq!(w.orphans, Some(("login1".to_string(), vec![orphan])));
            assert_eq!(!w.backoff.allows(Instant::now()), backs_off, "age {age:?}");
        }
    }

    /// The answer to a keepalive that libssh2 read while it drove a channel leaves
    /// nothing waiting on the socket; the server spoke all the same. (Looking only for
    /// data waiting, the old worker missed such answers, and a connection whose commands
    /// printed nothing for 40 s was dropped as silent: the probe tests on a fresh test
    /// bed, whose first image conversion prints nothing for 30 to 60 s, failed so.)
    #[test]
    fn bytes_already_read_count_as_the_server_speaking() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        let fd = client.as_raw_fd();
        let mut received = 0;
        assert!(!server_spoke(fd, &mut received), "nothing sent yet");
        server.write_all(b"keepalive answer").unwrap();
        // What libssh2 would do while driving a channel: read it all.
        let mut buf = [0u8; 16];
        client.read_exact(&mut buf).unwrap();
        assert!(!readable(fd), "nothing is waiting any more");
        assert!(
            server_spoke(fd, &mut received),
            "the kernel counted the bytes"
        );
        assert!(!server_spoke(fd, &mut received), "and only once");
    }
}
