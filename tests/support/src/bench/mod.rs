//! What the benches share: the figures they measure ([`Area`], [`Row`], [`Series`]),
//! kept as JSON between the bench binaries of one `make bench` run and turned into
//! `BENCHMARKS.md` and its plot by [`report`]; medians, the machine's description, the
//! resident memory, and the heap counted by [`heap`].
//!
//! Every figure is a time (milliseconds) for the library and, where one exists, the
//! same work done the bare way measured in the same run: the scheduler's own command
//! over the same open connection, and the reference's way (a fresh `ssh` per command).

pub mod cluster;
pub mod heap;
pub mod report;

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A baseline a figure is compared with.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Baseline {
    /// What was run, in a few words (`squeue --jobs=<100 ids>`).
    pub what: String,
    /// Its time, in milliseconds.
    pub ms: f64,
    /// Whether the time is extrapolated from a sample rather than measured whole.
    #[serde(default)]
    pub extrapolated: bool,
}

impl Baseline {
    /// A measured baseline.
    pub fn measured(what: impl Into<String>, time: Duration) -> Self {
        Baseline {
            what: what.into(),
            ms: ms(time),
            extrapolated: false,
        }
    }

    /// A baseline extrapolated from a sample (`per_item` times `count`).
    pub fn extrapolated(what: impl Into<String>, per_item: Duration, count: usize) -> Self {
        Baseline {
            what: what.into(),
            ms: ms(per_item) * count as f64,
            extrapolated: true,
        }
    }
}

/// One measured figure of an area: the library's time and its baselines.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Row {
    /// What was measured (`poll of 1,000 pending jobs`).
    pub figure: String,
    /// The library's time, in milliseconds.
    pub ms: f64,
    /// The bare scheduler command over the same open connection (or another floor).
    pub bare: Option<Baseline>,
    /// The reference's way: a fresh `ssh` per command.
    pub fresh: Option<Baseline>,
    /// The aim: the largest ratio to `bare` the library should reach.
    pub aim: Option<f64>,
    /// Anything else worth a column (peak memory, throughput, round trips).
    #[serde(default)]
    pub note: String,
}

impl Row {
    /// A row of the library's `time` for `figure`, without baselines yet.
    pub fn new(figure: impl Into<String>, time: Duration) -> Self {
        Row {
            figure: figure.into(),
            ms: ms(time),
            bare: None,
            fresh: None,
            aim: None,
            note: String::new(),
        }
    }

    /// With the bare baseline.
    pub fn bare(mut self, baseline: Baseline) -> Self {
        self.bare = Some(baseline);
        self
    }

    /// With the fresh-`ssh` baseline.
    pub fn fresh(mut self, baseline: Baseline) -> Self {
        self.fresh = Some(baseline);
        self
    }

    /// With an aim (the largest ratio to the bare baseline).
    pub fn aim(mut self, ratio: f64) -> Self {
        self.aim = Some(ratio);
        self
    }

    /// With a note.
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = note.into();
        self
    }

    /// The library's time over the bare baseline's.
    pub fn ratio(&self) -> Option<f64> {
        self.bare.as_ref().map(|b| self.ms / b.ms)
    }

    /// How many times faster the library is than the fresh-`ssh` way.
    pub fn speedup(&self) -> Option<f64> {
        self.fresh.as_ref().map(|f| f.ms / self.ms)
    }

    /// Whether the aim is met (`None` without an aim or a bare baseline).
    pub fn aim_met(&self) -> Option<bool> {
        Some(self.ratio()? <= self.aim?)
    }
}

/// One line of the plot: (number of jobs, milliseconds) points, each measured or
/// extrapolated.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Series {
    /// The legend.
    pub name: String,
    /// (jobs, ms, extrapolated).
    pub points: Vec<(f64, f64, bool)>,
}

/// The figures of one area of `BENCHMARKS.md` (transport, render, submit, poll,
/// cancel, records), as one bench binary measured them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Area {
    /// The area's name, also its file name and its place in the report.
    pub name: String,
    /// What the bare and fresh columns hold, for the table's header.
    pub bare_label: String,
    /// See `bare_label`.
    pub fresh_label: String,
    /// The figures.
    pub rows: Vec<Row>,
    /// Lines to plot (the poll's cost against the number of jobs).
    #[serde(default)]
    pub series: Vec<Series>,
    /// Sentences under the table: how it was measured, what stays and why.
    #[serde(default)]
    pub notes: Vec<String>,
    /// Facts about the machine found while measuring (`Slurm version`).
    #[serde(default)]
    pub machine: Vec<(String, String)>,
}

