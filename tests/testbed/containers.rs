//! Container jobs for real: Pyxis and enroot on the test bed, the private registry's
//! fixture images (`slurm-run/tiny:1` and `:latest`, each holding `/etc/slurm-run-image`
//! with its own name), from the credentials to one- and two-node container jobs.
//!
//! Tests that need a first conversion use a results root of their own (an empty image
//! cache) and remove it at the end; the others share the test bed's root.

use std::collections::BTreeMap;
use std::time::Duration;

use slurm_core::{
    Backend, CheckKind, Command, CompletionCheck, Error, ErrorKind, JobRecord, JobSpec, JobState,
    LogOptions, NcclProbe, SlurmSubmitOptions, SubmitOptions,
};
use slurm_run_testsupport::backend::{
    harness, harness_in, jobs_named, registry_image, registry_password, remote, small_spec,
    wait_terminal, with_credentials, Harness,
};
use slurm_run_testsupport::cluster;
use slurm_run_testsupport::examples::{example, run_input, ArgvWatch};

/// A name no earlier run used.
pub(crate) fn stamp() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{:x}", nanos & 0xffff_ffff_ffff)
}

/// The fixture image `slurm-run/tiny:TAG` on the test bed's registry, as `host:port/...`.
fn tiny(h: &Harness, tag: &str) -> String {
    registry_image(h, &format!("slurm-run/tiny:{tag}"))
}

/// A one-node job of `image` printing the image's marker.
fn image_spec(name: &str, image: &str, command: &str) -> JobSpec {
    let mut spec = small_spec(name, command);
    spec.image = Some(image.to_string());
    spec
}

/// Submit and wait until terminal; the final record.
async fn run_to_end(h: &Harness, spec: &JobSpec) -> JobRecord {
    let record = h
        .backend
        .submit(spec, SubmitOptions::default())
        .await
        .unwrap_or_else(|e| panic!("submit {}: {e}", spec.name));
    let status = wait_terminal(&h.backend, record.id(), 180).await;
    status.into_record()
}

/// The PENDING transition's message (what the submit says it did with the image).
pub(crate) fn submit_message(record: &JobRecord) -> String {
    record
        .history()
        .iter()
        .find(|t| t.state() == JobState::Pending)
        .and_then(|t| t.message().map(str::to_string))
        .unwrap_or_default()
}

/// The SLURM job id in "converted ... by SLURM job N", if the submit converted.
fn conversion_job(record: &JobRecord) -> Option<String> {
    let message = submit_message(record);
    let (_, rest) = message.split_once("by SLURM job ")?;
    Some(rest.split_whitespace().next()?.to_string())
}

