//! [`keeps_pace`]: how a task ticking on a current-thread runtime fares while another
//! future of that runtime waits (for a lease, a slow database): the measure of "no
//! call blocks the runtime".

use std::future::Future;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How often the ticking task ticks.
pub const TICK: Duration = Duration::from_millis(10);

/// What the ticking task saw while the future ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    /// How many times it ticked.
    pub ticks: u64,
    /// The largest gap between two of its ticks (or from the start to the first):
    /// reported to read a failure by, never asserted (a loaded machine stretches it).
    pub longest_gap: Duration,
}

impl Pace {
    /// Whether the ticking task kept going: it ticked at least `ticks` times while the
    /// future ran. The cases hold what the future waits for until the ticks came, so a
    /// future that held the runtime's one thread could only end when the holder gave up
    /// at its deadline, with no ticks: the count decides, no clock does.
    pub fn kept(&self, ticks: u64) -> bool {
        self.ticks >= ticks
    }
}

/// Run `waiting` on a new current-thread runtime beside a task that ticks every
/// [`TICK`], and answer what `waiting` answered with the ticker's [`Pace`]. `ticked`
/// hears the count after every tick (on a channel: a thread that ends the wait once
/// enough ticks came, or at its own deadline when none come, listens there).
pub fn keeps_pace<T>(waiting: impl Future<Output = T>, ticked: mpsc::Sender<u64>) -> (T, Pace) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(async move {
        let (pace_tx, pace_rx) = tokio::sync::watch::channel(Pace {
            ticks: 0,
            longest_gap: Duration::ZERO,
        });
        let ticker = tokio::spawn(async move {
            let mut interval = tokio::time::interval(TICK);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last = Instant::now();
            let mut pace = Pace {
                ticks: 0,
                longest_gap: Duration::ZERO,
            };
            loop {
                interval.tick().await;
                let now = Instant::now();
                pace.longest_gap = pace.longest_gap.max(now - last);
                pace.ticks += 1;
                last = now;
                let _ = pace_tx.send(pace);
                let _ = ticked.send(pace.ticks);
            }
        });
        let answer = waiting.await;
        ticker.abort();
        let pace = *pace_rx.borrow();
        (answer, pace)
    })
}

/// Block this thread until `ticked` has counted `ticks` ticks, or until `deadline`
/// passes: whether the ticks came first.
pub fn wait_for_ticks(ticked: &mpsc::Receiver<u64>, ticks: u64, deadline: Duration) -> bool {
    let until = Instant::now() + deadline;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match ticked.recv_timeout(left) {
            Ok(count) if count >= ticks => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_that_blocks_the_thread_loses_the_pace_and_an_async_one_keeps_it() {
        let (tx, _rx) = mpsc::channel();
        let (_, blocked) = keeps_pace(
            async { std::thread::sleep(Duration::from_millis(600)) },
            tx.clone(),
        );
        assert!(!blocked.kept(1), "{blocked:?}");
        let (_, slept) = keeps_pace(
            async { tokio::time::sleep(Duration::from_millis(600)).await },
            tx,
        );
        assert!(slept.kept(20), "{slept:?}");
    }
}
