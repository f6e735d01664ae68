//! The local test bed's client settings, read from the environment or `testbed/env`, and
//! an OpenSSH ControlMaster to it.

use std::collections::HashMap;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// The test bed's client environment (`SLURM_HOSTNAME`, `SSH_KEY_PATH`, ...).
#[derive(Debug, Clone)]
pub struct Testbed {
    /// Every variable `testbed/env` exports.
    pub vars: HashMap<String, String>,
}

const NAMES: &[&str] = &[
    "SLURM_HOSTNAME",
    "SLURM_USER",
    "SSH_KEY_PATH",
    "SSH_KNOWN_HOSTS",
    "SLURM_PARTITION",
    "SLURM_BASE_RESULTS_DIR",
    "SLURM_CONVERT_PARTITION",
    "SLURM_RUN_TESTBED_DIR",
    "SLURM_RUN_TESTBED_SLURM",
    "SLURM_RUN_TEST_REGISTRY",
    "SLURM_RUN_TEST_REGISTRY_USER",
    "SLURM_RUN_TEST_REGISTRY_PASSWORD",
    "SLURM_RUN_TEST_POSTGRES_URL",
    "SLURM_RUN_TEST_LIMITED_ACCOUNT",
    "SLURM_RUN_TEST_SHORT_QOS",
];

/// The test bed environment: taken from the process environment when
/// `SLURM_RUN_TESTBED_DIR` is set, else from `testbed/env` in the repository (or
/// `$SLURM_RUN_TESTBED_ENV`). Panics loudly, with the fix, when the test bed is down.
pub fn testbed_env() -> Testbed {
    let mut vars = HashMap::new();
    if std::env::var_os("SLURM_RUN_TESTBED_DIR").is_some() {
        for name in NAMES {
            if let Ok(v) = std::env::var(name) {
                vars.insert(name.to_string(), v);
            }
        }
    } else {
        let script = std::env::var("SLURM_RUN_TESTBED_ENV")
            .map(PathBuf::from)
            .unwrap_or_else(|_| crate::workspace_root().join("testbed/env"));
        let out = Command::new("bash")
            .arg("-c")
            .arg(r#"eval "$("$1")" && env -0"#)
            .arg("testbed-env")
            .arg(&script)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "the test bed is not available: {} failed ({}). Start it with testbed/up, \
             or export its variables (eval \"$(testbed/env)\")",
            script.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        for entry in out.stdout.split(|b| *b == 0) {
            let entry = String::from_utf8_lossy(entry);
            if let Some((k, v)) = entry.split_once('=') {
                if NAMES.contains(&k) {
                    vars.insert(k.to_string(), v.to_string());
                }
            }
        }
    }
    for name in NAMES {
        assert!(
            vars.contains_key(*name),
            "test bed variable {name} is missing; run testbed/up and eval \"$(testbed/env)\""
        );
    }
    let tb = Testbed { vars };
    let addr = format!("127.0.0.1:{}", tb.ssh_port());
    TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(3)).unwrap_or_else(|e| {
        panic!("the test bed's sshd at {addr} does not answer ({e}); start the test bed with testbed/up")
    });
    tb
}

impl Testbed {
    /// One variable.
    pub fn get(&self, name: &str) -> &str {
        &self.vars[name]
    }

