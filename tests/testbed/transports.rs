//! The Transport conformance suite (`slurm_core::testing::transport_suite`) on
//! `Ssh2Transport` and `OpenSshTransport` against the test bed. `LocalTransport` runs it
//! in slurm-core's tests, `ProcessShellTransport::local_bash()` in slurm-ssh's.

use slurm_core::transport::{Command, Transport};
use slurm_run_testsupport::transports::{self, Held};
use slurm_run_testsupport::{cluster, testbed_env};
use slurm_ssh::Ssh2Transport;

/// An Ssh2Transport on the test bed (no `~/.ssh/config`), holding the cluster shared.
async fn ssh2() -> Held<Ssh2Transport> {
    let gate = cluster::shared().await;
    Held::new(transports::ssh2(&testbed_env()), gate)
}

/// An OpenSshTransport through a master of its own, holding the cluster shared.
async fn openssh() -> impl Transport {
    let gate = cluster::shared().await;
    transports::openssh(&testbed_env()).and(gate)
}

slurm_core::transport_conformance!(ssh2, ssh2().await);
slurm_core::transport_conformance!(openssh, openssh().await);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh2_runs_sacct_on_the_login_node() {
    let t = ssh2().await;
    let host = t.transport().connect().await.unwrap();
    assert_eq!(host, format!("[127.0.0.1]:{}", testbed_env().ssh_port()));
    let out = t
        .run(
            &Command::new("sacct")
                .arg("-n")
                .arg("-X")
                .arg("-o")
                .arg("JobID"),
        )
        .await
        .unwrap();
    assert!(out.success(), "{}", out.stderr_text());
    let out = t.run(&Command::new("whoami")).await.unwrap();
    assert_eq!(out.stdout_text().trim(), testbed_env().get("SLURM_USER"));
}
