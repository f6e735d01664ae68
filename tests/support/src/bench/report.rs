//! `BENCHMARKS.md` from the areas one `make bench` run kept: one table per area (the
//! figure, its baselines, the ratios, the aim), the machine it ran on, and the plot of
//! a poll's cost against the number of jobs (SVG, drawn with plotters).

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;

use super::{Area, Row, Series};

/// The areas in the report's order.
pub const ORDER: [&str; 7] = [
    "transport",
    "render",
    "submit",
    "poll",
    "cancel",
    "records",
    "resume",
];

/// The plot's file, relative to the report.
pub const PLOT: &str = "docs/benchmarks-poll.svg";

/// `1.2 ms`, `35.1 s`: a time in a readable unit.
pub fn time(ms: f64) -> String {
    if ms >= 10_000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else if ms >= 1.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{:.0} µs", ms * 1000.0)
    }
}

fn ratio(r: f64) -> String {
    if r >= 100.0 {
        format!("{r:.0}x")
    } else {
        format!("{r:.2}x")
    }
}

/// One row as the benches print it while they run.
pub fn row_line(row: &Row) -> String {
    let mut line = format!("{}: {}", row.figure, time(row.ms));
    if let (Some(bare), Some(r)) = (&row.bare, row.ratio()) {
        let _ = write!(line, "; {} {} ({})", bare.what, time(bare.ms), ratio(r));
    }
    if let (Some(fresh), Some(s)) = (&row.fresh, row.speedup()) {
        let _ = write!(
            line,
            "; {} {} ({} faster)",
            fresh.what,
            time(fresh.ms),
            ratio(s)
        );
    }
    if let Some(aim) = row.aim {
        let _ = write!(line, "; aim {}", ratio(aim));
    }
    if !row.note.is_empty() {
        let _ = write!(line, "; {}", row.note);
    }
    line
}

fn cell_baseline(b: &Option<super::Baseline>) -> String {
    match b {
        Some(b) if b.extrapolated => format!("{} ({}, extrapolated)", time(b.ms), b.what),
        Some(b) => format!("{} ({})", time(b.ms), b.what),
        None => "-".into(),
    }
}

/// The markdown table of one area; with `before` (the same area measured on the code
/// before a change, see [`markdown`]), a column of each figure's time then.
pub fn table(area: &Area, before: Option<&Area>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## {}\n", area.name);
    let (before_head, before_rule) = match before {
        Some(_) => (" before the change |", "---|"),
        None => ("", ""),
    };
    let _ = writeln!(
        out,
        "| figure | slurm-run |{before_head} {} | ratio | aim | {} | slurm-run is faster by | notes |",
        area.bare_label, area.fresh_label
    );
    let _ = writeln!(out, "|---|---|{before_rule}---|---|---|---|---|---|");
    for row in &area.rows {
        let then = match before {
            Some(before) => {
                let cell = before
                    .rows
                    .iter()
                    .find(|b| b.figure == row.figure)
                    .map(|b| match b.ratio() {
                        Some(r) => format!("{} ({})", time(b.ms), ratio(r)),
                        None => time(b.ms),
                    })
                    .unwrap_or_else(|| "-".into());
                format!(" {cell} |")
            }
            None => String::new(),
        };
        let aim = match (row.aim, row.aim_met()) {
            (Some(aim), Some(true)) => format!("≤ {} met", ratio(aim)),
            (Some(aim), _) => format!("≤ {} **not met**", ratio(aim)),
            (None, _) => "-".into(),
        };
        let _ = writeln!(
            out,
            "| {} | {} |{then} {} | {} | {} | {} | {} | {} |",
            row.figure,
            time(row.ms),
            cell_baseline(&row.bare),
            row.ratio().map(ratio).unwrap_or_else(|| "-".into()),
            aim,
            cell_baseline(&row.fresh),
            row.speedup().map(ratio).unwrap_or_else(|| "-".into()),
            row.note,
        );
    }
    out.push('\n');
    for note in &area.notes {
        let _ = writeln!(out, "{note}\n");
    }
    out
}

