//! Opening a session: TCP, handshake, host key check, authentication, and failover across the login hosts.

use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Instant;

use slurm_core::Error;
use socket2::{SockRef, TcpKeepalive};
use ssh2::{Channel, MethodType, Session};

use super::shells::{Keepalive, ShellPool};
use crate::config::{resolve, Ssh2TransportBuilder, Target};
use crate::known_hosts::{self, KnownHosts};

/// An open, authenticated session and its shells, owned by one worker thread.
pub(crate) struct Conn {
    pub(crate) session: Session,
    /// The session's socket, to poll.
    pub(crate) fd: RawFd,
    /// The bytes the kernel had received on it when last looked at (the server spoke
    /// when the count grew, even if libssh2 has read the bytes already).
    pub(crate) received: u64,
    pub(crate) opened: Instant,
    pub(crate) shells: ShellPool<Channel>,
}

impl Conn {
    /// The login host it reached (as known_hosts names it).
    pub(crate) fn host(&self) -> &str {
        &self.shells.host
    }

    pub(crate) fn shutdown(self) {
        let _ = self.session.disconnect(None, "slurm-run closing", None);
    }
}

/// What kind of error a failed connect is reported as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailureKind {
    Config,
    Auth,
    HostKey,
    Connect,
}

/// Why connecting failed, kept so it can be reported to every waiting command.
#[derive(Debug, Clone)]
pub(crate) struct ConnectFailure {
    pub(crate) kind: FailureKind,
    pub(crate) host: String,
    pub(crate) message: String,
}

impl ConnectFailure {
    pub(crate) fn new(kind: FailureKind, host: &str, message: impl Into<String>) -> Self {
        ConnectFailure {
            kind,
            host: host.to_string(),
            message: message.into(),
        }
    }

    pub(crate) fn to_error(&self) -> Error {
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
    fn combine(mut failures: Vec<ConnectFailure>) -> ConnectFailure {
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
        ConnectFailure {
            kind,
            host: format!("every login host ({host})"),
            message,
        }
    }
}

/// Connect to the first login host that works (blocking, in the worker thread).
pub(crate) fn connect(settings: &Ssh2TransportBuilder) -> Result<Conn, ConnectFailure> {
    let ssh_config = settings
        .load_ssh_config()
        .map_err(|e| ConnectFailure::new(FailureKind::Config, "~/.ssh/config", e.to_string()))?;
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
    Err(ConnectFailure::combine(failures))
}

fn connect_one(settings: &Ssh2TransportBuilder, target: &Target) -> Result<Conn, ConnectFailure> {
    let label = known_hosts::known_hosts_name(&target.hostname, target.port);
    let fail = |kind, message: String| ConnectFailure::new(kind, &label, message);
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
    if let Err(e) = tune_socket(&tcp, settings) {
        tracing::debug!(error = %e, "could not set TCP keepalive or user timeout");
    }
    let fd = tcp.as_raw_fd();
    let mut session =
        Session::new().map_err(|e| fail(FailureKind::Connect, format!("libssh2: {e}")))?;
    session.set_tcp_stream(tcp);
    session.set_timeout(settings.connect_timeout.as_millis().min(u32::MAX as u128) as u32);
    let known_hosts_path = settings.known_hosts_path();
    let known = KnownHosts::load(&known_hosts_path).map_err(|e| {
        fail(
            FailureKind::HostKey,
            format!(
                "cannot read known_hosts file {}: {e}",
                known_hosts_path.display()
            ),
        )
    })?;
    // Ask for the key types known_hosts lists for the host first, as OpenSSH does.
    if let Ok(supported) = session.supported_algs(MethodType::HostKey) {
        if let Some(preferred) =
            known_hosts::preferred_algorithms(&known, &target.hostname, target.port, &supported)
        {
            let _ = session.method_pref(MethodType::HostKey, &preferred);
        }
    }
    session
        .handshake()
        .map_err(|e| fail(FailureKind::Connect, format!("SSH handshake failed: {e}")))?;
    known_hosts::check(
        &session,
        &known,
        &target.hostname,
        target.port,
        settings.trust_on_first_use,
    )
    .map_err(|r| ConnectFailure::new(FailureKind::HostKey, &r.host, r.message))?;
    authenticate(settings, target, &session).map_err(|(kind, m)| fail(kind, m))?;
    // Keepalives that ask for an answer: the answers are how a silent connection shows.
    session.set_keepalive(
        true,
        settings.keepalive.as_secs().clamp(1, u32::MAX as u64) as u32,
    );
    session.set_timeout(0);
    session.set_blocking(false);
    Ok(Conn {
        session,
        fd,
        received: 0,
        opened: Instant::now(),
        shells: ShellPool::new(
            label,
            settings.max_channels,
            Keepalive {
                interval: settings.keepalive,
                max_missed: settings.keepalive_max_missed,
            },
        ),
    })
}

/// TCP keepalive probes at the SSH keepalive's pace, and a user timeout at the silence
/// bound, so the kernel too gives up on a peer that stopped acknowledging (instead of
/// retransmitting for ~15 minutes).
fn tune_socket(tcp: &TcpStream, settings: &Ssh2TransportBuilder) -> std::io::Result<()> {
    let socket = SockRef::from(tcp);
    let probes = TcpKeepalive::new()
        .with_time(settings.keepalive)
        .with_interval(settings.keepalive);
    #[cfg(any(target_os = "linux", target_os = "macos", target_os = "freebsd"))]
    let probes = probes.with_retries(settings.keepalive_max_missed);
    socket.set_tcp_keepalive(&probes)?;
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "fuchsia"))]
    socket.set_tcp_user_timeout(Some(settings.silence_bound()))?;
    Ok(())
}

