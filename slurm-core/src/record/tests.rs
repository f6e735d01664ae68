//! Tests of job ids and records (the store contract is the RecordStore conformance
//! suite, `testing::record_suite`, run on both stores beside them).

use super::*;
use crate::classify::ErrorClass;
use crate::names::MAX_NAME_LEN;
use crate::spec::JobSpec;
use crate::state::JobState;
use crate::storage::RemotePath;

pub(crate) fn sample_spec() -> JobSpec {
    let mut spec = JobSpec::new("hello", "python train.py");
    spec.image = Some("/lustre/img/pt.sqsh".into());
    spec.secrets = vec!["HF_TOKEN".into()];
    spec.labels.insert("arch".into(), "dino".into());
    spec.labels.insert("action".into(), "train".into());
    spec
}

pub(crate) fn record(id: JobId) -> JobRecord {
    let dir = RemotePath::parse("/shared/results")
        .unwrap()
        .join(id.as_str())
        .unwrap();
    JobRecord::new(id, &sample_spec(), dir).unwrap()
}

#[test]
fn minted_ids_are_safe_and_distinct() {
    let spec = sample_spec();
    let a = JobId::mint_for(&spec);
    let b = JobId::mint_for(&spec);
    assert_ne!(a, b);
    assert!(a.as_str().starts_with("dino-train-"));
    assert!(JobId::parse(a.as_str()).is_ok());
    for label in [
        "../../etc/passwd",
        "",
        "---",
        "é",
        &"x".repeat(200),
        "a b/c",
    ] {
        let id = JobId::mint(label);
        assert!(JobId::parse(id.as_str()).is_ok(), "{label:?} -> {id}");
        assert!(id.as_str().len() <= MAX_NAME_LEN);
        assert!(!id.as_str().contains('/'));
    }
    assert!(JobId::mint("../../etc").as_str().starts_with("etc-"));
    assert!(JobId::mint("").as_str().starts_with("job-"));
    for bad in ["..", "../x", "a/b", ".hidden", "", "a b"] {
        assert!(JobId::parse(bad).is_err(), "{bad}");
        assert!(serde_json::from_str::<JobId>(&format!("\"{bad}\"")).is_err());
    }
}

#[test]
fn new_records_hold_no_secret_values() {
    let r = record(JobId::parse("hello-000001").unwrap());
    assert_eq!(r.state, JobState::Submitting);
    assert_eq!(r.attempt, 1);
    assert_eq!(r.history.len(), 1);
    assert_eq!(r.image.as_deref(), Some("/lustre/img/pt.sqsh"));
    assert_eq!(r.spec_digest, sample_spec().digest());
    let json = serde_json::to_string(&r).unwrap();
    assert!(json.contains("\"state\":\"SUBMITTING\""));
    assert!(json.contains("\"schema_version\":5"));
    let retry = record(JobId::parse("hello-000002").unwrap()).retrying(&r);
    assert_eq!((retry.attempt, retry.retry_of.as_ref()), (2, Some(&r.id)));
}

#[test]
fn records_written_with_a_numeric_slurm_job_id_still_read() {
    let record = record(JobId::parse("hello-abcdef").unwrap());
    let mut json = serde_json::to_value(&record).unwrap();
    json["backend_ref"] = serde_json::json!({"slurm_job_id": 4242, "cluster": "c1"});
    let read: JobRecord = serde_json::from_value(json).unwrap();
    let backend_ref = read.backend_ref.unwrap();
    assert_eq!(backend_ref.native_id, "4242");
    assert_eq!(backend_ref.cluster.as_deref(), Some("c1"));
    // Written back, the id is text under its neutral name.
    let again = serde_json::to_value(JobRecord {
        backend_ref: Some(backend_ref),
        ..record
    })
    .unwrap();
    assert_eq!(again["backend_ref"]["native_id"], "4242");
}

