//! The commands that take a job spec: `preflight`, `submit` and `render`.

use std::path::{Path, PathBuf};

use slurm_run::prelude::*;
use slurm_run::PROBE_LABEL;

use crate::args::Global;
use crate::connect::backend;
use crate::exit::{check_exit_code, BAD_INPUT, OK};
use crate::json;
use crate::output::Out;
use crate::progress::Progress;

/// `preflight [SPEC]`: one line per check; the exit status of the first failure.
pub(crate) async fn preflight(global: &Global, spec: Option<&PathBuf>, out: &Out) -> Result<u8> {
    let spec = spec.map(JobSpec::from_path).transpose()?;
    let backend = backend(global)?;
    let progress = Progress::start("preflight");
    let report = backend.preflight(spec.as_ref()).await?;
    progress.finish();
    out.preflight(&report.checks);
    let code = report
        .failures()
        .next()
        .map_or(OK, |failed| check_exit_code(failed.kind));
    Ok(code)
}

/// `submit SPEC [--after ID[:COND]]... [--probe P]`: submit exactly once, print the record.
pub(crate) async fn submit(
    global: &Global,
    spec: &Path,
    after: &[String],
    probe: Option<NcclProbe>,
    over_budget: bool,
    out: &Out,
) -> Result<u8> {
    let mut spec = JobSpec::from_path(spec)?;
    if let Some(probe) = probe {
        spec.nccl_probe = Some(probe);
    }
    let refused = tokio::task::block_in_place(|| {
        super::usage::check_budgets(global, &spec, over_budget, out)
    })?;
    if let Some(code) = refused {
        return Ok(code);
    }
    let after = after
        .iter()
        .map(|a| a.parse::<Dependency>())
        .collect::<Result<Vec<_>>>()?;
    let backend = backend(global)?;
    let progress = Progress::start(&format!("submitting {}", spec.name));
    backend.on_code_progress(progress.code_upload());
    let options = SubmitOptions {
        after,
        ..SubmitOptions::default()
    };
    let record = backend.submit(&spec, options).await?;
    progress.finish();
    if out.json {
        out.line(&json::job(&record, None).to_string());
        return Ok(OK);
    }
    out.line(&format!(
        "submitted {} as SLURM job {}; results in {}",
        out.style.bold(record.id().as_str()),
        record
            .backend_ref()
            .as_ref()
            .map(|r| r.native_id.clone())
            .unwrap_or_else(|| "-".into()),
        record.results_dir()
    ));
    let mut probe = None;
    for dependency in record.after() {
        if let Ok(parent) = backend.record(&dependency.job).await {
            if parent.labels().contains_key(PROBE_LABEL) {
                probe = Some(parent);
                break;
            }
        }
    }
    if let Some(probe) = probe {
        out.line(&format!(
            "it waits on the cluster for NCCL probe {} and runs with the knobs it finds",
            probe.id()
        ));
    }
    out.line(&format!("follow it with: slurmctl watch {}", record.id()));
    Ok(OK)
}

/// `submit SPEC --forecast`: for each partition of the spec's list, when and where the
/// job would start, or why it could not run there; nothing is submitted. Exit 2 when no
/// partition can run it.
pub(crate) async fn forecast(global: &Global, spec: &Path, out: &Out) -> Result<u8> {
    let spec = JobSpec::from_path(spec)?;
    let backend = backend(global)?;
    let progress = Progress::start(&format!("forecasting {}", spec.name));
    let forecast = backend.forecast(&spec).await?;
    progress.finish();
    out.forecast(&forecast);
    Ok(match forecast.soonest() {
        Some(_) => OK,
        None => BAD_INPUT,
    })
}

/// `render SPEC`: the batch script a submit would write (secrets are never in it).
pub(crate) async fn render(global: &Global, spec: &Path, out: &Out) -> Result<u8> {
    let spec = JobSpec::from_path(spec)?;
    let backend = backend(global)?;
    let progress = Progress::start("rendering");
    let script = backend.render_script(&spec).await?;
    progress.finish();
    if out.json {
        let id = script
            .lines()
            .find_map(|l| l.strip_prefix("#SBATCH --job-name="))
            .unwrap_or_default();
        out.line(&json::script(id, &spec.name, &script).to_string());
    } else {
        out.raw(&script);
    }
    Ok(OK)
}
