//! The Backend conformance suite: what every [`Backend`] must do, checked the same way
//! for any backend through a [`BackendFixture`] that knows how to make jobs for it.
//!
//! Each case is a public async function taking the fixture; `backend_conformance!`
//! expands to one `#[tokio::test]` per case:
//!
//! ```
//! # mod demo {
//! use std::time::Duration;
//! use slurm_core::Backend;
//! use slurm_core::testing::backend_suite::BackendFixture;
//! use slurm_core::{JobSpec, LocalBackend, MemoryRecordStore};
//!
//! struct Local(LocalBackend, tempfile::TempDir);
//!
//! impl BackendFixture for Local {
//!     fn backend(&self) -> &dyn Backend { &self.0 }
//!     fn spec(&self, name: &str, command: &str) -> JobSpec { JobSpec::new(name, command) }
//!     fn blocker(&self, name: &str, command: &str) -> JobSpec { JobSpec::new(name, command) }
//! }
//!
//! fn local() -> Local {
//!     let dir = tempfile::tempdir().unwrap();
//!     let backend = LocalBackend::new(dir.path(), MemoryRecordStore::new()).unwrap().with_max_running(1);
//!     Local(backend, dir)
//! }
//!
//! slurm_core::backend_conformance!(local_backend, local());
//! # }
//! ```

use std::any::Any;
use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::{FutureExt, StreamExt};

use crate::backend::{
    Backend, JobStatus, LogOptions, LogStream, SubmitOptions, WatchEvent, WatchOptions,
};
use crate::classify::{ErrorClass, RetryPolicy};
use crate::record::{JobId, JobRecord, RecordFilter};
use crate::spec::{
    ArraySpec, Dependency, DependencyCondition, JobSpec, Scalar, Sweep, TaskSet, WallTime,
};
use crate::state::JobState;
use crate::{ErrorKind, Result};

mod resume;

pub use resume::{
    a_cancel_after_a_continuation_stops_the_run, a_failure_inside_a_segment_is_not_continued,
    a_run_of_three_segments_completes_with_its_work_continuous,
    a_run_over_its_budget_ends_error_naming_it, resume_counter,
};

/// What the suite needs to know of a backend: the backend, and how to write a small job
/// and a job that fills it.
#[async_trait]
pub trait BackendFixture: Send + Sync {
    /// The backend under test. Cases tell their records apart by id, so a backend may
    /// be shared with other cases.
    fn backend(&self) -> &dyn Backend;

    /// A small job running `command` with `bash -c`, with whatever resources this
    /// backend needs (partition, one GPU, a short wall time, ...).
    fn spec(&self, name: &str, command: &str) -> JobSpec;

    /// A job running `command` that takes all of the backend's capacity, so that a
    /// [`spec`](BackendFixture::spec) job submitted after it stays PENDING until it ends.
    fn blocker(&self, name: &str, command: &str) -> JobSpec;

    /// How often the cases poll.
    fn poll_interval(&self) -> Duration {
        Duration::from_millis(200)
    }

    /// How long a small job may take from submit to its end, queue time included.
    fn deadline(&self) -> Duration {
        Duration::from_secs(90)
    }

    /// One step of the resume cases' counting command: a second on a backend whose
    /// one-minute wall lasts a minute; shorter where time runs faster
    /// ([`LocalBackend::with_time_scale`](crate::LocalBackend::with_time_scale)).
    fn resume_step(&self) -> Duration {
        Duration::from_secs(1)
    }

    /// How long one segment of the resume cases may take: the one-minute wall and the
    /// time between segments.
    fn resume_segment(&self) -> Duration {
        Duration::from_secs(90)
    }

    /// Called when a case starts; the guard returned is dropped when it ends.
    /// `fills_backend` says whether the case takes all the capacity (a blocker): a
    /// fixture whose backend other tests share can make such cases run alone.
    async fn enter(&self, fills_backend: bool) -> Box<dyn Any + Send> {
        let _ = fills_backend;
        Box::new(())
    }
}

/// Poll `id` until `done` holds for its status, or panic with `what` after the
/// fixture's deadline.
pub async fn wait_until<F: BackendFixture + ?Sized>(
    fixture: &F,
    id: &JobId,
    what: &str,
    done: impl Fn(&JobStatus) -> bool,
) -> JobStatus {
    let deadline = Instant::now() + fixture.deadline();
    loop {
        let status = fixture.backend().status(id).await;
        match status {
            Ok(status) if done(&status) => return status,
            Ok(status) => assert!(
                Instant::now() < deadline,
                "{id} never became {what}; last {status:?}"
            ),
            Err(error) if error.is_transient() => {
                assert!(Instant::now() < deadline, "{id}: {error}")
            }
            Err(error) => panic!("status of {id}: {error}"),
        }
        tokio::time::sleep(fixture.poll_interval()).await;
    }
}

