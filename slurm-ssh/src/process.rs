//! `ProcessShellTransport`: framed commands through long-lived shell processes (a local `bash`, or an `ssh` client).
//!
//! Each shell is one child process speaking the [`framing`](crate::framing) protocol
//! on its standard input and output, owned by one worker thread; two helper threads
//! per child move bytes to and from its pipes so the owner can enforce deadlines.
//! [`OpenSshTransport`](crate::OpenSshTransport) is this transport with `ssh` as the
//! program; with `bash` as the program it runs the protocol locally, which is how
//! the framing is tested without a server.

use std::fmt;
use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use slurm_core::{Command, Error, Output, Result, Transport};
use tokio::sync::oneshot;

use crate::framing::{Orphan, ShellEvent, ShellProtocol, SHELL_START_TIMEOUT};

/// How many bytes of a shell process's standard error are kept for error messages.
const STDERR_TAIL: usize = 4096;

/// A check run before each shell process starts (e.g. "is the ControlMaster up?").
pub type Preflight = Arc<dyn Fn() -> Result<()> + Send + Sync>;

/// How to start the shell processes of a [`ProcessShellTransport`].
#[derive(Clone)]
pub struct ProcessShellConfig {
    /// The program that starts a shell reading commands on its standard input.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// How many shells may run commands at once (each is one process).
    pub shells: usize,
    /// The name used in errors (a host, or `local bash`).
    pub label: String,
    /// How long a shell may take to become ready.
    pub start_timeout: Duration,
    /// Run before each shell starts; its error is returned as is.
    pub preflight: Option<Preflight>,
}

impl fmt::Debug for ProcessShellConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessShellConfig")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("shells", &self.shells)
            .field("label", &self.label)
            .field("start_timeout", &self.start_timeout)
            .field("preflight", &self.preflight.is_some())
            .finish()
    }
}

impl ProcessShellConfig {
    /// A config starting `program args...` as the shell, with 4 shells.
    pub fn new<I, S>(program: impl Into<String>, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let program = program.into();
        ProcessShellConfig {
            label: program.clone(),
            program,
            args: args.into_iter().map(Into::into).collect(),
            shells: 4,
            start_timeout: SHELL_START_TIMEOUT,
            preflight: None,
        }
    }
}

struct Job {
    command: Command,
    deadline: Instant,
    reply: oneshot::Sender<Result<Output>>,
}

/// Runs framed commands through a few long-lived shell processes (a local `bash`, or
/// an `ssh` client). Each shell is one child process speaking the framing protocol on
/// its standard input and output, owned by one worker thread that enforces deadlines.
/// [`OpenSshTransport`](crate::OpenSshTransport) is this transport with `ssh` as the
/// program; [`ProcessShellTransport::local_bash`] runs the protocol locally.
pub struct ProcessShellTransport {
    config: Arc<ProcessShellConfig>,
    queue: Mutex<Option<Sender<Job>>>,
}

impl fmt::Debug for ProcessShellTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessShellTransport")
            .field("config", &self.config)
            .finish()
    }
}

impl ProcessShellTransport {
    /// Start the worker threads (the shells themselves start on first use).
    pub fn new(config: ProcessShellConfig) -> Result<Self> {
        if config.shells == 0 {
            return Err(Error::config(
                "shells",
                "must be at least 1; use the default (4) unless the server allows fewer sessions",
            ));
        }
        let config = Arc::new(config);
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..config.shells {
            let rx = Arc::clone(&rx);
            let config = Arc::clone(&config);
            thread::Builder::new()
                .name(format!("slurm-shell-{i}"))
                .spawn(move || worker(config, rx))
                .map_err(|e| Error::io("start a shell worker thread", e))?;
        }
        Ok(ProcessShellTransport {
            config,
            queue: Mutex::new(Some(tx)),
        })
    }

