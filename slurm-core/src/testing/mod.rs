//! What implementers and embedders test with (cargo feature `testing`): the Transport and
//! Backend conformance suites any implementation can run ([`backend_suite`],
//! [`backend_conformance!`](crate::backend_conformance)), transports that count
//! commands or inject faults, records in the states a crash leaves behind
//! ([`RecordFixture`]), and the scripts' full texts for linting.

pub mod backend_suite;
mod counting;
mod faults;
mod records;
pub mod transport_suite;

pub use counting::CountingTransport;
pub use faults::{Fault, FaultTransport};
pub use records::RecordFixture;

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
