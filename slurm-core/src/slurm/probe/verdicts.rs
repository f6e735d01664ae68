//! After a poll: the probes that ended and were not read yet. Their verdict files are
//! read (one round trip for all), a pass cached per cluster and shape, and anything
//! else ends the jobs still waiting for the probe, ERROR with the error that says why
//! (and the switch that skips the probe), to be cancelled on the cluster.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;

use chrono::Utc;

use crate::backend::NativeStatus;
use crate::classify::ErrorClass;
use crate::nccl::{
    ladder_outcomes, parse_shape, record_knobs, show_env, verdict_of, KnobSet, ProbeAttempt,
    ShapeKnobs, PROBE_LABEL, PROBE_SHAPE_LABEL, PROBE_VERDICT_LABEL,
};
use crate::record::{JobId, JobRecord, Mark, RecordFilter, TransitionSource};
use crate::slurm::context::Context;
use crate::slurm::job::{slurm_job, SlurmJob};
use crate::slurm::paths::{probe_rung_log, probe_verdict};
use crate::slurm::preflight::cluster_name;
use crate::state::JobState;
use crate::transport::{round_trip, Command};
use crate::{Error, Result};

/// What the verdicts of probes that ended did: the jobs that waited for a failed probe,
/// now ended, and the SLURM jobs to cancel.
#[derive(Default)]
pub(crate) struct Concluded {
    pub(crate) ended: HashMap<JobId, JobRecord>,
    pub(crate) cancels: Vec<SlurmJob>,
}

/// Whether `record` is an NCCL probe that ended and whose verdict is not yet read (a
/// poll of it reads the verdict).
pub(crate) fn awaits_verdict(record: &JobRecord) -> bool {
    record.labels.get(PROBE_LABEL).map(String::as_str) == Some("nccl")
        && record.state.is_terminal()
        && !record.labels.contains_key(PROBE_VERDICT_LABEL)
}

/// Read the verdict of every probe among `records` that has ended and not been read
/// yet. A failure to read is logged and tried again by a later poll or submit.
/// `natives` are what this poll saw.
pub(crate) async fn conclude(
    ctx: &Context<'_>,
    records: &[&JobRecord],
    natives: &BTreeMap<JobId, NativeStatus>,
) -> Concluded {
    let mut seen = HashSet::new();
    let ended: Vec<JobRecord> = records
        .iter()
        .filter(|r| awaits_verdict(r) && seen.insert(r.id.clone()))
        .map(|r| (*r).clone())
        .collect();
    if ended.is_empty() {
        return Concluded::default();
    }
    match conclude_ended(ctx, &ended, natives).await {
        Ok(concluded) => concluded,
        Err(error) => {
            tracing::warn!(%error, "reading the verdict of an NCCL probe failed; a later poll tries again");
            Concluded::default()
        }
    }
}

