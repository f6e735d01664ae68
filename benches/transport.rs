//! Latency of one command through each way of reaching the login node (needs the test bed).
//!
//! `cargo bench --bench transport` measures the median of `true` and of `sacct` through
//! Ssh2Transport and OpenSshTransport, against a bare ssh2 exec channel per command on
//! an already open session (the limit) and a fresh `ssh -o BatchMode=yes` process per
//! command (the reference's way); writes the `transport` area of `BENCHMARKS.md`.

use std::io::Read;
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use slurm_core::{Command, Transport};
use slurm_run_testsupport::bench::{median, Area, Baseline, Row};
use slurm_run_testsupport::testbed::{testbed_env, Master, Testbed};
use slurm_run_testsupport::transports::{openssh_builder, ssh2_builder};
use slurm_ssh::{OpenSshTransport, Ssh2Transport};

async fn through<T: Transport>(t: &T, command: &Command, n: usize) -> Duration {
    for _ in 0..3 {
        let out = t.run(command).await.expect("warm-up command");
        assert!(out.success(), "{}", out.stderr_text());
    }
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let out = t.run(command).await.expect("command");
        samples.push(start.elapsed());
        assert!(out.success());
    }
    median(samples)
}

/// One new exec channel per command on an already authenticated ssh2 session.
fn bare_exec(tb: &Testbed, line: &str, n: usize) -> Duration {
    let tcp = TcpStream::connect(("127.0.0.1", tb.ssh_port())).unwrap();
    let mut session = ssh2::Session::new().unwrap();
    session.set_tcp_stream(tcp);
    session.handshake().unwrap();
    session
        .userauth_pubkey_file(
            tb.get("SLURM_USER"),
            None,
            Path::new(tb.get("SSH_KEY_PATH")),
            None,
        )
        .unwrap();
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + 1 {
        let start = Instant::now();
        let mut channel = session.channel_session().unwrap();
        channel.exec(line).unwrap();
        let mut out = Vec::new();
        channel.read_to_end(&mut out).unwrap();
        channel.wait_close().unwrap();
        assert_eq!(channel.exit_status().unwrap(), 0);
        if i > 0 {
            samples.push(start.elapsed());
        }
    }
    median(samples)
}

/// One new `ssh` process (and connection) per command.
fn fresh_ssh(tb: &Testbed, line: &str, n: usize) -> Duration {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let status = std::process::Command::new("ssh")
            .args(tb.ssh_args())
            .arg("127.0.0.1")
            .arg(line)
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        samples.push(start.elapsed());
        assert!(status.success());
    }
    median(samples)
}

fn main() {
    // `cargo test --benches` runs this binary without `--bench`: nothing to measure then.
    if !std::env::args().any(|a| a == "--bench") {
        println!("transport bench: run with `cargo bench --bench transport` (needs the test bed)");
        return;
    }
    let tb = testbed_env();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let ssh2 = Ssh2Transport::new(ssh2_builder(&tb).with_sessions(1)).unwrap();
    let master = Master::start(&tb);
    let openssh = OpenSshTransport::new(openssh_builder(&tb, &master).with_shells(1)).unwrap();
    let cases = [
        ("true", Command::new("true"), "true"),
        (
            "sacct",
            Command::new("sacct")
                .arg("-n")
                .arg("-X")
                .arg("-o")
                .arg("JobID,State"),
            "sacct -n -X -o JobID,State",
        ),
    ];
    let mut area = Area::new(
        "transport",
        "a new exec channel per command on an open ssh2 session",
        "a fresh `ssh` per command",
    );
    for (name, command, line) in cases {
        let (t_ssh2, t_open) = rt.block_on(async {
            ssh2.connect().await.expect("connect");
            (
                through(&ssh2, &command, 200).await,
                through(&openssh, &command, 200).await,
            )
        });
        let t_exec = bare_exec(&tb, line, 20);
        let t_fresh = fresh_ssh(&tb, line, 15);
        area.push(
            Row::new(format!("`{name}` through Ssh2Transport"), t_ssh2)
                .bare(Baseline::measured("ssh2 exec channel", t_exec))
                .fresh(Baseline::measured("ssh host ...", t_fresh))
                .note("a long-lived framed shell per connection"),
        );
        area.push(
            Row::new(format!("`{name}` through OpenSshTransport"), t_open)
                .bare(Baseline::measured("ssh2 exec channel", t_exec))
                .fresh(Baseline::measured("ssh host ...", t_fresh))
                .note("a framed shell over a ControlMaster"),
        );
    }
    area.notes.push(
        "Medians of 200 commands through each transport (after 3 warm-up commands), 20 exec \
         channels and 15 fresh `ssh` processes. The framed shell runs each command in a \
         subshell with its output in files, so a command costs a fork more than an exec \
         channel, and saves the channel's open and close."
            .to_string(),
    );
    area.save();
    drop(openssh);
    drop(master);
}
