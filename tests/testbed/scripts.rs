//! Every remote script of slurm-run, as bash runs it (prelude and library included),
//! passes shellcheck (installed by `testbed/up`): slurm-core's and slurm-ssh's (the
//! long-lived shell's set-up).

#[test]
fn every_script_passes_shellcheck() {
    let dir = tempfile::tempdir().unwrap();
    let mut scripts = slurm_core::testing::scripts();
    assert!(scripts.len() >= 12, "{} scripts", scripts.len());
    scripts.extend(slurm_ssh::testing::scripts());
    assert!(scripts.iter().any(|(name, _)| *name == "shell-start"));
    for (name, text) in scripts {
        let path = dir.path().join(format!("{name}.sh"));
        std::fs::write(&path, &text).unwrap();
        let output = std::process::Command::new("shellcheck")
            .args(["--shell=bash", "--severity=style"])
            .arg(&path)
            .output()
            .expect("shellcheck runs (testbed/up installs it)");
        assert!(
            output.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&output.stdout)
        );
    }
}