/// Poll `id` until it is terminal.
pub async fn wait_terminal<F: BackendFixture + ?Sized>(fixture: &F, id: &JobId) -> JobStatus {
    wait_until(fixture, id, "terminal", |s| s.state().is_terminal()).await
}

/// Poll `id` until it is terminal, or panic after `limit` (for runs longer than a
/// small job: the resume cases).
pub async fn wait_terminal_within<F: BackendFixture + ?Sized>(
    fixture: &F,
    id: &JobId,
    limit: Duration,
) -> JobStatus {
    let deadline = Instant::now() + limit;
    loop {
        match fixture.backend().status(id).await {
            Ok(status) if status.state().is_terminal() => return status,
            Ok(status) => assert!(
                Instant::now() < deadline,
                "{id} never ended within {limit:?}; last {status:?}"
            ),
            Err(error) if error.is_transient() => {
                assert!(Instant::now() < deadline, "{id}: {error}")
            }
            Err(error) => panic!("status of {id}: {error}"),
        }
        tokio::time::sleep(fixture.poll_interval()).await;
    }
}

/// Submit `spec` as one of the running case's jobs (cancelled if the case fails).
pub async fn submit_case_job<F: BackendFixture + ?Sized>(fixture: &F, spec: &JobSpec) -> JobRecord {
    submit(fixture, spec).await
}

tokio::task_local! {
    /// The jobs the running case has submitted (see [`run_case`]).
    static SUBMITTED: Arc<Mutex<Vec<JobId>>>;
}

/// Run `case` (one of this suite's cases, on `fixture`). If it fails, the jobs it
/// submitted that have not ended are cancelled before the failure goes on, so a
/// case that fails while its `sleep 300` job or its blocker runs does not hold the
/// backend and fail the cases queued behind it.
pub async fn run_case<F, C>(fixture: &F, case: C)
where
    F: BackendFixture + ?Sized,
    C: Future<Output = ()>,
{
    let submitted = Arc::new(Mutex::new(Vec::new()));
    let outcome = SUBMITTED
        .scope(submitted.clone(), AssertUnwindSafe(case).catch_unwind())
        .await;
    if let Err(failure) = outcome {
        let backend = fixture.backend();
        let ids = submitted.lock().map(|ids| ids.clone()).unwrap_or_default();
        let mut live: Vec<JobId> = Vec::new();
        for id in ids {
            if backend.record(&id).await.is_ok_and(|r| !r.is_terminal()) {
                live.push(id);
            }
        }
        if !live.is_empty() {
            if let Err(error) = backend.cancel_many(&live).await {
                eprintln!("after the failure, cancelling {live:?} failed too: {error}");
            }
        }
        std::panic::resume_unwind(failure);
    }
}

pub(super) async fn submit<F: BackendFixture + ?Sized>(fixture: &F, spec: &JobSpec) -> JobRecord {
    match fixture
        .backend()
        .submit(spec, SubmitOptions::default())
        .await
    {
        Ok(record) => {
            let _ = SUBMITTED.try_with(|ids| {
                if let Ok(mut ids) = ids.lock() {
                    ids.push(record.id.clone());
                }
            });
            record
        }
        Err(error) => panic!("submit of {}: {error}", spec.name),
    }
}

fn states(record: &JobRecord) -> Vec<JobState> {
    record.history.iter().map(|t| t.state).collect()
}

/// A job runs to COMPLETE: the submit answers with the scheduler's id and a state
/// past SUBMITTING (PENDING, RUNNING, or already ended); the history starts SUBMITTING and ends COMPLETE; the stored
/// record is what status says.
pub async fn submit_runs_a_job_to_complete<F: BackendFixture + ?Sized>(fixture: &F) {
    let _guard = fixture.enter(false).await;
    let record = submit(fixture, &fixture.spec("conf-ok", "echo hello-conformance")).await;
    let native = record
        .backend_ref
        .as_ref()
        .map(|r| r.native_id.clone())
        .unwrap_or_default();
    assert!(
        !native.is_empty(),
        "a submitted record names its job: {record:?}"
    );
    // Past SUBMITTING: accepted by the scheduler (a fast job may even have ended).
    assert!(
        !matches!(record.state, JobState::Submitting | JobState::Unknown),
        "{record:?}"
    );
    assert_eq!(record.attempt, 1);
    let done = wait_terminal(fixture, &record.id).await;
    assert_eq!(done.state(), JobState::Complete, "{done:?}");
    assert_eq!(done.native_id(), Some(native.as_str()));
    let history = states(&done.record);
    assert_eq!(history.first(), Some(&JobState::Submitting), "{history:?}");
    assert_eq!(history.last(), Some(&JobState::Complete), "{history:?}");
    assert_eq!(
        &fixture.backend().record(&record.id).await.unwrap(),
        done.record()
    );
}

