//! The Transport conformance suite: the checks every [`Transport`] must pass, as public
//! async functions (one per case, each taking any `&T: Transport`) and the
//! [`transport_conformance!`](crate::transport_conformance) macro, which turns them into
//! one test per case for a transport of yours:
//!
//! ```no_run
//! // tests/conformance.rs of a crate with slurm-core (feature `testing`) as a dev-dependency.
//! slurm_core::transport_conformance!(local, slurm_core::LocalTransport::new());
//! ```
//!
//! The expression is evaluated inside each test's runtime (it may `.await`), once per
//! case; the generated module imports its parent's names. The cases start processes on
//! the far side (`printf`, `cat`, `stat`, `pgrep`, `bash`...) and use `/tmp` there.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::transport::{Command, ForwardTarget, OutputChunk, Transport};
use crate::ErrorKind;

/// Strings that break naive quoting: the arguments of [`argv_fidelity`].
pub const HOSTILE: &[&str] = &[
    "plain",
    "",
    " ",
    "a b  c",
    "'",
    "\"",
    "''\"\"'",
    "$(touch /tmp/slurm-run-pwned)",
    "`id`",
    "$HOME",
    "${HOME:-x}",
    "\\",
    "\\n",
    "line1\nline2\n",
    "\n",
    "\t tab",
    "*",
    "~",
    "-n",
    "--",
    ";",
    "|",
    "&&",
    "{a,b}",
    "!x",
    "#hash",
    "%s%d",
    "日本語 ✓ émoji 🚀",
    "SRM0123456789abcdef0123456789abcdef O",
    "__sr_run x 1 y",
    "\u{7f}\u{1}\u{1b}[31m",
];

async fn fresh_dir<T: Transport + ?Sized>(t: &T) -> String {
    let out = t
        .run(
            &Command::new("mktemp")
                .arg("-d")
                .arg("/tmp/slurm-run-conf.XXXXXXXX"),
        )
        .await
        .expect("mktemp");
    assert!(out.success(), "mktemp: {}", out.stderr_text());
    let dir = out.stdout_text().trim().to_string();
    // Readable by others, so the mode checks below mean something.
    t.run(&Command::new("chmod").arg("755").arg(&dir))
        .await
        .unwrap();
    dir
}

async fn cleanup<T: Transport + ?Sized>(t: &T, dir: &str) {
    let _ = t
        .run(&Command::new("rm").arg("-rf").arg("--").arg(dir))
        .await;
}

/// Arguments reach the program byte for byte, whatever they hold ([`HOSTILE`]), as
/// plain arguments and as a script's positional parameters, and none is executed.
pub async fn argv_fidelity<T: Transport + ?Sized>(t: &T) {
    let out = t
        .run(
            &Command::new("printf")
                .arg("%s\\0")
                .args(HOSTILE.iter().copied()),
        )
        .await
        .unwrap();
    assert!(out.success(), "{}", out.stderr_text());
    let mut expected = Vec::new();
    for s in HOSTILE {
        expected.extend_from_slice(s.as_bytes());
        expected.push(0);
    }
    assert_eq!(out.stdout, expected);
    // The same strings as positional parameters of a fixed script.
    let out = t
        .run(&Command::bash_script(
            r#"printf '%s\0' "$#" "$@""#,
            HOSTILE.iter().copied(),
        ))
        .await
        .unwrap();
    let mut expected = format!("{}\0", HOSTILE.len()).into_bytes();
    for s in HOSTILE {
        expected.extend_from_slice(s.as_bytes());
        expected.push(0);
    }
    assert_eq!(out.stdout, expected);
    let probe = t
        .run(&Command::new("test").arg("-e").arg("/tmp/slurm-run-pwned"))
        .await
        .unwrap();
    assert_eq!(probe.status, 1, "a hostile argument was executed");
}

