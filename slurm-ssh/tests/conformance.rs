//! The Transport conformance suite on the framing protocol over a local bash
//! (`ProcessShellTransport::local_bash()`): no SSH server needed. `Ssh2Transport` and
//! `OpenSshTransport` run the same suite against the test bed (the root package's
//! `testbed` tests).

slurm_core::transport_conformance!(
    local_framed_bash,
    slurm_ssh::ProcessShellTransport::local_bash().unwrap()
);
