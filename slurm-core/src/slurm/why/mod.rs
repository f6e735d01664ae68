//! Why SLURM jobs wait ([`why`]): one round trip for any number of jobs (the why
//! script: squeue of the jobs and their parents, sinfo of their partitions, the jobs
//! ahead of each, and the limits that hold them), read into [`WaitAnswer`]s.

mod explain;
mod read;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;
use std::time::Duration;

use regex::Regex;

pub(crate) use explain::category_of;
use explain::{display_name, explanation, named_limit, remedy};
pub(crate) use read::utc_time;
use read::{
    jobs_ahead, limit_records, nodes_by_partition, why_rows, LimitRecord, WhyRow, AHEAD_SHOWN,
    QOS_FIELD, USER_FIELD, WHY_FORMAT,
};

use super::context::Context;
use super::parse::SlurmJobId;
use super::scripts::WHY;
use super::states::{map_state, SlurmState};
use crate::backend::{LimitUse, NodeStates, ParentJob, WaitAnswer, WaitCategory, WaitEvidence};
use crate::record::{JobId, JobRecord};
use crate::transport::round_trip;
use crate::{Error, Result};

/// What the why script's four parts said.
#[derive(Default)]
struct Seen {
    rows: Vec<WhyRow>,
    nodes: BTreeMap<String, NodeStates>,
    ahead: BTreeMap<String, (u32, Vec<crate::backend::JobAhead>)>,
    associations: Vec<LimitRecord>,
    qos: Vec<LimitRecord>,
}

/// Why each of `ids` waits, in their order: one round trip to the cluster (none when no
/// job of them reached the scheduler).
pub(crate) async fn why(ctx: &Context<'_>, ids: &[JobId]) -> Result<Vec<WaitAnswer>> {
    let records = ctx.records().get_many(ids).await?;
    let parents = parent_records(ctx, &records).await;
    let mut asked = BTreeSet::new();
    for record in records.iter().chain(parents.values()) {
        if let Some(job) = slurm_job(record) {
            asked.insert(job);
        }
    }
    let seen = if asked.is_empty() {
        Seen::default()
    } else {
        ask(ctx, &asked).await?
    };
    Ok(records
        .iter()
        .map(|record| answer(record, &parents, &seen))
        .collect())
}

/// The scheduler's id of the job a record now stands for (none when its native id
/// does not read as one).
fn slurm_job(record: &JobRecord) -> Option<SlurmJobId> {
    super::job::slurm_job(record)
        .ok()
        .flatten()
        .map(|(_, id)| id)
}

/// The records the jobs depend on (a parent retried: its latest attempt), by the
/// parent's id as the dependant names it. A parent that cannot be read is left out.
async fn parent_records(ctx: &Context<'_>, records: &[JobRecord]) -> BTreeMap<JobId, JobRecord> {
    let mut parents = BTreeMap::new();
    for dependency in records.iter().flat_map(|r| r.after.iter()) {
        if parents.contains_key(&dependency.job) {
            continue;
        }
        let Ok(mut parent) = ctx.records().get(&dependency.job).await else {
            continue;
        };
        for _ in 0..16 {
            let Some(next) = parent.retried_as.clone() else {
                break;
            };
            match ctx.records().get(&next).await {
                Ok(later) => parent = later,
                Err(_) => break,
            }
        }
        parents.insert(dependency.job.clone(), parent);
    }
    parents
}

/// Run the why script for the jobs `asked`.
async fn ask(ctx: &Context<'_>, asked: &BTreeSet<SlurmJobId>) -> Result<Seen> {
    let mut stdin = String::new();
    for job in asked {
        stdin.push_str(&job.to_string());
        stdin.push('\n');
    }
    let command = WHY
        .command([
            WHY_FORMAT.to_string(),
            AHEAD_SHOWN.to_string(),
            USER_FIELD.to_string(),
            QOS_FIELD.to_string(),
        ])
        .stdin(stdin.into_bytes())
        .timeout(Duration::from_secs(120))
        .display_as(format!("why of {} job(s)", asked.len()));
    let output = ctx.transport().run(&command).await?;
    let parts = round_trip::split(&output, 4)?;
    let squeue = &parts[0];
    if !squeue.success() && !squeue.stderr_text().contains("Invalid job id") {
        return Err(Error::Remote {
            command: "squeue (why)".to_string(),
            status: squeue.status,
            stderr: crate::names::short(squeue.stderr_text().trim()).to_string(),
            transient: true,
        });
    }
    let (associations, qos) = limit_records(&parts[3].stdout_text());
    Ok(Seen {
        rows: why_rows(&squeue.stdout_text()),
        nodes: nodes_by_partition(&parts[1].stdout_text()),
        ahead: jobs_ahead(&parts[2].stdout_text()),
        associations,
        qos,
    })
}

