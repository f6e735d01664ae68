//! The framing protocol of the long-lived remote shell: what is written to the shell and how its answers are read.
//!
//! This module does no I/O (it is "sans-IO"): [`ShellProtocol`] holds the bytes to
//! write and parses the bytes read, and each transport moves bytes its own way (an
//! ssh2 channel driven by a session's owner thread, or the pipes of an `ssh` child).
//!
//! # The protocol
//!
//! 1. *Bootstrap.* Whatever the user's login shell is, the first line written is
//!    `exec bash --noprofile --norc -c 'printf ... SRSYNC TOKEN; exec bash --noprofile --norc'`.
//!    Everything the login printed before `SRSYNC_TOKEN` (banner, motd) is skipped.
//!    Nothing else is written until that line is seen, so a login shell that reads
//!    its input in blocks cannot swallow later lines.
//! 2. *Init.* A short script (`shell_start.sh`, its exit statuses named in
//!    [`ShellExit`](crate::shell_start::ShellExit)) makes a private temporary folder (umask 077), turns on
//!    job control (so each command gets its own process group, which a timeout can
//!    kill), defines the functions `__sr_run` and `__sr_kill`, kills the process groups
//!    of commands that timed out (or were cut off) in an earlier shell, and prints
//!    `SRREADY_TOKEN2`. A process group is killed only when it is provably the one that
//!    ran the command ([`Orphan`]): same host (its boot id), and a leader with the
//!    recorded start time, or, once the leader has ended, only the processes of the
//!    group that carry the command's marker in their environment (`__SR_JOB`). So a
//!    reused pid, or a shell that landed on another host behind the same name, is never hit.
//!    A command delivered whole whose report (the `P` line below) was lost with the
//!    connection is known only by its marker: then the user's processes that carry it
//!    are killed, wherever their group.
//! 3. *A command.* One line `__sr_run MARKER N 'QUOTED COMMAND LINE'`, then exactly
//!    `N` raw stdin bytes (read by `head -c N` into a file, emptied when the command
//!    ends and removed once its answer is sent, before the next command is read, so the
//!    removal's process start is not in the round trip: the input of a submit holds the
//!    secrets sidecar), then the line `MARKER`. An input of a few hundred bytes of text
//!    without a NUL (a poll's ids) travels instead in the line itself, as the quoted
//!    word `'=TEXT'` in place of `N`: the shell writes it to the same file with its
//!    `printf` builtin once the trailer has come, and starts no `head`. When the file cannot be written (a full `/tmp`)
//!    the command is refused and the shell exits at once, before it reads another byte:
//!    no byte of the input is ever read as shell input (the transport opens a new shell).
//!    Output goes to files named per command (a background process a command left
//!    behind writes into its own file, never into the framing or the next command's
//!    output), made while the client reads the previous answer (a file made costs up
//!    to a millisecond on some disks, one truncated a few microseconds); old files are
//!    removed every 64 commands, also after an answer. Each command also gets an empty
//!    private folder of its own (`__SR_FRAME` in its environment) for the files of a
//!    framed script (a poll's squeue rows, its lists): the shell makes them 64 at a time
//!    on a memory file system when the user can write one (`$XDG_RUNTIME_DIR`, else
//!    `/dev/shm`; else beside the output files), empties each once its command has
//!    answered, and removes them with the old output files, so a poll starts no
//!    `mktemp` and no `rm` of its own. Their folder (`__SR_KEEP`) lives as long as the
//!    shell: a script may keep there what its next run compares with (a watch's poll
//!    keeps squeue's rows).
//!    A fixed script ([`Command::fixed_script`]) is sent as `__sr_run MARKER N
//!    'FUNCTION PARAMS' FUNCTION 'TEXT'` the first time: the shell defines TEXT as the
//!    function FUNCTION ([`FixedScript::function`](slurm_core::FixedScript::function): its digest) once the trailer has come,
//!    and the client counts it defined when the `P` line comes. Later requests are
//!    `__sr_run MARKER N 'FUNCTION PARAMS'`: the script runs in the command's subshell
//!    without a new bash, and its text is neither sent nor parsed again.
//!    The shell runs the command only when that trailer line arrives intact, so a
//!    request cut short by a lost connection never runs (not even with truncated
//!    input). The command runs as `( eval LINE ) <stdin-file-or-/dev/null >out 2>err &`,
//!    in a subshell (no `cd`/`export` leaks), never reading the framing stream.
//! 4. *The answer.* `MARKER P PGID START BOOT\n` when the command started (its process
//!    group, the leader's start time in clock ticks since boot, the host's boot id); when it ended, the
//!    stdout file, `MARKER O`, the stderr file, `MARKER E STATUS\n`. The marker is
//!    128 random bits per command, so no output can contain it by accident; the
//!    streams are copied byte for byte (any bytes, no trailing newline needed).
//!    `MARKER X\n` means the request arrived damaged and was not run.

