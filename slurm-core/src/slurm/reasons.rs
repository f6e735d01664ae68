//! The one table of SLURM's job reasons (squeue's `%r`, sacct's and scontrol's
//! `Reason`): what each says of a waiting job, and what slurm-run does about it.
//!
//! | kind | reasons (Slurm 22.05 to 26.05) | slurm-run |
//! |---|---|---|
//! | queued | `Priority`, `Resources`, `Dependency`, `BeginTime`, `JobArrayTaskLimit`, `ReqNodeNotAvail`, `MaxPoweredUpNodes`, `MpiPortsBusy` (24.05), `NvidiaImexChannels` (25.11), ... | waits |
//! | limit | `Assoc*`, `Association*`, `QOS*` group and per-user limits, `Max*PerAccount`, `Max*RunMinsPer*` (24.05), `AssocGrpJobsLimit`, `QOSGrpJobsLimit` (23.02), ... | waits; the message says a limit holds it |
//! | cannot start | per-job limits (`*PerJob*`, `QOSMin*`), `PartitionTimeLimit`, `InvalidAccount`, `InvalidQOS`, `QOSNotAllowed`, `AccountNotAllowed`, `BadConstraints`, `Constraints`, `ReservationInvalid` (23.11), ... | waits; the message says to change the job or ask the admins |
//! | held | `JobHeldUser`, `JobHeldAdmin`, `JobHoldMaxRequeue`, `job requeued in held state` | waits; the message says how to release it |
//! | launch failed | `launch failed requeued held`, `user env retrieval failed requeued held` (25.05) | waits; the message says Slurm held it after a failed launch |
//! | never | `DependencyNeverSatisfied` | ERROR (a raw `--dependency`), cancelled on the cluster |
//! | ended | `NonZeroExitCode`, `RaisedSignal` (23.02), `TimeLimit`, `NodeDown`, `JobLaunchFailure`, ... | read with the state |
//!
//! A reason this table does not know (a newer release's) is shown as the scheduler
//! printed it. squeue prints a job's state description instead of its reason when it has
//! one (`launch failed requeued held`); those are rows too.

/// What a reason says of a job, in neutral words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReasonKind {
    /// It waits its turn (priority, resources, time, its dependency): it starts by itself.
    Queued,
    /// A limit of its account, QOS or user holds it back while their other jobs run.
    Limit,
    /// It cannot start as submitted (a per-job limit it exceeds, an account, QOS,
    /// partition limit or reservation it cannot use) until the job or the cluster changes.
    CannotStart,
    /// Held: it does not start until someone releases it.
    Held,
    /// Slurm could not launch it on a node (a prolog failed; from 25.05 also the user's
    /// environment could not be read) and requeued it held.
    LaunchFailed,
    /// Its dependency can never be satisfied.
    NeverSatisfied,
    /// How an ended job ended (its exit code, a signal, the time limit, a node down).
    Ended,
    /// Not in the table: shown as printed.
    Unknown,
}