    /// The environment of a client process (slurmctl, an example) on the test bed:
    /// every variable `testbed/env` exports, with its records in `state_dir`.
    pub fn client_env(&self, state_dir: &std::path::Path) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = self.vars.clone().into_iter().collect();
        env.push((
            "SLURM_RUN_STATE_DIR".into(),
            state_dir.display().to_string(),
        ));
        env
    }

    /// A lookup function for builders that read the environment.
    pub fn lookup(&self) -> impl Fn(&str) -> Option<String> + '_ {
        move |name| self.vars.get(name).cloned()
    }

    /// The sshd port (from `SLURM_HOSTNAME=127.0.0.1:PORT`).
    pub fn ssh_port(&self) -> u16 {
        let host = self.get("SLURM_HOSTNAME");
        host.rsplit(':')
            .next()
            .unwrap()
            .parse()
            .expect("SLURM_HOSTNAME has a port")
    }

    /// The test bed's state folder.
    pub fn dir(&self) -> PathBuf {
        PathBuf::from(self.get("SLURM_RUN_TESTBED_DIR"))
    }

    /// The test bed's Slurm release (`SLURM_RUN_TESTBED_SLURM`: 22.05, 24.11 or 26.05) as
    /// (major, minor), for the tests that assert what a release does differently.
    pub fn slurm_release(&self) -> (u32, u32) {
        let release = self.get("SLURM_RUN_TESTBED_SLURM");
        let parsed = release
            .split_once('.')
            .and_then(|(major, minor)| Some((major.parse().ok()?, minor.parse().ok()?)));
        parsed.unwrap_or_else(|| panic!("SLURM_RUN_TESTBED_SLURM={release} is not MAJOR.MINOR"))
    }

    /// `testbed/admin PROGRAM`: a command run as the cluster's administrator with the test
    /// bed's own release's binaries and configuration (in its root filesystem for a
    /// release other than the host's), whichever release the host's client is.
    pub fn admin(&self, program: &str) -> Command {
        let mut command = Command::new(crate::workspace_root().join("testbed/admin"));
        command
            .arg(program)
            .env("SLURM_RUN_TESTBED_DIR", self.dir());
        command
    }

    /// The listener sshd's pid file (`run/sshd.pid`, or `sshd.pid` at the top).
    pub fn sshd_pid_file(&self) -> PathBuf {
        let nested = self.dir().join("run/sshd.pid");
        if nested.exists() {
            nested
        } else {
            self.dir().join("sshd.pid")
        }
    }

    /// `ssh` options that reach the test bed's sshd as its user with its key.
    pub fn ssh_args(&self) -> Vec<String> {
        vec![
            "-o".into(),
            "BatchMode=yes".into(),
            "-o".into(),
            format!("UserKnownHostsFile={}", self.get("SSH_KNOWN_HOSTS")),
            "-o".into(),
            "StrictHostKeyChecking=yes".into(),
            "-o".into(),
            "IdentitiesOnly=yes".into(),
            "-F".into(),
            "/dev/null".into(),
            "-i".into(),
            self.get("SSH_KEY_PATH").into(),
            "-p".into(),
            self.ssh_port().to_string(),
            "-l".into(),
            self.get("SLURM_USER").into(),
        ]
    }
}

/// An OpenSSH ControlMaster to the test bed, started with the test bed's key and
/// stopped (`ssh -O exit`) on drop.
pub struct Master {
    /// The ControlPath socket.
    pub socket: PathBuf,
    args: Vec<String>,
    _dir: tempfile::TempDir,
}

impl Master {
    /// Start a master (`ssh -M -S SOCKET -fN ...`), failing loudly if it cannot.
    pub fn start(tb: &Testbed) -> Master {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("cm.sock");
        let args = tb.ssh_args();
        let status = Command::new("ssh")
            .arg("-M")
            .arg("-S")
            .arg(&socket)
            .arg("-fN")
            .args(&args)
            .arg("127.0.0.1")
            .status()
            .expect("run ssh");
        assert!(
            status.success(),
            "could not start an ssh ControlMaster to the test bed"
        );
        Master {
            socket,
            args,
            _dir: dir,
        }
    }
}