use std::collections::HashSet;
use std::time::Duration;

use memchr::memmem;
use slurm_core::{shell_quote, Command, Error, Output, Result};

use crate::shell_start::SHELL_START;

/// The longest a single header line may be before the shell is considered to be
/// printing garbage (the P and E lines are short).
const MAX_STATUS_LINE: usize = 64;

/// A random token of 32 hex digits.
fn token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// A command's process group as the shell that ran it reported it: enough to kill it
/// later from another shell without hitting anything else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Orphan {
    /// The process group (the pid of its leader); 0 when the shell's report of it never
    /// came (the command was delivered, and may run, but its `P` line was lost with the
    /// connection): then only processes that carry the marker are killed.
    pub(crate) pgid: u32,
    /// The leader's start time (clock ticks since boot), `-` when unknown.
    pub(crate) start: String,
    /// The boot id of the host that ran it, `-` when unknown (then it is never killed).
    pub(crate) boot: String,
    /// The command's marker, also in its environment as `__SR_JOB`.
    pub(crate) marker: String,
}

/// Something the shell told us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ShellEvent {
    /// The shell finished its set-up and accepts commands.
    Ready,
    /// The current command started, in this process group.
    Started {
        /// The process group id of the command on the remote host.
        pgid: u32,
    },
    /// The current command ended.
    Finished(Output),
    /// The current request arrived damaged (cut short); the command did not run.
    Refused,
}

/// What one parsing step achieved.
enum Step {
    /// An event for the caller.
    Event(ShellEvent),
    /// The state changed; parse again.
    Again,
    /// More input is needed.
    Wait,
}

#[derive(Debug)]
enum Phase {
    /// Waiting for `MARKER P PGID\n` (or `MARKER X\n`).
    Pid,
    /// Collecting stdout until `MARKER O`.
    Stdout,
    /// Collecting stderr until `MARKER E `.
    Stderr,
    /// Reading the status digits until `\n`.
    Status,
}

#[derive(Debug)]
enum State {
    /// Waiting for the line `SRSYNC_TOKEN` from the bootstrap.
    Syncing { needle: Vec<u8>, ready: Vec<u8> },
    /// Waiting for the line `SRREADY_TOKEN` after the init script.
    Initializing { needle: Vec<u8> },
    /// Idle, accepting a command.
    Ready,
    /// Running a command.
    Busy {
        marker: String,
        phase: Phase,
        pgid: Option<Orphan>,
        stdout: Vec<u8>,
        stderr: Vec<u8>,
    },
    /// The protocol broke; the shell must be discarded.
    Broken,
}

/// One long-lived shell's protocol state: bytes to write, parsing of bytes read.
#[derive(Debug)]
pub(crate) struct ShellProtocol {
    state: State,
    init: Option<Vec<u8>>,
    out: Vec<u8>,
    out_pos: usize,
    /// Total bytes handed out by [`ShellProtocol::wrote`] so far.
    written: u64,
    /// The value of `written` at which the current request's trailer is complete.
    request_end: Option<u64>,
    input: Vec<u8>,
    /// Where to resume searching `input` for the current needle.
    scan_from: usize,
    /// The functions of fixed scripts this shell has defined (see [`FixedScript::function`](slurm_core::FixedScript::function)).
    defined: HashSet<String>,
    /// The function the current request defines, counted as defined once the shell
    /// reports the command started (it defines it just before).
    defining: Option<String>,
}

/// The most bytes of input that travel in the request's own line.
///
/// Bash reads its input from a pipe one byte at a time, so a few hundred bytes there
/// cost less than the `head` process that reads a longer input whole (about 1.5 ms).
const INLINE_INPUT_MAX: usize = 256;

/// A command's input as the request's own word when it is short text without a NUL (a
/// poll's few ids): `+TEXT` when it ends with a newline (the shell gives TEXT and that
/// newline as a here-string: no file made or removed), else `=TEXT` (written to the
/// command's input file); `None`: it goes as raw bytes after the request line.
fn inline_input(stdin: &[u8]) -> Option<String> {
    if stdin.is_empty() || stdin.len() > INLINE_INPUT_MAX || stdin.contains(&0) {
        return None;
    }
    let text = std::str::from_utf8(stdin).ok()?;
    Some(match text.strip_suffix('\n') {
        Some(line) => format!("+{line}"),
        None => format!("={text}"),
    })
}

