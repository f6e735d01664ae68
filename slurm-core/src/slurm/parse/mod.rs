//! Total parsers of what the SLURM tools print: `sbatch --parsable`, squeue and sacct in
//! fixed formats, `scontrol show job` and `show config`, job ids, and the scheduler's
//! error messages. Where releases print differently, each form is read (unit cases from
//! the real output of each release's test bed, `tests/fixtures/slurm-<release>/`).
//!
//! Every parser is total: any input gives a value or a typed [`Error`](crate::Error),
//! never a panic (see the property tests in this module).

pub(crate) mod config;
pub(crate) mod errors;
pub(crate) mod id;
pub(crate) mod nodelist;
pub(crate) mod sacct;
pub(crate) mod sacct_usage;
pub(crate) mod sbatch;
pub(crate) mod scontrol;
pub(crate) mod squeue;

pub(crate) use config::parse_cluster_config;
pub(crate) use errors::{
    checked, is_accounting_disabled, is_invalid_job_id, is_transient_scheduler_error,
};
pub(crate) use id::SlurmIdField;
pub use id::SlurmJobId;
pub(crate) use nodelist::expand_nodelist;
#[cfg(test)]
pub(crate) use sacct::parse_sacct;
#[cfg(any(test, feature = "testing"))]
pub(crate) use sacct::SACCT_FORMAT;
pub(crate) use sacct::{
    parse_sacct_rows_eligible, resolve_newest_of, split_failed_nodes, SacctRow, SACCT_POLL_FORMAT,
    SACCT_POLL_FORMAT_WITH_FAILED_NODE,
};
pub(crate) use sbatch::{parse_sbatch_parsable, SbatchOutcome};
pub(crate) use scontrol::parse_scontrol_show_job;
pub(crate) use squeue::{optional, parse_squeue, SqueueRow, SQUEUE_FORMAT};

#[cfg(test)]
mod release_tests;

#[cfg(test)]
mod proptests {
    use super::errors::recognise_scheduler_error;
    use super::*;
    use crate::slurm::states::SlurmState;
    use proptest::prelude::*;

    /// Text made of the characters the parsers care about, so inputs reach deep branches.
    fn slurmish() -> impl Strategy<Value = String> {
        proptest::string::string_regex("[0-9_.+\\[\\]|;:=a-zA-Z \\n%-]{0,80}").unwrap()
    }

    proptest! {
        #[test]
        fn parsers_never_panic_on_any_text(s in any::<String>()) {
            let _ = parse_sbatch_parsable(&s, &s);
            let _ = parse_squeue(&s);
            let _ = parse_sacct(&s);
            let _ = parse_scontrol_show_job(&s);
            let _ = SlurmState::parse(&s);
            let _ = SlurmIdField::parse(&s);
            let _ = SlurmJobId::parse(&s);
            let _ = recognise_scheduler_error(&s);
            let _ = parse_cluster_config(&s);
            let _ = crate::slurm::release::SlurmRelease::parse(&s);
        }

        #[test]
        fn parsers_never_panic_on_slurmish_text(s in slurmish()) {
            let _ = parse_sbatch_parsable(&s, "");
            let _ = parse_squeue(&s);
            let _ = parse_sacct(&s);
            let _ = parse_scontrol_show_job(&s);
            let _ = SlurmState::parse(&s);
            let _ = SlurmIdField::parse(&s);
        }

        #[test]
        fn parsers_never_panic_on_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let s = String::from_utf8_lossy(&b);
            let _ = parse_sbatch_parsable(&s, &s);
            let _ = parse_squeue(&s);
            let _ = parse_sacct(&s);
            let _ = parse_scontrol_show_job(&s);
        }

        #[test]
        fn id_fields_round_trip(job in 1u64..10_000_000, task in proptest::option::of(0u32..5000), step in proptest::option::of("batch|extern|[0-9]{1,3}")) {
            let mut text = job.to_string();
            if let Some(t) = task { text.push_str(&format!("_{t}")); }
            if let Some(s) = &step { text.push('.'); text.push_str(s); }
            let f = SlurmIdField::parse(&text).unwrap();
            prop_assert_eq!(f.to_string(), text);
            prop_assert_eq!(f.is_job_itself(), task.is_none() && step.is_none());
        }
    }
}