fn authenticate(
    settings: &Ssh2TransportBuilder,
    target: &Target,
    session: &Session,
) -> Result<(), (FailureKind, String)> {
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

#[cfg(test)]
mod tests {
    use std::net::TcpListener;
    use std::time::Duration;

    use slurm_core::ErrorKind;

    use super::*;
    use crate::hosts::HostSpec;

    fn failure(kind: FailureKind, host: &str) -> ConnectFailure {
        ConnectFailure::new(kind, host, format!("{host} said no"))
    }

    #[test]
    fn failures_become_errors_of_their_kind_that_never_ran_anything() {
        for (kind, expected) in [
            (FailureKind::Config, ErrorKind::Config),
            (FailureKind::Auth, ErrorKind::Auth),
            (FailureKind::HostKey, ErrorKind::HostKey),
            (FailureKind::Connect, ErrorKind::Connect),
        ] {
            let err = failure(kind, "login1").to_error();
            assert_eq!(err.kind(), expected);
            assert!(!err.may_have_run());
            assert!(err.to_string().contains("login1 said no"), "{err}");
        }
    }

    #[test]
    fn the_failures_of_several_hosts_combine_into_one_naming_each() {
        let one = ConnectFailure::combine(vec![failure(FailureKind::Auth, "a")]);
        assert_eq!((one.kind, one.host.as_str()), (FailureKind::Auth, "a"));
        let same = ConnectFailure::combine(vec![
            failure(FailureKind::HostKey, "a"),
            failure(FailureKind::HostKey, "b"),
        ]);
        assert_eq!(same.kind, FailureKind::HostKey, "every host agrees");
        assert_eq!(same.host, "every login host (a, b)");
        assert_eq!(same.message, "a: a said no; b: b said no");
        let mixed = ConnectFailure::combine(vec![
            failure(FailureKind::Auth, "a"),
            failure(FailureKind::HostKey, "b"),
            failure(FailureKind::Auth, "c"),
        ]);
        assert_eq!(mixed.kind, FailureKind::Connect);
        assert_eq!(mixed.message, "a: a said no; b: b said no; c: c said no");
    }

    #[test]
    fn sockets_get_keepalive_probes_and_a_user_timeout_at_the_silence_bound() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let tcp = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let settings = Ssh2TransportBuilder::new()
            .with_keepalive(Duration::from_secs(7))
            .with_keepalive_max_missed(2);
        tune_socket(&tcp, &settings).unwrap();
        let socket = SockRef::from(&tcp);
        assert!(socket.keepalive().unwrap());
        assert_eq!(socket.tcp_keepalive_time().unwrap(), Duration::from_secs(7));
        assert_eq!(
            socket.tcp_keepalive_interval().unwrap(),
            Duration::from_secs(7)
        );
        assert_eq!(socket.tcp_keepalive_retries().unwrap(), 2);
        assert_eq!(
            socket.tcp_user_timeout().unwrap(),
            Some(Duration::from_secs(21))
        );
        // With the defaults: 40 s.
        assert_eq!(
            Ssh2TransportBuilder::new().silence_bound(),
            Duration::from_secs(40)
        );
    }

    #[test]
    fn failover_tries_every_host_in_order_and_reports_each_reason() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        std::fs::write(&config, "Host jumpy\n  ProxyJump bastion\n").unwrap();
        // A port nothing listens on, and one whose server hangs up at once.
        let closed = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let hangup = TcpListener::bind("127.0.0.1:0").unwrap();
        let hangup_port = hangup.local_addr().unwrap().port();
        let server = std::thread::spawn(move || drop(hangup.accept().unwrap()));
        let settings = Ssh2TransportBuilder::new()
            .with_ssh_config(Some(config))
            .with_connect_timeout(Duration::from_secs(10))
            .with_hosts(vec![
                HostSpec::new("jumpy"),
                HostSpec::with_port("127.0.0.1", closed),
                HostSpec::with_port("127.0.0.1", hangup_port),
            ]);
        let Err(failure) = connect(&settings) else {
            panic!("no host can work")
        };
        server.join().unwrap();
        assert_eq!(failure.kind, FailureKind::Connect);
        let closed = format!("[127.0.0.1]:{closed}");
        let hangup = format!("[127.0.0.1]:{hangup_port}");
        assert_eq!(
            failure.host,
            format!("every login host (jumpy, {closed}, {hangup})")
        );
        // Each host's reason, in the order tried.
        let at = |reason: &str| {
            failure
                .message
                .find(reason)
                .unwrap_or_else(|| panic!("{reason:?} in {}", failure.message))
        };
        let jumpy = at("jumpy: ~/.ssh/config asks for ProxyJump bastion");
        let refused = at(&format!("; {closed}: 127.0.0.1:"));
        let hung_up = at(&format!("; {hangup}: SSH handshake failed"));
        assert!(jumpy == 0 && jumpy < refused && refused < hung_up);
    }
}
