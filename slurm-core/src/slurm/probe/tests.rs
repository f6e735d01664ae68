//! Unit tests of the NCCL probe's submit hook and of the poll that settles a probe,
//! against a fake cluster (a mockall transport): the probe and the job are submitted
//! at once, the job held by the scheduler; the verdict read when a poll sees the probe
//! end caches a pass or ends the waiting job with the error naming the switch.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::backend::{Backend, SubmitOptions};
use crate::nccl::{NcclProbe, ProbeOptions, PROBE_LABEL, PROBE_VERDICT_LABEL};
use crate::record::{JobRecord, RecordFilter, RecordStore};
use crate::slurm::testkit::{
    empty_round_trip, is_submit, output, prepared_backend, staged_script, FakeRenderer, MockRemote,
    TestBackend,
};
use crate::slurm::SlurmSubmitOptions;
use crate::spec::JobSpec;
use crate::state::JobState;

/// What the fake scheduler says of one job.
#[derive(Clone)]
enum Seen {
    /// squeue lists it: state and reason.
    Queued(&'static str, &'static str),
    /// Only sacct knows it: state and exit code.
    Ended(&'static str, &'static str),
}

/// A fake cluster: submits get SLURM ids 101, 102, ...; polls answer from `jobs`;
/// verdict reads from `verdicts` (by record id); everything run is kept in `ran`.
#[derive(Default)]
struct Fake {
    /// Record id and staged script of each submit, in order.
    scripts: Vec<(String, String)>,
    jobs: BTreeMap<u32, Seen>,
    verdicts: BTreeMap<String, String>,
    ran: Vec<String>,
}

type Shared = Arc<Mutex<Fake>>;

fn fake_cluster(remote: &mut MockRemote) -> Shared {
    let fake: Shared = Default::default();
    let submits = Arc::clone(&fake);
    remote
        .expect_run()
        .withf(is_submit)
        .returning(move |command| {
            let mut fake = submits.lock().unwrap();
            let id = command.label().trim_start_matches("submit ").to_string();
            fake.scripts.push((id, staged_script(command)));
            let native = 100 + fake.scripts.len() as u32;
            fake.jobs
                .insert(native, Seen::Queued("PENDING", "Priority"));
            fake.ran.push(command.label());
            Ok(output(0, &format!("{native}\n"), ""))
        });
    let polls = Arc::clone(&fake);
    remote
        .expect_run()
        .withf(|c| c.label().starts_with("poll "))
        .returning(move |command| {
            let mut fake = polls.lock().unwrap();
            fake.ran.push(command.label());
            // The poll asks for its jobs on standard input: a `K J COUNT` line, then
            // COUNT ids.
            let asked = String::from_utf8_lossy(command.stdin_bytes().unwrap_or_default());
            let mut ids: Vec<u32> = Vec::new();
            let mut lines = asked.lines();
            while let Some(header) = lines.next() {
                let fields: Vec<&str> = header.split(' ').collect();
                let count: usize = fields[2].parse().unwrap();
                let items: Vec<&str> = lines.by_ref().take(count).collect();
                if fields[1] == "J" {
                    ids.extend(items.iter().map(|id| id.parse::<u32>().unwrap()));
                }
            }
            let (mut squeue, mut sacct) = (String::new(), String::new());
            for id in ids {
                match fake.jobs[&id].clone() {
                    Seen::Queued(state, reason) => {
                        squeue.push_str(&format!("O {id}|{state}|{reason}||job\n"))
                    }
                    Seen::Ended(state, exit) => sacct.push_str(&format!(
                        "O {id}|{id}|{state}|{exit}|None|2024-05-01T10:00:00|2024-05-01T10:00:01|2024-05-01T10:00:09|n[1-2]|job\n"
                    )),
                }
            }
            Ok(output(
                0,
                &format!("@@begin 0\n{squeue}@@end 0 0\n@@begin 1\n{sacct}@@end 1 0\n"),
                "",
            ))
        });
    let reads = Arc::clone(&fake);
    remote
        .expect_run()
        .withf(|c| c.program() == "cat")
        .returning(move |command| {
            let mut fake = reads.lock().unwrap();
            let path = command.get_args().last().unwrap().clone();
            fake.ran.push(format!("cat {path}"));
            let found = fake
                .verdicts
                .iter()
                .find(|(id, _)| path.ends_with(&format!("/{id}/nccl/verdict")))
                .map(|(_, text)| text.clone());
            Ok(match found {
                Some(text) => output(0, &text, ""),
                None => output(1, "", "cat: no such file\n"),
            })
        });
    // Round trips (log tails, scancel): empty answers, kept.
    let rest = Arc::clone(&fake);
    remote.expect_run().returning(move |command| {
        let mut fake = rest.lock().unwrap();
        fake.ran.push(format!(
            "{} {}",
            command.label(),
            command.get_args().join(" ")
        ));
        Ok(empty_round_trip(command))
    });
    fake
}

