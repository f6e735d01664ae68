//! Doubling waits between attempts: reconnecting a session, or opening a shell after one failed to start.

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

    /// An attempt failed at `now`: wait the current delay, and double it (up to the cap).
    pub(crate) fn failed(&mut self, now: Instant) {
        self.next_attempt = now + self.delay;
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
        let mut waits = Vec::new();
        for _ in 0..9 {
            backoff.failed(start);
            waits.push(backoff.next_attempt() - start);
        }
        let ms = |n| Duration::from_millis(n);
        assert_eq!(
            waits,
            [
                ms(250),
                ms(500),
                ms(1000),
                ms(2000),
                ms(4000),
                ms(8000),
                MAX_BACKOFF,
                MAX_BACKOFF,
                MAX_BACKOFF
            ]
        );
        assert!(!backoff.allows(start + ms(14_999)));
        assert!(backoff.allows(start + MAX_BACKOFF));
        // A success resets the delay, not the pending wait.
        backoff.succeeded();
        assert_eq!(backoff.next_attempt(), start + MAX_BACKOFF);
        backoff.failed(start);
        assert_eq!(backoff.next_attempt(), start + FIRST_BACKOFF);
    }
}