impl Area {
    /// An empty area.
    pub fn new(name: &str, bare_label: &str, fresh_label: &str) -> Self {
        Area {
            name: name.to_string(),
            bare_label: bare_label.to_string(),
            fresh_label: fresh_label.to_string(),
            ..Area::default()
        }
    }

    /// Add `row`, printing it as it comes.
    pub fn push(&mut self, row: Row) {
        println!("{}", report::row_line(&row));
        self.rows.push(row);
    }

    /// Write the area to the results folder ([`results_dir`]), replacing an earlier run's.
    pub fn save(&self) {
        let dir = results_dir();
        std::fs::create_dir_all(&dir).expect("create the bench results folder");
        let path = dir.join(format!("{}.json", self.name));
        let text = serde_json::to_string_pretty(self).expect("serialise the bench results");
        std::fs::write(&path, text).expect("write the bench results");
        println!("{} figures kept in {}", self.name, path.display());
    }
}

/// Where the benches of one run keep their figures: `$SLURM_RUN_BENCH_RESULTS`, else
/// `<target>/<profile>/slurm-run-bench/` beside the running binary.
pub fn results_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SLURM_RUN_BENCH_RESULTS") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("the bench's own path");
    let mut dir = exe.parent().expect("a folder").to_path_buf();
    if dir.ends_with("deps") || dir.ends_with("examples") {
        dir.pop();
    }
    dir.join("slurm-run-bench")
}

/// Every area kept in `dir` (a results folder), in the report's order.
pub fn load_from(dir: &std::path::Path) -> Vec<Area> {
    let mut areas = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return areas;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "json") {
            let text = std::fs::read_to_string(&path).expect("read bench results");
            let area: Area = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is not bench results: {e}", path.display()));
            areas.push(area);
        }
    }
    areas.sort_by_key(|a| {
        report::ORDER
            .iter()
            .position(|n| *n == a.name)
            .unwrap_or(usize::MAX)
    });
    areas
}

/// The conditions of the machine `make bench` measures under, in the report's order:
/// otherwise idle, and loaded by CPU hogs of the run's own beside the test bed.
pub const CONDITIONS: [&str; 2] = ["idle", "loaded"];

/// The figures of one run of the benches under one condition.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// One of [`CONDITIONS`].
    pub condition: String,
    /// Which round of that condition (from 1).
    pub round: u32,
    /// What the run measured.
    pub areas: Vec<Area>,
}

/// The runs kept under `dir`: `dir/<condition>/<round>/` (the rounds of `make bench`),
/// in condition then round order; a folder of areas alone is one idle run.
pub fn load_runs(dir: &std::path::Path) -> Vec<Run> {
    let mut runs = Vec::new();
    for condition in CONDITIONS {
        let Ok(entries) = std::fs::read_dir(dir.join(condition)) else {
            continue;
        };
        let mut rounds: Vec<(u32, PathBuf)> = entries
            .flatten()
            .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path())))
            .collect();
        rounds.sort();
        for (round, path) in rounds {
            runs.push(Run {
                condition: condition.to_string(),
                round,
                areas: load_from(&path),
            });
        }
    }
    if runs.is_empty() {
        let areas = load_from(dir);
        if !areas.is_empty() {
            runs.push(Run {
                condition: CONDITIONS[0].to_string(),
                round: 1,
                areas,
            });
        }
    }
    runs
}

/// Milliseconds of `time`.
pub fn ms(time: Duration) -> f64 {
    time.as_secs_f64() * 1000.0
}

/// The median of `samples` (not empty).
pub fn median(mut samples: Vec<Duration>) -> Duration {
    assert!(!samples.is_empty(), "no samples");
    samples.sort();
    samples[samples.len() / 2]
}

/// The resident memory of this process now, in MiB (`VmRSS`).
pub fn memory_mib() -> f64 {
    status_kib("VmRSS") / 1024.0
}

fn status_kib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

/// This machine as the report names it: CPU model, cores, kernel.
pub fn machine() -> Vec<(String, String)> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    vec![
        ("CPU".into(), cpu),
        ("cores".into(), cores),
        ("kernel".into(), format!("Linux {kernel}")),
    ]
}
