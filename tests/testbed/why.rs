//! Why a job waits and where it would start (issue 39), on the test bed's enforced
//! limits: every category the scheduler gives a waiting job, each with its evidence and
//! remedy, read in one round trip; a forecast over partitions where one is full.

use std::time::Duration;

use chrono::Utc;
use futures::StreamExt;
use slurm_core::{
    Backend, Command, Dependency, JobSpec, JobState, RecordFilter, SubmitOptions, WaitAnswer,
    WaitCategory, WallTime, WatchEvent, WatchOptions,
};
use slurm_run_testsupport::backend::{admin, harness, remote, small_spec, wait_state, Harness};
use slurm_run_testsupport::cluster;

/// Ask `why` of `ids` until `settled` holds for every answer (the scheduler gives a
/// fresh job its reason at its next cycle), or panic after `seconds`.
async fn why_until(
    h: &Harness,
    ids: &[slurm_core::JobId],
    seconds: u64,
    settled: impl Fn(&[WaitAnswer]) -> bool,
) -> Vec<WaitAnswer> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    loop {
        let answers = h.backend.why(ids).await.expect("why");
        if settled(&answers) {
            return answers;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not settled after {seconds} s: {answers:#?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A job that takes both nodes whole for `minutes`, in `partition` (the default when
/// `None`) under `account`.
fn blocker(name: &str, partition: Option<&str>, account: Option<&str>) -> JobSpec {
    let mut spec = JobSpec::new(name, "sleep 900");
    spec.nodes = Some(2);
    spec.gpus_per_node = Some(0);
    spec.time = Some(WallTime::from_minutes(20));
    spec.extra_sbatch = vec!["--exclusive".to_string()];
    spec.partition = partition.map(str::to_string);
    spec.account = account.map(str::to_string);
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_waiting_category_is_named_with_its_evidence_and_remedy() {
    let _cluster = cluster::exclusive().await;
    let h = harness();
    let limited = h.testbed.get("SLURM_RUN_TEST_LIMITED_ACCOUNT").to_string();
    let short_qos = h.testbed.get("SLURM_RUN_TEST_SHORT_QOS").to_string();
    let submit = |spec: JobSpec| {
        let backend = h.backend.clone();
        async move {
            backend
                .submit(&spec, SubmitOptions::default())
                .await
                .expect("submit")
        }
    };
    // Both nodes taken by a job of the limited account (MaxJobs=1): it runs.
    let block = submit(blocker("why-blocker", None, Some(&limited))).await;
    wait_state(&h.backend, block.id(), JobState::Running, 120).await;
    let ended = submit(small_spec("why-ended", "true")).await;
    let resources = submit(small_spec("why-resources", "true")).await;
    let mut behind = small_spec("why-priority", "true");
    behind.extra_sbatch = vec!["--nice=100".to_string()];
    let priority = submit(behind).await;
    let held = submit(small_spec("why-held", "true")).await;
    let held_job = held.backend_ref().unwrap().native_id.clone();
    admin(&h.testbed, "scontrol", &["uhold", &held_job]);
    let mut child = small_spec("why-dependency", "true");
    child.after = vec![Dependency::ok(block.id().clone())];
    let dependency = submit(child).await;
    let mut later = small_spec("why-begin", "true");
    later.extra_sbatch = vec!["--begin=now+1hour".to_string()];
    let begin = submit(later).await;
    let mut capped = small_spec("why-limit", "true");
    capped.account = Some(limited.clone());
    let limit = submit(capped).await;
    let mut too_long = small_spec("why-cannot-start", "true");
    too_long.time = Some(WallTime::from_minutes(20));
    too_long.extra_sbatch = vec![format!("--qos={short_qos}")];
    let cannot = submit(too_long).await;

    let ids = vec![
        block.id().clone(),
        ended.id().clone(),
        resources.id().clone(),
        priority.id().clone(),
        held.id().clone(),
        dependency.id().clone(),
        begin.id().clone(),
        limit.id().clone(),
        cannot.id().clone(),
    ];
    let expected = [
        WaitCategory::Running,
        WaitCategory::Ended,
        WaitCategory::Resources,
        WaitCategory::Priority,
        WaitCategory::Held,
        WaitCategory::Dependency,
        WaitCategory::BeginTime,
        WaitCategory::Limit,
        WaitCategory::CannotStart,
    ];
    // `why-ended` cannot start while both nodes are taken: it ends once cancelled.
    h.backend.cancel(ended.id()).await.unwrap();
    h.transport.reset();
    let answers = why_until(&h, &ids, 120, |answers| {
        answers
            .iter()
            .zip(&expected)
            .all(|(a, want)| a.category == *want)
            && answers[2].start_estimate.is_some()
    })
    .await;
    // Nine jobs of every kind, one round trip each time asked.
    let asked = h.transport.labels();
    assert!(
        asked.iter().all(|l| l.starts_with("why of 9 job(s)")),
        "{asked:?}"
    );
    let [running, ended, resources, priority, held, dependency, begin, limit, cannot] =
        &answers[..]
    else {
        unreachable!()
    };
    assert_eq!(running.start_estimate, None);
    assert!(ended.remedy.is_none(), "{ended:?}");

    // Resources: both nodes allocated, and a start estimate from the blocker's wall.
    assert_eq!(resources.reason.as_deref(), Some("Resources"));
    let nodes = resources.evidence.nodes.as_ref().expect("nodes by state");
    assert_eq!((nodes.allocated, nodes.idle), (2, 0), "{nodes:?}");
    assert_eq!(resources.evidence.partition.as_deref(), Some("gpu"));
    let estimate = resources.start_estimate.unwrap();
    assert!(
        estimate > Utc::now() + chrono::Duration::minutes(5),
        "the blocker holds the nodes for 20 minutes: {estimate}"
    );
    assert!(resources.start_estimate_source.is_some());
    assert!(
        resources.explanation.contains("2 allocated"),
        "{}",
        resources.explanation
    );

    // Priority: the job ahead of it in the queue is named.
    assert_eq!(priority.reason.as_deref(), Some("Priority"));
    let ahead = priority.evidence.jobs_ahead.as_ref().expect("jobs ahead");
    let resources_job = resources.native_id.clone().unwrap();
    assert!(ahead.iter().any(|a| a.job == resources_job), "{ahead:?}");
    assert!(priority.evidence.jobs_ahead_count.unwrap() >= 1);

    // Held by the user: the release command.
    assert_eq!(held.reason.as_deref(), Some("JobHeldUser"));
    assert_eq!(
        held.remedy.as_deref(),
        Some(format!("scontrol release {held_job}").as_str())
    );

    // A dependency on the running blocker: the parent named by record and job.
    let parents = dependency.evidence.parents.as_ref().expect("parents");
    assert_eq!(parents.len(), 1, "{parents:?}");
    assert_eq!(parents[0].record.as_ref(), Some(block.id()));
    assert_eq!(
        Some(parents[0].job.as_str()),
        block.backend_ref().map(|r| r.native_id.as_str())
    );
    assert_eq!(parents[0].state.as_deref(), Some("RUNNING"));
    assert_eq!(parents[0].condition, "afterok");

    // A begin time an hour out.
    assert_eq!(begin.reason.as_deref(), Some("BeginTime"));
    assert!(begin.remedy.as_deref().unwrap().contains("begintime=now"));

    // The limited account's MaxJobs=1, used by the blocker.
    assert_eq!(limit.reason.as_deref(), Some("AssocMaxJobsLimit"));
    let used = limit.evidence.limit.as_ref().expect("the limit");
    assert_eq!(
        (used.name.as_str(), used.used, used.max),
        ("MaxJobs", Some(1), Some(1)),
        "{used:?}"
    );
    assert!(
        used.set_on.as_deref().unwrap().contains(&limited),
        "{used:?}"
    );
    let remedy = limit.remedy.as_deref().unwrap();
    assert!(
        remedy.contains("MaxJobs") && remedy.contains("1 of 1 used"),
        "{remedy}"
    );
    assert!(remedy.contains("admins can raise it (sacctmgr"), "{remedy}");

    // Twenty minutes under a QOS of ten at most: the spec's field to change.
    assert_eq!(
        cannot.reason.as_deref(),
        Some("QOSMaxWallDurationPerJobLimit")
    );
    let wall = cannot.evidence.limit.as_ref().expect("the QOS limit");
    assert_eq!(
        (wall.name.as_str(), wall.max),
        ("MaxWall", Some(10)),
        "{wall:?}"
    );
    assert!(
        cannot
            .remedy
            .as_deref()
            .unwrap()
            .contains("`time` to at most 00:10:00"),
        "{cannot:?}"
    );

    h.backend.cancel_many(&ids).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forecast_lists_each_partition_and_submits_nothing() {
    let _cluster = cluster::exclusive().await;
    let h = harness();
    // The preemptible partition's nodes taken whole: a job there waits for the blocker's
    // wall, while in the GPU partition it starts by preempting it.
    let block = h
        .backend
        .submit(
            &blocker("why-forecast-blocker", Some("preemptible"), None),
            SubmitOptions::default(),
        )
        .await
        .unwrap();
    wait_state(&h.backend, block.id(), JobState::Running, 120).await;
    let mut spec = small_spec("why-forecast", "true");
    spec.partition = Some("preemptible,gpu,nosuch".to_string());
    let before = h
        .backend
        .records(&RecordFilter::default())
        .await
        .unwrap()
        .len();
    let queued = || async {
        remote(
            &h,
            Command::new("squeue").args(["--noheader", "--me", "--states=all", "--format=%i"]),
        )
        .await
        .lines()
        .count()
    };
    let queued_before = queued().await;
    let forecast = h.backend.forecast(&spec).await.unwrap();
    let names: Vec<&str> = forecast
        .partitions
        .iter()
        .map(|p| p.partition.as_str())
        .collect();
    assert_eq!(names, ["preemptible", "gpu", "nosuch"]);
    let [full, gpu, missing] = &forecast.partitions[..] else {
        unreachable!()
    };
    let waits = full.start_estimate.expect("the full partition has a start");
    assert!(
        waits > Utc::now() + chrono::Duration::minutes(5),
        "the preemptible partition is full for 20 minutes: {full:?}"
    );
    let starts = gpu.start_estimate.expect("the GPU partition has a start");
    assert!(gpu.why_not.is_none() && gpu.nodes.is_some(), "{gpu:?}");
    // Slurm 26.05's --test-only may plan the preempting start no sooner than the other.
    assert!(starts <= waits, "{forecast:?}");
    if h.testbed.slurm_release() < (26, 5) {
        assert!(starts < waits, "{forecast:?}");
        assert_eq!(forecast.soonest().unwrap().partition, "gpu");
    }
    assert!(missing.start_estimate.is_none());
    assert!(
        missing.why_not.as_deref().unwrap().contains("nosuch"),
        "{missing:?}"
    );
    // Above the GPU partition's MaxTime: why it cannot run there.
    spec.time = Some(WallTime::from_hours(5));
    let long = h.backend.forecast(&spec).await.unwrap();
    assert!(
        long.partitions[1]
            .why_not
            .as_deref()
            .unwrap()
            .contains("04:00:00"),
        "{long:?}"
    );
    // Nothing submitted, no record opened.
    assert_eq!(
        h.backend
            .records(&RecordFilter::default())
            .await
            .unwrap()
            .len(),
        before
    );
    assert_eq!(queued().await, queued_before);
    h.backend.cancel(block.id()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_says_when_a_waiting_jobs_category_changes_and_the_timeline_splits_the_wait() {
    let _cluster = cluster::exclusive().await;
    let h = harness();
    let block = h
        .backend
        .submit(
            &blocker("why-watch-blocker", None, None),
            SubmitOptions::default(),
        )
        .await
        .unwrap();
    wait_state(&h.backend, block.id(), JobState::Running, 120).await;
    let held = h
        .backend
        .submit(
            &small_spec("why-watch-held", "true"),
            SubmitOptions::default(),
        )
        .await
        .unwrap();
    let held_job = held.backend_ref().unwrap().native_id.clone();
    admin(&h.testbed, "scontrol", &["uhold", &held_job]);
    why_until(&h, std::slice::from_ref(held.id()), 60, |a| {
        a[0].category == WaitCategory::Held
    })
    .await;
    let options = WatchOptions {
        interval: Duration::from_millis(500),
        ..WatchOptions::default()
    };
    let mut events = h.backend.watch(std::slice::from_ref(held.id()), options);
    // The watch's first poll sees it held; then it is released and waits for the nodes.
    let first = tokio::time::timeout(Duration::from_secs(5), events.next()).await;
    assert!(first.is_err(), "no event while it stays held: {first:?}");
    admin(&h.testbed, "scontrol", &["release", &held_job]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    let mut changes = Vec::new();
    while !changes
        .iter()
        .any(|(_, now)| *now == Some(WaitCategory::Resources))
    {
        let event = tokio::time::timeout_at(deadline, events.next())
            .await
            .unwrap_or_else(|_| panic!("no change to resources: {changes:?}"))
            .expect("the watch goes on")
            .expect("a watch event");
        match event {
            WatchEvent::Waiting { from, status } => {
                assert_eq!(status.state(), JobState::Pending);
                changes.push((from, status.native().and_then(|n| n.category)));
            }
            other => panic!("only waiting changes while it is pending: {other:?}"),
        }
    }
    assert_eq!(changes[0].0, WaitCategory::Held, "{changes:?}");
    // The blocker gone, the job runs and ends: accounting's times split its wait.
    h.backend.cancel(block.id()).await.unwrap();
    drop(events);
    let done = wait_state(&h.backend, held.id(), JobState::Complete, 120).await;
    let timeline = *done.record().timeline();
    let (submitted, eligible, started, ended) = (
        timeline.submitted_at.expect("submitted"),
        timeline.eligible_at.expect("eligible"),
        timeline.started_at.expect("started"),
        timeline.ended_at.expect("ended"),
    );
    assert!(
        submitted <= eligible && eligible <= started && started <= ended,
        "{timeline:?}"
    );
    assert!(
        eligible - submitted >= chrono::Duration::seconds(5),
        "held for more than five seconds before it was eligible: {timeline:?}"
    );
    assert!(timeline.queue_wait().unwrap() >= timeline.eligible_wait().unwrap());
}
