//! What runs cost, from the record store alone (no remote call): `usage` (a table, JSON
//! Lines or an SVG of GPU-hours), `timeline` (an SVG of runs on one time axis), and the
//! budgets a submit is checked against.

use std::path::{Path, PathBuf};

use slurm_run::prelude::*;
use slurm_run::{
    budget_use, check_budgets as refused_by_budget, format_hours, parse_since, summarise,
    timeline_svg, usage_svg, Budgets, GroupBy, UsageRow,
};

use crate::args::{parse_ids, Global};
use crate::connect;
use crate::exit::{BAD_INPUT, OK};
use crate::output::Out;

/// The environment variable naming the budgets file (YAML with a `budgets:` list).
pub(crate) const BUDGETS_VAR: &str = "SLURM_RUN_BUDGETS";

/// `usage [--since D] [--by KEY] [--svg FILE]`: GPU-hours and the rest by group, with
/// totals, and each budget's use.
pub(crate) fn usage(
    global: &Global,
    since: Option<&str>,
    by: &str,
    svg: Option<&Path>,
    out: &Out,
) -> Result<u8> {
    let by: GroupBy = by.parse()?;
    let since = since
        .map(parse_since)
        .transpose()?
        .map(|span| chrono::Utc::now() - span);
    let store = connect::records(global, &connect::state_dir(global)?)?.open()?;
    let filter = RecordFilter {
        submitted_since: since,
        ..RecordFilter::any()
    };
    // One read of the store: every record when budgets need their own windows (the
    // span's records then picked from them), else the span's alone.
    let budgets = budgets(global)?;
    let (records, uses) = match &budgets {
        Some(budgets) => {
            let mut records = store.list(&RecordFilter::any())?;
            let uses = budget_use(budgets, &records, chrono::Utc::now());
            records.retain(|r| filter.matches(r));
            (records, uses)
        }
        None => (store.list(&filter)?, Vec::new()),
    };
    let report = summarise(&records, &by);
    if let Some(path) = svg {
        write_file(path, &usage_svg(&records, &by))?;
    }
    if out.json {
        for row in report.rows.iter().chain([&report.total]) {
            let mut object = serde_json::to_value(row).map_err(json_error)?;
            object["by"] = serde_json::json!(report.by);
            out.line(&object.to_string());
        }
        for budget in &uses {
            let mut object = serde_json::to_value(budget).map_err(json_error)?;
            object["budget"] = serde_json::json!(budget.name);
            out.line(&object.to_string());
        }
        return Ok(OK);
    }
    out.line(&format!(
        "{:<28} {:>6} {:>10} {:>10} {:>9} {:>9} {:>8}",
        report.by, "jobs", "GPU-h", "CPU-h", "wait p50", "wait p90", "wall"
    ));
    for row in report.rows.iter().chain([&report.total]) {
        out.line(&table_row(row));
    }
    if report.total.unaccounted > 0 || report.total.gpu_unaccounted > 0 {
        out.line(&format!(
            "not accounted: {} record(s) without usage yet (running, or never ran), {} without GPU figures; counted as unknown, not zero",
            report.total.unaccounted, report.total.gpu_unaccounted
        ));
    }
    for budget in &uses {
        out.line(&format!(
            "budget {}: {} of {} GPU-hours used over {}, {} left",
            budget.name,
            format_hours(budget.used),
            format_hours(budget.gpu_hours),
            budget.window,
            format_hours(budget.left)
        ));
    }
    if let Some(path) = svg {
        out.line(&format!("wrote {}", path.display()));
    }
    Ok(OK)
}

/// One line of the usage table.
fn table_row(row: &UsageRow) -> String {
    let hours = |h: Option<f64>| h.map_or("-".to_string(), format_hours);
    let secs = |s: Option<u64>| s.map_or("-".to_string(), |s| format!("{s}s"));
    let wall = row
        .wall_used
        .map_or("-".to_string(), |w| format!("{:.0}%", w * 100.0));
    format!(
        "{:<28} {:>6} {:>10} {:>10} {:>9} {:>9} {:>8}",
        row.key,
        row.jobs,
        hours(row.gpu_hours),
        hours(row.cpu_hours),
        secs(row.queue_wait_s),
        secs(row.queue_wait_p90_s),
        wall
    )
}

/// `timeline ID... --svg FILE`: each record's runs (segments, tasks, roles) as bars on
/// one time axis.
pub(crate) fn timeline(global: &Global, ids: &[String], svg: &Path, out: &Out) -> Result<u8> {
    let ids = parse_ids(ids)?;
    let store = connect::records(global, &connect::state_dir(global)?)?.open()?;
    let mut records = Vec::with_capacity(ids.len());
    for id in &ids {
        records.push(store.get(id)?);
    }
    write_file(svg, &timeline_svg(&records))?;
    if out.json {
        out.line(
            &serde_json::json!({"svg": svg.display().to_string(), "records": ids}).to_string(),
        );
    } else {
        out.line(&format!(
            "wrote {} ({} record(s))",
            svg.display(),
            records.len()
        ));
    }
    Ok(OK)
}

/// The budgets the configuration names: `SLURM_RUN_BUDGETS`, else the `budgets:` of
/// the clusters file (`SLURM_RUN_CLUSTERS`); `None` when neither is set.
pub(crate) fn budgets(global: &Global) -> Result<Option<Budgets>> {
    let path = global
        .lookup(BUDGETS_VAR)
        .or_else(|| global.lookup("SLURM_RUN_CLUSTERS"))
        .filter(|p| !p.is_empty());
    path.map(|p| Budgets::from_file(&PathBuf::from(p)))
        .transpose()
}

/// Refuse `spec` when its worst case exceeds what a budget has left (unless
/// `over_budget`); the exit status to stop with, if any.
pub(crate) fn check_budgets(
    global: &Global,
    spec: &JobSpec,
    over_budget: bool,
    out: &Out,
) -> Result<Option<u8>> {
    let Some(budgets) = budgets(global)? else {
        return Ok(None);
    };
    let store = connect::records(global, &connect::state_dir(global)?)?.open()?;
    let records = store.list(&RecordFilter::any())?;
    match refused_by_budget(&budgets, &records, spec, chrono::Utc::now()) {
        Ok(()) => Ok(None),
        Err(refusal) if over_budget => {
            eprintln!("warning: {refusal} (going ahead: --over-budget)");
            Ok(None)
        }
        Err(refusal) => {
            out.error(&Error::invalid("budget", refusal.to_string()), BAD_INPUT);
            Ok(Some(BAD_INPUT))
        }
    }
}

/// Write `text` to `path`, an error naming the file.
fn write_file(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| {
        Error::invalid(
            "--svg",
            format!("cannot write {}: {e}; give a writable path", path.display()),
        )
    })
}

/// A JSON encoding failure (cannot happen for these plain rows) as an error.
fn json_error(error: serde_json::Error) -> Error {
    Error::invalid("--json", error.to_string())
}
