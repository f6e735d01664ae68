//! The shells of one connection: keepalive, queued commands handed to idle shells, more shells up to the cap, deadlines, dead shells retired.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use slurm_core::Error;

use super::backoff::Backoff;
use super::channel::{would_block, ConnFailure, Shell, ShellFailure, SshChannel, SshSession};
use super::{stopped, Done, Job};
use crate::framing::{Orphan, SHELL_START_TIMEOUT};

/// Shells failing to start in a row before waiting commands are failed.
const MAX_SHELL_START_FAILURES: u32 = 3;

/// The shells of one connection, touched only by its worker thread.
pub(crate) struct ShellPool<C> {
    /// The login host, for messages.
    pub(crate) host: String,
    shells: Vec<Shell<C>>,
    closing: Vec<Closing<C>>,
    /// Process groups of timed-out commands, killed by the next shell started.
    pub(crate) kills: Vec<Orphan>,
    next_keepalive: Instant,
    keepalive: Keepalive,
    /// Lowered when the server refuses a channel (its MaxSessions is lower than ours).
    channel_limit: usize,
    /// Why the last shell failed (other than by a timeout), until a shell is ready.
    pub(crate) shell_failure: Option<ShellFailure>,
    /// Keepalives sent since the server was last heard from.
    unanswered: u32,
    /// Shells that failed to start in a row, and when the next may be opened.
    start_failures: u32,
    shell_backoff: Backoff,
    /// Another channel of the session is being opened (a forwarded connection's): libssh2
    /// opens one channel at a time per session, so no shell starts opening meanwhile.
    pub(crate) open_elsewhere: bool,
}

/// A retired shell's channel being closed.
struct Closing<C> {
    channel: C,
    /// Whether it counts against the channel cap: not when its command timed out (the
    /// server confirms the close only once that command ends, which may be never).
    counted: bool,
}

/// How often keepalives go out and how many may go unanswered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Keepalive {
    /// The interval between keepalives.
    pub(crate) interval: Duration,
    /// Keepalives that may go unanswered before the connection counts as dead.
    pub(crate) max_missed: u32,
}

impl<C: SshChannel> ShellPool<C> {
    pub(crate) fn new(host: String, max_channels: usize, keepalive: Keepalive) -> Self {
        ShellPool {
            host,
            shells: Vec::new(),
            closing: Vec::new(),
            kills: Vec::new(),
            next_keepalive: Instant::now() + keepalive.interval,
            keepalive,
            unanswered: 0,
            channel_limit: max_channels,
            shell_failure: None,
            start_failures: 0,
            shell_backoff: Backoff::new(Instant::now()),
            open_elsewhere: false,
        }
    }

    /// The next moment something must happen without any socket activity.
    pub(crate) fn next_deadline(&self) -> Instant {
        let mut until = self.next_keepalive;
        if self.shell_backoff.next_attempt() > Instant::now() {
            until = until.min(self.shell_backoff.next_attempt());
        }
        for shell in &self.shells {
            if let Some(job) = &shell.job {
                until = until.min(job.deadline);
            }
            if !shell.proto.is_ready() {
                until = until.min(shell.started + SHELL_START_TIMEOUT);
            }
        }
        until
    }

    /// The answers of the commands in flight on a connection that died (each says
    /// whether it may have run), and the process groups of commands still running remotely.
    pub(crate) fn abandon(self, reason: &ConnFailure) -> (Done, Vec<Orphan>) {
        let mut kills = self.kills;
        let mut done = Vec::new();
        for mut shell in self.shells {
            if let Some(orphan) = shell.proto.running() {
                kills.push(orphan);
            }
            let may_have_run = shell.proto.request_delivered();
            if let Some(job) = shell.job.take() {
                let message = format!("SSH connection to {} lost: {reason}", self.host);
                done.push((
                    job,
                    Err(Error::Transport {
                        message,
                        may_have_run,
                    }),
                ));
            }
        }
        (done, kills)
    }

