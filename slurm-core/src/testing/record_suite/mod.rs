//! The RecordStore conformance suite: what every [`RecordStore`] must do, checked the same
//! way for any store through a [`RecordStoreFixture`] that makes one, tells other
//! processes how to reach it, and can plant records the store's own rules would never
//! write (an older schema's, an unreadable one).
//!
//! Each case is a public function taking the fixture and the [`Case`];
//! [`record_store_conformance!`](crate::record_store_conformance) expands to one `#[test]`
//! per case. The cases of several processes run this test binary again as workers (the
//! test of the case, with the worker's role in its environment), so a store that
//! another process can reach is shared by real processes: leases that die with their
//! process, claims and writes from several processes at once.
//!
//! ```
//! # mod demo {
//! use std::sync::Arc;
//! use slurm_core::testing::record_suite::{suite_redactor, Planted, RecordStoreFixture};
//! use slurm_core::{FileRecordStore, JobId, RecordStore, Result};
//!
//! struct Folder(Arc<FileRecordStore>, tempfile::TempDir);
//!
//! impl RecordStoreFixture for Folder {
//!     fn store(&self) -> Arc<dyn RecordStore> { self.0.clone() }
//!     fn shared(&self) -> Option<String> { Some(self.1.path().display().to_string()) }
//!     fn open_shared(shared: &str) -> Result<Box<dyn RecordStore>> {
//!         Ok(Box::new(FileRecordStore::new(shared)?))
//!     }
//!     fn plant(&self, id: &JobId, planted: Planted<'_>) -> bool {
//!         std::fs::write(self.1.path().join(format!("{id}.json")), planted.bytes()).unwrap();
//!         true
//!     }
//! }
//!
//! fn folder() -> Folder {
//!     let dir = tempfile::tempdir().unwrap();
//!     let store = FileRecordStore::new(dir.path()).unwrap().with_redactor(suite_redactor());
//!     Folder(Arc::new(store), dir)
//! }
//!
//! slurm_core::record_store_conformance!(file_store, folder());
//! # }
//! ```

mod batches;
mod continuations;
mod off_runtime;
mod revision;
mod workers;

pub use batches::mark_many_marks_each_as_mark_does;
pub use continuations::a_continuation_marked_by_several_processes_counts_once;
pub use off_runtime::waiting_for_a_held_lease_keeps_the_runtime_ticking;
pub use revision::the_revision_moves_with_every_write;

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;

use crate::classify::ErrorClass;
use crate::record::{
    BackendRef, JobId, JobRecord, Mark, RecordFilter, RecordStore, RetryClaim, TaskMark,
    TransitionSource,
};
use crate::redact::SecretRegistry;
use crate::spec::JobSpec;
use crate::state::JobState;
use crate::storage::RemotePath;
use crate::{ErrorKind, Result};

use workers::{play, ProcessVoice, Role, Worker, ROLE_ENV, SHARED_ENV};

/// The secret the suite's store redacts ([`suite_redactor`]): its value must never be
/// stored.
pub const SUITE_SECRET: (&str, &str) = ("HF_TOKEN", "hf_recordsuitesecretvalue");

/// A record written by slurm-run with schema 2 (before `unsettled` was typed): a
/// retried job that ended ERROR, as its JSON file held it.
pub const SCHEMA_2_RECORD: &str = include_str!("../../../tests/fixtures/record-v2.json");

/// The redactor the fixture's store is made with (it knows [`SUITE_SECRET`]).
pub fn suite_redactor() -> SecretRegistry {
    let mut registry = SecretRegistry::new();
    assert!(registry.register(SUITE_SECRET.0, SUITE_SECRET.1));
    registry
}

/// A record as the fixture stores it past the store's rules.
#[derive(Debug, Clone, Copy)]
pub enum Planted<'a> {
    /// This JSON text, as the store keeps a record's JSON (a file's contents, a row's
    /// body), with whatever else the store keeps of a record derived from it.
    Json(&'a str),
    /// Bytes that are no record at all (a torn write, a disk error).
    Unreadable,
}

impl Planted<'_> {
    /// What the store holds for the record: the JSON's bytes, or bytes that do not parse.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Planted::Json(text) => text.as_bytes(),
            Planted::Unreadable => b"{\"schema_version\": 3, \"id\": \"torn",
        }
    }
}