/// A failing program ends ERROR, classed program, and its exit code is reported.
pub async fn a_failing_program_ends_error<F: BackendFixture + ?Sized>(fixture: &F) {
    let _guard = fixture.enter(false).await;
    let spec = fixture.spec(
        "conf-fail",
        "echo 'ValueError: bad learning rate' >&2; exit 3",
    );
    let record = submit(fixture, &spec).await;
    let done = wait_terminal(fixture, &record.id).await;
    assert_eq!(done.state(), JobState::Error, "{done:?}");
    assert_eq!(done.err_class(), Some(ErrorClass::Program), "{done:?}");
    let native = done.native.clone().expect("the scheduler's words");
    assert_eq!(native.exit_code, Some(3), "{done:?}");
}

/// `status_many` answers for each id, in the order asked, duplicates included.
pub async fn status_many_answers_in_order<F: BackendFixture + ?Sized>(fixture: &F) {
    let _guard = fixture.enter(false).await;
    let a = submit(fixture, &fixture.spec("conf-many-a", "true")).await;
    let b = submit(fixture, &fixture.spec("conf-many-b", "exit 2")).await;
    let c = submit(fixture, &fixture.spec("conf-many-c", "true")).await;
    let ids = vec![c.id.clone(), a.id.clone(), b.id.clone(), a.id.clone()];
    let first = fixture.backend().status_many(&ids).await.unwrap();
    let answered: Vec<&JobId> = first.iter().map(JobStatus::id).collect();
    assert_eq!(answered, ids.iter().collect::<Vec<_>>());
    for id in [&a.id, &b.id, &c.id] {
        wait_terminal(fixture, id).await;
    }
    let last = fixture.backend().status_many(&ids).await.unwrap();
    let got: Vec<(JobId, JobState)> = last.iter().map(|s| (s.id().clone(), s.state())).collect();
    assert_eq!(
        got,
        vec![
            (c.id.clone(), JobState::Complete),
            (a.id.clone(), JobState::Complete),
            (b.id.clone(), JobState::Error),
            (a.id.clone(), JobState::Complete),
        ]
    );
    assert!(fixture.backend().status_many(&[]).await.unwrap().is_empty());
}

/// The logs' tails: the last lines of stdout, and stderr apart from it.
pub async fn logs_tail_each_stream<F: BackendFixture + ?Sized>(fixture: &F) {
    let _guard = fixture.enter(false).await;
    let spec = fixture.spec(
        "conf-logs",
        "for i in 1 2 3 4 5; do echo out-$i; done; echo err-line >&2",
    );
    let record = submit(fixture, &spec).await;
    wait_terminal(fixture, &record.id).await;
    let backend = fixture.backend();
    let tail = backend
        .logs(
            &record.id,
            LogOptions {
                stream: LogStream::Out,
                tail: 2,
                ..LogOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        tail.lines().collect::<Vec<_>>(),
        ["out-4", "out-5"],
        "{tail:?}"
    );
    let err = backend
        .logs(
            &record.id,
            LogOptions {
                stream: LogStream::Err,
                tail: 10,
                ..LogOptions::default()
            },
        )
        .await
        .unwrap();
    assert!(err.contains("err-line") && !err.contains("out-"), "{err:?}");
}

/// Following a log yields what the job writes, in order, and ends with the job.
pub async fn follow_streams_until_the_job_ends<F: BackendFixture + ?Sized>(fixture: &F) {
    let _guard = fixture.enter(false).await;
    let spec = fixture.spec("conf-follow", "echo first; sleep 2; echo second");
    let record = submit(fixture, &spec).await;
    let mut stream = fixture.backend().follow_logs(
        &record.id,
        LogOptions::of(LogStream::Out),
        fixture.poll_interval(),
    );
    let mut text = String::new();
    let deadline = Instant::now() + fixture.deadline();
    while let Some(chunk) = tokio::time::timeout_at(deadline.into(), stream.next())
        .await
        .unwrap_or_else(|_| panic!("following {} never ended; got {text:?}", record.id))
    {
        text.push_str(&chunk.unwrap());
    }
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        ["first", "second"],
        "{text:?}"
    );
    assert!(fixture
        .backend()
        .record(&record.id)
        .await
        .unwrap()
        .is_terminal());
}

