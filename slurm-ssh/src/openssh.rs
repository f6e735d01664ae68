//! `OpenSshTransport`: the system `ssh` client through a ControlMaster socket, with the same long-lived framed shells.

use std::fmt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use slurm_core::{
    free_local_port, stream_process, Command, Error, ErrorKind, ForwardTarget, Forwarding, Output,
    OutputSink, Result, Transport,
};

use crate::hosts::HostSpec;
use crate::process::{ProcessShellConfig, ProcessShellTransport};

/// The default ControlPath (ssh expands the `%` tokens).
pub(crate) const DEFAULT_CONTROL_PATH: &str = "~/.ssh/slurm-run-%r@%h:%p";

/// Settings of an [`OpenSshTransport`].
#[derive(Debug, Clone)]
pub struct OpenSshTransportBuilder {
    hosts: Vec<HostSpec>,
    user: Option<String>,
    control_path: String,
    options: Vec<(String, String)>,
    shells: usize,
    ssh_program: String,
    start_timeout: Duration,
}

impl OpenSshTransportBuilder {
    /// A builder for `host` (an alias from `~/.ssh/config`, or a name or address).
    pub fn new(host: HostSpec) -> Self {
        OpenSshTransportBuilder {
            hosts: vec![host],
            user: None,
            control_path: DEFAULT_CONTROL_PATH.to_string(),
            options: Vec::new(),
            shells: 4,
            ssh_program: "ssh".into(),
            start_timeout: crate::framing::SHELL_START_TIMEOUT,
        }
    }

    /// Read the login hosts of `SLURM_HOSTNAME` (tried in order), `SLURM_USER`, and the
    /// ControlPath from `SLURM_SSH_CONTROL_PATH` (default `~/.ssh/slurm-run-%r@%h:%p`).
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Like [`OpenSshTransportBuilder::from_env`], reading variables through `lookup`.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let non_empty = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let hosts = HostSpec::parse_list(&non_empty("SLURM_HOSTNAME").unwrap_or_default())?;
        let mut b = OpenSshTransportBuilder::new(hosts[0].clone()).with_hosts(hosts);
        b.user = non_empty("SLURM_USER");
        if let Some(path) = non_empty("SLURM_SSH_CONTROL_PATH") {
            b.control_path = path;
        }
        Ok(b)
    }

    /// Replace the login hosts. Each needs its own ControlMaster (the ControlPath's
    /// `%h` and `%p` tell them apart); a command goes to the host that last worked,
    /// and to the next in order when no shell can start there (no master, host down).
    pub fn with_hosts(mut self, hosts: Vec<HostSpec>) -> Self {
        self.hosts = hosts;
        self
    }

    /// The remote user (else what `~/.ssh/config` says).
    pub fn with_user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// The ControlPath of the master connection (default `~/.ssh/slurm-run-%r@%h:%p`;
    /// ssh expands the `%` tokens).
    pub fn with_control_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.control_path = path.into().to_string_lossy().into_owned();
        self
    }

    /// An extra `-o NAME=VALUE` for every `ssh` call (e.g. `UserKnownHostsFile`).
    pub fn with_option(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.options.push((name.into(), value.into()));
        self
    }

    /// How many shells (sessions through the master) may run commands at once. Default 4.
    pub fn with_shells(mut self, shells: usize) -> Self {
        self.shells = shells;
        self
    }

    /// The ssh program (default `ssh` from `PATH`).
    pub fn with_ssh_program(mut self, program: impl Into<String>) -> Self {
        self.ssh_program = program.into();
        self
    }

    /// Build the transport (shells start on first use, after checking the master);
    /// the same as [`OpenSshTransport::new`].
    pub fn build(self) -> Result<OpenSshTransport> {
        OpenSshTransport::new(self)
    }

    /// The arguments every `ssh` call to `host` gets before the host name: the master
    /// socket, no master of its own, never a prompt.
    fn common_args(&self, host: &HostSpec) -> Vec<String> {
        let mut args = vec![
            "-S".to_string(),
            self.control_path.clone(),
            "-o".into(),
            "ControlMaster=no".into(),
            "-o".into(),
            "BatchMode=yes".into(),
        ];
        if let Some(port) = host.port {
            args.push("-p".into());
            args.push(port.to_string());
        }
        if let Some(user) = &self.user {
            args.push("-l".into());
            args.push(user.clone());
        }
        for (name, value) in &self.options {
            args.push("-o".into());
            args.push(format!("{name}={value}"));
        }
        args
    }

    /// The command that starts a master for `host` (for messages).
    fn master_hint(&self, host: &HostSpec) -> String {
        let mut hint = format!("ssh -M -S {} -fN", self.control_path);
        if let Some(port) = host.port {
            hint.push_str(&format!(" -p {port}"));
        }
        if let Some(user) = &self.user {
            hint.push_str(&format!(" -l {user}"));
        }
        hint.push(' ');
        hint.push_str(&host.host);
        hint
    }
}

