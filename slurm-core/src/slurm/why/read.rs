//! Reading what the why script's parts printed: squeue rows of the jobs, the nodes by
//! state, the jobs ahead, and the limits of associations and QOS (`scontrol show
//! assoc_mgr`).

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDateTime, Utc};

use crate::backend::{JobAhead, NodeStates};
use crate::slurm::parse::optional;

/// The squeue format the why script asks for: id, state, reason, partition, priority,
/// start (the estimate while pending), submit, dependency, account, QOS, user, time
/// limit, and the name last (it may hold the delimiter).
pub(crate) const WHY_FORMAT: &str = "%i|%T|%r|%P|%Q|%S|%V|%E|%a|%q|%u|%l|%j";

/// The field (counted from 1) of the user in [`WHY_FORMAT`].
pub(crate) const USER_FIELD: usize = 11;

/// The field (counted from 1) of the QOS in [`WHY_FORMAT`].
pub(crate) const QOS_FIELD: usize = 10;

/// How many of the jobs ahead are shown (the count says how many there are).
pub(crate) const AHEAD_SHOWN: usize = 5;

/// One squeue row in [`WHY_FORMAT`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WhyRow {
    /// The id column (`77`, `77_3`, `77_[1-5]`).
    pub id: String,
    /// The job's number (the id column up to `_` or `+`).
    pub job: String,
    /// The state as printed (`PENDING`, `RUNNING`).
    pub state: String,
    pub reason: Option<String>,
    pub partition: Option<String>,
    pub priority: Option<u64>,
    /// The expected start while pending (the backfill plan), the start once running.
    pub start: Option<DateTime<Utc>>,
    pub dependency: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub user: Option<String>,
    pub time_limit: Option<String>,
}

/// A time as the why script's tools print it (UTC, `2026-12-07T12:30:00`); `N/A`,
/// `Unknown` and the like are `None`.
pub(crate) fn utc_time(text: &str) -> Option<DateTime<Utc>> {
    NaiveDateTime::parse_from_str(text.trim(), "%Y-%m-%dT%H:%M:%S")
        .ok()
        .map(|t| t.and_utc())
}

/// The rows of part 0 (lines that are not rows are skipped: a cluster banner).
pub(crate) fn why_rows(stdout: &str) -> Vec<WhyRow> {
    stdout
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.trim_end_matches('\r').splitn(13, '|').collect();
            if f.len() != 13 {
                return None;
            }
            let job: String = f[0].chars().take_while(char::is_ascii_digit).collect();
            if job.is_empty() {
                return None;
            }
            Some(WhyRow {
                id: f[0].trim().to_string(),
                job,
                state: f[1].trim().to_string(),
                reason: optional(f[2]),
                partition: optional(f[3]),
                priority: f[4].trim().parse().ok(),
                start: utc_time(f[5]),
                dependency: optional(f[7]),
                account: optional(f[8]),
                qos: optional(f[9]),
                user: optional(f[10]),
                time_limit: optional(f[11]),
            })
        })
        .collect()
}

/// The nodes by state of each partition (part 1: `PARTITION|STATE|COUNT` lines). A
/// node in a state none of the five names (`completing`, `reserved`, ...) is counted
/// where it stands for new jobs: busy as allocated, unavailable as down.
pub(crate) fn nodes_by_partition(stdout: &str) -> BTreeMap<String, NodeStates> {
    let mut by = BTreeMap::<String, NodeStates>::new();
    for line in stdout.lines() {
        let f: Vec<&str> = line.trim().split('|').collect();
        let [partition, state, count] = f[..] else {
            continue;
        };
        let Ok(count) = count.trim().parse::<u32>() else {
            continue;
        };
        let partition = partition.trim().trim_end_matches('*').to_string();
        let state = state
            .trim()
            .trim_end_matches(|c: char| "*~#!%$@^-+".contains(c))
            .to_ascii_lowercase();
        let nodes = by.entry(partition).or_default();
        let slot = match state.as_str() {
            "idle" | "planned" => &mut nodes.idle,
            "mixed" => &mut nodes.mixed,
            "drained" | "draining" | "drain" => &mut nodes.drained,
            "allocated" | "alloc" | "completing" | "reserved" | "resv" => &mut nodes.allocated,
            _ => &mut nodes.down,
        };
        *slot += count;
    }
    by
}

/// The jobs ahead of each job (part 2): its count and the first shown, by job number.
pub(crate) fn jobs_ahead(stdout: &str) -> BTreeMap<String, (u32, Vec<JobAhead>)> {
    let mut by = BTreeMap::<String, (u32, Vec<JobAhead>)>::new();
    for line in stdout.lines() {
        let f: Vec<&str> = line.trim_end_matches('\r').splitn(6, '|').collect();
        match f[..] {
            ["C", job, count] => {
                if let Ok(count) = count.trim().parse() {
                    by.entry(job.to_string()).or_default().0 = count;
                }
            }
            ["A", job, id, priority, user, reason] => {
                if let Ok(priority) = priority.trim().parse() {
                    by.entry(job.to_string()).or_default().1.push(JobAhead {
                        job: id.trim().to_string(),
                        priority,
                        user: optional(user),
                        reason: optional(reason),
                    });
                }
            }
            _ => {}
        }
    }
    by
}

/// One record of `scontrol show assoc_mgr`: an association or a QOS, its fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LimitRecord {
    pub fields: BTreeMap<String, String>,
}

impl LimitRecord {
    /// A field's value with any `(id)` suffix cut (`slurmrun(1001)` is `slurmrun`).
    pub(crate) fn name_of(&self, key: &str) -> Option<&str> {
        let value = self.fields.get(key)?;
        Some(value.split('(').next().unwrap_or(value)).filter(|v| !v.is_empty())
    }

