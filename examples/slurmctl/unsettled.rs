//! What slurmctl says of a submit that is not settled (its outcome was lost, or its submitter died).

use slurm_run::prelude::{JobRecord, JobState};
use slurm_run::SETTLE_AFTER;

/// For a SUBMITTING record whose submit is not settled: what is known, and how to
/// settle it; `None` otherwise. A record younger than the library's settle threshold
/// ([`SETTLE_AFTER`]) with no reason recorded is a submit still in progress.
pub(crate) fn unsettled_note(record: &JobRecord) -> Option<String> {
    if record.state() != JobState::Submitting {
        return None;
    }
    let age = chrono::Utc::now().signed_duration_since(record.submitted_at());
    let settle_after = chrono::Duration::from_std(SETTLE_AFTER).expect("a few seconds");
    if record.unsettled().is_none() && age < settle_after {
        return None;
    }
    let mut note = match &record.unsettled() {
        Some(why) => format!("submit not settled: {why}"),
        None => format!(
            "submit not settled since {} (its submitter stopped before the scheduler answered)",
            record
                .submitted_at()
                .with_timezone(&chrono::Local)
                .format("%H:%M:%S")
        ),
    };
    if !record.candidates().is_empty() {
        let ids: Vec<String> = record.candidates().iter().map(|r| r.to_string()).collect();
        note.push_str(&format!(
            "; SLURM jobs seen with its name: {}",
            ids.join(", ")
        ));
    }
    note.push_str(&format!("; `slurmctl status {}` settles it", record.id()));
    Some(note)
}