async fn conclude_ended(
    ctx: &Context<'_>,
    probes: &[JobRecord],
    natives: &BTreeMap<JobId, NativeStatus>,
) -> Result<Concluded> {
    let store = ctx.records();
    let cluster = cluster_name(ctx).await?;
    let verdicts = read_verdicts(ctx, probes).await?;
    let mut concluded = Concluded::default();
    let waiting = ctx
        .records()
        .list_reported(
            &RecordFilter::any().active(),
            "the jobs waiting for a probe",
        )
        .await?;
    for (probe, verdict) in probes.iter().zip(&verdicts) {
        let attempts = attempts_of(probe, verdict, natives.get(&probe.id));
        let outcome = attempts
            .last()
            .map_or("FAILED", |a| a.outcome.name())
            .to_string();
        match verdict_of(&cluster, &attempts) {
            Ok(knobs) => {
                cache_pass(ctx, &cluster, probe, &knobs)?;
            }
            Err(error) if probe.state == JobState::Complete => {
                // The ladder exits 0 only after a pass: its jobs may run already.
                tracing::warn!(probe = %probe.id, %error, "an NCCL probe COMPLETED without a readable pass; nothing cached");
            }
            Err(error) => {
                // The probe's own class decides: a node failure before the ladder
                // finished is worth a retry (which probes again), a verdict is not.
                let finished = verdict.lines().any(|l| l.starts_with("end "));
                let class = match (probe.err_class, finished) {
                    (Some(ErrorClass::Infra), false) => ErrorClass::Infra,
                    _ => ErrorClass::Program,
                };
                let why = match &error {
                    Error::Preflight {
                        message, remedy, ..
                    } => format!("{message}; remedy: {remedy}"),
                    other => other.to_string(),
                };
                for job in waiting
                    .iter()
                    .filter(|r| r.after.iter().any(|d| d.job == probe.id))
                {
                    let message = format!(
                        "the NCCL probe it waited for ended {outcome}: {why}; cancelled on the cluster"
                    );
                    let updated = store
                        .mark(
                            &job.id,
                            Mark::new(JobState::Error, TransitionSource::Poll)
                                .message(message)
                                .err_class(class),
                        )
                        .await?;
                    if let Some(native) = slurm_job(&updated)? {
                        concluded.cancels.push(native);
                    }
                    concluded.ended.insert(job.id.clone(), updated);
                }
            }
        }
        store
            .update(&probe.id, move |record| {
                record
                    .labels
                    .insert(PROBE_VERDICT_LABEL.to_string(), outcome.clone());
                Ok(())
            })
            .await?;
    }
    Ok(concluded)
}

/// The rungs a finished (or running) probe tried, from its verdict file's text.
pub(in crate::slurm) fn attempts_of(
    record: &JobRecord,
    verdict: &str,
    native: Option<&NativeStatus>,
) -> Vec<ProbeAttempt> {
    ladder_outcomes(verdict, record.state, native)
        .into_iter()
        .enumerate()
        .map(|(index, (env, outcome))| ProbeAttempt {
            env,
            outcome,
            job: record.id.clone(),
            native_id: record.backend_ref.as_ref().map(|r| r.native_id.clone()),
            log: Some(probe_rung_log(record, index)),
        })
        .collect()
}

/// The verdict files of `probes` (empty when a probe wrote none), in one round trip.
pub(in crate::slurm) async fn read_verdicts(
    ctx: &Context<'_>,
    probes: &[JobRecord],
) -> Result<Vec<String>> {
    let mut commands = Vec::with_capacity(probes.len());
    for probe in probes {
        let path = probe_verdict(probe)?;
        commands.push(Command::new("cat").arg("--").arg(path.as_str()));
    }
    let outputs = match commands.as_slice() {
        [one] => vec![
            ctx.transport()
                .run(&one.clone().display_as("read the NCCL probe's verdict"))
                .await?,
        ],
        _ => {
            let joined = round_trip::join(&commands)
                .display_as(format!("read {} NCCL probe verdicts", commands.len()));
            round_trip::split(&ctx.transport().run(&joined).await?, commands.len())?
        }
    };
    // cat exits 1 when the file is missing: the probe wrote no verdict.
    Ok(outputs
        .iter()
        .map(|o| {
            if o.success() {
                o.stdout_text()
            } else {
                String::new()
            }
        })
        .collect())
}

/// Cache a passing probe's knobs for its cluster and shape.
pub(in crate::slurm) fn cache_pass(
    ctx: &Context<'_>,
    cluster: &str,
    probe: &JobRecord,
    knobs: &KnobSet,
) -> Result<PathBuf> {
    let (nodes, gpus_per_node) = probe
        .labels
        .get(PROBE_SHAPE_LABEL)
        .and_then(|l| parse_shape(l))
        .ok_or_else(|| {
            Error::invalid(
                "labels",
                format!("probe {} has no {PROBE_SHAPE_LABEL} label", probe.id),
            )
        })?;
    let path = record_knobs(
        &ctx.config().state_dir,
        cluster,
        ShapeKnobs {
            env: knobs.clone(),
            probed_at: Utc::now(),
            nodes,
            gpus_per_node,
            probe_job: probe.id.clone(),
        },
    )?;
    tracing::info!(%cluster, probe = %probe.id, knobs = %show_env(knobs), file = %path.display(), "NCCL probe passed; knobs cached");
    Ok(path)
}