/// A running job is cancelled; a second cancel changes nothing and succeeds.
pub async fn cancel_a_running_job<F: BackendFixture + ?Sized>(fixture: &F) {
    let _guard = fixture.enter(false).await;
    let record = submit(fixture, &fixture.spec("conf-cancel-run", "sleep 300")).await;
    wait_until(fixture, &record.id, "RUNNING", |s| {
        s.state() == JobState::Running
    })
    .await;
    let cancelled = fixture.backend().cancel(&record.id).await.unwrap();
    assert_eq!(cancelled.state, JobState::Canceled, "{cancelled:?}");
    let again = fixture.backend().cancel(&record.id).await.unwrap();
    assert_eq!(again.history.len(), cancelled.history.len());
    assert_eq!(again.state, JobState::Canceled);
}

/// A job waiting behind a blocker is cancelled while PENDING, and never runs.
pub async fn cancel_a_pending_job<F: BackendFixture + ?Sized>(fixture: &F) {
    let _guard = fixture.enter(true).await;
    let blocker = submit(fixture, &fixture.blocker("conf-blocker", "sleep 300")).await;
    wait_until(fixture, &blocker.id, "RUNNING", |s| {
        s.state() == JobState::Running
    })
    .await;
    let waiting = submit(fixture, &fixture.spec("conf-cancel-pending", "true")).await;
    let pending = wait_until(fixture, &waiting.id, "PENDING", |s| {
        s.state() == JobState::Pending
    })
    .await;
    assert_eq!(pending.state(), JobState::Pending);
    let cancelled = fixture.backend().cancel(&waiting.id).await.unwrap();
    assert_eq!(cancelled.state, JobState::Canceled, "{cancelled:?}");
    assert!(
        !states(&cancelled).contains(&JobState::Running),
        "it never ran: {cancelled:?}"
    );
    let blocker = fixture.backend().cancel(&blocker.id).await.unwrap();
    assert_eq!(blocker.state, JobState::Canceled);
}

/// Several jobs are cancelled at once: the records come back in the order asked, the
/// live ones CANCELED, one that had already ended left as it was.
pub async fn cancel_many_cancels_each_in_order<F: BackendFixture + ?Sized>(fixture: &F) {
    let _guard = fixture.enter(false).await;
    let done = submit(fixture, &fixture.spec("conf-many-done", "true")).await;
    let done = wait_terminal(fixture, &done.id).await.record;
    assert_eq!(done.state, JobState::Complete, "{done:?}");
    let mut live = Vec::new();
    for n in 0..3 {
        live.push(
            submit(
                fixture,
                &fixture.spec(&format!("conf-many-{n}"), "sleep 300"),
            )
            .await,
        );
    }
    let ids = vec![
        live[0].id.clone(),
        done.id.clone(),
        live[1].id.clone(),
        live[2].id.clone(),
    ];
    let records = fixture.backend().cancel_many(&ids).await.unwrap();
    let answered: Vec<&JobId> = records.iter().map(|r| &r.id).collect();
    assert_eq!(
        answered,
        ids.iter().collect::<Vec<_>>(),
        "in the order asked"
    );
    assert_eq!(records[1].state, JobState::Complete);
    assert_eq!(
        records[1].history.len(),
        done.history.len(),
        "left as it was"
    );
    for record in [&records[0], &records[2], &records[3]] {
        assert_eq!(record.state, JobState::Canceled, "{record:?}");
    }
}

/// One watch stream reports each state change of each job once, and ends when all are
/// terminal.
pub async fn watch_reports_each_change_once<F: BackendFixture + ?Sized>(fixture: &F) {
    let _guard = fixture.enter(false).await;
    let ok = submit(fixture, &fixture.spec("conf-watch-ok", "sleep 1")).await;
    let bad = submit(fixture, &fixture.spec("conf-watch-bad", "sleep 1; exit 1")).await;
    let options = WatchOptions {
        interval: fixture.poll_interval(),
        ..WatchOptions::default()
    };
    let mut events = fixture
        .backend()
        .watch(&[ok.id.clone(), bad.id.clone(), ok.id.clone()], options);
    let mut seen: BTreeMap<JobId, Vec<(JobState, JobState)>> = BTreeMap::new();
    let deadline = Instant::now() + fixture.deadline();
    while let Some(event) = tokio::time::timeout_at(deadline.into(), events.next())
        .await
        .unwrap_or_else(|_| panic!("the watch never ended; saw {seen:?}"))
    {
        match event.unwrap() {
            WatchEvent::Transition { from, status } => {
                seen.entry(status.id().clone())
                    .or_default()
                    .push((from, status.state()));
            }
            other => panic!("no retry was asked for: {other:?}"),
        }
    }
    for (record, last) in [(&ok, JobState::Complete), (&bad, JobState::Error)] {
        let changes = &seen[&record.id];
        assert_eq!(changes.last().map(|c| c.1), Some(last), "{changes:?}");
        for pair in changes.windows(2) {
            assert_eq!(
                pair[0].1, pair[1].0,
                "each change starts where the last ended"
            );
        }
        assert!(changes.iter().all(|(from, to)| from != to), "{changes:?}");
    }
}

