//! The text of `why` (why each job waits, with its evidence and remedy) and of a
//! forecast (one line per partition, the soonest marked).

use slurm_run::{Forecast, WaitAnswer, WaitCategory};

use crate::text::Style;

/// The lines of one job's answer.
pub(crate) fn wait_answer(style: Style, answer: &WaitAnswer) -> Vec<String> {
    let job = answer
        .native_id
        .as_deref()
        .map(|j| format!(" (SLURM job {j})"))
        .unwrap_or_default();
    let reason = answer
        .reason
        .as_deref()
        .map(|r| format!(" [{r}]"))
        .unwrap_or_default();
    let mut lines = vec![format!(
        "{}{job} {}: {}{reason}",
        style.bold(answer.id.as_str()),
        style.state(answer.state, answer.state.as_str()),
        style.bold(answer.category.as_str()),
    )];
    lines.push(format!("  {}", answer.explanation));
    if answer.category.waits() {
        lines.push(
            match (&answer.start_estimate, &answer.start_estimate_source) {
                (Some(at), source) => format!(
                    "  expected start: {}{}",
                    at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    source
                        .as_deref()
                        .map(|s| format!(" ({s})"))
                        .unwrap_or_default()
                ),
                (None, _) => {
                    "  expected start: none yet (the scheduler has no estimate)".to_string()
                }
            },
        );
    }
    let evidence = &answer.evidence;
    if let (Some(partition), Some(nodes)) = (&evidence.partition, &evidence.nodes) {
        lines.push(format!(
            "  partition {partition}: {} idle, {} mixed, {} allocated, {} drained, {} down",
            nodes.idle, nodes.mixed, nodes.allocated, nodes.drained, nodes.down
        ));
    }
    if let (Some(count), Some(ahead)) = (evidence.jobs_ahead_count, &evidence.jobs_ahead) {
        if answer.category == WaitCategory::Priority || count > 0 {
            let first: Vec<String> = ahead
                .iter()
                .map(|a| format!("{} (priority {})", a.job, a.priority))
                .collect();
            lines.push(format!(
                "  jobs ahead: {count}{}",
                if first.is_empty() {
                    String::new()
                } else {
                    format!(", first {}", first.join(", "))
                }
            ));
        }
    }
    if let Some(limit) = &evidence.limit {
        let number = |n: Option<u64>| n.map_or("?".to_string(), |n| n.to_string());
        lines.push(format!(
            "  limit {}{}: used {} of {}",
            limit.name,
            limit
                .set_on
                .as_deref()
                .map(|s| format!(" ({s})"))
                .unwrap_or_default(),
            number(limit.used),
            number(limit.max)
        ));
    }
    for parent in evidence.parents.iter().flatten() {
        lines.push(format!(
            "  waits for {} {}{}",
            parent.condition,
            parent
                .record
                .as_ref()
                .map_or(format!("job {}", parent.job), |r| format!(
                    "{r} (SLURM job {})",
                    parent.job
                )),
            parent
                .state
                .as_deref()
                .map(|s| format!(", {s}"))
                .unwrap_or_default()
        ));
    }
    if let Some(remedy) = &answer.remedy {
        lines.push(format!("  remedy: {remedy}"));
    }
    lines
}

/// One line per partition: its start and nodes, or why it cannot run the job; the
/// soonest marked `<- soonest`.
pub(crate) fn forecast(style: Style, forecast: &Forecast) -> Vec<String> {
    let soonest = forecast.soonest().map(|p| p.partition.clone());
    let width = forecast
        .partitions
        .iter()
        .map(|p| p.partition.len())
        .max()
        .unwrap_or(0);
    let mut lines: Vec<String> = forecast
        .partitions
        .iter()
        .map(|p| {
            let name = format!("{:width$}", p.partition);
            match (&p.why_not, &p.start_estimate) {
                (Some(why), _) => format!("{name}  cannot run: {why}"),
                (None, Some(at)) => format!(
                    "{name}  starts {} on {}{}",
                    at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    p.nodes.as_deref().unwrap_or("?"),
                    if soonest.as_deref() == Some(p.partition.as_str()) {
                        format!("  {}", style.bold("<- soonest"))
                    } else {
                        String::new()
                    }
                ),
                (None, None) => format!("{name}  no start estimate"),
            }
        })
        .collect();
    if soonest.is_none() {
        lines.push("no partition of the list can run this job: nothing was submitted".to_string());
    } else {
        lines.push("nothing was submitted".to_string());
    }
    lines
}
