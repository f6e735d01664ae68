//! Build the example programs once per test binary and run them with a deadline, capturing their output.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

/// The path of example `name`, built (once per test binary) with the features of the
/// tests (`testbed` when the root package's `testbed` feature is on).
pub fn example(name: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let mut cargo = Command::new(env!("CARGO"));
        cargo
            .args(["build", "--examples", "--quiet"])
            .current_dir(crate::workspace_root());
        if cfg!(feature = "testbed") {
            cargo.args(["--features", "testbed"]);
        }
        if !cfg!(debug_assertions) {
            cargo.arg("--release");
        }
        let status = cargo.status().expect("run cargo build --examples");
        assert!(status.success(), "cargo build --examples failed");
        // This test runs from <target>/<profile>/deps/; the examples are in <target>/<profile>/examples/.
        let exe = std::env::current_exe().expect("the test's own path");
        exe.parent()
            .and_then(|deps| deps.parent())
            .expect("<target>/<profile>")
            .join("examples")
    });
    let path = dir.join(name);
    assert!(path.is_file(), "example {} was not built", path.display());
    path
}

/// What a finished program left.
#[derive(Debug)]
pub struct Run {
    /// The exit status (-1 when killed by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Run {
    /// Panic with everything the program printed unless it exited with `code`.
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code, code,
            "exit status {} instead of {code}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        );
        self
    }

    /// Stdout parsed as JSON Lines (panics on a line that is not JSON).
    pub fn json_lines(&self) -> Vec<serde_json::Value> {
        self.stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}\n{}", self.stderr))
            })
            .collect()
    }
}

/// Run `program` with a clean environment holding `PATH`, `HOME` and `env`, stdin
/// closed; kill it and fail after `deadline`.
pub fn run(program: &PathBuf, args: &[&str], env: &[(String, String)], deadline: Duration) -> Run {
    run_input(program, args, env, None, deadline)
}

/// [`run`] with `input` on stdin (then closed), or stdin closed when `None`.
pub fn run_input(
    program: &PathBuf,
    args: &[&str],
    env: &[(String, String)],
    input: Option<&[u8]>,
    deadline: Duration,
) -> Run {
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for name in ["PATH", "HOME", "USER", "LANG"] {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        use std::io::Write;
        let input = input.to_vec();
        thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
    }
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let out = thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err = thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the program") {
            break status;
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{} {args:?} did not finish within {deadline:?}\n--- stdout\n{}\n--- stderr\n{}",
                program.display(),
                out.join().unwrap_or_default(),
                err.join().unwrap_or_default()
            );
        }
        thread::sleep(Duration::from_millis(20));
    };
    Run {
        code: status.code().unwrap_or(-1),
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}

/// Watches every process's argv on this host (`/proc/*/cmdline`: the test bed's login
/// node is this host, so both sides of a command) for a string, until stopped.
pub struct ArgvWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    scanner: thread::JoinHandle<(usize, Vec<String>)>,
}

impl ArgvWatch {
    /// Start scanning for `needle` (as fast as the host allows).
    pub fn start(needle: &str) -> ArgvWatch {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&stop);
        let needle = needle.as_bytes().to_vec();
        let scanner = thread::spawn(move || {
            let mut scans = 0;
            let mut hits = Vec::new();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                scans += 1;
                let Ok(entries) = std::fs::read_dir("/proc") else {
                    break;
                };
                for entry in entries.flatten() {
                    let Ok(argv) = std::fs::read(entry.path().join("cmdline")) else {
                        continue;
                    };
                    if memchr_find(&argv, &needle) {
                        hits.push(String::from_utf8_lossy(&argv).replace('\0', " "));
                    }
                }
            }
            (scans, hits)
        });
        ArgvWatch { stop, scanner }
    }

    /// Stop; (how many full scans ran, the argvs that held the string).
    pub fn stop(self) -> (usize, Vec<String>) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.scanner.join().expect("the argv scanner")
    }
}

fn memchr_find(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// Install the test bed registry's credentials with `slurmctl credentials install` (the
/// password on stdin), as a user would; `env` is the test bed's environment.
pub fn install_registry_credentials(env: &[(String, String)]) {
    let get = |name: &str| {
        env.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("{name} is not in the test bed's environment"))
    };
    let out = run_input(
        &example("slurmctl"),
        &[
            "credentials",
            "install",
            &get("SLURM_RUN_TEST_REGISTRY"),
            "--user",
            &get("SLURM_RUN_TEST_REGISTRY_USER"),
        ],
        env,
        Some(format!("{}\n", get("SLURM_RUN_TEST_REGISTRY_PASSWORD")).as_bytes()),
        Duration::from_secs(60),
    );
    out.expect_code(0);
}