    /// Move every shell as far as it can go without blocking, taking commands from
    /// `queue`. Returns whether anything happened, or why the connection is dead.
    pub(crate) fn step<S: SshSession<Channel = C>>(
        &mut self,
        session: &S,
        queue: &mut VecDeque<Job>,
        max_channels: usize,
        done: &mut Done,
    ) -> Result<bool, ConnFailure> {
        let now = Instant::now();
        self.keepalive(session, now)?;
        let mut progress = self.hand_out(queue, done);
        progress |= self.open_more(queue, max_channels, now);
        progress |= self.drive_all(session, now, done)?;
        progress |= self.retire_dead(queue, done);
        progress |= self.finish_closing();
        Ok(progress)
    }

    /// Whether a shell waits for its channel (whose open may be under way in libssh2).
    pub(crate) fn opening(&self) -> bool {
        self.shells
            .iter()
            .any(|s| s.dead.is_none() && matches!(s.stage, super::channel::Stage::Opening))
    }

    /// The server was heard from (its socket had data): no keepalive is unanswered.
    pub(crate) fn heard(&mut self) {
        self.unanswered = 0;
    }

    /// Send a keepalive when one is due; the connection is dead (silent) when a
    /// keepalive is due and `max_missed` sent since the server was last heard from
    /// went unanswered.
    fn keepalive<S: SshSession>(&mut self, session: &S, now: Instant) -> Result<(), ConnFailure> {
        if now >= self.next_keepalive {
            if self.unanswered >= self.keepalive.max_missed {
                return Err(ConnFailure::Silent {
                    missed: self.unanswered,
                    interval: self.keepalive.interval,
                });
            }
            match session.keepalive_send() {
                Ok(secs) => {
                    // libssh2 sends one (and answers the full interval) only when due by its clock.
                    if u64::from(secs) >= self.keepalive.interval.as_secs() {
                        self.unanswered += 1;
                    }
                    self.next_keepalive = now + Duration::from_secs(u64::from(secs.max(1)));
                }
                Err(e) if would_block(&e) => self.next_keepalive = now + Duration::from_secs(1),
                Err(e) => return Err(ConnFailure::Keepalive(e)),
            }
        }
        Ok(())
    }

    /// Hand queued commands to idle shells.
    fn hand_out(&mut self, queue: &mut VecDeque<Job>, done: &mut Done) -> bool {
        let mut progress = false;
        for shell in &mut self.shells {
            if shell.job.is_some() || shell.dead.is_some() || !shell.proto.is_ready() {
                continue;
            }
            while let Some(job) = queue.pop_front() {
                if job.reply.is_closed() {
                    done.push((job, Err(stopped())));
                    continue;
                }
                match shell.proto.send(&job.command) {
                    Ok(()) => {
                        shell.job = Some(job);
                        progress = true;
                    }
                    Err(e) => done.push((job, Err(e))),
                }
                break;
            }
        }
        progress
    }

    /// Open another shell when commands wait (or timed-out ones must be killed) and the cap allows.
    fn open_more(&mut self, queue: &VecDeque<Job>, max_channels: usize, now: Instant) -> bool {
        let starting = self.shells.iter().filter(|s| !s.proto.is_ready()).count();
        let in_use = self.shells.len() + self.closing.iter().filter(|c| c.counted).count();
        let want_more = queue.len() > starting || (!self.kills.is_empty() && starting == 0);
        if want_more
            && in_use < self.channel_limit.min(max_channels)
            && self.shell_backoff.allows(now)
        {
            self.shells
                .push(Shell::new(&std::mem::take(&mut self.kills), now));
            return true;
        }
        false
    }

    /// Drive each shell, then apply the start timeout and command deadlines.
    fn drive_all<S: SshSession<Channel = C>>(
        &mut self,
        session: &S,
        now: Instant,
        done: &mut Done,
    ) -> Result<bool, ConnFailure> {
        let mut progress = false;
        let mut opening_taken = self.open_elsewhere;
        let mut buf = vec![0u8; 64 * 1024];
        for shell in &mut self.shells {
            progress |= shell.drive(
                session,
                &mut opening_taken,
                &mut buf,
                &mut self.channel_limit,
                done,
            )?;
            if shell.dead.is_none()
                && !shell.proto.is_ready()
                && now > shell.started + SHELL_START_TIMEOUT
                && shell.job.is_none()
            {
                shell.dead = Some(ShellFailure::StartTimedOut);
            }
            if let Some(job) = &shell.job {
                if Instant::now() >= job.deadline {
                    let job = shell.job.take().expect("job present");
                    if let Some(orphan) = shell.proto.running() {
                        self.kills.push(orphan);
                    }
                    let result = Err(Error::Timeout {
                        what: format!("`{}` on {}", job.command.label(), self.host),
                        after: job.command.effective_timeout(),
                        may_have_run: shell.proto.request_delivered(),
                    });
                    done.push((job, result));
                    shell.dead = Some(ShellFailure::TimedOut);
                }
            }
        }
        Ok(progress)
    }