impl ShellProtocol {
    /// A new shell's protocol. `kills` are the process groups of commands that timed
    /// out or were cut off in an earlier shell; the init script kills those that are
    /// provably theirs on this host.
    pub(crate) fn new(kills: &[Orphan]) -> Self {
        let sync = token();
        let ready = token();
        let bootstrap = format!(
            "exec bash --noprofile --norc -c 'printf \"%s_%s\\n\" SRSYNC \"$1\"; exec bash --noprofile --norc' slurm-run {sync}\n"
        );
        let mut init = SHELL_START.full_text();
        for o in kills {
            // Each word was read from the shell's own report: digits, hex, dashes.
            let safe = |w: &str| w.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
            if [o.start.as_str(), &o.boot, &o.marker]
                .iter()
                .all(|w| safe(w))
            {
                init.push_str(&format!(
                    "__sr_kill {} {} {} {}\n",
                    o.pgid, o.start, o.boot, o.marker
                ));
            }
        }
        init.push_str(&format!("printf '%s_%s\\n' SRREADY {ready}\n"));
        ShellProtocol {
            state: State::Syncing {
                needle: format!("SRSYNC_{sync}\n").into_bytes(),
                ready: format!("SRREADY_{ready}\n").into_bytes(),
            },
            init: Some(init.into_bytes()),
            out: bootstrap.into_bytes(),
            out_pos: 0,
            written: 0,
            request_end: None,
            input: Vec::new(),
            scan_from: 0,
            defined: HashSet::new(),
            defining: None,
        }
    }

    /// Bytes waiting to be written to the shell's standard input.
    pub(crate) fn to_write(&self) -> &[u8] {
        &self.out[self.out_pos..]
    }

    /// Record that `n` bytes of [`ShellProtocol::to_write`] were written.
    pub(crate) fn wrote(&mut self, n: usize) {
        self.out_pos += n;
        self.written += n as u64;
        if self.out_pos >= self.out.len() {
            self.out.clear();
            self.out_pos = 0;
        }
    }

    /// Whether the shell accepts a command now.
    pub(crate) fn is_ready(&self) -> bool {
        matches!(self.state, State::Ready)
    }

    /// Whether the current request was written whole, so the remote side may run it.
    /// False while any byte of it (up to the trailer's newline) is still unwritten.
    pub(crate) fn request_delivered(&self) -> bool {
        match self.request_end {
            Some(end) => self.written >= end,
            None => false,
        }
    }

    /// Whether a request was sent and its answer has not come yet.
    pub(crate) fn request_pending(&self) -> bool {
        self.request_end.is_some()
    }

    /// The process group of the running command, once the shell reported it; for a
    /// command delivered whole whose report has not come (it may run: the report can be
    /// lost with the connection), a group of pgid 0 known only by its marker.
    pub(crate) fn running(&self) -> Option<Orphan> {
        match &self.state {
            State::Busy {
                pgid: Some(orphan), ..
            } => Some(orphan.clone()),
            State::Busy { marker, .. } if self.request_delivered() => Some(Orphan {
                pgid: 0,
                start: "-".into(),
                boot: "-".into(),
                marker: marker.clone(),
            }),
            _ => None,
        }
    }

    /// Queue `command` for the shell. Fails when the shell is not ready or an
    /// argument cannot be quoted (NUL byte).
    pub(crate) fn send(&mut self, command: &Command) -> Result<()> {
        if !self.is_ready() {
            return Err(Error::Transport {
                message: "internal: command sent to a shell that is not ready".into(),
                may_have_run: false,
            });
        }
        let marker = format!("SRM{}", token());
        let stdin = command.stdin_bytes().unwrap_or(&[]);
        let inline = inline_input(stdin);
        let mut header = match &inline {
            Some(word) => format!("__sr_run {marker} {} ", shell_quote(word)?),
            None => format!("__sr_run {marker} {} ", stdin.len()),
        };
        self.defining = None;
        match command.fixed_script() {
            // A fixed script runs as the function its shell defined for it, in the
            // command's subshell: no new bash, no parse of its text.
            Some(script) => {
                let function = script.function;
                let mut line = function.to_string();
                for param in script.params {
                    line.push(' ');
                    line.push_str(&shell_quote(param)?);
                }
                header.push_str(&shell_quote(&line)?);
                if !self.defined.contains(function) {
                    header.push(' ');
                    header.push_str(function);
                    header.push(' ');
                    header.push_str(&shell_quote(script.text)?);
                    self.defining = Some(function.to_string());
                }
            }
            None => header.push_str(&shell_quote(&command.shell_line()?)?),
        }
        header.push('\n');
        self.out.extend_from_slice(header.as_bytes());
        if inline.is_none() {
            self.out.extend_from_slice(stdin);
        }
        self.out.extend_from_slice(marker.as_bytes());
        self.out.push(b'\n');
        self.request_end = Some(self.written + (self.out.len() - self.out_pos) as u64);
        self.state = State::Busy {
            marker,
            phase: Phase::Pid,
            pgid: None,
            stdout: Vec::new(),
            stderr: Vec::new(),
        };
        self.scan_from = 0;
        Ok(())
    }