fn image_job(name: &str, nodes: u32, gpus: u32) -> JobSpec {
    let mut spec = JobSpec::new(name, "python train.py");
    spec.image = Some("/images/pt.sqsh".into());
    spec.nodes = Some(nodes);
    spec.gpus_per_node = Some(gpus);
    spec
}

/// The probe (SLURM job 101) ended as `state`/`exit` with `verdict`; its job (102)
/// waits for it.
fn probe_ended(
    fake: &Shared,
    probe: &JobRecord,
    state: &'static str,
    exit: &'static str,
    verdict: &str,
) {
    let mut fake = fake.lock().unwrap();
    fake.jobs.insert(101, Seen::Ended(state, exit));
    fake.jobs.insert(102, Seen::Queued("PENDING", "Dependency"));
    fake.verdicts
        .insert(probe.id.to_string(), verdict.to_string());
}

async fn probes(backend: &TestBackend) -> Vec<JobRecord> {
    backend
        .records(&RecordFilter::any().label(PROBE_LABEL, "nccl"))
        .await
        .unwrap()
}

const PASSED_ON_P2P: &str = "rung 0 HUNG no verdict within 120s (timeout exit 124)\n\
                             env 1 NCCL_P2P_DISABLE=1\n\
                             rung 1 OK NCCL_PROBE_OK world=16 backend=nccl\nend OK 1\n";

const NO_TORCHRUN: &str = "rung 0 FAILED NCCL_PROBE_EXIT node_rank=0 cannot run: no torchrun on the PATH (in the job image, if any)\nend FAILED 0\n";

/// Issue 13, point 3: the submit returns with the probe and the job both queued, the
/// job held by the scheduler (afterok on the probe) and reading its knobs; the client
/// polled nothing and waited for nothing. (The old submit polled the probe until it
/// ended, rung after rung.)
#[tokio::test]
async fn a_submit_queues_the_probe_and_the_job_at_once_and_waits_for_neither() {
    let dir = tempfile::tempdir().unwrap();
    let mut remote = MockRemote::new();
    let fake = fake_cluster(&mut remote);
    let backend = prepared_backend(remote, FakeRenderer::with_env(), dir.path());
    let record = backend
        .submit(&image_job("train", 2, 8), SubmitOptions::default())
        .await
        .unwrap();
    {
        let fake = fake.lock().unwrap();
        assert_eq!(
            fake.ran.len(),
            2,
            "two submits and nothing else: {:?}",
            fake.ran
        );
        let (probe_id, probe_script) = &fake.scripts[0];
        let (job_id, job_script) = &fake.scripts[1];
        assert!(probe_id.starts_with("nccl-probe-"), "{probe_id}");
        assert!(probe_script.contains("# the NCCL probe's ladder"));
        assert_eq!(job_id, record.id.as_str());
        assert!(
            job_script.contains("#SBATCH --dependency=afterok:101\n"),
            "{job_script}"
        );
        assert!(
            job_script.contains(&format!(
                "# knobs from /shared/results/{probe_id}/nccl/knobs.env\n"
            )),
            "{job_script}"
        );
        assert!(
            !job_script.contains("NCCL_P2P_DISABLE"),
            "no knob known yet"
        );
        assert_eq!(record.state, JobState::Pending);
        assert_eq!(record.after.len(), 1);
        assert_eq!(record.after[0].job.as_str(), probe_id.as_str());
        assert!(
            record.last_message().contains("waits for NCCL probe"),
            "{}",
            record.last_message()
        );
    }
    // The user's list shows the job, not the probe.
    let listed = backend.records(&RecordFilter::any()).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(probes(&backend).await.len(), 1);
}

