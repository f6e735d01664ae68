//! The configuration of [`Ssh2Transport`](crate::Ssh2Transport): builder from the environment, `with_*` setters, `~/.ssh/config` lookup.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use slurm_core::{Error, Result};
use ssh2_config::{ParseRule, SshConfig};

use crate::hosts::HostSpec;

/// Default number of sessions (connections) kept per login host.
pub(crate) const DEFAULT_SESSIONS: usize = 2;
/// Default cap on concurrent channels per connection (below OpenSSH's MaxSessions 10).
pub(crate) const DEFAULT_MAX_CHANNELS: usize = 8;
/// Default connect (TCP + handshake + authentication) timeout.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// Default keepalive interval.
pub(crate) const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(10);
/// Default number of keepalives that may go unanswered before a connection is dropped.
pub(crate) const DEFAULT_KEEPALIVE_MAX_MISSED: u32 = 3;

/// A passphrase or other secret: never printed, never in argv.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value, for the one place that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(REDACTED)")
    }
}

/// Settings of an [`Ssh2Transport`](crate::Ssh2Transport): start from [`Ssh2TransportBuilder::from_env`]
/// or [`Ssh2TransportBuilder::new`], adjust with the `with_*` setters, then
/// [`build`](Ssh2TransportBuilder::build).
#[derive(Clone)]
pub struct Ssh2TransportBuilder {
    pub(crate) hosts: Vec<HostSpec>,
    pub(crate) user: Option<String>,
    pub(crate) key_path: Option<PathBuf>,
    pub(crate) passphrase: Option<Secret>,
    pub(crate) use_agent: bool,
    pub(crate) known_hosts: Option<PathBuf>,
    pub(crate) trust_on_first_use: bool,
    pub(crate) ssh_config: Option<PathBuf>,
    pub(crate) sessions: usize,
    pub(crate) max_channels: usize,
    pub(crate) connect_timeout: Duration,
    pub(crate) keepalive: Duration,
    pub(crate) keepalive_max_missed: u32,
}

impl fmt::Debug for Ssh2TransportBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ssh2TransportBuilder")
            .field("hosts", &self.hosts)
            .field("user", &self.user)
            .field("key_path", &self.key_path)
            .field("passphrase", &self.passphrase.as_ref().map(|_| "REDACTED"))
            .field("use_agent", &self.use_agent)
            .field("known_hosts", &self.known_hosts)
            .field("trust_on_first_use", &self.trust_on_first_use)
            .field("ssh_config", &self.ssh_config)
            .field("sessions", &self.sessions)
            .field("max_channels", &self.max_channels)
            .field("connect_timeout", &self.connect_timeout)
            .field("keepalive", &self.keepalive)
            .field("keepalive_max_missed", &self.keepalive_max_missed)
            .finish()
    }
}

impl Default for Ssh2TransportBuilder {
    fn default() -> Self {
        Ssh2TransportBuilder::new()
    }
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from)
}

impl Ssh2TransportBuilder {
    /// A builder with no hosts and the defaults (2 sessions, 8 channels each,
    /// `~/.ssh/known_hosts`, `~/.ssh/config` when it exists, agent when `SSH_AUTH_SOCK` is set).
    pub fn new() -> Self {
        Ssh2TransportBuilder {
            hosts: Vec::new(),
            user: None,
            key_path: None,
            passphrase: None,
            use_agent: std::env::var_os("SSH_AUTH_SOCK").is_some(),
            known_hosts: None,
            trust_on_first_use: false,
            ssh_config: home().map(|h| h.join(".ssh/config")),
            sessions: DEFAULT_SESSIONS,
            max_channels: DEFAULT_MAX_CHANNELS,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            keepalive: DEFAULT_KEEPALIVE,
            keepalive_max_missed: DEFAULT_KEEPALIVE_MAX_MISSED,
        }
    }

