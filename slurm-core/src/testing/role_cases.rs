//! The Backend conformance suite's cases for multi-role jobs: roles find each other by
//! the exported hosts; one role failing ends the job ERROR naming it (its siblings
//! stopped); a role ending 0 while others run is fine; cancel stops every role; each
//! role has its own logs, tailed and followed.

use std::collections::BTreeMap;
use std::time::Instant;

use futures::StreamExt;

use crate::backend::{LogOptions, LogStream};
use crate::classify::ErrorClass;
use crate::spec::{JobSpec, RoleSpec};
use crate::state::JobState;

use super::backend_suite::{submit, wait_terminal, wait_until, BackendFixture};

/// A multi-role job of `roles` (name, command, `on`) for `fixture`: its small job's
/// resources on each role of its own, its other keys (time, partition) on the job.
pub fn multi_role_spec<F: BackendFixture + ?Sized>(
    fixture: &F,
    name: &str,
    roles: &[(&str, &str, Option<&str>)],
) -> JobSpec {
    let mut spec = fixture.spec(name, "unused");
    spec.command = String::new();
    let template = RoleSpec {
        nodes: spec.nodes.take(),
        gpus: spec.gpus.take(),
        gpus_per_node: spec.gpus_per_node.take(),
        cpus_per_task: spec.cpus_per_task.take(),
        memory: spec.memory.take(),
        ..RoleSpec::default()
    };
    spec.roles = roles
        .iter()
        .map(|(role, command, on)| {
            let role_spec = match on {
                None => RoleSpec {
                    command: command.to_string(),
                    ..template.clone()
                },
                Some(host) => RoleSpec {
                    command: command.to_string(),
                    on: Some(host.to_string()),
                    cpus_per_task: template.cpus_per_task,
                    ..RoleSpec::default()
                },
            };
            (role.to_string(), role_spec)
        })
        .collect::<BTreeMap<_, _>>();
    spec
}

/// A server that listens on a free port (written to `port` in its working folder, the
/// job folder), answers one line, and a client that finds it by
/// `SLURM_RUN_ROLE_SERVER_HOST` alone: the roles talk over TCP.
pub const TCP_SERVER: &str = r#"python3 - <<'PY'
import os, socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 0))
s.listen(1)
with open("port.tmp", "w") as f:
    f.write(str(s.getsockname()[1]))
os.rename("port.tmp", "port")
s.settimeout(120)
c, _ = s.accept()
line = c.makefile().readline().strip()
print("server got:", line, "as", os.environ["SLURM_RUN_ROLE"], flush=True)
c.sendall(("pong " + line + "\n").encode())
c.close()
PY"#;

/// The client of [`TCP_SERVER`]: waits for the port file (two minutes at most), then
/// connects to the server role's host with bash's `/dev/tcp`.
pub const TCP_CLIENT: &str = r#"for _ in $(seq 1 600); do [ -s port ] && break; sleep 0.2; done
port=$(cat port)
exec 3<>"/dev/tcp/$SLURM_RUN_ROLE_SERVER_HOST/$port"
echo "ping from $SLURM_RUN_ROLE rank $SLURM_RUN_ROLE_RANK" >&3
read -r reply <&3
echo "client got: $reply""#;

/// Two roles find each other by the exported hosts and talk over TCP; each sees its
/// name, its rank and every role's hosts; the job ends COMPLETE with both roles.
pub async fn roles_find_each_other_by_the_exported_hosts<F: BackendFixture + ?Sized>(fixture: &F) {
    let _guard = fixture.enter(false).await;
    let spec = multi_role_spec(
        fixture,
        "conf-roles-tcp",
        &[("server", TCP_SERVER, None), ("client", TCP_CLIENT, None)],
    );
    let record = submit(fixture, &spec).await;
    let done = wait_terminal(fixture, &record.id).await;
    assert_eq!(done.state(), JobState::Complete, "{done:?}");
    let roles = done.record.roles();
    assert_eq!(roles.keys().collect::<Vec<_>>(), ["client", "server"]);
    for (name, role) in roles {
        assert_eq!(role.state(), JobState::Complete, "{name}: {done:?}");
        assert!(!role.nodes().is_empty(), "{name} names its nodes: {done:?}");
    }
    let log = |role: &str| LogOptions::of(LogStream::Out).role(role);
    let server = fixture
        .backend()
        .logs(&record.id, log("server"))
        .await
        .unwrap();
    assert!(
        server.contains("server got: ping from client rank 0 as server"),
        "{server:?}"
    );
    let client = fixture
        .backend()
        .logs(&record.id, log("client"))
        .await
        .unwrap();
    assert!(
        client.contains("client got: pong ping from client rank 0"),
        "{client:?}"
    );
}

