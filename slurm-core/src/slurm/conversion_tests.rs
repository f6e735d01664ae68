//! A cold image's conversion as a job of its own, against a mock cluster: the submit
//! queues it and the GPU job behind it and returns; a failed conversion ends the job
//! with what enroot said.

use std::sync::{Arc, Mutex};

use super::conversion::conversion_job_spec;
use super::facts::PartitionInfo;
use super::images::Conversion;
use super::testkit::*;
use crate::backend::{Backend, SubmitOptions};
use crate::image::ImageRef;
use crate::record::{JobRecord, RecordFilter};
use crate::spec::JobSpec;
use crate::state::JobState;

const IMAGE: &str = "registry.example.com:5000/team/img:1";

/// A backend as after a passed preflight that knows the conversion partition too.
fn converting_backend(remote: MockRemote, dir: &std::path::Path) -> TestBackend {
    let backend = prepared_backend(remote, FakeRenderer::with_env(), dir);
    backend.facts().change(|facts| {
        facts.partitions.insert(
            "cpu_long".into(),
            PartitionInfo {
                up: true,
                max_time: None,
                nodes: vec!["n1".into()],
            },
        );
    });
    backend
}

fn image_spec(name: &str) -> JobSpec {
    let mut spec = JobSpec::new(name, "true");
    spec.image = Some(IMAGE.into());
    spec.gpus_per_node = Some(1);
    spec
}

#[tokio::test]
async fn a_cold_image_is_converted_by_a_job_of_its_own_and_the_submit_returns_at_once() {
    // Defect 15: the first submit of an image ran the conversion as a blocking srun
    // inside the submit, so it waited as long as the CPU partition's queue took.
    let dir = tempfile::tempdir().unwrap();
    let scripts: Scripts = Default::default();
    let staged = Arc::clone(&scripts);
    let mut remote = MockRemote::new();
    // The gate: no whole .sqsh yet; enroot and credentials there; the partition up.
    remote
        .expect_run()
        .withf(|c| c.label().starts_with("round trip of 3"))
        .times(1)
        .returning(|_| {
            Ok(output(
                0,
                "@@begin 0\nE not whole\n@@end 0 66\n@@begin 1\n@@end 1 0\n@@begin 2\nO PartitionName=cpu_long State=UP MaxTime=UNLIMITED\n@@end 2 0\n",
                "",
            ))
        });
    remote
        .expect_run()
        .withf(is_submit)
        .times(2)
        .returning(move |c| {
            let script = staged_script(c);
            let mut staged = staged.lock().unwrap();
            staged.push((c.label(), script));
            Ok(output(
                0,
                if staged.len() == 1 { "801\n" } else { "802\n" },
                "",
            ))
        });
    let backend = converting_backend(remote, dir.path());
    let record = backend
        .submit(&image_spec("cold"), SubmitOptions::default())
        .await
        .unwrap();
    assert_eq!(record.state, JobState::Pending);
    assert_eq!(record.backend_ref.as_ref().unwrap().native_id, "802");
    let conversions = backend
        .records(&RecordFilter::any().label(super::conversion::CONVERSION_LABEL, "image"))
        .await
        .unwrap();
    assert_eq!(conversions.len(), 1, "one conversion job");
    let conversion = &conversions[0];
    assert_eq!(conversion.backend_ref.as_ref().unwrap().native_id, "801");
    assert!(
        record.after.iter().any(|d| d.job == conversion.id),
        "the job waits for the conversion: {:?}",
        record.after
    );
    let scripts = scripts.lock().unwrap();
    assert!(
        scripts[0].0.contains(conversion.id.as_str()),
        "{:?}",
        scripts[0].0
    );
    assert!(
        scripts[1].1.contains("#SBATCH --dependency=afterok:801"),
        "{}",
        scripts[1].1
    );
    assert!(
        record.last_message().contains("by SLURM job 801 first"),
        "{}",
        record.last_message()
    );
    assert_eq!(
        record.container_image.as_deref(),
        Some("/shared/results/images/registry.example.com_5000_team_img_1.sqsh"),
        "the GPU job gets the .sqsh, never the registry image"
    );
}

/// Open `spec` as accepted (`native`) in `state`.
fn open(backend: &TestBackend, spec: &JobSpec, native: &str, state: JobState) -> JobRecord {
    open_accepted(backend.store(), spec, native, state)
}

#[tokio::test]
async fn a_failed_conversion_ends_the_job_waiting_for_it_with_what_enroot_said() {
    // Defect 15 (and 16): the job waiting for a conversion that failed ends ERROR with
    // the conversion's reason and is cancelled on the cluster; it never pulls.
    let dir = tempfile::tempdir().unwrap();
    let said = "[INFO] Authentication succeeded\nenroot-mksquashovlfs: write failed: No space left on device\nslurm-run-conversion: enroot-failed\n";
    let cancelled = Arc::new(Mutex::new(Vec::<Vec<String>>::new()));
    let seen = Arc::clone(&cancelled);
    let mut remote = MockRemote::new();
    remote.expect_run().withf(is_poll).returning(|_| {
        Ok(output(
            0,
            "@@begin 0\nO 802|PENDING|DependencyNeverSatisfied|(null)|job\n@@end 0 0\n@@begin 1\nO 801|801|FAILED|1:0|None|2026-11-30T10:00:00|2026-11-30T10:00:01|2026-11-30T10:00:02|n1|conv\n@@end 1 0\n",
            "",
        ))
    });
    remote
        .expect_run()
        .withf(|c| {
            c.label().starts_with("round trip of")
                || c.label().starts_with("read 1 image conversion")
        })
        .returning(move |_| {
            Ok(output(
                0,
                &format!(
                    "@@begin 0\n{}@@end 0 0\n",
                    said.lines().map(|l| format!("O {l}\n")).collect::<String>()
                ),
                "",
            ))
        });
    remote
        .expect_run()
        .withf(|c| c.program() == "scancel")
        .returning(move |c| {
            seen.lock().unwrap().push(c.get_args().to_vec());
            Ok(output(0, "", ""))
        });
    let backend = converting_backend(remote, dir.path());
    let conversion = Conversion {
        image: ImageRef::parse(IMAGE).unwrap(),
        path: "/shared/results/images/x.sqsh".into(),
        force: false,
    };
    let conversion = open(
        &backend,
        &conversion_job_spec(backend.config(), &conversion).unwrap(),
        "801",
        JobState::Running,
    );
    let mut spec = image_spec("waiting");
    spec.after = vec![crate::dependency::Dependency::ok(conversion.id.clone())];
    let job = open(&backend, &spec, "802", JobState::Pending);
    let status = backend.status(&job.id).await.unwrap();
    assert_eq!(status.state(), JobState::Error, "{:?}", status.record());
    let message = status.record().last_message();
    assert!(
        message.contains("conversion") && message.contains("No space left"),
        "{message}"
    );
    assert!(!message.contains("refused"), "{message}");
    assert!(message.contains("never falls back"), "{message}");
    assert_eq!(*cancelled.lock().unwrap(), [vec!["802".to_string()]]);
}