#[tokio::test]
async fn a_poll_that_sees_the_probe_pass_caches_its_knobs_for_later_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let mut remote = MockRemote::new();
    let fake = fake_cluster(&mut remote);
    let backend = prepared_backend(remote, FakeRenderer::with_env(), dir.path());
    let spec = image_job("train", 2, 8);
    let record = backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap();
    let probe = probes(&backend).await.remove(0);
    probe_ended(&fake, &probe, "COMPLETED", "0:0", PASSED_ON_P2P);
    // Watching the job polls its probe too (a parent): the verdict is read once.
    let status = backend.status(&record.id).await.unwrap();
    assert_eq!(status.state(), JobState::Pending);
    let cached = backend.knob_cache("unit").unwrap().unwrap();
    let entry = cached.for_shape(2, 8).unwrap();
    assert_eq!(entry.env["NCCL_P2P_DISABLE"], "1");
    assert_eq!((entry.nodes, entry.gpus_per_node), (2, 8));
    assert_eq!(entry.probe_job, probe.id);
    let settled = backend.store().get(&probe.id).unwrap();
    assert_eq!(settled.labels[PROBE_VERDICT_LABEL], "OK");
    backend.status(&record.id).await.unwrap();
    let reads = |fake: &Fake| fake.ran.iter().filter(|r| r.starts_with("cat ")).count();
    assert_eq!(reads(&fake.lock().unwrap()), 1, "read once");

    // A later job of a covered shape: one submit, the cached knob, no probe.
    let before = fake.lock().unwrap().ran.len();
    backend
        .submit(&image_job("later", 4, 8), SubmitOptions::default())
        .await
        .unwrap();
    {
        let fake = fake.lock().unwrap();
        assert_eq!(fake.ran.len() - before, 1, "{:?}", &fake.ran[before..]);
        let (_, script) = fake.scripts.last().unwrap();
        assert!(script.contains("export NCCL_P2P_DISABLE=1\n"), "{script}");
        assert!(!script.contains("--dependency"), "{script}");
    }
    assert_eq!(probes(&backend).await.len(), 1);
}

/// Issue 13, point 3: a probe that cannot run (no torchrun in the image) is a clear
/// error naming the switch, on the job that waited for it; the job is cancelled on
/// the cluster; nothing is cached.
#[tokio::test]
async fn a_probe_that_cannot_run_ends_the_waiting_job_naming_the_switch() {
    let dir = tempfile::tempdir().unwrap();
    let mut remote = MockRemote::new();
    let fake = fake_cluster(&mut remote);
    let backend = prepared_backend(remote, FakeRenderer::with_env(), dir.path());
    let record = backend
        .submit(&image_job("train", 1, 4), SubmitOptions::default())
        .await
        .unwrap();
    let probe = probes(&backend).await.remove(0);
    probe_ended(&fake, &probe, "FAILED", "3:0", NO_TORCHRUN);
    let status = backend.status(&record.id).await.unwrap();
    assert_eq!(status.state(), JobState::Error, "{status:?}");
    let message = status.record.last_message().to_string();
    for needle in [
        "FAILED",
        "no torchrun",
        "--probe never",
        "nccl_probe: never",
        probe.id.as_str(),
    ] {
        assert!(message.contains(needle), "{needle} missing: {message}");
    }
    assert_eq!(
        status.record.err_class,
        Some(crate::classify::ErrorClass::Program)
    );
    let fake = fake.lock().unwrap();
    assert!(
        fake.ran
            .iter()
            .any(|r| r.contains("scancel") && r.contains("102")),
        "the job is cancelled on the cluster: {:?}",
        fake.ran
    );
    assert!(backend.knob_cache("unit").unwrap().is_none());
}

