//! Fault tests of Ssh2Transport against the test bed's real sshd: wrong host key, failover, connection killed mid-command.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use slurm_core::{Command, ErrorKind, Transport};
use slurm_run_testsupport::transports::ssh2_builder as builder;
use slurm_run_testsupport::{cluster, testbed_env, wait_until_gone, Testbed};
use slurm_ssh::{HostSpec, Ssh2Transport};

/// A port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "the second sshd did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A second sshd on another loopback port with a freshly generated host key,
/// configured like the test bed's and run where the test bed's runs (`testbed/admin`: the
/// login user and its home are the release's); killed on drop.
struct SecondSshd {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl SecondSshd {
    fn start(tb: &Testbed) -> SecondSshd {
        // In the state folder: the same path on this host and in the test bed's root.
        let dir = tempfile::tempdir_in(tb.dir()).unwrap();
        let key = dir.path().join("host_ed25519");
        let status = std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&key)
            .status()
            .unwrap();
        assert!(status.success());
        let original = std::fs::read_to_string(tb.dir().join("ssh/sshd_config"))
            .expect("the test bed's sshd_config");
        let port = closed_port();
        let mut config = String::new();
        for line in original.lines() {
            let word = line.split_whitespace().next().unwrap_or("");
            match word {
                "Port" | "HostKey" | "PidFile" => {}
                _ => {
                    config.push_str(line);
                    config.push('\n');
                }
            }
        }
        config.push_str(&format!(
            "Port {port}\nHostKey {}\nPidFile {}\n",
            key.display(),
            dir.path().join("sshd.pid").display()
        ));
        let config_path = dir.path().join("sshd_config");
        std::fs::write(&config_path, config).unwrap();
        let child = tb
            .admin("/usr/sbin/sshd")
            .arg("-D")
            .arg("-e")
            .arg("-f")
            .arg(&config_path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start a second sshd");
        wait_for_port(port);
        SecondSshd {
            child,
            port,
            _dir: dir,
        }
    }
}

impl Drop for SecondSshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_an_unknown_host_key_is_refused() {
    let _cluster = cluster::shared().await;
    let tb = testbed_env();
    let second = SecondSshd::start(&tb);
    let t = Ssh2Transport::new(
        builder(&tb).with_hosts(vec![HostSpec::with_port("127.0.0.1", second.port)]),
    )
    .unwrap();
    let err = t.run(&Command::new("true")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::HostKey, "{err}");
    let text = err.to_string();
    let port = second.port;
    assert!(text.contains(&format!("[127.0.0.1]:{port}")), "{text}");
    assert!(text.contains("ssh-ed25519"), "{text}");
    assert!(text.contains("SHA256:"), "{text}");
    assert!(
        text.contains(&format!(
            "ssh-keyscan -p {port} 127.0.0.1 >> {}",
            tb.get("SSH_KNOWN_HOSTS")
        )),
        "{text}"
    );
    assert!(!err.is_transient());

    // A known_hosts entry for that host and port with another key: refused as changed.
    let dir = tempfile::tempdir().unwrap();
    let kh = dir.path().join("known_hosts");
    let real = std::fs::read_to_string(tb.get("SSH_KNOWN_HOSTS")).unwrap();
    let ed = real.lines().find(|l| l.contains("ssh-ed25519")).unwrap();
    let stolen = ed.replacen(&format!(":{}", tb.ssh_port()), &format!(":{port}"), 1);
    std::fs::write(&kh, format!("{stolen}\n")).unwrap();
    let t = Ssh2Transport::new(
        builder(&tb)
            .with_hosts(vec![HostSpec::with_port("127.0.0.1", port)])
            .with_known_hosts(&kh),
    )
    .unwrap();
    let err = t.run(&Command::new("true")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::HostKey, "{err}");
    assert!(err.to_string().contains("CHANGED"), "{err}");