    /// Read `SLURM_HOSTNAME` (required), `SLURM_USER`, `SSH_KEY_PATH`, `SSH_AUTH_SOCK`
    /// and `SSH_KNOWN_HOSTS` from the process environment.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Like [`Ssh2TransportBuilder::from_env`], reading variables through `lookup`.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let non_empty = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let hosts = non_empty("SLURM_HOSTNAME").ok_or_else(|| {
            Error::config(
                "SLURM_HOSTNAME",
                "not set; set it to the login host (host, host:port or a comma-separated list)",
            )
        })?;
        let mut builder = Ssh2TransportBuilder::new();
        builder.hosts = HostSpec::parse_list(&hosts)?;
        builder.user = non_empty("SLURM_USER");
        builder.key_path = non_empty("SSH_KEY_PATH").map(PathBuf::from);
        builder.use_agent = non_empty("SSH_AUTH_SOCK").is_some();
        builder.known_hosts = non_empty("SSH_KNOWN_HOSTS").map(PathBuf::from);
        Ok(builder)
    }

    /// Replace the login hosts (tried in order).
    pub fn with_hosts(mut self, hosts: Vec<HostSpec>) -> Self {
        self.hosts = hosts;
        self
    }

    /// The remote user (else `User` from `~/.ssh/config`, else `$USER`).
    pub fn with_user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// The private key file (preferred over the agent).
    pub fn with_key_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.key_path = Some(path.into());
        self
    }

    /// The passphrase of the key file, from the caller (never from argv or the environment).
    pub fn with_passphrase(mut self, passphrase: Secret) -> Self {
        self.passphrase = Some(passphrase);
        self
    }

    /// Whether to use the ssh-agent at `SSH_AUTH_SOCK` when no key file is set.
    pub fn with_agent(mut self, use_agent: bool) -> Self {
        self.use_agent = use_agent;
        self
    }

    /// The known_hosts file (default `~/.ssh/known_hosts`).
    pub fn with_known_hosts(mut self, path: impl Into<PathBuf>) -> Self {
        self.known_hosts = Some(path.into());
        self
    }

    /// Accept and record the key of a host that has no known_hosts entry yet. Off by
    /// default; a changed key is refused either way.
    pub fn with_trust_on_first_use(mut self, trust: bool) -> Self {
        self.trust_on_first_use = trust;
        self
    }

    /// The ssh client config to read host aliases from (`None`: read none).
    pub fn with_ssh_config(mut self, path: Option<PathBuf>) -> Self {
        self.ssh_config = path;
        self
    }

    /// Sessions (connections) per login host, each owned by one thread. Default 2.
    pub fn with_sessions(mut self, sessions: usize) -> Self {
        self.sessions = sessions;
        self
    }

    /// Cap on concurrent channels per connection (keep it below the server's
    /// MaxSessions, 10 by default). Further commands queue. Default 8.
    pub fn with_max_channels(mut self, channels: usize) -> Self {
        self.max_channels = channels;
        self
    }

    /// Timeout of TCP connect, handshake and authentication. Default 15 s.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Keepalive interval (whole seconds, at least 2 s: libssh2's shortest). Default 10 s.
    ///
    /// Every connection sends an SSH keepalive that asks for an answer this often, and
    /// its socket has TCP keepalive and a TCP user timeout to match. A connection that
    /// goes silent (a NAT or firewall mapping that expired, a login host that died
    /// without a reset) is dropped once [`with_keepalive_max_missed`](Self::with_keepalive_max_missed)
    /// keepalives in a row went unanswered: within `interval * (max_missed + 1)` of the
    /// last thing the server said, plus up to a second (libssh2 counts whole seconds):
    /// **40 s** with the defaults (measured on the test bed with 2 s and 2 missed: 5.8 to
    /// 6.8 s after the silence began). Its commands in flight
    /// fail with a transient `Transport` error that says whether they may have run;
    /// commands still queued run on a new connection.
    pub fn with_keepalive(mut self, interval: Duration) -> Self {
        self.keepalive = interval;
        self
    }

    /// How many keepalives in a row may go unanswered before the connection is
    /// dropped as silent (OpenSSH's `ServerAliveCountMax`). Default 3.
    pub fn with_keepalive_max_missed(mut self, missed: u32) -> Self {
        self.keepalive_max_missed = missed;
        self
    }

    /// The longest a silent connection is kept: `keepalive * (max_missed + 1)`.
    pub(crate) fn silence_bound(&self) -> Duration {
        self.keepalive * (self.keepalive_max_missed + 1)
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.hosts.is_empty() {
            return Err(Error::config(
                "SLURM_HOSTNAME",
                "no login host given; set SLURM_HOSTNAME or call with_hosts",
            ));
        }
        if self.sessions == 0 {
            return Err(Error::config("sessions", "must be at least 1 (default 2)"));
        }
        if self.max_channels == 0 {
            return Err(Error::config(
                "max_channels",
                "must be at least 1 and below the server's MaxSessions (default 8)",
            ));
        }
        if self.keepalive < Duration::from_secs(2) {
            return Err(Error::config(
                "keepalive",
                "must be at least 2 s, libssh2's shortest interval (whole seconds; default 10 s)",
            ));
        }
        if self.keepalive_max_missed == 0 {
            return Err(Error::config(
                "keepalive_max_missed",
                "must be at least 1 (default 3)",
            ));
        }
        if let Some(key) = &self.key_path {
            if !key.is_file() {
                return Err(Error::config(
                    "SSH_KEY_PATH",
                    format!(
                        "{} is not a readable file; point it at your private key",
                        key.display()
                    ),
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn known_hosts_path(&self) -> PathBuf {
        self.known_hosts
            .clone()
            .or_else(|| home().map(|h| h.join(".ssh/known_hosts")))
            .unwrap_or_else(|| PathBuf::from(".ssh/known_hosts"))
    }

    /// Parse the ssh client config, if any (a missing file is no config).
    pub(crate) fn load_ssh_config(&self) -> Result<Option<SshConfig>> {
        let Some(path) = &self.ssh_config else {
            return Ok(None);
        };
        parse_ssh_config(path)
    }
}

pub(crate) fn parse_ssh_config(path: &Path) -> Result<Option<SshConfig>> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("read ssh config {}", path.display()), e)),
    };
    let mut reader = std::io::BufReader::new(file);
    SshConfig::default()
        .parse(
            &mut reader,
            ParseRule::ALLOW_UNKNOWN_FIELDS | ParseRule::ALLOW_UNSUPPORTED_FIELDS,
        )
        .map(Some)
        .map_err(|e| {
            Error::config(
                "ssh config",
                format!(
                    "cannot parse {}: {e}; fix the file or disable it with with_ssh_config(None)",
                    path.display()
                ),
            )
        })
}

