//! What a SLURM reason says of a waiting job: its [`WaitCategory`], the words that
//! explain it, and the remedy (the command, the spec's field, or the limit and who can
//! raise it).

use crate::backend::{LimitUse, WaitCategory};
use crate::slurm::reasons::{reason_kind, ReasonKind};

/// The category of a job in SLURM state `state` (as squeue prints it) waiting for
/// `reason`.
pub(crate) fn category_of(state: &str, reason: Option<&str>) -> WaitCategory {
    match state {
        "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "RESV_DEL_HOLD" => {}
        "RUNNING" | "COMPLETING" | "CONFIGURING" | "SUSPENDED" | "STOPPED" | "SIGNALING"
        | "STAGE_OUT" | "RESIZING" => return WaitCategory::Running,
        _ => return WaitCategory::Ended,
    }
    let Some(reason) = reason.map(str::trim).filter(|r| !r.is_empty()) else {
        return WaitCategory::NotEvaluated;
    };
    match reason {
        "Priority" => return WaitCategory::Priority,
        "Dependency" | "DependencyNeverSatisfied" => return WaitCategory::Dependency,
        "BeginTime" => return WaitCategory::BeginTime,
        "JobArrayTaskLimit" => return WaitCategory::Limit,
        _ => {}
    }
    match reason_kind(reason) {
        ReasonKind::Limit => WaitCategory::Limit,
        ReasonKind::CannotStart => WaitCategory::CannotStart,
        ReasonKind::Held => WaitCategory::Held,
        ReasonKind::LaunchFailed => WaitCategory::LaunchFailed,
        ReasonKind::NeverSatisfied => WaitCategory::Dependency,
        // Resources, nodes not available, a partition down, licenses: the cluster's
        // resources; a reason this release added that the table does not know reads
        // the same (its words are shown as printed).
        ReasonKind::Queued | ReasonKind::Ended | ReasonKind::Unknown => WaitCategory::Resources,
    }
}

/// The limit a reason names: where it is read in `scontrol show assoc_mgr` (an
/// association's or a QOS's field, and the TRES entry of a TRES list).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NamedLimit {
    /// On the QOS (else on the association).
    pub on_qos: bool,
    /// The field (`MaxJobs`, `GrpTRES`, `MaxWallPJ`).
    pub field: &'static str,
    /// The TRES entry of a TRES list (`gres/gpu`, `cpu`, `node`, `mem`).
    pub tres: Option<&'static str>,
}

/// The limits Slurm's reasons name (22.05 to 26.05), by reason.
const LIMITS: &[(&str, bool, &str, Option<&str>)] = &[
    ("AssocMaxJobsLimit", false, "MaxJobs", None),
    ("AssocGrpJobsLimit", false, "GrpJobs", None),
    ("AssocMaxSubmitJobLimit", false, "MaxSubmitJobs", None),
    ("AssocGrpSubmitJobsLimit", false, "GrpSubmitJobs", None),
    ("AssocGrpCpuLimit", false, "GrpTRES", Some("cpu")),
    ("AssocGrpGRES", false, "GrpTRES", Some("gres/gpu")),
    ("AssocGrpNodeLimit", false, "GrpTRES", Some("node")),
    ("AssocGrpMemLimit", false, "GrpTRES", Some("mem")),
    ("AssocMaxWallDurationPerJobLimit", false, "MaxWallPJ", None),
    ("AssocMaxNodePerJobLimit", false, "MaxTRESPJ", Some("node")),
    ("AssocMaxCpuPerJobLimit", false, "MaxTRESPJ", Some("cpu")),
    ("AssocMaxGRESPerJob", false, "MaxTRESPJ", Some("gres/gpu")),
    ("QOSMaxJobsPerUserLimit", true, "MaxJobsPU", None),
    ("QOSMaxSubmitJobPerUserLimit", true, "MaxSubmitPU", None),
    ("QOSGrpJobsLimit", true, "GrpJobs", None),
    ("QOSGrpSubmitJobsLimit", true, "GrpSubmitJobs", None),
    ("QOSMaxJobsPerAccountLimit", true, "MaxJobsPA", None),
    ("QOSGrpCpuLimit", true, "GrpTRES", Some("cpu")),
    ("QOSGrpGRES", true, "GrpTRES", Some("gres/gpu")),
    ("QOSGrpNodeLimit", true, "GrpTRES", Some("node")),
    ("QOSMaxGRESPerUser", true, "MaxTRESPU", Some("gres/gpu")),
    ("QOSMaxCpuPerUserLimit", true, "MaxTRESPU", Some("cpu")),
    ("QOSMaxNodePerUserLimit", true, "MaxTRESPU", Some("node")),
    ("QOSMaxWallDurationPerJobLimit", true, "MaxWallPJ", None),
    ("QOSMaxNodePerJobLimit", true, "MaxTRESPJ", Some("node")),
    ("QOSMaxCpuPerJobLimit", true, "MaxTRESPJ", Some("cpu")),
    ("QOSMaxGRESPerJob", true, "MaxTRESPJ", Some("gres/gpu")),
];