/// `JobName|Partition` as sacct shows job `id` (polled until the partition is there:
/// accounting lags the job a little, and first names an srun's job `allocation`).
async fn partition_of(h: &Harness, id: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let out = remote(
            h,
            Command::new("sacct")
                .args([
                    "--noheader",
                    "-X",
                    "--parsable2",
                    "--format=JobName,Partition",
                    "-j",
                ])
                .arg(id),
        )
        .await;
        let settled = out
            .trim()
            .rsplit_once('|')
            .is_some_and(|(_, p)| !p.is_empty());
        if settled || tokio::time::Instant::now() > deadline {
            return out.trim().to_string();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The conversion job `id` ran on the CPU partition, as a record of its own (its SLURM
/// job name is its record id, `slurm-run-convert-...`).
async fn assert_converted_on_the_cpu_partition(h: &Harness, id: &str) {
    let seen = partition_of(h, id).await;
    let (name, partition) = seen.rsplit_once('|').unwrap_or_default();
    assert!(
        name.starts_with("slurm-run-convert-") && partition == "cpu_long",
        "{seen}"
    );
}

/// squeue's state of SLURM job `id` (empty once it left the queue).
async fn job_state(h: &Harness, id: &str) -> String {
    remote(
        h,
        Command::new("squeue")
            .args(["--noheader", "--format=%T", "--jobs"])
            .arg(id),
    )
    .await
    .trim()
    .to_string()
}

/// `inode mtime` of a file on the cluster.
async fn identity(h: &Harness, path: &str) -> String {
    remote(h, Command::new("stat").args(["-c", "%i %Y"]).arg(path))
        .await
        .trim()
        .to_string()
}

async fn logs(h: &Harness, record: &JobRecord) -> String {
    h.backend
        .logs(record.id(), LogOptions::default())
        .await
        .unwrap()
}

async fn remove_root(h: &Harness) {
    let root = h.backend.config().results_root.clone().unwrap();
    remote(h, Command::new("rm").args(["-rf", "--"]).arg(root)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflight_on_the_test_bed_shows_pyxis_enroot_credentials_and_the_conversion_partition() {
    let _cluster = cluster::shared().await;
    let h = harness();
    with_credentials(&h).await;
    let spec = image_spec("pf-image", &tiny(&h, "1"), "true");
    let report = h.backend.preflight(Some(&spec)).await.unwrap();
    assert!(report.passed(), "{report}");
    let checks: BTreeMap<&str, (bool, &str)> = report
        .checks
        .iter()
        .map(|c| (c.check.as_str(), (c.ok, c.detail.as_str())))
        .collect();
    assert_eq!(
        checks["pyxis (srun --container-image)"],
        (true, "present"),
        "{report}"
    );
    assert_eq!(checks["enroot"], (true, "present"), "{report}");
    assert!(
        checks["enroot credentials"].1.contains("present"),
        "{report}"
    );
    assert_eq!(checks["conversion partition cpu_long"], (true, "UP"));
}

/// Point 6: a private image with no credentials fails before anything is queued, with
/// the fix in the message; a wrong password is reported as the registry's refusal.
/// (`localhost:PORT` is the same registry under a name with no credentials.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credentials_fail_before_anything_is_queued_and_a_wrong_password_is_named() {
    let _cluster = cluster::shared().await;
    let h = harness_in(Some(&format!("wrongpw-{}", stamp())));
    let port = h
        .testbed
        .get("SLURM_RUN_TEST_REGISTRY")
        .rsplit(':')
        .next()
        .unwrap()
        .to_string();
    let registry = format!("localhost:{port}");
    h.backend.remove_credentials(&registry).await.unwrap();
    let image = format!("{registry}/slurm-run/tiny:1");
    let name = format!("noauth-{}", stamp());
    let spec = image_spec(&name, &image, "cat /etc/slurm-run-image");

    let err = h
        .backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Preflight {
                kind: CheckKind::Credentials,
                ..
            }
        ),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains(&format!("slurmctl credentials install {registry} --user")),
        "{text}"
    );
    // Nothing was queued: no record, no job under the spec's name, no conversion.
    assert!(h
        .backend
        .records(&Default::default())
        .await
        .unwrap()
        .is_empty());
    let jobs = remote(
        &h,
        Command::new("bash").arg("-c").arg(
            r#"{ squeue -h -o %j; sacct -n -X -P -S now-10minutes -o JobName; } | grep -c -- "^$1" || true"#,
        ).arg("count").arg(&name),
    )
    .await;
    assert_eq!(jobs.trim(), "0");

    // A wrong password: the gate passes and the submit returns (the conversion is a job
    // of its own); the conversion is refused, and the job that waited for it ends ERROR
    // saying which registry refused and how to check, with enroot's own lines.
    let wrong = "not-the-password-3f9a1c";
    h.backend
        .install_credentials(
            &registry,
            h.testbed.get("SLURM_RUN_TEST_REGISTRY_USER"),
            wrong,
        )
        .await
        .unwrap();
    let record = h
        .backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap();
    let ended = wait_terminal(&h.backend, record.id(), 180).await;
    assert_eq!(ended.state(), JobState::Error, "{:?}", ended.record());
    let text = ended.record().last_message().to_string();
    assert!(
        text.contains(&format!(
            "registry {registry} refused or was unreachable; check `credentials check {registry}`"
        )),
        "{text}"
    );
    assert!(
        text.contains("[INFO] Authenticating with user: slurm-run-test"),
        "{text}"
    );
    assert!(text.contains("never falls back"), "{text}");
    assert!(!text.contains(wrong), "the secret leaked into the record");
    // The record keeps why, without the secret; the job never ran (cancelled).
    let json = serde_json::to_string(ended.record()).unwrap();
    assert!(
        json.contains("refused or was unreachable") && !json.contains(wrong),
        "{json}"
    );
    assert!(ended.record().nodes().is_empty(), "it never ran: {json}");

    h.backend.remove_credentials(&registry).await.unwrap();
    remove_root(&h).await;
}

/// Point 6: credentials installed through slurmctl (the secret on stdin, in no argv on
/// either side), then the conversion on the CPU partition, then a one-node container
/// job whose log shows the image's marker; a second submit converts nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurmctl_credentials_then_conversion_on_the_cpu_partition_then_a_container_job() {
    let _cluster = cluster::shared().await;
    let h = harness_in(Some(&format!("first-{}", stamp())));
    let registry = h.testbed.get("SLURM_RUN_TEST_REGISTRY").to_string();
    let secret = registry_password(&h);
    let state = tempfile::tempdir().unwrap();
    let mut env = h.testbed.client_env(state.path());
    env.retain(|(k, _)| k != "SLURM_RUN_TEST_REGISTRY_PASSWORD");
    let slurmctl = example("slurmctl");
    let watch = ArgvWatch::start(&secret);
    let run = run_input(
        &slurmctl,
        &[
            "credentials",
            "install",
            &registry,
            "--user",
            h.testbed.get("SLURM_RUN_TEST_REGISTRY_USER"),
        ],
        &env,
        Some(format!("{secret}\n").as_bytes()),
        Duration::from_secs(60),
    );
    let (scans, leaks) = watch.stop();
    run.expect_code(0);
    assert!(
        scans > 0 && leaks.is_empty(),
        "the secret was in an argv: {leaks:?}"
    );
    assert!(run.stdout.contains("present"), "{}", run.stdout);
    assert!(!run.stdout.contains(&secret) && !run.stderr.contains(&secret));
    let check = run_input(
        &slurmctl,
        &["--json", "credentials", "check", &registry],
        &env,
        None,
        Duration::from_secs(60),
    );
    check.expect_code(0);
    let lines = check.json_lines();
    assert_eq!(lines[0]["ok"], true, "{}", check.stdout);
    let file = lines[0]["file"].as_str().unwrap().to_string();
    assert_eq!(
        remote(&h, Command::new("stat").args(["-c", "%a"]).arg(&file))
            .await
            .trim(),
        "600"
    );

    let image = tiny(&h, "1");
    let spec = image_spec("first", &image, "cat /etc/slurm-run-image; pwd");
    let record = run_to_end(&h, &spec).await;
    assert_eq!(record.state(), JobState::Complete, "{record:?}");
    let job = conversion_job(&record)
        .unwrap_or_else(|| panic!("no conversion: {}", submit_message(&record)));
    assert_converted_on_the_cpu_partition(&h, &job).await;
    let out = logs(&h, &record).await;
    assert!(out.contains("slurm-run/tiny:1"), "{out}");
    assert!(
        out.contains(record.results_dir().as_str()),
        "the working directory: {out}"
    );
    // The record keeps what was asked and the .sqsh that ran.
    assert_eq!(record.image(), Some(image.replacen('/', "#", 1).as_str()));
    let sqsh = record.container_image().unwrap().to_string();
    assert!(
        sqsh.ends_with(".sqsh") && sqsh.contains("/images/"),
        "{sqsh}"
    );
    let before = identity(&h, &sqsh).await;

    // A second submit of the same image converts nothing.
    let again = run_to_end(&h, &image_spec("again", &image, "cat /etc/slurm-run-image")).await;
    assert_eq!(again.state(), JobState::Complete);
    assert_eq!(conversion_job(&again), None, "{}", submit_message(&again));
    assert_eq!(again.container_image(), Some(sqsh.as_str()));
    assert_eq!(identity(&h, &sqsh).await, before);
    // No local file slurmctl wrote (its records database, and what sits beside it) holds
    // the secret: their bytes are searched (the database is not text).
    let written: Vec<u8> = std::fs::read_dir(state.path())
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_file())
        .flat_map(|e| std::fs::read(e.path()).unwrap())
        .collect();
    assert!(
        !written.is_empty(),
        "slurmctl kept its records in the state folder"
    );
    assert!(!written
        .windows(secret.len())
        .any(|w| w == secret.as_bytes()));
    remove_root(&h).await;
}

