//! SSH transports for slurm-run.
//!
//! Every command slurm-run sends to a cluster goes through a [`Transport`](slurm_core::Transport).
//! This crate provides two that reach a login node over SSH, built on the same idea:
//!
//! * **One long-lived shell per session, not a new one per command.** sshd runs every
//!   exec request through the user's shell, and on clusters `.bashrc` loads modules
//!   or conda, so a fresh channel costs ~100 ms; a command inside a running shell
//!   costs well under a millisecond of shell time. Each shell speaks a framing
//!   protocol: a random marker per command, stdout and stderr kept apart
//!   byte for byte, stdin isolated, each command in its own subshell, and a request
//!   that reaches the shell damaged is never run.
//! * **[`Ssh2Transport`]** (libssh2): a small pool of authenticated sessions per login
//!   host, each owned by one OS thread (libssh2 sessions must not be driven from
//!   several threads) that multiplexes up to a capped number of shell channels
//!   without blocking the async runtime. Strict known_hosts checking, failover
//!   across the login hosts, keepalive, reconnect with backoff, and errors that say
//!   whether a command may have run.
//! * **[`OpenSshTransport`]**: the system `ssh` through a ControlMaster socket, for
//!   clusters with two-factor login: authenticate once by hand, and the library
//!   reuses the master without ever prompting.
//!
//! [`ProcessShellTransport`] is the machinery under `OpenSshTransport`: framed
//! commands through any long-lived shell process, e.g. a local `bash`.
//!
//! [`Ssh2TransportBuilder`] and [`OpenSshTransportBuilder`] end in `build()`. The
//! modules are private: the re-exports below are the whole public surface.
#![deny(missing_docs)]
#![deny(unreachable_pub)]

mod config;
mod framing;
mod hosts;
mod known_hosts;
mod openssh;
mod process;
mod shell_start;
mod ssh2_transport;

pub use config::{Secret, Ssh2TransportBuilder};
pub use hosts::HostSpec;
pub use openssh::{OpenSshTransport, OpenSshTransportBuilder};
pub use process::{Preflight, ProcessShellConfig, ProcessShellTransport};
pub use ssh2_transport::Ssh2Transport;

/// What tests lint (cargo feature `testing`): this crate's remote shell text.
#[cfg(feature = "testing")]
pub mod testing {
    /// Every remote script of this crate by name, as the shell runs it (prelude
    /// included): the long-lived shell's set-up. For linting them (`bash -n`,
    /// shellcheck) outside the crate, beside `slurm_core::testing::scripts`.
    pub fn scripts() -> Vec<(&'static str, String)> {
        crate::shell_start::all()
            .into_iter()
            .map(|script| (script.name(), script.full_text()))
            .collect()
    }
}