    /// A limit `MAX(USED)` (`1(1)`, `N(0)`: no limit): its maximum and what is used,
    /// each `None` where not readable. For a TRES list (`cpu=N(0),gres/gpu=8(4)`),
    /// `tres` names the entry.
    pub(crate) fn limit(&self, key: &str, tres: Option<&str>) -> (Option<u64>, Option<u64>) {
        let Some(value) = self.fields.get(key) else {
            return (None, None);
        };
        let entry = match tres {
            None => Some(value.as_str()),
            Some(tres) => value
                .split(',')
                .find_map(|e| e.strip_prefix(tres).and_then(|r| r.strip_prefix('='))),
        };
        let Some(entry) = entry else {
            return (None, None);
        };
        let (max, used) = match entry.split_once('(') {
            Some((max, rest)) => (max, Some(rest.trim_end_matches(')'))),
            None => (entry, None),
        };
        (
            max.trim().parse().ok(),
            used.and_then(|u| u.trim().parse::<f64>().ok())
                .map(|u| u as u64),
        )
    }
}

/// The associations and QOS of part 3. A record starts at `ClusterName=` (an
/// association) or `QOS=` (a QOS); its fields are the `KEY=VALUE` words up to the next.
pub(crate) fn limit_records(stdout: &str) -> (Vec<LimitRecord>, Vec<LimitRecord>) {
    let mut associations = Vec::new();
    let mut qos = Vec::new();
    let mut current: Option<(bool, LimitRecord)> = None;
    for word in stdout.split_whitespace() {
        let Some((key, value)) = word.split_once('=') else {
            continue;
        };
        let starts = match key {
            "ClusterName" => Some(true),
            "QOS" => Some(false),
            _ => None,
        };
        if let Some(is_assoc) = starts {
            if let Some((was_assoc, record)) = current.take() {
                if was_assoc {
                    &mut associations
                } else {
                    &mut qos
                }
                .push(record);
            }
            current = Some((is_assoc, LimitRecord::default()));
        }
        if let Some((_, record)) = current.as_mut() {
            record
                .fields
                .entry(key.to_string())
                .or_insert_with(|| value.to_string());
        }
    }
    if let Some((was_assoc, record)) = current {
        if was_assoc {
            &mut associations
        } else {
            &mut qos
        }
        .push(record);
    }
    (associations, qos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_read_their_fields_and_times_in_utc() {
        let rows = why_rows(
            "77|PENDING|Resources|gpu|4294901755|2026-12-07T12:30:00|2026-12-07T12:00:00|(null)|research|normal|slurmrun|10:00|a|b\n\
             78_[1-3]|PENDING|Dependency|gpu|1|N/A|2026-12-07T12:00:00|afterok:77(unfulfilled)|research|normal|slurmrun|10:00|x\n\
             CLUSTER: testbed\n",
        );
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].job, "77");
        assert_eq!(rows[0].priority, Some(4294901755));
        assert_eq!(
            rows[0].start.unwrap().to_rfc3339(),
            "2026-12-07T12:30:00+00:00"
        );
        assert_eq!(rows[1].job, "78");
        assert_eq!(rows[1].start, None);
        assert_eq!(
            rows[1].dependency.as_deref(),
            Some("afterok:77(unfulfilled)")
        );
        assert_eq!(rows[0].dependency, None);
    }

    #[test]
    fn nodes_count_by_state_and_partition() {
        let nodes = nodes_by_partition(
            "gpu*|allocated|1\ngpu*|idle|1\ncpu|drained*|1\ncpu|down*|2\ncpu|mixed|1\n",
        );
        assert_eq!(nodes["gpu"].allocated, 1);
        assert_eq!(nodes["gpu"].idle, 1);
        assert_eq!(nodes["cpu"].drained, 1);
        assert_eq!(nodes["cpu"].down, 2);
        assert_eq!(nodes["cpu"].mixed, 1);
    }

    #[test]
    fn jobs_ahead_read_counts_and_the_first_shown() {
        let ahead = jobs_ahead("A|80|79|900|bob|Resources\nC|80|3\nC|81|0\n");
        assert_eq!(ahead["80"].0, 3);
        assert_eq!(ahead["80"].1[0].job, "79");
        assert_eq!(ahead["80"].1[0].priority, 900);
        assert_eq!(ahead["81"], (0, vec![]));
    }

    #[test]
    fn limits_read_maximum_and_use() {
        let (assocs, qos) = limit_records(
            "Current Association Manager state\n\nAssociation Records\n\n\
             ClusterName=testbed Account=limited UserName=slurmrun(1001) Partition= ID=3 \
             GrpJobs=N(0) GrpTRES=cpu=N(0),gres/gpu=16(8) MaxJobs=1(1) MaxWallPJ=\n\
             QOS Records\n\nQOS=short(2) MaxWallPJ=10 MaxJobsPU=N(0)\n",
        );
        assert_eq!(assocs.len(), 1);
        assert_eq!(assocs[0].name_of("UserName"), Some("slurmrun"));
        assert_eq!(assocs[0].limit("MaxJobs", None), (Some(1), Some(1)));
        assert_eq!(assocs[0].limit("GrpJobs", None), (None, Some(0)));
        assert_eq!(
            assocs[0].limit("GrpTRES", Some("gres/gpu")),
            (Some(16), Some(8))
        );
        assert_eq!(qos[0].name_of("QOS"), Some("short"));
        assert_eq!(qos[0].limit("MaxWallPJ", None), (Some(10), None));
        assert_eq!(assocs[0].limit("Nope", None), (None, None));
    }
}
