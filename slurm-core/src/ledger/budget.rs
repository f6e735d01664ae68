//! GPU-hour budgets ([`Budgets`]): how much of each a window of records used
//! ([`budget_use`]), and whether a job's worst case fits what is left
//! ([`check_budgets`]).
//!
//! ```yaml
//! budgets:
//!   - name: vision
//!     gpu_hours: 500
//!     window: 30d            # 90m, 24h, 7d, 2w
//!     labels: {team: vision} # the records it covers (none: every record)
//! clusters: ...              # other keys of the file are left to their readers
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::record::JobRecord;
use crate::spec::{JobSpec, SpecDefaults};
use crate::{Error, Result};

use super::summary::{parse_span, record_time};

/// A limit of GPU-hours over a sliding window, for the records with some labels.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// What it is called (named in refusals and reports).
    pub name: String,
    /// The GPU-hours it allows in a window.
    pub gpu_hours: f64,
    /// How far back it counts: `90m`, `24h`, `30d`, `2w`.
    pub window: String,
    /// The records it covers: those with all these labels (empty: every record).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl Budget {
    /// Whether the budget covers a job with `labels`.
    fn covers(&self, labels: &BTreeMap<String, String>) -> bool {
        self.labels.iter().all(|(k, v)| labels.get(k) == Some(v))
    }
}

/// The budgets of a file's `budgets:` list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Budgets {
    /// The budgets, in the file's order.
    pub budgets: Vec<Budget>,
}

/// The file: its `budgets:` list; other top-level keys are not ours.
#[derive(Deserialize)]
struct BudgetFile {
    #[serde(default)]
    budgets: Option<Vec<serde_yaml_ng::Value>>,
}

impl Budgets {
    /// Read the top-level `budgets:` list of a YAML document (other top-level keys, such
    /// as `clusters:`, are ignored; no list: no budgets). Each budget needs a name,
    /// `gpu_hours` above 0 and a readable `window`; errors name `budgets[i].field`.
    pub fn from_yaml_str(text: &str) -> Result<Budgets> {
        if text.trim().is_empty() {
            return Ok(Budgets::default());
        }
        let file: BudgetFile = serde_yaml_ng::from_str(text).map_err(|e| {
            Error::invalid(
                "budgets",
                format!("the file does not read as a YAML mapping with a `budgets:` list ({e}); fix the YAML"),
            )
        })?;
        let mut budgets: Vec<Budget> = Vec::new();
        for (i, value) in file.budgets.unwrap_or_default().into_iter().enumerate() {
            let budget: Budget = serde_yaml_ng::from_value(value).map_err(|e| {
                Error::invalid(
                    format!("budgets[{i}]"),
                    format!("{e}; a budget is {{name, gpu_hours, window, labels}}"),
                )
            })?;
            let field = |name: &str| format!("budgets[{i}].{name}");
            if budget.name.trim().is_empty() {
                return Err(Error::invalid(
                    field("name"),
                    "is empty; give the budget a name, e.g. name: vision",
                ));
            }
            if budgets.iter().any(|b| b.name == budget.name) {
                return Err(Error::invalid(
                    field("name"),
                    format!(
                        "another budget is named `{}`; give each budget its own name",
                        crate::names::short(&budget.name)
                    ),
                ));
            }
            if !budget.gpu_hours.is_finite() || budget.gpu_hours <= 0.0 {
                return Err(Error::invalid(
                    field("gpu_hours"),
                    format!(
                        "{} is not a limit; give the GPU-hours allowed, above 0 (e.g. 500)",
                        budget.gpu_hours
                    ),
                ));
            }
            parse_span(&field("window"), &budget.window)?;
            budgets.push(budget);
        }
        Ok(Budgets { budgets })
    }

    /// [`Budgets::from_yaml_str`] of the file at `path`.
    pub fn from_file(path: &Path) -> Result<Budgets> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::io(format!("reading budgets from {}", path.display()), e))?;
        Budgets::from_yaml_str(&text)
    }
}

