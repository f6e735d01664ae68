//! `Ssh2Transport`: a pool of libssh2 sessions, each owned by one thread that multiplexes framed shell channels.
//!
//! Each session (connection) belongs to one worker thread for its whole life; no
//! other thread ever touches it (libssh2 sessions break when driven from several
//! threads, ssh2-rs issue 322). The async side sends a job over a channel, wakes the
//! worker through a socket pair, and awaits a oneshot answer, so runtime threads
//! never block. The worker runs the session non-blocking and polls its socket: up to
//! `max_channels` long-lived shells per connection run commands side by side, more
//! commands queue.

use std::collections::VecDeque;
use std::fmt;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use slurm_core::transport::{Command, Output, Transport};
use slurm_core::{Error, Result};
use ssh2::{BlockDirections, Channel, ErrorCode, ExtendedData, Session};
use tokio::sync::oneshot;

use crate::config::{resolve, Ssh2TransportBuilder, Target};
use crate::framing::{ShellEvent, ShellProtocol, SHELL_START_TIMEOUT};
use crate::known_hosts;

/// First wait before reconnecting after a failed connect; doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// Longest wait between connect attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(15);
/// A connection that dies sooner than this after it opened counts as a failed connect.
const MIN_HEALTHY_LIFE: Duration = Duration::from_secs(5);
/// Shells failing to start in a row before waiting commands are failed.
const MAX_SHELL_START_FAILURES: u32 = 3;
/// Longest single poll, so deadlines are checked at least this often.
const MAX_POLL: Duration = Duration::from_millis(500);

/// Why connecting failed, kept so it can be reported to every waiting command.
#[derive(Debug, Clone)]
struct Failure {
    kind: FailureKind,
    host: String,
    message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FailureKind {
    Config,
    Auth,
    HostKey,
    Connect,
}

impl Failure {
    fn new(kind: FailureKind, host: &str, message: impl Into<String>) -> Self {
        Failure {
            kind,
            host: host.to_string(),
            message: message.into(),
        }
    }

    fn to_error(&self) -> Error {
        let host = self.host.clone();
        let message = self.message.clone();
        match self.kind {
            FailureKind::Config => Error::Config {
                field: format!("login host {host}"),
                message,
            },
            FailureKind::Auth => Error::Auth { host, message },
            FailureKind::HostKey => Error::HostKey { host, message },
            FailureKind::Connect => Error::Connect { host, message },
        }
    }

    /// One failure for the whole host list: the common kind when all agree, else
    /// a connect failure listing each host's reason.
    fn combine(mut failures: Vec<Failure>) -> Failure {
        if failures.len() == 1 {
            return failures.remove(0);
        }
        let kind = failures[0].kind;
        let kind = if failures.iter().all(|f| f.kind == kind) {
            kind
        } else {
            FailureKind::Connect
        };
        let host = failures
            .iter()
            .map(|f| f.host.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let message = failures
            .iter()
            .map(|f| format!("{}: {}", f.host, f.message))
            .collect::<Vec<_>>()
            .join("; ");
        Failure {
            kind,
            host: format!("every login host ({host})"),
            message,
        }
    }
}

struct Job {
    command: Command,
    deadline: Instant,
    reply: oneshot::Sender<Result<Output>>,
}

enum Msg {
    Job(Job),
    Connect(oneshot::Sender<Result<String>>),
}

struct WorkerHandle {
    tx: Sender<Msg>,
    wake: UnixStream,
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
/// [`Ssh2TransportBuilder`]; see the [crate docs](crate) for the design.
///
/// ```no_run
/// # async fn demo() -> slurm_core::Result<()> {
/// use slurm_core::transport::{Command, Transport};
/// use slurm_ssh::{Ssh2Transport, Ssh2TransportBuilder};
/// let ssh = Ssh2Transport::new(Ssh2TransportBuilder::from_env()?)?;
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

impl Ssh2Transport {
    /// Start the session threads. Connecting happens on first use (or on [`Ssh2Transport::connect`]).
    pub fn new(builder: Ssh2TransportBuilder) -> Result<Self> {
        builder.validate()?;
        let settings = Arc::new(builder);
        let mut workers = Vec::with_capacity(settings.sessions);
        for id in 0..settings.sessions {
            let (tx, rx) = mpsc::channel();
            let (wake_tx, wake_rx) =
                UnixStream::pair().map_err(|e| Error::io("create a wake-up socket", e))?;
            for s in [&wake_tx, &wake_rx] {
                s.set_nonblocking(true)
                    .map_err(|e| Error::io("configure a wake-up socket", e))?;
            }
            let load = Arc::new(AtomicUsize::new(0));
            let worker = Worker {
                settings: Arc::clone(&settings),
                rx,
                wake: wake_rx,
                load: Arc::clone(&load),
                queue: VecDeque::new(),
                waiters: Vec::new(),
                conn: None,
                next_attempt: Instant::now(),
                backoff: FIRST_BACKOFF,
                last_failure: None,
                orphans: None,
            };
            thread::Builder::new()
                .name(format!("slurm-ssh2-{id}"))
                .spawn(move || worker.run())
                .map_err(|e| Error::io("start a session thread", e))?;
            workers.push(WorkerHandle {
                tx,
                wake: wake_tx,
                load,
            });
        }
        Ok(Ssh2Transport { settings, workers })
    }

