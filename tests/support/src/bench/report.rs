//! `BENCHMARKS.md` from the runs one `make bench` kept: one table per area (the figure,
//! its baselines, the ratios, the aim) from its first idle run, each figure's ratio over
//! every run on the idle and on the loaded machine (its [`Spread`]: an aim is met only
//! when every run of both met it), the machine it ran on, and the plot of a poll's cost
//! against the number of jobs (SVG, drawn with plotters).

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;

use super::{Area, Row, Run, Series, CONDITIONS};

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

/// One figure's ratio to its bare command in every run that measured it, by condition.
#[derive(Debug, Clone, PartialEq)]
pub struct Spread {
    /// The area's name.
    pub area: String,
    /// The figure.
    pub figure: String,
    /// Its aim (the largest ratio), if it has one.
    pub aim: Option<f64>,
    /// Per condition of [`CONDITIONS`], in order: the ratios of its runs, in round order.
    pub ratios: Vec<(String, Vec<f64>)>,
}

impl Spread {
    /// The ratios of the runs under `condition` (empty when none measured it).
    pub fn of(&self, condition: &str) -> &[f64] {
        self.ratios
            .iter()
            .find(|(c, _)| c == condition)
            .map_or(&[][..], |(_, r)| r)
    }

    /// Whether the aim is met: only when every condition was measured and every run of
    /// each met it (`None` without an aim).
    pub fn aim_met(&self) -> Option<bool> {
        let aim = self.aim?;
        Some(CONDITIONS.iter().all(|c| {
            let runs = self.of(c);
            !runs.is_empty() && runs.iter().all(|r| *r <= aim)
        }))
    }

    /// The aim's cell: met or not, and where it failed.
    pub fn verdict(&self) -> String {
        let Some(aim) = self.aim else {
            return "-".into();
        };
        if self.aim_met() == Some(true) {
            return format!("≤ {} met (every run, idle and loaded)", ratio(aim));
        }
        let why: Vec<String> = CONDITIONS
            .iter()
            .map(|c| {
                let runs = self.of(c);
                let above = runs.iter().filter(|r| **r > aim).count();
                match runs.len() {
                    0 => format!("{c}: not measured"),
                    n => format!("{c}: {above} of {n} runs above"),
                }
            })
            .collect();
        format!("≤ {} **not met** ({})", ratio(aim), why.join("; "))
    }
}