    // Trust on first use, only when asked: records the key, then it matches.
    let tofu = dir.path().join("tofu_known_hosts");
    let t = Ssh2Transport::new(
        builder(&tb)
            .with_hosts(vec![HostSpec::with_port("127.0.0.1", port)])
            .with_known_hosts(&tofu)
            .with_trust_on_first_use(true),
    )
    .unwrap();
    let out = t.run(&Command::new("echo").arg("tofu")).await.unwrap();
    assert_eq!(out.stdout, b"tofu\n");
    let recorded = std::fs::read_to_string(&tofu).unwrap();
    assert!(
        recorded.starts_with(&format!("[127.0.0.1]:{port} ssh-ed25519 ")),
        "{recorded}"
    );
    drop(t);
    let t = Ssh2Transport::new(
        builder(&tb)
            .with_hosts(vec![HostSpec::with_port("127.0.0.1", port)])
            .with_known_hosts(&tofu),
    )
    .unwrap();
    assert_eq!(t.run(&Command::new("true")).await.unwrap().status, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_first_host_fails_over_to_the_second() {
    let _cluster = cluster::shared().await;
    let tb = testbed_env();
    let closed = closed_port();
    let t = Ssh2Transport::new(builder(&tb).with_hosts(vec![
        HostSpec::with_port("127.0.0.1", closed),
        HostSpec::with_port("127.0.0.1", tb.ssh_port()),
    ]))
    .unwrap();
    let host = t.connect().await.unwrap();
    assert_eq!(host, format!("[127.0.0.1]:{}", tb.ssh_port()));
    assert_eq!(
        t.run(&Command::new("echo").arg("ok")).await.unwrap().stdout,
        b"ok\n"
    );

    // When every host fails, the error lists each host's reason.
    let other = closed_port();
    let t = Ssh2Transport::new(builder(&tb).with_hosts(vec![
        HostSpec::with_port("127.0.0.1", closed),
        HostSpec::with_port("127.0.0.1", other),
    ]))
    .unwrap();
    let err = t.run(&Command::new("true")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connect, "{err}");
    assert!(err.is_transient());
    assert!(!err.may_have_run());
    let text = err.to_string();
    assert!(text.contains(&format!("[127.0.0.1]:{closed}:")), "{text}");
    assert!(text.contains(&format!("[127.0.0.1]:{other}:")), "{text}");
    assert!(text.contains("refused"), "{text}");
}

fn ppid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; fields after its closing parenthesis are plain.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The sshd processes serving the command's connection: the per-connection monitor
/// (child of the listener) and its unprivileged child that holds the TCP socket.
/// The command prints its ancestry (pid, parent, grandparent, ...).
async fn serving_sshd(t: &Ssh2Transport, listener: u32) -> (u32, u32) {
    let out = t
        .run(&Command::bash_script(
            r#"p=$$; while [ "$p" -gt 1 ]; do echo "$p"; read -r _ _ _ p _ < "/proc/$p/stat"; done"#,
            Vec::<String>::new(),
        ))
        .await
        .unwrap();
    let chain: Vec<u32> = out
        .stdout_text()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    let i = chain
        .iter()
        .position(|p| *p == listener)
        .unwrap_or_else(|| {
            panic!("the command is not served by the listener {listener}: {chain:?}")
        });
    assert!(
        i >= 2,
        "expected shell < sshd net child < sshd monitor < listener: {chain:?}"
    );
    (chain[i - 1], chain[i - 2])
}

fn read_pid(path: &Path) -> u32 {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_killed_mid_command_is_transient_and_the_next_command_reconnects() {
    let _cluster = cluster::shared().await;
    let tb = testbed_env();
    let listener = read_pid(&tb.sshd_pid_file());
    let t = Ssh2Transport::new(builder(&tb).with_sessions(1)).unwrap();
    let (victim, victim_net) = serving_sshd(&t, listener).await;
    assert_ne!(victim, listener);

    // In the shared results folder: the same path on this host and on the login node
    // (whose /tmp is its release's root filesystem's on 24.11 and 26.05).
    let flag: PathBuf = Path::new(tb.get("SLURM_BASE_RESULTS_DIR"))
        .join(format!("slurm-run-fault-{}", rand::random::<u64>()));
    let flag_text = flag.display().to_string();
    let nap = format!("20.{:04}", rand::random::<u16>() % 10_000);
    let long = Command::bash_script(
        r#"touch "$1"; sleep "$2"; echo finished"#,
        [flag_text.clone(), nap.clone()],
    )
    .timeout(Duration::from_secs(60));
    let running = tokio::spawn({
        let t = std::sync::Arc::new(t);
        let t2 = std::sync::Arc::clone(&t);
        async move { (t2.run(&long).await, t) }
    });
    let deadline = Instant::now() + Duration::from_secs(15);
    while !flag.exists() {
        assert!(Instant::now() < deadline, "the long command never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Kill only the processes serving our connection, never the listener. (Killing
    // the monitor alone leaves its child serving the connection.)
    assert_eq!(ppid(victim), Some(listener));
    assert_eq!(ppid(victim_net), Some(victim));
    // SAFETY: kill(2) with pids just verified to serve only our connection.
    let rc = unsafe { libc::kill(victim_net as libc::pid_t, libc::SIGKILL) };
    assert_eq!(rc, 0, "kill the connection's sshd child");
    // The monitor may already have exited after its child; that is the goal too.
    // SAFETY: as above.
    let rc = unsafe { libc::kill(victim as libc::pid_t, libc::SIGKILL) };
    let gone = std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    assert!(rc == 0 || gone, "kill the connection's sshd monitor");
    let started = Instant::now();
    let (result, t) = running.await.unwrap();
    let err = result.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(err.kind(), ErrorKind::Transport, "{err}");
    assert!(err.is_transient());
    assert!(err.may_have_run(), "the command was running: {err}");
    let _ = std::fs::remove_file(&flag);

    let out = t.run(&Command::new("echo").arg("again")).await.unwrap();
    assert_eq!(out.stdout, b"again\n");
    let (now_serving, _) = serving_sshd(&t, listener).await;
    // The command the lost connection left running is killed by the new session.
    wait_until_gone(
        &t,
        &format!("sleep {nap}"),
        &format!("the orphaned `sleep {nap}` still runs"),
    )
    .await;
    assert_ne!(now_serving, victim, "the next command ran on a new session");
    assert!(
        std::fs::read_to_string(format!("/proc/{listener}/stat")).is_ok(),
        "the listener survived"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passphrase_protected_key_needs_its_passphrase() {
    let _cluster = cluster::shared().await;
    let tb = testbed_env();
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("id_locked");
    std::fs::copy(tb.get("SSH_KEY_PATH"), &key).unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    // Encrypt the copy (ssh-keygen takes the test passphrase as an argument; the
    // library itself only ever takes it from the caller).
    let status = std::process::Command::new("ssh-keygen")
        .args(["-q", "-p", "-P", "", "-N", "correct horse", "-f"])
        .arg(&key)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let locked = builder(&tb).with_key_path(&key).with_agent(false);
    let t = Ssh2Transport::new(locked.clone()).unwrap();
    let err = t.run(&Command::new("true")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
    assert!(err.to_string().contains("with_passphrase"), "{err}");
    let t = Ssh2Transport::new(locked.with_passphrase(slurm_ssh::Secret::new("correct horse")))
        .unwrap();
    assert_eq!(
        t.run(&Command::new("echo").arg("in")).await.unwrap().stdout,
        b"in\n"
    );
    assert!(!format!("{t:?}").contains("correct horse"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_per_connection_are_capped_and_the_rest_queue() {
    let _cluster = cluster::shared().await;
    let tb = testbed_env();
    let t = Ssh2Transport::new(builder(&tb).with_sessions(1).with_max_channels(2)).unwrap();
    t.connect().await.unwrap();
    // Six commands that each hold a channel for 0.5 s: with at most two channels
    // they need at least three rounds, and each reports the shell that ran it.
    let start = Instant::now();
    // The framing shell is the topmost `bash --noprofile --norc` above the command
    // (the per-command subshell is a fork of it with the same command line).
    let find_shell = r#"sleep 0.5; p=$$ shell=
        while [ "$p" -gt 1 ]; do
          c=$(tr '\0' ' ' < "/proc/$p/cmdline")
          if [ "$c" = "bash --noprofile --norc " ]; then shell=$p; fi
          read -r _ _ _ p _ < "/proc/$p/stat"
        done
        echo "$shell"; [ -n "$shell" ]"#;
    let commands: Vec<Command> = (0..6)
        .map(|_| Command::bash_script(find_shell, Vec::<String>::new()))
        .collect();
    let outs = futures::future::join_all(commands.iter().map(|c| t.run(c))).await;
    let elapsed = start.elapsed();
    let mut shells = std::collections::BTreeSet::new();
    for out in outs {
        let out = out.unwrap();
        assert!(out.success(), "{}", out.stderr_text());
        shells.insert(out.stdout_text().trim().to_string());
    }
    assert!(
        elapsed >= Duration::from_millis(1500),
        "more than 2 channels ran at once ({elapsed:?})"
    );
    assert!(shells.len() <= 2, "more than two shells: {shells:?}");
}
