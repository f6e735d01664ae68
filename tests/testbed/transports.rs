//! The Transport conformance suite (`slurm_core::testing::transport_suite`) on
//! `Ssh2Transport` and `OpenSshTransport` against the test bed. `LocalTransport` runs it
//! in slurm-core's tests, `ProcessShellTransport::local_bash()` in slurm-ssh's.

use slurm_core::{Command, Transport};
use slurm_run_testsupport::testbed::Master;
use slurm_run_testsupport::transports::{self, Held};
use slurm_run_testsupport::{cluster, testbed_env};
use slurm_ssh::{OpenSshTransportBuilder, Ssh2Transport};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openssh_fails_over_to_the_next_login_host() {
    let _gate = cluster::shared().await;
    let tb = testbed_env();
    let master = Master::start(&tb);
    // One ControlPath per port: the test bed's is the master's socket; the first
    // host (a port nothing serves) has no master.
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        &master.socket,
        dir.path().join(format!("{}.sock", tb.ssh_port())),
    )
    .unwrap();
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let control = dir.path().join("%p.sock").display().to_string();
    let user = tb.get("SLURM_USER").to_string();
    let lookup = |hosts: String| {
        let (control, user) = (control.clone(), user.clone());
        move |name: &str| match name {
            "SLURM_HOSTNAME" => Some(hosts.clone()),
            "SLURM_USER" => Some(user.clone()),
            "SLURM_SSH_CONTROL_PATH" => Some(control.clone()),
            _ => None,
        }
    };
    let both = format!("127.0.0.1:{dead},127.0.0.1:{}", tb.ssh_port());
    let t = OpenSshTransportBuilder::from_lookup(lookup(both))
        .unwrap()
        .with_option("UserKnownHostsFile", tb.get("SSH_KNOWN_HOSTS"))
        .build()
        .unwrap();
    for _ in 0..2 {
        let out = t
            .run(&Command::new("echo").arg("failed over"))
            .await
            .unwrap();
        assert_eq!(out.stdout, b"failed over\n");
    }
    // No host works: the error names each, in order.
    let other = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let none = format!("127.0.0.1:{dead},127.0.0.1:{other}");
    let t = OpenSshTransportBuilder::from_lookup(lookup(none))
        .unwrap()
        .build()
        .unwrap();
    let err = t.run(&Command::new("true")).await.unwrap_err();
    assert!(!err.may_have_run(), "{err}");
    let text = err.to_string();
    let (a, b) = (
        format!("127.0.0.1:{dead}: "),
        format!("127.0.0.1:{other}: "),
    );
    assert!(
        text.contains(&a) && text.contains(&b) && text.find(&a) < text.find(&b),
        "{text}"
    );
    assert!(text.contains("no SSH ControlMaster"), "{text}");
}
