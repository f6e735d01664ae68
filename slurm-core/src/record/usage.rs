//! What a run used, as the cluster's accounting tells it ([`Usage`]): elapsed time,
//! allocated GPUs and CPUs, GPU- and CPU-hours, queue wait, memory and GPU utilisation,
//! each `None` where the cluster does not account it (never a zero standing for
//! "unknown"), with notes saying what is missing.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One run's (or a sum of runs') use of the cluster, from accounting.
///
/// A figure the cluster does not account is `None`, and [`Usage::notes`] says why; a sum
/// of runs keeps a figure only when every run had it (a partial sum would read low).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Usage {
    /// How many runs this sums (1 for one run; segments, tasks or components summed).
    #[serde(default = "one")]
    pub runs: u32,
    /// When the run started (of a sum: the earliest), where accounting told it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    /// Wall time used, in seconds (sacct's `Elapsed`).
    pub elapsed_s: Option<u64>,
    /// The time limit the run had, in seconds (`None`: unlimited or not told).
    pub time_limit_s: Option<u64>,
    /// From submit to start, in seconds.
    pub queue_wait_s: Option<u64>,
    /// GPUs allocated (`gres/gpu` of `AllocTRES`; `None` where the cluster does not
    /// account GPUs, `AccountingStorageTRES` without `gres/gpu`).
    pub gpus: Option<u32>,
    /// CPUs allocated (`cpu` of `AllocTRES`).
    pub cpus: Option<u32>,
    /// GPUs x elapsed, in seconds ([`Usage::gpu_hours`] in hours).
    pub gpu_seconds: Option<u64>,
    /// CPUs x elapsed, in seconds ([`Usage::cpu_hours`] in hours).
    pub cpu_seconds: Option<u64>,
    /// The largest resident memory of any step, in bytes (`MaxRSS` of the step rows;
    /// `None` where the cluster gathers no usage, `JobAcctGatherType=jobacct_gather/none`).
    pub max_rss_bytes: Option<u64>,
    /// Average GPU utilisation, percent (`gres/gpuutil` of `TRESUsageInAve`, where the
    /// cluster accounts it).
    pub gpu_util_percent: Option<u32>,
    /// Average GPU memory used, in bytes (`gres/gpumem` of `TRESUsageInAve`).
    pub gpu_mem_bytes: Option<u64>,
    /// What the cluster did not account, in words (one note per missing figure).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

fn one() -> u32 {
    1
}

impl Usage {
    /// One run's usage from its figures; GPU- and CPU-hours follow from the counts and
    /// the elapsed time, and a note is written for each figure left out.
    #[allow(clippy::too_many_arguments)]
    pub fn of_run(
        elapsed_s: Option<u64>,
        time_limit_s: Option<u64>,
        queue_wait_s: Option<u64>,
        gpus: Option<u32>,
        cpus: Option<u32>,
        max_rss_bytes: Option<u64>,
        gpu_util_percent: Option<u32>,
        gpu_mem_bytes: Option<u64>,
    ) -> Usage {
        let seconds = |count: Option<u32>| Some(u64::from(count?) * elapsed_s?);
        let mut usage = Usage {
            runs: 1,
            started_at: None,
            elapsed_s,
            time_limit_s,
            queue_wait_s,
            gpus,
            cpus,
            gpu_seconds: seconds(gpus),
            cpu_seconds: seconds(cpus),
            max_rss_bytes,
            gpu_util_percent,
            gpu_mem_bytes,
            notes: Vec::new(),
        };
        usage.note_missing();
        usage
    }