/// Point 6: a two-node container job: the rendezvous variables, a secret, an NCCL knob,
/// a mount, the staged spec and supporting file reach the command on both nodes, which
/// starts in the job folder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_node_container_job_sees_its_world_on_both_nodes() {
    let _cluster = cluster::shared().await;
    let h = harness();
    with_credentials(&h).await;
    let data = format!(
        "{}/data-{}",
        h.testbed.get("SLURM_BASE_RESULTS_DIR"),
        stamp()
    );
    remote(
        &h,
        Command::new("bash")
            .arg("-c")
            .arg(r#"mkdir -p "$1" && echo mounted-data > "$1/marker""#)
            .arg("mkdata")
            .arg(&data),
    )
    .await;
    let local = tempfile::tempdir().unwrap();
    let file = local.path().join("settings.txt");
    std::fs::write(&file, "from-a-supporting-file\n").unwrap();
    let secret = "s3cret-value-for-the-containers";
    let mut spec = image_spec(
        "twonode",
        &tiny(&h, "1"),
        r#"echo "rank=$NODE_RANK world=$WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT image=$(cat /etc/slurm-run-image) knob=$NCCL_P2P_DISABLE data=$(cat /data/marker) pwd=$(pwd) file=$(cat "$SLURM_RUN_FILES_DIR/settings.txt") spec=$(head -c 1 "$SLURM_RUN_SPEC") token=$(printf %s "$SLURM_RUN_TEST_CONTAINER_TOKEN" | sha256sum | cut -c1-16)"; touch "$SLURM_RUN_RESULTS_DIR/rank-$NODE_RANK""#,
    );
    spec.nodes = Some(2);
    spec.mounts = vec![format!("{data}:/data:ro")];
    spec.extra_env.insert("NCCL_P2P_DISABLE".into(), "1".into());
    spec.secrets = vec!["SLURM_RUN_TEST_CONTAINER_TOKEN".into()];
    spec.supporting_files = vec![file.display().to_string()];
    let options = SubmitOptions {
        secret_values: Some(
            [(
                "SLURM_RUN_TEST_CONTAINER_TOKEN".to_string(),
                secret.to_string(),
            )]
            .into(),
        ),
        ..SubmitOptions::default()
    };
    // The probe's torchrun is not in the tiny image: no probe here.
    let slurm = SlurmSubmitOptions {
        nccl_probe: NcclProbe::Never,
        ..SlurmSubmitOptions::default()
    };
    let record = h.backend.submit_with(&spec, options, slurm).await.unwrap();
    let record = wait_terminal(&h.backend, record.id(), 180)
        .await
        .into_record();
    assert_eq!(record.state(), JobState::Complete, "{record:?}");
    let out = logs(&h, &record).await;
    let digest = sha2_digest::hex16(secret);
    let dir = record.results_dir().as_str();
    for rank in ["0", "1"] {
        let expected = format!(
            "rank={rank} world=2 master=n1:29500 image=slurm-run/tiny:1 knob=1 data=mounted-data pwd={dir} file=from-a-supporting-file spec={{ token={digest}"
        );
        assert!(out.contains(&expected), "rank {rank}: {expected}\n{out}");
        let listed = remote(&h, Command::new("ls").arg(dir)).await;
        assert!(
            listed.lines().any(|l| l == format!("rank-{rank}")),
            "{listed}"
        );
    }
    assert!(!out.contains(secret));
    remote(&h, Command::new("rm").args(["-rf", "--"]).arg(&data)).await;
}

