//! Records as a user of the crate sees them, from outside it: read through their
//! accessors, stored as the JSON written before the accessors existed (byte for byte),
//! and kept by a `RecordStore` written outside the crate with the same rules as the
//! crate's own stores.

use std::collections::BTreeMap;
use std::sync::Mutex;

use slurm_core::{
    BackendRef, ErrorClass, ErrorKind, JobId, JobRecord, JobSpec, JobState, Mark,
    MemoryRecordStore, RecordFilter, RecordStore, RemotePath, Result, RetryClaim, SecretRegistry,
    TransitionSource, UnsettledKind,
};

/// Records written by slurm-run before their fields became private (commit 8f33886's
/// serialisation): a retried array that ended ERROR, and a submit not settled.
const FIXTURES: [(&str, &str); 2] = [
    ("record-v2.json", include_str!("fixtures/record-v2.json")),
    (
        "record-v2-unsettled.json",
        include_str!("fixtures/record-v2-unsettled.json"),
    ),
];

#[test]
fn records_written_before_the_accessors_read_back_and_write_the_same_json() {
    let (name, text) = FIXTURES[0];
    let record: JobRecord = serde_json::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}"));
    let again = serde_json::to_string_pretty(&record).unwrap() + "\n";
    assert_eq!(again, text, "{name} is written back unchanged");
    // Schema 3 made `unsettled` typed: a schema-2 record's words read as their kind, and
    // the record is written back with the typed form, everything else unchanged.
    let (name, text) = FIXTURES[1];
    let record: JobRecord = serde_json::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}"));
    let again = serde_json::to_string_pretty(&record).unwrap() + "\n";
    let words = "2 SLURM jobs carry its name (4241, 4242); a person decides which to keep (`cancel` cancels them all)";
    assert_eq!(
        again,
        text.replace(
            &format!("\"unsettled\": \"{words}\""),
            &format!("\"unsettled\": {{\n    \"kind\": \"several_jobs\",\n    \"why\": \"{words}\"\n  }}")
        ),
        "{name}: only `unsettled` changes form"
    );
}

#[test]
fn every_field_reads_through_its_accessor() {
    let record: JobRecord = serde_json::from_str(FIXTURES[0].1).unwrap();
    assert_eq!(record.schema_version(), 2);
    assert_eq!(record.id().as_str(), "dino-train-a1b2c3");
    assert_eq!(record.name(), "hello");
    assert_eq!(record.spec_digest(), record.spec().unwrap().digest());
    assert_eq!(record.image(), Some("/lustre/img/pt.sqsh"));
    assert_eq!(record.container_image(), Some("/lustre/img/pt.sqsh"));
    assert_eq!(record.labels()["arch"], "dino");
    assert_eq!(
        record.results_dir().as_str(),
        "/shared/results/dino-train-a1b2c3"
    );
    assert_eq!(
        record.backend_ref(),
        Some(&BackendRef::new("4242").on_cluster("polar"))
    );
    assert_eq!(record.state(), JobState::Error);
    assert!(record.is_terminal());
    assert_eq!(record.err_class(), Some(ErrorClass::Infra));
    assert_eq!(
        record.retry_of().map(JobId::as_str),
        Some("dino-train-000001")
    );
    assert_eq!(record.attempt(), 2);
    assert!(record.submitted_at() < record.updated_at());
    let history: Vec<(JobState, TransitionSource, Option<&str>)> = record
        .history()
        .iter()
        .map(|t| (t.state(), t.source(), t.message()))
        .collect();
    assert_eq!(
        history[3],
        (JobState::Error, TransitionSource::Poll, Some("NODE_FAIL"))
    );
    assert_eq!(record.history()[3].at(), record.updated_at());
    assert_eq!(record.last_message(), "NODE_FAIL");
    assert_eq!(record.after()[0].to_string(), "prep-00ff11:any");
    let task = &record.tasks()[&1];
    assert_eq!(
        (
            task.state(),
            task.err_class(),
            task.nodes(),
            task.node_fault()
        ),
        (
            JobState::Error,
            Some(ErrorClass::Infra),
            &["n02".to_string()][..],
            true
        )
    );
    assert_eq!(task.message(), Some("NODE_FAIL"));
    assert!(task.updated_at() > record.submitted_at());
    assert_eq!(
        record.task_groups(),
        vec![
            (JobState::Complete, "0".to_string()),
            (JobState::Error, "1".to_string())
        ]
    );
    assert_eq!(record.task_summary(), "2 tasks: 1 ERROR, 1 COMPLETE");
    assert_eq!(record.nodes(), ["n01", "n02"]);
    assert!(record.node_fault());
    assert_eq!(record.excluded_nodes(), ["n07"]);
    // Schema 4's fields, absent from older records, read empty.
    assert_eq!(record.scheduler_release(), None);
    assert!(record.failed_nodes().is_empty());
    assert_eq!(record.secret_names(), ["HF_TOKEN"]);
    assert!(record.secrets_staged());
    assert_eq!(record.submit_attempts(), Some(2));
    assert_eq!(record.candidates(), [BackendRef::new("4241")]);
    assert_eq!(
        record.retried_as().map(JobId::as_str),
        Some("dino-train-000003")
    );

    let unsettled: JobRecord = serde_json::from_str(FIXTURES[1].1).unwrap();
    assert_eq!(unsettled.state(), JobState::Submitting);
    let why = unsettled.unsettled().unwrap();
    assert_eq!(why.kind, UnsettledKind::SeveralJobs);
    assert!(why.why.starts_with("2 SLURM jobs carry its name"), "{why}");
    assert_eq!(unsettled.candidates().len(), 2);
    assert_eq!(unsettled.task_groups(), Vec::new());
}

