//! The parsers on what each release's test bed really printed (`tests/fixtures/slurm-
//! <release>/`, captured by `testbed/capture-fixtures`): every form reads, and where the
//! releases differ, each form says the same thing to the library.

use super::*;
use crate::slurm::states::SlurmBaseState;

/// The fixture `name` of each release: (release, text).
macro_rules! of_each_release {
    ($name:literal) => {
        [
            (
                "22.05",
                include_str!(concat!("../../../../tests/fixtures/slurm-22.05/", $name)),
            ),
            (
                "24.11",
                include_str!(concat!("../../../../tests/fixtures/slurm-24.11/", $name)),
            ),
            (
                "26.05",
                include_str!(concat!("../../../../tests/fixtures/slurm-26.05/", $name)),
            ),
        ]
    };
}

#[test]
fn scontrol_show_job_of_each_release_reads_the_fields_the_library_uses() {
    for (release, text) in of_each_release!("scontrol-show-job-completed") {
        let job = &parse_scontrol_show_job(text).unwrap()[0];
        assert_eq!(
            job.state().unwrap().base,
            SlurmBaseState::Completed,
            "{release}"
        );
        assert_eq!(job.exit_code(), Some(0), "{release}");
        assert!(job.nodelist().is_some(), "{release}");
        // 23.02 replaced TRES= with ReqTRES= and AllocTRES=.
        match release {
            "22.05" => assert!(job.get("TRES").is_some() && job.get("ReqTRES").is_none()),
            _ => assert!(job.get("TRES").is_none() && job.get("AllocTRES").is_some()),
        }
    }
    for (release, text) in of_each_release!("scontrol-show-job-pending") {
        let job = &parse_scontrol_show_job(text).unwrap()[0];
        assert_eq!(
            job.state().unwrap().base,
            SlurmBaseState::Pending,
            "{release}"
        );
        // Its reason depends on when it was read (24.11's was captured before the
        // scheduler looked at it: None), not on the release.
        assert_eq!(job.nodelist(), None, "{release}");
    }
    for (release, text) in of_each_release!("scontrol-show-job-node-fail") {
        let job = &parse_scontrol_show_job(text).unwrap()[0];
        assert_eq!(
            job.state().unwrap().base,
            SlurmBaseState::NodeFail,
            "{release}"
        );
        assert_eq!(job.nodelist(), Some("n2"), "{release}");
        // FailedNode= from 24.11 (scontrol; sacct has it from 23.02). NODE_FAIL's exit
        // code moved to the signal half in scontrol (ExitCode=0:1); the script's code
        // the library reads stays 0.
        assert_eq!(job.exit_code(), Some(0), "{release}");
        match release {
            "22.05" => assert_eq!(job.get("FailedNode"), None),
            _ => assert_eq!(job.get("FailedNode"), Some("n2"), "{release}"),
        }
    }
    // 26.05 prints SubmitLine= (spaces and `--opt=value` words inside) and an empty
    // StdErr= when unset: the value runs whole up to the next key.
    let [_, _, (_, text)] = of_each_release!("scontrol-show-job-node-fail");
    let job = &parse_scontrol_show_job(text).unwrap()[0];
    let line = job.get("SubmitLine").unwrap();
    assert!(line.starts_with("sbatch --parsable --chdir="), "{line}");
    assert!(line.ends_with("--wrap sleep 300"), "{line}");
    assert_eq!(job.get("StdErr"), Some(""));
    assert!(job.get("WorkDir").is_some_and(|d| d.contains("fixtures-")));
}