/// The limit `reason` names, when it is one of the table's.
pub(crate) fn named_limit(reason: &str) -> Option<NamedLimit> {
    LIMITS
        .iter()
        .find(|(r, ..)| *r == reason)
        .map(|&(_, on_qos, field, tres)| NamedLimit {
            on_qos,
            field,
            tres,
        })
}

/// The name of a limit as a person sets it with sacctmgr: `MaxJobs`, `MaxWall`,
/// `GrpTRES=gres/gpu`.
pub(crate) fn display_name(limit: &NamedLimit) -> String {
    let field = match limit.field {
        "MaxWallPJ" => "MaxWall",
        other => other,
    };
    match limit.tres {
        Some(tres) => format!("{field}={tres}"),
        None => field.to_string(),
    }
}

/// The remedy of a limit: its name, where it is set, what is used of it, and who can
/// raise it.
pub(crate) fn limit_remedy(limit: &LimitUse) -> String {
    let used = match (limit.used, limit.max) {
        (Some(used), Some(max)) => format!(" ({used} of {max} used)"),
        (None, Some(max)) => format!(" (at most {max})"),
        _ => String::new(),
    };
    let on = limit
        .set_on
        .as_deref()
        .map(|s| format!(" of the {s}"))
        .unwrap_or_default();
    format!(
        "the {}{on} limit{used} holds it: it starts when the other jobs under that limit end, or the cluster's admins can raise it (sacctmgr modify ... set {}=...)",
        limit.name,
        limit.name.split('=').next().unwrap_or(&limit.name)
    )
}

/// The field of the spec to change when the job cannot start for `reason`, and how.
pub(crate) fn spec_fix(reason: &str, limit: Option<&LimitUse>) -> String {
    let wall = |max: Option<u64>| match max {
        Some(minutes) => format!(
            "set the spec's `time` to at most {:02}:{:02}:00",
            minutes / 60,
            minutes % 60
        ),
        None => "set the spec's `time` lower".to_string(),
    };
    let resubmit = "then cancel this job and submit the spec again";
    let change = if reason.contains("WallDuration") || reason == "PartitionTimeLimit" {
        wall(limit.and_then(|l| l.max))
    } else if reason.contains("Node") {
        "ask for fewer nodes (the spec's `nodes`)".to_string()
    } else if reason.contains("GRES") || reason.contains("Gres") {
        "ask for fewer GPUs (the spec's `gpus_per_node` or `gpus`)".to_string()
    } else if reason.contains("Cpu") {
        "ask for fewer CPUs (the spec's `cpus_per_task`)".to_string()
    } else if reason.contains("Mem") {
        "ask for less memory (the spec's `memory`)".to_string()
    } else if reason.contains("Account") {
        "use an account you may submit to (the spec's `account`, or SLURM_ACCOUNT; `sacctmgr show assoc user=$USER` lists them)".to_string()
    } else if reason.contains("QOS") {
        "use a QOS your association allows (`--qos=` in the spec's `extra_sbatch`; `sacctmgr show assoc user=$USER format=qos` lists them)".to_string()
    } else if reason.contains("Constraint") {
        "ask for features the partition's nodes have (`--constraint` in `extra_sbatch`; `sinfo -o '%N %f'` lists them)".to_string()
    } else if reason.contains("Reservation") {
        "name a reservation that exists and you may use (`--reservation` in `extra_sbatch`)"
            .to_string()
    } else {
        "change what the job asks for, or ask the cluster's admins".to_string()
    };
    format!("{change}; {resubmit}")
}

/// The plain words for a category (the evidence adds the figures).
pub(crate) fn explanation(category: WaitCategory, reason: Option<&str>) -> String {
    let reason = reason.unwrap_or_default();
    match category {
        WaitCategory::Resources => match reason {
            "Resources" => "the nodes it asks for are in use; it starts when enough of them free up".to_string(),
            r if r.starts_with("ReqNodeNotAvail") => "some nodes it could use are not available (down, drained or reserved); it starts when enough others free up".to_string(),
            r if r.starts_with("Partition") => format!("its partition cannot start jobs now ({r})"),
            r => format!("the scheduler holds it for the cluster's resources ({r})"),
        },
        WaitCategory::Priority => "jobs ahead of it in the queue (a higher priority, or the same and submitted first) wait for the same nodes; it starts in turn".to_string(),
        WaitCategory::Limit if reason == "JobArrayTaskLimit" => "the array's own limit of tasks at once (`max_parallel`) is reached; the next task starts when one ends".to_string(),
        WaitCategory::Limit => "a limit of its account, user or QOS is reached; it starts when the other jobs under that limit end".to_string(),
        WaitCategory::Held if reason == "JobHeldAdmin" => "an administrator holds it; it starts only once released".to_string(),
        WaitCategory::Held => "it is held; it starts only once released".to_string(),
        WaitCategory::Dependency if reason == "DependencyNeverSatisfied" => "its dependency can never be satisfied: a parent ended in a way its condition excludes".to_string(),
        WaitCategory::Dependency => "it waits for the jobs it depends on".to_string(),
        WaitCategory::BeginTime => "it was asked to start no earlier than a time still to come".to_string(),
        WaitCategory::CannotStart => format!("it cannot start as submitted ({reason}): waiting will not help"),
        WaitCategory::LaunchFailed => "Slurm could not launch it on a node and requeued it held (the node's slurmd log says why)".to_string(),
        WaitCategory::NotEvaluated => "the scheduler has not looked at it yet (Slurm's reason `None` right after a submit): ask again in a few seconds".to_string(),
        WaitCategory::Running => "it runs".to_string(),
        WaitCategory::Ended => "it ended".to_string(),
    }
}