/// The whole report. `minutes` is how long the run took. `before` holds the areas of the
/// same benches run on the code before a change (their own ratio to their own bare
/// command in brackets), shown beside each figure when given.
pub fn markdown(areas: &[Area], before: &[Area], minutes: Option<f64>) -> String {
    let mut out = String::from(
        "# slurm-run benchmarks\n\n\
         Written by `make bench` (the benches in `benches/` against the local test bed, then\n\
         `bench-report`); do not edit by hand. Every figure of slurm-run stands beside the same\n\
         work done the bare way, measured in the same run on the same machine: the scheduler's\n\
         own command over the same open SSH connection (the physical limit: *ratio* is\n\
         slurm-run's time over it, lower is better), and the reference's way, one fresh `ssh`\n\
         process per command (*faster by* is its time over slurm-run's). Times are medians.\n\
         The test bed runs slurmctld, slurmdbd, two slurmd and sshd on the same machine as\n\
         the client, so absolute times say little about a real cluster; the ratios are what\n\
         a rerun on another machine should reproduce.\n\n",
    );
    let mut machine = super::machine();
    for area in areas {
        for fact in &area.machine {
            if !machine.contains(fact) {
                machine.push(fact.clone());
            }
        }
    }
    let _ = writeln!(out, "## The machine\n");
    let _ = writeln!(out, "| | |\n|---|---|");
    for (name, value) in &machine {
        let _ = writeln!(out, "| {name} | {value} |");
    }
    if let Some(minutes) = minutes {
        let _ = writeln!(out, "| `make bench` took | {minutes:.1} min |");
    }
    out.push('\n');
    if !before.is_empty() {
        let _ = writeln!(
            out,
            "*Before the change*: the same benches run on the code before it, just before \
             this run, on the same test bed (`SLURM_RUN_BENCH_BEFORE`); in brackets that \
             run's ratio to its own bare command.\n"
        );
    }
    for area in areas {
        let then = before.iter().find(|b| b.name == area.name);
        out.push_str(&table(area, then));
        if area.series.iter().any(|s| !s.points.is_empty()) {
            let _ = writeln!(
                out,
                "![The cost of one poll against the number of jobs: slurm-run, the bare squeue and one ssh per job]({PLOT})\n"
            );
        }
    }
    out
}

/// Draw `series` (jobs against milliseconds, both logarithmic) to an SVG file at `path`.
/// Extrapolated points are drawn hollow.
pub fn plot(series: &[Series], path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let points = series.iter().flat_map(|s| s.points.iter());
    let (mut x_max, mut y_min, mut y_max) = (1.0f64, f64::MAX, 0.0f64);
    for (x, y, _) in points {
        x_max = x_max.max(*x);
        y_min = y_min.min(*y);
        y_max = y_max.max(*y);
    }
    if y_max <= 0.0 {
        return Err("nothing to plot".into());
    }
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("One poll of N tracked jobs", ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (0.8f64..x_max * 1.25).log_scale(),
            ((y_min * 0.6).max(0.01)..y_max * 1.6).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("tracked jobs")
        .y_desc("milliseconds (log)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| {
            if *y >= 1.0 {
                format!("{y:.0}")
            } else {
                format!("{y:.2}")
            }
        })
        .draw()?;
    let colors = [BLUE, RED, GREEN, MAGENTA, CYAN, BLACK];
    for (s, color) in series.iter().zip(colors.iter().cycle()) {
        let color = *color;
        let line: Vec<(f64, f64)> = s.points.iter().map(|(x, y, _)| (*x, *y)).collect();
        chart
            .draw_series(LineSeries::new(line, color.stroke_width(2)))?
            .label(s.name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(s.points.iter().map(|(x, y, extrapolated)| {
            let style = if *extrapolated {
                color.stroke_width(2)
            } else {
                color.filled()
            };
            Circle::new((*x, *y), 4, style)
        }))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::Baseline;

    #[test]
    fn a_row_shows_its_ratio_and_whether_the_aim_is_met() {
        let row = Row {
            figure: "poll of 100 pending jobs".into(),
            ms: 12.0,
            bare: Some(Baseline {
                what: "squeue".into(),
                ms: 10.0,
                extrapolated: false,
            }),
            fresh: Some(Baseline {
                what: "ssh per job".into(),
                ms: 24_000.0,
                extrapolated: true,
            }),
            aim: Some(1.1),
            note: String::new(),
        };
        let area = Area {
            rows: vec![row],
            ..Area::new("poll", "bare", "fresh ssh")
        };
        let text = table(&area, None);
        assert!(text.contains("| 12.0 ms | 10.0 ms (squeue) | 1.20x | ≤ 1.10x **not met** | 24.0 s (ssh per job, extrapolated) | 2000x |"), "{text}");
        // With the figures of before a change: its time and its own ratio beside.
        let mut then = area.clone();
        then.rows[0].ms = 30.0;
        let text = table(&area, Some(&then));
        assert!(
            text.contains("| 12.0 ms | 30.0 ms (3.00x) | 10.0 ms (squeue) | 1.20x |"),
            "{text}"
        );
    }

    #[test]
    fn the_plot_is_an_svg_with_every_series() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("poll.svg");
        let series = vec![
            Series {
                name: "slurm-run".into(),
                points: vec![(1.0, 10.0, false), (10_000.0, 200.0, false)],
            },
            Series {
                name: "one ssh per job".into(),
                points: vec![(1.0, 250.0, false), (10_000.0, 2_500_000.0, true)],
            },
        ];
        plot(&series, &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..100.min(svg.len())]);
        assert!(svg.contains("slurm-run") && svg.contains("one ssh per job"));
    }
}
