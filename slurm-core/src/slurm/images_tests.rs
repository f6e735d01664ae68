//! What a failed conversion says.

use super::images::{convert_image, Conversion};
use super::testkit::{output, unprepared_backend as backend, MockRemote};
use crate::image::ImageRef;
use crate::{CheckKind, Error};

/// enroot exits 1 with no error line when the registry refuses it: the message names
/// the registry and the check, with enroot's own lines (it said "never falls back" only).
#[tokio::test]
async fn a_silent_import_failure_names_the_registry_and_the_check() {
    let mut remote = MockRemote::new();
    remote.expect_run().returning(|_| {
        Ok(output(
            super::scripts::ConvertExit::ConvertFailed.status(),
            "",
            "[INFO] Querying registry for permission grant\n[INFO] Authenticating with user: me\n[INFO] Using credentials from file: /h/.credentials\nsrun: error: n1: task 0: Exited with exit code 1\n",
        ))
    });
    let conversion = Conversion {
        image: ImageRef::parse("registry.example.com:5000/team/img:1").unwrap(),
        path: "/shared/results/images/x.sqsh".into(),
        force: false,
    };
    let backend = backend(remote);
    let err = convert_image(&backend.context(), &conversion)
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
        text.contains("registry registry.example.com:5000 refused or was unreachable; check `credentials check registry.example.com:5000`"),
        "{text}"
    );
    assert!(
        text.contains("[INFO] Authenticating with user: me"),
        "{text}"
    );
    assert!(
        text.contains("slurmctl credentials install registry.example.com:5000"),
        "{text}"
    );
}

/// Run the conversion script with a fake `srun` in `bin` that prints `log` (as enroot
/// inside the conversion job would) and exits `status`, under a login umask.
async fn convert_locally(
    bin: &std::path::Path,
    out: &std::path::Path,
    log: &str,
    status: i32,
) -> crate::transport::Output {
    use crate::transport::Transport;
    use std::os::unix::fs::PermissionsExt;
    let srun = bin.join("srun");
    std::fs::write(
        &srun,
        format!("#!/bin/bash\necho slurm-run-convert-job 42\ncat <<'LOG' >&2\n{log}\nLOG\nexit {status}\n"),
    )
    .unwrap();
    std::fs::set_permissions(&srun, std::fs::Permissions::from_mode(0o755)).unwrap();
    let command = super::scripts::CONVERT_IMAGE.command([
        "cpu".to_string(),
        "5".to_string(),
        out.display().to_string(),
        "docker://registry.example.com:5000#team/img:1".to_string(),
        "reuse".to_string(),
    ]);
    let local = crate::transport::Command::new("env")
        .arg(format!(
            "PATH={}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        ))
        .arg(command.program())
        .args(command.get_args().iter().cloned());
    crate::transport::LocalTransport::new()
        .run(&local)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_failure_after_the_registry_let_enroot_in_is_not_called_refused() {
    // Defect 16: any failure without an `[ERROR]` line read as refused credentials ("a
    // wrong password or user") although enroot had logged `Authentication succeeded`,
    // and the line naming the real cause was dropped.
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("images/img.sqsh");
    let log = "[INFO] Querying registry for permission grant\n[INFO] Authenticating with user: me\n[INFO] Using credentials from file: /h/.credentials\n[INFO] Authentication succeeded\n[INFO] Fetching image manifest\nenroot-mksquashovlfs: write failed: No space left on device";
    let answer = convert_locally(tmp.path(), &out, log, 1).await;
    // The script no longer decides "refused" from silence: it leaves enroot's lines
    // to the caller (it exited RegistryRefused here before).
    assert_eq!(
        super::scripts::ConvertExit::from_status(answer.status),
        Some(super::scripts::ConvertExit::ConvertFailed),
        "{}",
        answer.stderr_text()
    );
    let failure = super::images::conversion_failure(
        answer.status,
        &answer.stderr_text(),
        "registry.example.com:5000",
        "registry.example.com:5000/team/img:1",
        "cpu",
    );
    assert!(!failure.message.contains("refused"), "{}", failure.message);
    assert!(
        failure.message.contains("No space left on device"),
        "{}",
        failure.message
    );
    assert!(
        failure.message.contains("squashfs") || failure.message.contains("disk"),
        "{}",
        failure.message
    );
}

#[tokio::test]
async fn a_conversion_killed_before_it_finished_leaves_nothing_for_the_next() {
    // Defect 11: a conversion killed by its timeout (which counts the CPU partition's
    // queue wait) left `images/*.tmp-PID`, possibly gigabytes; the next conversion of the
    // image (holding the image's lock, so none other runs) removes what it left.
    let tmp = tempfile::tempdir().unwrap();
    let images = tmp.path().join("images");
    std::fs::create_dir_all(&images).unwrap();
    let out = images.join("img.sqsh");
    std::fs::write(images.join("img.sqsh.tmp-999"), vec![0u8; 4096]).unwrap();
    std::fs::write(images.join("img.sqsh.log-999"), b"old log").unwrap();
    convert_locally(tmp.path(), &out, "[ERROR] something", 1).await;
    let left: Vec<String> = std::fs::read_dir(&images)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-") || n.contains(".log-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn what_enroot_said_decides_the_failure() {
    // Defect 16: refused, unreachable, the image missing, squashfs or disk failures are
    // told apart, each with the lines that say so.
    let failure = |stderr: &str| {
        super::images::conversion_failure(
            72,
            stderr,
            "r.example:5000",
            "r.example:5000/t/img:1",
            "cpu",
        )
    };
    let refused = failure("[INFO] Authenticating with user: me\n[ERROR] URL https://r.example:5000/v2/t/img/manifests/1 returned error code: 401 Unauthorized");
    assert_eq!(refused.kind, CheckKind::Credentials);
    assert!(refused.message.contains("refused"), "{}", refused.message);
    let missing = failure("[INFO] Authentication succeeded\n[ERROR] URL https://r.example:5000/v2/t/img/manifests/1 returned error code: 404 Not Found");
    assert!(missing.message.contains("not found"), "{}", missing.message);
    assert!(
        missing.message.contains("404 Not Found"),
        "{}",
        missing.message
    );
    let unreachable = failure(
        "curl: (7) Failed to connect to r.example port 5000 after 0 ms: Connection refused",
    );
    assert!(
        unreachable.message.contains("unreachable"),
        "{}",
        unreachable.message
    );
    let disk = failure("[INFO] Authentication succeeded\nFATAL ERROR:Failed to write to output filesystem: No space left on device");
    assert!(
        disk.message.contains("disk") && disk.message.contains("No space left"),
        "{}",
        disk.message
    );
    let silent = failure(
        "[INFO] Authenticating with user: me\n[INFO] Using credentials from file: /h/.credentials",
    );
    assert_eq!(silent.kind, CheckKind::Credentials);
    assert!(silent.message.contains("refused"), "{}", silent.message);
    let anonymous = failure("[INFO] Authenticating with user: <anonymous>");
    assert!(
        anonymous.message.contains("no credentials"),
        "{}",
        anonymous.message
    );
    let after_auth = failure("[INFO] Authentication succeeded\n[INFO] Fetching image manifest");
    assert!(
        !after_auth.message.contains("refused"),
        "{}",
        after_auth.message
    );
}
