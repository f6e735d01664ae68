//! The chaos of the soak: kill the test bed's sshd processes serving our connections (at
//! a random moment, or just after a submit went out so that sbatch is in flight), or arm
//! a lost or empty answer on the next submit.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use slurm_core::testing::Fault;
use slurm_run_testsupport::Harness;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// What the chaos task did.
#[derive(Default)]
pub struct ChaosLog {
    /// Connections killed.
    pub kills: usize,
    /// Times every connection was killed just after a submit began.
    pub aimed: usize,
    /// Times none of our connections was found to kill.
    pub no_target: usize,
    /// Lost answers armed on the next submit.
    pub armed_lose: usize,
    /// Empty answers armed on the next submit.
    pub armed_empty: usize,
    /// kill(2) failures.
    pub kill_errors: Vec<String>,
}

fn ppid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Socket inodes among the open descriptors of `pid` (`self` for this process).
fn socket_inodes(pid: &str) -> HashSet<u64> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return HashSet::new();
    };
    dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|target| {
            let text = target.to_string_lossy().into_owned();
            text.strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}

/// (local port, remote port, inode) of every TCP socket in this network namespace.
fn tcp_sockets() -> Vec<(u16, u16, u64)> {
    let mut sockets = Vec::new();
    for file in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 10 {
                continue;
            }
            let port = |addr: &str| {
                addr.rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok())
            };
            if let (Some(local), Some(remote), Ok(inode)) =
                (port(fields[1]), port(fields[2]), fields[9].parse::<u64>())
            {
                if inode != 0 {
                    sockets.push((local, remote, inode));
                }
            }
        }
    }
    sockets
}

/// The sshd processes serving this process's connections to `port`: for each, the
/// per-connection monitor (a child of the listener) and its child, the session
/// process. Found through the TCP sockets both ends hold; the listener never matches.
pub fn our_sshd_sessions(listener: u32, port: u16) -> Vec<(u32, u32)> {
    let ours = socket_inodes("self");
    let sockets = tcp_sockets();
    let client_ports: HashSet<u16> = sockets
        .iter()
        .filter(|(_, remote, inode)| *remote == port && ours.contains(inode))
        .map(|(local, _, _)| *local)
        .collect();
    let server_inodes: HashSet<u64> = sockets
        .iter()
        .filter(|(local, remote, _)| *local == port && client_ports.contains(remote))
        .map(|(_, _, inode)| *inode)
        .collect();
    if server_inodes.is_empty() {
        return Vec::new();
    }
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .expect("read /proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    let mut found = Vec::new();
    for &monitor in &pids {
        if monitor == listener || ppid(monitor) != Some(listener) {
            continue;
        }
        if socket_inodes(&monitor.to_string()).is_disjoint(&server_inodes) {
            continue;
        }
        if let Some(&child) = pids.iter().find(|p| ppid(**p) == Some(monitor)) {
            found.push((monitor, child));
        }
    }
    found
}

/// Kill one of our connections' sshd processes.
fn kill_one(listener: u32, port: u16, chaos: &Mutex<ChaosLog>) {
    let sessions = our_sshd_sessions(listener, port);
    if sessions.is_empty() {
        chaos.lock().expect("chaos lock").no_target += 1;
        return;
    }
    let pick = sessions[rand::rng().random_range(0..sessions.len())];
    kill_session(listener, pick, chaos);
}

/// Kill one connection's sshd processes (the session child, then its monitor), after
/// checking again that they still descend from the listener and are not it.
fn kill_session(listener: u32, (monitor, child): (u32, u32), chaos: &Mutex<ChaosLog>) {
    if monitor == listener
        || child == listener
        || ppid(monitor) != Some(listener)
        || ppid(child) != Some(monitor)
    {
        chaos.lock().expect("chaos lock").no_target += 1;
        return;
    }
    // SAFETY: kill(2) on pids just verified to serve only one of our connections.
    let rc = unsafe { libc::kill(child as libc::pid_t, libc::SIGKILL) };
    let mut log = chaos.lock().expect("chaos lock");
    if rc != 0 {
        log.kill_errors
            .push(format!("kill {child}: {}", std::io::Error::last_os_error()));
        return;
    }
    // The monitor may already have exited after its child.
    // SAFETY: as above.
    unsafe { libc::kill(monitor as libc::pid_t, libc::SIGKILL) };
    log.kills += 1;
}

/// The chaos task, running until [`Chaos::stop`].
pub struct Chaos {
    stop: Arc<AtomicBool>,
    task: JoinHandle<()>,
    log: Arc<Mutex<ChaosLog>>,
}

impl Chaos {
    /// Start it on the connections of `h` to the sshd `listener` on `port`; `submit_began`
    /// is notified as each submit starts (for the aimed kills).
    pub fn start(h: Arc<Harness>, listener: u32, port: u16, submit_began: Arc<Notify>) -> Chaos {
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(ChaosLog::default()));
        let task = tokio::spawn({
            let stop = Arc::clone(&stop);
            let chaos = Arc::clone(&log);
            async move {
                while !stop.load(Ordering::SeqCst) {
                    let (pause, roll, lag) = {
                        let mut rng = rand::rng();
                        (
                            rng.random_range(500..3000u64),
                            rng.random_range(0..10u32),
                            rng.random_range(0..40u64),
                        )
                    };
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let faults = h.transport.inner();
                    match roll {
                        0 => {
                            faults.arm("submit ", Fault::LoseAnswerAfterRun);
                            chaos.lock().expect("chaos lock").armed_lose += 1;
                        }
                        1 => {
                            faults.arm("submit ", Fault::EmptyStdout);
                            chaos.lock().expect("chaos lock").armed_empty += 1;
                        }
                        2..=5 => kill_one(listener, port, &chaos),
                        _ => {
                            // Aimed: find our sessions first, wait for a submit to start,
                            // then kill every one of them (whichever carries the sbatch).
                            let sessions = our_sshd_sessions(listener, port);
                            let began = tokio::time::timeout(
                                Duration::from_secs(3),
                                submit_began.notified(),
                            )
                            .await;
                            if began.is_ok() && !sessions.is_empty() {
                                tokio::time::sleep(Duration::from_millis(lag)).await;
                                chaos.lock().expect("chaos lock").aimed += 1;
                                for session in sessions {
                                    kill_session(listener, session, &chaos);
                                }
                            } else {
                                kill_one(listener, port, &chaos);
                            }
                        }
                    }
                }
            }
        });
        Chaos { stop, task, log }
    }

    /// Stop the task; what it did.
    pub async fn stop(self) -> ChaosLog {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("the chaos task panicked");
        std::mem::take(&mut *self.log.lock().expect("chaos lock"))
    }
}
