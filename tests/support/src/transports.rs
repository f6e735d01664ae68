//! `Ssh2Transport` and `OpenSshTransport` on the test bed, and [`Held`]: a transport
//! kept together with what must live as long as it (an ssh master, a cluster guard).

use std::any::Any;
use std::fmt;

use async_trait::async_trait;
use slurm_core::{Command, ForwardTarget, Forwarding, Output, OutputSink, Result, Transport};
use slurm_ssh::{
    HostSpec, OpenSshTransport, OpenSshTransportBuilder, Ssh2Transport, Ssh2TransportBuilder,
};

use crate::testbed::{Master, Testbed};

/// An `Ssh2TransportBuilder` for the test bed: its host, user, key and known_hosts, and
/// no `~/.ssh/config`.
pub fn ssh2_builder(tb: &Testbed) -> Ssh2TransportBuilder {
    Ssh2TransportBuilder::from_lookup(tb.lookup())
        .expect("the test bed's ssh settings")
        .with_ssh_config(None)
}

/// An `Ssh2Transport` on the test bed (see [`ssh2_builder`]).
pub fn ssh2(tb: &Testbed) -> Ssh2Transport {
    Ssh2Transport::new(ssh2_builder(tb)).expect("an ssh2 transport to the test bed")
}

/// An `OpenSshTransportBuilder` for the test bed through `master`'s socket, checking the
/// host key against the test bed's known_hosts.
pub fn openssh_builder(tb: &Testbed, master: &Master) -> OpenSshTransportBuilder {
    OpenSshTransportBuilder::new(HostSpec::with_port("127.0.0.1", tb.ssh_port()))
        .with_control_path(&master.socket)
        .with_user(tb.get("SLURM_USER"))
        .with_option("UserKnownHostsFile", tb.get("SSH_KNOWN_HOSTS"))
}

/// An `OpenSshTransport` on the test bed through a ControlMaster of its own (stopped
/// when the transport is dropped), with strict host key checking.
pub fn openssh(tb: &Testbed) -> Held<OpenSshTransport> {
    let master = Master::start(tb);
    let builder = openssh_builder(tb, &master).with_option("StrictHostKeyChecking", "yes");
    let transport = OpenSshTransport::new(builder).expect("an OpenSSH transport to the test bed");
    Held::new(transport, master)
}

/// A transport and something kept alive (and dropped) with it. Every `Transport`
/// method goes to the transport.
pub struct Held<T> {
    transport: T,
    _kept: Vec<Box<dyn Any + Send + Sync>>,
}

impl<T: Transport> Held<T> {
    /// `transport`, with `kept` dropped only after it.
    pub fn new(transport: T, kept: impl Any + Send + Sync) -> Self {
        Held {
            transport,
            _kept: vec![Box::new(kept)],
        }
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// The same transport, keeping `more` alive too (dropped after what is kept already).
    pub fn and(mut self, more: impl Any + Send + Sync) -> Self {
        self._kept.push(Box::new(more));
        self
    }
}

impl<T: fmt::Debug> fmt::Debug for Held<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.transport.fmt(f)
    }
}

#[async_trait]
impl<T: Transport> Transport for Held<T> {
    async fn run(&self, command: &Command) -> Result<Output> {
        self.transport.run(command).await
    }
    async fn write_file(&self, path: &str, contents: &[u8], mode: u32) -> Result<()> {
        self.transport.write_file(path, contents, mode).await
    }
    async fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        self.transport.read_file(path).await
    }
    async fn tail_file(&self, path: &str, lines: usize) -> Result<Vec<u8>> {
        self.transport.tail_file(path, lines).await
    }
    async fn run_streamed(&self, command: &Command, sink: OutputSink) -> Result<i32> {
        self.transport.run_streamed(command, sink).await
    }
    async fn forward(&self, local_port: u16, target: &ForwardTarget) -> Result<Forwarding> {
        self.transport.forward(local_port, target).await
    }
}