/// An infrastructure failure is retried as a new record linked by `retry_of`, within
/// the policy's budget; the watch follows the new attempt and stops when the budget is
/// spent. The failure ended before the watch started (a quick job, a busy machine):
/// the watch retries it all the same (it used to drop a job already ended).
pub async fn an_infra_failure_is_retried_as_a_linked_record<F: BackendFixture + ?Sized>(
    fixture: &F,
) {
    let _guard = fixture.enter(false).await;
    let spec = fixture.spec(
        "conf-retry",
        "echo 'NCCL error: unhandled system error' >&2; exit 1",
    );
    let first = submit(fixture, &spec).await;
    wait_terminal(fixture, &first.id).await;
    let retries = watch_with_retries(fixture, std::slice::from_ref(&first.id), 1).await;
    assert_eq!(
        retries.len(),
        1,
        "a budget of one: {retries:?}; the first attempt: {:?}",
        fixture.backend().record(&first.id).await
    );
    let (previous, second) = &retries[0];
    assert_eq!(previous, &first.id);
    assert_eq!(second.retry_of.as_ref(), Some(&first.id));
    assert_eq!(second.attempt, 2);
    assert_ne!(
        second.results_dir, first.results_dir,
        "a fresh results folder"
    );
    let backend = fixture.backend();
    let first = backend.record(&first.id).await.unwrap();
    assert_eq!(
        (first.state, first.err_class),
        (JobState::Error, Some(ErrorClass::Infra))
    );
    let second = backend.record(&second.id).await.unwrap();
    assert_eq!(
        second.state,
        JobState::Error,
        "the retry failed the same way"
    );
    let listed = backend.records(&RecordFilter::any()).await.unwrap();
    assert!(listed.iter().any(|r| r.id == first.id));
    assert!(listed.iter().any(|r| r.id == second.id));
}

/// Two watchers with retries on one infrastructure failure (two orchestrators, or two
/// processes sharing the records) retry it once: the retry is claimed under the
/// failed record's lock, and the second watcher follows the first one's retry.
pub async fn two_watchers_retry_one_failure_once<F: BackendFixture + ?Sized>(fixture: &F) {
    let _guard = fixture.enter(false).await;
    let spec = fixture.spec(
        "conf-retry2",
        "echo 'NCCL error: unhandled system error' >&2; exit 1",
    );
    let first = submit(fixture, &spec).await;
    let options = WatchOptions {
        interval: fixture.poll_interval(),
        retry: Some(RetryPolicy {
            budget: 1,
            ..RetryPolicy::default()
        }),
        ..WatchOptions::default()
    };
    let backend = fixture.backend();
    let watch = |options: WatchOptions| {
        let mut events = backend.watch(std::slice::from_ref(&first.id), options);
        async move {
            let mut retries = Vec::new();
            while let Some(event) = events.next().await {
                if let WatchEvent::Retried { record, .. } = event.unwrap() {
                    retries.push(record.id.clone());
                }
            }
            retries
        }
    };
    let deadline = fixture.deadline() * 2;
    let (a, b) = tokio::time::timeout(
        deadline,
        futures::future::join(watch(options.clone()), watch(options)),
    )
    .await
    .expect("the watches ended");
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a, b, "both watchers follow the one retry");
    let retries: Vec<JobRecord> = backend
        .records(&RecordFilter::any())
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.retry_of.as_ref() == Some(&first.id) && r.state != JobState::NotSubmitted)
        .collect();
    assert_eq!(retries.len(), 1, "one retry submitted: {retries:?}");
    assert_eq!(
        backend.record(&first.id).await.unwrap().retried_as.as_ref(),
        Some(&retries[0].id),
        "the claim names the retry"
    );
    // Asking again returns the same retry; nothing new is submitted.
    let again = backend.resubmit(&first.id).await.unwrap();
    assert_eq!(again.id, retries[0].id);
}