    /// Answer the commands of dead shells and retire them; after a few shells in a
    /// row fail to start, fail the waiting commands too.
    fn retire_dead(&mut self, queue: &mut VecDeque<Job>, done: &mut Done) -> bool {
        let mut progress = false;
        let mut kept = Vec::with_capacity(self.shells.len());
        for mut shell in std::mem::take(&mut self.shells) {
            let Some(reason) = shell.dead.take() else {
                kept.push(shell);
                continue;
            };
            progress = true;
            if let Some(job) = shell.job.take() {
                let may_have_run = shell.proto.request_delivered();
                let message = format!("the remote shell on {} failed: {reason}", self.host);
                done.push((
                    job,
                    Err(Error::Transport {
                        message,
                        may_have_run,
                    }),
                ));
            }
            if !shell.was_ready {
                // A shell that never became ready: wait before opening the next
                // one, and give up on waiting commands after a few tries.
                self.start_failures += 1;
                self.shell_backoff.failed(Instant::now());
                if self.start_failures >= MAX_SHELL_START_FAILURES {
                    for job in queue.drain(..) {
                        let message = format!(
                            "the remote shell on {} fails to start ({reason}); check the login files (.bashrc, .profile) of the remote user",
                            self.host
                        );
                        done.push((
                            job,
                            Err(Error::Transport {
                                message,
                                may_have_run: false,
                            }),
                        ));
                    }
                    self.start_failures = 0;
                }
            }
            let timed_out = matches!(reason, ShellFailure::TimedOut);
            if !timed_out {
                self.shell_failure = Some(reason);
            }
            if let Some(channel) = shell.into_channel() {
                let counted = !timed_out;
                self.closing.push(Closing { channel, counted });
            }
        }
        self.shells = kept;
        if self.shells.iter().any(|s| s.proto.is_ready()) {
            self.shell_failure = None;
            self.start_failures = 0;
            self.shell_backoff.succeeded();
        }
        progress
    }

    /// Finish closing retired channels (then they are freed on drop).
    fn finish_closing(&mut self) -> bool {
        let mut progress = false;
        let mut still = Vec::new();
        for mut closing in self.closing.drain(..) {
            match closing.channel.close() {
                Err(e) if would_block(&e) => still.push(closing),
                _ => progress = true,
            }
        }
        self.closing = still;
        progress
    }
}

#[cfg(test)]
mod tests {
    use slurm_core::ErrorKind;
    use slurm_core::{Command, Output};
    use tokio::sync::oneshot;

    use super::super::fake::{self, FakeChannel, FakeSession};
    use super::*;

    type Answer = oneshot::Receiver<slurm_core::Result<Output>>;

    fn job(program: &str) -> (Job, Answer) {
        let (reply, answer) = oneshot::channel();
        let command = Command::new(program);
        let deadline = Instant::now() + command.effective_timeout();
        let job = Job {
            command,
            deadline,
            reply,
        };
        (job, answer)
    }

    /// A queue of these commands, and their callers (kept waiting).
    fn queued(programs: &[&str]) -> (VecDeque<Job>, Vec<Answer>) {
        programs.iter().map(|p| job(p)).unzip()
    }

    fn pool() -> ShellPool<FakeChannel> {
        ShellPool::new("login1".into(), 8, KEEPALIVE)
    }

    const KEEPALIVE: Keepalive = Keepalive {
        interval: Duration::from_secs(30),
        max_missed: 3,
    };

    /// One step with a cap of `max` channels; the answers it produced.
    fn step_capped(
        pool: &mut ShellPool<FakeChannel>,
        session: &FakeSession,
        queue: &mut VecDeque<Job>,
        max: usize,
    ) -> Done {
        let mut done = Vec::new();
        pool.step(session, queue, max, &mut done).unwrap();
        done
    }

