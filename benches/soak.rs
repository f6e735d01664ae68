//! The soak: many small jobs submitted and watched through `Ssh2Transport` while a chaos
//! task kills the sshd processes serving our connections and injects lost answers; at the
//! end, exactly-once and consistency invariants are checked against squeue and sacct.
//!
//! `make soak` (brings the test bed up, then `SLURM_RUN_SOAK=1 cargo bench --bench soak`;
//! without `SLURM_RUN_SOAK` the bench does nothing, so `make bench` stays short). Bounded by
//! `SLURM_RUN_SOAK_JOBS` submits (default 300) and `SLURM_RUN_SOAK_SECONDS` of submitting
//! (default 600), whichever comes first; the drain and the checks after it are bounded too.
//! Prints one PASS/FAIL line per invariant and exits non-zero on any FAIL. Built but not
//! run by `cargo test --all-targets` (it does nothing without `--bench`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use rand::Rng;
use slurm_core::backend::{Backend, SubmitOptions, WatchEvent, WatchOptions};
use slurm_core::record::RecordFilter;
use slurm_core::testing::Fault;
use slurm_core::transport::{Command, Transport};
use slurm_core::{ErrorKind, JobId, JobState};
use slurm_run_testsupport::backend;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// Jobs in flight at once: a submitter waits for a free slot, and a slot frees when
/// the watch sees its job end (or its submit fail).
const CONCURRENCY: usize = 8;
/// Share of jobs whose command ends with `exit 1`.
const FAILING_SHARE: f64 = 0.2;
/// How long the watches may take to drain after the last submit.
const DRAIN_LIMIT: Duration = Duration::from_secs(300);
/// How long the final checks wait for sacct to catch up.
const VERIFY_LIMIT: Duration = Duration::from_secs(120);
/// Growth of open file descriptors and threads tolerated between start and end.
const FD_SLACK: usize = 16;
const THREAD_SLACK: usize = 4;

/// How much the soak does, from the environment.
struct Settings {
    jobs: usize,
    seconds: u64,
}

impl Settings {
    fn from_env() -> Settings {
        let read = |name: &str, default: u64| -> u64 {
            match std::env::var(name) {
                Ok(v) => v.trim().parse().unwrap_or_else(|_| {
                    panic!("{name}={v:?} is not a whole number; unset it or give e.g. {default}")
                }),
                Err(_) => default,
            }
        };
        Settings {
            jobs: read("SLURM_RUN_SOAK_JOBS", 300) as usize,
            seconds: read("SLURM_RUN_SOAK_SECONDS", 600),
        }
    }
}

/// Counts the library's log events by message (reconnects, reconciles, back-offs).
#[derive(Clone, Default)]
struct EventCounts(Arc<Mutex<BTreeMap<String, u64>>>);

struct MessageOf(String);

impl Visit for MessageOf {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0 = value.to_string();
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for EventCounts {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let target = event.metadata().target();
        if !(target.starts_with("slurm_ssh") || target.starts_with("slurm_core")) {
            return;
        }
        let mut message = MessageOf(String::new());
        event.record(&mut message);
        *self
            .0
            .lock()
            .expect("counts lock")
            .entry(message.0)
            .or_default() += 1;
    }
}

impl EventCounts {
    fn get(&self, message: &str) -> u64 {
        self.0
            .lock()
            .expect("counts lock")
            .get(message)
            .copied()
            .unwrap_or(0)
    }
}

/// What one submit gave.
struct Submitted {
    name: String,
    expect_failure: bool,
    took: Duration,
    result: Result<(JobId, Option<u64>), (ErrorKind, String)>,
}

/// What the watches saw.
#[derive(Default)]
struct WatchLog {
    /// Terminal transitions reported per record.
    terminal_reports: HashMap<JobId, u32>,
    transitions: usize,
    /// Errors a watch ended with (a lasting error; transient ones only back off).
    ended_with: Vec<String>,
    /// Watches started again on records a previous watch left unfinished.
    restarts: usize,
    /// Records still not terminal when the drain limit passed.
    abandoned: usize,
}