/// What the suite needs of a store: the store, how another process reaches it, and a
/// way past its rules.
pub trait RecordStoreFixture: Send + Sync {
    /// The store under test, empty when the case starts, redacting with
    /// [`suite_redactor`] (a case checks that a secret in a message is never stored).
    fn store(&self) -> Arc<dyn RecordStore>;

    /// What another process passes to [`RecordStoreFixture::open_shared`] to reach this
    /// same store, or `None` for a store no other process can reach (records in
    /// memory): the cases of several processes then run their workers as threads of
    /// this process, on [`RecordStoreFixture::store`].
    fn shared(&self) -> Option<String>;

    /// Open the store `shared` names (in a worker process).
    fn open_shared(shared: &str) -> Result<Box<dyn RecordStore>>
    where
        Self: Sized;

    /// Store `planted` as record `id`, past the store's rules, as another or an older
    /// slurm-run, or a torn write, would leave it. Returns whether the store can hold
    /// such a record at all (records in memory are never unreadable: `false`).
    fn plant(&self, id: &JobId, planted: Planted<'_>) -> bool;
}

/// The case being run: its test's name, which its worker processes run again.
#[derive(Debug, Clone)]
pub struct Case {
    test: String,
}

impl Case {
    /// The case of test `test` (its path in the test binary, as libtest names it).
    pub fn new(test: impl Into<String>) -> Self {
        Case { test: test.into() }
    }
}

/// Run `case` on the fixture `make` builds, as test `test` (a path with its crate's
/// name first, as `module_path!` gives it): or, in a worker process of that test, the
/// worker's role on the store its environment names (the fixture is not built).
pub fn run<F: RecordStoreFixture>(test: &str, make: impl FnOnce() -> F, case: fn(&F, &Case)) {
    // libtest names a test by its path without the crate's name.
    let test = test.split_once("::").map_or(test, |(_, rest)| rest);
    if let Ok(role) = std::env::var(ROLE_ENV) {
        let shared = std::env::var(SHARED_ENV).expect("a worker's store");
        let store = F::open_shared(&shared).expect("the worker opens the shared store");
        play(store.as_ref(), &Role::decode(&role), &mut ProcessVoice);
        std::process::exit(0);
    }
    let fixture = make();
    case(&fixture, &Case::new(test));
}

/// A new record `id` (SUBMITTING) of a small spec with labels `arch=dino`, `action=train`.
pub(crate) fn record(id: JobId) -> JobRecord {
    let mut spec = JobSpec::new("suite", "python train.py");
    spec.secrets = vec![SUITE_SECRET.0.into()];
    spec.labels.insert("arch".into(), "dino".into());
    spec.labels.insert("action".into(), "train".into());
    let dir = RemotePath::parse("/shared/results")
        .expect("a path")
        .join(id.as_str())
        .expect("a path");
    JobRecord::new(id, &spec, dir).expect("a record")
}

/// The `counter` label of a record (0 without one).
pub(crate) fn counter(record: &JobRecord) -> u64 {
    record
        .labels
        .get("counter")
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

fn states(record: &JobRecord) -> Vec<JobState> {
    record.history.iter().map(|t| t.state).collect()
}

fn ids(records: &[JobRecord]) -> Vec<&JobId> {
    records.iter().map(|r| &r.id).collect()
}

/// Open creates a record once: a second open of the id is refused, naming it; `get`
/// answers what was opened and NotFound for an id never opened; `get_many` answers in
/// the order asked, duplicates too, and NotFound naming an id never opened.
pub fn open_is_create_exclusive_and_get_reports_missing<F: RecordStoreFixture>(
    fixture: &F,
    _case: &Case,
) {
    let store = fixture.store();
    let r = record(JobId::mint("open"));
    store.open(&r).unwrap();
    let again = store.open(&r).unwrap_err();
    assert_eq!(again.kind(), ErrorKind::Invalid, "{again}");
    assert!(again.to_string().contains("already exists"), "{again}");
    assert_eq!(store.get(&r.id).unwrap(), r);
    let missing = store.get(&JobId::mint("never")).unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound, "{missing}");
    let other = record(JobId::mint("other"));
    store.open(&other).unwrap();
    let many = store
        .get_many(&[other.id.clone(), r.id.clone(), other.id.clone()])
        .unwrap();
    assert_eq!(
        many,
        vec![other.clone(), r.clone(), other.clone()],
        "in order, duplicates too"
    );
    assert!(store.get_many(&[]).unwrap().is_empty());
    let never = JobId::mint("never");
    let absent = store.get_many(&[r.id.clone(), never.clone()]).unwrap_err();
    assert_eq!(absent.kind(), ErrorKind::NotFound, "{absent}");
    assert!(absent.to_string().contains(never.as_str()), "{absent}");
    assert_eq!(store.list(&RecordFilter::any()).unwrap().len(), 2);
}

/// Marks go through the state machine: an applied change appends to the history with
/// its source and message (secrets redacted before they are stored) and sets the
/// scheduler's job and the error class; the same state again changes nothing but an
/// unset field; UNKNOWN over an end is ignored; an illegal change is refused and
/// changes nothing; an error class needs ERROR.
pub fn mark_follows_the_state_machine<F: RecordStoreFixture>(fixture: &F, _case: &Case) {
    let store = fixture.store();
    let id = JobId::mint("mark");
    store.open(&record(id.clone())).unwrap();
    let job = |n: u64| BackendRef::new(n.to_string());
    let r = store
        .mark(
            &id,
            Mark::new(JobState::Pending, TransitionSource::Agent)
                .backend_ref(job(42))
                .message("submitted"),
        )
        .unwrap();
    assert_eq!(
        (r.state, r.backend_ref.clone()),
        (JobState::Pending, Some(job(42)))
    );
    let r = store
        .mark(
            &id,
            Mark::new(JobState::Pending, TransitionSource::Poll).backend_ref(job(43)),
        )
        .unwrap();
    assert_eq!(
        (r.history.len(), r.backend_ref.clone()),
        (2, Some(job(42))),
        "a no-op"
    );
    for state in [JobState::Running, JobState::Pending, JobState::Running] {
        store
            .mark(&id, Mark::new(state, TransitionSource::Poll))
            .unwrap();
    }
    let wrong = store
        .mark(
            &id,
            Mark::new(JobState::Complete, TransitionSource::Poll).err_class(ErrorClass::Infra),
        )
        .unwrap_err();
    assert_eq!(wrong.kind(), ErrorKind::Invalid, "{wrong}");
    let secret = SUITE_SECRET.1;
    let r = store
        .mark(
            &id,
            Mark::new(JobState::Error, TransitionSource::Poll)
                .err_class(ErrorClass::Infra)
                .nodes(vec!["n1".into()])
                .node_fault(true)
                .message(format!("NODE_FAIL; the log said token {secret}")),
        )
        .unwrap();
    assert_eq!((r.err_class, r.node_fault), (Some(ErrorClass::Infra), true));
    let r = store
        .mark(&id, Mark::new(JobState::Unknown, TransitionSource::Poll))
        .unwrap();
    assert_eq!(r.state, JobState::Error, "UNKNOWN over an end is ignored");
    let illegal = store
        .mark(&id, Mark::new(JobState::Canceled, TransitionSource::User))
        .unwrap_err();
    assert_eq!(illegal.kind(), ErrorKind::InvalidTransition, "{illegal}");
    assert!(illegal.to_string().contains(id.as_str()), "{illegal}");
    let stored = store.get(&id).unwrap();
    use JobState::*;
    assert_eq!(
        states(&stored),
        vec![Submitting, Pending, Running, Pending, Running, Error]
    );
    assert_eq!(stored.nodes, vec!["n1".to_string()]);
    let last = stored.last_message();
    assert!(
        last.contains(crate::redact::REDACTED) && !last.contains(secret),
        "{last}"
    );
    let listed = store.list(&RecordFilter::any()).unwrap();
    assert!(
        !format!("{listed:?}").contains(secret),
        "a secret was stored"
    );
    let missing = JobId::mint("missing");
    let absent = store
        .mark(
            &missing,
            Mark::new(JobState::Pending, TransitionSource::Poll),
        )
        .unwrap_err();
    assert_eq!(absent.kind(), ErrorKind::NotFound, "{absent}");
}

/// Every transition is kept in order with its time, source and message, and an array's
/// tasks keep theirs: the array's state is derived from them.
pub fn history_and_tasks_are_kept_in_order<F: RecordStoreFixture>(fixture: &F, _case: &Case) {
    let store = fixture.store();
    let id = JobId::mint("array");
    store.open(&record(id.clone()).with_tasks(0..3)).unwrap();
    store
        .mark(
            &id,
            Mark::new(JobState::Pending, TransitionSource::Agent).backend_ref(BackendRef::new("7")),
        )
        .unwrap();
    store
        .mark(
            &id,
            Mark::new(JobState::Running, TransitionSource::Poll)
                .task(0, TaskMark::new(JobState::Complete))
                .task(1, TaskMark::new(JobState::Running)),
        )
        .unwrap();
    let r = store
        .mark(
            &id,
            Mark::new(JobState::Error, TransitionSource::Poll)
                .task(
                    1,
                    TaskMark {
                        message: Some("exit 3".into()),
                        ..TaskMark::new(JobState::Error)
                    },
                )
                .task(2, TaskMark::new(JobState::Complete)),
        )
        .unwrap();
    assert_eq!(
        r.state,
        JobState::Error,
        "an array with a failed task ends ERROR"
    );
    let stored = store.get(&id).unwrap();
    assert_eq!(stored, r, "the store keeps what mark returned");
    let tasks: Vec<JobState> = stored.tasks.values().map(|t| t.state).collect();
    assert_eq!(
        tasks,
        vec![JobState::Complete, JobState::Error, JobState::Complete]
    );
    assert_eq!(
        stored.tasks_to_retry().map(|t| t.to_string()).as_deref(),
        Some("1")
    );
    let history = &stored.history;
    assert_eq!(
        history.first().map(|t| t.source),
        Some(TransitionSource::Agent)
    );
    assert!(
        history.windows(2).all(|w| w[0].at <= w[1].at),
        "{history:?}"
    );
    assert_eq!(history.last().map(|t| t.state), Some(JobState::Error));
}

/// Update changes fields other than the state, id, history and tasks, under the record's
/// lock; what it refuses changes nothing; a missing record is NotFound.
pub fn update_changes_fields_but_not_state<F: RecordStoreFixture>(fixture: &F, _case: &Case) {
    let store = fixture.store();
    let id = JobId::mint("update");
    store.open(&record(id.clone())).unwrap();
    let r = store
        .update(&id, &mut |r| {
            r.labels.insert("note".into(), "x".into());
            r.secrets_staged = true;
            Ok(())
        })
        .unwrap();
    assert_eq!((r.labels["note"].as_str(), r.secrets_staged), ("x", true));
    assert_eq!(store.get(&id).unwrap(), r);
    for refused in [
        (|r: &mut JobRecord| r.state = JobState::Complete) as fn(&mut JobRecord),
        |r| r.id = JobId::mint("other"),
        |r| r.history.clear(),
        |r| r.schema_version += 1,
    ] {
        let error = store
            .update(&id, &mut |r| {
                refused(r);
                Ok(())
            })
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Invalid, "{error}");
    }
    let failing = store
        .update(&id, &mut |r| {
            r.labels.insert("note".into(), "lost".into());
            Err(crate::Error::invalid("note", "the change itself failed"))
        })
        .unwrap_err();
    assert!(
        failing.to_string().contains("the change itself failed"),
        "{failing}"
    );
    assert_eq!(store.get(&id).unwrap(), r, "nothing refused was stored");
    let missing = store
        .update(&JobId::mint("missing"), &mut |_| Ok(()))
        .unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound, "{missing}");
}