/// A 16-hex prefix of a SHA-256, as `sha256sum | cut -c1-16` prints it.
mod sha2_digest {
    pub fn hex16(text: &str) -> String {
        let output = std::process::Command::new("sha256sum")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child.stdin.take().unwrap().write_all(text.as_bytes())?;
                child.wait_with_output()
            })
            .expect("sha256sum");
        String::from_utf8_lossy(&output.stdout)[..16].to_string()
    }
}

/// Point 5 (the defect: the command could not find its results folder, so an opt-in
/// status.json check marked a finished job ERROR): status.json written by the command
/// inside the container is read by the completion check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_json_written_inside_the_container_completes_the_job() {
    let _cluster = cluster::shared().await;
    let h = harness();
    with_credentials(&h).await;
    let mut spec = image_spec(
        "statusjson",
        &tiny(&h, "1"),
        r#"printf '{"status": "SUCCESS"}\n' > "$SLURM_RUN_RESULTS_DIR/status.json""#,
    );
    spec.completion_check = CompletionCheck::StatusJson;
    let record = run_to_end(&h, &spec).await;
    assert_eq!(record.state(), JobState::Complete, "{record:?}");
    // Relative to the working directory too: it is the job folder.
    let mut failing = image_spec(
        "statusjson-bad",
        &tiny(&h, "1"),
        r#"printf '{"status": "FAILED"}\n' > status.json"#,
    );
    failing.completion_check = CompletionCheck::StatusJson;
    let record = run_to_end(&h, &failing).await;
    assert_eq!(record.state(), JobState::Error, "{record:?}");
    let status = remote(
        &h,
        Command::new("cat").arg(record.results_dir().join("status.json").unwrap().as_str()),
    )
    .await;
    assert!(status.contains("FAILED"), "{status}");
}