#[test]
fn an_array_record_derives_its_state_from_its_tasks() {
    let store = MemoryRecordStore::new();
    let id = JobId::mint("sweep");
    let record = JobRecord::new(
        id.clone(),
        &JobSpec::new("sweep", "true"),
        RemotePath::parse("/r/sweep").unwrap(),
    )
    .unwrap()
    .with_tasks([0, 1, 2]);
    store.open(&record).unwrap();
    let pending = store
        .mark(&id, Mark::new(JobState::Pending, TransitionSource::Agent))
        .unwrap();
    assert!(pending.tasks.values().all(|t| t.state == JobState::Pending));
    let running = store
        .mark(
            &id,
            Mark::new(JobState::Running, TransitionSource::Poll)
                .task(0, TaskMark::new(JobState::Running)),
        )
        .unwrap();
    assert_eq!(running.state, JobState::Running);
    let mut failed = TaskMark::new(JobState::Error);
    failed.err_class = Some(ErrorClass::Infra);
    failed.node_fault = true;
    failed.nodes = Some(vec!["n2".into()]);
    let mid = store
        .mark(
            &id,
            Mark::new(JobState::Running, TransitionSource::Poll)
                .task(0, TaskMark::new(JobState::Complete))
                .task(1, failed),
        )
        .unwrap();
    assert_eq!(mid.state, JobState::Pending, "task 2 still waits");
    // A task ended stays ended: a late RUNNING for task 0 changes nothing.
    let same = store
        .mark(
            &id,
            Mark::new(JobState::Running, TransitionSource::Poll)
                .task(0, TaskMark::new(JobState::Running)),
        )
        .unwrap();
    assert_eq!(same.tasks[&0].state, JobState::Complete);
    let done = store
        .mark(
            &id,
            Mark::new(JobState::Complete, TransitionSource::Poll)
                .task(2, TaskMark::new(JobState::Complete)),
        )
        .unwrap();
    assert_eq!(
        (done.state, done.err_class),
        (JobState::Error, Some(ErrorClass::Infra))
    );
    assert_eq!(done.nodes_to_exclude(), vec!["n2".to_string()]);
    let last = done.history.last().unwrap().message.clone().unwrap();
    assert!(last.contains("3 tasks"), "{last}");
    // The record round-trips through JSON; a version-1 record without tasks still reads.
    let json = serde_json::to_string(&done).unwrap();
    assert_eq!(serde_json::from_str::<JobRecord>(&json).unwrap(), done);
}

#[test]
fn a_retry_avoids_only_the_nodes_the_scheduler_pinned_a_failure_on() {
    let mut r = record(JobId::parse("hello-000003").unwrap());
    r.nodes = vec!["n1".into(), "n2".into()];
    r.excluded_nodes = vec!["n9".into()];
    assert!(
        r.nodes_to_exclude() == ["n9"],
        "no fault: only the inherited exclusions"
    );
    r.node_fault = true;
    assert_eq!(r.nodes_to_exclude(), ["n9", "n1", "n2"]);
    r.failed_nodes = vec!["n2".into()];
    assert_eq!(r.nodes_to_exclude(), ["n9", "n2"]);
    // Written with them (schema 4), read back the same; a record of schema 3, written
    // before them, reads without them.
    let json = serde_json::to_string(&r).unwrap();
    assert!(json.contains("\"failed_nodes\":[\"n2\"]"), "{json}");
    assert_eq!(serde_json::from_str::<JobRecord>(&json).unwrap(), r);
    let mut v3: serde_json::Value = serde_json::from_str(&json).unwrap();
    let fields = v3.as_object_mut().unwrap();
    fields.remove("failed_nodes");
    fields.insert("schema_version".into(), 3.into());
    let old: JobRecord = serde_json::from_value(v3).unwrap();
    assert_eq!(old.schema_version(), 3);
    assert!(old.failed_nodes().is_empty() && old.scheduler_release().is_none());
    assert_eq!(old.nodes_to_exclude(), ["n9", "n1", "n2"]);
}

/// A two-node job whose node n2 failed: the ending rows (scontrol's, squeue's while it
/// completes) name only n1, still completing. The record kept n1 alone, so a retry
/// avoided the good node and could land on the bad one (seen on the 22.05 test bed:
/// releases::a_node_failure_is_pinned_on_the_failed_node_from_23_02).
#[test]
fn an_ending_jobs_nodes_never_shrink_to_those_still_completing() {
    let store = MemoryRecordStore::new();
    let mut r = record(JobId::parse("hello-000004").unwrap());
    r.state = JobState::Pending;
    store.open(&r).unwrap();
    let running =
        Mark::new(JobState::Running, TransitionSource::Poll).nodes(vec!["n1".into(), "n2".into()]);
    store.mark(&r.id, running).unwrap();
    let ended = Mark::new(JobState::Error, TransitionSource::Poll)
        .err_class(ErrorClass::Infra)
        .node_fault(true)
        .nodes(vec!["n1".into()]);
    let ended = store.mark(&r.id, ended).unwrap();
    assert_eq!(ended.nodes(), ["n1", "n2"]);
    assert_eq!(ended.nodes_to_exclude(), ["n1", "n2"]);
    // A list with a node not seen before (a requeue elsewhere) replaces them.
    let mut again = record(JobId::parse("hello-000005").unwrap());
    again.state = JobState::Running;
    again.nodes = vec!["n1".into()];
    store.open(&again).unwrap();
    let requeued = Mark::new(JobState::Pending, TransitionSource::Poll).nodes(vec!["n3".into()]);
    assert_eq!(store.mark(&again.id, requeued).unwrap().nodes(), ["n3"]);
}