    /// A transport running commands through local `bash` shells: the framing
    /// protocol without any network, for tests and for code on the login node.
    pub fn local_bash() -> Result<Self> {
        let mut config = ProcessShellConfig::new("bash", ["--noprofile", "--norc"]);
        config.label = "local bash".into();
        ProcessShellTransport::new(config)
    }

    /// The configuration.
    pub fn config(&self) -> &ProcessShellConfig {
        &self.config
    }
}

impl Drop for ProcessShellTransport {
    fn drop(&mut self) {
        // Closing the queue ends the workers, which kill their shells.
        if let Ok(mut queue) = self.queue.lock() {
            queue.take();
        }
    }
}

#[async_trait]
impl Transport for ProcessShellTransport {
    async fn run(&self, command: &Command) -> Result<Output> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            command: command.clone(),
            deadline: Instant::now() + command.effective_timeout(),
            reply,
        };
        let sent = match self.queue.lock() {
            Ok(queue) => queue.as_ref().map(|q| q.send(job).is_ok()).unwrap_or(false),
            Err(_) => false,
        };
        if !sent {
            return Err(Error::Transport {
                message: format!("the shell workers for {} have stopped", self.config.label),
                may_have_run: false,
            });
        }
        answer.await.unwrap_or_else(|_| {
            Err(Error::Transport {
                message: format!(
                    "a shell worker for {} stopped mid-command",
                    self.config.label
                ),
                may_have_run: true,
            })
        })
    }
}

fn worker(config: Arc<ProcessShellConfig>, queue: Arc<Mutex<Receiver<Job>>>) {
    let mut shell: Option<ProcessShell> = None;
    let mut kills: Vec<Orphan> = Vec::new();
    loop {
        let job = {
            let Ok(rx) = queue.lock() else { return };
            match rx.recv() {
                Ok(job) => job,
                Err(_) => return,
            }
        };
        if job.reply.is_closed() {
            continue;
        }
        let Some(job) = unexpired(&config, job) else {
            continue;
        };
        if shell.as_ref().is_none_or(|s| !s.usable()) {
            shell = None;
            let start_deadline = Instant::now() + config.start_timeout;
            match ProcessShell::start(&config, &kills, start_deadline.min(job.deadline)) {
                Ok(s) => {
                    kills.clear();
                    shell = Some(s);
                }
                Err(e) => {
                    let _ = job.reply.send(Err(e));
                    continue;
                }
            }
        }
        let Some(current) = shell.as_mut() else {
            continue;
        };
        // Starting the shell may have taken the rest of its time.
        let Some(job) = unexpired(&config, job) else {
            continue;
        };
        let result = current.run(&job.command, job.deadline);
        if let Err(e) = &result {
            if matches!(e, Error::Timeout { .. }) {
                if let Some(orphan) = current.proto.running() {
                    kills.push(orphan);
                }
            }
        }
        if !current.usable() {
            shell = None;
            if !kills.is_empty() {
                // Start the next shell now so it kills the timed-out command at once.
                let deadline = Instant::now() + config.start_timeout;
                if let Ok(s) = ProcessShell::start(&config, &kills, deadline) {
                    kills.clear();
                    shell = Some(s);
                }
            }
        }
        let _ = job.reply.send(result);
    }
}

/// Answer `job` with a timeout when its deadline passed before it could be sent (it
/// never reached a shell, so it did not run); else give it back.
fn unexpired(config: &ProcessShellConfig, job: Job) -> Option<Job> {
    if Instant::now() < job.deadline {
        return Some(job);
    }
    let _ = job.reply.send(Err(Error::Timeout {
        what: format!(
            "`{}` on {} (waiting for a free shell; it was never sent)",
            job.command.label(),
            config.label
        ),
        after: job.command.effective_timeout(),
        may_have_run: false,
    }));
    None
}

enum Event {
    Stdout(Vec<u8>),
    StdoutClosed,
    Wrote(usize),
    WriteFailed(std::io::Error),
}