    fn step(
        pool: &mut ShellPool<FakeChannel>,
        session: &FakeSession,
        queue: &mut VecDeque<Job>,
    ) -> Done {
        step_capped(pool, session, queue, 8)
    }

    /// Open channel `i` for the queued command and play its shell up to ready; the
    /// next step hands the command to it.
    fn start_shell(
        pool: &mut ShellPool<FakeChannel>,
        session: &FakeSession,
        queue: &mut VecDeque<Job>,
        i: usize,
    ) -> FakeChannel {
        assert!(step(pool, session, queue).is_empty());
        let ch = session.channel(i);
        ch.answer_sync();
        // One step reads the sync line, the next writes the init script.
        assert!(step(pool, session, queue).is_empty());
        assert!(step(pool, session, queue).is_empty());
        ch.answer_ready();
        assert!(step(pool, session, queue).is_empty());
        ch
    }

    /// The single answer in `done`, as an error.
    fn only_error(done: Done) -> Error {
        let [(_, result)] = <[_; 1]>::try_from(done).ok().expect("one answer");
        result.expect_err("an error")
    }

    #[test]
    fn a_queued_command_opens_a_shell_and_gets_its_output() {
        let (session, mut pool) = (FakeSession::default(), pool());
        let (job, _answer) = job("hostname");
        let mut queue = VecDeque::from([job]);
        let ch = start_shell(&mut pool, &session, &mut queue, 0);
        let (gone, answer) = self::job("ignored");
        drop(answer);
        queue.push_front(gone);
        // The caller who left is answered (and skipped); the other command is sent.
        let err = only_error(step(&mut pool, &session, &mut queue));
        assert!(err.may_have_run(), "the bridge's 'stopped' answer: {err}");
        assert!(queue.is_empty());
        assert!(ch.written_text().contains("__sr_run SRM"));
        ch.answer_started(4242);
        ch.answer_finished("login1\n", 3);
        let done = step(&mut pool, &session, &mut queue);
        let [(job, Ok(out))] = <[_; 1]>::try_from(done).ok().expect("one answer") else {
            panic!("no output")
        };
        assert_eq!(job.command.program(), "hostname");
        assert_eq!((out.status, out.stdout.as_slice()), (3, &b"login1\n"[..]));
        // The shell stays for the next command; no second channel was needed.
        assert_eq!((pool.shells.len(), session.channels_opened()), (1, 1));
        assert!(pool.shells[0].proto.is_ready());
    }

    #[test]
    fn channels_are_opened_one_per_step_up_to_the_cap() {
        let (session, mut pool) = (FakeSession::default(), pool());
        let (mut queue, _callers) = queued(&["true"; 5]);
        for _ in 0..5 {
            step_capped(&mut pool, &session, &mut queue, 2);
        }
        assert_eq!(session.channels_opened(), 2);
        assert_eq!(queue.len(), 5, "no shell is ready yet");
    }

    #[test]
    fn a_command_past_its_deadline_times_out_and_the_next_shell_kills_it() {
        let (session, mut pool) = (FakeSession::default(), pool());
        let (mut queue, _callers) = queued(&["sleep"]);
        let ch = start_shell(&mut pool, &session, &mut queue, 0);
        step(&mut pool, &session, &mut queue);
        ch.answer_started(4242);
        step(&mut pool, &session, &mut queue);
        let orphan = pool.shells[0].proto.running().expect("started");
        assert_eq!((orphan.pgid, orphan.start.as_str()), (4242, "777"));
        pool.shells[0].job.as_mut().unwrap().deadline = Instant::now();
        let err = only_error(step(&mut pool, &session, &mut queue));
        assert_eq!(err.kind(), ErrorKind::Timeout);
        assert!(err.may_have_run(), "the request was delivered: {err}");
        assert!(err.to_string().contains("`sleep` on login1"), "{err}");
        // The shell is retired and its channel closed; a timeout is no shell failure.
        assert!(pool.shells.is_empty() && ch.is_closed());
        assert!(pool.shell_failure.is_none());
        assert_eq!(
            (pool.start_failures, pool.kills.as_slice()),
            (0, &[orphan.clone()][..])
        );
        // With nothing queued, a shell still opens to kill the process group.
        step(&mut pool, &session, &mut queue);
        let next = session.channel(1);
        next.answer_sync();
        step(&mut pool, &session, &mut queue);
        step(&mut pool, &session, &mut queue);
        let kill = format!("__sr_kill 4242 777 boot-1 {}\n", orphan.marker);
        assert!(next.written_text().contains(&kill));
        assert!(pool.kills.is_empty());
    }

