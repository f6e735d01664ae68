//! The Transport conformance suite (`slurm_core::testing::transport_suite`) on
//! `Ssh2Transport` and `OpenSshTransport` against the test bed (`--features testbed`).
//! `LocalTransport` runs it in slurm-core's tests, `ProcessShellTransport::local_bash()`
//! in slurm-ssh's.
#![cfg(feature = "testbed")]

#[path = "common/testbed.rs"]
mod testbed;

mod testbed_transports {
    use super::testbed::{testbed_env, Master};
    use slurm_core::transport::{Command, Transport};
    use slurm_ssh::{
        OpenSshTransport, OpenSshTransportBuilder, Ssh2Transport, Ssh2TransportBuilder,
    };

    /// An Ssh2Transport on the test bed (no `~/.ssh/config`, key from the test bed).
    pub fn ssh2() -> Ssh2Transport {
        let tb = testbed_env();
        let builder = Ssh2TransportBuilder::from_lookup(tb.lookup())
            .unwrap()
            .with_ssh_config(None);
        Ssh2Transport::new(builder).unwrap()
    }

    /// An OpenSshTransport through a master the test starts (kept alive with the transport).
    pub struct WithMaster {
        transport: OpenSshTransport,
        _master: Master,
    }

    impl std::fmt::Debug for WithMaster {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            self.transport.fmt(f)
        }
    }

    #[async_trait::async_trait]
    impl Transport for WithMaster {
        async fn run(&self, c: &Command) -> slurm_core::Result<slurm_core::transport::Output> {
            self.transport.run(c).await
        }
    }

    pub fn openssh() -> WithMaster {
        let tb = testbed_env();
        let master = Master::start(&tb);
        let mut builder = OpenSshTransportBuilder::new(slurm_ssh::HostSpec::with_port(
            "127.0.0.1",
            tb.ssh_port(),
        ))
        .with_control_path(&master.socket)
        .with_user(tb.get("SLURM_USER"))
        .with_option("UserKnownHostsFile", tb.get("SSH_KNOWN_HOSTS"));
        builder = builder.with_option("StrictHostKeyChecking", "yes");
        WithMaster {
            transport: OpenSshTransport::new(builder).unwrap(),
            _master: master,
        }
    }

    slurm_core::transport_conformance!(ssh2, ssh2());
    slurm_core::transport_conformance!(openssh, openssh());

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ssh2_runs_sacct_on_the_login_node() {
        let t = ssh2();
        let host = t.connect().await.unwrap();
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
}