    /// Feed bytes read from the shell's standard output; returns what they told.
    /// An error means the shell spoke outside the protocol and must be discarded.
    pub(crate) fn receive(&mut self, data: &[u8]) -> Result<Vec<ShellEvent>> {
        self.input.extend_from_slice(data);
        let mut events = Vec::new();
        loop {
            match self.step()? {
                Step::Event(event) => events.push(event),
                Step::Again => {}
                Step::Wait => return Ok(events),
            }
        }
    }

    /// Find `needle` in the unparsed input, resuming where the last search stopped.
    fn find(&mut self, needle: &[u8]) -> Option<usize> {
        let start = self.scan_from;
        match memmem::find(&self.input[start..], needle) {
            Some(i) => {
                self.scan_from = 0;
                Some(start + i)
            }
            None => {
                self.scan_from = self.input.len().saturating_sub(needle.len() - 1);
                None
            }
        }
    }

    fn broken(&mut self, why: String) -> Error {
        self.state = State::Broken;
        Error::Transport {
            message: format!("the remote shell broke the framing protocol: {why}"),
            may_have_run: true,
        }
    }

    /// Take the line (without `\n`) at the start of the input, if complete.
    fn take_line(&mut self) -> Result<Option<String>> {
        match memchr::memchr(b'\n', &self.input) {
            Some(i) => {
                let line = String::from_utf8_lossy(&self.input[..i]).into_owned();
                self.input.drain(..=i);
                self.scan_from = 0;
                Ok(Some(line))
            }
            None if self.input.len() > MAX_STATUS_LINE => {
                let shown = String::from_utf8_lossy(&self.input[..MAX_STATUS_LINE]).into_owned();
                Err(self.broken(format!("status line too long: {shown:?}")))
            }
            None => Ok(None),
        }
    }

    fn step(&mut self) -> Result<Step> {
        match &mut self.state {
            State::Syncing { needle, ready } => {
                let (needle, ready) = (needle.clone(), ready.clone());
                if let Some(i) = self.find(&needle) {
                    if i > 0 {
                        tracing::debug!(
                            bytes = i,
                            "skipped login output before the shell was in sync"
                        );
                    }
                    self.input.drain(..i + needle.len());
                    match self.init.take() {
                        Some(init) => self.out.extend_from_slice(&init),
                        None => return Err(self.broken("bootstrap ran twice".into())),
                    }
                    self.state = State::Initializing { needle: ready };
                    return Ok(Step::Again);
                }
                Ok(Step::Wait)
            }
            State::Initializing { needle } => {
                let needle = needle.clone();
                if let Some(i) = self.find(&needle) {
                    self.input.drain(..i + needle.len());
                    self.state = State::Ready;
                    return Ok(Step::Event(ShellEvent::Ready));
                }
                Ok(Step::Wait)
            }
            State::Ready | State::Broken => {
                if !self.input.is_empty() {
                    let shown: String = String::from_utf8_lossy(&self.input)
                        .chars()
                        .take(80)
                        .collect();
                    tracing::debug!(output = %shown, "ignored output of an idle shell");
                    self.input.clear();
                }
                Ok(Step::Wait)
            }
            State::Busy { marker, phase, .. } => {
                let marker = marker.clone();
                match phase {
                    Phase::Pid => {
                        let started = format!("{marker} P ");
                        let refused = format!("{marker} X\n");
                        if let Some(i) = memmem::find(&self.input, refused.as_bytes()) {
                            self.input.drain(..i + refused.len());
                            self.defining = None;
                            self.state = State::Ready;
                            self.request_end = None;
                            return Ok(Step::Event(ShellEvent::Refused));
                        }
                        let Some(i) = self.find(started.as_bytes()) else {
                            return Ok(Step::Wait);
                        };
                        let rest = &self.input[i + started.len()..];
                        let Some(nl) = memchr::memchr(b'\n', rest) else {
                            if rest.len() > MAX_STATUS_LINE {
                                return Err(self.broken("process group line too long".into()));
                            }
                            // Search again from the marker once more bytes come.
                            self.scan_from = i;
                            return Ok(Step::Wait);
                        };
                        let words = String::from_utf8_lossy(&rest[..nl]).into_owned();
                        let Some(orphan) = parse_started(&words, &marker) else {
                            return Err(self.broken(format!("bad process group {words:?}")));
                        };
                        let pgid = orphan.pgid;
                        self.input.drain(..i + started.len() + nl + 1);
                        if let Some(function) = self.defining.take() {
                            self.defined.insert(function);
                        }
                        if let State::Busy {
                            phase, pgid: slot, ..
                        } = &mut self.state
                        {
                            *phase = Phase::Stdout;
                            *slot = Some(orphan);
                        }
                        Ok(Step::Event(ShellEvent::Started { pgid }))
                    }
                    Phase::Stdout | Phase::Stderr => {
                        let is_out = matches!(phase, Phase::Stdout);
                        let needle = if is_out {
                            format!("{marker} O")
                        } else {
                            format!("{marker} E ")
                        };
                        let Some(i) = self.find(needle.as_bytes()) else {
                            return Ok(Step::Wait);
                        };
                        let bytes: Vec<u8> = self.input.drain(..i + needle.len()).collect();
                        let body = bytes[..i].to_vec();
                        if let State::Busy {
                            phase,
                            stdout,
                            stderr,
                            ..
                        } = &mut self.state
                        {
                            if is_out {
                                *stdout = body;
                                *phase = Phase::Stderr;
                            } else {
                                *stderr = body;
                                *phase = Phase::Status;
                            }
                        }
                        Ok(Step::Again)
                    }
                    Phase::Status => {
                        let Some(line) = self.take_line()? else {
                            return Ok(Step::Wait);
                        };
                        let Ok(status) = line.trim().parse::<i32>() else {
                            return Err(self.broken(format!("bad exit status {line:?}")));
                        };
                        let State::Busy { stdout, stderr, .. } =
                            std::mem::replace(&mut self.state, State::Ready)
                        else {
                            unreachable!("checked above")
                        };
                        self.request_end = None;
                        Ok(Step::Event(ShellEvent::Finished(Output {
                            status,
                            stdout,
                            stderr,
                        })))
                    }
                }
            }
        }
    }
}

