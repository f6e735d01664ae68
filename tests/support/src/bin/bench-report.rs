//! `bench-report`: turn the figures the benches of one `make bench` run kept
//! (`$SLURM_RUN_BENCH_RESULTS/<idle|loaded>/<round>/*.json`, or one run's `*.json`) into
//! `BENCHMARKS.md` at the workspace root and its plot (`docs/benchmarks-poll.svg`).
//! `SLURM_RUN_BENCH_HOGS` says how many busy loops loaded the loaded runs. `SLURM_RUN_BENCH_STARTED` (seconds since
//! the epoch, set by the Makefile) gives the run's length. `SLURM_RUN_BENCH_BEFORE`, a
//! results folder of the same benches run on the code before a change, adds a column of
//! each figure then.

use slurm_run_testsupport::bench::{self, report};
use slurm_run_testsupport::workspace_root;

fn main() {
    let runs = bench::load_runs(&bench::results_dir());
    assert!(
        !runs.is_empty(),
        "no bench results in {}: run the benches first (make bench)",
        bench::results_dir().display()
    );
    let minutes = std::env::var("SLURM_RUN_BENCH_STARTED")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .and_then(|start| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?
                .as_secs();
            Some(now.saturating_sub(start) as f64 / 60.0)
        });
    let before = std::env::var_os("SLURM_RUN_BENCH_BEFORE")
        .and_then(|dir| {
            bench::load_runs(std::path::Path::new(&dir))
                .into_iter()
                .next()
        })
        .map(|run| run.areas)
        .unwrap_or_default();
    let root = workspace_root();
    let hogs = std::env::var("SLURM_RUN_BENCH_HOGS")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    let areas = &runs[0].areas;
    let mut series: Vec<bench::Series> = areas.iter().flat_map(|a| a.series.clone()).collect();
    // The library's own line of before the change, beside today's.
    series.extend(
        before
            .iter()
            .flat_map(|a| &a.series)
            .filter(|s| s.name.starts_with("slurm-run"))
            .map(|s| bench::Series {
                name: "slurm-run before the change".into(),
                points: s.points.clone(),
            }),
    );

    if !series.is_empty() {
        let path = root.join(report::PLOT);
        std::fs::create_dir_all(path.parent().expect("docs/")).expect("create docs/");
        report::plot(&series, &path).expect("draw the poll plot");
        println!("wrote {}", path.display());
    }
    let text = report::markdown(&runs, &before, minutes, hogs);
    let path = root.join("BENCHMARKS.md");
    std::fs::write(&path, text).expect("write BENCHMARKS.md");
    println!("wrote {} ({} areas)", path.display(), areas.len());
}