/// How a row matches a reason.
#[derive(Debug, Clone, Copy)]
enum Match {
    /// The whole reason (or its first word, before `,` or a space).
    Is(&'static str),
    /// The first word starts with it.
    StartsWith(&'static str),
    /// The first word holds it.
    Holds(&'static str),
}

use Match::{Holds, Is, StartsWith};
use ReasonKind::{CannotStart, Ended, Held, LaunchFailed, Limit, NeverSatisfied, Queued};

/// The table: the first row that matches decides (exact rows first, then the patterns),
/// and the release that added a reason where it is newer than 22.05.
const REASONS: &[(Match, ReasonKind, Option<&str>)] = &[
    (Is("Priority"), Queued, None),
    (Is("Resources"), Queued, None),
    (Is("Dependency"), Queued, None),
    (Is("BeginTime"), Queued, None),
    (Is("Prolog"), Queued, None),
    (Is("Licenses"), Queued, None),
    (Is("Reservation"), Queued, None),
    (Is("JobArrayTaskLimit"), Queued, None),
    (Is("ReqNodeNotAvail"), Queued, None),
    (Is("PartitionDown"), Queued, None),
    (Is("PartitionInactive"), Queued, None),
    (Is("PartitionNodeLimit"), Queued, None),
    (Is("Cleaning"), Queued, None),
    (Is("SchedDefer"), Queued, None),
    (Is("FrontEndDown"), Queued, None),
    (Is("BurstBufferResources"), Queued, None),
    (Is("BurstBufferStageIn"), Queued, None),
    (Is("PowerNotAvail"), Queued, None),
    (Is("PowerReserved"), Queued, None),
    (Is("MaxPoweredUpNodes"), Queued, Some("24.05")),
    (Is("MpiPortsBusy"), Queued, Some("24.05")),
    (Is("NvidiaImexChannels"), Queued, Some("25.11")),
    (Is("QOSUsageThreshold"), Limit, None),
    (Is("AssocGrpJobsLimit"), Limit, Some("23.02")),
    (Is("QOSGrpJobsLimit"), Limit, Some("23.02")),
    (Is("DependencyNeverSatisfied"), NeverSatisfied, None),
    (Is("PartitionTimeLimit"), CannotStart, None),
    (Is("InvalidAccount"), CannotStart, None),
    (Is("InvalidQOS"), CannotStart, None),
    (Is("QOSNotAllowed"), CannotStart, None),
    (Is("AccountNotAllowed"), CannotStart, None),
    (Is("BadConstraints"), CannotStart, None),
    (Is("Constraints"), CannotStart, Some("23.11")),
    (Is("ReservationInvalid"), CannotStart, Some("23.11")),
    (Is("ReservationDeleted"), CannotStart, None),
    (Is("JobHeldUser"), Held, None),
    (Is("JobHeldAdmin"), Held, None),
    (Is("JobHoldMaxRequeue"), Held, None),
    (Is("job requeued in held state"), Held, None),
    (Is("job requeued in special exit state"), Held, None),
    (Is("launch failed requeued held"), LaunchFailed, None),
    (
        Is("user env retrieval failed requeued held"),
        LaunchFailed,
        Some("25.05"),
    ),
    (Is("NonZeroExitCode"), Ended, None),
    (Is("RaisedSignal"), Ended, Some("23.02")),
    (Is("TimeLimit"), Ended, None),
    (Is("DeadLine"), Ended, None),
    (Is("InactiveLimit"), Ended, None),
    (Is("NodeDown"), Ended, None),
    (Is("SystemFailure"), Ended, None),
    (Is("JobLaunchFailure"), Ended, None),
    (Is("BurstBufferOperation"), Ended, None),
    (Is("OutOfMemory"), Ended, None),
    // Per-job limits and minimums: waiting does not help.
    (Holds("PerJob"), CannotStart, None),
    (StartsWith("QOSMin"), CannotStart, None),
    // Group, per-user, per-node and per-account limits (`Max*RunMinsPer*` from 24.05).
    (StartsWith("Assoc"), Limit, None),
    (StartsWith("QOS"), Limit, None),
    (StartsWith("Max"), Limit, None),
];

impl Match {
    fn matches(&self, whole: &str, word: &str) -> bool {
        match self {
            Is(name) => whole == *name || word == *name,
            StartsWith(prefix) => word.starts_with(prefix),
            Holds(part) => word.contains(part),
        }
    }
}

/// What `reason` (as a SLURM tool printed it: `Resources`, `ReqNodeNotAvail,
/// UnavailableNodes:n1`, `launch failed requeued held`) says of the job.
pub(crate) fn reason_kind(reason: &str) -> ReasonKind {
    let whole = reason.trim();
    let word = whole
        .split(|c: char| c == ',' || c.is_whitespace())
        .next()
        .unwrap_or_default();
    REASONS
        .iter()
        .find(|(m, _, _)| m.matches(whole, word))
        .map_or(ReasonKind::Unknown, |(_, kind, _)| *kind)
}

impl ReasonKind {
    /// What a person reading the record needs to know beyond the reason's name, or
    /// `None` when the name says it (a job waiting its turn, an ended job's reason).
    pub(crate) fn note(&self) -> Option<&'static str> {
        match self {
            Limit => Some("a limit of its account, QOS or user holds it back; it starts when their other jobs end or the limit is raised"),
            CannotStart => Some("it cannot start as submitted: cancel it and submit it changed, or ask the cluster's admins"),
            Held => Some("held: it starts only once released (scontrol release <job>); cancel it if it should not run"),
            LaunchFailed => Some("Slurm could not launch it on a node and requeued it held: release it (scontrol release <job>) to try again, or cancel it; the node's slurmd log says why"),
            NeverSatisfied => Some("its dependency can never be satisfied"),
            Queued | Ended | ReasonKind::Unknown => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::parse::{parse_sacct, parse_scontrol_show_job, parse_squeue};

    #[test]
    fn reasons_read_whole_by_their_first_word_or_by_pattern() {
        for (reason, kind) in [
            ("Resources", Queued),
            ("ReqNodeNotAvail, UnavailableNodes:n[1-2]", Queued),
            ("AssocGrpGRES", Limit),
            ("QOSMaxJobsPerUserLimit", Limit),
            ("MaxCpuRunMinsPerUser", Limit),
            ("QOSMaxWallDurationPerJobLimit", CannotStart),
            ("AssocMaxNodePerJobLimit", CannotStart),
            ("QOSMinGRES", CannotStart),
            ("QOSNotAllowed", CannotStart),
            ("JobHeldAdmin", Held),
            ("launch failed requeued held", LaunchFailed),
            ("DependencyNeverSatisfied", NeverSatisfied),
            ("NodeDown", Ended),
            ("SomethingNew", ReasonKind::Unknown),
            ("", ReasonKind::Unknown),
        ] {
            assert_eq!(reason_kind(reason), kind, "{reason:?}");
        }
        assert!(Held.note().unwrap().contains("scontrol release"));
        assert_eq!(Queued.note(), None);
    }

    #[test]
    fn the_reasons_slurm_added_from_23_02_to_26_05_are_in_the_table() {
        // From each release's job_state_reason list (SchedMD/slurm at the release tags).
        for (reason, kind, since) in [
            ("RaisedSignal", Ended, "23.02"),
            ("MaxPoweredUpNodes", Queued, "24.05"),
            ("Constraints", CannotStart, "23.11"),
            ("AssocGrpJobsLimit", Limit, "23.02"),
            ("QOSGrpJobsLimit", Limit, "23.02"),
            ("MaxGRESRunMinsPerAccount", Limit, "24.05"),
            ("MaxNodeRunMinsPerUser", Limit, "24.05"),
            ("MpiPortsBusy", Queued, "24.05"),
            ("ReservationInvalid", CannotStart, "23.11"),
            (
                "user env retrieval failed requeued held",
                LaunchFailed,
                "25.05",
            ),
            ("NvidiaImexChannels", Queued, "25.11"),
        ] {
            assert_eq!(reason_kind(reason), kind, "{reason}");
            let named = REASONS
                .iter()
                .find(|(m, _, _)| matches!(m, Is(n) if *n == reason));
            if let Some((_, _, added)) = named {
                assert_eq!(*added, Some(since), "{reason}");
            }
        }
        // Reasons 22.05 has that later releases dropped (24.05 and 25.05) still read.
        for old in ["PowerNotAvail", "PowerReserved", "FrontEndDown"] {
            assert_eq!(reason_kind(old), Queued, "{old}");
        }
    }

    /// Every reason each release's test bed printed (squeue, scontrol and sacct rows of
    /// the fixtures) is in the table.
    #[test]
    fn every_reason_the_test_beds_printed_is_known() {
        let squeue = [
            include_str!("../../../tests/fixtures/slurm-22.05/squeue-running-and-pending"),
            include_str!("../../../tests/fixtures/slurm-22.05/squeue-array-tasks-cancelled"),
            include_str!("../../../tests/fixtures/slurm-22.05/squeue-held"),
            include_str!("../../../tests/fixtures/slurm-24.11/squeue-running-and-pending"),
            include_str!("../../../tests/fixtures/slurm-24.11/squeue-array-tasks-cancelled"),
            include_str!("../../../tests/fixtures/slurm-24.11/squeue-held"),
            include_str!("../../../tests/fixtures/slurm-26.05/squeue-running-and-pending"),
            include_str!("../../../tests/fixtures/slurm-26.05/squeue-array-tasks-cancelled"),
            include_str!("../../../tests/fixtures/slurm-26.05/squeue-held"),
        ];
        let scontrol = [
            include_str!("../../../tests/fixtures/slurm-22.05/scontrol-show-job-pending"),
            include_str!("../../../tests/fixtures/slurm-22.05/scontrol-show-job-node-fail"),
            include_str!("../../../tests/fixtures/slurm-22.05/scontrol-show-job-held"),
            include_str!("../../../tests/fixtures/slurm-24.11/scontrol-show-job-pending"),
            include_str!("../../../tests/fixtures/slurm-24.11/scontrol-show-job-node-fail"),
            include_str!("../../../tests/fixtures/slurm-24.11/scontrol-show-job-held"),
            include_str!("../../../tests/fixtures/slurm-26.05/scontrol-show-job-pending"),
            include_str!("../../../tests/fixtures/slurm-26.05/scontrol-show-job-node-fail"),
            include_str!("../../../tests/fixtures/slurm-26.05/scontrol-show-job-held"),
        ];
        let sacct = [
            include_str!("../../../tests/fixtures/slurm-22.05/sacct-cancelled"),
            include_str!("../../../tests/fixtures/slurm-24.11/sacct-cancelled"),
            include_str!("../../../tests/fixtures/slurm-26.05/sacct-cancelled"),
        ];
        let mut seen: Vec<String> = Vec::new();
        for text in squeue {
            seen.extend(
                parse_squeue(text)
                    .unwrap()
                    .into_iter()
                    .filter_map(|r| r.reason),
            );
        }
        for text in scontrol {
            let jobs = parse_scontrol_show_job(text).unwrap();
            seen.extend(jobs.iter().filter_map(|j| j.reason().map(str::to_string)));
        }
        for text in sacct {
            seen.extend(
                parse_sacct(text)
                    .unwrap()
                    .into_iter()
                    .filter_map(|r| r.reason),
            );
        }
        for reason in ["Resources", "JobHeldUser", "NodeDown"] {
            assert!(seen.iter().any(|r| r == reason), "{reason} not in {seen:?}");
        }
        for reason in &seen {
            assert_ne!(reason_kind(reason), ReasonKind::Unknown, "{reason}");
        }
        assert_eq!(reason_kind("JobHeldUser"), Held);
    }
}