/// Bad input is refused with an error naming the field, before anything is recorded
/// (a secret's value too: set, one line, no NUL, long enough to redact); unknown ids
/// are NotFound; a job still running cannot be resubmitted.
pub async fn bad_input_is_refused_and_nothing_recorded<F: BackendFixture + ?Sized>(fixture: &F) {
    let _guard = fixture.enter(false).await;
    let backend = fixture.backend();
    let before = backend.records(&RecordFilter::any()).await.unwrap().len();
    let expect_refusal = |result: Result<JobRecord>, field: &str| {
        let error = result.expect_err("refused");
        assert!(
            matches!(error.kind(), ErrorKind::Invalid | ErrorKind::Config),
            "{error}"
        );
        assert!(error.to_string().contains(field), "{field}: {error}");
    };
    let mut bad_name = fixture.spec("conf-bad", "true");
    bad_name.name = "../escape".into();
    expect_refusal(
        backend.submit(&bad_name, SubmitOptions::default()).await,
        "name",
    );
    let mut too_long = fixture.spec("conf-bad", "true");
    too_long.time = Some(WallTime::from_hours(24 * 365));
    expect_refusal(
        backend.submit(&too_long, SubmitOptions::default()).await,
        "time",
    );
    let mut secret = fixture.spec("conf-bad", "true");
    secret.secrets = vec!["SLURM_RUN_CONFORMANCE_UNSET_TOKEN".into()];
    let options = SubmitOptions {
        secret_values: Some(BTreeMap::new()),
        ..SubmitOptions::default()
    };
    expect_refusal(
        backend.submit(&secret, options).await,
        "SLURM_RUN_CONFORMANCE_UNSET_TOKEN",
    );
    // One rule for a secret's value, whichever backend: set, one line, no NUL, long
    // enough to redact.
    for value in ["", "two\nlines", "nul\0inside", "abc"] {
        let options = SubmitOptions {
            secret_values: Some(
                [(
                    "SLURM_RUN_CONFORMANCE_UNSET_TOKEN".to_string(),
                    value.to_string(),
                )]
                .into(),
            ),
            ..SubmitOptions::default()
        };
        expect_refusal(
            backend.submit(&secret, options).await,
            "SLURM_RUN_CONFORMANCE_UNSET_TOKEN",
        );
    }
    assert_eq!(
        backend.records(&RecordFilter::any()).await.unwrap().len(),
        before,
        "a refused spec leaves no record"
    );
    let unknown = JobId::parse("conf-unknown-000000").unwrap();
    for error in [
        backend.status(&unknown).await.unwrap_err(),
        backend.cancel(&unknown).await.unwrap_err(),
        backend.record(&unknown).await.unwrap_err(),
    ] {
        assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");
    }
    let running = submit(fixture, &fixture.spec("conf-busy", "sleep 300")).await;
    let error = backend.resubmit(&running.id).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Invalid, "{error}");
    backend.cancel(&running.id).await.unwrap();
}

/// Watch `ids` with a retry budget until every job is terminal (panics after twice the
/// fixture's deadline): the retries, as (failed record, new record), in order.
pub async fn watch_with_retries<F: BackendFixture + ?Sized>(
    fixture: &F,
    ids: &[JobId],
    budget: u32,
) -> Vec<(JobId, JobRecord)> {
    let options = WatchOptions {
        interval: fixture.poll_interval(),
        retry: Some(RetryPolicy {
            budget,
            ..RetryPolicy::default()
        }),
        ..WatchOptions::default()
    };
    let mut events = fixture.backend().watch(ids, options);
    let mut retries = Vec::new();
    let deadline = Instant::now() + fixture.deadline() * 2;
    while let Some(event) = tokio::time::timeout_at(deadline.into(), events.next())
        .await
        .unwrap_or_else(|_| panic!("the watch never ended; retries {retries:?}"))
    {
        if let WatchEvent::Retried { previous, record } = event.unwrap() {
            retries.push((previous, *record));
        }
    }
    retries
}

/// A command that fails as infra ("NCCL error") the first time it runs in a results
/// root and succeeds after: a marker file beside the job's folder (its working folder)
/// remembers the first run.
fn fails_once(tag: &str) -> String {
    let marker = format!("../.conf-once-{tag}-{:08x}", rand::random::<u32>());
    format!("if [ -e {marker} ]; then echo second-run-ok; else touch {marker}; echo 'NCCL error: unhandled system error' >&2; exit 1; fi")
}

/// When `record` entered `state` first (panics when it never did).
fn entered(record: &JobRecord, state: JobState) -> chrono::DateTime<chrono::Utc> {
    record
        .history
        .iter()
        .find(|t| t.state == state)
        .unwrap_or_else(|| panic!("{} never was {state}: {record:?}", record.id))
        .at
}

async fn submit_after<F: BackendFixture + ?Sized>(
    fixture: &F,
    spec: &JobSpec,
    after: Vec<Dependency>,
) -> JobRecord {
    let options = SubmitOptions {
        after,
        ..SubmitOptions::default()
    };
    match fixture.backend().submit(spec, options).await {
        Ok(record) => record,
        Err(error) => panic!("submit of {}: {error}", spec.name),
    }
}

