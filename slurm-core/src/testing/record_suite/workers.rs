//! The suite's workers: other processes (or, for a store no other process can reach,
//! threads of this one) that share the store under test, each playing one [`Role`] and
//! speaking a few lines with the case.
//!
//! A worker process is this test binary run again on the case's own test, with the role
//! and the store's [`shared`](super::RecordStoreFixture::shared) name in its environment:
//! [`run`](super::run) sees them and plays the role instead of the case. It says lines
//! on stdout (prefixed, so libtest's own lines are told apart) and hears lines on stdin.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::record::{JobId, Mark, RecordStore, RetryClaim, TransitionSource};
use crate::state::JobState;

/// The environment variable that makes a run of the test binary a worker: its role.
pub(super) const ROLE_ENV: &str = "SLURM_RUN_RECORD_SUITE_ROLE";
/// The store a worker process opens (the fixture's `shared`).
pub(super) const SHARED_ENV: &str = "SLURM_RUN_RECORD_SUITE_STORE";
/// What marks each line a worker process says (libtest prints lines of its own, and
/// starts the first with the test's name).
const SAYS: &str = "@record-suite ";
/// How long a case waits for a worker's next line (a loaded machine is slow).
const PATIENCE: Duration = Duration::from_secs(120);

/// What a worker does with the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Role {
    /// Take the submit lease of the record, say `held`, and keep it until killed (or,
    /// as a thread, until told to go).
    HoldLease(JobId),
    /// Read `previous` and see it retried by no record yet (as a submit does before it
    /// decides to retry), say `ready`, wait for `go`, then open `next` as its retry with
    /// the claim ([`RecordStore::open_retry`]) and say `won` or `taken <winner>`. The
    /// case says `go` once every claimer is ready, so each has passed the check before
    /// any claims: the race happens every run. Then it points the dependants of
    /// `previous` at the retry it won or follows.
    Claim { previous: JobId, next: JobId },
    /// `rounds` times: add one to the `counter` label of `shared` and open a record
    /// of its own; then say `done`.
    Write {
        shared: JobId,
        prefix: String,
        rounds: u32,
    },
    /// Say `ready`, wait for `go`, ask `rounds` times whether the submit of the record
    /// is in progress, and say `busy N`: how many answers said it was.
    Probe { id: JobId, rounds: u32 },
    /// Say `ready`, wait for `go`, then mark the running resumable record requeued by
    /// its wall (its segment continued, as a poll that saw it requeued does) and say
    /// `marked`.
    Continue(JobId),
}

impl Role {
    /// The role as its environment variable holds it.
    fn encode(&self) -> String {
        match self {
            Role::HoldLease(id) => format!("hold {id}"),
            Role::Claim { previous, next } => format!("claim {previous} {next}"),
            Role::Write {
                shared,
                prefix,
                rounds,
            } => format!("write {shared} {prefix} {rounds}"),
            Role::Probe { id, rounds } => format!("probe {id} {rounds}"),
            Role::Continue(id) => format!("continue {id}"),
        }
    }

    /// The role a worker process was given.
    pub(super) fn decode(text: &str) -> Role {
        let words: Vec<&str> = text.split(' ').collect();
        let id = |i: usize| JobId::parse(words[i]).expect("a worker's record id");
        match words[0] {
            "hold" => Role::HoldLease(id(1)),
            "claim" => Role::Claim {
                previous: id(1),
                next: id(2),
            },
            "write" => Role::Write {
                shared: id(1),
                prefix: words[2].to_string(),
                rounds: words[3].parse().expect("a number of rounds"),
            },
            "continue" => Role::Continue(id(1)),
            "probe" => Role::Probe {
                id: id(1),
                rounds: words[2].parse().expect("a number of rounds"),
            },
            other => panic!("unknown worker role {other:?}"),
        }
    }
}

/// How a worker speaks with its case.
pub(super) trait Voice {
    /// Say `line` to the case.
    fn say(&mut self, line: &str);
    /// The case's next line (`None`: it is gone).
    fn hear(&mut self) -> Option<String>;
}

/// A worker process's voice: stdout and stdin.
pub(super) struct ProcessVoice;

impl Voice for ProcessVoice {
    fn say(&mut self, line: &str) {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{SAYS}{line}").expect("stdout");
        out.flush().expect("stdout");
    }