    #[test]
    fn a_timed_out_channel_that_never_closes_leaves_room_for_the_next_shell() {
        let (session, mut pool) = (FakeSession::default(), pool());
        let (mut queue, _callers) = queued(&["sleep", "next"]);
        // One channel at most: the first shell runs `sleep`, `next` waits.
        assert!(step_capped(&mut pool, &session, &mut queue, 1).is_empty());
        let ch = session.channel(0);
        ch.answer_sync();
        step_capped(&mut pool, &session, &mut queue, 1);
        step_capped(&mut pool, &session, &mut queue, 1);
        ch.answer_ready();
        step_capped(&mut pool, &session, &mut queue, 1);
        step_capped(&mut pool, &session, &mut queue, 1);
        ch.answer_started(4242);
        step_capped(&mut pool, &session, &mut queue, 1);
        assert_eq!(queue.len(), 1, "`next` waits for a channel");
        // `sleep` times out, and the server never confirms closing its channel.
        ch.hold_close();
        pool.shells[0].job.as_mut().unwrap().deadline = Instant::now();
        let err = only_error(step_capped(&mut pool, &session, &mut queue, 1));
        assert_eq!(err.kind(), ErrorKind::Timeout);
        // The next shell opens all the same, kills `sleep` and takes `next`.
        for _ in 0..3 {
            step_capped(&mut pool, &session, &mut queue, 1);
        }
        assert_eq!(session.channels_opened(), 2, "a second shell was opened");
        let next = session.channel(1);
        next.answer_sync();
        step_capped(&mut pool, &session, &mut queue, 1);
        step_capped(&mut pool, &session, &mut queue, 1);
        assert!(
            next.written_text().contains("__sr_kill 4242 777 boot-1"),
            "the kill was sent"
        );
        next.answer_ready();
        step_capped(&mut pool, &session, &mut queue, 1);
        step_capped(&mut pool, &session, &mut queue, 1);
        assert!(queue.is_empty(), "`next` was handed to the new shell");
        assert!(!ch.is_closed());
    }

    #[test]
    fn may_have_run_says_whether_the_request_was_written_whole() {
        let reason = ConnFailure::Read(std::io::Error::other("reset"));
        for (room, delivered) in [(Some(10), false), (None, true)] {
            let (session, mut pool) = (FakeSession::default(), pool());
            let (mut queue, _callers) = queued(&["sbatch"]);
            let ch = start_shell(&mut pool, &session, &mut queue, 0);
            if let Some(bytes) = room {
                ch.limit_writes(bytes);
            }
            step(&mut pool, &session, &mut queue);
            if delivered {
                ch.answer_started(77);
                step(&mut pool, &session, &mut queue);
            }
            let (done, kills) = pool.abandon(&reason);
            let err = only_error(done);
            assert_eq!(err.kind(), ErrorKind::Transport);
            assert_eq!(err.may_have_run(), delivered, "{err}");
            assert!(
                err.to_string().contains(
                    "SSH connection to login1 lost: reading from the shell channel failed: reset"
                ),
                "{err}"
            );
            let pgids: Vec<u32> = kills.iter().map(|o| o.pgid).collect();
            assert_eq!(pgids, if delivered { vec![77] } else { vec![] });
        }
    }