/// 10 MiB of standard input arrive unaltered.
pub async fn large_stdin<T: Transport + ?Sized>(t: &T) {
    let big: Vec<u8> = (0..10 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let out = t
        .run(&Command::new("cat").stdin(big.clone()))
        .await
        .unwrap();
    assert!(out.success());
    assert_eq!(out.stdout.len(), big.len());
    assert!(out.stdout == big, "10 MiB stdin came back altered");
    let out = t
        .run(&Command::new("wc").arg("-c").stdin(big))
        .await
        .unwrap();
    assert_eq!(out.stdout_text().trim(), (10 * 1024 * 1024).to_string());
}

/// Small inputs of every shape arrive exactly (a transport may carry a few bytes of text
/// another way than a large or binary input): no final newline, only newlines, quotes,
/// backslashes, `$(...)`, a carriage return, multi-byte UTF-8, text that looks like the
/// framing, and inputs on either side of a few hundred bytes.
pub async fn small_stdin<T: Transport + ?Sized>(t: &T) {
    let mut inputs: Vec<Vec<u8>> = [
        "x",
        "\n",
        "\n\n\n",
        "no newline at end",
        "it's \"quoted\" '' \\ \\n $(touch /tmp/slurm-run-pwned) `id` $HOME ${x:-y} *",
        "carriage\r\nreturn\r",
        "ünïcödé ✓ 日本 \u{1F600}\n",
        "SRM00000000000000000000000000000000 E 0\n__sr_run a 0 b\n=x\n",
        "=starts with an equals sign",
        " \t leading and trailing blanks \t ",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    for len in [255, 256, 257, 1000] {
        inputs.push((0..len).map(|i| b"ab'\n $"[i % 6]).collect());
    }
    // Not text: a byte that is no UTF-8, and a NUL.
    inputs.push(b"abc\xff\xfe def".to_vec());
    inputs.push(b"before\0after".to_vec());
    for input in inputs {
        let out = t
            .run(&Command::new("cat").stdin(input.clone()))
            .await
            .unwrap();
        assert!(out.success(), "{}", out.stderr_text());
        assert_eq!(
            out.stdout,
            input,
            "{:?} came back altered",
            String::from_utf8_lossy(&input)
        );
    }
    let probe = t
        .run(&Command::new("test").arg("-e").arg("/tmp/slurm-run-pwned"))
        .await
        .unwrap();
    assert_eq!(probe.status, 1, "an input was executed");
}

/// Every byte value survives stdout, stderr and stdin, marker-like text included; a
/// missing final newline is kept and empty output stays empty.
pub async fn binary_output<T: Transport + ?Sized>(t: &T) {
    let all: Vec<u8> = (0..=255u8).collect();
    let format: String = all.iter().map(|b| format!("\\{b:03o}")).collect();
    let out = t
        .run(&Command::bash_script(
            r#"printf "$1"; printf "$1" >&2"#,
            [format],
        ))
        .await
        .unwrap();
    assert!(out.success());
    assert_eq!(out.stdout, all, "stdout of every byte value");
    assert_eq!(out.stderr, all, "stderr of every byte value");
    // Stdin to stdout, binary, no trailing newline, with marker-like text.
    let mut tricky =
        b"SRM00000000000000000000000000000000 O\nSRSYNC_x\nSRREADY_y\n__sr_run a 0 b\n".to_vec();
    tricky.extend_from_slice(&all);
    tricky.extend_from_slice(b"SRM00000000000000000000000000000000 E 0\n no newline at end");
    let out = t
        .run(&Command::new("cat").stdin(tricky.clone()))
        .await
        .unwrap();
    assert_eq!(out.stdout, tricky);
    let out = t
        .run(&Command::new("printf").arg("no-newline"))
        .await
        .unwrap();
    assert_eq!(out.stdout, b"no-newline");
    let out = t.run(&Command::new("true")).await.unwrap();
    assert!(out.stdout.is_empty() && out.stderr.is_empty());
}

/// Exit statuses (a signal as 128 + its number) and stderr come back apart from stdout;
/// a failed command checks as [`ErrorKind::Remote`].
pub async fn exit_codes_and_stderr<T: Transport + ?Sized>(t: &T) {
    let out = t
        .run(&Command::bash_script(
            "echo out; echo err >&2; exit 42",
            Vec::<String>::new(),
        ))
        .await
        .unwrap();
    assert_eq!(out.status, 42);
    assert_eq!(out.stdout, b"out\n");
    assert_eq!(out.stderr, b"err\n");
    let out = t
        .run(&Command::bash_script("kill -KILL $$", Vec::<String>::new()))
        .await
        .unwrap();
    assert_eq!(out.status, 137, "killed by SIGKILL");
    let out = t.run(&Command::new("false")).await.unwrap();
    assert_eq!(out.status, 1);
    let out = t
        .run(&Command::new("ls").arg("/definitely/not/here"))
        .await
        .unwrap();
    assert_ne!(out.status, 0);
    assert!(out.stderr_text().contains("/definitely/not/here"));
    let err = out.check(&Command::new("ls")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Remote);
}

/// A command given no stdin reads end-of-file at once; given stdin, exactly that.
pub async fn reading_stdin_gets_eof<T: Transport + ?Sized>(t: &T) {
    let start = Instant::now();
    let out = t
        .run(
            &Command::bash_script(
                r#"read -r x; echo "got:$x:$?"; cat | wc -c"#,
                Vec::<String>::new(),
            )
            .timeout(Duration::from_secs(20)),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout_text(), "got::1\n0\n");
    assert!(start.elapsed() < Duration::from_secs(15));
    // Given stdin, it reads exactly that and then EOF.
    let out = t
        .run(
            &Command::bash_script(r#"cat; echo "[end]""#, Vec::<String>::new())
                .stdin(b"mine".to_vec()),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout, b"mine[end]\n");
    // The transport still works after both.
    let out = t
        .run(&Command::new("echo").arg("still framed"))
        .await
        .unwrap();
    assert_eq!(out.stdout, b"still framed\n");
}

/// No command changes the next one's directory, environment, umask or shell options.
pub async fn no_state_leaks<T: Transport + ?Sized>(t: &T) {
    let pwd = t.run(&Command::new("pwd")).await.unwrap().stdout;
    // As plain commands (a framed shell runs builtins; LocalTransport cannot, which is fine).
    let _ = t.run(&Command::new("cd").arg("/")).await;
    let _ = t.run(&Command::new("export").arg("SLURM_RUN_LEAK=1")).await;
    let _ = t.run(&Command::new("umask").arg("000")).await;
    let _ = t.run(&Command::new("set").arg("-e")).await;
    let _ = t.run(&Command::new("exit").arg("5")).await;
    assert_eq!(t.run(&Command::new("pwd")).await.unwrap().stdout, pwd);
    let out = t
        .run(&Command::new("printenv").arg("SLURM_RUN_LEAK"))
        .await
        .unwrap();
    assert_eq!(out.status, 1, "an exported variable leaked");
    let out = t
        .run(&Command::bash_script("umask", Vec::<String>::new()))
        .await
        .unwrap();
    assert_ne!(out.stdout_text().trim(), "0000", "umask leaked");
    let out = t.run(&Command::new("false")).await.unwrap();
    assert_eq!(out.status, 1, "set -e or exit leaked into the shell");
}

/// `write_file` never exposes a private file to others, not even while writing, honours
/// modes, leaves no temporary file, takes hostile names; a missing file is
/// [`ErrorKind::NotFound`].
pub async fn file_modes<T: Transport + ?Sized>(t: &T) {
    let dir = fresh_dir(t).await;
    let secret = format!("{dir}/secret.txt");
    let big: Vec<u8> = vec![b's'; 4 * 1024 * 1024];
    // Watch the folder for any file readable by group or others while writing.
    let watcher = Command::bash_script(
        r#"end=$((SECONDS + 4)); seen=0
           while [ "$SECONDS" -lt "$end" ]; do
             found=$(find "$1" -type f -perm /077 -name '*secret*' -o -type f -perm /077 -name '.slurm-run.*')
             if [ -n "$found" ]; then echo "EXPOSED: $found"; fi
             seen=$((seen + 1))
           done
           echo "checks=$seen""#,
        [dir.clone()],
    )
    .timeout(Duration::from_secs(30));
    let writes = async {
        for round in 0..5 {
            t.write_file(&secret, &big, 0o600).await.unwrap();
            let _ = round;
        }
    };
    let (watched, ()) = futures::join!(t.run(&watcher), writes);
    let watched = watched.unwrap();
    let text = watched.stdout_text();
    assert!(!text.contains("EXPOSED"), "{text}");
    assert!(text.contains("checks="), "{text}");
    let mode = t
        .run(&Command::new("stat").arg("-c").arg("%a").arg(&secret))
        .await
        .unwrap();
    assert_eq!(mode.stdout_text().trim(), "600");
    assert_eq!(t.read_file(&secret).await.unwrap(), big);
    // Other modes are honoured, and overwriting an open file replaces its mode.
    let shared = format!("{dir}/shared.txt");
    t.write_file(&shared, b"hello\n", 0o644).await.unwrap();
    let mode = t
        .run(&Command::new("stat").arg("-c").arg("%a").arg(&shared))
        .await
        .unwrap();
    assert_eq!(mode.stdout_text().trim(), "644");
    t.write_file(&shared, b"now private\n", 0o600)
        .await
        .unwrap();
    let mode = t
        .run(&Command::new("stat").arg("-c").arg("%a").arg(&shared))
        .await
        .unwrap();
    assert_eq!(mode.stdout_text().trim(), "600");
    assert_eq!(t.read_file(&shared).await.unwrap(), b"now private\n");
    // No temporary file is left behind.
    let listing = t
        .run(&Command::new("ls").arg("-A").arg(&dir))
        .await
        .unwrap();
    assert_eq!(listing.stdout_text(), "secret.txt\nshared.txt\n");
    // A hostile file name is one file.
    let odd = format!("{dir}/it's $(odd) name\n.txt");
    t.write_file(&odd, b"x", 0o600).await.unwrap();
    assert_eq!(t.read_file(&odd).await.unwrap(), b"x");
    let missing = t.read_file(&format!("{dir}/missing")).await.unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound);
    cleanup(t, &dir).await;
}

/// `tail_file` gives the last lines of a large file; `read_file` the whole of it.
pub async fn tail_of_large_file<T: Transport + ?Sized>(t: &T) {
    let dir = fresh_dir(t).await;
    let path = format!("{dir}/big.log");
    let out = t
        .run(&Command::bash_script(
            r#"seq 1 300000 > "$1""#,
            [path.clone()],
        ))
        .await
        .unwrap();
    assert!(out.success());
    let tail = t.tail_file(&path, 3).await.unwrap();
    assert_eq!(tail, b"299998\n299999\n300000\n");
    let whole = t.read_file(&path).await.unwrap();
    assert_eq!(whole.len(), 1_988_895);
    let err = t.tail_file(&format!("{dir}/nope"), 3).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    cleanup(t, &dir).await;
}

/// A command past its timeout fails as a transient [`ErrorKind::Timeout`] that may have
/// run, within seconds; the transport still works and the abandoned process is killed.
pub async fn timeouts<T: Transport + ?Sized>(t: &T) {
    // A distinctive duration, to find the process afterwards.
    let nonce = format!(
        "{}.{:04}",
        30 + rand::random::<u8>() % 9,
        rand::random::<u16>() % 10_000
    );
    let start = Instant::now();
    let err = t
        .run(
            &Command::new("sleep")
                .arg(&nonce)
                .timeout(Duration::from_secs(1)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(err.may_have_run());
    assert!(err.is_transient());
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "took {:?}",
        start.elapsed()
    );
    let out = t.run(&Command::new("echo").arg("after")).await.unwrap();
    assert_eq!(out.stdout, b"after\n");
    // The abandoned command is killed, not left running.
    wait_until_gone(
        t,
        &format!("sleep {nonce}"),
        &format!("`sleep {nonce}` still runs after its timeout"),
    )
    .await;
}

/// 32 commands at once each get their own output.
pub async fn concurrent_commands<T: Transport + ?Sized>(t: &T) {
    let runs = (0..32).map(|i| {
        let cmd = Command::bash_script(
            r#"sleep 0.2; printf '%s' "$1"; printf 'e%s' "$1" >&2"#,
            [i.to_string()],
        );
        async move { (i, t.run(&cmd).await) }
    });
    for (i, result) in futures::future::join_all(runs).await {
        let out = result.unwrap_or_else(|e| panic!("command {i}: {e}"));
        assert_eq!(out.stdout_text(), i.to_string());
        assert_eq!(out.stderr_text(), format!("e{i}"));
    }
}

/// [`Transport::run_streamed`] hands on the same bytes, on the same streams, and the
/// same status as [`Transport::run`] (stdin reaches it too).
pub async fn streamed_output<T: Transport + ?Sized>(t: &T) {
    let command = Command::new("bash")
        .arg("-c")
        .arg("cat; printf 'to-err' >&2; exit 5")
        .stdin(b"from stdin\n".to_vec());
    let (sink, mut chunks) = tokio::sync::mpsc::unbounded_channel();
    let status = t.run_streamed(&command, sink).await.expect("run_streamed");
    let (mut out, mut err) = (Vec::new(), Vec::new());
    while let Ok(chunk) = chunks.try_recv() {
        match chunk {
            OutputChunk::Stdout(bytes) => out.extend(bytes),
            OutputChunk::Stderr(bytes) => err.extend(bytes),
        }
    }
    assert_eq!(status, 5);
    assert_eq!(out, b"from stdin\n");
    assert_eq!(err, b"to-err");
}

/// [`Transport::forward`] either forwards (each connection to the local end reaches the
/// target and back, twice; the port closes when the forward is dropped) or refuses
/// with a configuration error saying the transport cannot forward. The target is a
/// server on this machine's loopback, so the far side must reach it there (this host,
/// the test bed).
pub async fn forward_or_refuse<T: Transport + ?Sized>(t: &T) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = server.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = server.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4];
                if s.read_exact(&mut buf).await.is_ok() {
                    let _ = s.write_all(b"echo:").await;
                    let _ = s.write_all(&buf).await;
                }
            });
        }
    });
    let forward = match t.forward(0, &ForwardTarget::new("127.0.0.1", port)).await {
        Ok(forward) => forward,
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Config, "{e}");
            assert!(e.to_string().contains("cannot forward ports"), "{e}");
            return;
        }
    };
    let local = forward.local();
    assert!(local.ip().is_loopback(), "{local}");
    for word in [b"ping", b"pong"] {
        let mut c = tokio::net::TcpStream::connect(local)
            .await
            .expect("connect to the forward");
        c.write_all(word).await.unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(30), c.read_to_end(&mut answer))
            .await
            .expect("an answer through the forward")
            .unwrap();
        assert_eq!(answer, [b"echo:".as_slice(), word].concat());
    }
    drop(forward);
    let deadline = Instant::now() + Duration::from_secs(15);
    while tokio::net::TcpStream::connect(local).await.is_ok() {
        assert!(
            Instant::now() < deadline,
            "{local} still accepts after the forward was dropped"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every case in turn, for a transport that cannot be made once per case.
pub async fn run_all<T: Transport + ?Sized>(t: &T) {
    argv_fidelity(t).await;
    large_stdin(t).await;
    small_stdin(t).await;
    binary_output(t).await;
    exit_codes_and_stderr(t).await;
    reading_stdin_gets_eof(t).await;
    no_state_leaks(t).await;
    file_modes(t).await;
    tail_of_large_file(t).await;
    timeouts(t).await;
    concurrent_commands(t).await;
    streamed_output(t).await;
    forward_or_refuse(t).await;
}

/// Poll `pgrep -f ^COMMAND_LINE$` through `transport` until nothing matches (a command
/// the transport abandoned is gone), or panic with `what` after ten seconds.
pub async fn wait_until_gone<T: Transport + ?Sized>(transport: &T, command_line: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let pattern = format!("^{command_line}$");
    loop {
        let out = transport
            .run(&Command::new("pgrep").arg("-f").arg(pattern.as_str()))
            .await
            .unwrap();
        if out.status == 1 {
            return;
        }
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Run one case to its end on a fresh multi-threaded runtime (two workers): what each
/// test of [`transport_conformance!`](crate::transport_conformance) does, so the crate
/// using the macro needs no tokio of its own.
pub fn run_case<F: Future<Output = ()>>(case: F) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime for the conformance case")
        .block_on(case);
}

/// One `#[test]` per case of the [Transport conformance
/// suite](crate::testing::transport_suite), in a module `$module`, each on a transport
/// made by `$make` (evaluated in the test's runtime, so it may `.await`; the module
/// imports its parent's names):
///
/// ```no_run
/// slurm_core::transport_conformance!(local, slurm_core::LocalTransport::new());
/// ```
#[macro_export]
macro_rules! transport_conformance {
    ($module:ident, $make:expr $(,)?) => {
        $crate::transport_conformance!(
            @cases $module, $make,
            argv_fidelity
            large_stdin
            small_stdin
            binary_output
            exit_codes_and_stderr
            reading_stdin_gets_eof
            no_state_leaks
            file_modes
            tail_of_large_file
            timeouts
            concurrent_commands
            streamed_output
            forward_or_refuse
        );
    };
    (@cases $module:ident, $make:expr, $($case:ident)*) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;

            $(
                #[test]
                fn $case() {
                    $crate::testing::transport_suite::run_case(async {
                        let transport = $make;
                        $crate::testing::transport_suite::$case(&transport).await;
                    });
                }
            )*
        }
    };
}

#[cfg(test)]
crate::transport_conformance!(local_transport, crate::transport::LocalTransport::new());
