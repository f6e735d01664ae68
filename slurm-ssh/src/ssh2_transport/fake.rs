//! A scripted session and channels standing in for libssh2 in unit tests; the test plays the remote shell.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::rc::Rc;

use ssh2::ErrorCode;

use super::channel::{SshChannel, SshSession};

fn error(code: i32) -> ssh2::Error {
    ssh2::Error::new(ErrorCode::Session(code), "fake")
}

/// libssh2 error codes a test scripts (see `Ssh2ErrorScope`).
pub(crate) const EAGAIN: i32 = -37;
pub(crate) const CHANNEL_FAILURE: i32 = -21;
pub(crate) const SOCKET_SEND: i32 = -7;

/// What the scripted session answers next; each call takes the front error, else succeeds.
#[derive(Default)]
struct Script {
    opens: VecDeque<i32>,
    shell_requests: VecDeque<i32>,
    keepalives: VecDeque<i32>,
    channels: Vec<FakeChannel>,
}

/// A session whose calls succeed unless the test scripted an error.
#[derive(Default)]
pub(crate) struct FakeSession {
    script: Rc<RefCell<Script>>,
}

impl FakeSession {
    pub(crate) fn fail_next_open(&self, code: i32) {
        self.script.borrow_mut().opens.push_back(code);
    }

    pub(crate) fn fail_next_shell_request(&self, code: i32) {
        self.script.borrow_mut().shell_requests.push_back(code);
    }

    pub(crate) fn fail_next_keepalive(&self, code: i32) {
        self.script.borrow_mut().keepalives.push_back(code);
    }

    /// The `i`th channel opened.
    pub(crate) fn channel(&self, i: usize) -> FakeChannel {
        self.script.borrow().channels[i].clone()
    }

    pub(crate) fn channels_opened(&self) -> usize {
        self.script.borrow().channels.len()
    }
}

impl SshSession for FakeSession {
    type Channel = FakeChannel;

    fn open_channel(&self) -> Result<FakeChannel, ssh2::Error> {
        let mut script = self.script.borrow_mut();
        if let Some(code) = script.opens.pop_front() {
            return Err(error(code));
        }
        let ch = FakeChannel {
            wire: Rc::default(),
            script: Rc::clone(&self.script),
        };
        script.channels.push(ch.clone());
        Ok(ch)
    }

    fn keepalive_send(&self) -> Result<u32, ssh2::Error> {
        match self.script.borrow_mut().keepalives.pop_front() {
            Some(code) => Err(error(code)),
            None => Ok(30),
        }
    }
}

#[derive(Default)]
struct Wire {
    written: Vec<u8>,
    unread: VecDeque<u8>,
    eof: bool,
    /// Bytes the channel still accepts (`None`: any number).
    room: Option<usize>,
    broken: bool,
    closed: bool,
    /// Closing would block (the server never answers the close).
    close_held: bool,
}

/// One channel; the test reads what the shell side wrote and pushes the remote's answers.
#[derive(Clone)]
pub(crate) struct FakeChannel {
    wire: Rc<RefCell<Wire>>,
    script: Rc<RefCell<Script>>,
}

impl FakeChannel {
    pub(crate) fn written_text(&self) -> String {
        String::from_utf8_lossy(&self.wire.borrow().written).into_owned()
    }

    /// The 32-hex-digit token written after the last `after`.
    fn token_after(&self, after: &str) -> String {
        let text = self.written_text();
        let at = text.rfind(after).expect("the token was written") + after.len();
        text[at..at + 32].to_string()
    }

    pub(crate) fn push(&self, text: &str) {
        self.wire.borrow_mut().unread.extend(text.bytes());
    }

    /// Answer the bootstrap line as the remote bash would.
    pub(crate) fn answer_sync(&self) {
        self.push(&format!("SRSYNC_{}\n", self.token_after("slurm-run ")));
    }

    /// Answer the init script as the remote bash would.
    pub(crate) fn answer_ready(&self) {
        self.push(&format!("SRREADY_{}\n", self.token_after("SRREADY ")));
    }

    /// The marker of the last request written.
    pub(crate) fn marker(&self) -> String {
        format!("SRM{}", self.token_after("__sr_run SRM"))
    }

    /// Report the last request started in process group `pgid`.
    pub(crate) fn answer_started(&self, pgid: u32) {
        self.push(&format!("{} P {pgid} 777 boot-1\n", self.marker()));
    }

    /// Report the last request ended with `stdout` and `status`.
    pub(crate) fn answer_finished(&self, stdout: &str, status: i32) {
        let m = self.marker();
        self.push(&format!("{stdout}{m} O{m} E {status}\n"));
    }

    /// The remote shell exits: end-of-file after what is unread.
    pub(crate) fn close_remote(&self) {
        self.wire.borrow_mut().eof = true;
    }

    /// Reads and writes fail from now on (the transport broke).
    pub(crate) fn fail_io(&self) {
        self.wire.borrow_mut().broken = true;
    }

    /// Accept only `bytes` more bytes; writes then would block.
    pub(crate) fn limit_writes(&self, bytes: usize) {
        self.wire.borrow_mut().room = Some(bytes);
    }

    /// From now on, closing the channel would block (the server never confirms it).
    pub(crate) fn hold_close(&self) {
        self.wire.borrow_mut().close_held = true;
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.wire.borrow().closed
    }
}

impl Read for FakeChannel {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut wire = self.wire.borrow_mut();
        if wire.broken {
            return Err(io::Error::other("fake transport broke"));
        }
        if wire.unread.is_empty() {
            return match wire.eof {
                true => Ok(0),
                false => Err(io::ErrorKind::WouldBlock.into()),
            };
        }
        let n = buf.len().min(wire.unread.len());
        for (slot, byte) in buf.iter_mut().zip(wire.unread.drain(..n)) {
            *slot = byte;
        }
        Ok(n)
    }
}

impl Write for FakeChannel {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let mut wire = self.wire.borrow_mut();
        if wire.broken {
            return Err(io::Error::other("fake transport broke"));
        }
        let n = wire.room.map_or(data.len(), |room| room.min(data.len()));
        if n == 0 && !data.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        if let Some(room) = &mut wire.room {
            *room -= n;
        }
        wire.written.extend_from_slice(&data[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl SshChannel for FakeChannel {
    fn request_shell(&mut self) -> Result<(), ssh2::Error> {
        match self.script.borrow_mut().shell_requests.pop_front() {
            Some(code) => Err(error(code)),
            None => Ok(()),
        }
    }

    fn eof(&self) -> bool {
        self.wire.borrow().eof
    }

    fn close(&mut self) -> Result<(), ssh2::Error> {
        let mut wire = self.wire.borrow_mut();
        if wire.close_held {
            return Err(error(EAGAIN));
        }
        wire.closed = true;
        Ok(())
    }
}
