//! What each run of a job used, from the poll's sacct rows ([`run_usages`]): a run is a
//! job row (one per requeue, `--duplicates`) with its heterogeneous components and its
//! steps, which alone carry memory and GPU utilisation.

use crate::record::Usage;
use crate::slurm::parse::sacct_usage::RowUsage;
use crate::slurm::parse::{SacctRow, SlurmJobId};

/// One run's figures while its rows are read.
#[derive(Default)]
struct RunRows {
    started_at: Option<chrono::NaiveDateTime>,
    submitted_at: Option<chrono::NaiveDateTime>,
    elapsed_s: Option<u64>,
    time_limit_s: Option<u64>,
    gpus: Option<u32>,
    cpus: Option<u32>,
    max_rss_bytes: Option<u64>,
    gpu_util: Vec<u32>,
    gpu_mem_bytes: Option<u64>,
    /// Rows with usage columns read (none: the output had no such columns).
    read: bool,
}

impl RunRows {
    /// The run's usage; `None` when no row had the usage columns.
    fn usage(self) -> Option<Usage> {
        if !self.read {
            return None;
        }
        let queue_wait_s = match (self.submitted_at, self.started_at) {
            (Some(submit), Some(start)) => (start - submit).num_seconds().try_into().ok(),
            _ => None,
        };
        let gpu_util = (!self.gpu_util.is_empty()).then(|| {
            let total: u64 = self.gpu_util.iter().map(|&u| u64::from(u)).sum();
            (total / self.gpu_util.len() as u64) as u32
        });
        let mut usage = Usage::of_run(
            self.elapsed_s,
            self.time_limit_s,
            queue_wait_s,
            self.gpus,
            self.cpus,
            self.max_rss_bytes,
            gpu_util,
            self.gpu_mem_bytes,
        );
        usage.started_at = self.started_at.map(|t| t.and_utc());
        Some(usage)
    }

    /// Add a component's (or the job's own) allocation row.
    fn add_allocation(&mut self, row: &SacctRow, usage: &RowUsage) {
        self.read = true;
        let add = |a: Option<u32>, b: Option<u32>| match (a, b) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.gpus = add(self.gpus, usage.gpus);
        self.cpus = add(self.cpus, usage.cpus);
        self.elapsed_s = self.elapsed_s.max(usage.elapsed_s);
        self.time_limit_s = self.time_limit_s.or(usage.time_limit_s);
        self.started_at = self.started_at.or(row.start);
        self.submitted_at = self.submitted_at.or(row.submit);
    }

    /// Add a step's row: memory and GPU utilisation.
    fn add_step(&mut self, usage: &RowUsage) {
        self.read = true;
        self.max_rss_bytes = self.max_rss_bytes.max(usage.max_rss_bytes);
        self.gpu_mem_bytes = self.gpu_mem_bytes.max(usage.gpu_mem_bytes);
        self.gpu_util.extend(usage.gpu_util_percent);
    }
}

/// What each run of job `id` (or its array task `task`) used, oldest first, from sacct's
/// `rows` in their printed order: each job row opens a run, a heterogeneous component's
/// row adds its allocation to it, and the steps that follow add memory and GPU use.
/// Empty when the rows have no usage columns.
pub(super) fn run_usages(rows: &[SacctRow], id: SlurmJobId, task: Option<u32>) -> Vec<Usage> {
    let mut runs: Vec<RunRows> = Vec::new();
    let mut open = false;
    for row in rows {
        let Some(usage) = row.usage.as_ref() else {
            continue;
        };
        if row.id.is_step() {
            if open && row.id.is_step_of(id, task) {
                if let Some(run) = runs.last_mut() {
                    run.add_step(usage);
                }
            }
            continue;
        }
        if row.id.describes(id, task) {
            let mut run = RunRows::default();
            run.add_allocation(row, usage);
            runs.push(run);
            open = true;
        } else if open && row.id.job == id && row.id.het.is_some() && task.is_none() {
            if let Some(run) = runs.last_mut() {
                run.add_allocation(row, usage);
            }
        } else {
            open = false;
        }
    }
    runs.into_iter().filter_map(RunRows::usage).collect()
}