/// Point 4: two concurrent first submits of one image convert it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_first_submits_convert_once() {
    let _cluster = cluster::shared().await;
    let h = harness_in(Some(&format!("concurrent-{}", stamp())));
    with_credentials(&h).await;
    let image = tiny(&h, "1");
    let a = image_spec("concurrent-a", &image, "cat /etc/slurm-run-image");
    let b = image_spec("concurrent-b", &image, "cat /etc/slurm-run-image");
    let (ra, rb) = tokio::join!(run_to_end(&h, &a), run_to_end(&h, &b));
    assert_eq!(
        (ra.state(), rb.state()),
        (JobState::Complete, JobState::Complete)
    );
    // Both waited for the one conversion job (issue 26, defect 15: the conversion is a
    // job of its own, shared by the submits that need it).
    let mut converted: Vec<String> = [&ra, &rb]
        .iter()
        .filter_map(|r| conversion_job(r))
        .collect();
    converted.sort();
    converted.dedup();
    assert_eq!(
        converted.len(),
        1,
        "{} / {}",
        submit_message(&ra),
        submit_message(&rb)
    );
    assert_converted_on_the_cpu_partition(&h, &converted[0]).await;
    assert_eq!(ra.container_image(), rb.container_image());
    remove_root(&h).await;
}