/// The first role to fail ends the job ERROR naming it, with its exit status; the role
/// still running is stopped (CANCELED), and a role that had ended 0 stays COMPLETE.
pub async fn one_role_failing_ends_the_job_naming_it<F: BackendFixture + ?Sized>(fixture: &F) {
    let _guard = fixture.enter(false).await;
    let spec = multi_role_spec(
        fixture,
        "conf-roles-fail",
        &[
            ("quick", "echo quick-done", None),
            (
                "bad",
                "for _ in $(seq 1 600); do [ -e steady-up ] && break; sleep 0.2; done; sleep 2; echo 'ValueError: bad reward' >&2; exit 3",
                None,
            ),
            ("steady", "touch steady-up; sleep 300", Some("quick")),
        ],
    );
    let record = submit(fixture, &spec).await;
    let done = wait_terminal(fixture, &record.id).await;
    assert_eq!(done.state(), JobState::Error, "{done:?}");
    assert_eq!(done.err_class(), Some(ErrorClass::Program), "{done:?}");
    let roles = done.record.roles();
    assert_eq!(roles["bad"].state(), JobState::Error, "{done:?}");
    assert_eq!(roles["steady"].state(), JobState::Canceled, "{done:?}");
    assert_eq!(roles["quick"].state(), JobState::Complete, "{done:?}");
    assert!(
        done.record.last_message().contains("bad"),
        "the job's end names the failed role: {done:?}"
    );
    let native = done.native.clone().expect("the scheduler's words");
    assert_eq!(native.exit_code, Some(3), "{done:?}");
}

/// A cancel stops every role, running or not.
pub async fn cancel_stops_every_role<F: BackendFixture + ?Sized>(fixture: &F) {
    let _guard = fixture.enter(false).await;
    let spec = multi_role_spec(
        fixture,
        "conf-roles-cancel",
        &[("a", "sleep 300", None), ("b", "sleep 300", Some("a"))],
    );
    let record = submit(fixture, &spec).await;
    wait_until(fixture, &record.id, "RUNNING", |s| {
        s.state() == JobState::Running
    })
    .await;
    let cancelled = fixture.backend().cancel(&record.id).await.unwrap();
    assert_eq!(cancelled.state(), JobState::Canceled, "{cancelled:?}");
    for (name, role) in cancelled.roles() {
        assert_eq!(role.state(), JobState::Canceled, "{name}: {cancelled:?}");
    }
}

/// Each role's logs are its own: tailed by name (an unknown role is refused, naming
/// the roles), and followed until the job ends.
pub async fn each_role_has_its_own_logs<F: BackendFixture + ?Sized>(fixture: &F) {
    let _guard = fixture.enter(false).await;
    let spec = multi_role_spec(
        fixture,
        "conf-roles-logs",
        &[
            (
                "left",
                "echo left-out; echo left-err >&2; sleep 2; echo left-late",
                None,
            ),
            ("right", "echo right-out", Some("left")),
        ],
    );
    let record = submit(fixture, &spec).await;
    let backend = fixture.backend();
    let mut stream = backend.follow_logs(
        &record.id,
        LogOptions::of(LogStream::Out).role("left"),
        fixture.poll_interval(),
    );
    let mut followed = String::new();
    let deadline = Instant::now() + fixture.deadline();
    while let Some(chunk) = tokio::time::timeout_at(deadline.into(), stream.next())
        .await
        .unwrap_or_else(|_| panic!("following {} never ended; got {followed:?}", record.id))
    {
        followed.push_str(&chunk.unwrap());
    }
    assert_eq!(
        followed.lines().collect::<Vec<_>>(),
        ["left-out", "left-late"],
        "{followed:?}"
    );
    let done = wait_terminal(fixture, &record.id).await;
    assert_eq!(done.state(), JobState::Complete, "{done:?}");
    let id = &record.id;
    let read = |role: &str, stream: LogStream| {
        let options = LogOptions::of(stream).role(role);
        async move { backend.logs(id, options).await }
    };
    let right = read("right", LogStream::Out).await.unwrap();
    assert_eq!(
        right.lines().collect::<Vec<_>>(),
        ["right-out"],
        "{right:?}"
    );
    let left_err = read("left", LogStream::Err).await.unwrap();
    assert!(
        left_err.contains("left-err") && !left_err.contains("left-out"),
        "{left_err:?}"
    );
    let unknown = read("middle", LogStream::Out).await.unwrap_err();
    assert!(
        unknown.to_string().contains("left, right"),
        "the refusal names the roles: {unknown}"
    );
}
