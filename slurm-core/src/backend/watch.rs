//! Watch by polling, for any backend: one `status_many` per cycle for every watched job,
//! each transition reported once, back-off on transient errors (each reported, with the
//! pause before the next poll), infra failures resubmitted within the retry budget.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use futures::stream::{self, BoxStream, StreamExt};

use super::{Backend, WaitCategory, WatchEvent, WatchOptions};
use crate::classify::ErrorClass;
use crate::record::{JobId, JobRecord};
use crate::state::JobState;
use crate::{ErrorKind, Result};

struct Watch<B> {
    backend: B,
    options: WatchOptions,
    /// Watched jobs not yet terminal, with the state last reported.
    active: Vec<(JobId, JobState)>,
    /// The category last seen of each active job the backend categorises.
    categories: HashMap<JobId, WaitCategory>,
    queued: VecDeque<Result<WatchEvent>>,
    failures: u32,
    first: bool,
    /// The ids asked for, until the watch's first step reads their records.
    starting: Option<Vec<JobId>>,
}

/// [`Backend::watch`] for any backend that can answer [`Backend::status_many`]:
/// polls every job still active once per cycle (so a backend whose `status_many` is
/// one round trip watches any number of jobs for one round trip a cycle), reports each
/// state change once, doubles the pause after each transient error up to
/// `options.max_backoff`, resubmits ERROR jobs the retry policy allows (reporting
/// [`WatchEvent::Retried`] and following the new record; a job that had already failed
/// when the watch began is retried too), and ends when every job is terminal or on a
/// lasting error (reported as the last item). Never stops on elapsed time.
pub(crate) fn watch_by_polling<B>(
    backend: B,
    ids: &[JobId],
    options: WatchOptions,
) -> BoxStream<'static, Result<WatchEvent>>
where
    B: Backend + Clone + 'static,
{
    let state = Watch {
        backend,
        options,
        active: Vec::new(),
        categories: HashMap::new(),
        queued: VecDeque::new(),
        failures: 0,
        first: true,
        starting: Some(ids.to_vec()),
    };
    stream::unfold(state, |mut st| async move {
        if let Some(ids) = st.starting.take() {
            st.start(ids).await;
        }
        loop {
            if let Some(event) = st.queued.pop_front() {
                return Some((event, st));
            }
            if st.active.is_empty() {
                return None;
            }
            if !st.first {
                tokio::time::sleep(st.delay()).await;
            }
            st.first = false;
            st.cycle().await;
        }
    })
    .boxed()
}

/// Whether the watch's retry policy resubmits `record` (an ERROR it allows).
fn retries(options: &WatchOptions, record: &JobRecord) -> bool {
    match &options.retry {
        Some(policy) if record.state == JobState::Error => {
            let class = record.err_class.unwrap_or(ErrorClass::Program);
            policy.should_retry(class, record.attempt)
        }
        _ => false,
    }
}

impl<B: Backend> Watch<B> {
    /// The pause before the next cycle: the interval, doubled per consecutive
    /// transient failure up to the maximum back-off.
    fn delay(&self) -> Duration {
        let factor = 2u32.saturating_pow(self.failures.min(16));
        self.options
            .interval
            .saturating_mul(factor)
            .min(self.options.max_backoff.max(self.options.interval))
    }

    /// Read the records of `ids` (each once) and watch those not ended; a job that
    /// failed before the watch began gets the retry the policy allows (at the first
    /// cycle; its state is no change to report). One unreadable record costs its own
    /// job only.
    async fn start(&mut self, ids: Vec<JobId>) {
        let mut seen = HashSet::new();
        for id in ids {
            if !seen.insert(id.clone()) {
                continue;
            }
            match self.backend.record(&id).await {
                Ok(record) if retries(&self.options, &record) => {
                    self.active.push((id, record.state))
                }
                Ok(record) if record.state.is_terminal() => {}
                Ok(record) => self.active.push((id, record.state)),
                Err(error) if error.kind() == ErrorKind::CorruptRecord => {
                    self.queued.push_back(Ok(WatchEvent::Dropped {
                        id,
                        reason: error.to_string(),
                    }))
                }
                Err(error) => self.queued.push_back(Err(error)),
            }
        }
    }

    /// Stop watching the jobs whose record cannot be read (no remote call), reporting
    /// each; whether there was one.
    async fn drop_unreadable(&mut self) -> bool {
        let before = self.active.len();
        let mut kept = Vec::with_capacity(before);
        for (id, state) in std::mem::take(&mut self.active) {
            match self.backend.record(&id).await {
                Err(error) if error.kind() == ErrorKind::CorruptRecord => {
                    tracing::warn!(job = %id, %error, "a watched record cannot be read; no longer watched");
                    self.queued.push_back(Ok(WatchEvent::Dropped {
                        id: id.clone(),
                        reason: error.to_string(),
                    }));
                }
                _ => kept.push((id, state)),
            }
        }
        self.active = kept;
        self.active.len() < before
    }

    /// One poll of every active job, queueing the events it yields.
    async fn cycle(&mut self) {
        let ids: Vec<JobId> = self.active.iter().map(|(id, _)| id.clone()).collect();
        let statuses = match self.backend.status_many(&ids).await {
            Ok(statuses) => {
                self.failures = 0;
                statuses
            }
            Err(error) if error.is_transient() => {
                self.failures += 1;
                let retry_in = self.delay();
                tracing::warn!(%error, failures = self.failures, ?retry_in, "poll failed; backing off");
                self.queued.push_back(Ok(WatchEvent::Unanswered {
                    reason: error.to_string(),
                    failures: self.failures,
                    retry_in,
                }));
                return;
            }
            Err(error)
                if error.kind() == ErrorKind::CorruptRecord && self.drop_unreadable().await =>
            {
                // The watched records that cannot be read are dropped (each reported);
                // the next cycle polls the others.
                return;
            }
            Err(error) => {
                // A lasting failure (the record folder broke, a parse error) ends the watch.
                self.active.clear();
                self.queued.push_back(Err(error));
                return;
            }
        };
        let mut still_active = Vec::new();
        for ((id, last), status) in self.active.drain(..).zip(statuses) {
            let now = status.state();
            let category = status.native().and_then(|n| n.category);
            let before = match category {
                Some(category) => self.categories.insert(id.clone(), category),
                None => self.categories.remove(&id),
            };
            if now != last {
                self.queued.push_back(Ok(WatchEvent::Transition {
                    from: last,
                    status: Box::new(status.clone()),
                }));
            } else if let (Some(from), Some(category)) = (before, category) {
                if from != category && category.waits() {
                    self.queued.push_back(Ok(WatchEvent::Waiting {
                        from,
                        status: Box::new(status.clone()),
                    }));
                }
            }
            if !now.is_terminal() {
                still_active.push((id, now));
                continue;
            }
            let retry = retries(&self.options, &status.record);
            if retry {
                match self.backend.resubmit(&id).await {
                    Ok(record) => {
                        still_active.push((record.id.clone(), record.state));
                        self.queued.push_back(Ok(WatchEvent::Retried {
                            previous: id,
                            record: Box::new(record),
                        }));
                    }
                    Err(error) => self.queued.push_back(Err(error)),
                }
            }
        }
        self.active = still_active;
    }
}