    /// Shorthand for `Ssh2Transport::new(Ssh2TransportBuilder::from_env()?)`.
    pub fn from_env() -> Result<Self> {
        Ssh2Transport::new(Ssh2TransportBuilder::from_env()?)
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
}

fn stopped() -> Error {
    Error::Transport {
        message: "the SSH session thread stopped".into(),
        may_have_run: true,
    }
}

#[async_trait]
impl Transport for Ssh2Transport {
    async fn run(&self, command: &Command) -> Result<Output> {
        let worker = self
            .workers
            .iter()
            .min_by_key(|w| w.load.load(Ordering::Relaxed))
            .expect("at least one session");
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
    next_attempt: Instant,
    backoff: Duration,
    last_failure: Option<Failure>,
    /// Process groups of commands a lost connection left running, and their host.
    orphans: Option<(String, Vec<u32>)>,
}

impl Worker {
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
            let wanted = !self.queue.is_empty() || !self.waiters.is_empty();
            if self.conn.is_none() && wanted && now >= self.next_attempt {
                self.connect();
                continue;
            }
            let mut progress = false;
            if let Some(conn) = self.conn.as_mut() {
                for waiter in self.waiters.drain(..) {
                    let _ = waiter.send(Ok(conn.host.clone()));
                }
                let mut done = Vec::new();
                match conn.step(&mut self.queue, &self.settings, &mut done) {
                    Ok(p) => progress = p,
                    Err(reason) => {
                        let conn = self.conn.take().expect("connection present");
                        let lived = conn.opened.elapsed();
                        let host = conn.host.clone();
                        tracing::warn!(%host, %reason, "SSH connection lost");
                        let (jobs, kills) = conn.abandon();
                        // Commands left running remotely are killed by the next
                        // connection's first shell, if it reaches the same host.
                        self.orphans = Some((host.clone(), kills));
                        for (job, may_have_run) in jobs {
                            done.push((
                                job,
                                Err(Error::Transport {
                                    message: format!("SSH connection to {host} lost: {reason}"),
                                    may_have_run,
                                }),
                            ));
                        }
                        if lived < MIN_HEALTHY_LIFE {
                            self.next_attempt = Instant::now() + self.backoff;
                            self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                        }
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
                                .and_then(|c| c.shell_failure.as_ref())
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
                tracing::debug!(host = %conn.host, "SSH session open");
                if let Some((host, kills)) = self.orphans.take() {
                    if host == conn.host {
                        conn.kills = kills;
                    }
                }
                self.backoff = FIRST_BACKOFF;
                self.last_failure = None;
                self.conn = Some(conn);
            }
            Err(failure) => {
                tracing::warn!(host = %failure.host, reason = %failure.message, "SSH connect failed");
                self.next_attempt = Instant::now() + self.backoff;
                self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                for job in std::mem::take(&mut self.queue) {
                    self.reply(job, Err(failure.to_error()));
                }
                for waiter in self.waiters.drain(..) {
                    let _ = waiter.send(Err(failure.to_error()));
                }
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
            until = until.min(self.next_attempt);
        }
        let mut fds = vec![libc::pollfd {
            fd: self.wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        if let Some(conn) = &self.conn {
            until = until.min(conn.next_deadline());
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

/// Connect to the first login host that works (blocking, in the worker thread).
fn connect(settings: &Ssh2TransportBuilder) -> std::result::Result<Conn, Failure> {
    let ssh_config = settings
        .load_ssh_config()
        .map_err(|e| Failure::new(FailureKind::Config, "~/.ssh/config", e.to_string()))?;
    let mut failures = Vec::new();
    for spec in &settings.hosts {
        let target = resolve(
            spec,
            ssh_config.as_ref(),
            settings.user.as_deref(),
            settings.key_path.as_deref(),
        );
        match connect_one(settings, &target) {
            Ok(conn) => return Ok(conn),
            Err(f) => failures.push(f),
        }
    }
    Err(Failure::combine(failures))
}

fn connect_one(
    settings: &Ssh2TransportBuilder,
    target: &Target,
) -> std::result::Result<Conn, Failure> {
    let label = known_hosts::known_hosts_name(&target.hostname, target.port);
    let fail = |kind, message: String| Failure::new(kind, &label, message);
    if let Some(jump) = &target.proxy_jump {
        return Err(fail(
            FailureKind::Config,
            format!(
                "~/.ssh/config asks for ProxyJump {jump} for {}, which Ssh2Transport does not support; use OpenSshTransport for this host",
                target.alias
            ),
        ));
    }
    let addrs: Vec<_> = (target.hostname.as_str(), target.port)
        .to_socket_addrs()
        .map_err(|e| {
            fail(
                FailureKind::Connect,
                format!("cannot resolve {}: {e}", target.hostname),
            )
        })?
        .collect();
    let mut last = String::from("no address");
    let mut tcp = None;
    for addr in &addrs {
        match TcpStream::connect_timeout(addr, settings.connect_timeout) {
            Ok(s) => {
                tcp = Some(s);
                break;
            }
            Err(e) => last = format!("{addr}: {e}"),
        }
    }
    let tcp = tcp.ok_or_else(|| fail(FailureKind::Connect, last))?;
    let _ = tcp.set_nodelay(true);
    let fd = tcp.as_raw_fd();
    let mut session =
        Session::new().map_err(|e| fail(FailureKind::Connect, format!("libssh2: {e}")))?;
    session.set_tcp_stream(tcp);
    session.set_timeout(settings.connect_timeout.as_millis().min(u32::MAX as u128) as u32);
    session
        .handshake()
        .map_err(|e| fail(FailureKind::Connect, format!("SSH handshake failed: {e}")))?;
    known_hosts::check(
        &session,
        &target.hostname,
        target.port,
        &settings.known_hosts_path(),
        settings.trust_on_first_use,
    )
    .map_err(|r| Failure::new(FailureKind::HostKey, &r.host, r.message))?;
    authenticate(settings, target, &session).map_err(|(kind, m)| fail(kind, m))?;
    session.set_keepalive(
        true,
        settings.keepalive.as_secs().clamp(1, u32::MAX as u64) as u32,
    );
    session.set_timeout(0);
    session.set_blocking(false);
    Ok(Conn {
        session,
        fd,
        host: label,
        opened: Instant::now(),
        shells: Vec::new(),
        closing: Vec::new(),
        kills: Vec::new(),
        next_keepalive: Instant::now() + settings.keepalive,
        channel_limit: settings.max_channels,
        shell_failure: None,
        start_failures: 0,
        next_shell_open: Instant::now(),
        shell_backoff: FIRST_BACKOFF,
    })
}

fn authenticate(
    settings: &Ssh2TransportBuilder,
    target: &Target,
    session: &Session,
) -> std::result::Result<(), (FailureKind, String)> {
    let user = &target.user;
    if let Some(key) = &target.identity {
        let passphrase = settings.passphrase.as_ref().map(|p| p.expose());
        session
            .userauth_pubkey_file(user, None, key, passphrase)
            .map_err(|e| {
                (
                    FailureKind::Auth,
                    format!(
                        "the key {} was refused for user {user} ({e}); check that its public half is in ~{user}/.ssh/authorized_keys on the host{}",
                        key.display(),
                        if passphrase.is_some() { " and that the passphrase is right" } else { ", and pass the passphrase with with_passphrase if the key has one" }
                    ),
                )
            })?;
    } else if settings.use_agent {
        session.userauth_agent(user).map_err(|e| {
            (
                FailureKind::Auth,
                format!("no key in the ssh-agent (SSH_AUTH_SOCK) was accepted for user {user} ({e}); add one with ssh-add or set SSH_KEY_PATH"),
            )
        })?;
    } else {
        return Err((
            FailureKind::Config,
            "no credentials: set SSH_KEY_PATH to a private key, or start an ssh-agent (SSH_AUTH_SOCK)".into(),
        ));
    }
    if session.authenticated() {
        Ok(())
    } else {
        Err((
            FailureKind::Auth,
            format!("the server did not accept user {user}"),
        ))
    }
}

/// libssh2 error codes (stable parts of its ABI; ssh2 does not re-export them).
const LIBSSH2_ERROR_EAGAIN: i32 = -37;
const LIBSSH2_ERROR_CHANNEL_FAILURE: i32 = -21;
const LIBSSH2_ERROR_CHANNEL_REQUEST_DENIED: i32 = -22;
const LIBSSH2_ERROR_CHANNEL_CLOSED: i32 = -26;
const LIBSSH2_ERROR_CHANNEL_EOF_SENT: i32 = -27;

fn would_block(e: &ssh2::Error) -> bool {
    e.code() == ErrorCode::Session(LIBSSH2_ERROR_EAGAIN)
}

/// Errors of a channel request that leave the session usable.
fn channel_level(e: &ssh2::Error) -> bool {
    matches!(
        e.code(),
        ErrorCode::Session(LIBSSH2_ERROR_CHANNEL_FAILURE)
            | ErrorCode::Session(LIBSSH2_ERROR_CHANNEL_REQUEST_DENIED)
            | ErrorCode::Session(LIBSSH2_ERROR_CHANNEL_CLOSED)
            | ErrorCode::Session(LIBSSH2_ERROR_CHANNEL_EOF_SENT)
    )
}

enum Stage {
    /// Waiting for the session to open a channel (one open at a time per session).
    Opening,
    /// Channel open; the shell request is under way.
    Requesting(Channel),
    /// The shell runs.
    Running(Channel),
}

struct Shell {
    stage: Stage,
    proto: ShellProtocol,
    job: Option<Job>,
    started: Instant,
    dead: Option<String>,
    /// Whether the shell ever finished its set-up.
    was_ready: bool,
}

/// One connection and its shells, touched only by its worker thread.
struct Conn {
    session: Session,
    fd: RawFd,
    host: String,
    opened: Instant,
    shells: Vec<Shell>,
    closing: Vec<Channel>,
    /// Process groups of timed-out commands, killed by the next shell started.
    kills: Vec<u32>,
    next_keepalive: Instant,
    /// Lowered when the server refuses a channel (its MaxSessions is lower than ours).
    channel_limit: usize,
    shell_failure: Option<String>,
    /// Shells that failed to start in a row, and when the next may be opened.
    start_failures: u32,
    next_shell_open: Instant,
    shell_backoff: Duration,
}

type Done = Vec<(Job, Result<Output>)>;

impl Conn {
    fn next_deadline(&self) -> Instant {
        let mut until = self.next_keepalive;
        if self.next_shell_open > Instant::now() {
            until = until.min(self.next_shell_open);
        }
        for shell in &self.shells {
            if let Some(job) = &shell.job {
                until = until.min(job.deadline);
            }
            if !shell.proto.is_ready() {
                until = until.min(shell.started + SHELL_START_TIMEOUT);
            }
        }
        until
    }

    /// Jobs in flight and whether each may have run, for a connection that died,
    /// and the process groups of commands still running remotely.
    fn abandon(self) -> (Vec<(Job, bool)>, Vec<u32>) {
        let mut kills = self.kills;
        let mut jobs = Vec::new();
        for mut shell in self.shells {
            if let Some(pgid) = shell.proto.running_pgid() {
                kills.push(pgid);
            }
            let may = shell.proto.request_delivered();
            if let Some(job) = shell.job.take() {
                jobs.push((job, may));
            }
        }
        (jobs, kills)
    }

    fn shutdown(self) {
        let _ = self.session.disconnect(None, "slurm-run closing", None);
    }

    /// Move every shell as far as it can go without blocking. Returns whether
    /// anything happened, or the reason the connection is dead.
    fn step(
        &mut self,
        queue: &mut VecDeque<Job>,
        settings: &Ssh2TransportBuilder,
        done: &mut Done,
    ) -> std::result::Result<bool, String> {
        let mut progress = false;
        let now = Instant::now();
        if now >= self.next_keepalive {
            match self.session.keepalive_send() {
                Ok(secs) => self.next_keepalive = now + Duration::from_secs(u64::from(secs.max(1))),
                Err(e) if would_block(&e) => self.next_keepalive = now + Duration::from_secs(1),
                Err(e) => return Err(format!("keepalive failed: {e}")),
            }
        }
        // Hand queued commands to idle shells.
        for shell in &mut self.shells {
            if shell.job.is_some() || shell.dead.is_some() || !shell.proto.is_ready() {
                continue;
            }
            while let Some(job) = queue.pop_front() {
                if job.reply.is_closed() {
                    done.push((job, Err(stopped())));
                    continue;
                }
                match shell.proto.send(&job.command) {
                    Ok(()) => {
                        shell.job = Some(job);
                        progress = true;
                    }
                    Err(e) => done.push((job, Err(e))),
                }
                break;
            }
        }
        // Open another shell when commands wait and the cap allows.
        let starting = self.shells.iter().filter(|s| !s.proto.is_ready()).count();
        let in_use = self.shells.len() + self.closing.len();
        let want_more = queue.len() > starting || (!self.kills.is_empty() && starting == 0);
        if want_more
            && in_use < self.channel_limit.min(settings.max_channels)
            && now >= self.next_shell_open
        {
            self.shells.push(Shell {
                stage: Stage::Opening,
                proto: ShellProtocol::new(&std::mem::take(&mut self.kills)),
                job: None,
                started: now,
                dead: None,
                was_ready: false,
            });
            progress = true;
        }
        let mut opening_taken = false;
        let mut buf = vec![0u8; 64 * 1024];
        for shell in &mut self.shells {
            progress |= drive(
                &self.session,
                shell,
                &mut opening_taken,
                &mut buf,
                &mut self.channel_limit,
                done,
            )?;
            if shell.dead.is_none()
                && !shell.proto.is_ready()
                && now > shell.started + SHELL_START_TIMEOUT
                && shell.job.is_none()
            {
                shell.dead = Some(format!(
                    "the shell did not become ready within {SHELL_START_TIMEOUT:?}"
                ));
            }
            if let Some(job) = &shell.job {
                if Instant::now() >= job.deadline {
                    let job = shell.job.take().expect("job present");
                    if let Some(pgid) = shell.proto.running_pgid() {
                        self.kills.push(pgid);
                    }
                    let result = Err(Error::Timeout {
                        what: format!("`{}` on {}", job.command.label(), self.host),
                        after: job.command.effective_timeout(),
                        may_have_run: shell.proto.request_delivered(),
                    });
                    done.push((job, result));
                    shell.dead = Some("timed out".into());
                }
            }
        }
        // Answer finished commands and retire dead shells.
        let mut kept = Vec::with_capacity(self.shells.len());
        for mut shell in self.shells.drain(..) {
            if let Some(reason) = shell.dead.take() {
                progress = true;
                if let Some(job) = shell.job.take() {
                    let may_have_run = shell.proto.request_delivered();
                    done.push((
                        job,
                        Err(Error::Transport {
                            message: format!("the remote shell on {} failed: {reason}", self.host),
                            may_have_run,
                        }),
                    ));
                }
                if !shell.was_ready {
                    // A shell that never became ready: wait before opening the next
                    // one, and give up on waiting commands after a few tries.
                    self.start_failures += 1;
                    self.next_shell_open = Instant::now() + self.shell_backoff;
                    self.shell_backoff = (self.shell_backoff * 2).min(MAX_BACKOFF);
                    if self.start_failures >= MAX_SHELL_START_FAILURES {
                        for job in queue.drain(..) {
                            done.push((
                                job,
                                Err(Error::Transport {
                                    message: format!(
                                        "the remote shell on {} fails to start ({reason}); check the login files (.bashrc, .profile) of the remote user",
                                        self.host
                                    ),
                                    may_have_run: false,
                                }),
                            ));
                        }
                        self.start_failures = 0;
                    }
                }
                if reason != "timed out" {
                    self.shell_failure = Some(reason);
                }
                match shell.stage {
                    Stage::Requesting(ch) | Stage::Running(ch) => self.closing.push(ch),
                    Stage::Opening => {}
                }
            } else {
                kept.push(shell);
            }
        }
        self.shells = kept;
        if self.shells.iter().any(|s| s.proto.is_ready()) {
            self.shell_failure = None;
            self.start_failures = 0;
            self.shell_backoff = FIRST_BACKOFF;
        }
        // Finish closing retired channels (then they are freed on drop).
        let mut still = Vec::new();
        for mut ch in self.closing.drain(..) {
            match ch.close() {
                Err(e) if would_block(&e) => still.push(ch),
                _ => progress = true,
            }
        }
        self.closing = still;
        Ok(progress)
    }
}

/// Move one shell forward. Returns whether anything happened, or a connection-level error.
fn drive(
    session: &Session,
    shell: &mut Shell,
    opening_taken: &mut bool,
    buf: &mut [u8],
    channel_limit: &mut usize,
    done: &mut Done,
) -> std::result::Result<bool, String> {
    if shell.dead.is_some() {
        return Ok(false);
    }
    let mut progress = false;
    if let Stage::Opening = shell.stage {
        if *opening_taken {
            return Ok(false);
        }
        *opening_taken = true;
        match session.channel_session() {
            Ok(mut ch) => {
                // Ignore the shell's own stderr (command stderr travels framed on stdout).
                let _ = ch.handle_extended_data(ExtendedData::Ignore);
                shell.stage = Stage::Requesting(ch);
                progress = true;
            }
            Err(e) if would_block(&e) => return Ok(false),
            Err(e) if channel_level(&e) => {
                *channel_limit = (*channel_limit).saturating_sub(1).max(1);
                shell.dead = Some(format!("the server refused a channel: {e}"));
                return Ok(true);
            }
            Err(e) => return Err(format!("opening a channel failed: {e}")),
        }
    }
    if let Stage::Requesting(ch) = &mut shell.stage {
        match ch.shell() {
            Ok(()) => {
                let Stage::Requesting(ch) = std::mem::replace(&mut shell.stage, Stage::Opening)
                else {
                    unreachable!()
                };
                shell.stage = Stage::Running(ch);
                progress = true;
            }
            Err(e) if would_block(&e) => return Ok(progress),
            Err(e) if channel_level(&e) => {
                shell.dead = Some(format!("the server refused a shell: {e}"));
                return Ok(true);
            }
            Err(e) => return Err(format!("requesting a shell failed: {e}")),
        }
    }
    let Stage::Running(ch) = &mut shell.stage else {
        return Ok(progress);
    };
    // Write what the protocol has pending.
    while !shell.proto.to_write().is_empty() {
        match ch.write(shell.proto.to_write()) {
            Ok(0) => break,
            Ok(n) => {
                shell.proto.wrote(n);
                progress = true;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(format!("writing to the shell channel failed: {e}")),
        }
    }
    // Read what the shell said.
    loop {
        match ch.read(buf) {
            Ok(0) => {
                if ch.eof() {
                    shell.dead = Some("the remote shell exited".into());
                    return Ok(true);
                }
                break;
            }
            Ok(n) => {
                progress = true;
                match shell.proto.receive(&buf[..n]) {
                    Ok(events) => {
                        for event in events {
                            match event {
                                ShellEvent::Finished(output) => {
                                    if let Some(job) = shell.job.take() {
                                        done.push((job, Ok(output)));
                                    }
                                }
                                ShellEvent::Refused => {
                                    shell.dead = Some(
                                        "the request reached the shell damaged and was not run"
                                            .into(),
                                    );
                                }
                                ShellEvent::Ready => shell.was_ready = true,
                                ShellEvent::Started { .. } => {}
                            }
                        }
                    }
                    Err(e) => {
                        shell.dead = Some(e.to_string());
                        return Ok(true);
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(format!("reading from the shell channel failed: {e}")),
        }
    }
    Ok(progress)
}