/// One shell child process with its pipe threads.
struct ProcessShell {
    label: String,
    child: Child,
    events: Receiver<Event>,
    writer: Option<Sender<Vec<u8>>>,
    proto: ShellProtocol,
    /// Bytes handed to the writer thread and not yet acknowledged.
    in_flight: usize,
    write_failed: bool,
    dead: bool,
    stderr_tail: Arc<Mutex<Vec<u8>>>,
}

impl ProcessShell {
    fn start(config: &ProcessShellConfig, kills: &[Orphan], deadline: Instant) -> Result<Self> {
        if let Some(check) = &config.preflight {
            check()?;
        }
        let mut child = std::process::Command::new(&config.program)
            .args(&config.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Error::Connect {
                host: config.label.clone(),
                message: format!("cannot start `{}`: {e}", config.program),
            })?;
        let (tx, events) = mpsc::channel();
        let stdin = child.stdin.take().expect("stdin is piped");
        let mut stdout = child.stdout.take().expect("stdout is piped");
        let mut stderr = child.stderr.take().expect("stderr is piped");
        let writer = spawn_writer(stdin, tx.clone());
        let out_tx = tx;
        thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match stdout.read(&mut buf) {
                    Ok(0) | Err(_) => {
                        let _ = out_tx.send(Event::StdoutClosed);
                        return;
                    }
                    Ok(n) => {
                        if out_tx.send(Event::Stdout(buf[..n].to_vec())).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        let stderr_tail = Arc::new(Mutex::new(Vec::new()));
        let tail = Arc::clone(&stderr_tail);
        thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    return;
                }
                if let Ok(mut t) = tail.lock() {
                    t.extend_from_slice(&buf[..n]);
                    let excess = t.len().saturating_sub(STDERR_TAIL);
                    t.drain(..excess);
                }
            }
        });
        let mut shell = ProcessShell {
            label: config.label.clone(),
            child,
            events,
            writer: Some(writer),
            proto: ShellProtocol::new(kills),
            in_flight: 0,
            write_failed: false,
            dead: false,
            stderr_tail,
        };
        loop {
            shell.flush();
            match shell.next_event(deadline) {
                Ok(Some(events)) => {
                    if events.contains(&ShellEvent::Ready) {
                        return Ok(shell);
                    }
                }
                Ok(None) => {
                    return Err(Error::Connect {
                        host: config.label.clone(),
                        message: format!(
                            "the remote shell did not start within {:?}{}",
                            config.start_timeout,
                            shell.stderr_note()
                        ),
                    })
                }
                Err(e) => {
                    return Err(Error::Connect {
                        host: config.label.clone(),
                        message: format!(
                            "the remote shell did not start: {e}{}",
                            shell.stderr_note()
                        ),
                    })
                }
            }
        }
    }

    fn usable(&self) -> bool {
        !self.dead && self.proto.is_ready()
    }

    fn stderr_note(&self) -> String {
        let text = self
            .stderr_tail
            .lock()
            .map(|t| String::from_utf8_lossy(&t).trim().to_string())
            .unwrap_or_default();
        if text.is_empty() {
            String::new()
        } else {
            format!(" (its stderr: {text})")
        }
    }

    /// Hand the protocol's pending bytes to the writer thread.
    fn flush(&mut self) {
        let pending = &self.proto.to_write()[self.in_flight..];
        if pending.is_empty() || self.write_failed {
            return;
        }
        if let Some(writer) = &self.writer {
            if writer.send(pending.to_vec()).is_ok() {
                self.in_flight += pending.len();
            } else {
                self.write_failed = true;
            }
        }
    }

    /// Wait for the next batch of events until `deadline`: `Ok(None)` on timeout.
    fn next_event(&mut self, deadline: Instant) -> Result<Option<Vec<ShellEvent>>> {
        let wait = deadline.saturating_duration_since(Instant::now());
        match self.events.recv_timeout(wait) {
            Ok(Event::Stdout(bytes)) => match self.proto.receive(&bytes) {
                Ok(events) => Ok(Some(events)),
                Err(e) => {
                    self.dead = true;
                    Err(e)
                }
            },
            Ok(Event::Wrote(n)) => {
                self.proto.wrote(n);
                self.in_flight -= n;
                Ok(Some(Vec::new()))
            }
            Ok(Event::WriteFailed(e)) => {
                self.write_failed = true;
                self.dead = true;
                Err(self.lost(format!("writing to the shell failed: {e}")))
            }
            Ok(Event::StdoutClosed) | Err(RecvTimeoutError::Disconnected) => {
                self.dead = true;
                Err(self.lost("the shell process ended".to_string()))
            }
            Err(RecvTimeoutError::Timeout) => Ok(None),
        }
    }

    fn lost(&self, what: String) -> Error {
        Error::Transport {
            message: format!("{}: {what}{}", self.label, self.stderr_note()),
            may_have_run: self.may_have_run(),
        }
    }

    /// Whether the current request may have reached the shell whole: written and
    /// acknowledged, or handed to the writer thread that has not reported a failure.
    fn may_have_run(&self) -> bool {
        self.proto.request_delivered()
            || (self.proto.request_pending()
                && !self.write_failed
                && self.proto.to_write().len() == self.in_flight)
    }

    fn run(&mut self, command: &Command, deadline: Instant) -> Result<Output> {
        self.proto.send(command)?;
        loop {
            self.flush();
            match self.next_event(deadline)? {
                None => {
                    self.dead = true;
                    return Err(Error::Timeout {
                        what: format!("`{}` on {}", command.label(), self.label),
                        after: command.effective_timeout(),
                        may_have_run: self.may_have_run(),
                    });
                }
                Some(events) => {
                    for event in events {
                        match event {
                            ShellEvent::Finished(output) => return Ok(output),
                            ShellEvent::Refused => {
                                self.dead = true;
                                return Err(Error::Transport {
                                    message: format!(
                                        "{}: the request reached the shell damaged and was not run",
                                        self.label
                                    ),
                                    may_have_run: false,
                                });
                            }
                            ShellEvent::Started { .. } | ShellEvent::Ready => {}
                        }
                    }
                }
            }
        }
    }
}

