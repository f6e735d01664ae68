//! One long-lived framed shell on one SSH channel: its stages, the step that moves it without blocking, and the typed reasons it fails.

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use ssh2::{Channel, ErrorCode, ExtendedData, Session};

use super::{Done, Job};
use crate::framing::{Orphan, ShellEvent, ShellProtocol, SHELL_START_TIMEOUT};

/// The session calls the shells make: libssh2's, or a fake in tests.
pub(crate) trait SshSession {
    /// A channel of this session.
    type Channel: SshChannel;
    /// Open a session channel that ignores the shell's own stderr.
    fn open_channel(&self) -> Result<Self::Channel, ssh2::Error>;
    /// Send a keepalive; returns the seconds until the next one is due.
    fn keepalive_send(&self) -> Result<u32, ssh2::Error>;
}

/// The channel calls a shell makes, besides reading and writing.
pub(crate) trait SshChannel: Read + Write {
    /// Ask for a shell on the channel.
    fn request_shell(&mut self) -> Result<(), ssh2::Error>;
    /// Whether the remote side sent end-of-file.
    fn eof(&self) -> bool;
    /// Close the channel.
    fn close(&mut self) -> Result<(), ssh2::Error>;
}

impl SshSession for Session {
    type Channel = Channel;

    fn open_channel(&self) -> Result<Channel, ssh2::Error> {
        let mut ch = self.channel_session()?;
        // Ignore the shell's own stderr (command stderr travels framed on stdout).
        let _ = ch.handle_extended_data(ExtendedData::Ignore);
        Ok(ch)
    }

    fn keepalive_send(&self) -> Result<u32, ssh2::Error> {
        Session::keepalive_send(self)
    }
}

impl SshChannel for Channel {
    fn request_shell(&mut self) -> Result<(), ssh2::Error> {
        Channel::shell(self)
    }

    fn eof(&self) -> bool {
        Channel::eof(self)
    }

    fn close(&mut self) -> Result<(), ssh2::Error> {
        Channel::close(self)
    }
}

/// libssh2 error codes (stable parts of its ABI; ssh2 does not re-export them).
const LIBSSH2_ERROR_EAGAIN: i32 = -37;
const LIBSSH2_ERROR_CHANNEL_FAILURE: i32 = -21;
const LIBSSH2_ERROR_CHANNEL_REQUEST_DENIED: i32 = -22;
const LIBSSH2_ERROR_CHANNEL_CLOSED: i32 = -26;
const LIBSSH2_ERROR_CHANNEL_EOF_SENT: i32 = -27;

/// What a libssh2 error means for a non-blocking session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ssh2ErrorScope {
    /// Nothing failed: the call would block; try again when the socket is ready.
    WouldBlock,
    /// A channel request failed; the session stays usable.
    Channel,
    /// The session itself is unusable.
    Session,
}

impl Ssh2ErrorScope {
    pub(crate) fn of(e: &ssh2::Error) -> Self {
        match e.code() {
            ErrorCode::Session(LIBSSH2_ERROR_EAGAIN) => Ssh2ErrorScope::WouldBlock,
            ErrorCode::Session(
                LIBSSH2_ERROR_CHANNEL_FAILURE
                | LIBSSH2_ERROR_CHANNEL_REQUEST_DENIED
                | LIBSSH2_ERROR_CHANNEL_CLOSED
                | LIBSSH2_ERROR_CHANNEL_EOF_SENT,
            ) => Ssh2ErrorScope::Channel,
            _ => Ssh2ErrorScope::Session,
        }
    }
}

pub(crate) fn would_block(e: &ssh2::Error) -> bool {
    Ssh2ErrorScope::of(e) == Ssh2ErrorScope::WouldBlock
}

/// Why one shell was retired; its connection lives on.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ShellFailure {
    /// The server would not open another channel (its MaxSessions is lower than ours).
    #[error("the server refused a channel: {0}")]
    ChannelRefused(ssh2::Error),
    /// The server would not start a shell on the channel.
    #[error("the server refused a shell: {0}")]
    ShellRefused(ssh2::Error),
    /// The shell ended (end-of-file on the channel).
    #[error("the remote shell exited")]
    Exited,
    /// The shell got a damaged request and did not run it.
    #[error("the request reached the shell damaged and was not run")]
    RequestDamaged,
    /// The shell spoke outside the framing protocol.
    #[error("{0}")]
    Protocol(slurm_core::Error),
    /// The shell did not finish its set-up in time.
    #[error("the shell did not become ready within {:?}", SHELL_START_TIMEOUT)]
    StartTimedOut,
    /// Its command passed its deadline (the shell is dropped with it).
    #[error("timed out")]
    TimedOut,
}