/// The most GPU-hours a job of `spec` may use: nodes x GPUs per node x wall hours x
/// runs (1 + the restarts `resume.max_restarts` allows) x array tasks (of `array` or
/// `sweep`). GPUs and nodes are those sbatch is asked for, the backend's defaults
/// applied (no GPU keys: 4 GPUs on one node); a multi-role job adds its roles' (a role
/// `on` another holds none). No wall time: the default wall. The retries a watch may
/// make are submits of their own, each a record the ledger counts when it ran.
pub fn worst_case_gpu_hours(spec: &JobSpec) -> f64 {
    // A spec that does not resolve is refused at submit; its keys' most, meanwhile.
    let gpus = match spec.gpus_by_part() {
        Ok(parts) => parts.iter().map(|(_, gpus)| f64::from(*gpus)).sum(),
        Err(_) => named_gpus(spec),
    };
    let wall = spec.time.unwrap_or(SpecDefaults::default().wall);
    let hours = wall.as_secs() as f64 / 3600.0;
    let runs = 1.0
        + spec
            .resume
            .as_ref()
            .map_or(0.0, |r| f64::from(r.max_restarts));
    gpus * hours * runs * array_tasks(spec)
}

/// The GPUs `spec`'s keys name (of a spec that does not resolve): nodes x per node, or
/// the total, summed over its roles; the default per node where none is named.
fn named_gpus(spec: &JobSpec) -> f64 {
    let default = SpecDefaults::default().gpus_per_node;
    let gpus_of = |nodes: Option<u32>, gpus: Option<u32>, per_node: Option<u32>| -> f64 {
        match (per_node, gpus) {
            (Some(per), _) => f64::from(per) * f64::from(nodes.unwrap_or(1)),
            (None, Some(total)) => f64::from(total),
            (None, None) => f64::from(default) * f64::from(nodes.unwrap_or(1)),
        }
    };
    if spec.roles.is_empty() {
        return gpus_of(spec.nodes, spec.gpus, spec.gpus_per_node);
    }
    spec.roles
        .values()
        .filter(|role| role.on.is_none())
        .map(|role| {
            gpus_of(
                role.nodes.or(spec.nodes),
                role.gpus.or(spec.gpus),
                role.gpus_per_node.or(spec.gpus_per_node),
            )
        })
        .sum()
}

/// How many tasks a job of `spec` runs (1 for a single job).
fn array_tasks(spec: &JobSpec) -> f64 {
    match spec.array_plan() {
        Ok(Some(plan)) => plan.indices.len() as f64,
        Ok(None) => 1.0,
        // A spec that does not validate: the most it names.
        Err(_) => {
            let array = spec.array.as_ref();
            let size = array.and_then(|a| a.size).map(f64::from);
            let indices = array
                .and_then(|a| a.indices.as_ref())
                .map(|i| i.len() as f64);
            let points = spec.sweep.as_ref().map(|s| s.points().len() as f64);
            [size, indices, points]
                .into_iter()
                .flatten()
                .fold(1.0, f64::max)
        }
    }
}

/// How much of a budget its window of records used.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetUse {
    /// The budget's name.
    pub name: String,
    /// Its limit, in GPU-hours.
    pub gpu_hours: f64,
    /// GPU-hours the covered records of the window used (those with the figure).
    pub used: f64,
    /// What is left of the limit (0 when it is used up or overdrawn).
    pub left: f64,
    /// Its window, as written (`30d`).
    pub window: String,
    /// Covered records of the window without a GPU figure (not counted in `used`).
    pub unaccounted: u64,
}

/// How much of each budget the `records` of its window (by their start, else their
/// opening, within the window back from `now`) with its labels used. A budget whose
/// window does not read (one built by hand) counts every record it covers.
pub fn budget_use(budgets: &Budgets, records: &[JobRecord], now: DateTime<Utc>) -> Vec<BudgetUse> {
    budgets
        .budgets
        .iter()
        .map(|budget| {
            let from = parse_span("window", &budget.window)
                .ok()
                .and_then(|span| now.checked_sub_signed(span));
            let mut used = 0.0;
            let mut unaccounted = 0;
            for record in records {
                if !budget.covers(record.labels()) || from.is_some_and(|f| record_time(record) < f)
                {
                    continue;
                }
                match record.usage_total().and_then(|u| u.gpu_hours()) {
                    Some(hours) => used += hours,
                    None => unaccounted += 1,
                }
            }
            BudgetUse {
                name: budget.name.clone(),
                gpu_hours: budget.gpu_hours,
                used,
                left: (budget.gpu_hours - used).max(0.0),
                window: budget.window.clone(),
                unaccounted,
            }
        })
        .collect()
}