/// Runs commands through the system `ssh` and an already running ControlMaster, so
/// users of two-factor clusters authenticate once by hand and the library reuses
/// that connection. It never prompts (BatchMode) and never opens a connection of its
/// own: without a master it fails with the command that starts one. `ssh` reads
/// `~/.ssh/config` as usual (ProxyJump included).
pub struct OpenSshTransport {
    builder: OpenSshTransportBuilder,
    /// One set of shells per login host, in the order given.
    hosts: Vec<(HostSpec, ProcessShellTransport)>,
    /// The host that last worked, tried first.
    current: AtomicUsize,
}

impl fmt::Debug for OpenSshTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenSshTransport")
            .field("builder", &self.builder)
            .finish()
    }
}

impl OpenSshTransport {
    /// Build the transport (shells start on first use, after checking the master).
    pub fn new(builder: OpenSshTransportBuilder) -> Result<Self> {
        if builder.hosts.is_empty() {
            return Err(Error::config(
                "SLURM_HOSTNAME",
                "no login host given; set SLURM_HOSTNAME or call with_hosts",
            ));
        }
        let mut hosts = Vec::new();
        for host in &builder.hosts {
            let mut args = builder.common_args(host);
            args.push("-T".into());
            args.push(host.host.clone());
            let mut config = ProcessShellConfig::new(builder.ssh_program.clone(), args);
            config.shells = builder.shells;
            config.label = host.to_string();
            config.start_timeout = builder.start_timeout;
            let (check, checked) = (builder.clone(), host.clone());
            config.preflight = Some(Arc::new(move || check_master(&check, &checked)));
            hosts.push((host.clone(), ProcessShellTransport::new(config)?));
        }
        Ok(OpenSshTransport {
            builder,
            hosts,
            current: AtomicUsize::new(0),
        })
    }

    /// Shorthand for `OpenSshTransportBuilder::from_env()?.build()`.
    pub fn from_env() -> Result<Self> {
        OpenSshTransportBuilder::from_env()?.build()
    }

    /// The login host that last worked (the one a forward or a streamed command uses).
    fn current_host(&self) -> &HostSpec {
        &self.hosts[self.current.load(Ordering::Relaxed) % self.hosts.len()].0
    }

    /// Whether the master of the first login host is up (`ssh -O check`); the error
    /// says how to start one.
    pub async fn check_master(&self) -> Result<()> {
        let builder = self.builder.clone();
        let host = self.hosts[0].0.clone();
        tokio::task::spawn_blocking(move || check_master(&builder, &host))
            .await
            .map_err(|e| Error::io("check the ControlMaster", std::io::Error::other(e)))?
    }
}

/// Whether a failed command never reached a shell on its host, so the next host may run it.
fn fails_over(e: &Error) -> bool {
    matches!(e.kind(), ErrorKind::Connect | ErrorKind::Auth) && !e.may_have_run()
}

/// One error for a command no login host could take: each host's reason, in order.
fn every_host_failed(failures: Vec<(String, Error)>) -> Error {
    let hosts: Vec<&str> = failures.iter().map(|(h, _)| h.as_str()).collect();
    let host = format!("every login host ({})", hosts.join(", "));
    let message = failures
        .iter()
        .map(|(h, e)| format!("{h}: {e}"))
        .collect::<Vec<_>>()
        .join("; ");
    if failures.iter().all(|(_, e)| e.kind() == ErrorKind::Auth) {
        Error::Auth { host, message }
    } else {
        Error::Connect { host, message }
    }
}

/// Ask the master of `host` to open (`-O forward`) or close (`-O cancel`) the local
/// forward `spec` (`127.0.0.1:LOCAL:HOST:PORT`).
fn master_forward(
    builder: &OpenSshTransportBuilder,
    host: &HostSpec,
    operation: &str,
    spec: &str,
) -> Result<()> {
    let mut args = builder.common_args(host);
    args.extend(["-O".into(), operation.into(), "-L".into(), spec.into()]);
    args.push(host.host.clone());
    let output = std::process::Command::new(&builder.ssh_program)
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::io(format!("run `{} -O {operation}`", builder.ssh_program), e))?;
    if output.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&output.stderr).trim().to_string();
    Err(Error::Connect {
        host: host.to_string(),
        message: format!(
            "the ControlMaster at {} refused the forward {spec} (ssh -O {operation}: {said}); \
             a local port in use needs another --local port, and a master started with \
             ClearAllForwardings or a server with AllowTcpForwarding=no cannot forward",
            builder.control_path
        ),
    })
}

