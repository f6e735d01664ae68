//! [`SilentProxy`]: a TCP proxy a test controls, that forwards until told to go silent
//! (a NAT mapping that timed out, a login node that died without a reset).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

/// What the accept thread and the pumps share.
#[derive(Default)]
struct Shared {
    /// Connections numbered below this are silent.
    silent_below: AtomicU64,
    /// Connections accepted so far.
    accepted: AtomicU64,
    stopping: AtomicBool,
    /// Every socket, to shut down when the proxy is dropped.
    sockets: Mutex<Vec<TcpStream>>,
}

/// A loopback TCP proxy to one target. [`SilentProxy::silence`] makes every connection
/// open at that moment go silent in both directions: the proxy keeps both sockets open
/// and keeps reading, but forwards nothing more (no reset, no end-of-file), so each end
/// sees only silence. Connections accepted later forward as usual. Dropping the proxy
/// closes everything.
pub struct SilentProxy {
    port: u16,
    shared: Arc<Shared>,
}

impl SilentProxy {
    /// Listen on a free loopback port and forward each connection to `target`.
    pub fn start(target: SocketAddr) -> SilentProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared::default());
        let accepting = Arc::clone(&shared);
        thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.stopping.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(target) else {
                    continue;
                };
                let id = accepting.accepted.fetch_add(1, Ordering::SeqCst);
                if let Ok(mut sockets) = accepting.sockets.lock() {
                    for s in [&client, &server] {
                        if let Ok(copy) = s.try_clone() {
                            sockets.push(copy);
                        }
                    }
                }
                for (from, to) in [(&client, &server), (&server, &client)] {
                    let (Ok(from), Ok(to)) = (from.try_clone(), to.try_clone()) else {
                        continue;
                    };
                    let shared = Arc::clone(&accepting);
                    thread::spawn(move || pump(id, from, to, &shared));
                }
            }
        });
        SilentProxy { port, shared }
    }

    /// The port to connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// From now on, forward nothing on the connections open now (without closing them).
    pub fn silence(&self) {
        let open = self.shared.accepted.load(Ordering::SeqCst);
        self.shared.silent_below.store(open, Ordering::SeqCst);
    }

    /// How many connections the proxy has accepted.
    pub fn connections(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

/// Copy `from` to `to` until either ends; once connection `id` is silenced, read and drop.
fn pump(id: u64, mut from: TcpStream, mut to: TcpStream, shared: &Shared) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if id < shared.silent_below.load(Ordering::SeqCst) {
            continue;
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    if id >= shared.silent_below.load(Ordering::SeqCst) {
        let _ = to.shutdown(Shutdown::Write);
    }
}

impl Drop for SilentProxy {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        if let Ok(sockets) = self.shared.sockets.lock() {
            for s in sockets.iter() {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        // Wake the accept thread so it sees `stopping`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}