/// `list` filters by state, labels (all of them), activity and the time a record was
/// opened, and answers oldest first (ties by id), whatever order records were opened in.
pub fn list_filters_by_state_labels_and_time<F: RecordStoreFixture>(fixture: &F, _case: &Case) {
    let store = fixture.store();
    let base = Utc::now() - chrono::Duration::hours(1);
    let mut made = Vec::new();
    // Opened newest first; each opened `i` minutes after `base`.
    for i in (0..5i64).rev() {
        let mut r = record(JobId::parse(&format!("list-{i}-abcdef")).unwrap());
        r.submitted_at = base + chrono::Duration::minutes(i);
        if i % 2 == 1 {
            r.labels.insert("action".into(), "eval".into());
        }
        store.open(&r).unwrap();
        made.push(r.id.clone());
    }
    made.reverse();
    let mark = |i: usize, state| {
        store
            .mark(&made[i], Mark::new(state, TransitionSource::Poll))
            .unwrap();
    };
    mark(0, JobState::Running);
    mark(1, JobState::Complete);
    mark(2, JobState::Pending);
    let list = |filter: RecordFilter| store.list(&filter).unwrap();
    assert_eq!(
        ids(&list(RecordFilter::any())),
        made.iter().collect::<Vec<_>>(),
        "oldest first"
    );
    assert_eq!(
        ids(&list(RecordFilter::any().state(JobState::Running))),
        vec![&made[0]]
    );
    assert_eq!(
        ids(&list(
            RecordFilter::any()
                .state(JobState::Running)
                .state(JobState::Complete)
        )),
        vec![&made[0], &made[1]]
    );
    assert_eq!(
        ids(&list(RecordFilter::any().label("action", "eval"))),
        vec![&made[1], &made[3]]
    );
    assert_eq!(
        ids(&list(
            RecordFilter::any()
                .label("action", "eval")
                .label("arch", "dino")
        )),
        vec![&made[1], &made[3]]
    );
    assert!(list(
        RecordFilter::any()
            .label("action", "eval")
            .label("arch", "vit")
    )
    .is_empty());
    assert_eq!(
        ids(&list(
            RecordFilter::any()
                .label("action", "eval")
                .state(JobState::Complete)
        )),
        vec![&made[1]]
    );
    assert_eq!(list(RecordFilter::any().active()).len(), 4);
    let at = |i: i64| base + chrono::Duration::minutes(i);
    assert_eq!(
        ids(&list(RecordFilter::any().since(at(3)))),
        vec![&made[3], &made[4]]
    );
    assert_eq!(
        ids(&list(RecordFilter::any().before(at(1)))),
        vec![&made[0]]
    );
    assert_eq!(
        ids(&list(
            RecordFilter::any().since(at(1)).before(at(3)).active()
        )),
        vec![&made[2]]
    );
    // Labels changed by update are what the filter sees next.
    store
        .update(&made[4], &mut |r| {
            r.labels.insert("action".into(), "eval".into());
            Ok(())
        })
        .unwrap();
    store
        .update(&made[1], &mut |r| {
            r.labels.remove("action");
            Ok(())
        })
        .unwrap();
    assert_eq!(
        ids(&list(RecordFilter::any().label("action", "eval"))),
        vec![&made[3], &made[4]]
    );
}