/// Why a connection is unusable: every shell on it is lost.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnFailure {
    #[error("keepalive failed: {0}")]
    Keepalive(ssh2::Error),
    /// Keepalives went unanswered: the connection is half-open (a NAT mapping that
    /// expired, a host that died without a reset).
    #[error(
        "the server answered none of the last {missed} keepalives, sent {interval:?} apart: \
         the connection went silent (a NAT or firewall timeout, or the login host is down)"
    )]
    Silent { missed: u32, interval: Duration },
    #[error("opening a channel failed: {0}")]
    OpenChannel(ssh2::Error),
    #[error("requesting a shell failed: {0}")]
    RequestShell(ssh2::Error),
    #[error("writing to the shell channel failed: {0}")]
    Write(io::Error),
    #[error("reading from the shell channel failed: {0}")]
    Read(io::Error),
}

/// Where a shell's channel is.
pub(crate) enum Stage<C> {
    /// Waiting for the session to open a channel (one open at a time per session).
    Opening,
    /// Channel open; the shell request is under way.
    Requesting(C),
    /// The shell runs.
    Running(C),
}

/// One long-lived shell: its channel, its protocol state and the command it runs.
pub(crate) struct Shell<C> {
    pub(crate) stage: Stage<C>,
    pub(crate) proto: ShellProtocol,
    pub(crate) job: Option<Job>,
    pub(crate) started: Instant,
    pub(crate) dead: Option<ShellFailure>,
    /// Whether the shell ever finished its set-up.
    pub(crate) was_ready: bool,
}

impl<C: SshChannel> Shell<C> {
    /// A shell to open; its set-up kills the process groups `kills`.
    pub(crate) fn new(kills: &[Orphan], now: Instant) -> Self {
        Shell {
            stage: Stage::Opening,
            proto: ShellProtocol::new(kills),
            job: None,
            started: now,
            dead: None,
            was_ready: false,
        }
    }

    /// The channel, to close, once the shell is retired.
    pub(crate) fn into_channel(self) -> Option<C> {
        match self.stage {
            Stage::Requesting(ch) | Stage::Running(ch) => Some(ch),
            Stage::Opening => None,
        }
    }