/// Concurrent and later submits of the same shape and image wait for the probe in
/// flight instead of queueing another (one poll of it to see it is still there).
#[tokio::test]
async fn a_second_submit_waits_for_the_probe_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let mut remote = MockRemote::new();
    let fake = fake_cluster(&mut remote);
    let backend = prepared_backend(remote, FakeRenderer::with_env(), dir.path());
    backend
        .submit(&image_job("first", 2, 8), SubmitOptions::default())
        .await
        .unwrap();
    let second = backend
        .submit(&image_job("second", 2, 4), SubmitOptions::default())
        .await
        .unwrap();
    {
        let fake = fake.lock().unwrap();
        assert_eq!(fake.scripts.len(), 3, "one probe for both: {:?}", fake.ran);
        assert!(fake.scripts[2]
            .1
            .contains("#SBATCH --dependency=afterok:101\n"));
    }
    assert_eq!(second.after[0].job, probes(&backend).await[0].id);
    // A shape the probe covers waits for it too; another image probes on its own.
    backend
        .submit(&image_job("wide", 1, 8), SubmitOptions::default())
        .await
        .unwrap();
    assert_eq!(probes(&backend).await.len(), 1, "2x8 covers 1x8");
    let mut spec = image_job("other-image", 2, 8);
    spec.image = Some("/images/other.sqsh".into());
    backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap();
    assert_eq!(
        probes(&backend).await.len(),
        2,
        "another image probes on its own"
    );
}

/// Issue 13, point 4: the spec's `nccl_probe` wins over the submit's option; `never`
/// neither probes nor adds knobs, `always` probes even with knobs cached.
#[tokio::test]
async fn the_spec_switch_wins_over_the_submit_option() {
    let dir = tempfile::tempdir().unwrap();
    let mut remote = MockRemote::new();
    let fake = fake_cluster(&mut remote);
    let backend = prepared_backend(remote, FakeRenderer::with_env(), dir.path());
    let always = SlurmSubmitOptions {
        nccl_probe: NcclProbe::Always,
        probe: ProbeOptions::default(),
    };
    let mut never = image_job("never", 2, 8);
    never.nccl_probe = Some(NcclProbe::Never);
    backend
        .submit_with(&never, SubmitOptions::default(), always.clone())
        .await
        .unwrap();
    assert!(probes(&backend).await.is_empty());
    // No image, Auto: nothing to probe with, so no probe.
    let mut bare = image_job("bare", 2, 8);
    bare.image = None;
    backend
        .submit(&bare, SubmitOptions::default())
        .await
        .unwrap();
    assert!(probes(&backend).await.is_empty());
    // `always` in the spec, the default option: a probe (for a job without an image too).
    bare.nccl_probe = Some(NcclProbe::Always);
    backend
        .submit(&bare, SubmitOptions::default())
        .await
        .unwrap();
    assert_eq!(probes(&backend).await.len(), 1);
    assert_eq!(fake.lock().unwrap().scripts.len(), 4);
}

/// A job refused after its probe was queued takes its probe with it.
#[tokio::test]
async fn a_refused_job_cancels_the_probe_it_queued() {
    let dir = tempfile::tempdir().unwrap();
    let mut remote = MockRemote::new();
    let fake = fake_cluster(&mut remote);
    let backend = prepared_backend(remote, FakeRenderer::with_env(), dir.path());
    let mut spec = image_job("train", 2, 8);
    spec.supporting_files = vec!["/nonexistent/slurm-run-test-file".into()];
    let err = backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("supporting_files"), "{err}");
    let fake = fake.lock().unwrap();
    assert!(
        fake.ran
            .iter()
            .any(|r| r.starts_with("scancel") && r.contains("101")),
        "{:?}",
        fake.ran
    );
}