/// A store written outside slurm-core, keeping records in a map by the rules
/// `JobRecord` offers every store (apply_mark, apply_update, redact_history,
/// retried_record and retry_claim).
#[derive(Debug, Default)]
struct OutsideStore {
    records: Mutex<BTreeMap<JobId, JobRecord>>,
    redactor: Option<SecretRegistry>,
}

impl RecordStore for OutsideStore {
    fn open(&self, record: &JobRecord) -> Result<()> {
        let mut record = record.clone();
        if let Some(registry) = &self.redactor {
            record.redact_history(registry);
        }
        self.records
            .lock()
            .unwrap()
            .insert(record.id().clone(), record);
        Ok(())
    }

    fn open_retry(&self, retry: &JobRecord) -> Result<RetryClaim> {
        let previous = retry.retried_record()?.clone();
        let mut records = self.records.lock().unwrap();
        let stored = records
            .get(&previous)
            .ok_or_else(|| slurm_core::Error::NotFound(previous.to_string()))?;
        match stored.retry_claim(retry)? {
            Err(winner) => Ok(RetryClaim::Taken(winner)),
            Ok(claimed) => {
                records.insert(retry.id().clone(), retry.clone());
                records.insert(previous, claimed);
                Ok(RetryClaim::Won)
            }
        }
    }

    fn get(&self, id: &JobId) -> Result<JobRecord> {
        let records = self.records.lock().unwrap();
        records
            .get(id)
            .cloned()
            .ok_or_else(|| slurm_core::Error::NotFound(id.to_string()))
    }

    fn mark(&self, id: &JobId, mark: Mark) -> Result<JobRecord> {
        let mut records = self.records.lock().unwrap();
        let record = records.get_mut(id).expect("an opened record");
        let mut next = record.clone();
        next.apply_mark(mark, self.redactor.as_ref())?;
        *record = next.clone();
        Ok(next)
    }

    fn update(
        &self,
        id: &JobId,
        change: &mut dyn FnMut(&mut JobRecord) -> Result<()>,
    ) -> Result<JobRecord> {
        let mut records = self.records.lock().unwrap();
        let record = records.get_mut(id).expect("an opened record");
        let next = record.apply_update(change)?;
        *record = next.clone();
        Ok(next)
    }

    fn list(&self, filter: &RecordFilter) -> Result<Vec<JobRecord>> {
        let records = self.records.lock().unwrap();
        Ok(records
            .values()
            .filter(|r| filter.matches(r))
            .cloned()
            .collect())
    }
}

