//! What implementers and embedders test with (cargo feature `testing`): the Transport,
//! Backend and RecordStore conformance suites any implementation can run ([`backend_suite`],
//! with the multi-role cases in [`role_cases`],
//! [`backend_conformance!`](crate::backend_conformance), [`record_suite`],
//! [`record_store_conformance!`](crate::record_store_conformance)), transports that count
//! commands or inject faults, records in the states a crash leaves behind
//! ([`RecordFixture`]), and the scripts' full texts for linting.

pub mod backend_suite;
mod counting;
mod faults;
pub mod pace;
pub mod record_suite;
mod records;
pub mod role_cases;
mod runtime_guard;
pub mod transport_suite;

pub use counting::CountingTransport;
pub use faults::{Fault, FaultTransport};
pub use records::RecordFixture;
pub use runtime_guard::RuntimeGuardStore;

use crate::slurm::SlurmJobId;
use crate::transport::Command;
use crate::Result;

/// The bare SLURM query a poll of `ids` starts with (squeue in the poll's format), as a
/// person would run it over an open connection: the baseline benches measure against.
pub fn bare_squeue(ids: &[SlurmJobId], cluster: Option<&str>) -> Result<Command> {
    crate::slurm::squeue_jobs(ids, cluster)
}

/// The bare sacct query of `ids` in the poll's format (every row, every duplicate).
pub fn bare_sacct(ids: &[SlurmJobId], cluster: Option<&str>) -> Result<Command> {
    crate::slurm::sacct_jobs(ids, cluster)
}

/// The one remote command of a poll of `ids` on the default cluster, as the SLURM
/// backend sends it (squeue for every id, sacct for those squeue cannot settle; the ids
/// on stdin, in chunks of 2000 per tool run). Its answer splits into two framed parts
/// ([`round_trip::split`](crate::transport::round_trip::split)).
pub fn poll_command(ids: &[SlurmJobId]) -> Result<Command> {
    let groups = [(None, crate::slurm::PollGroup::of_jobs(ids))].into();
    crate::slurm::poll_command(&groups)
}

/// Panics with bash's complaint unless `text` (script `name`'s full text) parses:
/// `bash -n`, the syntax check every remote script's unit test runs.
pub fn assert_bash_n(name: &str, text: &str) {
    let output = std::process::Command::new("bash")
        .arg("-n")
        .arg("-c")
        .arg(text)
        .output()
        .expect("run bash -n");
    assert!(
        output.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Polls `done` until it holds, for `within` at most, then panics naming `what`: how a
/// test waits, without a runtime, for a process it started (a file the process writes,
/// its exit). Polls every 5 ms.
pub fn wait_until_blocking(
    what: &str,
    within: std::time::Duration,
    mut done: impl FnMut() -> bool,
) {
    let deadline = std::time::Instant::now() + within;
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what} never happened"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Every remote script of slurm-run, by name, as bash runs it (prelude included), and
/// the NCCL probe's ladder and per-node command: for linting them (`bash -n`,
/// shellcheck) outside the crate.
pub fn scripts() -> Vec<(&'static str, String)> {
    [
        crate::transport::WRITE_FILE,
        crate::transport::round_trip::ROUND_TRIP,
    ]
    .into_iter()
    .chain(crate::slurm::scripts::all())
    .map(|script| (script.name, script.full_text()))
    .chain([
        (
            "nccl-probe-ladder",
            format!("#!/bin/bash\n{}", crate::nccl::PROBE_LADDER),
        ),
        (
            "nccl-probe-rung",
            format!(
                "#!/bin/bash\n{}\n",
                crate::nccl::default_probe_command(2, 8)
            ),
        ),
    ])
    .collect()
}

/// Expands to one `#[tokio::test]` per case of the Backend conformance suite, each
/// with a fixture from `$fixture` (an expression, evaluated once per case):
/// `slurm_core::backend_conformance!(my_backend, MyFixture::new());`.
#[macro_export]
macro_rules! backend_conformance {
    ($name:ident, $fixture:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            // A case of `testing::$module` (`backend_suite`, or the multi-role
            // `role_cases`).
            macro_rules! case {
                ($module:ident, $case:ident) => {
                    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    async fn $case() {
                        let fixture = $fixture;
                        $crate::testing::backend_suite::run_case(
                            &fixture,
                            $crate::testing::$module::$case(&fixture),
                        )
                        .await;
                    }
                };
            }

            case!(backend_suite, submit_runs_a_job_to_complete);
            case!(backend_suite, a_failing_program_ends_error);
            case!(backend_suite, status_many_answers_in_order);
            case!(backend_suite, logs_tail_each_stream);
            case!(backend_suite, follow_streams_until_the_job_ends);
            case!(backend_suite, cancel_a_running_job);
            case!(backend_suite, cancel_a_pending_job);
            case!(backend_suite, cancel_many_cancels_each_in_order);
            case!(backend_suite, watch_reports_each_change_once);
            case!(
                backend_suite,
                an_infra_failure_is_retried_as_a_linked_record
            );
            case!(backend_suite, two_watchers_retry_one_failure_once);
            case!(backend_suite, bad_input_is_refused_and_nothing_recorded);
            case!(backend_suite, dependants_start_after_their_parents);
            case!(backend_suite, a_failed_parent_ends_its_dependant);
            case!(backend_suite, a_dependant_follows_a_retried_parent);
            case!(backend_suite, a_sweep_runs_each_task_with_its_values);
            case!(backend_suite, tasks_of_an_array_are_cancelled);
            case!(backend_suite, a_failed_task_is_retried_alone);
            case!(
                backend_suite,
                a_run_of_three_segments_completes_with_its_work_continuous
            );
            case!(backend_suite, a_run_over_its_budget_ends_error_naming_it);
            case!(backend_suite, a_cancel_after_a_continuation_stops_the_run);
            case!(backend_suite, a_failure_inside_a_segment_is_not_continued);
            case!(role_cases, roles_find_each_other_by_the_exported_hosts);
            case!(role_cases, one_role_failing_ends_the_job_naming_it);
            case!(role_cases, cancel_stops_every_role);
            case!(role_cases, each_role_has_its_own_logs);
        }
    };
}
