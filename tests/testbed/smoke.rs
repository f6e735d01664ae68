//! Proof that the test bed is real: over SSH (ssh2, strict host keys) a two-node batch
//! job runs on two distinct slurmd nodes and accounting reports it COMPLETED.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use slurm_run::core::shell_quote;
use slurm_run_testsupport::{cluster, testbed_env, Testbed};
use ssh2::{CheckResult, KnownHostFileKind, Session};

fn connect(tb: &Testbed) -> Session {
    let var = |name: &str| tb.get(name).to_string();
    let hostport = var("SLURM_HOSTNAME");
    let (host, port) = hostport
        .rsplit_once(':')
        .expect("SLURM_HOSTNAME is host:port");
    let port: u16 = port.parse().unwrap();
    let tcp =
        TcpStream::connect((host, port)).expect("the test bed's sshd is not reachable: is it up?");
    let mut session = Session::new().unwrap();
    session.set_tcp_stream(tcp);
    session.handshake().unwrap();
    let mut known = session.known_hosts().unwrap();
    known
        .read_file(
            Path::new(&var("SSH_KNOWN_HOSTS")),
            KnownHostFileKind::OpenSSH,
        )
        .unwrap();
    let (key, _) = session.host_key().unwrap();
    assert!(
        matches!(known.check_port(host, port, key), CheckResult::Match),
        "host key of {hostport} does not match the test bed's known_hosts"
    );
    session
        .userauth_pubkey_file(
            &var("SLURM_USER"),
            None,
            Path::new(&var("SSH_KEY_PATH")),
            None,
        )
        .unwrap();
    assert!(session.authenticated());
    session
}

fn exec(session: &Session, command: &str, stdin: &[u8]) -> (i32, String, String) {
    let mut channel = session.channel_session().unwrap();
    channel.exec(command).unwrap();
    channel.write_all(stdin).unwrap();
    channel.send_eof().unwrap();
    let mut out = String::new();
    channel.read_to_string(&mut out).unwrap();
    let mut err = String::new();
    channel.stderr().read_to_string(&mut err).unwrap();
    channel.wait_close().unwrap();
    (channel.exit_status().unwrap(), out, err)
}

#[test]
fn two_node_job_runs_on_two_nodes_and_is_accounted() {
    let _cluster = cluster::shared_blocking();
    let tb = testbed_env();
    let session = connect(&tb);
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = format!("{}/smoke-{stamp}", tb.get("SLURM_BASE_RESULTS_DIR"));
    let dir = shell_quote(&dir).unwrap();
    let script =
        "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --time=00:05:00\n\
                  srun bash -c 'echo \"rank=$SLURM_PROCID node=$SLURMD_NODENAME\"'\n";
    let (status, _, err) = exec(
        &session,
        &format!("mkdir -p {dir} && cat > {dir}/job.sbatch"),
        script.as_bytes(),
    );
    assert_eq!(status, 0, "staging failed: {err}");
    let (status, out, err) = exec(
        &session,
        &format!("cd {dir} && sbatch --parsable --output={dir}/out.txt job.sbatch"),
        b"",
    );
    assert_eq!(status, 0, "sbatch failed: {err}");
    let job_id: u64 = out
        .trim()
        .parse()
        .expect("sbatch --parsable printed a job id");

    let deadline = Instant::now() + Duration::from_secs(120);
    let state = loop {
        let (_, out, _) = exec(
            &session,
            &format!("sacct -X -n -P -j {job_id} -o State"),
            b"",
        );
        let state = out.trim().to_string();
        if matches!(state.split_whitespace().next(), Some(s) if !matches!(s, "PENDING" | "RUNNING" | "COMPLETING" | ""))
        {
            break state;
        }
        assert!(
            Instant::now() < deadline,
            "job {job_id} still {state:?} after 120 s"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(state, "COMPLETED");

    let (status, out, err) = exec(&session, &format!("cat {dir}/out.txt"), b"");
    assert_eq!(status, 0, "no job output: {err}");
    let mut lines: Vec<&str> = out.lines().filter(|l| l.starts_with("rank=")).collect();
    lines.sort();
    assert_eq!(lines.len(), 2, "expected one line per node, got {out:?}");
    assert!(lines[0].starts_with("rank=0 node="), "{lines:?}");
    assert!(lines[1].starts_with("rank=1 node="), "{lines:?}");
    let node = |l: &str| l.split("node=").nth(1).unwrap().to_string();
    assert_ne!(node(lines[0]), node(lines[1]), "both ranks ran on one node");
}