/// A pipeline: a dependant starts only once its parent completed (the backend's queue
/// or scheduler holds it, not the caller), and `any` runs after a failure too.
pub async fn dependants_start_after_their_parents<F: BackendFixture + ?Sized>(fixture: &F) {
    let _guard = fixture.enter(false).await;
    let train = submit(
        fixture,
        &fixture.spec("conf-train", "sleep 2; echo trained"),
    )
    .await;
    let eval = submit_after(
        fixture,
        &fixture.spec("conf-eval", "echo evaluated"),
        vec![Dependency::ok(train.id.clone())],
    )
    .await;
    let broken = submit(fixture, &fixture.spec("conf-broken", "exit 4")).await;
    let cleanup = submit_after(
        fixture,
        &fixture.spec("conf-cleanup", "echo cleaned"),
        vec![Dependency {
            job: broken.id.clone(),
            condition: DependencyCondition::Any,
        }],
    )
    .await;
    assert_eq!(eval.after, vec![Dependency::ok(train.id.clone())]);
    let eval = wait_terminal(fixture, &eval.id).await;
    let train = wait_terminal(fixture, &train.id).await;
    assert_eq!(eval.state(), JobState::Complete, "{eval:?}");
    assert_eq!(train.state(), JobState::Complete, "{train:?}");
    let started = eval
        .record
        .history
        .iter()
        .find(|t| t.state == JobState::Running);
    if let Some(started) = started {
        assert!(
            started.at >= entered(&train.record, JobState::Running),
            "the dependant ran before its parent"
        );
    }
    let cleanup = wait_terminal(fixture, &cleanup.id).await;
    assert_eq!(cleanup.state(), JobState::Complete, "{cleanup:?}");
    // A parent that cannot meet the condition any more is refused at submit.
    let error = fixture
        .backend()
        .submit(
            &fixture.spec("conf-late", "true"),
            SubmitOptions {
                after: vec![Dependency::ok(broken.id.clone())],
                ..SubmitOptions::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Invalid, "{error}");
    assert!(error.to_string().contains(broken.id.as_str()), "{error}");
}

/// A parent that fails for good ends its dependant ERROR, naming the parent and why,
/// and leaves it waiting nowhere.
pub async fn a_failed_parent_ends_its_dependant<F: BackendFixture + ?Sized>(fixture: &F) {
    let _guard = fixture.enter(false).await;
    let parent = submit(
        fixture,
        &fixture.spec("conf-parent", "sleep 1; echo 'ValueError: bad' >&2; exit 3"),
    )
    .await;
    let child = submit_after(
        fixture,
        &fixture.spec("conf-child", "echo never"),
        vec![Dependency::ok(parent.id.clone())],
    )
    .await;
    let done = wait_terminal(fixture, &child.id).await;
    assert_eq!(done.state(), JobState::Error, "{done:?}");
    assert_eq!(done.err_class(), Some(ErrorClass::Program));
    let message = done.record.last_message();
    assert!(message.contains(parent.id.as_str()), "{message}");
    assert!(message.contains("never"), "{message}");
    assert!(
        !states(&done.record).contains(&JobState::Running),
        "it never ran"
    );
}

/// A parent failing as infra and retried by a watch is followed by its dependant, which
/// runs after the new attempt instead of failing.
pub async fn a_dependant_follows_a_retried_parent<F: BackendFixture + ?Sized>(fixture: &F) {
    let _guard = fixture.enter(false).await;
    let parent = submit(fixture, &fixture.spec("conf-flaky", &fails_once("parent"))).await;
    let child = submit_after(
        fixture,
        &fixture.spec("conf-follower", "echo followed"),
        vec![Dependency::ok(parent.id.clone())],
    )
    .await;
    let retried = watch_with_retries(fixture, &[parent.id.clone(), child.id.clone()], 1)
        .await
        .pop()
        .map(|(_, record)| record);
    let retry = retried.expect("the parent was retried");
    let backend = fixture.backend();
    assert_eq!(
        backend.record(&retry.id).await.unwrap().state,
        JobState::Complete
    );
    let child = backend.record(&child.id).await.unwrap();
    assert_eq!(child.state, JobState::Complete, "{child:?}");
    assert_eq!(
        child.after,
        vec![Dependency::ok(retry.id.clone())],
        "it follows the retry"
    );
}

/// An array (here a sweep of three points, two at a time) is one record with one state
/// per task; each task sees its index and its values, and has its own log.
pub async fn a_sweep_runs_each_task_with_its_values<F: BackendFixture + ?Sized>(fixture: &F) {
    let _guard = fixture.enter(false).await;
    let mut spec = fixture.spec("conf-sweep", "echo \"task=$TASK_INDEX lr=$LR\"");
    spec.sweep = Some(Sweep::Grid(
        [(
            "LR".to_string(),
            vec![
                Scalar("0.1".into()),
                Scalar("0.01".into()),
                Scalar("1e-3".into()),
            ],
        )]
        .into(),
    ));
    spec.array = Some(ArraySpec {
        max_parallel: Some(2),
        ..ArraySpec::default()
    });
    let record = submit(fixture, &spec).await;
    assert_eq!(record.tasks.keys().copied().collect::<Vec<_>>(), [0, 1, 2]);
    let done = wait_terminal(fixture, &record.id).await;
    assert_eq!(done.state(), JobState::Complete, "{done:?}");
    assert!(done
        .record
        .tasks
        .values()
        .all(|t| t.state == JobState::Complete));
    for (task, lr) in [(0, "0.1"), (1, "0.01"), (2, "1e-3")] {
        let log = fixture
            .backend()
            .logs(
                &record.id,
                LogOptions {
                    task: Some(task),
                    ..LogOptions::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(log.trim(), format!("task={task} lr={lr}"), "task {task}");
    }
    let error = fixture
        .backend()
        .logs(&record.id, LogOptions::default())
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Invalid, "{error}");
}

/// Some tasks of an array are cancelled; the others go on; then the whole array.
pub async fn tasks_of_an_array_are_cancelled<F: BackendFixture + ?Sized>(fixture: &F) {
    let _guard = fixture.enter(false).await;
    let mut spec = fixture.spec("conf-array", "sleep 300");
    spec.array = Some(ArraySpec {
        size: Some(3),
        ..ArraySpec::default()
    });
    let record = submit(fixture, &spec).await;
    let backend = fixture.backend();
    let one = TaskSet::parse("tasks", "1").unwrap();
    let after = backend.cancel_tasks(&record.id, &one).await.unwrap();
    assert_eq!(after.tasks[&1].state, JobState::Canceled, "{after:?}");
    assert!(!after.state.is_terminal(), "the others go on: {after:?}");
    assert!(after.tasks[&0].state != JobState::Canceled);
    let missing = TaskSet::parse("tasks", "7").unwrap();
    let error = backend
        .cancel_tasks(&record.id, &missing)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Invalid, "{error}");
    let all = backend.cancel(&record.id).await.unwrap();
    assert_eq!(all.state, JobState::Canceled, "{all:?}");
    assert!(all.tasks.values().all(|t| t.state == JobState::Canceled));
}

/// A task failing as infra is retried alone: a new, smaller array of just that index,
/// linked to the first; the tasks that completed are not run again.
pub async fn a_failed_task_is_retried_alone<F: BackendFixture + ?Sized>(fixture: &F) {
    let _guard = fixture.enter(false).await;
    let command = format!(
        "if [ \"$TASK_INDEX\" = 1 ]; then {}; else echo fine; fi",
        fails_once("task")
    );
    let mut spec = fixture.spec("conf-retry-task", &command);
    spec.array = Some(ArraySpec {
        size: Some(3),
        ..ArraySpec::default()
    });
    let first = submit(fixture, &spec).await;
    let retried = watch_with_retries(fixture, std::slice::from_ref(&first.id), 1)
        .await
        .pop()
        .map(|(_, record)| record);
    let backend = fixture.backend();
    let first = backend.record(&first.id).await.unwrap();
    assert_eq!(
        (first.state, first.err_class),
        (JobState::Error, Some(ErrorClass::Infra))
    );
    assert_eq!(first.tasks[&0].state, JobState::Complete);
    let retry = backend.record(&retried.expect("retried").id).await.unwrap();
    assert_eq!(retry.retry_of.as_ref(), Some(&first.id));
    assert_eq!(
        retry.tasks.keys().copied().collect::<Vec<_>>(),
        [1],
        "only the failed task"
    );
    assert_eq!(retry.state, JobState::Complete, "{retry:?}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::local::tests::local;

    /// A case that fails while its long job runs leaves no job behind it: the suite's
    /// conformance runs went stuck for minutes behind such a job.
    #[tokio::test]
    async fn a_failing_case_cancels_the_jobs_it_left_running() {
        let fixture = local();
        let failing = async {
            let done = submit(&fixture, &fixture.spec("short", "true")).await;
            wait_terminal(&fixture, &done.id).await;
            let long = submit(&fixture, &fixture.spec("long", "sleep 300")).await;
            panic!("the case fails while {} runs", long.id);
        };
        let failure = AssertUnwindSafe(run_case(&fixture, failing))
            .catch_unwind()
            .await
            .expect_err("the case's failure goes on");
        let message = failure
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(message.contains("the case fails while"), "{message}");
        let records = fixture
            .backend()
            .records(&RecordFilter::any())
            .await
            .unwrap();
        let state = |name: &str| {
            records
                .iter()
                .find(|r| r.name == name)
                .map(|r| r.state)
                .unwrap()
        };
        assert_eq!(state("long"), JobState::Canceled, "{records:?}");
        assert_eq!(state("short"), JobState::Complete, "left as it was");
    }
}