impl Drop for Master {
    fn drop(&mut self) {
        let _ = Command::new("ssh")
            .arg("-S")
            .arg(&self.socket)
            .args(&self.args)
            .arg("-O")
            .arg("exit")
            .arg("127.0.0.1")
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// The daemons of the test bed that fault scenarios stop and start.
const DAEMONS: &[&str] = &["slurmctld", "slurmdbd"];

/// How long [`Testbed::stop`] waits for a daemon to end after SIGTERM.
pub const STOP_GRACE: Duration = Duration::from_secs(30);

impl Testbed {
    /// The pid file of one of the test bed's daemons (`slurmctld`, `slurmdbd`).
    fn pid_file(&self, daemon: &str) -> PathBuf {
        assert!(
            DAEMONS.contains(&daemon),
            "the test bed stops and starts only {DAEMONS:?}, not {daemon}"
        );
        self.dir().join(format!("run/{daemon}.pid"))
    }

    /// Whether `daemon` answers: slurmctld to `scontrol ping`, slurmdbd to sacct.
    pub fn answers(&self, daemon: &str) -> bool {
        let output = match daemon {
            "slurmctld" => self.admin("scontrol").arg("ping").output(),
            "slurmdbd" => self
                .admin("sacct")
                .args(["-n", "-X", "--starttime=now", "--format=JobID"])
                .output(),
            other => panic!("unknown daemon {other}"),
        };
        match output {
            Ok(out) if daemon == "slurmctld" => {
                String::from_utf8_lossy(&out.stdout).contains("is UP")
            }
            Ok(out) => {
                out.status.success() && !String::from_utf8_lossy(&out.stderr).contains("error")
            }
            Err(_) => false,
        }
    }

    /// Stop `daemon` (`slurmctld` or `slurmdbd`) of this test bed by its pid file (as
    /// `testbed/down` does) and wait until it is gone. Tests that stop a daemon hold
    /// the cluster gate exclusively.
    ///
    /// Panics, saying why, when it cannot: the pid file is missing or names another
    /// process (then nothing is signalled), the daemon is still running
    /// [`STOP_GRACE`] after SIGTERM, or it still answers once its process is gone (an
    /// instance its pid file does not name). A fault scenario never runs with the
    /// daemon it meant to stop still up.
    pub fn stop(&self, daemon: &str) {
        self.stop_within(daemon, STOP_GRACE);
    }

    /// [`Testbed::stop`], waiting at most `grace` for the process to end.
    fn stop_within(&self, daemon: &str, grace: Duration) {
        let file = self.pid_file(daemon);
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| {
            panic!(
                "cannot stop {daemon}: its pid file {} cannot be read ({e}); is the test bed up? (testbed/up)",
                file.display()
            )
        });
        let pid: i32 = text.trim().parse().unwrap_or_else(|_| {
            panic!(
                "cannot stop {daemon}: its pid file {} holds {:?}, not a pid",
                file.display(),
                text.trim()
            )
        });
        // Only the daemon this pid file names (a recycled pid is never signalled).
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        assert!(
            cmdline.contains(daemon),
            "cannot stop {daemon}: its pid file {} names process {pid}, which is {}; \
             the daemon may still be running (testbed/down, then testbed/up, restarts the test bed)",
            file.display(),
            if cmdline.trim().is_empty() {
                "not running".to_string()
            } else {
                format!("`{}`", cmdline.trim())
            }
        );
        // SAFETY: kill(2) with a pid and a signal number; no memory is shared.
        if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
            panic!(
                "cannot stop {daemon}: SIGTERM to {pid} failed: {}",
                std::io::Error::last_os_error()
            );
        }
        let deadline = std::time::Instant::now() + grace;
        while std::path::Path::new(&format!("/proc/{pid}")).exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "{daemon} ({pid}) is still running {grace:?} after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(
            !self.answers(daemon),
            "{daemon} still answers after its process {pid} ended: an instance its pid file \
             does not name is running (testbed/down, then testbed/up, restarts the test bed)"
        );
    }

    /// Start `daemon` again as `testbed/up` starts it and wait until it answers.
    pub fn start(&self, daemon: &str) {
        if self.answers(daemon) {
            return;
        }
        let _ = std::fs::remove_file(self.pid_file(daemon));
        let conf = self.dir().join("etc/slurm.conf");
        let status = match daemon {
            "slurmctld" => self.admin("slurmctld").arg("-f").arg(&conf).status(),
            _ => self.admin("slurmdbd").status(),
        }
        .unwrap_or_else(|e| panic!("cannot start {daemon}: {e}"));
        assert!(status.success(), "{daemon} did not start");
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !self.answers(daemon) {
            assert!(
                std::time::Instant::now() < deadline,
                "{daemon} does not answer after a restart"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Stop `daemon` until the guard drops (it is started again then, even when the
    /// test panics).
    pub fn stopped(&self, daemon: &'static str) -> Stopped {
        self.stop(daemon);
        Stopped {
            testbed: self.clone(),
            daemon,
        }
    }
}

/// A daemon of the test bed stopped until this guard drops ([`Testbed::stopped`]).
pub struct Stopped {
    testbed: Testbed,
    daemon: &'static str,
}

impl Stopped {
    /// Start the daemon now (and wait until it answers).
    pub fn restart(self) {}
}

impl Drop for Stopped {
    fn drop(&mut self) {
        self.testbed.start(self.daemon);
    }
}

/// Cancels a SLURM job of the test bed (by its SLURM id) when dropped, a failed test's
/// included, so a job a test meant to cancel does not outlive it.
pub struct CancelOnDrop<'a>(pub &'a Testbed, pub String);

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.0.admin("scancel").arg(&self.1).status();
    }
}