/// The same marks and updates, through `store`: what each answered, in words.
fn story(store: &dyn RecordStore) -> Vec<String> {
    let spec = JobSpec::new("outside", "echo $SECRET_VALUE");
    let id = JobId::parse("outside-abcdef").unwrap();
    let results = RemotePath::parse("/shared/results/outside-abcdef").unwrap();
    store
        .open(&JobRecord::new(id.clone(), &spec, results).unwrap())
        .unwrap();
    let poll = |state| Mark::new(state, TransitionSource::Poll);
    let steps: Vec<Result<JobRecord>> = vec![
        store.mark(
            &id,
            Mark::new(JobState::Pending, TransitionSource::Agent)
                .backend_ref(BackendRef::new("4242"))
                .message("queued with token s3cr3t-value"),
        ),
        store.mark(&id, poll(JobState::Pending)),
        store.mark(&id, poll(JobState::Running).nodes(vec!["n01".into()])),
        store.mark(&id, poll(JobState::Complete).err_class(ErrorClass::Infra)),
        store.mark(&id, poll(JobState::Error).err_class(ErrorClass::Infra)),
        store.mark(&id, poll(JobState::Running)),
        store.mark(&id, poll(JobState::Unknown)),
        store.update(&id, &mut |_| Ok(())),
    ];
    steps
        .into_iter()
        .map(|step| match step {
            Ok(record) => format!(
                "{} {:?} {:?} {:?} {:?}",
                record.state(),
                record.backend_ref().map(ToString::to_string),
                record.err_class(),
                record.nodes(),
                record
                    .history()
                    .iter()
                    .map(|t| t.message())
                    .collect::<Vec<_>>(),
            ),
            Err(error) => format!("{:?}", error.kind()),
        })
        .collect()
}

#[test]
fn a_store_written_outside_the_crate_keeps_the_rules_of_the_crates_own() {
    let mut secrets = SecretRegistry::new();
    secrets.register("SECRET_VALUE", "s3cr3t-value");
    let ours = MemoryRecordStore::new().with_redactor(secrets.clone());
    let theirs = OutsideStore {
        redactor: Some(secrets),
        ..OutsideStore::default()
    };
    let expected = story(&ours);
    assert_eq!(story(&theirs), expected);
    // The story holds what the rules say: a redacted message, a no-op, an error class
    // refused off ERROR, an illegal change refused, an ignored UNKNOWN.
    assert!(expected[0].contains("[REDACTED]") && !expected[0].contains("s3cr3t"));
    assert_eq!(expected[1], expected[0]);
    assert_eq!(expected[3], format!("{:?}", ErrorKind::Invalid));
    assert!(expected[4].starts_with("ERROR"));
    assert_eq!(expected[5], format!("{:?}", ErrorKind::InvalidTransition));
    assert_eq!(expected[6], expected[4]);
    assert!(expected[7].starts_with("ERROR"));
}

/// The claim of a retry by the crate's rule (`retry_claim`): an outside store opens one
/// retry of a record; a second retry finds the first and opens nothing; a record that
/// retries nothing is refused naming `retry_of`.
#[test]
fn a_store_written_outside_the_crate_claims_a_retry_once() {
    let store = OutsideStore::default();
    let spec = JobSpec::new("outside", "true");
    let results = RemotePath::parse("/shared/results/outside").unwrap();
    let first = JobRecord::new(JobId::mint("outside"), &spec, results.clone()).unwrap();
    store.open(&first).unwrap();
    let json = |record: &JobRecord| serde_json::to_value(record).unwrap();
    let retry_of = |id: &JobId| {
        let mut value =
            json(&JobRecord::new(JobId::mint("outside"), &spec, results.clone()).unwrap());
        value["retry_of"] = serde_json::Value::String(id.to_string());
        serde_json::from_value::<JobRecord>(value).unwrap()
    };
    let (a, b) = (retry_of(first.id()), retry_of(first.id()));
    assert_eq!(store.open_retry(&a).unwrap(), RetryClaim::Won);
    assert_eq!(
        store.open_retry(&b).unwrap(),
        RetryClaim::Taken(a.id().clone())
    );
    assert!(store.get(b.id()).is_err(), "the loser opened nothing");
    assert_eq!(store.get(first.id()).unwrap().retried_as(), Some(a.id()));
    let stray = JobRecord::new(JobId::mint("outside"), &spec, results).unwrap();
    let error = store.open_retry(&stray).unwrap_err();
    assert!(error.to_string().contains("retry_of"), "{error}");
}