/// A record an older slurm-run wrote (schema 2) reads as it was written, is listed and
/// filtered, and moves on through marks and updates, keeping its schema.
pub fn a_record_of_an_older_schema_reads_and_moves_on<F: RecordStoreFixture>(
    fixture: &F,
    _case: &Case,
) {
    let store = fixture.store();
    let written: JobRecord = serde_json::from_str(SCHEMA_2_RECORD).unwrap();
    assert!(fixture.plant(&written.id, Planted::Json(SCHEMA_2_RECORD)));
    let read = store.get(&written.id).unwrap();
    assert_eq!(read, written);
    assert_eq!(read.schema_version(), 2);
    let errors = RecordFilter::any()
        .state(JobState::Error)
        .label("arch", "dino");
    assert_eq!(ids(&store.list(&errors).unwrap()), vec![&written.id]);
    let updated = store
        .update(&written.id, &mut |r| {
            r.secrets_staged = false;
            r.labels.insert("seen".into(), "yes".into());
            Ok(())
        })
        .unwrap();
    assert_eq!(updated.schema_version(), 2);
    assert_eq!(store.get(&written.id).unwrap().labels["seen"], "yes");
}

/// A record that cannot be read is skipped and reported by `list_readable`, never fatal
/// to it: every other record is listed, and the error names the record. `get` of it is
/// CorruptRecord; a record a newer slurm-run wrote counts as unreadable too. A store
/// whose records are never unreadable (in memory) lists them all, none reported.
pub fn an_unreadable_record_is_skipped_and_reported<F: RecordStoreFixture>(
    fixture: &F,
    _case: &Case,
) {
    let store = fixture.store();
    let good: Vec<JobId> = (0..3).map(|_| JobId::mint("readable")).collect();
    for id in &good {
        store.open(&record(id.clone())).unwrap();
    }
    let torn = JobId::mint("torn");
    let newer = JobId::mint("newer");
    let mut future = serde_json::to_value(record(newer.clone())).unwrap();
    future["schema_version"] = serde_json::json!(999);
    let future = future.to_string();
    let can = fixture.plant(&torn, Planted::Unreadable);
    let can_newer = fixture.plant(&newer, Planted::Json(&future));
    assert_eq!(
        can, can_newer,
        "a store holds both kinds of unreadable record, or neither"
    );
    let listing = store.list_readable(&RecordFilter::any()).unwrap();
    let mut listed: Vec<&JobId> = ids(&listing.records);
    listed.sort();
    let mut expected: Vec<&JobId> = good.iter().collect();
    expected.sort();
    assert_eq!(listed, expected, "every readable record is listed");
    if !can {
        assert!(listing.unreadable.is_empty(), "{:?}", listing.unreadable);
        return;
    }
    assert_eq!(listing.unreadable.len(), 2, "{:?}", listing.unreadable);
    for id in [&torn, &newer] {
        let named = listing
            .unreadable
            .iter()
            .any(|e| e.to_string().contains(id.as_str()));
        assert!(named, "{id} is named among {:?}", listing.unreadable);
    }
    for error in &listing.unreadable {
        assert_eq!(error.kind(), ErrorKind::CorruptRecord, "{error}");
    }
    let unreadable = store.get(&torn).unwrap_err();
    assert_eq!(unreadable.kind(), ErrorKind::CorruptRecord, "{unreadable}");
    let newer_error = store.get(&newer).unwrap_err();
    assert!(newer_error.to_string().contains("newer"), "{newer_error}");
    // The others go on.
    store
        .mark(
            &good[0],
            Mark::new(JobState::Pending, TransitionSource::Poll),
        )
        .unwrap();
    let pending = store
        .list_readable(&RecordFilter::any().state(JobState::Pending))
        .unwrap();
    assert_eq!(ids(&pending.records), vec![&good[0]]);
}

