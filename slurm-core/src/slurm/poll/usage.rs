//! What each run of a job used, from the poll's sacct rows ([`run_parts`]): a run is a
//! job row (one per requeue, `--duplicates`) with its heterogeneous components and its
//! steps, which alone carry memory and GPU utilisation; the whole run's usage
//! ([`run_usages`]) and a multi-role job's per role ([`RunParts::role_usage`]).

use std::collections::BTreeMap;

use crate::record::{JobRecord, Usage};
use crate::slurm::parse::sacct_usage::RowUsage;
use crate::slurm::parse::{SacctRow, SlurmJobId};

/// One part's (or a run's) figures while its rows are read.
#[derive(Debug, Clone, Default)]
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
    /// The longest step's elapsed time (a role beside another has only its step's).
    step_elapsed_s: Option<u64>,
    /// When the allocation ended (`None`: it has not, as accounting has it).
    ended_at: Option<chrono::NaiveDateTime>,
}

impl RunRows {
    /// The figures of an allocation row (the job's, or a component's).
    fn allocation(row: &SacctRow, usage: &RowUsage) -> RunRows {
        RunRows {
            started_at: row.start,
            submitted_at: row.submit,
            elapsed_s: usage.elapsed_s,
            time_limit_s: usage.time_limit_s,
            gpus: usage.gpus,
            cpus: usage.cpus,
            ended_at: row.end,
            ..RunRows::default()
        }
    }

    /// The figures of a step's row: its time, memory and GPU utilisation.
    fn step(usage: &RowUsage) -> RunRows {
        RunRows {
            max_rss_bytes: usage.max_rss_bytes,
            gpu_util: usage.gpu_util_percent.into_iter().collect(),
            gpu_mem_bytes: usage.gpu_mem_bytes,
            step_elapsed_s: usage.elapsed_s,
            ..RunRows::default()
        }
    }

    /// Add another allocation of the same run (a component's): counts add up, the
    /// times are the longest or the first told.
    fn add_allocation(&mut self, other: &RunRows) {
        let add = |a: Option<u32>, b: Option<u32>| match (a, b) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.gpus = add(self.gpus, other.gpus);
        self.cpus = add(self.cpus, other.cpus);
        self.elapsed_s = self.elapsed_s.max(other.elapsed_s);
        self.time_limit_s = self.time_limit_s.or(other.time_limit_s);
        self.started_at = self.started_at.or(other.started_at);
        self.submitted_at = self.submitted_at.or(other.submitted_at);
        self.ended_at = self.ended_at.max(other.ended_at);
    }

    /// Add steps' use: the largest memory, every utilisation sample, the longest time.
    fn add_steps(&mut self, other: &RunRows) {
        self.max_rss_bytes = self.max_rss_bytes.max(other.max_rss_bytes);
        self.gpu_mem_bytes = self.gpu_mem_bytes.max(other.gpu_mem_bytes);
        self.gpu_util.extend(other.gpu_util.iter().copied());
        self.step_elapsed_s = self.step_elapsed_s.max(other.step_elapsed_s);
    }

    /// The usage of these figures. An allocation without `gres/gpu` holds no GPU (0)
    /// when its part asks for none (`asks_gpus` false); otherwise the cluster does not
    /// account GPUs (`None`).
    fn usage(&self, asks_gpus: bool) -> Usage {
        let queue_wait_s = match (self.submitted_at, self.started_at) {
            (Some(submit), Some(start)) => (start - submit).num_seconds().try_into().ok(),
            _ => None,
        };
        let gpu_util = (!self.gpu_util.is_empty()).then(|| {
            let total: u64 = self.gpu_util.iter().map(|&u| u64::from(u)).sum();
            (total / self.gpu_util.len() as u64) as u32
        });
        let gpus = match (self.gpus, self.cpus) {
            (None, Some(_)) if !asks_gpus => Some(0),
            (gpus, _) => gpus,
        };
        let mut usage = Usage::of_run(
            self.elapsed_s,
            self.time_limit_s,
            queue_wait_s,
            gpus,
            self.cpus,
            self.max_rss_bytes,
            gpu_util,
            self.gpu_mem_bytes,
        );
        usage.started_at = self.started_at.map(|t| t.and_utc());
        usage
    }
}

/// Where a role of a multi-role job runs, for its usage: on a component of its own
/// nodes, or beside another role, on that role's component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum RolePlace {
    /// On component `component` of its own nodes (a job that is not heterogeneous: 0).
    Own(u32),
    /// Beside role `host`, whose component is `component`: it holds none of the
    /// allocation.
    Beside {
        /// The role it runs beside.
        host: String,
        /// That role's component.
        component: u32,
    },
}