/// Point 4: `:latest` is reused unless the spec asks for a new conversion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_is_converted_again_only_on_request() {
    let _cluster = cluster::shared().await;
    let h = harness_in(Some(&format!("latest-{}", stamp())));
    with_credentials(&h).await;
    let image = tiny(&h, "latest");
    let command = "cat /etc/slurm-run-image";
    let first = run_to_end(&h, &image_spec("latest-1", &image, command)).await;
    assert!(
        conversion_job(&first).is_some(),
        "{}",
        submit_message(&first)
    );
    assert!(logs(&h, &first).await.contains("slurm-run/tiny:latest"));
    let sqsh = first.container_image().unwrap().to_string();
    let made = identity(&h, &sqsh).await;

    let reused = run_to_end(&h, &image_spec("latest-2", &image, command)).await;
    assert_eq!(conversion_job(&reused), None, "{}", submit_message(&reused));
    assert_eq!(identity(&h, &sqsh).await, made);

    let mut again = image_spec("latest-3", &image, command);
    again.force_reconvert_latest = true;
    let again = run_to_end(&h, &again).await;
    assert_eq!(again.state(), JobState::Complete);
    let job = conversion_job(&again).unwrap_or_else(|| panic!("{}", submit_message(&again)));
    assert_converted_on_the_cpu_partition(&h, &job).await;
    assert_ne!(
        identity(&h, &sqsh).await,
        made,
        "a new file replaced the old"
    );
    assert!(logs(&h, &again).await.contains("slurm-run/tiny:latest"));
    remove_root(&h).await;
}

/// Point 4 and the reference's rule: a direct `.sqsh` path runs as it is; a truncated
/// copy (it keeps the `hsqs` magic) is refused before anything is queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_sqsh_runs_and_a_truncated_one_is_refused() {
    let _cluster = cluster::shared().await;
    let h = harness();
    with_credentials(&h).await;
    let converted = h.backend.stage_image(&tiny(&h, "1")).await.unwrap();
    let dir = format!(
        "{}/fixtures-{}",
        h.testbed.get("SLURM_BASE_RESULTS_DIR"),
        stamp()
    );
    let whole = format!("{dir}/tiny.sqsh");
    let cut = format!("{dir}/tiny-cut.sqsh");
    remote(
        &h,
        Command::new("bash")
            .arg("-c")
            .arg(r#"mkdir -p "$1" && cp "$2" "$3" && head -c "$(( $(stat -c %s "$2") / 2 ))" "$2" > "$4""#)
            .args(["copy", dir.as_str(), converted.as_str(), whole.as_str(), cut.as_str()]),
    )
    .await;
    assert_eq!(
        remote(&h, Command::new("head").args(["-c", "4"]).arg(&cut)).await,
        "hsqs"
    );

    let record = run_to_end(
        &h,
        &image_spec("direct", &whole, "cat /etc/slurm-run-image"),
    )
    .await;
    assert_eq!(record.state(), JobState::Complete);
    assert_eq!(record.container_image(), Some(whole.as_str()));
    assert!(logs(&h, &record).await.contains("slurm-run/tiny:1"));

    let err = h.backend.stage_image(&cut).await.unwrap_err();
    assert!(err.to_string().contains("truncated"), "{err}");
    let spec = image_spec("truncated", &cut, "cat /etc/slurm-run-image");
    let err = h
        .backend
        .submit(&spec, SubmitOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
    assert!(err.to_string().contains("truncated"), "{err}");
    let records = h.backend.records(&Default::default()).await.unwrap();
    let refused = records.iter().find(|r| r.name() == "truncated").unwrap();
    assert_eq!(refused.state(), JobState::Error);
    assert!(
        jobs_named(&h, refused.id().as_str()).await.is_empty(),
        "nothing was queued"
    );
    remote(&h, Command::new("rm").args(["-rf", "--"]).arg(&dir)).await;
}

/// A node's `/tmp` may hold a folder an earlier job of the same SLURM id left there,
/// owned by someone else (another user, or the cluster before its job ids restarted):
/// the conversion's node-local temp folder is its own, so such a folder breaks nothing.
/// (On the old script, which reused `/tmp/enroot-slurm-run-<job id>`, enroot exited 1
/// with no message and the submit was refused as "registry refused".)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_temp_folder_left_under_the_same_job_id_breaks_no_conversion() {
    let _cluster = cluster::exclusive().await;
    let h = harness_in(Some(&format!("stale-tmp-{}", stamp())));
    with_credentials(&h).await;
    let config = remote(&h, Command::new("scontrol").args(["show", "config"])).await;
    let next: u64 = config
        .lines()
        .find_map(|line| {
            let (key, value) = line.split_once('=')?;
            (key.trim() == "NEXT_JOB_ID").then(|| value.trim().parse().ok())?
        })
        .unwrap_or_else(|| panic!("no NEXT_JOB_ID in {config}"));
    // The test bed's nodes share this machine's /tmp: plant foreign folders (owned by
    // the test's user, not the job user) for the next job ids.
    let planted = Planted(
        (next..next + 20)
            .map(|id| std::path::PathBuf::from(format!("/tmp/enroot-slurm-run-{id}")))
            .filter(|path| std::fs::create_dir(path).is_ok())
            .collect(),
    );
    assert!(!planted.0.is_empty(), "no folder could be planted");

    let record = run_to_end(
        &h,
        &image_spec("stale-tmp", &tiny(&h, "1"), "cat /etc/slurm-run-image"),
    )
    .await;
    drop(planted);
    assert_eq!(record.state(), JobState::Complete, "{:?}", record.history());
    assert!(
        conversion_job(&record).is_some(),
        "{}",
        submit_message(&record)
    );
    assert!(logs(&h, &record).await.contains("slurm-run/tiny:1"));
    remove_root(&h).await;
}