/// The answer for one record.
fn answer(record: &JobRecord, parents: &BTreeMap<JobId, JobRecord>, seen: &Seen) -> WaitAnswer {
    let Some(job) = slurm_job(record) else {
        let category = WaitCategory::of_state(record.state);
        let words = match category {
            WaitCategory::Ended => {
                format!("it ended {} before the scheduler took it", record.state)
            }
            _ => "the scheduler has not accepted it yet (its submit is in progress or not settled)"
                .to_string(),
        };
        return WaitAnswer::new(record.id.clone(), record.state, category, words);
    };
    let job = job.to_string();
    let mut answer = WaitAnswer::new(record.id.clone(), record.state, WaitCategory::Ended, "");
    answer.native_id = Some(job.clone());
    let mine: Vec<&WhyRow> = seen.rows.iter().filter(|r| r.job == job).collect();
    let Some(row) = mine
        .iter()
        .find(|r| r.state == "PENDING")
        .or_else(|| mine.first())
        .copied()
    else {
        answer.category = WaitCategory::of_state(record.state);
        answer.explanation = format!(
            "the scheduler no longer lists job {job}; its record says {}",
            record.state
        );
        return answer;
    };
    let category = category_of(&row.state, row.reason.as_deref());
    answer.category = category;
    // The state the scheduler shows now (the record catches up at its next poll).
    if let Ok(state) = SlurmState::parse(&row.state) {
        answer.state = map_state(&state).0;
    }
    answer.reason = row.reason.clone();
    answer.explanation = explanation(category, row.reason.as_deref());
    if !category.waits() {
        if category == WaitCategory::Ended {
            answer.explanation = format!("it ended ({})", row.state);
        }
        return answer;
    }
    with_evidence(answer, record, row, parents, seen)
}

/// `answer` of a job waiting in `row` with the evidence `seen` holds, its remedy and
/// its start estimate.
fn with_evidence(
    mut answer: WaitAnswer,
    record: &JobRecord,
    row: &WhyRow,
    parents: &BTreeMap<JobId, JobRecord>,
    seen: &Seen,
) -> WaitAnswer {
    let category = answer.category;
    let job = row.job.clone();
    let partition = row
        .partition
        .as_deref()
        .and_then(|p| {
            p.split(',')
                .find(|p| seen.nodes.contains_key(*p))
                .or(p.split(',').next())
        })
        .map(str::to_string);
    let limit = match category {
        WaitCategory::Limit | WaitCategory::CannotStart => row
            .reason
            .as_deref()
            .and_then(|reason| limit_use(reason, row, seen)),
        _ => None,
    };
    answer.remedy = remedy(category, row.reason.as_deref(), &job, limit.as_ref());
    if let Some(at) = row.start {
        answer.start_estimate = Some(at);
        answer.start_estimate_source =
            Some("scheduler (squeue's expected start: the backfill plan)".to_string());
    }
    let ahead = seen.ahead.get(&job);
    let parent_jobs = match category {
        WaitCategory::Dependency => Some(parent_jobs(record, row, parents, seen)),
        _ => None,
    };
    let nodes = partition.as_deref().and_then(|p| seen.nodes.get(p));
    answer.explanation = with_figures(
        answer.explanation,
        category,
        nodes,
        ahead.map(|a| a.0),
        limit.as_ref(),
        parent_jobs.as_deref(),
    );
    answer.evidence = WaitEvidence {
        nodes: nodes.cloned(),
        partition,
        jobs_ahead_count: ahead.map(|a| a.0),
        jobs_ahead: ahead.map(|a| a.1.clone()),
        limit,
        parents: parent_jobs,
    };
    answer
}

