//! Port forwarding through a transport: a listener on this machine whose connections
//! reach a port of a host the transport's far side can reach (a compute node seen from
//! the login node), and the handle that keeps it open.

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::{Error, Result};

/// Where forwarded connections go: `host:port` as the transport's far side names it
/// (a compute node's name and a port a job listens on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardTarget {
    /// The host, as the login node resolves it (a node name such as `n1`).
    pub host: String,
    /// The port on that host.
    pub port: u16,
}

impl ForwardTarget {
    /// `port` on `host`.
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        ForwardTarget {
            host: host.into(),
            port,
        }
    }
}

impl fmt::Display for ForwardTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// An open port forward: connections to [`Forwarding::local`] reach its target. It
/// stops when dropped (the listener closes; connections through it end).
pub struct Forwarding {
    local: SocketAddr,
    _stop: Box<dyn Send + Sync>,
}

impl Forwarding {
    /// A forward listening on `local`, kept open by `stop` (dropping `stop` ends it):
    /// for transports that forward by other means than [`listen_and_forward`].
    pub fn new(local: SocketAddr, stop: impl Send + Sync + 'static) -> Self {
        Forwarding {
            local,
            _stop: Box::new(stop),
        }
    }

    /// The address this machine listens on (`127.0.0.1:PORT`).
    pub fn local(&self) -> SocketAddr {
        self.local
    }
}

impl fmt::Debug for Forwarding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Forwarding")
            .field("local", &self.local)
            .finish()
    }
}

/// Ends a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Listen on `127.0.0.1:local_port` (`0`: a free port) and hand each accepted
/// connection to `carry`, which moves its bytes to the target and back. The accept
/// loop and every connection run on the runtime until the returned forward is dropped.
/// A building block for [`Transport::forward`](super::Transport::forward).
pub async fn listen_and_forward<F, Fut>(local_port: u16, carry: F) -> Result<Forwarding>
where
    F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let listener = TcpListener::bind(("127.0.0.1", local_port))
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AddrInUse => Error::Invalid {
                field: "local port".into(),
                message: format!(
                    "127.0.0.1:{local_port} is in use; choose another local port or leave it out for a free one"
                ),
            },
            _ => Error::io(format!("listen on 127.0.0.1:{local_port}"), e),
        })?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::io("read the forward's local address", e))?;
    let accept = tokio::spawn(async move {
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let _ = stream.set_nodelay(true);
                        let carried = carry(stream);
                        connections.spawn(async move {
                            if let Err(error) = carried.await {
                                tracing::warn!(%peer, %error, "a forwarded connection failed");
                            }
                        });
                    }
                    Err(error) => {
                        tracing::warn!(%error, "accepting a forwarded connection failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
    });
    Ok(Forwarding::new(local, AbortOnDrop(accept)))
}

/// A free port on `127.0.0.1` now (bound, then released): for forwards whose listener
/// another process opens (OpenSSH's master). Another process could take it in between;
/// the forward then fails saying the port is in use.
pub fn free_local_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
        .map_err(|e| Error::io("find a free local port", e))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| Error::io("find a free local port", e))
}

/// The error of a transport that cannot forward ports.
pub(crate) fn not_supported(transport: &str) -> Error {
    Error::config(
        "transport",
        format!(
            "{transport} cannot forward ports; use Ssh2Transport, OpenSshTransport or LocalTransport"
        ),
    )
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn connections_reach_the_target_until_the_forward_is_dropped() {
        // The target: an echo server that answers "echo:" + what it read.
        let target = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target_addr = target.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = target.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 5];
                    s.read_exact(&mut buf).await.unwrap();
                    s.write_all(b"echo:").await.unwrap();
                    s.write_all(&buf).await.unwrap();
                });
            }
        });
        let forward = listen_and_forward(0, move |mut inbound| async move {
            let mut outbound = TcpStream::connect(target_addr)
                .await
                .map_err(|e| Error::io("connect", e))?;
            tokio::io::copy_bidirectional(&mut inbound, &mut outbound)
                .await
                .map_err(|e| Error::io("copy", e))?;
            Ok(())
        })
        .await
        .unwrap();
        let local = forward.local();
        assert!(local.ip().is_loopback());
        for _ in 0..2 {
            let mut c = TcpStream::connect(local).await.unwrap();
            c.write_all(b"hello").await.unwrap();
            let mut answer = Vec::new();
            c.read_to_end(&mut answer).await.unwrap();
            assert_eq!(answer, b"echo:hello");
        }
        drop(forward);
        // The listener closes with the forward (poll with a deadline: the task ends soon after).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while TcpStream::connect(local).await.is_ok() {
            assert!(std::time::Instant::now() < deadline, "still listening");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn a_port_in_use_is_refused_naming_the_fix() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let err = listen_and_forward(port, |_| async { Ok(()) })
            .await
            .unwrap_err();
        assert!(err.to_string().contains("in use"), "{err}");
        assert!(err.to_string().contains("local port"), "{err}");
    }
}
