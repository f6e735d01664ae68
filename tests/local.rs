//! The root package's tests that need no test bed (plain `cargo test`). The Transport
//! conformance suite runs in slurm-core (`LocalTransport`) and slurm-ssh
//! (`ProcessShellTransport::local_bash()`); everything that needs the test bed is in
//! `tests/testbed/`.

/// The orchestrator example on its in-process `LocalBackend` (no cluster needed): concurrent submits,
/// one watch stream, an infra failure retried, a straggler cancelled, logs read back.
mod orchestrator {
    use std::time::Duration;

    use slurm_run_testsupport::examples::{example, run, Run};

    fn orchestrator(args: &[&str], env: &[(String, String)]) -> Run {
        run(
            &example("orchestrator"),
            args,
            env,
            Duration::from_secs(120),
        )
    }

    /// The FINAL lines: (id, state, attempt, retry_of).
    fn finals(run: &Run) -> Vec<(String, String, String, String)> {
        run.stdout
            .lines()
            .filter_map(|l| l.strip_prefix("FINAL "))
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                assert_eq!(f.len(), 4, "a FINAL line has four fields: {l}");
                (
                    f[0].to_string(),
                    f[1].to_string(),
                    f[2].trim_start_matches("attempt=").to_string(),
                    f[3].trim_start_matches("retry_of=").to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn local_backend_runs_retries_and_cancels_through_the_same_orchestrator() {
        let out = orchestrator(
            &["--backend", "local", "--jobs", "3", "--interval", "0.2"],
            &[],
        );
        out.expect_code(0);
        assert!(out.stdout.contains("backend: local"), "{}", out.stdout);
        let finals = finals(&out);
        assert_eq!(
            finals.len(),
            5,
            "3 shards, flaky, straggler:\n{}",
            out.stdout
        );

        for i in 1..=3 {
            let shard = finals
                .iter()
                .find(|f| f.0.starts_with(&format!("shard-{i}-")))
                .unwrap_or_else(|| panic!("no shard-{i} in\n{}", out.stdout));
            assert_eq!((shard.1.as_str(), shard.2.as_str()), ("COMPLETE", "1"));
            assert!(
                out.stdout.contains(&format!("log: shard {i} step 3")),
                "the log tail of shard {i} is missing:\n{}",
                out.stdout
            );
        }

        // The flaky job failed with an NCCL error, was classed infra, retried once, and completed.
        let flaky = finals.iter().find(|f| f.0.starts_with("flaky-")).unwrap();
        assert_eq!((flaky.1.as_str(), flaky.2.as_str()), ("COMPLETE", "2"));
        assert!(flaky.3.starts_with("flaky-") && flaky.3 != flaky.0);
        assert!(
            out.stdout
                .contains(&format!("{}  RUNNING -> ERROR ERR_INFRA", flaky.3)),
            "{}",
            out.stdout
        );
        assert!(
            out.stdout
                .contains(&format!("{}  retried as {} (attempt 2)", flaky.3, flaky.0)),
            "{}",
            out.stdout
        );
        assert!(out.stdout.contains("log: flaky: succeeded on its retry"));

        // The straggler was cancelled once the others were done, and the watch saw it end.
        let straggler = finals
            .iter()
            .find(|f| f.0.starts_with("straggler-"))
            .unwrap();
        assert_eq!(straggler.1, "CANCELED");
        assert!(out.stdout.contains(&format!(
            "{}  cancelled: no longer needed (CANCELED)",
            straggler.0
        )));
        assert!(out
            .stdout
            .contains(&format!("{}  RUNNING -> CANCELED", straggler.0)));
    }

    #[test]
    fn auto_takes_the_local_backend_when_no_cluster_is_configured() {
        // `run` clears the environment: no SLURM_HOSTNAME.
        let out = orchestrator(&["--jobs", "1", "--interval", "0.2"], &[]);
        out.expect_code(0);
        assert!(out.stdout.contains("backend: local"), "{}", out.stdout);
        assert_eq!(finals(&out).len(), 3, "{}", out.stdout);
    }

    #[test]
    fn the_slurm_backend_without_configuration_is_exit_2_naming_the_variable() {
        let out = orchestrator(&["--backend", "slurm"], &[]);
        out.expect_code(2);
        assert!(out.stderr.contains("SLURM_PARTITION"), "{}", out.stderr);
    }

    #[test]
    fn a_bad_interval_is_refused() {
        let out = orchestrator(&["--backend", "local", "--interval", "0"], &[]);
        out.expect_code(2);
        assert!(out.stderr.contains("interval"), "{}", out.stderr);
    }
}