    /// Move the shell forward. Returns whether anything happened, or why the
    /// connection is dead. `opening_taken` is set once a shell of this session
    /// tried to open a channel in this round; a refused channel lowers `channel_limit`.
    pub(crate) fn drive<S: SshSession<Channel = C>>(
        &mut self,
        session: &S,
        opening_taken: &mut bool,
        buf: &mut [u8],
        channel_limit: &mut usize,
        done: &mut Done,
    ) -> Result<bool, ConnFailure> {
        if self.dead.is_some() {
            return Ok(false);
        }
        let mut progress = false;
        if let Stage::Opening = self.stage {
            if *opening_taken {
                return Ok(false);
            }
            *opening_taken = true;
            match session.open_channel() {
                Ok(ch) => {
                    self.stage = Stage::Requesting(ch);
                    progress = true;
                }
                Err(e) => match Ssh2ErrorScope::of(&e) {
                    Ssh2ErrorScope::WouldBlock => return Ok(false),
                    Ssh2ErrorScope::Channel => {
                        *channel_limit = (*channel_limit).saturating_sub(1).max(1);
                        self.dead = Some(ShellFailure::ChannelRefused(e));
                        return Ok(true);
                    }
                    Ssh2ErrorScope::Session => return Err(ConnFailure::OpenChannel(e)),
                },
            }
        }
        if let Stage::Requesting(ch) = &mut self.stage {
            match ch.request_shell() {
                Ok(()) => {
                    let Stage::Requesting(ch) = std::mem::replace(&mut self.stage, Stage::Opening)
                    else {
                        unreachable!()
                    };
                    self.stage = Stage::Running(ch);
                    progress = true;
                }
                Err(e) => match Ssh2ErrorScope::of(&e) {
                    Ssh2ErrorScope::WouldBlock => return Ok(progress),
                    Ssh2ErrorScope::Channel => {
                        self.dead = Some(ShellFailure::ShellRefused(e));
                        return Ok(true);
                    }
                    Ssh2ErrorScope::Session => return Err(ConnFailure::RequestShell(e)),
                },
            }
        }
        let Stage::Running(ch) = &mut self.stage else {
            return Ok(progress);
        };
        // Write what the protocol has pending.
        while !self.proto.to_write().is_empty() {
            match ch.write(self.proto.to_write()) {
                Ok(0) => break,
                Ok(n) => {
                    self.proto.wrote(n);
                    progress = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(ConnFailure::Write(e)),
            }
        }
        // Read what the shell said.
        loop {
            match ch.read(buf) {
                Ok(0) => {
                    if ch.eof() {
                        self.dead = Some(ShellFailure::Exited);
                        return Ok(true);
                    }
                    break;
                }
                Ok(n) => {
                    progress = true;
                    match self.proto.receive(&buf[..n]) {
                        Ok(events) => {
                            for event in events {
                                match event {
                                    ShellEvent::Finished(output) => {
                                        if let Some(job) = self.job.take() {
                                            done.push((job, Ok(output)));
                                        }
                                    }
                                    ShellEvent::Refused => {
                                        self.dead = Some(ShellFailure::RequestDamaged);
                                    }
                                    ShellEvent::Ready => self.was_ready = true,
                                    ShellEvent::Started { .. } => {}
                                }
                            }
                        }
                        Err(e) => {
                            self.dead = Some(ShellFailure::Protocol(e));
                            return Ok(true);
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(ConnFailure::Read(e)),
            }
        }
        Ok(progress)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::{self, FakeSession};
    use super::*;

    fn error(code: i32) -> ssh2::Error {
        ssh2::Error::new(ErrorCode::Session(code), "fake")
    }

    #[test]
    fn libssh2_error_codes_map_to_their_scope() {
        use Ssh2ErrorScope::*;
        for (code, scope) in [
            (-37, WouldBlock),
            (-21, Channel),
            (-22, Channel),
            (-26, Channel),
            (-27, Channel),
            (-7, Session),  // socket send
            (-43, Session), // socket recv
            (-9, Session),  // timeout
            (-13, Session), // socket disconnect
        ] {
            assert_eq!(Ssh2ErrorScope::of(&error(code)), scope, "code {code}");
        }
        // The same numbers from another layer (SFTP) are not session codes.
        let sftp = ssh2::Error::new(ErrorCode::SFTP(-37), "sftp");
        assert_eq!(Ssh2ErrorScope::of(&sftp), Session);
        assert!(would_block(&error(-37)) && !would_block(&error(-21)));
    }

    #[test]
    fn reasons_read_as_before() {
        assert_eq!(ShellFailure::TimedOut.to_string(), "timed out");
        assert_eq!(
            ShellFailure::StartTimedOut.to_string(),
            "the shell did not become ready within 30s"
        );
        let refused = ShellFailure::ChannelRefused(error(-21)).to_string();
        assert!(
            refused.starts_with("the server refused a channel: "),
            "{refused}"
        );
        assert!(refused.contains("fake"), "{refused}");
        let lost = ConnFailure::Read(io::Error::other("boom")).to_string();
        assert_eq!(lost, "reading from the shell channel failed: boom");
    }

    /// Drive `shell` once on `session`, as the only shell of its round.
    fn drive(
        shell: &mut Shell<fake::FakeChannel>,
        session: &FakeSession,
    ) -> Result<bool, ConnFailure> {
        let mut limit = 8;
        shell.drive(
            session,
            &mut false,
            &mut [0; 64],
            &mut limit,
            &mut Vec::new(),
        )
    }

    #[test]
    fn a_shell_goes_from_opening_to_running_and_bootstraps() {
        let session = FakeSession::default();
        let mut shell = Shell::new(&[], Instant::now());
        // Another shell took this round's channel open: nothing happens.
        let mut limit = 8;
        assert!(!shell
            .drive(
                &session,
                &mut true,
                &mut [0; 64],
                &mut limit,
                &mut Vec::new()
            )
            .unwrap());
        assert!(matches!(shell.stage, Stage::Opening));
        // The shell request would block: the channel waits in Requesting.
        session.fail_next_shell_request(fake::EAGAIN);
        assert!(drive(&mut shell, &session).unwrap());
        assert!(matches!(shell.stage, Stage::Requesting(_)));
        assert!(drive(&mut shell, &session).unwrap());
        assert!(matches!(shell.stage, Stage::Running(_)));
        let ch = session.channel(0);
        assert!(ch
            .written_text()
            .starts_with("exec bash --noprofile --norc"));
        // The sync line brings the init script; the ready line makes it ready.
        ch.answer_sync();
        assert!(drive(&mut shell, &session).unwrap());
        assert!(
            !ch.written_text().contains("__sr_run()"),
            "written on the next drive"
        );
        assert!(drive(&mut shell, &session).unwrap());
        assert!(ch.written_text().contains("__sr_run()"));
        assert!(!shell.was_ready);
        ch.answer_ready();
        assert!(drive(&mut shell, &session).unwrap());
        assert!(shell.was_ready && shell.proto.is_ready());
        assert!(!drive(&mut shell, &session).unwrap(), "nothing left to do");
    }

    #[test]
    fn refusals_retire_the_shell_and_session_errors_kill_the_connection() {
        // A refused channel lowers the channel limit (not below one).
        let session = FakeSession::default();
        session.fail_next_open(fake::CHANNEL_FAILURE);
        let mut shell: Shell<fake::FakeChannel> = Shell::new(&[], Instant::now());
        let mut limit = 1;
        let moved = shell.drive(
            &session,
            &mut false,
            &mut [0; 64],
            &mut limit,
            &mut Vec::new(),
        );
        assert!(moved.unwrap());
        assert!(matches!(shell.dead, Some(ShellFailure::ChannelRefused(_))));
        assert_eq!(limit, 1);
        // A refused shell request.
        session.fail_next_shell_request(-22);
        let mut shell = Shell::new(&[], Instant::now());
        assert!(drive(&mut shell, &session).unwrap());
        assert!(matches!(shell.dead, Some(ShellFailure::ShellRefused(_))));
        assert!(
            shell.into_channel().is_some(),
            "the open channel is closed later"
        );
        // Session-level errors end the connection.
        session.fail_next_open(fake::SOCKET_SEND);
        let err = drive(&mut Shell::new(&[], Instant::now()), &session).unwrap_err();
        assert!(matches!(err, ConnFailure::OpenChannel(_)), "{err}");
        session.fail_next_shell_request(-13);
        let err = drive(&mut Shell::new(&[], Instant::now()), &session).unwrap_err();
        assert!(matches!(err, ConnFailure::RequestShell(_)), "{err}");
    }

    #[test]
    fn end_of_file_garbage_and_io_errors_end_a_running_shell() {
        let session = FakeSession::default();
        let running = |session: &FakeSession| {
            let mut shell = Shell::new(&[], Instant::now());
            drive(&mut shell, session).unwrap();
            shell
        };
        let mut shell = running(&session);
        session.channel(0).close_remote();
        assert!(drive(&mut shell, &session).unwrap());
        assert!(matches!(shell.dead, Some(ShellFailure::Exited)));
        let mut shell = running(&session);
        session.channel(1).answer_sync();
        drive(&mut shell, &session).unwrap();
        drive(&mut shell, &session).unwrap();
        session.channel(1).answer_ready();
        drive(&mut shell, &session).unwrap();
        shell.proto.send(&slurm_core::Command::new("true")).unwrap();
        drive(&mut shell, &session).unwrap();
        let marker = session.channel(1).marker();
        session.channel(1).push(&format!("{marker} P garbage\n"));
        assert!(drive(&mut shell, &session).unwrap());
        let Some(ShellFailure::Protocol(e)) = &shell.dead else {
            panic!("not a protocol failure")
        };
        assert!(e.to_string().contains("framing protocol"), "{e}");
        let mut shell = running(&session);
        session.channel(2).fail_io();
        assert!(matches!(
            drive(&mut shell, &session),
            Err(ConnFailure::Read(_))
        ));
    }
}
