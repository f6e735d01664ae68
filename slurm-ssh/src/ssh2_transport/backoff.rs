//! Doubling waits between attempts, each with a random part (jitter): reconnecting a session, or opening a shell after one failed to start.

use std::time::{Duration, Instant};

/// First wait after a failed attempt; doubles up to [`MAX_BACKOFF`].
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// Longest wait between attempts.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(15);

/// When the next attempt may start, and how long the wait after the next failure is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    delay: Duration,
    next_attempt: Instant,
}

impl Backoff {
    /// No wait yet: the first attempt may start at `now`.
    pub(crate) fn new(now: Instant) -> Self {
        Backoff {
            delay: FIRST_BACKOFF,
            next_attempt: now,
        }
    }

    /// An attempt failed at `now`: wait the current delay, less a random part of up to
    /// its half (so clients that failed together, after a login node restarted, do not
    /// reconnect in lockstep), and double the delay (up to the cap).
    pub(crate) fn failed(&mut self, now: Instant) {
        let half = self.delay / 2;
        let jitter = half.mul_f64(rand::random::<f64>());
        self.next_attempt = now + self.delay - jitter;
        self.delay = (self.delay * 2).min(MAX_BACKOFF);
    }

    /// An attempt worked: the next failure waits [`FIRST_BACKOFF`] again.
    pub(crate) fn succeeded(&mut self) {
        self.delay = FIRST_BACKOFF;
    }

    /// When the next attempt may start.
    pub(crate) fn next_attempt(&self) -> Instant {
        self.next_attempt
    }

    /// Whether an attempt may start at `now`.
    pub(crate) fn allows(&self, now: Instant) -> bool {
        now >= self.next_attempt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_cap_and_reset_after_a_success() {
        let start = Instant::now();
        let mut backoff = Backoff::new(start);
        assert!(backoff.allows(start), "the first attempt does not wait");
        let ms = |n| Duration::from_millis(n);
        // Each wait is its delay less up to half of it.
        for delay in [250, 500, 1000, 2000, 4000, 8000, 15_000, 15_000, 15_000] {
            backoff.failed(start);
            let wait = backoff.next_attempt() - start;
            assert!(
                wait <= ms(delay) && wait >= ms(delay) / 2,
                "{wait:?} for {delay} ms"
            );
        }
        assert!(!backoff.allows(start + MAX_BACKOFF / 2 - ms(1)));
        assert!(backoff.allows(start + MAX_BACKOFF));
        // A success resets the delay, not the pending wait.
        let pending = backoff.next_attempt();
        backoff.succeeded();
        assert_eq!(backoff.next_attempt(), pending);
        backoff.failed(start);
        assert!(backoff.next_attempt() <= start + FIRST_BACKOFF);
    }

    #[test]
    fn waits_are_jittered_so_clients_do_not_reconnect_in_lockstep() {
        // Issue 26, defect 11: after a login-node restart every client waited exactly
        // 250 ms, 500 ms, ... and reconnected in lockstep.
        let start = Instant::now();
        let waits: Vec<Duration> = (0..20)
            .map(|_| {
                let mut backoff = Backoff::new(start);
                backoff.failed(start);
                backoff.next_attempt() - start
            })
            .collect();
        assert!(
            waits.iter().any(|w| *w != waits[0]),
            "20 clients wait alike: {waits:?}"
        );
        for wait in &waits {
            assert!(
                *wait >= FIRST_BACKOFF / 2 && *wait <= FIRST_BACKOFF,
                "{wait:?}"
            );
        }
    }
}
