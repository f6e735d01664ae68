//! Where a job would start, before it is submitted ([`forecast`]): the spec rendered
//! for each partition of its list as a submit would, then one round trip of `sbatch
//! --test-only` per partition (the forecast script). Nothing is submitted and no record
//! is opened.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use regex::Regex;

use super::render_under;
use crate::backend::{CheckKind, Forecast, PartitionForecast};
use crate::slurm::context::Context;
use crate::slurm::preflight::preflight;
use crate::slurm::scripts::FORECAST;
use crate::slurm::why::utc_time;
use crate::spec::JobSpec;
use crate::transport::round_trip;
use crate::{Error, ErrorKind, Result};

/// Where the answers come from.
const TEST_ONLY: &str = "sbatch --test-only";
const SPEC_CHECK: &str = "the spec against the partition (preflight)";

/// For each partition of `spec`'s list (its `partition`, else the configuration's),
/// when and where the job would start, or why it could not run there.
pub(crate) async fn forecast(ctx: &Context<'_>, spec: &JobSpec) -> Result<Forecast> {
    spec.validate()?;
    let partitions = ctx.config().partitions_for(spec);
    let mut refused = learn_partitions(ctx, spec, &partitions).await?;
    let root = ctx
        .facts()
        .read(|facts| facts.results_root.clone())
        .ok_or_else(|| {
            Error::config(
                "SLURM_BASE_RESULTS_DIR",
                "the results root could not be resolved; set it",
            )
        })?;
    let mut scripts = Vec::new();
    for partition in &partitions {
        if refused.contains_key(partition) {
            continue;
        }
        let mut one = spec.clone();
        one.partition = Some(partition.clone());
        match render_under(ctx, &one, root.clone()).await {
            Ok(script) => scripts.push((partition.clone(), script)),
            Err(e) if matches!(e.kind(), ErrorKind::Invalid | ErrorKind::Config) => {
                refused.insert(
                    partition.clone(),
                    PartitionForecast::refused(partition, e.to_string(), SPEC_CHECK),
                );
            }
            Err(e) => return Err(e),
        }
    }
    let mut answered = test_only(ctx, &scripts).await?;
    Ok(Forecast {
        partitions: partitions
            .iter()
            .filter_map(|p| refused.remove(p).or_else(|| answered.remove(p)))
            .collect(),
    })
}

/// One preflight of every partition of the list (none when all are known): the
/// partitions it could not use, and why. A failure of anything else is the error.
async fn learn_partitions(
    ctx: &Context<'_>,
    spec: &JobSpec,
    partitions: &[String],
) -> Result<BTreeMap<String, PartitionForecast>> {
    let mut refused = BTreeMap::new();
    if ctx.facts().ready_root(partitions).is_some() {
        return Ok(refused);
    }
    let _once = ctx.locks().preflight.lock().await;
    let mut base = spec.clone();
    base.datasets.clear();
    base.image = None;
    base.time = None;
    let report = preflight(ctx, Some(&base)).await?;
    for failed in report.failures() {
        let partition = (failed.kind == CheckKind::Partition)
            .then(|| failed.check.strip_prefix("partition "))
            .flatten()
            .filter(|p| partitions.iter().any(|q| q == p));
        match partition {
            Some(p) => {
                let why = format!("partition {p}: {}", failed.detail);
                refused.insert(
                    p.to_string(),
                    PartitionForecast::refused(p, why, SPEC_CHECK),
                );
            }
            None => {
                return Err(Error::Preflight {
                    kind: failed.kind,
                    check: failed.check.clone(),
                    message: failed.detail.clone(),
                    remedy: failed.remedy.clone(),
                })
            }
        }
    }
    Ok(refused)
}

/// `sbatch --test-only` of each partition's script, in one round trip.
async fn test_only(
    ctx: &Context<'_>,
    scripts: &[(String, String)],
) -> Result<BTreeMap<String, PartitionForecast>> {
    if scripts.is_empty() {
        return Ok(BTreeMap::new());
    }
    let mut stdin = Vec::new();
    for (_, script) in scripts {
        stdin.extend_from_slice(script.as_bytes());
        stdin.push(0);
    }
    let command = FORECAST
        .command(scripts.iter().map(|(p, _)| p.clone()))
        .stdin(stdin)
        .timeout(Duration::from_secs(120))
        .display_as(format!(
            "sbatch --test-only in {} partition(s)",
            scripts.len()
        ));
    let output = ctx.transport().run(&command).await?;
    let parts = round_trip::split(&output, scripts.len())?;
    Ok(scripts
        .iter()
        .zip(parts)
        .map(|((partition, _), part)| {
            let text = format!("{}\n{}", part.stderr_text(), part.stdout_text());
            (
                partition.clone(),
                read_test_only(partition, part.status, &text),
            )
        })
        .collect())
}

/// What `sbatch --test-only` said of one partition: `sbatch: Job 12 to start at
/// 2026-12-07T12:00:00 using 32 processors on nodes n1 in partition gpu` (a release may
/// add words before `using`), with the jobs it would preempt where it names them; any
/// other answer is why the job could not run there.
pub(crate) fn read_test_only(partition: &str, status: i32, text: &str) -> PartitionForecast {
    static WILL_RUN: OnceLock<Regex> = OnceLock::new();
    static PREEMPT: OnceLock<Regex> = OnceLock::new();
    let will_run = WILL_RUN.get_or_init(|| {
        Regex::new(
            r"Job \d+ to start at (\S+)(?:\s+\S+)*?\s+using \d+ processors on nodes (\S+) in partition (\S+)",
        )
        .expect("a valid pattern")
    });
    if let Some(found) = will_run.captures(text) {
        if let Some(at) = utc_time(&found[1]) {
            let mut answer =
                PartitionForecast::starts(partition, at, Some(found[2].to_string()), TEST_ONLY);
            let preempt = PREEMPT.get_or_init(|| {
                Regex::new(r"(?i)preempt\w*[^0-9\n]*((?:\d+[ ,]*)+)").expect("a valid pattern")
            });
            answer.preempts = preempt
                .captures_iter(text)
                .flat_map(|c| {
                    c[1].split(|ch: char| ch == ',' || ch.is_whitespace())
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect::<Vec<_>>()
                })
                .collect();
            return answer;
        }
    }
    let why = text
        .lines()
        .map(|l| {
            l.trim()
                .trim_start_matches("sbatch: error: ")
                .trim_start_matches("sbatch: ")
        })
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    let why = if why.is_empty() {
        format!("sbatch --test-only exited {status} and said nothing")
    } else {
        why
    };
    PartitionForecast::refused(partition, why, TEST_ONLY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_reads_with_its_nodes_and_a_refusal_with_its_words() {
        let ok = read_test_only(
            "gpu",
            0,
            "sbatch: Job 12 to start at 2026-12-07T12:00:00 using 32 processors on nodes n1 in partition gpu\n",
        );
        assert_eq!(
            ok.start_estimate.unwrap().to_rfc3339(),
            "2026-12-07T12:00:00+00:00"
        );
        assert_eq!(ok.nodes.as_deref(), Some("n1"));
        assert_eq!(ok.why_not, None);
        let refused = read_test_only(
            "nope",
            1,
            "sbatch: error: invalid partition specified: nope\nsbatch: error: Batch job submission failed: Invalid partition name specified\n",
        );
        assert_eq!(refused.start_estimate, None);
        assert!(refused
            .why_not
            .unwrap()
            .contains("Invalid partition name specified"));
    }
}