fn spawn_writer(mut stdin: ChildStdin, events: Sender<Event>) -> Sender<Vec<u8>> {
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    thread::spawn(move || {
        for chunk in rx {
            for piece in chunk.chunks(256 * 1024) {
                if let Err(e) = stdin.write_all(piece).and_then(|_| stdin.flush()) {
                    let _ = events.send(Event::WriteFailed(e));
                    return;
                }
                if events.send(Event::Wrote(piece.len())).is_err() {
                    return;
                }
            }
        }
    });
    tx
}

impl Drop for ProcessShell {
    fn drop(&mut self) {
        self.writer.take();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn runs_commands_through_a_local_bash() {
        rt().block_on(async {
            let t = ProcessShellTransport::local_bash().unwrap();
            let out = t
                .run(&Command::new("printf").arg("%s|").arg("a b").arg("it's"))
                .await
                .unwrap();
            assert_eq!(out.stdout, b"a b|it's|");
            let out = t
                .run(&Command::bash_script(
                    "echo err >&2; exit 3",
                    Vec::<String>::new(),
                ))
                .await
                .unwrap();
            assert_eq!(out.status, 3);
            assert_eq!(out.stderr, b"err\n");
            let big: Vec<u8> = (0..10 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
            let start = Instant::now();
            let out = t
                .run(&Command::new("sha256sum").stdin(big.clone()))
                .await
                .unwrap();
            eprintln!("10 MiB stdin took {:?}", start.elapsed());
            let out2 = LocalSha::of(&big);
            assert_eq!(out.stdout_text().split(' ').next().unwrap(), out2);
            let start = Instant::now();
            for _ in 0..50 {
                t.run(&Command::new("true")).await.unwrap();
            }
            eprintln!("per trivial command: {:?}", start.elapsed() / 50);
        });
    }

    #[test]
    fn a_command_whose_deadline_passed_in_the_queue_is_never_sent() {
        let dir = tempfile::tempdir().unwrap();
        let flag = dir.path().join("ran");
        rt().block_on(async {
            let mut config = ProcessShellConfig::new("bash", ["--noprofile", "--norc"]);
            config.shells = 1;
            let t = ProcessShellTransport::new(config).unwrap();
            // The framing shell: the parent of the subshell that runs the command.
            let shell_pid = || {
                let script = r#"read -r _ _ _ p _ < "/proc/$PPID/stat"; echo "$p""#;
                Command::bash_script(script, Vec::<String>::new())
            };
            let before = t.run(&shell_pid()).await.unwrap().stdout_text();
            // The one shell is busy for 1.5 s; the second command may wait 0.3 s.
            let busy = Command::new("sleep").arg("1.5");
            let late = Command::new("touch")
                .arg(flag.display().to_string())
                .timeout(Duration::from_millis(300));
            let (busy, late) = tokio::join!(t.run(&busy), async {
                // Queued behind the sleep (which is sent first).
                tokio::time::sleep(Duration::from_millis(100)).await;
                t.run(&late).await
            });
            assert_eq!(busy.unwrap().status, 0);
            let err = late.unwrap_err();
            assert_eq!(err.kind(), slurm_core::ErrorKind::Timeout, "{err}");
            assert!(!err.may_have_run(), "it never left the queue: {err}");
            assert!(
                err.to_string().contains("waiting for a free shell"),
                "{err}"
            );
            assert!(!flag.exists(), "the expired command ran");
            // The shell was not killed over it.
            let after = t.run(&shell_pid()).await.unwrap().stdout_text();
            assert_eq!(before, after, "the shell was replaced");
        });
    }

    struct LocalSha;
    impl LocalSha {
        fn of(bytes: &[u8]) -> String {
            use sha2::Digest;
            hex::encode(sha2::Sha256::digest(bytes))
        }
    }

    /// A shell whose `$TMPDIR` is `dir`, through `bash -c SETUP; exec bash`.
    fn shell_in(dir: &std::path::Path, setup: &str) -> ProcessShellTransport {
        let mut config = ProcessShellConfig::new(
            "bash",
            [
                "--noprofile".to_string(),
                "--norc".to_string(),
                "-c".to_string(),
                format!(
                    "export TMPDIR={}; {setup} exec bash --noprofile --norc",
                    dir.display()
                ),
            ],
        );
        config.shells = 1;
        config.label = "local bash (test)".into();
        ProcessShellTransport::new(config).unwrap()
    }

    /// Every file under `dir` holding `needle`.
    fn files_holding(dir: &std::path::Path, needle: &[u8]) -> Vec<std::path::PathBuf> {
        let mut found = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(folder) = stack.pop() {
            for entry in std::fs::read_dir(&folder).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else if std::fs::read(&path)
                    .map(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
                    .unwrap_or(false)
                {
                    found.push(path);
                }
            }
        }
        found
    }

    #[test]
    fn a_command_input_is_removed_once_the_command_ends() {
        // The input of a submit holds the secrets sidecar: no copy of it stays in the
        // shell's folder (truncating it would leave the file; it is removed).
        rt().block_on(async {
            let tmp = tempfile::tempdir().unwrap();
            let t = shell_in(tmp.path(), "");
            let canary = b"CANARY-stdin-7f3a1c\n".to_vec();
            let out = t
                .run(&Command::new("wc").arg("-c").stdin(canary.clone()))
                .await
                .unwrap();
            assert_eq!(out.stdout_text().trim(), canary.len().to_string());
            // The shell is still alive (its folder exists) and holds no input file.
            let out = t
                .run(&Command::bash_script(
                    "ls -A -- \"$1\"/slurm-run-shell.*/",
                    [tmp.path().display().to_string()],
                ))
                .await
                .unwrap();
            assert!(
                !out.stdout_text().lines().any(|l| l.starts_with("i.")),
                "an input file is left: {}",
                out.stdout_text()
            );
            assert!(files_holding(tmp.path(), b"CANARY-stdin-7f3a1c").is_empty());
        });
    }

    #[test]
    fn frames_are_on_the_users_memory_file_system_and_emptied_after_each_answer() {
        // A file made on a disk costs up to a millisecond (0.3-0.7 ms for the test
        // machine's /tmp), on a memory file system microseconds: a framed script's
        // working files go to `$XDG_RUNTIME_DIR` (here a folder of the test's), and hold
        // nothing once their command has answered.
        rt().block_on(async {
            let tmp = tempfile::tempdir().unwrap();
            let runtime = tempfile::tempdir().unwrap();
            let t = shell_in(
                tmp.path(),
                &format!("export XDG_RUNTIME_DIR={};", runtime.path().display()),
            );
            let out = t
                .run(&Command::bash_script(
                    r#"printf 'rows\n' >"$__SR_FRAME/rows"; printf '%s' "$__SR_FRAME""#,
                    Vec::<String>::new(),
                ))
                .await
                .unwrap();
            let frame = std::path::PathBuf::from(out.stdout_text());
            assert!(
                frame.starts_with(runtime.path()),
                "{} is not under {}",
                frame.display(),
                runtime.path().display()
            );
            // The shell empties a frame after the answer, before it reads the next
            // request: once the next command has answered, that is done.
            t.run(&Command::new("true")).await.unwrap();
            assert_eq!(std::fs::read(frame.join("rows")).unwrap(), b"");
        });
    }

    #[test]
    fn a_commands_output_files_are_made_before_it_is_sent() {
        // The next command's output files are made while the client reads an answer:
        // a command's redirections truncate them (microseconds) instead of making them.
        rt().block_on(async {
            let tmp = tempfile::tempdir().unwrap();
            let t = shell_in(tmp.path(), "");
            t.run(&Command::new("true")).await.unwrap();
            // A gap between the two commands tells "made after the last answer" from
            // "made as the command started".
            tokio::time::sleep(Duration::from_millis(500)).await;
            let out = t
                .run(&Command::bash_script(
                    r#"now=$EPOCHREALTIME; printf '%s %s' "$(stat -L -c %.9W "/proc/$$/fd/1")" "$now""#,
                    Vec::<String>::new(),
                ))
                .await
                .unwrap();
            let times: Vec<f64> = out
                .stdout_text()
                .split(' ')
                .map(|t| t.parse().unwrap())
                .collect();
            let (made, started) = (times[0], times[1]);
            assert!(
                started - made > 0.3,
                "its stdout file was made {:.3} s before it started",
                started - made
            );
        });
    }

    #[test]
    fn a_dead_shells_frames_are_removed_by_the_next_shell() {
        // Frames on a memory file system hold memory until the host restarts when their
        // shell was killed before its exit trap: the user's next shell removes those of
        // shells no longer alive, and never a live one's.
        rt().block_on(async {
            let tmp = tempfile::tempdir().unwrap();
            let runtime = tempfile::tempdir().unwrap();
            // A pid no process has: past the kernel's largest.
            let max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            let dead = runtime
                .path()
                .join(format!("slurm-run-frames.{}.Ab3dEf9h", max + 1));
            let live = runtime
                .path()
                .join(format!("slurm-run-frames.{}.Zy8xWv7u", std::process::id()));
            for frames in [&dead, &live] {
                std::fs::create_dir_all(frames.join("f.7")).unwrap();
                std::fs::write(frames.join("f.7").join("0.out"), "rows\n").unwrap();
            }
            let t = shell_in(
                tmp.path(),
                &format!("export XDG_RUNTIME_DIR={};", runtime.path().display()),
            );
            t.run(&Command::new("true")).await.unwrap();
            assert!(!dead.exists(), "a dead shell's frames stay");
            assert!(live.join("f.7").join("0.out").exists(), "a live one's went");
        });
    }
}
