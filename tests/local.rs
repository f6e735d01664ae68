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
        // It ends ERROR ERR_INFRA from whichever state the watch last saw: a loaded machine
        // can start and fail it between two polls, so it may never be seen RUNNING.
        let failed = ["RUNNING", "PENDING"].iter().any(|seen| {
            out.stdout
                .contains(&format!("{}  {seen} -> ERROR ERR_INFRA", flaky.3))
        });
        assert!(failed, "{}", out.stdout);
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

/// `slurmctl records` and `records migrate` on a state folder (no cluster needed): an
/// existing folder of JSON records keeps working, migrate moves it into the state
/// folder's SQLite database losing nothing, and the listing is the same from either.
mod records {
    use std::time::Duration;

    use slurm_core::testing::RecordFixture;
    use slurm_core::{
        FileRecordStore, JobId, JobRecord, JobSpec, JobState, Mark, RecordStore, RemotePath,
        TransitionSource,
    };
    use slurm_run_testsupport::examples::{example, run, Run};

    fn slurmctl(args: &[&str], state: &std::path::Path, extra: &[(&str, String)]) -> Run {
        let mut env = vec![(
            "SLURM_RUN_STATE_DIR".to_string(),
            state.display().to_string(),
        )];
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
        run(&example("slurmctl"), args, &env, Duration::from_secs(60))
    }

    fn record(label: &str) -> JobRecord {
        let id = JobId::mint(label);
        let root = RemotePath::parse("/shared/results").unwrap();
        JobRecord::new(
            id.clone(),
            &JobSpec::new(label, "true"),
            root.join(id.as_str()).unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn a_folder_of_json_records_keeps_working_and_migrates_into_sqlite_losing_nothing() {
        let state = tempfile::tempdir().unwrap();
        let folder = FileRecordStore::new(state.path()).unwrap();
        let old = RecordFixture::new(record("old")).submitted_ago(Duration::from_secs(600));
        let old = old.into_record();
        folder.open(&old).unwrap();
        let pending = record("pending");
        folder.open(&pending).unwrap();
        folder
            .mark(
                pending.id(),
                Mark::new(JobState::Pending, TransitionSource::Agent),
            )
            .unwrap();
        std::fs::write(state.path().join("torn-abcdef.json"), b"{\"id\":").unwrap();

        // The folder is read where it is; the torn file is named, the others listed.
        let before = slurmctl(&["--json", "records"], state.path(), &[]);
        before.expect_code(2);
        assert_eq!(before.json_lines().len(), 2, "{}", before.stdout);
        assert!(
            before.stderr.contains("torn-abcdef.json"),
            "{}",
            before.stderr
        );

        let migrated = slurmctl(&["--json", "records", "migrate"], state.path(), &[]);
        migrated.expect_code(2);
        let report = &migrated.json_lines()[0];
        assert_eq!(report["moved"].as_array().unwrap().len(), 2, "{report}");
        assert_eq!(report["left"].as_array().unwrap().len(), 1, "{report}");
        assert!(
            report["to"].as_str().unwrap().starts_with("sqlite://"),
            "{report}"
        );
        assert!(state.path().join("records.sqlite").exists());

        // Now the database: the same records, oldest first, as the folder listed them.
        let after = slurmctl(&["--json", "records"], state.path(), &[]);
        after.expect_code(0);
        assert_eq!(after.stdout, before.stdout, "nothing lost or changed");
        let pending_only = slurmctl(
            &["--json", "records", "--state", "PENDING"],
            state.path(),
            &[],
        );
        let lines = pending_only.expect_code(0).json_lines();
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0]["id"], pending.id().as_str());
        // The folder, named, holds only what could not move.
        let dir = state.path().display().to_string();
        let left = slurmctl(&["--json", "--records", &dir, "records"], state.path(), &[]);
        left.expect_code(2);
        assert!(left.stdout.is_empty(), "{}", left.stdout);
        // SLURM_RUN_RECORDS names the store too; a bad one says the fix.
        let db = format!("sqlite://{}/records.sqlite", state.path().display());
        let named = slurmctl(
            &["--json", "records"],
            state.path(),
            &[("SLURM_RUN_RECORDS", db)],
        );
        assert_eq!(named.expect_code(0).stdout, before.stdout);
        let bad = slurmctl(
            &["records"],
            state.path(),
            &[("SLURM_RUN_RECORDS", "mysql://x".into())],
        );
        bad.expect_code(2);
        assert!(bad.stderr.contains("SLURM_RUN_RECORDS"), "{}", bad.stderr);
        let to_folder = slurmctl(
            &["records", "migrate", "--records", &dir],
            state.path(),
            &[],
        );
        to_folder.expect_code(2);
        assert!(
            to_folder.stderr.contains("is a folder"),
            "{}",
            to_folder.stderr
        );
    }

    #[test]
    fn a_new_state_folder_keeps_its_records_in_sqlite() {
        let state = tempfile::tempdir().unwrap();
        let fresh = state.path().join("jobs");
        let listed = slurmctl(&["--json", "records"], &fresh, &[]);
        listed.expect_code(0);
        assert!(listed.stdout.is_empty());
        assert!(
            fresh.join("records.sqlite").exists(),
            "the database is made"
        );
        let store = slurm_records::SqliteRecordStore::open(fresh.join("records.sqlite")).unwrap();
        store.open(&record("kept")).unwrap();
        let listed = slurmctl(&["--json", "records"], &fresh, &[]);
        assert_eq!(listed.expect_code(0).json_lines().len(), 1);
    }
}