/// A submit a budget refuses: the job's worst case is more than the budget has left.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetRefusal {
    /// The budget's name.
    pub budget: String,
    /// The GPU-hours it has left.
    pub left: f64,
    /// The most the job may use ([`worst_case_gpu_hours`]).
    pub asks: f64,
}

impl fmt::Display for BudgetRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "budget {}: {} GPU-hours left, the job asks up to {} (nodes x GPUs x wall x runs); submit with --over-budget to go ahead",
            self.budget,
            hours(self.left),
            hours(self.asks)
        )
    }
}

impl std::error::Error for BudgetRefusal {}

/// GPU-hours in short: whole numbers as they are, others to one decimal.
fn hours(h: f64) -> String {
    if h.fract() == 0.0 {
        format!("{h:.0}")
    } else {
        format!("{h:.1}")
    }
}

/// Whether a job of `spec` fits every budget that covers it (its labels have all the
/// budget's): its worst case ([`worst_case_gpu_hours`]) at most what the budget has
/// left of its window back from `now`. The first budget it does not fit refuses it.
pub fn check_budgets(
    budgets: &Budgets,
    records: &[JobRecord],
    spec: &JobSpec,
    now: DateTime<Utc>,
) -> std::result::Result<(), BudgetRefusal> {
    let covering = Budgets {
        budgets: budgets
            .budgets
            .iter()
            .filter(|b| b.covers(&spec.labels))
            .cloned()
            .collect(),
    };
    if covering.budgets.is_empty() {
        return Ok(());
    }
    let asks = worst_case_gpu_hours(spec);
    for usage in budget_use(&covering, records, now) {
        if asks > usage.left {
            return Err(BudgetRefusal {
                budget: usage.name,
                left: usage.left,
                asks,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::summary::tests::{at, ended, gpu_run};
    use crate::ErrorKind;

    const FILE: &str = "\
clusters:
  east: {host: login.east.example}
budgets:
  - name: vision
    gpu_hours: 10
    window: 7d
    labels: {team: vision}
  - name: everyone
    gpu_hours: 100
    window: 30d
";

    fn spec(yaml: &str) -> JobSpec {
        JobSpec::from_yaml_str(yaml).unwrap()
    }

    #[test]
    fn budgets_read_beside_other_keys() {
        let budgets = Budgets::from_yaml_str(FILE).unwrap();
        assert_eq!(budgets.budgets.len(), 2);
        let vision = &budgets.budgets[0];
        assert_eq!((vision.name.as_str(), vision.gpu_hours), ("vision", 10.0));
        assert_eq!(vision.window, "7d");
        assert_eq!(
            vision.labels.get("team").map(String::as_str),
            Some("vision")
        );
        assert!(budgets.budgets[1].labels.is_empty());
        assert_eq!(
            Budgets::from_yaml_str("clusters: {}\n").unwrap(),
            Budgets::default()
        );
        assert_eq!(Budgets::from_yaml_str("").unwrap(), Budgets::default());
    }

    #[test]
    fn a_bad_budget_is_named_by_its_place_and_field() {
        let cases = [
            ("budgets:\n  - {name: a, gpu_hours: 0, window: 7d}\n", "budgets[0].gpu_hours"),
            ("budgets:\n  - {name: a, gpu_hours: 5, window: 7d}\n  - {name: b, gpu_hours: 5, window: soon}\n", "budgets[1].window"),
            ("budgets:\n  - {name: \" \", gpu_hours: 5, window: 7d}\n", "budgets[0].name"),
            ("budgets:\n  - {name: a, gpu_hours: 5, window: 7d}\n  - {name: a, gpu_hours: 5, window: 7d}\n", "budgets[1].name"),
            ("budgets:\n  - {gpu_hours: 5, window: 7d}\n", "budgets[0]"),
            ("budgets:\n  - {name: a, gpu_hours: 5, window: 7d, colour: red}\n", "budgets[0]"),
            ("budgets: [\n", "budgets"),
        ];
        for (yaml, field) in cases {
            let err = Budgets::from_yaml_str(yaml).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Invalid, "{yaml}");
            assert!(
                err.to_string().starts_with(&format!("invalid {field}:")),
                "{yaml}: {err}"
            );
        }
    }

    #[test]
    fn the_worst_case_multiplies_nodes_gpus_wall_runs_and_tasks() {
        let job = spec("name: w\ncommand: x\nnodes: 2\ngpus_per_node: 4\ntime: \"01:00:00\"\nresume: {max_restarts: 2}\n");
        assert_eq!(worst_case_gpu_hours(&job), 24.0);
        let array =
            spec("name: w\ncommand: x\ngpus_per_node: 1\ntime: \"00:30:00\"\narray: {size: 8}\n");
        assert_eq!(worst_case_gpu_hours(&array), 4.0);
        let sweep =
            spec("name: w\ncommand: x\ngpus: 2\ntime: \"1-00:00:00\"\nsweep: {LR: [1, 2, 3]}\n");
        assert_eq!(worst_case_gpu_hours(&sweep), 2.0 * 24.0 * 3.0);
        // No GPU keys: the backend's default, 4 GPUs on 1 node (what sbatch is asked).
        let default = spec("name: w\ncommand: x\ntime: \"01:00:00\"\n");
        assert_eq!(worst_case_gpu_hours(&default), 4.0);
        let cpu = spec("name: w\ncommand: x\ngpus_per_node: 0\ntime: \"01:00:00\"\n");
        assert_eq!(worst_case_gpu_hours(&cpu), 0.0);
        // Roles: each role's own, by the same defaults; a role beside another holds none.
        let roles = spec("name: w\ntime: \"02:00:00\"\nroles:\n  ctl: {nodes: 1, gpus_per_node: 0, command: c}\n  policy: {nodes: 2, gpus_per_node: 8, command: p}\n  rollout: {command: r}\n  watch: {on: policy, command: w}\n");
        assert_eq!(worst_case_gpu_hours(&roles), (16.0 + 4.0) * 2.0);
        // Longer than the reference's partitions allow: still its own wall.
        let long = spec("name: w\ncommand: x\ngpus_per_node: 1\ntime: \"2-00:00:00\"\n");
        assert_eq!(worst_case_gpu_hours(&long), 48.0);
    }

    #[test]
    fn use_counts_the_window_and_labels_and_says_what_lacked_figures() {
        let budgets = Budgets::from_yaml_str(FILE).unwrap();
        let records = vec![
            ended(
                "a",
                &[("team", "vision")],
                9,
                0,
                Some(gpu_run(Some(4), 3600)),
            ), // 4 h
            ended("b", &[("team", "vision")], 9, 0, Some(gpu_run(None, 3600))),
            ended(
                "c",
                &[("team", "vision")],
                1,
                0,
                Some(gpu_run(Some(8), 3600)),
            ), // out of 7d
            ended("d", &[("team", "nlp")], 9, 0, Some(gpu_run(Some(2), 3600))), // 2 h
        ];
        let now = at(10, 0);
        let used = budget_use(&budgets, &records, now);
        assert_eq!(used[0].name, "vision");
        assert_eq!(
            (used[0].used, used[0].left, used[0].unaccounted),
            (4.0, 6.0, 1)
        );
        assert_eq!(
            (used[1].used, used[1].left, used[1].unaccounted),
            (14.0, 86.0, 1)
        );
    }

    #[test]
    fn a_job_over_what_is_left_is_refused_naming_the_budget() {
        let budgets = Budgets::from_yaml_str(FILE).unwrap();
        let records = vec![ended(
            "a",
            &[("team", "vision")],
            9,
            0,
            Some(gpu_run(Some(4), 3600)),
        )];
        let now = at(10, 0);
        let big = spec("name: w\ncommand: x\nnodes: 2\ngpus_per_node: 4\ntime: \"01:00:00\"\nlabels: {team: vision}\n");
        let refusal = check_budgets(&budgets, &records, &big, now).unwrap_err();
        assert_eq!(refusal.budget, "vision");
        assert_eq!((refusal.left, refusal.asks), (6.0, 8.0));
        assert_eq!(
            refusal.to_string(),
            "budget vision: 6 GPU-hours left, the job asks up to 8 (nodes x GPUs x wall x runs); submit with --over-budget to go ahead"
        );
        // The same job without the label is covered by `everyone` only, which has room.
        let unlabelled =
            spec("name: w\ncommand: x\nnodes: 2\ngpus_per_node: 4\ntime: \"01:00:00\"\n");
        assert_eq!(check_budgets(&budgets, &records, &unlabelled, now), Ok(()));
        let small = spec(
            "name: w\ncommand: x\ngpus_per_node: 2\ntime: \"01:30:00\"\nlabels: {team: vision}\n",
        );
        assert_eq!(check_budgets(&budgets, &records, &small, now), Ok(()));
    }
}