/// Cached knobs reach jobs of the shapes they cover, the spec's own values win, and a
/// one-GPU job or `never` gets none (the cache file of the format before per-shape
/// entries is ignored).
#[tokio::test]
async fn cached_knobs_reach_covered_jobs_only() {
    let dir = tempfile::tempdir().unwrap();
    crate::nccl::record_knobs(
        dir.path(),
        "unit",
        crate::nccl::ShapeKnobs {
            env: [("NCCL_P2P_DISABLE".to_string(), "1".to_string())].into(),
            probed_at: chrono::Utc::now(),
            nodes: 2,
            gpus_per_node: 8,
            probe_job: crate::record::JobId::parse("nccl-probe-abcdef").unwrap(),
        },
    )
    .unwrap();
    let mut remote = MockRemote::new();
    let fake = fake_cluster(&mut remote);
    let backend = prepared_backend(remote, FakeRenderer::with_env(), dir.path());
    backend
        .submit(&image_job("two", 2, 8), SubmitOptions::default())
        .await
        .unwrap();
    let mut own = image_job("own", 1, 2);
    own.extra_env.insert("NCCL_P2P_DISABLE".into(), "0".into());
    backend
        .submit(&own, SubmitOptions::default())
        .await
        .unwrap();
    let mut one = JobSpec::new("one", "true");
    one.gpus_per_node = Some(1);
    backend
        .submit(&one, SubmitOptions::default())
        .await
        .unwrap();
    let mut never = image_job("never", 2, 8);
    never.nccl_probe = Some(NcclProbe::Never);
    backend
        .submit(&never, SubmitOptions::default())
        .await
        .unwrap();
    let fake = fake.lock().unwrap();
    let scripts: Vec<&String> = fake.scripts.iter().map(|(_, s)| s).collect();
    assert_eq!(scripts.len(), 4, "no probe: {:?}", fake.ran);
    assert!(scripts[0].contains("export NCCL_P2P_DISABLE=1\n"));
    assert!(
        scripts[1].contains("export NCCL_P2P_DISABLE=0\n"),
        "the spec's value wins"
    );
    assert!(!scripts[1].contains("NCCL_P2P_DISABLE=1"));
    assert!(!scripts[2].contains("NCCL_"), "one GPU needs no knob");
    assert!(!scripts[3].contains("NCCL_"), "never adds no knob");
}

/// A multi-role job's NCCL probe checks its multi-GPU role with the most GPUs (its shape
/// and image), queued with the job as for any job; a job whose roles have one GPU each
/// at most needs none.
#[tokio::test]
async fn a_multi_role_job_probes_its_largest_multi_gpu_role() {
    let dir = tempfile::tempdir().unwrap();
    let mut remote = MockRemote::new();
    let fake = fake_cluster(&mut remote);
    let backend = prepared_backend(remote, FakeRenderer::with_env(), dir.path());
    let spec = JobSpec::from_yaml_str(
        "name: rl\nroles:\n  controller: {gpus_per_node: 0, command: c}\n  policy: {nodes: 2, gpus_per_node: 8, image: /images/pt.sqsh, command: p}\n  rollout: {gpus_per_node: 4, image: /images/other.sqsh, command: r}\n",
    )
    .unwrap();
    let record = backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap();
    let probe = probes(&backend).await.pop().expect("a probe was queued");
    assert_eq!(probe.image(), Some("/images/pt.sqsh"), "{probe:?}");
    assert!(
        probe.labels().values().any(|v| v.contains("2x8")),
        "the policy's shape: {:?}",
        probe.labels()
    );
    assert_eq!(record.after[0].job, probe.id);
    assert_eq!(fake.lock().unwrap().scripts.len(), 2);

    let small = JobSpec::from_yaml_str(
        "name: small\nroles:\n  a: {gpus_per_node: 1, command: a}\n  b: {gpus_per_node: 1, command: b}\n",
    )
    .unwrap();
    let record = backend
        .submit(&small, SubmitOptions::default())
        .await
        .unwrap();
    assert!(record.after.is_empty(), "{record:?}");
    assert_eq!(probes(&backend).await.len(), 1);
}