/// What one run of a job used, by part: each component's allocation (a job that is not
/// heterogeneous is its component 0) and each step name's use (a multi-role job's steps
/// carry their role's name).
#[derive(Debug, Clone, Default)]
pub(super) struct RunParts {
    components: BTreeMap<u32, RunRows>,
    steps: BTreeMap<String, RunRows>,
}

impl RunParts {
    /// The whole run's usage: its components' allocations summed, every step's use
    /// (`asks_gpus`: see [`GpusAsked::asks`]).
    fn usage(&self, asks_gpus: bool) -> Usage {
        let mut whole = RunRows::default();
        for component in self.components.values() {
            whole.add_allocation(component);
        }
        for step in self.steps.values() {
            whole.add_steps(step);
        }
        whole.usage(asks_gpus)
    }

    /// What role `name`, placed at `place`, used in this run: a role of its own nodes
    /// its component's allocation and its steps' use; a role beside another its steps'
    /// time and use, with no GPUs or CPUs of its own (they are its host's, counted
    /// there). `None` when the run has no row of the role's component. `asks_gpus`:
    /// whether the role asks for GPUs (see [`GpusAsked::asks`]).
    pub(super) fn role_usage(
        &self,
        name: &str,
        place: &RolePlace,
        asks_gpus: bool,
    ) -> Option<Usage> {
        let component = match place {
            RolePlace::Own(c) | RolePlace::Beside { component: c, .. } => *c,
        };
        let allocation = self.components.get(&component)?;
        let steps = self.steps.get(name);
        let mut rows = match place {
            RolePlace::Own(_) => allocation.clone(),
            RolePlace::Beside { .. } => RunRows {
                started_at: allocation.started_at,
                submitted_at: allocation.submitted_at,
                time_limit_s: allocation.time_limit_s,
                elapsed_s: steps.and_then(|s| s.step_elapsed_s),
                gpus: Some(0),
                cpus: Some(0),
                ..RunRows::default()
            },
        };
        if let Some(steps) = steps {
            rows.add_steps(steps);
        }
        let mut usage = rows.usage(asks_gpus);
        if let RolePlace::Beside { host, .. } = place {
            usage.notes.push(format!(
                "gpus, cpus: none of its own; it runs in role {host}'s allocation, counted there"
            ));
        }
        Some(usage)
    }
}

/// How long after a heterogeneous job's leader ended accounting is waited for the rows of
/// its other components: slurmdbd may write them a little later, and a usage read
/// without them would read low for good (an ended record is not polled again).
const COMPONENTS_WAIT: chrono::Duration = chrono::Duration::minutes(2);

impl RunParts {
    /// Whether accounting still lacks the end of some of this run's `count` components
    /// (0 to `count - 1`) while the leader ended less than [`COMPONENTS_WAIT`] before
    /// `now` (cluster times read as UTC, as the timeline reads them; a cluster on
    /// another zone is then never waited for). A leader that never started waits for
    /// nothing.
    pub(super) fn awaits_components(&self, count: u32, now: chrono::NaiveDateTime) -> bool {
        let Some(leader) = self.components.get(&0) else {
            return false;
        };
        let recent = leader
            .ended_at
            .is_some_and(|end| (now - end).abs() < COMPONENTS_WAIT);
        leader.started_at.is_some()
            && recent
            && (0..count).any(|c| self.components.get(&c).is_none_or(|r| r.ended_at.is_none()))
    }
}

/// What each run of job `id` (or its array task `task`) used, by part, oldest first,
/// from sacct's `rows` in their printed order: each job row opens a run, a
/// heterogeneous component's row adds its allocation to it, and the steps that follow
/// add memory and GPU use. Empty when the rows have no usage columns.
pub(super) fn run_parts(rows: &[SacctRow], id: SlurmJobId, task: Option<u32>) -> Vec<RunParts> {
    let mut runs: Vec<RunParts> = Vec::new();
    let mut open = false;
    for row in rows {
        let Some(usage) = row.usage.as_ref() else {
            continue;
        };
        if row.id.is_step() {
            if let Some(run) = runs
                .last_mut()
                .filter(|_| open && row.id.is_step_of(id, task))
            {
                run.steps
                    .entry(row.name.clone())
                    .or_default()
                    .add_steps(&RunRows::step(usage));
            }
            continue;
        }
        let component = row.id.het.unwrap_or(0);
        if row.id.describes(id, task) {
            let mut run = RunParts::default();
            run.components
                .insert(component, RunRows::allocation(row, usage));
            runs.push(run);
            open = true;
        } else if open && row.id.job == id && row.id.het.is_some() && task.is_none() {
            if let Some(run) = runs.last_mut() {
                run.components
                    .entry(component)
                    .or_default()
                    .add_allocation(&RunRows::allocation(row, usage));
            }
        } else {
            open = false;
        }
    }
    runs
}