/// The median of `values` (the mean of the middle two of an even count); `None` if empty.
fn median_of(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// `1.27x (1.19x–1.35x, 3 runs)`: the median ratio of some runs and their range.
fn spread_cell(ratios: &[f64]) -> String {
    let Some(mid) = median_of(ratios) else {
        return "-".into();
    };
    if ratios.len() == 1 {
        return format!("{} (1 run)", ratio(mid));
    }
    let low = ratios.iter().copied().fold(f64::MAX, f64::min);
    let high = ratios.iter().copied().fold(0.0, f64::max);
    format!(
        "{} ({}–{}, {} runs)",
        ratio(mid),
        ratio(low),
        ratio(high),
        ratios.len()
    )
}

/// The spread of every figure with a ratio that more than one run measured, in the
/// order of the first run's areas and rows.
pub fn spreads(runs: &[Run]) -> Vec<Spread> {
    let mut out: Vec<Spread> = Vec::new();
    for run in runs {
        for area in &run.areas {
            for row in &area.rows {
                let Some(r) = row.ratio() else { continue };
                let at = out
                    .iter()
                    .position(|s| s.area == area.name && s.figure == row.figure);
                let spread = match at {
                    Some(i) => &mut out[i],
                    None => {
                        out.push(Spread {
                            area: area.name.clone(),
                            figure: row.figure.clone(),
                            aim: row.aim,
                            ratios: CONDITIONS
                                .iter()
                                .map(|c| (c.to_string(), Vec::new()))
                                .collect(),
                        });
                        out.last_mut().expect("just pushed")
                    }
                };
                if let Some((_, ratios)) =
                    spread.ratios.iter_mut().find(|(c, _)| *c == run.condition)
                {
                    ratios.push(r);
                }
            }
        }
    }
    out.retain(|s| s.ratios.iter().map(|(_, r)| r.len()).sum::<usize>() > 1);
    out
}

/// The table of an area's spreads: each figure's ratio on the idle and on the loaded
/// machine over its runs, and its aim; empty when none of its figures has one.
pub fn spread_table(area: &str, spreads: &[Spread]) -> String {
    let mine: Vec<&Spread> = spreads.iter().filter(|s| s.area == area).collect();
    if mine.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Over every run: the ratio to the bare command, median (lowest–highest) of the runs \
         on the idle machine and on the machine loaded by the run's own CPU hogs.\n"
    );
    let _ = writeln!(out, "| figure | idle | loaded | aim |");
    let _ = writeln!(out, "|---|---|---|---|");
    for s in mine {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            s.figure,
            spread_cell(s.of(CONDITIONS[0])),
            spread_cell(s.of(CONDITIONS[1])),
            s.verdict()
        );
    }
    out.push('\n');
    out
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
/// before a change, see [`markdown`]), a column of each figure's time then. A figure
/// with a spread over several runs (`spreads`) takes its aim's verdict from it.
pub fn table(area: &Area, before: Option<&Area>, spreads: &[Spread]) -> String {
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
        let spread = spreads
            .iter()
            .find(|s| s.area == area.name && s.figure == row.figure && s.aim.is_some());
        let aim = match (row.aim, row.aim_met(), spread) {
            (Some(_), _, Some(spread)) => spread.verdict(),
            (Some(aim), Some(true), None) => format!("≤ {} met (one run)", ratio(aim)),
            (Some(aim), _, None) => format!("≤ {} **not met**", ratio(aim)),
            (None, _, _) => "-".into(),
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
    out.push_str(&spread_table(&area.name, spreads));
    for note in &area.notes {
        let _ = writeln!(out, "{note}\n");
    }
    out
}

/// The whole report: the tables of the first idle run of `runs`, each with its figures'
/// spread over all of them. `minutes` is how long the run took, `hogs` how many busy
/// loops loaded the machine. `before` holds the areas
/// of the same benches run on the code before a change (their own ratio to their own
/// bare command in brackets), shown beside each figure when given.
pub fn markdown(runs: &[Run], before: &[Area], minutes: Option<f64>, hogs: Option<u32>) -> String {
    let areas: &[Area] = runs.first().map_or(&[][..], |r| &r.areas);
    let spreads = spreads(runs);
    let mut out = String::from(
        "# slurm-run benchmarks\n\n\
         Written by `make bench` (the benches in `benches/` against the local test bed, then\n\
         `bench-report`); do not edit by hand. Every figure of slurm-run stands beside the same\n\
         work done the bare way, measured in the same run on the same machine: the scheduler's\n\
         own command over the same open SSH connection (the physical limit: *ratio* is\n\
         slurm-run's time over it, lower is better), and the reference's way, one fresh `ssh`\n\
         process per command (*faster by* is its time over slurm-run's). Times are medians\n\
         of the first run on the otherwise idle machine; under each table, the ratios of\n\
         every run, on the idle machine and on one loaded by busy loops of the run's own\n\
         beside the test bed, with their spread: an aim is met only when every run of both\n\
         met it.\n\
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
    for condition in CONDITIONS {
        let count = runs.iter().filter(|r| r.condition == condition).count();
        let _ = writeln!(out, "| runs on the {condition} machine | {count} |");
    }
    if let Some(hogs) = hogs {
        let _ = writeln!(out, "| busy loops in the loaded runs | {hogs} |");
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
        out.push_str(&table(area, then, &spreads));
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
        let text = table(&area, None, &[]);
        assert!(text.contains("| 12.0 ms | 10.0 ms (squeue) | 1.20x | ≤ 1.10x **not met** | 24.0 s (ssh per job, extrapolated) | 2000x |"), "{text}");
        // With the figures of before a change: its time and its own ratio beside.
        let mut then = area.clone();
        then.rows[0].ms = 30.0;
        let text = table(&area, Some(&then), &[]);
        assert!(
            text.contains("| 12.0 ms | 30.0 ms (3.00x) | 10.0 ms (squeue) | 1.20x |"),
            "{text}"
        );
    }

    fn run(condition: &str, round: u32, ratios: &[(&str, f64)]) -> Run {
        let rows = ratios
            .iter()
            .map(|(figure, r)| Row {
                figure: figure.to_string(),
                ms: 10.0 * r,
                bare: Some(Baseline {
                    what: "squeue".into(),
                    ms: 10.0,
                    extrapolated: false,
                }),
                fresh: None,
                aim: Some(1.2),
                note: String::new(),
            })
            .collect();
        Run {
            condition: condition.into(),
            round,
            areas: vec![Area {
                rows,
                ..Area::new("poll", "bare", "fresh ssh")
            }],
        }
    }

    #[test]
    fn an_aim_is_met_only_when_every_run_idle_and_loaded_met_it() {
        let runs = [
            run("idle", 1, &[("poll of 1", 1.1), ("poll of 100", 1.1)]),
            run("loaded", 1, &[("poll of 1", 1.15), ("poll of 100", 1.3)]),
            run("idle", 2, &[("poll of 1", 1.0), ("poll of 100", 1.0)]),
            run("loaded", 2, &[("poll of 1", 1.19), ("poll of 100", 1.1)]),
        ];
        let spreads = spreads(&runs);
        assert_eq!(spreads.len(), 2);
        assert_eq!(spreads[0].of("idle"), &[1.1, 1.0]);
        assert_eq!(spreads[0].aim_met(), Some(true));
        assert_eq!(spreads[1].aim_met(), Some(false));
        assert!(spreads[1].verdict().contains("loaded: 1 of 2 runs above"));
        assert!(spreads[1].verdict().contains("idle: 0 of 2 runs above"));
        let text = spread_table("poll", &spreads);
        assert!(
            text.contains(
                "| poll of 100 | 1.05x (1.00x–1.10x, 2 runs) | 1.20x (1.10x–1.30x, 2 runs) |"
            ),
            "{text}"
        );
        // The main table takes the aim's verdict from the spread, not from its one run.
        let table = table(&runs[0].areas[0], None, &spreads);
        assert!(
            table.contains("≤ 1.20x met (every run, idle and loaded)"),
            "{table}"
        );
        assert!(
            table.contains(
                "≤ 1.20x **not met** (idle: 0 of 2 runs above; loaded: 1 of 2 runs above)"
            ),
            "{table}"
        );
        // Idle runs alone never meet an aim: the loaded machine was not measured.
        let idle_only = spreads_of(&runs[..1], &runs[2..3]);
        assert_eq!(idle_only[0].aim_met(), Some(false));
        assert!(idle_only[0].verdict().contains("loaded: not measured"));
    }

    fn spreads_of(a: &[Run], b: &[Run]) -> Vec<Spread> {
        spreads(&[a, b].concat())
    }

    #[test]
    fn runs_load_by_condition_and_round_and_a_plain_folder_is_one_idle_run() {
        let dir = tempfile::tempdir().unwrap();
        let save = |sub: &str, figure: &str| {
            let area = Area {
                rows: vec![Row::new(figure, std::time::Duration::from_millis(5))],
                ..Area::new("poll", "bare", "fresh")
            };
            let folder = dir.path().join(sub);
            std::fs::create_dir_all(&folder).unwrap();
            std::fs::write(
                folder.join("poll.json"),
                serde_json::to_string(&area).unwrap(),
            )
            .unwrap();
        };
        save("loaded/1", "c");
        save("idle/10", "b");
        save("idle/2", "a");
        let runs = crate::bench::load_runs(dir.path());
        let seen: Vec<(&str, u32, &str)> = runs
            .iter()
            .map(|r| {
                (
                    r.condition.as_str(),
                    r.round,
                    r.areas[0].rows[0].figure.as_str(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [("idle", 2, "a"), ("idle", 10, "b"), ("loaded", 1, "c")]
        );
        let plain = tempfile::tempdir().unwrap();
        let area = Area::new("poll", "bare", "fresh");
        std::fs::write(
            plain.path().join("poll.json"),
            serde_json::to_string(&area).unwrap(),
        )
        .unwrap();
        let runs = crate::bench::load_runs(plain.path());
        assert_eq!((runs.len(), runs[0].condition.as_str()), (1, "idle"));
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