/// What the chaos task did.
#[derive(Default)]
struct ChaosLog {
    /// Connections killed.
    kills: usize,
    /// Times every connection was killed just after a submit began.
    aimed: usize,
    no_target: usize,
    armed_lose: usize,
    armed_empty: usize,
    kill_errors: Vec<String>,
}

/// The SLURM job id a record holds.
fn slurm_id(backend_ref: &slurm_core::record::BackendRef) -> u64 {
    backend_ref.native_id.parse().expect("a SLURM job id")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn count_dir(path: &str) -> usize {
    std::fs::read_dir(path)
        .map(|d| d.count())
        .unwrap_or_else(|e| panic!("read {path}: {e}"))
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
fn our_sshd_sessions(listener: u32, port: u16) -> Vec<(u32, u32)> {
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

/// Follow `ids` with `Backend::watch` until each is terminal or `until` passes; a watch
/// that ends early (a lasting error) is counted and started again on what is left.
async fn follow(
    h: Arc<backend::Harness>,
    mut ids: Vec<JobId>,
    log: Arc<Mutex<WatchLog>>,
    until: Arc<Mutex<Option<tokio::time::Instant>>>,
    slots: Slots,
) {
    let options = WatchOptions {
        interval: Duration::from_secs(1),
        retry: None,
        max_backoff: Duration::from_secs(8),
    };
    loop {
        let mut stream = h.backend.watch(&ids, options.clone());
        loop {
            let limit = *until.lock().expect("until lock");
            let next = match limit {
                Some(at) => match tokio::time::timeout_at(at, stream.next()).await {
                    Ok(next) => next,
                    Err(_) => break,
                },
                None => stream.next().await,
            };
            let Some(item) = next else { break };
            let mut log = log.lock().expect("watch lock");
            match item {
                Ok(WatchEvent::Transition { status, .. }) => {
                    log.transitions += 1;
                    if status.state().is_terminal() {
                        *log.terminal_reports.entry(status.id().clone()).or_default() += 1;
                        slots.lock().expect("slots lock").remove(status.id());
                    }
                }
                Ok(WatchEvent::Retried { .. }) => {}
                Err(error) => log.ended_with.push(format!("{:?}: {error}", error.kind())),
            }
        }
        ids.retain(|id| {
            h.backend
                .record(id)
                .map(|r| !r.state.is_terminal())
                .unwrap_or(true)
        });
        {
            let mut slots = slots.lock().expect("slots lock");
            for id in &ids {
                // Ended without a reported transition (counted by the checks): free its slot.
                if h.backend.record(id).is_ok_and(|r| r.state.is_terminal()) {
                    slots.remove(id);
                }
            }
        }
        if ids.is_empty() {
            return;
        }
        let expired = until
            .lock()
            .expect("until lock")
            .is_some_and(|at| tokio::time::Instant::now() >= at);
        let mut log = log.lock().expect("watch lock");
        if expired {
            log.abandoned += ids.len();
            let mut slots = slots.lock().expect("slots lock");
            for id in &ids {
                slots.remove(id);
            }
            return;
        }
        log.restarts += 1;
    }
}

/// The in-flight slot each submitted job holds until the watch sees it end.
type Slots = Arc<Mutex<HashMap<JobId, tokio::sync::OwnedSemaphorePermit>>>;

/// One SLURM job as squeue or sacct printed it.
#[derive(Debug, Clone)]
struct Row {
    job: u64,
    name: String,
    state: String,
    from_sacct: bool,
}

/// What the cluster says about our names.
struct ClusterView {
    /// Job ids per record name, from `squeue --name` and `sacct --name`.
    by_name: BTreeMap<String, BTreeSet<u64>>,
    /// Every job of the user whose name starts with the soak's prefix (squeue --me, sacct).
    prefixed: BTreeMap<u64, String>,
    /// sacct's state of each job (its last row).
    sacct_state: HashMap<u64, String>,
}

/// `$1` sacct start time, then chunks of comma-separated names: squeue and sacct by
/// name for each chunk, then every job of the user (for the prefix check).
const VERIFY_SCRIPT: &str = r#"start=$1; shift
for chunk in "$@"; do
  echo '#name-squeue'
  squeue --noheader --states=all --format='%i|%j|%T' --name="$chunk" || exit 1
  echo '#name-sacct'
  sacct --noheader -X --parsable2 --starttime="$start" --format=JobIDRaw,JobName,State --name="$chunk" || exit 1
done
echo '#all-squeue'
squeue --me --noheader --states=all --format='%i|%j|%T' || exit 1
echo '#all-sacct'
sacct --noheader -X --parsable2 --starttime="$start" --format=JobIDRaw,JobName,State || exit 1"#;

async fn cluster_view(
    h: &backend::Harness,
    start: &str,
    names: &[String],
    prefix: &str,
) -> Result<ClusterView, String> {
    let mut args = vec![start.to_string()];
    for chunk in names.chunks(60) {
        args.push(chunk.join(","));
    }
    let command = Command::bash_script(VERIFY_SCRIPT, args).timeout(Duration::from_secs(120));
    let output = h.transport.run(&command).await.map_err(|e| e.to_string())?;
    if !output.success() {
        return Err(format!(
            "verify query exited {}: {}",
            output.status,
            output.stderr_text().trim()
        ));
    }
    let mut section = String::new();
    let mut by_name: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    let mut prefixed = BTreeMap::new();
    let mut sacct_state = HashMap::new();
    for line in output.stdout_text().lines() {
        let line = line.trim();
        if let Some(s) = line.strip_prefix('#') {
            section = s.to_string();
            continue;
        }
        let fields: Vec<&str> = line.split('|').collect();
        if fields.len() < 3 {
            continue;
        }
        let Ok(job) = fields[0].parse::<u64>() else {
            continue;
        };
        let row = Row {
            job,
            name: fields[1].to_string(),
            state: fields[2].to_string(),
            from_sacct: section.ends_with("sacct"),
        };
        if row.from_sacct {
            sacct_state.insert(row.job, row.state.clone());
        }
        if section.starts_with("name-") {
            by_name.entry(row.name.clone()).or_default().insert(row.job);
        } else if row.name.starts_with(prefix) {
            prefixed.insert(row.job, row.name.clone());
        }
    }
    Ok(ClusterView {
        by_name,
        prefixed,
        sacct_state,
    })
}

/// Collects PASS/FAIL lines.
#[derive(Default)]
struct Verdicts {
    failed: usize,
}

impl Verdicts {
    fn check(&mut self, ok: bool, what: &str, detail: impl fmt::Display) {
        if !ok {
            self.failed += 1;
        }
        println!("{} {what}: {detail}", if ok { "PASS" } else { "FAIL" });
    }
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return; // built by `cargo test --all-targets`; runs only under `cargo bench`
    }
    if !std::env::var("SLURM_RUN_SOAK").is_ok_and(|v| !v.is_empty() && v != "0") {
        // `cargo bench --workspace` (make bench) runs every bench; the soak takes minutes
        // and kills connections, so it runs only when asked for.
        println!("soak not run: use `make soak` (or SLURM_RUN_SOAK=1 cargo bench --bench soak)");
        return;
    }
    let settings = Settings::from_env();
    let counts = EventCounts::default();
    let log_path = std::env::temp_dir().join(format!("slurm-run-soak-{}.log", std::process::id()));
    let log_file = std::fs::File::create(&log_path).expect("create the soak log");
    let subscriber = tracing_subscriber::registry().with(counts.clone()).with(
        tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(Mutex::new(log_file))
            .with_filter(tracing_subscriber::filter::LevelFilter::INFO),
    );
    tracing::subscriber::set_global_default(subscriber).expect("install the soak's logger");

    let h = Arc::new(backend::harness());
    let listener: u32 = std::fs::read_to_string(h.testbed.sshd_pid_file())
        .expect("the test bed's sshd pid file")
        .trim()
        .parse()
        .expect("a pid in sshd.pid");
    let port = h.testbed.ssh_port();
    let ssh = h.transport.inner().inner();
    ssh.connect().await.expect("connect to the test bed");
    let start_out = h
        .transport
        .run(&Command::new("date").arg("+%Y-%m-%dT%H:%M:%S"))
        .await
        .expect("remote date");
    let remote_start = start_out.stdout_text().trim().to_string();
    let tag = format!("{:06x}", rand::random::<u32>() & 0x00ff_ffff);
    let prefix = format!("soak-{tag}-");
    let fds_start = count_dir("/proc/self/fd");
    let threads_start = count_dir("/proc/self/task");
    let our_sessions = our_sshd_sessions(listener, port).len();
    println!(
        "soak {prefix}*: up to {} jobs or {} s of submitting, {CONCURRENCY} at a time, chaos on; \
         {our_sessions} connection(s) found serving us; library log in {}",
        settings.jobs,
        settings.seconds,
        log_path.display()
    );

    // Chaos: kill a connection's sshd (at a random moment, or just after a submit went
    // out so that sbatch is in flight), or arm a lost answer on the next submit.
    let stop_chaos = Arc::new(AtomicBool::new(false));
    let submit_began = Arc::new(tokio::sync::Notify::new());
    let chaos = Arc::new(Mutex::new(ChaosLog::default()));
    let chaos_task = tokio::spawn({
        let stop = Arc::clone(&stop_chaos);
        let chaos = Arc::clone(&chaos);
        let h = Arc::clone(&h);
        let submit_began = Arc::clone(&submit_began);
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
                        let began =
                            tokio::time::timeout(Duration::from_secs(3), submit_began.notified())
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

    // Watches: records are batched as they come and each batch is followed to the end.
    let watch_log = Arc::new(Mutex::new(WatchLog::default()));
    let watch_until: Arc<Mutex<Option<tokio::time::Instant>>> = Arc::new(Mutex::new(None));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<JobId>();
    let slots: Slots = Arc::default();
    let free = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    let collector = tokio::spawn({
        let h = Arc::clone(&h);
        let log = Arc::clone(&watch_log);
        let until = Arc::clone(&watch_until);
        let slots = Arc::clone(&slots);
        async move {
            let mut watches = tokio::task::JoinSet::new();
            while let Some(first) = rx.recv().await {
                let mut batch = vec![first];
                let close = tokio::time::Instant::now() + Duration::from_millis(500);
                while batch.len() < 16 {
                    match tokio::time::timeout_at(close, rx.recv()).await {
                        Ok(Some(id)) => batch.push(id),
                        _ => break,
                    }
                }
                watches.spawn(follow(
                    Arc::clone(&h),
                    batch,
                    Arc::clone(&log),
                    Arc::clone(&until),
                    Arc::clone(&slots),
                ));
            }
            while watches.join_next().await.is_some() {}
        }
    });

    // Submitters.
    let started = Instant::now();
    let deadline = started + Duration::from_secs(settings.seconds);
    let next = Arc::new(AtomicUsize::new(0));
    let outcomes = Arc::new(Mutex::new(Vec::<Submitted>::new()));
    let mut submitters = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY {
        let h = Arc::clone(&h);
        let next = Arc::clone(&next);
        let outcomes = Arc::clone(&outcomes);
        let tx = tx.clone();
        let prefix = prefix.clone();
        let slots = Arc::clone(&slots);
        let free = Arc::clone(&free);
        let submit_began = Arc::clone(&submit_began);
        let jobs = settings.jobs;
        submitters.spawn(async move {
            loop {
                let wait = tokio::time::Instant::from_std(deadline);
                let Ok(Ok(slot)) =
                    tokio::time::timeout_at(wait, Arc::clone(&free).acquire_owned()).await
                else {
                    break;
                };
                let n = next.fetch_add(1, Ordering::SeqCst);
                if n >= jobs {
                    break;
                }
                let (gpus, fail) = {
                    let mut rng = rand::rng();
                    (rng.random_range(0..2u32), rng.random_bool(FAILING_SHARE))
                };
                let name = format!("{prefix}{n}");
                let command = if fail {
                    "sleep $((RANDOM % 3)); exit 1"
                } else {
                    "sleep $((RANDOM % 3))"
                };
                let mut spec = backend::small_spec(&name, command);
                spec.gpus_per_node = Some(gpus);
                let began = Instant::now();
                submit_began.notify_waiters();
                let result = h.backend.submit(&spec, SubmitOptions::default()).await;
                let took = began.elapsed();
                let result = match result {
                    Ok(record) => {
                        slots
                            .lock()
                            .expect("slots lock")
                            .insert(record.id.clone(), slot);
                        let _ = tx.send(record.id.clone());
                        Ok((record.id.clone(), record.backend_ref.map(|r| slurm_id(&r))))
                    }
                    Err(error) => Err((error.kind(), error.to_string())),
                };
                outcomes.lock().expect("outcomes lock").push(Submitted {
                    name,
                    expect_failure: fail,
                    took,
                    result,
                });
            }
        });
    }
    drop(tx);
    while let Some(joined) = submitters.join_next().await {
        joined.expect("a submitter panicked");
    }
    let submit_phase = started.elapsed();
    println!(
        "submitted {} in {:.0} s; draining the watches (at most {} s)",
        outcomes.lock().expect("outcomes lock").len(),
        submit_phase.as_secs_f64(),
        DRAIN_LIMIT.as_secs()
    );
    *watch_until.lock().expect("until lock") = Some(tokio::time::Instant::now() + DRAIN_LIMIT);
    collector.await.expect("the watch collector panicked");
    stop_chaos.store(true, Ordering::SeqCst);
    chaos_task.await.expect("the chaos task panicked");
    let drain_phase = started.elapsed() - submit_phase;

    // The cluster's view, asked until sacct has a final state for every job we hold.
    let records = h
        .backend
        .records(&RecordFilter::any())
        .expect("list the records");
    let names: Vec<String> = records.iter().map(|r| r.id.to_string()).collect();
    let verify_deadline = Instant::now() + VERIFY_LIMIT;
    let view = loop {
        match cluster_view(&h, &remote_start, &names, &prefix).await {
            Ok(view) => {
                let settled = records
                    .iter()
                    .filter_map(|r| r.backend_ref.as_ref())
                    .all(|b| {
                        view.sacct_state
                            .get(&slurm_id(b))
                            .is_some_and(|s| !matches!(s.as_str(), "PENDING" | "RUNNING"))
                    });
                if settled || Instant::now() >= verify_deadline {
                    break view;
                }
            }
            Err(error) => {
                assert!(
                    Instant::now() < verify_deadline,
                    "the final squeue/sacct query kept failing: {error}"
                );
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };

    // Resources, once idle threads had a chance to leave.
    let settle = Instant::now() + Duration::from_secs(15);
    let (fds_end, threads_end) = loop {
        let now = (count_dir("/proc/self/fd"), count_dir("/proc/self/task"));
        if (now.0 <= fds_start + FD_SLACK && now.1 <= threads_start + THREAD_SLACK)
            || Instant::now() >= settle
        {
            break now;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };

    // --- Invariants ---
    let outcomes = std::mem::take(&mut *outcomes.lock().expect("outcomes lock"));
    let watch = std::mem::take(&mut *watch_log.lock().expect("watch lock"));
    let chaos = std::mem::take(&mut *chaos.lock().expect("chaos lock"));
    let mut v = Verdicts::default();
    println!();
    println!(
        "soak {prefix}*: {} submits in {:.0} s, drain {:.0} s",
        outcomes.len(),
        submit_phase.as_secs_f64(),
        drain_phase.as_secs_f64()
    );

    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    let mut ok_with_id = 0;
    let mut ok_without_id = Vec::new();
    let mut ambiguous = Vec::new();
    for o in &outcomes {
        match &o.result {
            Ok((_, Some(_))) => ok_with_id += 1,
            Ok((id, None)) => ok_without_id.push(id.to_string()),
            Err((kind, message)) => {
                *by_kind.entry(format!("{kind:?}")).or_default() += 1;
                if *kind == ErrorKind::Ambiguous {
                    ambiguous.push(format!("{}: {message}", o.name));
                }
            }
        }
    }
    let errors: usize = by_kind.values().sum();
    v.check(
        ok_without_id.is_empty() && ok_with_id + errors == outcomes.len(),
        "every submit answered with a SLURM job id or a typed error",
        format!(
            "{ok_with_id} with an id, {} without, {errors} errors {by_kind:?}",
            ok_without_id.len()
        ),
    );
    let ambiguous_limit = (outcomes.len() / 50).max(1);
    v.check(
        ambiguous.len() <= ambiguous_limit,
        "Ambiguous submits are rare",
        format!(
            "{} (limit {ambiguous_limit}){}",
            ambiguous.len(),
            ambiguous
                .iter()
                .map(|a| format!("\n      {a}"))
                .collect::<String>()
        ),
    );

    let mut exactly_once = 0;
    let mut not_once = Vec::new();
    let mut jobs_for_failed = Vec::new();
    let mut ambiguous_with_jobs = Vec::new();
    for record in &records {
        let jobs = view
            .by_name
            .get(record.id.as_str())
            .cloned()
            .unwrap_or_default();
        match &record.backend_ref {
            Some(b) => {
                if jobs.len() == 1 && jobs.contains(&slurm_id(b)) {
                    exactly_once += 1;
                } else {
                    not_once.push(format!(
                        "{} holds {} but jobs named so: {jobs:?}",
                        record.id, b.native_id
                    ));
                }
            }
            None if record.state == JobState::Submitting => {
                ambiguous_with_jobs.push(format!("{}: jobs {jobs:?}", record.id));
            }
            None if !jobs.is_empty() => jobs_for_failed.push(format!(
                "{} ({}) failed to submit yet jobs {jobs:?} carry its name",
                record.id, record.state
            )),
            None => {}
        }
    }
    let with_ref = records.iter().filter(|r| r.backend_ref.is_some()).count();
    v.check(
        not_once.is_empty(),
        "exactly one SLURM job per record with a SLURM id (squeue --name + sacct --name)",
        format!(
            "{exactly_once}/{with_ref}{}",
            not_once
                .iter()
                .map(|m| format!("\n      {m}"))
                .collect::<String>()
        ),
    );
    v.check(
        jobs_for_failed.is_empty(),
        "no SLURM job carries the name of a record whose submit failed",
        format!(
            "{} failed records checked{}{}",
            records
                .iter()
                .filter(|r| r.backend_ref.is_none() && r.state != JobState::Submitting)
                .count(),
            jobs_for_failed
                .iter()
                .map(|m| format!("\n      {m}"))
                .collect::<String>(),
            ambiguous_with_jobs
                .iter()
                .map(|m| format!("\n      left SUBMITTING (ambiguous): {m}"))
                .collect::<String>()
        ),
    );
    let held: HashMap<u64, &str> = records
        .iter()
        .filter_map(|r| Some((slurm_id(r.backend_ref.as_ref()?), r.id.as_str())))
        .collect();
    let unaccounted: Vec<String> = view
        .prefixed
        .iter()
        // Accounted for: the job a record holds, under that record's name.
        .filter(|(job, name)| held.get(job) != Some(&name.as_str()))
        .map(|(job, name)| format!("{job} {name}"))
        .collect();
    v.check(
        unaccounted.is_empty(),
        &format!("no SLURM job named {prefix}* is unaccounted for"),
        format!(
            "{} jobs of the soak on the cluster, {} unaccounted{}",
            view.prefixed.len(),
            unaccounted.len(),
            unaccounted
                .iter()
                .map(|m| format!("\n      {m}"))
                .collect::<String>()
        ),
    );

    let expected: HashMap<&str, bool> = outcomes
        .iter()
        .map(|o| (o.name.as_str(), o.expect_failure))
        .collect();
    let mut consistent = 0;
    let mut inconsistent = Vec::new();
    for record in records.iter().filter(|r| r.backend_ref.is_some()) {
        let id = slurm_id(record.backend_ref.as_ref().expect("filtered"));
        let current = h.backend.record(&record.id).expect("record");
        let sacct = view.sacct_state.get(&id).map(String::as_str);
        let fits = match (current.state, sacct) {
            (JobState::Complete, Some("COMPLETED")) => true,
            (JobState::Error, Some(s)) => s == "FAILED",
            _ => false,
        };
        let wanted = match expected.get(current.name.as_str()) {
            Some(true) => JobState::Error,
            _ => JobState::Complete,
        };
        if fits && current.state == wanted {
            consistent += 1;
        } else {
            inconsistent.push(format!(
                "{} ({id}): record {}, sacct {sacct:?}, expected {wanted}",
                current.id, current.state
            ));
        }
    }
    v.check(
        inconsistent.is_empty(),
        "every submitted record ended terminal, as sacct says (COMPLETE<->COMPLETED, ERROR<->FAILED) and as its command meant",
        format!(
            "{consistent}/{with_ref}{}",
            inconsistent
                .iter()
                .take(20)
                .map(|m| format!("\n      {m}"))
                .collect::<String>()
        ),
    );

    let duplicates: Vec<String> = watch
        .terminal_reports
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, n)| format!("{id} x{n}"))
        .collect();
    let unreported = records
        .iter()
        .filter(|r| r.backend_ref.is_some() && !watch.terminal_reports.contains_key(&r.id))
        .count();
    v.check(
        duplicates.is_empty(),
        "no duplicate terminal transitions reported by the watches",
        format!(
            "{} transitions, {} terminal reports for {with_ref} records, {} duplicated{}",
            watch.transitions,
            watch.terminal_reports.values().sum::<u32>(),
            duplicates.len(),
            duplicates
                .iter()
                .map(|m| format!("\n      {m}"))
                .collect::<String>()
        ),
    );
    v.check(
        unreported == 0 && watch.abandoned == 0,
        "the watches followed every submitted record to its end",
        format!(
            "{unreported} records without a terminal report, {} abandoned at the drain limit",
            watch.abandoned
        ),
    );
    v.check(
        watch.ended_with.is_empty(),
        "no watch ended on an error under connection loss (transient errors back off)",
        format!(
            "{} ended, {} restarted{}",
            watch.ended_with.len(),
            watch.restarts,
            watch
                .ended_with
                .iter()
                .take(10)
                .map(|m| format!("\n      {m}"))
                .collect::<String>()
        ),
    );
    v.check(
        fds_end <= fds_start + FD_SLACK,
        "open file descriptors did not grow",
        format!("{fds_start} at start, {fds_end} at end (slack {FD_SLACK})"),
    );
    v.check(
        threads_end <= threads_start + THREAD_SLACK,
        "threads did not grow",
        format!("{threads_start} at start, {threads_end} at end (slack {THREAD_SLACK})"),
    );
    v.check(
        chaos.kills > 0 && chaos.kill_errors.is_empty(),
        "the chaos task killed connections",
        format!(
            "{} sshd sessions killed ({} times all of them just after a submit began), {} times none of ours was up, {} lost answers and {} empty answers armed{}",
            chaos.kills,
            chaos.aimed,
            chaos.no_target,
            chaos.armed_lose,
            chaos.armed_empty,
            chaos
                .kill_errors
                .iter()
                .map(|m| format!("\n      {m}"))
                .collect::<String>()
        ),
    );

    let mut all: Vec<Duration> = outcomes.iter().map(|o| o.took).collect();
    all.sort();
    let mut good: Vec<Duration> = outcomes
        .iter()
        .filter(|o| o.result.is_ok())
        .map(|o| o.took)
        .collect();
    good.sort();
    println!(
        "submit latency, all {}: p50 {} p95 {} p99 {} max {}",
        all.len(),
        ms(percentile(&all, 0.5)),
        ms(percentile(&all, 0.95)),
        ms(percentile(&all, 0.99)),
        ms(all.last().copied().unwrap_or_default())
    );
    println!(
        "submit latency, accepted {}: p50 {} p95 {} p99 {}",
        good.len(),
        ms(percentile(&good, 0.5)),
        ms(percentile(&good, 0.95)),
        ms(percentile(&good, 0.99))
    );
    println!(
        "connections: {} lost, {} opened ({} at start); submits: {} reconciled by name, {} resent unsent; \
         polls backed off {} times; reconcile queries retried {}; {} round trips",
        counts.get("SSH connection lost"),
        counts.get("SSH session open"),
        our_sessions,
        counts.get("submit outcome unknown; reconciling by job name"),
        counts.get("submit not sent; trying once more"),
        counts.get("poll failed; backing off"),
        counts.get("reconcile query failed; retrying"),
        h.transport.count()
    );
    if v.failed > 0 {
        println!("soak: {} invariant(s) FAILED", v.failed);
        std::process::exit(1);
    }
    println!("soak: every invariant held");
}