    #[test]
    fn a_shell_that_dies_fails_its_command_and_its_reason_is_kept() {
        let (session, mut pool) = (FakeSession::default(), pool());
        let (mut queue, _callers) = queued(&["true"]);
        let ch = start_shell(&mut pool, &session, &mut queue, 0);
        step(&mut pool, &session, &mut queue);
        ch.close_remote();
        let err = only_error(step(&mut pool, &session, &mut queue));
        assert_eq!(err.kind(), ErrorKind::Transport);
        assert!(err.may_have_run());
        assert!(
            err.to_string()
                .contains("the remote shell on login1 failed: the remote shell exited"),
            "{err}"
        );
        assert!(matches!(pool.shell_failure, Some(ShellFailure::Exited)));
        assert_eq!(pool.start_failures, 0, "it had started");
        // A request the shell refused as damaged did not run.
        let (mut queue, _callers) = queued(&["true"]);
        let ch = start_shell(&mut pool, &session, &mut queue, 1);
        step(&mut pool, &session, &mut queue);
        ch.push(&format!("{} X\n", ch.marker()));
        let err = only_error(step(&mut pool, &session, &mut queue));
        assert!(!err.may_have_run(), "{err}");
        assert!(matches!(
            pool.shell_failure,
            Some(ShellFailure::RequestDamaged)
        ));
    }

    #[test]
    fn shells_that_never_start_back_off_then_fail_the_waiting_commands() {
        let (session, mut pool) = (FakeSession::default(), pool());
        let (mut queue, _callers) = queued(&["a", "b"]);
        for failures in 1..=2 {
            session.fail_next_open(fake::CHANNEL_FAILURE);
            assert!(step(&mut pool, &session, &mut queue).is_empty());
            assert_eq!(pool.start_failures, failures);
            assert!(matches!(
                pool.shell_failure,
                Some(ShellFailure::ChannelRefused(_))
            ));
            // No new shell until the backoff has passed.
            step(&mut pool, &session, &mut queue);
            assert!(pool.shells.is_empty());
            assert!(pool.next_deadline() <= pool.shell_backoff.next_attempt());
            pool.shell_backoff = Backoff::new(Instant::now());
        }
        assert_eq!(
            pool.channel_limit, 6,
            "each refused channel lowers the limit"
        );
        // The third: a shell that never gets ready in time.
        step(&mut pool, &session, &mut queue);
        pool.shells[0].started -= SHELL_START_TIMEOUT + Duration::from_secs(1);
        let done = step(&mut pool, &session, &mut queue);
        assert!(queue.is_empty() && pool.start_failures == 0);
        assert_eq!(done.len(), 2);
        for (_, result) in done {
            let err = result.unwrap_err();
            assert!(!err.may_have_run(), "{err}");
            let text = err.to_string();
            assert!(
                text.contains("fails to start (the shell did not become ready within 30s)"),
                "{text}"
            );
            assert!(text.contains("check the login files"), "{text}");
        }
        assert!(session.channel(0).is_closed());
    }

    #[test]
    fn a_connection_is_silent_once_max_missed_keepalives_went_unanswered() {
        let (session, mut pool) = (FakeSession::default(), pool());
        let mut queue = VecDeque::new();
        let mut send_due = |pool: &mut ShellPool<FakeChannel>| {
            pool.next_keepalive = Instant::now();
            pool.step(&session, &mut queue, 8, &mut Vec::new())
        };
        // An answer in between keeps the connection alive.
        for _ in 0..KEEPALIVE.max_missed {
            send_due(&mut pool).unwrap();
        }
        pool.heard();
        for _ in 0..KEEPALIVE.max_missed {
            send_due(&mut pool).unwrap();
        }
        // The next one is due with three unanswered: the connection is dead.
        let err = send_due(&mut pool).unwrap_err();
        assert!(
            matches!(err, ConnFailure::Silent { missed: 3, .. }),
            "{err}"
        );
        assert!(err
            .to_string()
            .contains("answered none of the last 3 keepalives"));
    }

    #[test]
    fn only_a_keepalive_that_would_block_is_retried() {
        let (session, mut pool) = (FakeSession::default(), pool());
        let mut queue = VecDeque::new();
        pool.next_keepalive = Instant::now();
        session.fail_next_keepalive(fake::EAGAIN);
        step(&mut pool, &session, &mut queue);
        assert!(pool.next_keepalive > Instant::now());
        pool.next_keepalive = Instant::now();
        session.fail_next_keepalive(fake::SOCKET_SEND);
        let err = pool
            .step(&session, &mut queue, 8, &mut Vec::new())
            .unwrap_err();
        assert!(matches!(err, ConnFailure::Keepalive(_)), "{err}");
    }
}