/// The remedy for a category, when there is one (`job` is SLURM's id; the limit's
/// when the reason names one).
pub(crate) fn remedy(
    category: WaitCategory,
    reason: Option<&str>,
    job: &str,
    limit: Option<&LimitUse>,
) -> Option<String> {
    let reason = reason.unwrap_or_default();
    match category {
        WaitCategory::Held if reason == "JobHeldAdmin" => Some(format!(
            "ask the cluster's admins to release it (scontrol release {job}), or cancel it"
        )),
        WaitCategory::Held => Some(format!("scontrol release {job}")),
        WaitCategory::LaunchFailed => Some(format!(
            "scontrol release {job} to try again, or cancel it"
        )),
        WaitCategory::Limit if reason == "JobArrayTaskLimit" => None,
        WaitCategory::Limit => Some(match limit {
            Some(limit) => limit_remedy(limit),
            None => format!("the limit named by {reason} holds it: it starts when the other jobs under that limit end, or the cluster's admins can raise it (sacctmgr)"),
        }),
        WaitCategory::CannotStart => Some(spec_fix(reason, limit)),
        WaitCategory::Dependency if reason == "DependencyNeverSatisfied" => {
            Some(format!("cancel it (scancel {job}): it can never start"))
        }
        WaitCategory::BeginTime => Some(format!(
            "to start it sooner: scontrol update jobid={job} begintime=now"
        )),
        WaitCategory::Resources | WaitCategory::Priority => Some(
            "none needed, it starts by itself; a shorter `time` lets backfill start it sooner, and `slurmctl submit SPEC --forecast` shows where a job would start first".to_string(),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_fall_into_their_categories() {
        for (state, reason, category) in [
            ("PENDING", Some("Resources"), WaitCategory::Resources),
            (
                "PENDING",
                Some("ReqNodeNotAvail, UnavailableNodes:n1"),
                WaitCategory::Resources,
            ),
            ("PENDING", Some("Priority"), WaitCategory::Priority),
            ("PENDING", Some("AssocMaxJobsLimit"), WaitCategory::Limit),
            (
                "PENDING",
                Some("QOSMaxWallDurationPerJobLimit"),
                WaitCategory::CannotStart,
            ),
            (
                "PENDING",
                Some("PartitionTimeLimit"),
                WaitCategory::CannotStart,
            ),
            ("PENDING", Some("JobHeldUser"), WaitCategory::Held),
            ("PENDING", Some("Dependency"), WaitCategory::Dependency),
            (
                "PENDING",
                Some("DependencyNeverSatisfied"),
                WaitCategory::Dependency,
            ),
            ("PENDING", Some("BeginTime"), WaitCategory::BeginTime),
            (
                "PENDING",
                Some("launch failed requeued held"),
                WaitCategory::LaunchFailed,
            ),
            ("PENDING", None, WaitCategory::NotEvaluated),
            ("PENDING", Some("SomethingNew"), WaitCategory::Resources),
            ("RUNNING", None, WaitCategory::Running),
            ("COMPLETED", None, WaitCategory::Ended),
        ] {
            assert_eq!(category_of(state, reason), category, "{state} {reason:?}");
        }
    }

    #[test]
    fn a_limit_remedy_names_the_limit_its_use_and_who_raises_it() {
        let limit = LimitUse {
            name: "MaxJobs".into(),
            set_on: Some("association of user alice in account limited".into()),
            used: Some(1),
            max: Some(1),
        };
        let text = limit_remedy(&limit);
        assert!(text.contains("MaxJobs"), "{text}");
        assert!(text.contains("1 of 1 used"), "{text}");
        assert!(text.contains("account limited"), "{text}");
        assert!(text.contains("admins can raise it (sacctmgr"), "{text}");
        let wall = LimitUse {
            name: "MaxWall".into(),
            set_on: Some("QOS short".into()),
            used: None,
            max: Some(10),
        };
        let fix = spec_fix("QOSMaxWallDurationPerJobLimit", Some(&wall));
        assert!(fix.contains("`time` to at most 00:10:00"), "{fix}");
        assert_eq!(
            remedy(WaitCategory::Held, Some("JobHeldUser"), "77", None).as_deref(),
            Some("scontrol release 77")
        );
        let named = named_limit("AssocGrpGRES").unwrap();
        assert_eq!(display_name(&named), "GrpTRES=gres/gpu");
        assert_eq!(
            display_name(&named_limit("QOSMaxWallDurationPerJobLimit").unwrap()),
            "MaxWall"
        );
    }
}