    fn hear(&mut self) -> Option<String> {
        let mut line = String::new();
        match std::io::stdin().read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line.trim_end().to_string()),
        }
    }
}

/// A worker thread's voice: two channels.
struct ThreadVoice {
    to_case: Sender<String>,
    from_case: Receiver<String>,
}

impl Voice for ThreadVoice {
    fn say(&mut self, line: &str) {
        let _ = self.to_case.send(line.to_string());
    }

    fn hear(&mut self) -> Option<String> {
        self.from_case.recv().ok()
    }
}

/// Play `role` on `store`, speaking through `voice`.
pub(super) fn play(store: &dyn RecordStore, role: &Role, voice: &mut dyn Voice) {
    match role {
        Role::HoldLease(id) => {
            let _lease = store.submit_lease(id).expect("take the submit lease");
            voice.say("held");
            // Held until this process is killed (a thread: until the case says so).
            let _ = voice.hear();
        }
        Role::Claim { previous, next } => {
            let before = store.get(previous).expect("the record to retry");
            assert_eq!(
                before.retried_as, None,
                "no retry yet when the claimer looks"
            );
            let record = super::record(next.clone()).retrying(&before);
            ready_then_go(voice);
            let claimed = store.open_retry(&record);
            let (said, retry) = match claimed.expect("open the retry with its claim") {
                RetryClaim::Won => ("won".to_string(), next.clone()),
                RetryClaim::Taken(winner) => (format!("taken {winner}"), winner),
            };
            // Each claimer then points the failed record's dependants at the retry it
            // submits or follows, as a submit does: all of them, at once.
            crate::dependency::follow_retry(store, previous, &retry)
                .expect("re-point the dependants");
            voice.say(&said);
        }
        Role::Write {
            shared,
            prefix,
            rounds,
        } => {
            for round in 0..*rounds {
                store
                    .update(shared, &mut |r| {
                        let next = super::counter(r) + 1;
                        r.labels.insert("counter".into(), next.to_string());
                        Ok(())
                    })
                    .expect("update the shared record");
                let own = JobId::parse(&format!("{prefix}-{round:04}")).expect("an id");
                store.open(&super::record(own.clone())).expect("open");
                store
                    .mark(&own, Mark::new(JobState::Pending, TransitionSource::Agent))
                    .expect("mark");
            }
            voice.say("done");
        }
        Role::Continue(id) => {
            ready_then_go(voice);
            let wall = crate::record::SegmentNote {
                end: Some(crate::record::SegmentEnd::Wall),
                checkpoint: Some("ckpt/step-10.pt".into()),
            };
            store
                .mark(
                    id,
                    Mark::new(JobState::Pending, TransitionSource::Poll).segment(wall),
                )
                .expect("mark the continuation");
            voice.say("marked");
        }
        Role::Probe { id, rounds } => {
            ready_then_go(voice);
            voice.say(&format!("busy {}", busy_probes(store, id, *rounds)));
        }
    }
}

/// A worker's half of [`Worker::start_together`]: say `ready`, then wait for `go`.
fn ready_then_go(voice: &mut dyn Voice) {
    voice.say("ready");
    assert_eq!(voice.hear().as_deref(), Some("go"));
}

/// Of `rounds` questions whether the submit of `id` is in progress, how many said yes.
pub(super) fn busy_probes(store: &dyn RecordStore, id: &JobId, rounds: u32) -> u32 {
    (0..rounds)
        .map(|_| {
            store
                .submit_in_progress(id)
                .expect("probe the submit lease")
        })
        .filter(|answer| *answer == Some(true))
        .count() as u32
}

/// A worker the case started.
pub(super) enum Worker {
    /// Another process.
    Process {
        child: Child,
        stdin: Option<ChildStdin>,
        lines: Receiver<String>,
    },
    /// A thread of this process (a store no other process reaches).
    Thread {
        handle: Option<std::thread::JoinHandle<()>>,
        to_worker: Option<Sender<String>>,
        lines: Receiver<String>,
    },
}

