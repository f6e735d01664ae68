//! Port forwarding into a running job: a port on this machine reaching a port of one of
//! the job's nodes, through the transport's open connection.

use std::net::SocketAddr;

use super::context::Context;
use super::node_choice::{choose_node, NodeChoice};
use super::status::status_many;
use crate::record::JobId;
use crate::transport::{ForwardTarget, Forwarding};
use crate::{Error, Result};

/// What to forward: a port of the job's node, from which local port.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForwardOptions {
    /// The port the job listens on, on its node.
    pub port: u16,
    /// The local port to listen on (`127.0.0.1`); 0 (the default) picks a free one.
    pub local_port: u16,
    /// Which node of the job (default: its first).
    pub node: NodeChoice,
}

impl ForwardOptions {
    /// Forward `port` of the job's first node from a free local port.
    pub fn port(port: u16) -> Self {
        ForwardOptions {
            port,
            ..ForwardOptions::default()
        }
    }
}

/// An open forward into a running job: connections to [`JobForward::local`] reach
/// [`JobForward::port`] on [`JobForward::node`]. It closes when dropped; it does not end
/// by itself when the job does (its connections then fail), so a caller watching the job
/// drops it once the job ends.
#[derive(Debug)]
pub struct JobForward {
    forwarding: Forwarding,
    job: JobId,
    node: String,
    port: u16,
}

impl JobForward {
    /// The local address (`127.0.0.1:PORT`).
    pub fn local(&self) -> SocketAddr {
        self.forwarding.local()
    }

    /// The job forwarded into.
    pub fn job(&self) -> &JobId {
        &self.job
    }

    /// The node connections reach.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The port on that node.
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// Forward into job `id`: a poll says whether it runs and on which nodes, then the
/// transport forwards to the chosen node.
pub(super) async fn forward(
    ctx: &Context<'_>,
    id: &JobId,
    options: &ForwardOptions,
) -> Result<JobForward> {
    if options.port == 0 {
        return Err(Error::invalid(
            "port",
            "give the port the job listens on (1-65535)",
        ));
    }
    let status = status_many(ctx, std::slice::from_ref(id)).await?.remove(0);
    let node = choose_node(status.record(), &options.node)?;
    let target = ForwardTarget::new(node.clone(), options.port);
    let forwarding = ctx.transport().forward(options.local_port, &target).await?;
    tracing::info!(job = %id, %target, local = %forwarding.local(), "forwarding");
    Ok(JobForward {
        forwarding,
        job: id.clone(),
        node,
        port: options.port,
    })
}