#[test]
fn sacct_rows_of_each_release_read_and_a_cancelled_range_has_no_start_from_24_11() {
    for (release, text) in of_each_release!("sacct-completed-and-failed") {
        let rows = parse_sacct(text).unwrap();
        let states: Vec<_> = rows
            .iter()
            .filter(|r| r.id.is_job_itself())
            .map(|r| r.state.base.clone())
            .collect();
        assert_eq!(
            states,
            [SlurmBaseState::Completed, SlurmBaseState::Failed],
            "{release}"
        );
        let failed = rows.iter().find(|r| r.state.base == SlurmBaseState::Failed);
        assert_eq!(failed.and_then(|r| r.exit_code), Some(3), "{release}");
    }
    for (release, text) in of_each_release!("sacct-cancelled") {
        let rows = parse_sacct(text).unwrap();
        let range = rows
            .iter()
            .find(|r| r.id.to_string().contains('['))
            .unwrap();
        assert_eq!(range.state.base, SlurmBaseState::Cancelled, "{release}");
        assert!(range
            .state
            .detail
            .as_deref()
            .unwrap_or("")
            .starts_with("by "));
        // 22.05 gives the range the cancel's time as its start; 24.11 on, None.
        assert_eq!(range.start.is_some(), release == "22.05", "{release}");
    }
    for (release, text) in of_each_release!("sacct-cancelled-without-jobs") {
        assert!(parse_sacct(text).is_ok(), "{release}");
    }
}

#[test]
fn squeue_rows_and_array_ranges_of_each_release_read() {
    for (release, text) in of_each_release!("squeue-running-and-pending") {
        let rows = parse_squeue(text).unwrap();
        assert_eq!(rows.len(), 2, "{release}");
        assert!(rows.iter().any(|r| r.nodelist.as_deref() == Some("n[1-2]")));
    }
    for (release, text) in of_each_release!("squeue-array-tasks-cancelled") {
        let rows = parse_squeue(text).unwrap();
        // `7_[1,4%2]`: the tasks left after two were cancelled.
        assert!(rows[0].id.to_string().ends_with("_[1,4%2]"), "{release}");
        assert_eq!(rows[0].state.base, SlurmBaseState::Pending, "{release}");
    }
    for (release, text) in of_each_release!("squeue-held") {
        let rows = parse_squeue(text).unwrap();
        assert_eq!(rows[0].reason.as_deref(), Some("JobHeldUser"), "{release}");
    }
}

#[test]
fn sbatch_answers_of_each_release_read() {
    for (release, text) in of_each_release!("sbatch-parsable") {
        assert!(
            matches!(
                parse_sbatch_parsable(text, "").unwrap(),
                SbatchOutcome::Submitted { .. }
            ),
            "{release}"
        );
    }
    // --exclusive with --oversubscribe: 22.05 takes the job, 23.02 on is fatal (a
    // definite refusal naming the cause, never transient).
    let [(_, taken), ..] = of_each_release!("sbatch-parsable");
    assert!(parse_sbatch_parsable(taken, "").is_ok());
    for stderr in [
        include_str!(
            "../../../../tests/fixtures/slurm-24.11/sbatch-exclusive-oversubscribe.stderr"
        ),
        include_str!(
            "../../../../tests/fixtures/slurm-26.05/sbatch-exclusive-oversubscribe.stderr"
        ),
    ] {
        let error = parse_sbatch_parsable("", stderr).unwrap_err();
        assert!(!error.is_transient(), "{error}");
        assert!(error.to_string().contains("mutually exclusive"), "{error}");
    }
}

#[test]
fn every_releases_outage_errors_are_transient() {
    // sacct with slurmdbd down: `slurm_persist_conn_open_without_init` (22.05),
    // `_open_persist_conn` (24.11 on); both say `Connection refused`.
    for (release, stderr) in of_each_release!("sacct-slurmdbd-down.stderr") {
        assert!(is_transient_scheduler_error(stderr), "{release}: {stderr}");
    }
    for (release, stderr) in of_each_release!("squeue-slurmctld-down.stderr") {
        assert!(is_transient_scheduler_error(stderr), "{release}: {stderr}");
    }
    for (release, stderr) in of_each_release!("sbatch-slurmctld-down.stderr") {
        let error = parse_sbatch_parsable("", stderr).unwrap_err();
        assert!(error.is_transient(), "{release}: {error}");
    }
}

#[test]
fn the_client_release_reads_from_each_releases_scontrol_version() {
    for (release, text) in of_each_release!("scontrol-version") {
        let config = parse_cluster_config(&format!("{}{text}", config::CLIENT_PREFIX));
        let read = config.release.client.map(|r| r.series());
        assert_eq!(read.as_deref(), Some(release));
    }
}
