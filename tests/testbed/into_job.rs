//! Into a running job, on both transports: a forward to an HTTP server a job starts (a
//! page fetched through it; slurmctl's forward ends when the job does), and exec beside
//! a running job (its node's name, a failing command's status, inside the job's
//! container image), through the library and through slurmctl.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command as Process, Stdio};
use std::time::{Duration, Instant};

use slurm_core::{
    Backend, ExecOptions, FileRecordStore, ForwardOptions, JobId, JobRecord, JobSpec, JobState,
    NodeChoice, OutputChunk, SlurmBackend, SlurmConfig, SubmitOptions, Transport,
};
use slurm_render::HandlebarsRenderer;
use slurm_run_testsupport::backend::{registry_image, with_credentials};
use slurm_run_testsupport::examples::example;
use slurm_run_testsupport::testbed::{CancelOnDrop, Master};
use slurm_run_testsupport::transports::{openssh, ssh2};
use slurm_run_testsupport::{cluster, harness, small_spec, testbed_env, Testbed};

pub(crate) type Over<T> = SlurmBackend<T, HandlebarsRenderer, FileRecordStore>;

/// A SlurmBackend over `transport` on the test bed, with its own record folder.
pub(crate) fn backend_over<T: Transport + 'static>(
    transport: T,
    tb: &Testbed,
) -> (Over<T>, tempfile::TempDir) {
    slurm_run_testsupport::backend::backend_over(transport, tb, None)
}

/// A job serving its results folder over HTTP on a free port of its node; the port is
/// written to `port` in that folder once the server listens. `index.html` holds `token`.
fn http_job(name: &str, token: &str) -> JobSpec {
    let server = format!(
        "import http.server, os, socketserver\n\
         d = os.environ['SLURM_RUN_RESULTS_DIR']\n\
         open(os.path.join(d, 'index.html'), 'w').write('{token}')\n\
         os.chdir(d)\n\
         s = socketserver.TCPServer(('127.0.0.1', 0), http.server.SimpleHTTPRequestHandler)\n\
         open(os.path.join(d, 'port.tmp'), 'w').write(str(s.server_address[1]))\n\
         os.rename(os.path.join(d, 'port.tmp'), os.path.join(d, 'port'))\n\
         s.serve_forever()\n"
    );
    small_spec(
        name,
        &format!(
            "exec python3 -c {}",
            slurm_core::shell_quote(&server).unwrap()
        ),
    )
}

/// Poll the job until it is in `state`.
pub(crate) async fn wait_state<T: Transport + 'static>(
    b: &Over<T>,
    id: &JobId,
    state: JobState,
    secs: u64,
) -> JobRecord {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let status = b.status(id).await.unwrap();
        if status.state() == state {
            return status.into_record();
        }
        assert!(
            !status.state().is_terminal() && Instant::now() < deadline,
            "{id} is {} after waiting for {state}: {:?}",
            status.state(),
            status.record().history().last()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The port the job's server wrote, once it did.
async fn served_port<T: Transport + 'static>(b: &Over<T>, record: &JobRecord) -> u16 {
    let path = format!("{}/port", record.results_dir().as_str());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(text) = b.transport().read_file(&path).await {
            return String::from_utf8_lossy(&text).trim().parse().unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "the job's server never wrote {path}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Submit [`http_job`] named `name` serving `token`; its record once running, and the
/// port its server listens on.
async fn serving_job<T: Transport + 'static>(
    b: &Over<T>,
    name: &str,
    token: &str,
) -> (JobRecord, u16) {
    let record = b
        .submit(&http_job(name, token), SubmitOptions::default())
        .await
        .unwrap();
    let record = wait_state(b, record.id(), JobState::Running, 120).await;
    let port = served_port(b, &record).await;
    (record, port)
}

/// `GET /index.html` at `local`: the response's body, or the error.
fn fetch(local: SocketAddr) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(local)?;
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    stream.write_all(b"GET /index.html HTTP/1.0\r\nHost: job\r\n\r\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    match answer.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.0 200") => Ok(body.to_string()),
        _ => Err(std::io::Error::other(format!("not a page: {answer:?}"))),
    }
}