/// Folders a test planted, removed when it ends (a failing test too).
struct Planted(Vec<std::path::PathBuf>);

impl Drop for Planted {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::fs::remove_dir(path);
        }
    }
}

/// Issue 26, defect 15: the first submit of an image ran its conversion as a blocking
/// srun, so it waited as long as the CPU partition's queue took. Now the conversion is
/// a job of its own and the GPU job waits for it on the scheduler: with every CPU of the
/// partition held, the submit returns, the record saying it waits for the conversion;
/// once the CPUs are free the conversion runs and then the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_image_submit_returns_while_the_cpu_partition_is_busy() {
    let _cluster = cluster::exclusive().await;
    let h = harness_in(Some(&format!("busy-cpu-{}", stamp())));
    with_credentials(&h).await;
    // Every CPU of the conversion partition held (both nodes, exclusive).
    let blocker = remote(
        &h,
        Command::new("sbatch").args([
            "--parsable",
            "--partition=cpu_long",
            "--nodes=2",
            "--exclusive",
            "--time=10",
            "--job-name=busy-cpu-blocker",
            "--output=/dev/null",
            "--wrap=sleep 600",
        ]),
    )
    .await
    .trim()
    .to_string();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while job_state(&h, &blocker).await != "RUNNING" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the blocker never ran"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let spec = image_spec("busy-cpu", &tiny(&h, "1"), "cat /etc/slurm-run-image");
    let submitted = tokio::time::timeout(
        Duration::from_secs(120),
        h.backend.submit(&spec, SubmitOptions::default()),
    )
    .await;
    let still = job_state(&h, &blocker).await;
    remote(&h, Command::new("scancel").arg(&blocker)).await;
    let record = submitted
        .expect("the submit returned while the CPU partition was busy")
        .unwrap();
    assert_eq!(
        still, "RUNNING",
        "the blocker held the CPUs while the submit ran"
    );
    assert_eq!(record.state(), JobState::Pending, "{record:?}");
    let job = conversion_job(&record).unwrap_or_else(|| panic!("{}", submit_message(&record)));
    assert!(
        record
            .after()
            .iter()
            .any(|d| d.job.as_str().starts_with("slurm-run-convert-")),
        "{:?}",
        record.after()
    );
    // Once the CPUs are free: the conversion on the CPU partition, then the job.
    let done = wait_terminal(&h.backend, record.id(), 240).await;
    assert_eq!(done.state(), JobState::Complete, "{:?}", done.record());
    assert_converted_on_the_cpu_partition(&h, &job).await;
    assert!(logs(&h, done.record()).await.contains("slurm-run/tiny:1"));
    remove_root(&h).await;
}