/// The submit lease: held while its process lives (another process sees the submit in
/// progress), freed when that process dies without a word (SIGKILL), taken again by
/// anyone after; a lease dropped frees it at once.
pub fn the_submit_lease_is_held_while_its_process_lives<F: RecordStoreFixture>(
    fixture: &F,
    case: &Case,
) {
    let store = fixture.store();
    let id = JobId::mint("lease");
    assert_eq!(store.submit_in_progress(&id).unwrap(), Some(false));
    let shared = fixture.shared();
    let mut holder = Worker::start(
        &case.test,
        shared.as_deref(),
        &store,
        Role::HoldLease(id.clone()),
    );
    assert_eq!(holder.next_line("held"), "held");
    assert_eq!(
        store.submit_in_progress(&id).unwrap(),
        Some(true),
        "held by a live worker"
    );
    let other = JobId::mint("lease-other");
    assert_eq!(
        store.submit_in_progress(&other).unwrap(),
        Some(false),
        "one lease per record"
    );
    holder.kill();
    let deadline = Instant::now() + Duration::from_secs(60);
    while store.submit_in_progress(&id).unwrap() != Some(false) {
        assert!(
            Instant::now() < deadline,
            "the dead worker's lease was never freed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let lease = store.submit_lease(&id).unwrap();
    assert_eq!(
        store.submit_in_progress(&id).unwrap(),
        Some(true),
        "taken again"
    );
    drop(lease);
    assert_eq!(
        store.submit_in_progress(&id).unwrap(),
        Some(false),
        "freed when dropped"
    );
}

/// Asking whether a submit is in progress takes nothing from anyone: several workers
/// (processes when the store is shared) asking at once about a free lease, while the
/// case asks too, all hear "not in progress" every time. (Two replicas asking `status`
/// of one record at once must both settle it, not take each other's question for a
/// live submitter.)
pub fn probes_of_a_free_lease_never_see_each_other<F: RecordStoreFixture>(
    fixture: &F,
    case: &Case,
) {
    const PROBERS: usize = 3;
    const ROUNDS: u32 = 300;
    let store = fixture.store();
    let id = JobId::mint("probed");
    let shared = fixture.shared();
    let roles = (0..PROBERS).map(|_| Role::Probe {
        id: id.clone(),
        rounds: ROUNDS,
    });
    let mut probers = Worker::start_together(&case.test, shared.as_deref(), &store, roles);
    let own = workers::busy_probes(store.as_ref(), &id, ROUNDS);
    let answers: Vec<String> = probers
        .iter_mut()
        .map(|p| p.next_line("its probes"))
        .collect();
    for prober in probers {
        prober.finish();
    }
    assert_eq!(own, 0, "the case's probes saw a submit in progress");
    assert!(
        answers.iter().all(|a| a == "busy 0"),
        "a worker's probes saw a submit in progress: {answers:?}"
    );
    assert_eq!(store.submit_in_progress(&id).unwrap(), Some(false));
    let lease = store.submit_lease(&id).unwrap();
    assert_eq!(
        workers::busy_probes(store.as_ref(), &id, 3),
        3,
        "a held lease is seen by every probe"
    );
    drop(lease);
}

/// The retry claim: of several workers (processes when the store is shared) that have
/// each seen one failed record retried by none (a barrier: every one has looked before
/// any claims) and then open its retry with the claim at once, exactly one wins; the
/// record names it, every other worker follows it, and no other record was opened: the
/// store holds one retry of the record, whoever raced. Every worker then re-points the
/// failed record's dependant at once: it waits for the winner.
pub fn one_of_many_concurrent_claimers_wins_the_retry<F: RecordStoreFixture>(
    fixture: &F,
    case: &Case,
) {
    const CLAIMERS: usize = 6;
    let store = fixture.store();
    let previous = JobId::mint("claimed");
    store.open(&record(previous.clone())).unwrap();
    for state in [JobState::Pending, JobState::Running] {
        store
            .mark(&previous, Mark::new(state, TransitionSource::Poll))
            .unwrap();
    }
    store
        .mark(
            &previous,
            Mark::new(JobState::Error, TransitionSource::Poll).err_class(ErrorClass::Infra),
        )
        .unwrap();
    // A dependant of the failed record, which every claimer re-points at once.
    let dependant = JobId::mint("dependant");
    let mut waiting = record(dependant.clone());
    waiting.after = vec![crate::dependency::Dependency::ok(previous.clone())];
    store.open(&waiting).unwrap();
    let shared = fixture.shared();
    let nexts: Vec<JobId> = (0..CLAIMERS).map(|_| JobId::mint("claimer")).collect();
    let roles = nexts.iter().map(|next| Role::Claim {
        previous: previous.clone(),
        next: next.clone(),
    });
    let mut claimers = Worker::start_together(&case.test, shared.as_deref(), &store, roles);
    let answers: Vec<String> = claimers
        .iter_mut()
        .map(|c| c.next_line("its claim"))
        .collect();
    for claimer in claimers {
        claimer.finish();
    }
    let winners: Vec<&JobId> = nexts
        .iter()
        .zip(&answers)
        .filter(|(_, answer)| answer.as_str() == "won")
        .map(|(next, _)| next)
        .collect();
    assert_eq!(winners.len(), 1, "exactly one claim wins: {answers:?}");
    let winner = winners[0];
    assert_eq!(
        store.get(&previous).unwrap().retried_as.as_ref(),
        Some(winner)
    );
    let retries: Vec<JobId> = store
        .list(&RecordFilter::any())
        .unwrap()
        .into_iter()
        .filter(|r| r.retry_of.as_ref() == Some(&previous))
        .map(|r| r.id)
        .collect();
    assert_eq!(
        retries,
        vec![winner.clone()],
        "one record retries the failed one; a loser opens none"
    );
    assert_eq!(
        store.get(winner).unwrap().state,
        JobState::Submitting,
        "the winner goes on to submit"
    );
    for (next, answer) in nexts.iter().zip(&answers) {
        if next != winner {
            assert_eq!(
                answer,
                &format!("taken {winner}"),
                "a loser follows the winner"
            );
            assert!(
                matches!(store.get(next), Err(crate::Error::NotFound(_))),
                "a loser's record was never opened"
            );
        }
    }
    assert_eq!(
        store.get(&dependant).unwrap().after,
        vec![crate::dependency::Dependency::ok(winner.clone())],
        "the dependant waits for the one retry, however many re-pointed it"
    );
    // The claim repeated by the winner (an answer lost) is the same claim; a record
    // that retries nothing is refused naming the field.
    let again = store.get(winner).unwrap();
    assert_eq!(store.open_retry(&again).unwrap(), RetryClaim::Won);
    let error = store.open_retry(&record(JobId::mint("stray"))).unwrap_err();
    assert!(error.to_string().contains("retry_of"), "{error}");
}

/// Writers in several processes at once (threads for a store in memory) lose no update
/// of a record they share and no record of their own; every record reads whole.
pub fn writers_in_several_processes_lose_no_update<F: RecordStoreFixture>(
    fixture: &F,
    case: &Case,
) {
    const WRITERS: usize = 3;
    const ROUNDS: u32 = 25;
    let store = fixture.store();
    let shared_record = JobId::mint("counted");
    store.open(&record(shared_record.clone())).unwrap();
    let shared = fixture.shared();
    let prefixes: Vec<String> = (0..WRITERS)
        .map(|w| format!("writer{w}-{}", JobId::mint("w")))
        .collect();
    let writers: Vec<Worker> = prefixes
        .iter()
        .map(|prefix| {
            let role = Role::Write {
                shared: shared_record.clone(),
                prefix: prefix.clone(),
                rounds: ROUNDS,
            };
            Worker::start(&case.test, shared.as_deref(), &store, role)
        })
        .collect();
    // This process writes too, meanwhile.
    for _ in 0..ROUNDS {
        store
            .update(&shared_record, &mut |r| {
                r.labels
                    .insert("counter".into(), (counter(r) + 1).to_string());
                Ok(())
            })
            .unwrap();
    }
    for mut writer in writers {
        assert_eq!(writer.next_line("done"), "done");
        writer.finish();
    }
    let total = (WRITERS as u64 + 1) * u64::from(ROUNDS);
    assert_eq!(
        counter(&store.get(&shared_record).unwrap()),
        total,
        "no update lost"
    );
    let all = store.list(&RecordFilter::any()).unwrap();
    assert_eq!(all.len(), 1 + WRITERS * ROUNDS as usize);
    let pending = store
        .list(&RecordFilter::any().state(JobState::Pending))
        .unwrap();
    assert_eq!(pending.len(), WRITERS * ROUNDS as usize);
    for prefix in &prefixes {
        let own = pending
            .iter()
            .filter(|r| r.id.as_str().starts_with(prefix.as_str()))
            .count();
        assert_eq!(own, ROUNDS as usize, "{prefix}");
    }
}

/// One `#[test]` per case of the RecordStore conformance suite, in a module `$name`, for
/// the [`RecordStoreFixture`] `$fixture` evaluates to (once per case, not in a worker
/// process). The module imports its parent's names.
#[macro_export]
macro_rules! record_store_conformance {
    ($name:ident, $fixture:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            macro_rules! case {
                ($case:ident) => {
                    #[test]
                    fn $case() {
                        $crate::testing::record_suite::run(
                            concat!(module_path!(), "::", stringify!($case)),
                            || $fixture,
                            $crate::testing::record_suite::$case,
                        );
                    }
                };
            }

            case!(open_is_create_exclusive_and_get_reports_missing);
            case!(mark_follows_the_state_machine);
            case!(mark_many_marks_each_as_mark_does);
            case!(history_and_tasks_are_kept_in_order);
            case!(update_changes_fields_but_not_state);
            case!(list_filters_by_state_labels_and_time);
            case!(a_record_of_an_older_schema_reads_and_moves_on);
            case!(an_unreadable_record_is_skipped_and_reported);
            case!(the_submit_lease_is_held_while_its_process_lives);
            case!(probes_of_a_free_lease_never_see_each_other);
            case!(one_of_many_concurrent_claimers_wins_the_retry);
            case!(writers_in_several_processes_lose_no_update);
            case!(the_revision_moves_with_every_write);
            case!(waiting_for_a_held_lease_keeps_the_runtime_ticking);
            case!(a_continuation_marked_by_several_processes_counts_once);
        }
    };
}
