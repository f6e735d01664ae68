//! The test bed's own scripts (`testbed/`): shellcheck clean, and a failed image build
//! stops there and stamps nothing (the stamp is what later `up`s trust).

use std::path::{Path, PathBuf};
use std::process::Output;

use slurm_run_testsupport::workspace_root;

/// The scripts under `testbed/`: (the executables, the sourced `.sh` files).
fn testbed_scripts() -> (Vec<PathBuf>, Vec<PathBuf>) {
    let dir = workspace_root().join("testbed");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    paths.sort();
    let executables = paths
        .iter()
        .filter(|path| {
            std::fs::read_to_string(path).is_ok_and(|text| text.starts_with("#!/usr/bin/env bash"))
        })
        .cloned()
        .collect();
    let sourced = paths
        .into_iter()
        .filter(|path| path.extension().is_some_and(|e| e == "sh"))
        .collect();
    (executables, sourced)
}

fn file_names(paths: &[PathBuf]) -> Vec<String> {
    paths
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}

/// `bash -n` on every script; shellcheck on every executable with the files it sources
/// (`--external-sources`: the sourced files are checked as part of each script using them).
#[test]
fn every_testbed_script_parses_and_passes_shellcheck() {
    let (executables, sourced) = testbed_scripts();
    let (names, libraries) = (file_names(&executables), file_names(&sourced));
    for expected in ["up", "down", "env", "admin", "beds", "capture-fixtures"] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} in {names:?}"
        );
    }
    for expected in ["lib.sh", "release.sh", "containers.sh"] {
        assert!(
            libraries.iter().any(|n| n == expected),
            "{expected} in {libraries:?}"
        );
    }
    for script in executables.iter().chain(&sourced) {
        let parsed = std::process::Command::new("bash")
            .arg("-n")
            .arg(script)
            .output()
            .unwrap();
        assert!(parsed.status.success(), "{}: {parsed:?}", script.display());
    }
    for script in &executables {
        let checked = std::process::Command::new("shellcheck")
            .args(["--shell=bash", "--severity=style", "--external-sources"])
            .arg(script)
            .current_dir(script.parent().unwrap())
            .output()
            .expect("shellcheck runs (testbed/up installs it)");
        assert!(
            checked.status.success(),
            "{}: {}",
            script.display(),
            String::from_utf8_lossy(&checked.stdout)
        );
    }
}

/// Stand-ins for the image tools on PATH: each logs its call to `calls`; `failing` exits 1.
fn stand_ins(bin: &Path, failing: &str) {
    std::fs::create_dir_all(bin).unwrap();
    for tool in ["umoci", "skopeo", "mmdebstrap", "htpasswd"] {
        let status = if tool == failing { 1 } else { 0 };
        let script = format!(
            "#!/bin/bash\nprintf '%s\\n' \"{tool} $*\" >> \"{calls}\"\n\
             [ \"$1\" = unpack ] && mkdir -p \"$4/rootfs\"\nexit {status}\n",
            calls = bin.join("calls").display()
        );
        let path = bin.join(tool);
        std::fs::write(&path, script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// Run one function of `testbed/containers.sh` in a scratch state folder with the
/// stand-ins first on PATH.
fn run_build_step(state: &Path, bin: &Path, function: &str) -> Output {
    let testbed = workspace_root().join("testbed");
    std::fs::create_dir_all(state.join("log")).unwrap();
    std::fs::create_dir_all(state.join("registry")).unwrap();
    std::fs::write(state.join("registry/password"), "not-a-real-password").unwrap();
    std::process::Command::new("bash")
        .arg("-c")
        .arg(r#"set -euo pipefail; here=$1; . "$here/lib.sh"; . "$here/containers.sh"; "$2""#)
        .arg("build-step")
        .arg(&testbed)
        .arg(function)
        .env("SLURM_RUN_TESTBED_DIR", state)
        .env("SLURM_RUN_TESTBED_PORT_OFFSET", "0")
        .env("SLURM_RUN_TESTBED_SLURM", "22.05")
        .env(
            "PATH",
            format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
        )
        .output()
        .unwrap()
}

/// Bash ignores `set -e` in a subshell whose status `||` tests: a step that failed went
/// on to push, and the image was stamped healthy.
#[test]
fn a_failed_step_of_an_image_build_stops_it_and_stamps_nothing() {
    for (function, failing, stamp) in [
        ("images_push", "umoci", "images.stamp"),
        ("torch_image_push", "mmdebstrap", "torch.stamp"),
    ] {
        let scratch = tempfile::tempdir().unwrap();
        let (state, bin) = (scratch.path().join("state"), scratch.path().join("bin"));
        stand_ins(&bin, failing);
        let out = run_build_step(&state, &bin, function);
        let calls = std::fs::read_to_string(bin.join("calls")).unwrap_or_default();
        assert!(
            !out.status.success(),
            "{function} with a failing {failing} succeeded: {out:?}\ncalls:\n{calls}"
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("see "),
            "{function} names its log: {out:?}"
        );
        assert!(
            !calls.lines().any(|l| l.starts_with("skopeo")),
            "{function} pushed after {failing} failed:\n{calls}"
        );
        assert!(
            !state.join("registry").join(stamp).exists(),
            "{function} stamped {stamp} after {failing} failed:\n{calls}"
        );
    }
}
