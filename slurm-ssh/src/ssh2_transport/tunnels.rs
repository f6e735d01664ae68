//! Port forwards on a session: one `direct-tcpip` channel per forwarded local
//! connection, opened and pumped by the session's worker thread without blocking.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Weak;

use slurm_core::ForwardTarget;
use ssh2::{Channel, Session};

use super::channel::would_block;

/// A local connection to carry to `target`, while its forward is open (`open` upgrades).
pub(crate) struct TunnelRequest {
    pub(crate) stream: TcpStream,
    pub(crate) target: ForwardTarget,
    pub(crate) open: Weak<()>,
}

/// One forwarded connection: the local socket, its channel, and the bytes in between.
struct Tunnel {
    request: TunnelRequest,
    channel: Channel,
    /// Read from the local socket, not yet written to the channel.
    to_remote: Vec<u8>,
    /// Read from the channel, not yet written to the local socket.
    to_local: Vec<u8>,
    local_eof: bool,
    remote_eof: bool,
}

/// The forwarded connections of one session.
#[derive(Default)]
pub(crate) struct Tunnels {
    /// Waiting for their channel to open, in order (the first is opened first).
    opening: Vec<TunnelRequest>,
    open: Vec<Tunnel>,
    /// The first waiting connection's channel open is under way in libssh2.
    open_pending: bool,
}

const CHUNK: usize = 32 * 1024;

impl Tunnels {
    /// Carry `request` once its channel opens.
    pub(crate) fn add(&mut self, request: TunnelRequest) {
        self.opening.push(request);
    }

    /// Whether a channel open of ours is under way (no other may start meanwhile).
    pub(crate) fn open_pending(&self) -> bool {
        self.open_pending
    }

    /// Whether any forwarded connection is waiting or open.
    pub(crate) fn is_empty(&self) -> bool {
        self.opening.is_empty() && self.open.is_empty()
    }

    /// Open waiting channels and move bytes both ways as far as nothing blocks; end the
    /// connections that are done (either side closed, or their forward stopped).
    /// Returns whether anything happened.
    pub(crate) fn step(&mut self, session: &Session, shells_opening: bool) -> bool {
        let mut progress = false;
        // Connections whose forward is gone are dropped, but not one whose channel open
        // is under way (it completes, then closes with the rest of the dead ones).
        let pending = self.open_pending;
        let mut index = 0;
        self.opening.retain(|request| {
            let keep = (pending && index == 0) || request.open.upgrade().is_some();
            index += 1;
            progress |= !keep;
            keep
        });
        // libssh2 opens one channel at a time per session: a new open starts only when
        // no shell's is under way, and an open under way is carried on to its end.
        if !self.opening.is_empty() && (self.open_pending || !shells_opening) {
            let request = &self.opening[0];
            let target = &request.target;
            match session.channel_direct_tcpip(&target.host, target.port, None) {
                Ok(channel) => {
                    progress = true;
                    self.open_pending = false;
                    let request = self.opening.remove(0);
                    self.open.push(Tunnel {
                        request,
                        channel,
                        to_remote: Vec::new(),
                        to_local: Vec::new(),
                        local_eof: false,
                        remote_eof: false,
                    });
                }
                Err(e) if would_block(&e) => self.open_pending = true,
                Err(e) => {
                    progress = true;
                    self.open_pending = false;
                    tracing::warn!(%target, error = %e, "the login node could not open a forwarded connection");
                    let request = self.opening.remove(0);
                    let _ = request.stream.shutdown(Shutdown::Both);
                }
            }
        }
        let mut kept = Vec::with_capacity(self.open.len());
        for mut tunnel in std::mem::take(&mut self.open) {
            match tunnel.pump() {
                Ok((moved, done)) if !done && tunnel.request.open.upgrade().is_some() => {
                    progress |= moved;
                    kept.push(tunnel);
                }
                outcome => {
                    progress = true;
                    if let Err(e) = outcome {
                        tracing::debug!(target = %tunnel.request.target, error = %e, "a forwarded connection ended");
                    }
                    let _ = tunnel.channel.close();
                    let _ = tunnel.request.stream.shutdown(Shutdown::Both);
                }
            }
        }
        self.open = kept;
        progress
    }

    /// The local sockets to poll, and for what (`POLLIN` when their bytes can be taken,
    /// `POLLOUT` when bytes wait for them).
    pub(crate) fn poll_fds(&self) -> Vec<(RawFd, i16)> {
        self.open
            .iter()
            .map(|t| {
                let mut events = 0;
                if t.to_remote.is_empty() && !t.local_eof {
                    events |= libc::POLLIN;
                }
                if !t.to_local.is_empty() {
                    events |= libc::POLLOUT;
                }
                (t.request.stream.as_raw_fd(), events)
            })
            .collect()
    }
}

impl Tunnel {
    /// Move what can move without blocking: (whether anything moved, whether done).
    fn pump(&mut self) -> io::Result<(bool, bool)> {
        let mut moved = false;
        let mut buf = [0u8; CHUNK];
        // Local -> remote.
        loop {
            if self.to_remote.is_empty() && !self.local_eof {
                match self.request.stream.read(&mut buf) {
                    Ok(0) => {
                        self.local_eof = true;
                        moved = true;
                        match self.channel.send_eof() {
                            Ok(()) => {}
                            Err(e) if would_block(&e) => self.local_eof = false,
                            Err(e) => return Err(io::Error::other(e)),
                        }
                    }
                    Ok(n) => {
                        self.to_remote.extend_from_slice(&buf[..n]);
                        moved = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            if self.to_remote.is_empty() {
                break;
            }
            match self.channel.write(&self.to_remote) {
                Ok(0) => break,
                Ok(n) => {
                    self.to_remote.drain(..n);
                    moved = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        // Remote -> local.
        loop {
            if self.to_local.is_empty() && !self.remote_eof {
                match self.channel.read(&mut buf) {
                    Ok(0) => {
                        if self.channel.eof() {
                            self.remote_eof = true;
                            moved = true;
                        }
                    }
                    Ok(n) => {
                        self.to_local.extend_from_slice(&buf[..n]);
                        moved = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            if self.to_local.is_empty() {
                break;
            }
            match self.request.stream.write(&self.to_local) {
                Ok(0) => break,
                Ok(n) => {
                    self.to_local.drain(..n);
                    moved = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        let done = self.remote_eof && self.to_local.is_empty();
        Ok((moved, done))
    }
}