/// Parse `PGID START BOOT` of a `P` line.
fn parse_started(words: &str, marker: &str) -> Option<Orphan> {
    let mut words = words.split(' ');
    let pgid = words.next()?.parse::<u32>().ok()?;
    let start = words.next()?.to_string();
    let boot = words.next()?.to_string();
    if words.next().is_some() || start.is_empty() || boot.is_empty() {
        return None;
    }
    Some(Orphan {
        pgid,
        start,
        boot,
        marker: marker.to_string(),
    })
}

/// How long a new shell may take to print its sync and ready lines (a heavy
/// `.bashrc` on a busy login node can take seconds).
pub(crate) const SHELL_START_TIMEOUT: Duration = Duration::from_secs(30);

#[cfg(test)]
mod script_tests;
#[cfg(test)]
mod tests {
    use super::*;
    use crate::shell_start::ShellExit;
    use std::io::{Read, Write};
    use std::process::{Child, Stdio};

    /// A local `bash` playing the remote shell, driven by hand.
    pub(super) struct Bash {
        child: Child,
        pub(super) proto: ShellProtocol,
    }

    impl Bash {
        pub(super) fn start() -> Bash {
            Bash::start_with("", &[])
        }

        pub(super) fn start_killing(kills: &[Orphan]) -> Bash {
            Bash::start_with("", kills)
        }

        /// A bash that runs `setup` first (a limit, a trap), then the protocol.
        fn start_after(setup: &str) -> Bash {
            Bash::start_with(setup, &[])
        }

        fn start_with(setup: &str, kills: &[Orphan]) -> Bash {
            let child = std::process::Command::new("bash")
                .args([
                    "--noprofile",
                    "--norc",
                    "-c",
                    &format!("{setup} exec bash --noprofile --norc"),
                ])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let mut bash = Bash {
                child,
                proto: ShellProtocol::new(kills),
            };
            // Banner text before the sync line must be skipped.
            let banner = b"echo 'Welcome! SRSYNC_not-the-token'; printf 'motd without newline'\n";
            bash.child
                .stdin
                .as_mut()
                .unwrap()
                .write_all(banner)
                .unwrap();
            let events = bash.pump_until(|e| e.contains(&ShellEvent::Ready));
            assert_eq!(events, vec![ShellEvent::Ready]);
            bash
        }

        pub(super) fn flush(&mut self) {
            let pending = self.proto.to_write().to_vec();
            if !pending.is_empty() {
                self.child
                    .stdin
                    .as_mut()
                    .unwrap()
                    .write_all(&pending)
                    .unwrap();
                self.proto.wrote(pending.len());
            }
        }

        /// Write pending bytes, then read (a few bytes at a time, to exercise
        /// reassembly) until `done` holds for the events so far.
        pub(super) fn pump_until(
            &mut self,
            done: impl Fn(&[ShellEvent]) -> bool,
        ) -> Vec<ShellEvent> {
            let mut events = Vec::new();
            let mut buf = [0u8; 7];
            loop {
                self.flush();
                let n = self.child.stdout.as_mut().unwrap().read(&mut buf).unwrap();
                assert!(n > 0, "bash ended early");
                events.extend(self.proto.receive(&buf[..n]).unwrap());
                if done(&events) {
                    return events;
                }
            }
        }

        /// The shell's pid (the `exec`'d bash keeps the child's).
        pub(super) fn pid(&self) -> u32 {
            self.child.id()
        }