/// Forward into a job serving HTTP over `transport`: the page arrives through it, an
/// unknown role and a node the job lacks are refused; once the job is cancelled, the
/// forward carries nothing.
async fn forward_reaches_the_jobs_server<T: Transport + 'static>(transport: T, tag: &str) {
    let tb = testbed_env();
    let (b, _records) = backend_over(transport, &tb);
    let token = format!("served-by-the-job-{tag}");
    let (record, port) = serving_job(&b, &format!("forward-{tag}"), &token).await;
    let id = record.id().clone();

    let forward = b.forward(&id, &ForwardOptions::port(port)).await.unwrap();
    assert_eq!(forward.node(), record.nodes()[0]);
    assert!(forward.local().ip().is_loopback());
    let local = forward.local();
    // Twice: every connection gets its own channel.
    for _ in 0..2 {
        assert_eq!(fetch(local).unwrap(), token);
    }

    let refused = b
        .forward(
            &id,
            &ForwardOptions {
                node: NodeChoice::Index(5),
                ..ForwardOptions::port(port)
            },
        )
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("--node counts from 0 to 0"),
        "{refused}"
    );
    let refused = b
        .forward(
            &id,
            &ForwardOptions {
                node: NodeChoice::Role("trainer".into()),
                ..ForwardOptions::port(port)
            },
        )
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("has no roles"), "{refused}");

    b.cancel(&id).await.unwrap();
    wait_state(&b, &id, JobState::Canceled, 120).await;
    // The server is gone with the job: nothing comes back through the forward.
    let deadline = Instant::now() + Duration::from_secs(30);
    while fetch(local).is_ok() {
        assert!(
            Instant::now() < deadline,
            "the page still arrives after the job ended"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    drop(forward);
    let after = b
        .forward(&id, &ForwardOptions::port(port))
        .await
        .unwrap_err();
    assert!(after.to_string().contains("it has ended"), "{after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_over_ssh2_reaches_a_server_the_job_starts() {
    let _cluster = cluster::shared().await;
    forward_reaches_the_jobs_server(ssh2(&testbed_env()), "ssh2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_over_openssh_reaches_a_server_the_job_starts() {
    let _cluster = cluster::shared().await;
    forward_reaches_the_jobs_server(openssh(&testbed_env()), "openssh").await;
}

/// Run `argv` beside job `id`: (exit status, stdout, stderr).
async fn exec<T: Transport + 'static>(
    b: &Over<T>,
    id: &JobId,
    argv: &[&str],
) -> (i32, String, String) {
    let (sink, mut chunks) = tokio::sync::mpsc::unbounded_channel();
    let status = b
        .exec(id, &ExecOptions::new(argv.iter().copied()), sink)
        .await
        .unwrap();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    while let Ok(chunk) = chunks.try_recv() {
        match chunk {
            OutputChunk::Stdout(b) => out.extend(b),
            OutputChunk::Stderr(b) => err.extend(b),
        }
    }
    (
        status,
        String::from_utf8_lossy(&out).into(),
        String::from_utf8_lossy(&err).into(),
    )
}

/// Exec beside a sleeping job over `transport`, without and with a container.
async fn exec_beside_a_running_job<T: Transport + 'static>(
    transport: T,
    tag: &str,
    image: Option<String>,
) {
    let tb = testbed_env();
    let (b, _records) = backend_over(transport, &tb);
    let mut spec = small_spec(&format!("exec-{tag}"), "sleep 300");
    spec.image = image.clone();
    let record = b.submit(&spec, SubmitOptions::default()).await.unwrap();
    let id = record.id().clone();
    let record = wait_state(&b, &id, JobState::Running, 180).await;

    // The node's own name, as Slurm set it for the step; an argument with a space and a
    // quote reaches the command whole.
    let (status, out, err) = exec(
        &b,
        &id,
        &[
            "sh",
            "-c",
            "echo \"$SLURMD_NODENAME\"; echo \"$1\"",
            "sh",
            "it's one arg",
        ],
    )
    .await;
    assert_eq!(status, 0, "stderr: {err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines, [record.nodes()[0].as_str(), "it's one arg"], "{out}");
    if image.is_none() {
        // `hostname` itself (the tiny image has no such program): the login node's
        // name, as both test bed nodes live on this host.
        let (status, out, err) = exec(&b, &id, &["hostname"]).await;
        let here = Process::new("hostname").output().unwrap().stdout;
        assert_eq!(
            (status, out.trim()),
            (0, String::from_utf8_lossy(&here).trim()),
            "{err}"
        );
    }

    // A failing command: its status and its stderr come back.
    let (status, _, err) = exec(
        &b,
        &id,
        &["sh", "-c", "echo failing-on-purpose >&2; exit 7"],
    )
    .await;
    assert_eq!(status, 7);
    assert!(err.contains("failing-on-purpose"), "{err}");

    // Inside the job's container image, or on the node itself; in the job folder.
    let (status, out, err) = exec(
        &b,
        &id,
        &[
            "sh",
            "-c",
            "cat /etc/slurm-run-image 2>/dev/null || echo no-image; pwd",
        ],
    )
    .await;
    assert_eq!(status, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    let expected = if image.is_some() {
        "slurm-run/tiny:1"
    } else {
        "no-image"
    };
    assert_eq!(
        lines,
        [expected, record.results_dir().as_str()],
        "{out} {err}"
    );

    b.cancel(&id).await.unwrap();
    wait_state(&b, &id, JobState::Canceled, 120).await;
    let refused = b
        .exec(
            &id,
            &ExecOptions::new(["true"]),
            tokio::sync::mpsc::unbounded_channel().0,
        )
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("not RUNNING"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_over_ssh2_runs_beside_a_job_without_a_container() {
    let _cluster = cluster::shared().await;
    exec_beside_a_running_job(ssh2(&testbed_env()), "ssh2", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_over_openssh_runs_beside_a_job_in_its_container() {
    let _cluster = cluster::shared().await;
    let h = harness();
    with_credentials(&h).await;
    let image = registry_image(&h, "slurm-run/tiny:1");
    exec_beside_a_running_job(openssh(&testbed_env()), "openssh-image", Some(image)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_over_ssh2_runs_beside_a_job_in_its_container() {
    let _cluster = cluster::shared().await;
    let h = harness();
    with_credentials(&h).await;
    let image = registry_image(&h, "slurm-run/tiny:1");
    exec_beside_a_running_job(ssh2(&testbed_env()), "ssh2-image", Some(image)).await;
}

/// slurmctl's environment for the test bed, over `ssh` (`ssh2`, or `openssh` through
/// `master`), with records in `state`.
fn ctl_env(
    tb: &Testbed,
    state: &std::path::Path,
    master: Option<&Master>,
) -> Vec<(String, String)> {
    let mut env = tb.client_env(state);
    if let Some(master) = master {
        env.push(("SLURM_RUN_SSH".into(), "openssh".into()));
        env.push((
            "SLURM_SSH_CONTROL_PATH".into(),
            master.socket.display().to_string(),
        ));
    }
    env
}

/// Start slurmctl with `args` (stdout and stderr piped).
fn spawn_ctl(args: &[&str], env: &[(String, String)]) -> std::process::Child {
    let mut command = Process::new(example("slurmctl"));
    command
        .args(args)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for name in ["PATH", "HOME", "USER", "LANG"] {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command.envs(env.iter().cloned());
    command.spawn().unwrap()
}

/// Wait for `child` with a deadline; its exit code and stderr.
fn finish(mut child: std::process::Child, secs: u64) -> (i32, String) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (status.code().unwrap_or(-1), err);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("slurmctl did not end within {secs} s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Run `slurmctl` with `args` (a forward in text form): read the URL it prints, which
/// must be on 127.0.0.1, hand its `HOST:PORT` to `before`, then SIGINT it; it must say it
/// was interrupted and exit 130.
fn interrupted_forward(args: &[&str], env: &[(String, String)], before: impl FnOnce(&str)) {
    let mut child = spawn_ctl(args, env);
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let local = line
        .trim()
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("not a URL: {line:?}"));
    assert!(local.starts_with("127.0.0.1:"), "{line}");
    before(local);
    // SAFETY: a plain kill(2) of our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let (code, err) = finish(child, 60);
    assert_eq!(code, 130, "{err}");
    assert!(err.contains("interrupted"), "{err}");
}

/// `slurmctl forward` over `master` (OpenSSH) or ssh2: prints the URL (or the JSON
/// object), the page arrives through it, and it ends by itself when the job ends,
/// saying so; a second forward ended by SIGINT says it was interrupted; `--role` is
/// refused for a job without roles; `exec` streams and exits with the status.
async fn slurmctl_forward_and_exec(master: Option<Master>, tag: &str) {
    let tb = testbed_env();
    let state = tempfile::tempdir().unwrap();
    let env = ctl_env(&tb, state.path(), master.as_ref());
    // The job is submitted through the library into slurmctl's record folder.
    let config = SlurmConfig::builder()
        .with_env_from(tb.lookup())
        .with_state_dir(state.path())
        .with_poll_interval(Duration::from_millis(500))
        .build()
        .unwrap();
    let b = SlurmBackend::new(
        ssh2(&tb),
        HandlebarsRenderer::new(),
        FileRecordStore::new(state.path()).unwrap(),
        config,
    );
    let token = format!("slurmctl-forward-{tag}");
    let (record, port) = serving_job(&b, &format!("ctl-forward-{tag}"), &token).await;
    // The serving job never ends by itself: a failed assertion must not leave it holding
    // its GPUs for the tests after this one.
    let native = record.backend_ref().unwrap().native_id.clone();
    let _job_guard = CancelOnDrop(&tb, native);
    let id = record.id().to_string();
    let port = port.to_string();

    // --role on a job without roles: refused, naming the fix.
    let child = spawn_ctl(
        &["forward", &id, "--port", &port, "--role", "trainer"],
        &env,
    );
    let (code, err) = finish(child, 120);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("has no roles"), "{err}");

    // exec: output streamed, its status ours.
    let child = spawn_ctl(
        &["exec", &id, "--", "sh", "-c", "echo beside-the-job; exit 3"],
        &env,
    );
    let mut out = String::new();
    let mut child = child;
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let (code, err) = finish(child, 120);
    assert_eq!((code, out.trim()), (3, "beside-the-job"), "{err}");

    // A forward interrupted the moment it printed its URL (a person's Ctrl-C right away):
    // it already listens for SIGINT, so it still says so and exits 130 (it listened only
    // after printing, and a SIGINT in between killed it with no word: CI saw exit -1).
    interrupted_forward(&["forward", &id, "--port", &port], &env, |_| {});

    // A forward stopped by SIGINT once its page came through.
    interrupted_forward(&["forward", &id, "--port", &port], &env, |local| {
        assert_eq!(fetch(local.parse().unwrap()).unwrap(), token);
    });

    // A forward with --json and a local port of our choosing ends when the job does.
    let free = slurm_core::free_local_port().unwrap().to_string();
    let mut child = spawn_ctl(
        &[
            "forward",
            &id,
            "--port",
            &port,
            "--local",
            &free,
            "--json",
            "--interval",
            "1",
        ],
        &env,
    );
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let object: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(object["local"], format!("127.0.0.1:{free}"));
    assert_eq!(object["node"], record.nodes()[0].as_str());
    assert_eq!(object["port"].as_u64().unwrap().to_string(), port);
    assert_eq!(
        fetch(format!("127.0.0.1:{free}").parse().unwrap()).unwrap(),
        token
    );
    b.cancel(record.id()).await.unwrap();
    let (code, err) = finish(child, 120);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("ended (CANCELED)"), "{err}");
    drop(master);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurmctl_forward_and_exec_over_ssh2() {
    let _cluster = cluster::shared().await;
    slurmctl_forward_and_exec(None, "ssh2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurmctl_forward_and_exec_over_openssh() {
    let _cluster = cluster::shared().await;
    let master = Master::start(&testbed_env());
    slurmctl_forward_and_exec(Some(master), "openssh").await;
}

/// libssh2 opens one channel at a time per session: connections through a forward and
/// commands starting their shells on a fresh Ssh2 connection all at once each get the
/// channel they asked for (an echo through every connection, every command's own output).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_connections_and_new_shells_open_channels_side_by_side_over_ssh2() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _cluster = cluster::shared().await;
    let tb = testbed_env();
    let transport = std::sync::Arc::new(
        slurm_ssh::Ssh2Transport::new(
            slurm_run_testsupport::transports::ssh2_builder(&tb).with_sessions(1),
        )
        .unwrap(),
    );
    let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = server.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = server.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 8];
                if s.read_exact(&mut buf).await.is_ok() {
                    let _ = s.write_all(&buf).await;
                }
            });
        }
    });
    // The forward first (no shell yet), then commands and connections together.
    let forward = transport
        .forward(0, &slurm_core::ForwardTarget::new("127.0.0.1", port))
        .await
        .unwrap();
    let local = forward.local();
    let mut tasks = Vec::new();
    for i in 0..8u32 {
        let t = std::sync::Arc::clone(&transport);
        tasks.push(tokio::spawn(async move {
            let out = t
                .run(&slurm_core::Command::new("echo").arg(format!("command-{i}")))
                .await
                .unwrap();
            assert_eq!(out.stdout_text().trim(), format!("command-{i}"));
        }));
        tasks.push(tokio::spawn(async move {
            let word = format!("conn{i:04}");
            let mut c = tokio::net::TcpStream::connect(local).await.unwrap();
            c.write_all(word.as_bytes()).await.unwrap();
            let mut answer = Vec::new();
            tokio::time::timeout(Duration::from_secs(60), c.read_to_end(&mut answer))
                .await
                .expect("an answer through the forward")
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&answer), word);
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

/// `run_streamed` hands on output as it comes: the command's second line waits for a
/// file the test makes only once the first line arrived (a transport that answered at
/// the end would never see it: the command would time out).
async fn output_streams_before_the_command_ends<T: Transport>(t: &T) {
    // Its own gate per call: the ssh2 and OpenSSH cases run at once in one process, and
    // a gate shared by pid let one case's touch open the other's (its two lines then
    // came at once, stderr first).
    static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let gate = format!("/tmp/slurm-run-stream-gate-{}-{call}", std::process::id());
    let script = r#"echo first; i=0; while [ ! -e "$1" ] && [ "$i" -lt 600 ]; do sleep 0.1; i=$((i+1)); done; rm -f -- "$1"; echo second >&2; exit 4"#;
    let command = slurm_core::Command::new("bash")
        .args(["-c", script, "gate"])
        .arg(&gate)
        .timeout(Duration::from_secs(90));
    let (sink, mut chunks) = tokio::sync::mpsc::unbounded_channel();
    let run = t.run_streamed(&command, sink);
    tokio::pin!(run);
    let first = tokio::select! {
        chunk = chunks.recv() => chunk,
        done = &mut run => panic!("the command ended before its first line arrived: {done:?}"),
    };
    assert_eq!(first, Some(OutputChunk::Stdout(b"first\n".to_vec())));
    let touch = slurm_core::Command::new("touch").arg(&gate);
    assert!(t.run(&touch).await.unwrap().success());
    assert_eq!(run.await.unwrap(), 4);
    assert_eq!(
        chunks.recv().await,
        Some(OutputChunk::Stderr(b"second\n".to_vec()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_streams_over_ssh2_before_the_command_ends() {
    let _cluster = cluster::shared().await;
    output_streams_before_the_command_ends(&ssh2(&testbed_env())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_streams_over_openssh_before_the_command_ends() {
    let _cluster = cluster::shared().await;
    output_streams_before_the_command_ends(&openssh(&testbed_env())).await;
}