    /// The sum of `runs` (segments of a resumed run, an array's tasks, a job's
    /// components): times, counts and hours add up (GPUs and CPUs: the most any run
    /// held), memory and utilisation take the largest and the mean; a figure is kept
    /// only when every run has it. `None` for no runs.
    pub fn sum<'a>(runs: impl IntoIterator<Item = &'a Usage>) -> Option<Usage> {
        let runs: Vec<&Usage> = runs.into_iter().collect();
        if runs.is_empty() {
            return None;
        }
        fn all<T: Copy>(runs: &[&Usage], get: impl Fn(&Usage) -> Option<T>) -> Option<Vec<T>> {
            runs.iter().map(|r| get(r)).collect()
        }
        let add_u64 = |get: fn(&Usage) -> Option<u64>| all(&runs, get).map(|v| v.iter().sum());
        let most_u32 =
            |get: fn(&Usage) -> Option<u32>| all(&runs, get).and_then(|v| v.into_iter().max());
        let most_u64 =
            |get: fn(&Usage) -> Option<u64>| all(&runs, get).and_then(|v| v.into_iter().max());
        let mean = |get: fn(&Usage) -> Option<u32>| {
            all(&runs, get).map(|v| {
                let total: u64 = v.iter().map(|&x| u64::from(x)).sum();
                (total / v.len() as u64) as u32
            })
        };
        let mut usage = Usage {
            runs: runs.iter().map(|r| r.runs).sum(),
            started_at: runs.iter().filter_map(|r| r.started_at).min(),
            elapsed_s: add_u64(|u| u.elapsed_s),
            time_limit_s: add_u64(|u| u.time_limit_s),
            queue_wait_s: add_u64(|u| u.queue_wait_s),
            gpus: most_u32(|u| u.gpus),
            cpus: most_u32(|u| u.cpus),
            gpu_seconds: add_u64(|u| u.gpu_seconds),
            cpu_seconds: add_u64(|u| u.cpu_seconds),
            max_rss_bytes: most_u64(|u| u.max_rss_bytes),
            gpu_util_percent: mean(|u| u.gpu_util_percent),
            gpu_mem_bytes: most_u64(|u| u.gpu_mem_bytes),
            notes: Vec::new(),
        };
        usage.note_missing();
        // The runs' own notes too (a role beside another says whose allocation it used).
        for note in runs.iter().flat_map(|r| r.notes.iter()) {
            if !usage.notes.contains(note) {
                usage.notes.push(note.clone());
            }
        }
        Some(usage)
    }

    /// GPU-hours: GPUs x elapsed.
    pub fn gpu_hours(&self) -> Option<f64> {
        Some(self.gpu_seconds? as f64 / 3600.0)
    }

    /// CPU-hours: CPUs x elapsed.
    pub fn cpu_hours(&self) -> Option<f64> {
        Some(self.cpu_seconds? as f64 / 3600.0)
    }

    /// The elapsed time as a share of the time limit (1.0: the whole wall), where both
    /// are known.
    pub fn wall_used(&self) -> Option<f64> {
        let limit = self.time_limit_s.filter(|l| *l > 0)?;
        Some(self.elapsed_s? as f64 / limit as f64)
    }

    /// A note for each figure that is `None`.
    fn note_missing(&mut self) {
        let missing = [
            (self.elapsed_s.is_none(), "elapsed: not in accounting"),
            (
                self.gpus.is_none(),
                "gpus: not accounted (AccountingStorageTRES without gres/gpu)",
            ),
            (
                self.cpus.is_none(),
                "cpus: not in accounting (AllocTRES without cpu)",
            ),
            (
                self.max_rss_bytes.is_none(),
                "max_rss: not gathered (JobAcctGatherType none, or every step ended before its first sample)",
            ),
            (
                self.gpu_util_percent.is_none(),
                "gpu_util: not accounted (no gres/gpuutil in TRESUsageInAve)",
            ),
            (
                self.gpu_mem_bytes.is_none(),
                "gpu_mem: not accounted (no gres/gpumem in TRESUsageInAve)",
            ),
        ];
        for (absent, note) in missing {
            if absent && !self.notes.iter().any(|n| n == note) {
                self.notes.push(note.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Usage;

    #[test]
    fn hours_follow_from_counts_and_elapsed_and_missing_figures_are_noted_not_zero() {
        let run = Usage::of_run(
            Some(1800),
            Some(3600),
            Some(5),
            Some(4),
            Some(8),
            None,
            None,
            None,
        );
        assert_eq!(run.gpu_hours(), Some(2.0));
        assert_eq!(run.cpu_hours(), Some(4.0));
        assert_eq!(run.wall_used(), Some(0.5));
        assert_eq!(run.max_rss_bytes, None);
        assert!(run.notes.iter().any(|n| n.starts_with("max_rss")));
        assert!(run.notes.iter().any(|n| n.starts_with("gpu_util")));
        let no_gpus = Usage::of_run(Some(60), None, None, None, Some(2), Some(1), None, None);
        assert_eq!(no_gpus.gpu_hours(), None);
        assert!(no_gpus.notes.iter().any(|n| n.starts_with("gpus")));
    }

    #[test]
    fn a_sum_adds_times_and_hours_and_keeps_a_figure_only_when_every_run_has_it() {
        let a = Usage::of_run(
            Some(3600),
            Some(3600),
            Some(10),
            Some(2),
            Some(4),
            Some(100),
            None,
            None,
        );
        let b = Usage::of_run(
            Some(1800),
            Some(3600),
            Some(20),
            Some(2),
            Some(4),
            None,
            None,
            None,
        );
        let sum = Usage::sum([&a, &b]).unwrap();
        assert_eq!(sum.runs, 2);
        assert_eq!(sum.elapsed_s, Some(5400));
        assert_eq!(sum.queue_wait_s, Some(30));
        assert_eq!(sum.gpu_hours(), Some(3.0));
        assert_eq!(sum.gpus, Some(2));
        assert_eq!(
            sum.max_rss_bytes, None,
            "one run lacks it: no partial figure"
        );
        assert_eq!(Usage::sum([]), None);
    }
}