#[cfg(test)]
mod tests {
    use super::run_usages;
    use crate::slurm::parse::{parse_sacct_rows_eligible, SlurmJobId};

    /// A sacct line in the poll's format: the base fields, then Eligible and usage.
    fn line(id: &str, state: &str, start: &str, usage: &str) -> String {
        format!("{id}|{id}|{state}|0:0|None|2026-12-07T10:00:00|{start}|2026-12-07T11:00:00|n1|job|2026-12-07T10:00:00|{usage}")
    }

    #[test]
    fn a_requeued_job_has_a_run_per_job_row_with_its_steps_memory() {
        let text = [
            line(
                "40",
                "NODE_FAIL",
                "2026-12-07T10:00:10",
                "00:10:00|01:00:00|cpu=2,gres/gpu=4,node=2||",
            ),
            line(
                "40.batch",
                "CANCELLED",
                "2026-12-07T10:00:10",
                "00:10:00||cpu=1|1000K|mem=1000K",
            ),
            line(
                "40",
                "COMPLETED",
                "2026-12-07T10:20:00",
                "00:30:00|01:00:00|cpu=2,gres/gpu=4,node=2||",
            ),
            line(
                "40.batch",
                "COMPLETED",
                "2026-12-07T10:20:00",
                "00:30:00||cpu=1|2M|mem=2M,gres/gpuutil=50",
            ),
            line(
                "41",
                "COMPLETED",
                "2026-12-07T10:20:00",
                "00:01:00|01:00:00|cpu=9,gres/gpu=9||",
            ),
        ]
        .join("\n");
        let (rows, bad) = parse_sacct_rows_eligible(&text, true);
        assert!(bad.is_empty(), "{bad:?}");
        let runs = run_usages(&rows, SlurmJobId::new(40).unwrap(), None);
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].gpu_seconds, Some(4 * 600));
        assert_eq!(runs[0].max_rss_bytes, Some(1000 * 1024));
        assert_eq!(runs[0].queue_wait_s, Some(10));
        assert_eq!(runs[1].elapsed_s, Some(1800));
        assert_eq!(runs[1].max_rss_bytes, Some(2 << 20));
        assert_eq!(runs[1].gpu_util_percent, Some(50));
        assert_eq!(runs[1].gpu_mem_bytes, None);
    }

    #[test]
    fn components_add_their_allocation_and_tasks_are_apart() {
        let text = [
            line(
                "50+0",
                "COMPLETED",
                "2026-12-07T10:00:00",
                "00:10:00|01:00:00|cpu=2,gres/gpu=2||",
            ),
            line(
                "50+1",
                "COMPLETED",
                "2026-12-07T10:00:00",
                "00:10:00|01:00:00|cpu=4,gres/gpu=4||",
            ),
            line(
                "60_1",
                "COMPLETED",
                "2026-12-07T10:00:00",
                "00:05:00|01:00:00|cpu=1,gres/gpu=1||",
            ),
            line(
                "60_2",
                "COMPLETED",
                "2026-12-07T10:00:00",
                "00:07:00|01:00:00|cpu=1,gres/gpu=1||",
            ),
        ]
        .join("\n");
        let (rows, _) = parse_sacct_rows_eligible(&text, true);
        let het = run_usages(&rows, SlurmJobId::new(50).unwrap(), None);
        assert_eq!(het.len(), 1);
        assert_eq!(het[0].gpus, Some(6));
        assert_eq!(het[0].gpu_seconds, Some(6 * 600));
        let task = run_usages(&rows, SlurmJobId::new(60).unwrap(), Some(2));
        assert_eq!(task.len(), 1);
        assert_eq!(task[0].elapsed_s, Some(420));
        // Output without the usage columns (an older capture) gives no usage at all.
        let (old, _) = parse_sacct_rows_eligible("70|70|COMPLETED|0:0|None|2026-12-07T10:00:00|2026-12-07T10:00:00|2026-12-07T10:01:00|n1|job|2026-12-07T10:00:00", true);
        assert!(run_usages(&old, SlurmJobId::new(70).unwrap(), None).is_empty());
    }
}