#[cfg(test)]
mod tests {
    use std::process::{Child, Stdio};

    use super::*;

    /// A test bed whose state folder is `dir`, with no daemons: its slurm.conf names
    /// ports nothing listens on, so the admin tools fail at once (without a file they
    /// would look for a configless controller in DNS for a minute).
    fn testbed_in(dir: &std::path::Path) -> Testbed {
        std::fs::create_dir_all(dir.join("etc")).unwrap();
        std::fs::write(
            dir.join("etc/slurm.conf"),
            "ClusterName=none\nSlurmctldHost=localhost\nSlurmctldPort=1\n\
             AccountingStorageType=accounting_storage/slurmdbd\n\
             AccountingStorageHost=localhost\nAccountingStoragePort=1\n",
        )
        .unwrap();
        let vars = [("SLURM_RUN_TESTBED_DIR", dir.display().to_string())];
        Testbed {
            vars: vars.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        }
    }

    /// A process whose command line is `argv0 60` (a `sleep`), with its pid in the
    /// pid file of `daemon` under `dir`; `ignore_term` makes it ignore SIGTERM.
    fn fake_daemon(dir: &std::path::Path, daemon: &str, argv0: &str, ignore_term: bool) -> Child {
        let trap = if ignore_term { "trap '' TERM; " } else { "" };
        let child = Command::new("bash")
            .arg("-c")
            .arg(format!(r#"{trap}exec -a "$1" sleep 60"#))
            .arg("fake-daemon")
            .arg(argv0)
            .stdin(Stdio::null())
            .spawn()
            .expect("start bash");
        // The pid file is written once the process carries its new command line.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let cmdline = format!("/proc/{}/cmdline", child.id());
        while !std::fs::read(&cmdline)
            .map(|c| c.starts_with(argv0.as_bytes()))
            .unwrap_or(false)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "{argv0} did not start"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        std::fs::create_dir_all(dir.join("run")).unwrap();
        std::fs::write(
            dir.join(format!("run/{daemon}.pid")),
            format!("{}\n", child.id()),
        )
        .unwrap();
        child
    }

    /// The panic message of `f`, which must panic.
    fn panic_of(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
        let payload = std::panic::catch_unwind(f).expect_err("it panics");
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    }

    #[test]
    fn stop_fails_loudly_when_the_pid_file_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let tb = testbed_in(dir.path());
        let message = panic_of(|| tb.stop("slurmctld"));
        assert!(message.contains("cannot stop slurmctld"), "{message}");
        assert!(message.contains("slurmctld.pid"), "{message}");
    }

    #[test]
    fn stop_fails_loudly_and_signals_nothing_when_the_pid_file_names_another_process() {
        let dir = tempfile::tempdir().unwrap();
        let tb = testbed_in(dir.path());
        let mut other = fake_daemon(dir.path(), "slurmdbd", "not-the-daemon", false);
        let message = panic_of(|| tb.stop("slurmdbd"));
        let alive = other.try_wait().unwrap().is_none();
        other.kill().unwrap();
        other.wait().unwrap();
        assert!(message.contains("cannot stop slurmdbd"), "{message}");
        assert!(message.contains("not-the-daemon"), "{message}");
        assert!(alive, "the other process was signalled");
    }

    #[test]
    fn stop_ends_the_daemon_its_pid_file_names() {
        let dir = tempfile::tempdir().unwrap();
        let tb = testbed_in(dir.path());
        let mut daemon = fake_daemon(dir.path(), "slurmctld", "slurmctld", false);
        let pid = daemon.id();
        // Reap it as soon as it ends, as init reaps a real daemon.
        let reaper = std::thread::spawn(move || daemon.wait().unwrap());
        tb.stop("slurmctld");
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
        assert!(!reaper.join().unwrap().success(), "ended by SIGTERM");
    }

    #[test]
    fn stop_fails_loudly_when_the_daemon_outlives_the_grace() {
        let dir = tempfile::tempdir().unwrap();
        let tb = testbed_in(dir.path());
        let mut daemon = fake_daemon(dir.path(), "slurmctld", "slurmctld", true);
        let message = panic_of(|| tb.stop_within("slurmctld", Duration::from_millis(300)));
        daemon.kill().unwrap();
        daemon.wait().unwrap();
        assert!(
            message.contains(&format!("slurmctld ({}) is still running", daemon.id())),
            "{message}"
        );
    }
}