/// Cancels a master's forward when dropped.
struct MasterForward {
    builder: OpenSshTransportBuilder,
    host: HostSpec,
    spec: String,
}

impl Drop for MasterForward {
    fn drop(&mut self) {
        if let Err(error) = master_forward(&self.builder, &self.host, "cancel", &self.spec) {
            tracing::warn!(%error, "cancelling a forward failed");
        }
    }
}

fn check_master(builder: &OpenSshTransportBuilder, host: &HostSpec) -> Result<()> {
    let mut args = builder.common_args(host);
    args.push("-O".into());
    args.push("check".into());
    args.push(host.host.clone());
    let output = std::process::Command::new(&builder.ssh_program)
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::Connect {
            host: host.to_string(),
            message: format!(
                "cannot run `{}`: {e}; install the OpenSSH client",
                builder.ssh_program
            ),
        })?;
    if output.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&output.stderr).trim().to_string();
    Err(Error::Auth {
        host: host.to_string(),
        message: format!(
            "no SSH ControlMaster is up at {} (ssh -O check: {said}); authenticate once and start one with: {}",
            builder.control_path,
            builder.master_hint(host)
        ),
    })
}

#[async_trait]
impl Transport for OpenSshTransport {
    async fn run(&self, command: &Command) -> Result<Output> {
        let first = self.current.load(Ordering::Relaxed);
        let mut failures = Vec::new();
        for k in 0..self.hosts.len() {
            let i = (first + k) % self.hosts.len();
            let (host, shells) = &self.hosts[i];
            match shells.run(command).await {
                Err(e) if fails_over(&e) => {
                    tracing::warn!(%host, error = %e, "no shell on this login host; trying the next");
                    failures.push((host.to_string(), e));
                }
                answer => {
                    self.current.store(i, Ordering::Relaxed);
                    return answer;
                }
            }
        }
        Err(match failures.len() {
            1 => failures.remove(0).1,
            _ => every_host_failed(failures),
        })
    }

    /// A session through the master of the login host that last worked (no new
    /// login), its output read as it comes.
    async fn run_streamed(&self, command: &Command, sink: OutputSink) -> Result<i32> {
        let host = self.current_host();
        let mut args = self.builder.common_args(host);
        args.push("-T".into());
        args.push(host.host.clone());
        args.push("--".into());
        args.push(command.shell_line()?);
        let mut process = tokio::process::Command::new(&self.builder.ssh_program);
        process.args(&args);
        stream_process(process, command, sink).await
    }

    /// The master forwards (`ssh -O forward -L 127.0.0.1:LOCAL:HOST:PORT`), so the
    /// listener is the master's and no new login happens; dropping the forward cancels
    /// it (`ssh -O cancel`). With `local_port` 0 a free port is chosen first.
    async fn forward(&self, local_port: u16, target: &ForwardTarget) -> Result<Forwarding> {
        let port = match local_port {
            0 => free_local_port()?,
            port => port,
        };
        let spec = format!("127.0.0.1:{port}:{}:{}", target.host, target.port);
        let builder = self.builder.clone();
        let host = self.current_host().clone();
        let forward = tokio::task::spawn_blocking(move || {
            master_forward(&builder, &host, "forward", &spec)?;
            Ok::<_, Error>(MasterForward {
                builder,
                host,
                spec,
            })
        })
        .await
        .map_err(|e| Error::io("ask the ControlMaster to forward", std::io::Error::other(e)))??;
        Ok(Forwarding::new(
            std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            forward,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_clearly_without_a_master() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("no-master.sock");
        let t = OpenSshTransport::new(
            OpenSshTransportBuilder::new(HostSpec::with_port("127.0.0.1", 1))
                .with_control_path(&sock)
                .with_user("nobody"),
        )
        .unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let err = rt.block_on(t.run(&Command::new("true"))).unwrap_err();
        let text = err.to_string();
        assert_eq!(err.kind(), slurm_core::ErrorKind::Auth, "{text}");
        assert!(text.contains("ssh -M -S"), "{text}");
        assert!(text.contains(&sock.display().to_string()), "{text}");
        assert!(!err.is_transient());
    }
}