/// The explanation with the evidence's figures that make it concrete.
fn with_figures(
    words: String,
    category: WaitCategory,
    nodes: Option<&NodeStates>,
    ahead: Option<u32>,
    limit: Option<&LimitUse>,
    parents: Option<&[ParentJob]>,
) -> String {
    let figures = match category {
        WaitCategory::Resources => nodes.map(|n| {
            format!(
                "{} idle, {} mixed, {} allocated, {} drained, {} down",
                n.idle, n.mixed, n.allocated, n.drained, n.down
            )
        }),
        WaitCategory::Priority => {
            ahead.map(|a| format!("{a} pending job(s) ahead of it in its partition"))
        }
        WaitCategory::Limit => limit.map(|l| match (l.used, l.max) {
            (Some(used), Some(max)) => format!("{}: {used} of {max}", l.name),
            _ => l.name.clone(),
        }),
        WaitCategory::Dependency => parents.filter(|p| !p.is_empty()).map(|p| {
            p.iter()
                .map(|p| {
                    format!(
                        "{} {}{}",
                        p.condition,
                        p.record
                            .as_ref()
                            .map_or(p.job.clone(), |r| format!("{r} (job {})", p.job)),
                        p.state
                            .as_deref()
                            .map(|s| format!(", {s}"))
                            .unwrap_or_default()
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        }),
        _ => None,
    };
    match figures {
        Some(f) => format!("{words} ({f})"),
        None => words,
    }
}

/// The limit `reason` names, with what is used of it, read from the associations and QOS
/// the script listed.
fn limit_use(reason: &str, row: &WhyRow, seen: &Seen) -> Option<LimitUse> {
    let Some(named) = named_limit(reason) else {
        return match reason {
            "PartitionTimeLimit" => Some(LimitUse {
                name: "MaxTime".to_string(),
                set_on: row.partition.as_ref().map(|p| format!("partition {p}")),
                used: None,
                max: None,
            }),
            _ => None,
        };
    };
    let name = display_name(&named);
    let (set_on, record) = if named.on_qos {
        let qos = row.qos.clone()?;
        let record = seen
            .qos
            .iter()
            .find(|q| q.name_of("QOS") == Some(qos.as_str()));
        (format!("QOS {qos}"), record)
    } else {
        let user = row.user.as_deref();
        let account = row.account.as_deref();
        // The user's own association first, then the account's (a group limit).
        let record = seen
            .associations
            .iter()
            .filter(|a| a.name_of("Account") == account)
            .filter(|a| {
                a.fields
                    .get(named.field)
                    .is_some_and(|v| !v.starts_with('N') && !v.is_empty())
            })
            .min_by_key(|a| if a.name_of("UserName") == user { 0 } else { 1 });
        let on = match record.and_then(|r| r.name_of("UserName")) {
            Some(u) => format!(
                "association of user {u} in account {}",
                account.unwrap_or("?")
            ),
            None => format!("association of account {}", account.unwrap_or("?")),
        };
        (on, record)
    };
    let (max, used) = record.map_or((None, None), |r| r.limit(named.field, named.tres));
    Some(LimitUse {
        name,
        set_on: Some(set_on),
        used,
        max,
    })
}

/// The parents of a job waiting for its dependency: those squeue's dependency field
/// names (`afterok:77(unfulfilled)`), else those of its record.
fn parent_jobs(
    record: &JobRecord,
    row: &WhyRow,
    parents: &BTreeMap<JobId, JobRecord>,
    seen: &Seen,
) -> Vec<ParentJob> {
    let by_native: BTreeMap<String, &JobRecord> = parents
        .values()
        .filter_map(|p| slurm_job(p).map(|j| (j.to_string(), p)))
        .collect();
    let state_of = |job: &str| {
        seen.rows
            .iter()
            .find(|r| r.job == job)
            .map(|r| r.state.clone())
            .or_else(|| by_native.get(job).map(|p| p.state.to_string()))
    };
    static PIECE: OnceLock<Regex> = OnceLock::new();
    let piece = PIECE.get_or_init(|| {
        Regex::new(r"(after[a-z]*|singleton)(?::(\d+)[^()]*)?\(([a-z]+)\)")
            .expect("a valid pattern")
    });
    let mut found: Vec<ParentJob> = row
        .dependency
        .as_deref()
        .map(|text| {
            piece
                .captures_iter(text)
                .filter_map(|c| {
                    let job = c.get(2)?.as_str().to_string();
                    Some(ParentJob {
                        record: by_native.get(&job).map(|p| p.id.clone()),
                        state: state_of(&job),
                        condition: c[1].to_string(),
                        job,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    if found.is_empty() {
        for dependency in &record.after {
            let Some(parent) = parents.get(&dependency.job) else {
                continue;
            };
            let Some(job) = slurm_job(parent).map(|j| j.to_string()) else {
                continue;
            };
            found.push(ParentJob {
                record: Some(parent.id.clone()),
                state: state_of(&job),
                condition: match dependency.condition {
                    crate::spec::DependencyCondition::Start => "after".to_string(),
                    other => format!("after{other}"),
                },
                job,
            });
        }
    }
    found
}