        /// Write `bytes` to the shell as they are (the protocol does not see them).
        pub(super) fn write_raw(&mut self, bytes: &[u8]) {
            let stdin = self.child.stdin.as_mut().unwrap();
            stdin.write_all(bytes).unwrap();
            stdin.flush().unwrap();
        }

        pub(super) fn run(&mut self, command: &Command) -> Output {
            self.proto.send(command).unwrap();
            let events = self.pump_until(|e| matches!(e.last(), Some(ShellEvent::Finished(_))));
            assert!(matches!(events[0], ShellEvent::Started { pgid } if pgid > 1));
            match events.last() {
                Some(ShellEvent::Finished(out)) => out.clone(),
                _ => unreachable!(),
            }
        }
    }

    impl Drop for Bash {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    #[test]
    fn an_input_that_cannot_be_stored_is_refused_and_never_read_as_commands() {
        // A full /tmp on the login node: the shell cannot store a command's input. It
        // must still read every byte of it (else the rest is read as shell commands:
        // a submit's input holds spec, script and secrets) and refuse the command.
        // Simulated with an 8 KiB file size limit (bash counts in KiB).
        let tmp = tempfile::tempdir().unwrap();
        let marker = tmp.path().join("ran-from-stdin");
        let mut bash = Bash::start_after("trap '' XFSZ; ulimit -f 8;");
        let line = format!("touch {}\n", marker.display());
        let payload = line.as_bytes().repeat(40_000 / line.len() + 1);
        bash.proto
            .send(&Command::new("cat").stdin(payload))
            .unwrap();
        let events = bash.pump_until(|e| e.contains(&ShellEvent::Refused));
        assert_eq!(events, vec![ShellEvent::Refused]);
        // The shell exits at once, with the status named for it.
        let status = bash.child.wait().unwrap();
        assert_eq!(status.code(), Some(ShellExit::InputUnwritable.status()));
        std::thread::sleep(Duration::from_millis(500));
        assert!(
            !marker.exists(),
            "bytes of the command's input were run as shell commands"
        );
    }