impl Worker {
    /// Start a worker playing `role` on the store: a process running `test` (the case's
    /// own test name) when the store is `shared`, else a thread on `store`.
    pub(super) fn start(
        test: &str,
        shared: Option<&str>,
        store: &Arc<dyn RecordStore>,
        role: Role,
    ) -> Worker {
        match shared {
            Some(shared) => {
                let mut child = Command::new(std::env::current_exe().expect("the test binary"))
                    .args([test, "--exact", "--nocapture", "--test-threads=1"])
                    .env(ROLE_ENV, role.encode())
                    .env(SHARED_ENV, shared)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::inherit())
                    .spawn()
                    .expect("start a worker process");
                let stdout = child.stdout.take().expect("its stdout");
                let (tx, lines) = mpsc::channel();
                std::thread::spawn(move || {
                    for line in BufReader::new(stdout).lines() {
                        let Ok(line) = line else { break };
                        // libtest's `test NAME ... ` may lead the line.
                        if let Some((_, said)) = line.split_once(SAYS) {
                            if tx.send(said.to_string()).is_err() {
                                break;
                            }
                        }
                    }
                });
                let stdin = child.stdin.take();
                Worker::Process {
                    child,
                    stdin,
                    lines,
                }
            }
            None => {
                let (to_case, lines) = mpsc::channel();
                let (to_worker, from_case) = mpsc::channel();
                let store = Arc::clone(store);
                let handle = std::thread::spawn(move || {
                    let mut voice = ThreadVoice { to_case, from_case };
                    play(store.as_ref(), &role, &mut voice);
                });
                Worker::Thread {
                    handle: Some(handle),
                    to_worker: Some(to_worker),
                    lines,
                }
            }
        }
    }

    /// Start a worker for each of `roles` (each says `ready` when set), wait until all
    /// have, then tell each `go`: they begin their work as nearly at once as the machine
    /// allows.
    pub(super) fn start_together(
        test: &str,
        shared: Option<&str>,
        store: &Arc<dyn RecordStore>,
        roles: impl IntoIterator<Item = Role>,
    ) -> Vec<Worker> {
        let mut workers: Vec<Worker> = roles
            .into_iter()
            .map(|role| Worker::start(test, shared, store, role))
            .collect();
        for worker in &mut workers {
            assert_eq!(worker.next_line("ready"), "ready");
        }
        for worker in &mut workers {
            worker.tell("go");
        }
        workers
    }

    /// The worker's next line, or a panic naming `what` was awaited.
    pub(super) fn next_line(&mut self, what: &str) -> String {
        let lines = match self {
            Worker::Process { lines, .. } | Worker::Thread { lines, .. } => lines,
        };
        let deadline = Instant::now() + PATIENCE;
        match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => line,
            Err(_) => panic!("a worker never said {what} within {PATIENCE:?}"),
        }
    }

    /// Say `line` to the worker.
    pub(super) fn tell(&mut self, line: &str) {
        match self {
            Worker::Process { stdin, .. } => {
                let stdin = stdin.as_mut().expect("the worker's stdin");
                writeln!(stdin, "{line}").expect("tell the worker");
                stdin.flush().expect("tell the worker");
            }
            Worker::Thread { to_worker, .. } => {
                let _ = to_worker.as_ref().expect("the worker").send(line.into());
            }
        }
    }

    /// End the worker as a crash would: a process is killed (SIGKILL: nothing of
    /// it runs again, the kernel closes what it held); a thread is told to go and
    /// returns, dropping what it held.
    pub(super) fn kill(mut self) {
        match &mut self {
            Worker::Process { child, .. } => {
                child.kill().expect("kill the worker");
                child.wait().expect("reap the worker");
            }
            Worker::Thread {
                handle, to_worker, ..
            } => {
                drop(to_worker.take());
                handle.take().expect("a thread").join().expect("the worker");
            }
        }
    }

    /// Wait for the worker to end, and check that it ended well.
    pub(super) fn finish(mut self) {
        match &mut self {
            Worker::Process { child, stdin, .. } => {
                drop(stdin.take());
                let status = child.wait().expect("reap the worker");
                assert!(status.success(), "a worker process failed: {status}");
            }
            Worker::Thread {
                handle, to_worker, ..
            } => {
                drop(to_worker.take());
                handle
                    .take()
                    .expect("a thread")
                    .join()
                    .expect("a worker thread failed");
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // A case that fails leaves no worker process behind it.
        if let Worker::Process { child, .. } = self {
            if child.try_wait().ok().flatten().is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}