/// Where and as whom to connect for one login host, after `~/.ssh/config`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// The name as the user wrote it (alias).
    pub(crate) alias: String,
    /// The host name or address to connect to.
    pub(crate) hostname: String,
    /// The port.
    pub(crate) port: u16,
    /// The remote user.
    pub(crate) user: String,
    /// The key file, if any.
    pub(crate) identity: Option<PathBuf>,
    /// A ProxyJump the config asks for (not supported by Ssh2Transport).
    pub(crate) proxy_jump: Option<String>,
}

/// Resolve a host entry: explicit values win, then `~/.ssh/config`, then defaults.
pub(crate) fn resolve(
    spec: &HostSpec,
    config: Option<&SshConfig>,
    user: Option<&str>,
    key: Option<&Path>,
) -> Target {
    let params = config.map(|c| c.query(&spec.host));
    let hostname = params
        .as_ref()
        .and_then(|p| p.host_name.clone())
        .unwrap_or_else(|| spec.host.clone());
    let port = spec
        .port
        .or_else(|| params.as_ref().and_then(|p| p.port))
        .unwrap_or(22);
    let user = user
        .map(str::to_string)
        .or_else(|| params.as_ref().and_then(|p| p.user.clone()))
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "root".to_string());
    let identity = key.map(Path::to_path_buf).or_else(|| {
        params
            .as_ref()
            .and_then(|p| p.identity_file.clone())
            .and_then(|files| files.into_iter().find(|f| f.is_file()))
    });
    let proxy_jump = params
        .as_ref()
        .and_then(|p| p.proxy_jump.clone())
        .filter(|jumps| match jumps.as_slice() {
            [] => false,
            [only] => !only.eq_ignore_ascii_case("none"),
            _ => true,
        })
        .map(|j| j.join(","));
    Target {
        alias: spec.host.clone(),
        hostname,
        port,
        user,
        identity,
        proxy_jump,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> SshConfig {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(&path, text).unwrap();
        parse_ssh_config(&path).unwrap().unwrap()
    }

    #[test]
    fn ssh_config_supplies_hostname_user_port_identity() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("id_test");
        std::fs::write(&key, "k").unwrap();
        let cfg = config(&format!(
            "Host cluster\n  HostName login.example.org\n  User alice\n  Port 2200\n  IdentityFile {}\n  Frobnicate yes\n\nHost jumpy\n  ProxyJump bastion\n",
            key.display()
        ));
        let t = resolve(&HostSpec::new("cluster"), Some(&cfg), None, None);
        assert_eq!(t.hostname, "login.example.org");
        assert_eq!(t.user, "alice");
        assert_eq!(t.port, 2200);
        assert_eq!(t.identity.as_deref(), Some(key.as_path()));
        assert_eq!(t.proxy_jump, None);
        // Explicit values win over the config.
        let t = resolve(
            &HostSpec::with_port("cluster", 22022),
            Some(&cfg),
            Some("bob"),
            Some(Path::new("/k")),
        );
        assert_eq!((t.port, t.user.as_str()), (22022, "bob"));
        assert_eq!(t.identity.as_deref(), Some(Path::new("/k")));
        let t = resolve(&HostSpec::new("jumpy"), Some(&cfg), None, None);
        assert_eq!(t.proxy_jump.as_deref(), Some("bastion"));
        let t = resolve(&HostSpec::new("plain"), Some(&cfg), Some("u"), None);
        assert_eq!((t.hostname.as_str(), t.port), ("plain", 22));
    }

    #[test]
    fn keepalive_settings_are_checked() {
        let b = Ssh2TransportBuilder::new().with_hosts(vec![HostSpec::new("h")]);
        assert!(b.validate().is_ok());
        let err = b
            .clone()
            .with_keepalive(Duration::from_secs(1))
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("keepalive"), "{err}");
        let err = b.with_keepalive_max_missed(0).validate().unwrap_err();
        assert!(err.to_string().contains("keepalive_max_missed"), "{err}");
    }

    #[test]
    fn from_lookup_reads_the_variables_and_debug_hides_the_passphrase() {
        let b = Ssh2TransportBuilder::from_lookup(|k| match k {
            "SLURM_HOSTNAME" => Some("a:2222,[::1]:22".into()),
            "SLURM_USER" => Some("me".into()),
            "SSH_KNOWN_HOSTS" => Some("/kh".into()),
            _ => None,
        })
        .unwrap()
        .with_passphrase(Secret::new("hunter2-very-secret"));
        assert_eq!(b.hosts.len(), 2);
        assert_eq!(b.user.as_deref(), Some("me"));
        assert_eq!(b.known_hosts_path(), PathBuf::from("/kh"));
        assert!(!b.use_agent);
        let shown = format!("{b:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("REDACTED"));
        let err = Ssh2TransportBuilder::from_lookup(|_| None).unwrap_err();
        assert!(err.to_string().contains("SLURM_HOSTNAME"));
    }
}