/// The usage of each run in `runs`, oldest first (`asks_gpus`: see [`GpusAsked::asks`]).
pub(super) fn run_usages(runs: &[RunParts], asks_gpus: bool) -> Vec<Usage> {
    runs.iter().map(|run| run.usage(asks_gpus)).collect()
}

/// The GPUs each part of a record's job asks sbatch for, resolved once from its spec
/// ([`GpusAsked::asks`]).
pub(super) struct GpusAsked(Option<Vec<(Option<String>, u32)>>);

impl GpusAsked {
    /// What `record`'s spec asks (nothing known: no spec, or one that does not resolve).
    pub(super) fn of(record: &JobRecord) -> Self {
        GpusAsked(record.spec.as_ref().and_then(|s| s.gpus_by_part().ok()))
    }

    /// Whether the job (`role` `None`) or its role `role` asks for GPUs: an allocation
    /// without `gres/gpu` of a part that asks none holds none, while one that asks some
    /// was not accounted. Unknown asks (what is unknown stays unknown).
    pub(super) fn asks(&self, role: Option<&str>) -> bool {
        let Some(parts) = &self.0 else {
            return true;
        };
        parts
            .iter()
            .filter(|(name, _)| role.is_none() || name.as_deref() == role)
            .any(|(_, gpus)| *gpus > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::{run_parts, run_usages, RolePlace};
    use crate::slurm::parse::{parse_sacct_rows_eligible, SlurmJobId};

    /// A sacct line in the poll's format: the base fields, then Eligible and usage.
    fn line(id: &str, state: &str, start: &str, usage: &str) -> String {
        named(id, "job", state, start, usage)
    }

    /// A line of a row named `name` (a step's name: `batch`, or a role's).
    fn named(id: &str, name: &str, state: &str, start: &str, usage: &str) -> String {
        format!("{id}|{id}|{state}|0:0|None|2026-12-07T10:00:00|{start}|2026-12-07T11:00:00|n1|{name}|2026-12-07T10:00:00|{usage}")
    }

    #[test]
    fn an_allocation_without_gres_gpu_holds_none_when_none_was_asked_else_is_not_accounted() {
        let text = line(
            "90",
            "COMPLETED",
            "2026-12-07T10:00:00",
            "00:02:00|00:10:00|billing=4,cpu=4,mem=1G,node=1||",
        );
        let (rows, _) = parse_sacct_rows_eligible(&text, true);
        let runs = run_parts(&rows, SlurmJobId::new(90).unwrap(), None);
        let cpu_only = &run_usages(&runs, false)[0];
        assert_eq!((cpu_only.gpus, cpu_only.gpu_seconds), (Some(0), Some(0)));
        assert!(!cpu_only.notes.iter().any(|n| n.starts_with("gpus")));
        let asked = &run_usages(&runs, true)[0];
        assert_eq!((asked.gpus, asked.gpu_seconds), (None, None));
        assert!(asked
            .notes
            .iter()
            .any(|n| n.starts_with("gpus: not accounted")));
        // No AllocTRES at all: nothing is told, asked or not.
        let text = line(
            "91",
            "COMPLETED",
            "2026-12-07T10:00:00",
            "00:02:00|00:10:00|||",
        );
        let (rows, _) = parse_sacct_rows_eligible(&text, true);
        let runs = run_parts(&rows, SlurmJobId::new(91).unwrap(), None);
        assert_eq!(run_usages(&runs, false)[0].gpus, None);
    }

    #[test]
    fn a_leader_ended_without_its_components_rows_awaits_them_a_while() {
        let leader = line(
            "95+0",
            "COMPLETED",
            "2026-12-07T10:00:00",
            "00:01:00|00:10:00|cpu=1,gres/gpu=1||",
        );
        let (rows, _) = parse_sacct_rows_eligible(&leader, true);
        let runs = run_parts(&rows, SlurmJobId::new(95).unwrap(), None);
        let ended = chrono::NaiveDate::from_ymd_opt(2026, 12, 7)
            .unwrap()
            .and_hms_opt(11, 0, 30)
            .unwrap();
        assert!(runs[0].awaits_components(2, ended), "+1 not written yet");
        assert!(
            !runs[0].awaits_components(1, ended),
            "one component: all there"
        );
        let later = ended + chrono::Duration::minutes(5);
        assert!(!runs[0].awaits_components(2, later), "waited long enough");
        let both = [
            leader,
            line(
                "95+1",
                "COMPLETED",
                "2026-12-07T10:00:00",
                "00:01:00|00:10:00|cpu=1||",
            ),
        ]
        .join("\n");
        let (rows, _) = parse_sacct_rows_eligible(&both, true);
        let runs = run_parts(&rows, SlurmJobId::new(95).unwrap(), None);
        assert!(!runs[0].awaits_components(2, ended));
    }

    #[test]
    fn each_role_has_its_components_allocation_and_its_named_steps_use() {
        let start = "2026-12-07T10:00:20";
        let text = [
            named(
                "80+0",
                "rl",
                "COMPLETED",
                start,
                "00:01:00|00:10:00|cpu=2,gres/gpu=2||",
            ),
            named(
                "80+0.batch",
                "batch",
                "COMPLETED",
                start,
                "00:01:00||cpu=1|1M|",
            ),
            named(
                "80+0.1",
                "trainer",
                "COMPLETED",
                start,
                "00:00:50||cpu=2|8M|gres/gpuutil=40",
            ),
            named("80+0.2", "watch", "COMPLETED", start, "00:00:30||cpu=1|3M|"),
            named(
                "80+1",
                "rl",
                "COMPLETED",
                start,
                "00:01:00|00:10:00|cpu=1,gres/gpu=1||",
            ),
            named(
                "80+1.0",
                "worker",
                "COMPLETED",
                start,
                "00:00:40||cpu=1|5M|",
            ),
        ]
        .join("\n");
        let (rows, bad) = parse_sacct_rows_eligible(&text, true);
        assert!(bad.is_empty(), "{bad:?}");
        let runs = run_parts(&rows, SlurmJobId::new(80).unwrap(), None);
        assert_eq!(runs.len(), 1);
        let whole = &run_usages(&runs, true)[0];
        assert_eq!(whole.gpu_seconds, Some(3 * 60));
        assert_eq!(whole.max_rss_bytes, Some(8 << 20));

        let trainer = runs[0]
            .role_usage("trainer", &RolePlace::Own(0), true)
            .unwrap();
        assert_eq!(trainer.gpu_seconds, Some(2 * 60));
        assert_eq!(trainer.cpus, Some(2));
        assert_eq!(trainer.max_rss_bytes, Some(8 << 20));
        assert_eq!(trainer.gpu_util_percent, Some(40));
        assert_eq!(trainer.queue_wait_s, Some(20));
        let worker = runs[0]
            .role_usage("worker", &RolePlace::Own(1), true)
            .unwrap();
        assert_eq!(worker.gpu_seconds, Some(60));
        assert_eq!(worker.max_rss_bytes, Some(5 << 20));
        let beside = RolePlace::Beside {
            host: "trainer".into(),
            component: 0,
        };
        let watch = runs[0].role_usage("watch", &beside, false).unwrap();
        assert_eq!((watch.gpus, watch.gpu_seconds), (Some(0), Some(0)));
        assert_eq!(watch.elapsed_s, Some(30), "its own step's time");
        assert_eq!(watch.max_rss_bytes, Some(3 << 20));
        assert!(watch.notes.iter().any(|n| n.contains("role trainer")));
        // The roles' GPU-hours add up to the job's.
        let roles: u64 = [&trainer, &worker, &watch]
            .iter()
            .map(|u| u.gpu_seconds.unwrap())
            .sum();
        assert_eq!(Some(roles), whole.gpu_seconds);
        // No row of a role's component: nothing is told of it.
        assert!(runs[0].role_usage("x", &RolePlace::Own(5), true).is_none());
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
        let runs = run_usages(&run_parts(&rows, SlurmJobId::new(40).unwrap(), None), true);
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
        let het = run_usages(&run_parts(&rows, SlurmJobId::new(50).unwrap(), None), true);
        assert_eq!(het.len(), 1);
        assert_eq!(het[0].gpus, Some(6));
        assert_eq!(het[0].gpu_seconds, Some(6 * 600));
        let task = run_usages(
            &run_parts(&rows, SlurmJobId::new(60).unwrap(), Some(2)),
            true,
        );
        assert_eq!(task.len(), 1);
        assert_eq!(task[0].elapsed_s, Some(420));
        // Output without the usage columns (an older capture) gives no usage at all.
        let (old, _) = parse_sacct_rows_eligible("70|70|COMPLETED|0:0|None|2026-12-07T10:00:00|2026-12-07T10:00:00|2026-12-07T10:01:00|n1|job|2026-12-07T10:00:00", true);
        assert!(run_parts(&old, SlurmJobId::new(70).unwrap(), None).is_empty());
    }
}