    #[test]
    fn a_short_text_input_travels_in_the_request_line_and_starts_no_head() {
        // A `head` first on the PATH that notes each start, then does the real work.
        let dir = tempfile::tempdir().unwrap();
        let starts = dir.path().join("head-starts");
        let head = dir.path().join("head");
        std::fs::write(
            &head,
            format!(
                "#!/bin/sh\necho >> '{}'\nexec /usr/bin/head \"$@\"\n",
                starts.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&head, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let mut bash = Bash::start_after(&format!("PATH='{}':$PATH;", dir.path().display()));
        let head_starts = || {
            std::fs::read_to_string(&starts)
                .map(|s| s.lines().count())
                .unwrap_or(0)
        };
        // A poll's few ids: in the line itself, no head; the command reads them whole.
        let ids = b"0 J 2\n4242\n4243\n".to_vec();
        bash.proto
            .send(&Command::new("cat").stdin(ids.clone()))
            .unwrap();
        let request = String::from_utf8(bash.proto.to_write().to_vec()).unwrap();
        // Ending in a newline: a here-string of the text before it.
        assert!(request.contains(" '+0 J 2\n4242\n4243' "), "{request}");
        let events = bash.pump_until(|e| matches!(e.last(), Some(ShellEvent::Finished(_))));
        match events.last() {
            Some(ShellEvent::Finished(out)) => assert_eq!((out.status, &out.stdout), (0, &ids)),
            _ => unreachable!(),
        }
        // Its input is a file of the shell's own (as with head), readable only by the user.
        let out = bash.run(
            &Command::bash_script(
                r#"[ -f /dev/stdin ] && stat -L -c %a /dev/stdin"#,
                Vec::<String>::new(),
            )
            .stdin(b"x".to_vec()),
        );
        assert_eq!(out.stdout_text(), "600\n");
        // Ending in a newline, it is no file of the shell's at all: nothing to make on
        // a disk before the command, nothing to remove after it.
        let out = bash.run(
            &Command::bash_script(r#"readlink /proc/$$/fd/0"#, Vec::<String>::new())
                .stdin(b"4242\n".to_vec()),
        );
        assert!(
            !out.stdout_text().contains("slurm-run-shell"),
            "{}",
            out.stdout_text()
        );
        assert_eq!(head_starts(), 0, "a short text input started head");
        // Longer than INLINE_INPUT_MAX, or not text: raw bytes after the line, for head.
        for input in [
            vec![b'a'; INLINE_INPUT_MAX + 1],
            b"a\0b".to_vec(),
            b"\xff".to_vec(),
        ] {
            let before = head_starts();
            let out = bash.run(&Command::new("cat").stdin(input.clone()));
            assert_eq!(out.stdout, input);
            assert_eq!(head_starts(), before + 1, "{input:?} did not go to head");
        }
        // At the limit, still in the line.
        let before = head_starts();
        let input = vec![b'\''; INLINE_INPUT_MAX];
        assert_eq!(
            bash.run(&Command::new("cat").stdin(input.clone())).stdout,
            input
        );
        assert_eq!(head_starts(), before);
    }

    #[test]
    fn frames_output_fed_in_small_pieces() {
        let mut bash = Bash::start();
        let out = bash.run(&Command::bash_script(
            r#"printf 'a\0b'; printf '%s O' "$1" >&2; exit 7"#,
            ["SRM1234"],
        ));
        assert_eq!(out.status, 7);
        assert_eq!(out.stdout, b"a\0b");
        assert_eq!(out.stderr, b"SRM1234 O");
        let out = bash.run(&Command::new("true"));
        assert_eq!(out, Output::default());
        // Stdin is delivered exactly, and the shell is not confused afterwards.
        let out = bash.run(&Command::new("cat").stdin(b"x\ny\n__sr_run z 0 z\n".to_vec()));
        assert_eq!(out.stdout, b"x\ny\n__sr_run z 0 z\n");
        assert_eq!(bash.run(&Command::new("echo").arg("ok")).stdout, b"ok\n");
    }

    #[test]
    fn request_counts_as_delivered_only_when_the_trailer_is_written() {
        let mut proto = ShellProtocol::new(&[]);
        let boot = proto.to_write().len();
        proto.wrote(boot);
        let sync = match &proto.state {
            State::Syncing { needle, .. } => needle.clone(),
            _ => unreachable!(),
        };
        assert!(proto.receive(&sync).unwrap().is_empty());
        let init = proto.to_write().len();
        proto.wrote(init);
        let ready = match &proto.state {
            State::Initializing { needle } => needle.clone(),
            _ => unreachable!(),
        };
        assert_eq!(proto.receive(&ready).unwrap(), vec![ShellEvent::Ready]);
        assert!(!proto.request_pending());
        proto
            .send(&Command::new("sbatch").stdin(vec![b'x'; 1000]))
            .unwrap();
        let total = proto.to_write().len();
        assert!(proto.request_pending());
        proto.wrote(total - 1);
        assert!(
            !proto.request_delivered(),
            "the trailer's newline is not written yet"
        );
        proto.wrote(1);
        assert!(proto.request_delivered());
        // A second command is refused while one runs.
        assert!(proto.send(&Command::new("true")).is_err());
        assert!(Command::new("a\0b").shell_line().is_err());
    }

    #[test]
    fn a_request_cut_short_never_runs() {
        let dir = tempfile::tempdir().unwrap();
        let flag = dir.path().join("ran");
        let mut bash = Bash::start();
        let cmd = Command::bash_script(
            r#"cat > /dev/null; touch "$1""#,
            [flag.display().to_string()],
        )
        .stdin(vec![b'q'; 100_000]);
        bash.proto.send(&cmd).unwrap();
        // Write the header and half the stdin, then the connection "drops".
        let pending = bash.proto.to_write().to_vec();
        let mut stdin = bash.child.stdin.take().unwrap();
        stdin.write_all(&pending[..pending.len() / 2]).unwrap();
        drop(stdin);
        let status = bash.child.wait().unwrap();
        assert!(status.success() || status.code().is_some());
        assert!(!flag.exists(), "a truncated request ran");
        // The same request written whole does run.
        let mut bash = Bash::start();
        let out = bash.run(&cmd);
        assert_eq!(out.status, 0);
        assert!(flag.exists());
    }

    /// A process group of its own, not ours: `sleep` as its leader.
    fn unrelated_group() -> Child {
        use std::os::unix::process::CommandExt;
        std::process::Command::new("sleep")
            .arg("300")
            .process_group(0)
            .spawn()
            .unwrap()
    }

    fn alive(child: &mut Child) -> bool {
        child.try_wait().unwrap().is_none()
    }

    /// `bash -c 'sleep N & echo $!'` as a process group of its own whose leader ends at
    /// once, leaving the sleep (its pid returned) with `__SR_JOB=marker`.
    fn leaderless_group(marker: &str) -> (u32, u32) {
        use std::os::unix::process::CommandExt;
        let out = std::process::Command::new("bash")
            .args(["-c", "sleep 300 >/dev/null 2>&1 & echo $$ $!"])
            .env("__SR_JOB", marker)
            .process_group(0)
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let mut ids = text.split_whitespace().map(|w| w.parse::<u32>().unwrap());
        (ids.next().unwrap(), ids.next().unwrap())
    }

    /// Whether process `pid` runs (exists and is not a zombie).
    pub(super) fn pid_alive(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => !stat[stat.rfind(')').unwrap()..].starts_with(") Z"),
            Err(_) => false,
        }
    }

    /// Whether `pid` ends within a few seconds (a signal is delivered, and acted on,
    /// after `kill` returns).
    pub(super) fn ends_soon(pid: u32) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while pid_alive(pid) {
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        true
    }

    /// The pid of the first process whose command line matches `pattern` (pgrep's
    /// extended regular expression), waiting up to ten seconds for one to start.
    pub(super) fn started(pattern: &str) -> u32 {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let out = std::process::Command::new("pgrep")
                .args(["-f", pattern])
                .output()
                .unwrap();
            let text = String::from_utf8(out.stdout).unwrap();
            if let Some(pid) = text.split_whitespace().next() {
                return pid.parse().unwrap();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no process matching {pattern} started"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    fn kill_pid(pid: u32) {
        // SAFETY: a process this test started.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    }

    #[test]
    fn orphan_kills_hit_only_the_group_that_ran_the_command_on_this_host() {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
        let boot = boot.trim().to_string();
        // A running command reports its group, its start time and this host.
        let mut bash = Bash::start();
        bash.proto.send(&Command::new("sleep").arg("300")).unwrap();
        let events = bash.pump_until(|e| !e.is_empty());
        assert!(matches!(events[0], ShellEvent::Started { .. }));
        let ours = bash.proto.running().expect("started");
        assert_eq!(ours.boot, boot);
        assert!(ours.start.parse::<u64>().is_ok(), "{ours:?}");
        // A live group whose pid was reused (another start time), and our own group
        // seen from another host: left alone.
        let mut other = unrelated_group();
        let reused = Orphan {
            pgid: other.id(),
            start: "1".into(),
            ..ours.clone()
        };
        let elsewhere = Orphan {
            boot: "another-host".into(),
            ..ours.clone()
        };
        // A group whose leader ended: only its processes that carry the marker die.
        let (marked_group, marked) = leaderless_group("SRMours");
        let (foreign_group, foreign) = leaderless_group("SRMtheirs");
        let leaderless = |pgid| Orphan {
            pgid,
            start: "1".into(),
            boot: boot.clone(),
            marker: "SRMours".into(),
        };
        let kills = [
            reused,
            elsewhere,
            leaderless(marked_group),
            leaderless(foreign_group),
        ];
        let mut killer = Bash::start_killing(&kills);
        let _ = killer.run(&Command::new("true"));
        assert!(alive(&mut other), "an unrelated process group was killed");
        assert!(
            pid_alive(foreign),
            "a process without the marker was killed"
        );
        assert!(
            ends_soon(marked),
            "the marked process of a leaderless group lives"
        );
        assert!(pid_alive(ours.pgid), "killed from another host");
        // The real thing: our command's group, from a new shell on this host.
        let _ = Bash::start_killing(std::slice::from_ref(&ours)).run(&Command::new("true"));
        assert!(ends_soon(ours.pgid), "the timed-out command still runs");
        other.kill().unwrap();
        kill_pid(foreign);
    }

    #[test]
    fn a_command_whose_report_was_lost_is_killed_by_its_marker() {
        // A command delivered whole, its `P` line never read (lost with the connection).
        let nap = format!("300.{}", rand::random::<u16>());
        let mut bash = Bash::start();
        assert!(bash.proto.running().is_none(), "nothing sent yet");
        bash.proto.send(&Command::new("sleep").arg(&nap)).unwrap();
        assert!(bash.proto.running().is_none(), "not delivered yet");
        bash.flush();
        let lost = bash.proto.running().expect("delivered: it may run");
        assert_eq!(
            (lost.pgid, lost.start.as_str(), lost.boot.as_str()),
            (0, "-", "-")
        );
        let sleeper = started(&format!("^sleep {nap}$"));
        // Another process with the same group unknown but no marker of ours: left alone.
        let (_, foreign) = leaderless_group("SRMtheirs");
        let _ = Bash::start_killing(std::slice::from_ref(&lost)).run(&Command::new("true"));
        assert!(
            ends_soon(sleeper),
            "the command whose report was lost still runs"
        );
        assert!(
            pid_alive(foreign),
            "a process without the marker was killed"
        );
        kill_pid(foreign);
    }

    #[test]
    fn garbage_in_a_status_line_breaks_the_shell() {
        let mut proto = ShellProtocol::new(&[]);
        proto.state = State::Ready;
        proto.send(&Command::new("true")).unwrap();
        let marker = match &proto.state {
            State::Busy { marker, .. } => marker.clone(),
            _ => unreachable!(),
        };
        let err = proto
            .receive(format!("{marker} P notanumber\n").as_bytes())
            .unwrap_err();
        assert_eq!(err.kind(), slurm_core::ErrorKind::Transport);
        assert!(matches!(proto.state, State::Broken));
    }
}
