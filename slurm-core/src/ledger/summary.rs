//! Usage reports ([`UsageReport`]): records grouped ([`GroupBy`]) and their accounting
//! summed per group, each sum saying how many records lacked the figure.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use crate::record::{JobRecord, RecordFilter, RecordStore, Usage};
use crate::{Error, Result};

/// How a usage report groups records.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GroupBy {
    /// One group per record (its id).
    Record,
    /// By the job's name.
    Name,
    /// By the value of a label (`(none)` for records without it).
    Label(String),
    /// By the spec's partition (`default` when it named none).
    Partition,
    /// By the cluster the job ran on (`default` when the scheduler named none).
    Cluster,
    /// By the day (UTC) the job started, else the day its record was opened.
    Day,
}

/// The words `--by` accepts, for the error that names them.
const GROUP_WORDS: &str = "record, name, label:KEY, partition, cluster or day";

impl FromStr for GroupBy {
    type Err = Error;

    /// `record`, `name`, `label:KEY`, `partition`, `cluster` or `day`.
    fn from_str(text: &str) -> Result<Self> {
        let word = text.trim();
        let by = match word {
            "record" => GroupBy::Record,
            "name" => GroupBy::Name,
            "partition" => GroupBy::Partition,
            "cluster" => GroupBy::Cluster,
            "day" => GroupBy::Day,
            _ => match word.strip_prefix("label:") {
                Some(key) if !key.trim().is_empty() => GroupBy::Label(key.trim().to_string()),
                Some(_) => {
                    return Err(Error::invalid(
                        "--by",
                        "`label:` needs a label name after the colon, e.g. label:team",
                    ))
                }
                None => {
                    return Err(Error::invalid(
                        "--by",
                        format!(
                            "`{}` is not a grouping; use {GROUP_WORDS}",
                            crate::names::short(word)
                        ),
                    ))
                }
            },
        };
        Ok(by)
    }
}

impl fmt::Display for GroupBy {
    /// The word it is read from (`label:team` for a label).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GroupBy::Record => f.write_str("record"),
            GroupBy::Name => f.write_str("name"),
            GroupBy::Label(key) => write!(f, "label:{key}"),
            GroupBy::Partition => f.write_str("partition"),
            GroupBy::Cluster => f.write_str("cluster"),
            GroupBy::Day => f.write_str("day"),
        }
    }
}

impl GroupBy {
    /// The group `record` belongs to.
    pub fn key_of(&self, record: &JobRecord) -> String {
        match self {
            GroupBy::Record => record.id().to_string(),
            GroupBy::Name => record.name().to_string(),
            GroupBy::Label(key) => record
                .labels()
                .get(key)
                .cloned()
                .unwrap_or_else(|| "(none)".to_string()),
            GroupBy::Partition => record
                .spec()
                .and_then(|s| s.partition.clone())
                .unwrap_or_else(|| "default".to_string()),
            GroupBy::Cluster => record
                .backend_ref()
                .and_then(|r| r.cluster.clone())
                .unwrap_or_else(|| "default".to_string()),
            GroupBy::Day => day_of(record),
        }
    }
}

/// When a record counts as having happened: its run's start, else its record's opening.
pub(super) fn record_time(record: &JobRecord) -> DateTime<Utc> {
    record
        .timeline()
        .started_at
        .unwrap_or_else(|| record.submitted_at())
}

/// The day (UTC, `YYYY-MM-DD`) of [`record_time`].
pub(super) fn day_of(record: &JobRecord) -> String {
    record_time(record).format("%Y-%m-%d").to_string()
}

/// One group of a usage report: its records and their accounting summed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageRow {
    /// The group (a record id, a name, a label value, a partition, a cluster, a day, or
    /// `total`).
    pub key: String,
    /// Records in the group.
    pub jobs: u64,
    /// GPU-hours summed over the records that have the figure (`None`: no record has).
    pub gpu_hours: Option<f64>,
    /// CPU-hours summed over the records that have the figure (`None`: no record has).
    pub cpu_hours: Option<f64>,
    /// The median queue wait, in seconds, of the records whose wait is known.
    pub queue_wait_s: Option<u64>,
    /// The 90th percentile (nearest rank) of the known queue waits, in seconds.
    pub queue_wait_p90_s: Option<u64>,
    /// Elapsed wall time summed over the records that have it, in seconds.
    pub elapsed_s: Option<u64>,
    /// The elapsed time as a share of the time limits (sum of elapsed / sum of limits,
    /// over the records that have both).
    pub wall_used: Option<f64>,
    /// Records with no accounting at all (not counted as zero anywhere).
    pub unaccounted: u64,
    /// Records with accounting but no GPU figure (not counted in `gpu_hours`).
    pub gpu_unaccounted: u64,
}

/// Usage summed per group, and over all records.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageReport {
    /// The grouping, as `--by` reads it (`day`, `label:team`, ...).
    pub by: String,
    /// One row per group, sorted by key.
    pub rows: Vec<UsageRow>,
    /// Every record together (key `total`).
    pub total: UsageRow,
}

/// One record's figures, read once.
struct Figures {
    accounted: bool,
    gpu_hours: Option<f64>,
    cpu_hours: Option<f64>,
    queue_wait_s: Option<u64>,
    elapsed_s: Option<u64>,
    wall: Option<(u64, u64)>,
}

impl Figures {
    fn of(record: &JobRecord) -> Figures {
        let usage = record.usage_total();
        // The scheduler's times of the run first; else accounting's wait, when it is
        // one run's (a sum of runs' waits is no wait anyone had).
        let queue_wait_s = record
            .timeline()
            .queue_wait()
            .and_then(|d| u64::try_from(d.num_seconds()).ok())
            .or_else(|| {
                usage
                    .as_ref()
                    .filter(|u| u.runs <= 1)
                    .and_then(|u| u.queue_wait_s)
            });
        Figures {
            accounted: usage.is_some(),
            gpu_hours: usage.as_ref().and_then(Usage::gpu_hours),
            cpu_hours: usage.as_ref().and_then(Usage::cpu_hours),
            queue_wait_s,
            elapsed_s: usage.as_ref().and_then(|u| u.elapsed_s),
            wall: usage
                .as_ref()
                .and_then(|u| u.elapsed_s.zip(u.time_limit_s.filter(|limit| *limit > 0))),
        }
    }
}

/// A group's sums as records are added.
#[derive(Default)]
struct Sums {
    jobs: u64,
    gpu_hours: Option<f64>,
    cpu_hours: Option<f64>,
    waits: Vec<u64>,
    elapsed_s: Option<u64>,
    wall: Option<(u64, u64)>,
    unaccounted: u64,
    gpu_unaccounted: u64,
}

fn add_f64(sum: &mut Option<f64>, figure: Option<f64>) {
    if let Some(x) = figure {
        *sum = Some(sum.unwrap_or(0.0) + x);
    }
}

impl Sums {
    fn add(&mut self, f: &Figures) {
        self.jobs += 1;
        if !f.accounted {
            self.unaccounted += 1;
        } else if f.gpu_hours.is_none() {
            self.gpu_unaccounted += 1;
        }
        add_f64(&mut self.gpu_hours, f.gpu_hours);
        add_f64(&mut self.cpu_hours, f.cpu_hours);
        if let Some(wait) = f.queue_wait_s {
            self.waits.push(wait);
        }
        if let Some(elapsed) = f.elapsed_s {
            self.elapsed_s = Some(self.elapsed_s.unwrap_or(0).saturating_add(elapsed));
        }
        if let Some((elapsed, limit)) = f.wall {
            let (e, l) = self.wall.unwrap_or((0, 0));
            self.wall = Some((e.saturating_add(elapsed), l.saturating_add(limit)));
        }
    }

    fn row(mut self, key: String) -> UsageRow {
        self.waits.sort_unstable();
        UsageRow {
            key,
            jobs: self.jobs,
            gpu_hours: self.gpu_hours,
            cpu_hours: self.cpu_hours,
            queue_wait_s: median(&self.waits),
            queue_wait_p90_s: nearest_rank(&self.waits, 90),
            elapsed_s: self.elapsed_s,
            wall_used: self
                .wall
                .filter(|(_, limit)| *limit > 0)
                .map(|(elapsed, limit)| elapsed as f64 / limit as f64),
            unaccounted: self.unaccounted,
            gpu_unaccounted: self.gpu_unaccounted,
        }
    }
}

/// The median of sorted `values` (of an even count: the mean of the middle two, rounded
/// down).
fn median(values: &[u64]) -> Option<u64> {
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some(
            values[n / 2 - 1] / 2
                + values[n / 2] / 2
                + (values[n / 2 - 1] % 2 + values[n / 2] % 2) / 2,
        ),
    }
}

/// The `percent` percentile of sorted `values` by nearest rank (the smallest value with
/// at least `percent`% of the values at or below it).
fn nearest_rank(values: &[u64], percent: usize) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    let rank = (values.len() * percent).div_ceil(100).max(1);
    values.get(rank - 1).copied()
}

/// Sum `records`' accounting per group of `by`, and over them all. Every record given
/// counts (the caller chooses which: [`usage_of`] takes those of a time span).
pub fn summarise(records: &[JobRecord], by: &GroupBy) -> UsageReport {
    let mut groups: BTreeMap<String, Sums> = BTreeMap::new();
    let mut total = Sums::default();
    for record in records {
        let figures = Figures::of(record);
        total.add(&figures);
        groups.entry(by.key_of(record)).or_default().add(&figures);
    }
    UsageReport {
        by: by.to_string(),
        rows: groups
            .into_iter()
            .map(|(key, sums)| sums.row(key))
            .collect(),
        total: total.row("total".to_string()),
    }
}

/// The usage report of the records in `store` opened at or after `since` (every record
/// without), grouped by `by`.
pub fn usage_of(
    store: &dyn RecordStore,
    since: Option<DateTime<Utc>>,
    by: &GroupBy,
) -> Result<UsageReport> {
    let filter = RecordFilter {
        submitted_since: since,
        ..RecordFilter::default()
    };
    let records = store.list(&filter)?;
    Ok(summarise(&records, by))
}

/// GPU- or CPU-hours for people: two decimals from 0.1 up (`96.00`, `0.25`), four below
/// (`0.0089`), so a short job does not read as `0.00`.
pub fn format_hours(hours: f64) -> String {
    if hours == 0.0 || hours.abs() >= 0.1 {
        format!("{hours:.2}")
    } else {
        format!("{hours:.4}")
    }
}

/// A span back from now, for `--since`: a whole number and a unit, `90m`, `24h`, `7d`
/// or `2w`.
pub fn parse_since(text: &str) -> Result<Duration> {
    parse_span("--since", text)
}

/// A span (`90m`, `24h`, `7d`, `2w`) read for `field`, which errors name.
pub(super) fn parse_span(field: &str, text: &str) -> Result<Duration> {
    let t = text.trim();
    let bad = || {
        Error::invalid(
            field,
            format!(
                "`{}` is not a span of time; use a whole number and a unit: 90m, 24h, 7d or 2w",
                crate::names::short(t)
            ),
        )
    };
    let Some(unit) = t.chars().last() else {
        return Err(bad());
    };
    let digits = &t[..t.len() - unit.len_utf8()];
    if digits.is_empty() || digits.len() > 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let n: i64 = digits.parse().map_err(|_| bad())?;
    if n == 0 {
        return Err(Error::invalid(
            field,
            format!("`{t}` is no time at all; give a span above zero, e.g. 7d"),
        ));
    }
    match unit {
        'm' => Ok(Duration::minutes(n)),
        'h' => Ok(Duration::hours(n)),
        'd' => Ok(Duration::days(n)),
        'w' => Ok(Duration::weeks(n)),
        _ => Err(bad()),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::collections::BTreeMap;

    use chrono::{DateTime, Duration, TimeZone, Utc};

    use super::*;
    use crate::record::{BackendRef, JobId, MemoryRecordStore, Timeline, Usage};
    use crate::spec::JobSpec;
    use crate::state::JobState;
    use crate::storage::RemotePath;
    use crate::ErrorKind;

    /// Noon of day `day` of December 2026, plus `minutes`.
    pub(crate) fn at(day: u32, minutes: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, day, 12, 0, 0).unwrap() + Duration::minutes(minutes)
    }

    /// A record of `yaml`'s spec, opened at `opened`.
    pub(crate) fn record_of(yaml: &str, opened: DateTime<Utc>) -> JobRecord {
        let spec = JobSpec::from_yaml_str(yaml).unwrap();
        let id = JobId::mint_for(&spec);
        let dir = RemotePath::parse("/shared/results").unwrap();
        let mut record = JobRecord::new(id, &spec, dir).unwrap();
        record.submitted_at = opened;
        record
    }

    /// An ended record named `name`, with `labels`, that waited `wait_min` minutes from
    /// its open on `day` and used `usage`.
    pub(crate) fn ended(
        name: &str,
        labels: &[(&str, &str)],
        day: u32,
        wait_min: i64,
        usage: Option<Usage>,
    ) -> JobRecord {
        let labels: String = labels
            .iter()
            .map(|(k, v)| format!("  {k}: \"{v}\"\n"))
            .collect();
        let labels = if labels.is_empty() {
            String::new()
        } else {
            format!("labels:\n{labels}")
        };
        let yaml = format!("name: \"{name}\"\ncommand: \"true\"\ntime: \"01:00:00\"\n{labels}");
        let mut record = record_of(&yaml, at(day, 0));
        record.state = JobState::Complete;
        record.timeline = Timeline::new(
            Some(at(day, 0)),
            Some(at(day, 0)),
            Some(at(day, wait_min)),
            Some(at(day, wait_min + 30)),
        );
        record.usage = usage;
        record
    }

    /// A run of `gpus` GPUs for `elapsed_s` seconds of a one-hour limit.
    pub(crate) fn gpu_run(gpus: Option<u32>, elapsed_s: u64) -> Usage {
        Usage::of_run(
            Some(elapsed_s),
            Some(3600),
            None,
            gpus,
            Some(8),
            None,
            None,
            None,
        )
    }

    #[test]
    fn a_groups_gpu_hours_are_the_sum_and_a_record_without_usage_is_counted_not_zeroed() {
        let records = vec![
            ended("train", &[], 7, 10, Some(gpu_run(Some(4), 1800))), // 2 GPU-h
            ended("train", &[], 7, 20, Some(gpu_run(Some(2), 3600))), // 2 GPU-h
            ended("train", &[], 7, 30, Some(gpu_run(Some(1), 1800))), // 0.5 GPU-h
            ended("train", &[], 7, 40, None),
            ended("eval", &[], 8, 5, Some(gpu_run(None, 600))),
        ];
        let report = summarise(&records, &GroupBy::Name);
        assert_eq!(report.by, "name");
        let keys: Vec<&str> = report.rows.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(keys, ["eval", "train"]);
        let train = &report.rows[1];
        assert_eq!(train.jobs, 4);
        assert_eq!(train.gpu_hours, Some(4.5));
        assert_eq!(train.unaccounted, 1);
        assert_eq!(train.gpu_unaccounted, 0);
        assert_eq!(train.elapsed_s, Some(1800 + 3600 + 1800));
        assert_eq!(train.wall_used, Some(7200.0 / 10800.0));
        // Waits 10, 20, 30, 40 minutes: the median between the middle two, p90 the last.
        assert_eq!(train.queue_wait_s, Some(25 * 60));
        assert_eq!(train.queue_wait_p90_s, Some(40 * 60));
        let eval = &report.rows[0];
        assert_eq!(
            eval.gpu_hours, None,
            "no record of the group has the figure"
        );
        assert_eq!(eval.gpu_unaccounted, 1);
        assert_eq!(eval.cpu_hours, Some(8.0 * 600.0 / 3600.0));
        assert_eq!(report.total.key, "total");
        assert_eq!(report.total.jobs, 5);
        assert_eq!(report.total.gpu_hours, Some(4.5));
        assert_eq!(
            (report.total.unaccounted, report.total.gpu_unaccounted),
            (1, 1)
        );
    }

    #[test]
    fn the_median_and_p90_of_ten_waits() {
        let records: Vec<JobRecord> = (1..=10)
            .map(|i| ended("w", &[], 7, i * 10, Some(gpu_run(Some(1), 60))))
            .collect();
        let row = &summarise(&records, &GroupBy::Day).rows[0];
        assert_eq!(row.key, "2026-12-07");
        assert_eq!(row.queue_wait_s, Some(55 * 60));
        assert_eq!(row.queue_wait_p90_s, Some(90 * 60));
        assert_eq!(median(&[3]), Some(3));
        assert_eq!(median(&[3, 4]), Some(3));
        assert_eq!(nearest_rank(&[], 90), None);
    }

    #[test]
    fn records_group_by_label_partition_cluster_day_and_record() {
        let mut a = ended(
            "a",
            &[("team", "vision")],
            7,
            0,
            Some(gpu_run(Some(1), 3600)),
        );
        let b = ended("b", &[("team", "nlp")], 8, 0, Some(gpu_run(Some(2), 3600)));
        let c = ended("c", &[], 8, 0, Some(gpu_run(Some(3), 3600)));
        a.backend_ref = Some(BackendRef::new("1").on_cluster("east"));
        let records = vec![a.clone(), b, c];
        let by_label = summarise(&records, &GroupBy::Label("team".into()));
        let rows: BTreeMap<&str, Option<f64>> = by_label
            .rows
            .iter()
            .map(|r| (r.key.as_str(), r.gpu_hours))
            .collect();
        assert_eq!(
            rows,
            BTreeMap::from([
                ("(none)", Some(3.0)),
                ("nlp", Some(2.0)),
                ("vision", Some(1.0))
            ])
        );
        assert_eq!(by_label.by, "label:team");
        let by_cluster = summarise(&records, &GroupBy::Cluster);
        let keys: Vec<(&str, u64)> = by_cluster
            .rows
            .iter()
            .map(|r| (r.key.as_str(), r.jobs))
            .collect();
        assert_eq!(keys, [("default", 2), ("east", 1)]);
        let by_partition = summarise(&records, &GroupBy::Partition);
        assert_eq!(by_partition.rows.len(), 1);
        assert_eq!(by_partition.rows[0].key, "default");
        let by_day = summarise(&records, &GroupBy::Day);
        let days: Vec<(&str, Option<f64>)> = by_day
            .rows
            .iter()
            .map(|r| (r.key.as_str(), r.gpu_hours))
            .collect();
        assert_eq!(days, [("2026-12-07", Some(1.0)), ("2026-12-08", Some(5.0))]);
        let by_record = summarise(&records, &GroupBy::Record);
        assert!(by_record.rows.iter().any(|r| r.key == a.id().to_string()));
    }

    #[test]
    fn a_record_without_a_start_falls_on_the_day_it_was_opened() {
        let mut r = ended("late", &[], 9, 0, None);
        r.timeline = Timeline::default();
        r.submitted_at = Utc.with_ymd_and_hms(2026, 12, 9, 23, 59, 0).unwrap();
        assert_eq!(GroupBy::Day.key_of(&r), "2026-12-09");
    }

    #[test]
    fn group_by_reads_its_words_and_names_them_when_refusing() {
        assert_eq!("day".parse::<GroupBy>().unwrap(), GroupBy::Day);
        assert_eq!("record".parse::<GroupBy>().unwrap(), GroupBy::Record);
        assert_eq!("name".parse::<GroupBy>().unwrap(), GroupBy::Name);
        assert_eq!("partition".parse::<GroupBy>().unwrap(), GroupBy::Partition);
        assert_eq!("cluster".parse::<GroupBy>().unwrap(), GroupBy::Cluster);
        assert_eq!(
            "label:team".parse::<GroupBy>().unwrap(),
            GroupBy::Label("team".into())
        );
        assert_eq!(GroupBy::Label("team".into()).to_string(), "label:team");
        let err = "week".parse::<GroupBy>().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Invalid);
        let text = err.to_string();
        assert!(text.contains("--by") && text.contains("`week`"), "{text}");
        assert!(
            text.contains("label:KEY") && text.contains("partition"),
            "{text}"
        );
        assert!("label:"
            .parse::<GroupBy>()
            .unwrap_err()
            .to_string()
            .contains("label name"));
    }

    #[test]
    fn since_reads_minutes_hours_days_and_weeks() {
        assert_eq!(parse_since("90m").unwrap(), Duration::minutes(90));
        assert_eq!(parse_since("24h").unwrap(), Duration::hours(24));
        assert_eq!(parse_since(" 7d ").unwrap(), Duration::days(7));
        assert_eq!(parse_since("2w").unwrap(), Duration::weeks(2));
        for bad in ["", "d", "7", "7y", "-7d", "1.5d", "7 d", "0d", "é"] {
            let err = parse_since(bad).unwrap_err().to_string();
            assert!(err.contains("--since"), "{bad}: {err}");
        }
        assert!(parse_since("3x")
            .unwrap_err()
            .to_string()
            .contains("90m, 24h, 7d or 2w"));
    }

    #[test]
    fn usage_of_a_store_takes_the_records_opened_since() {
        let store = MemoryRecordStore::new();
        let old = ended("old", &[], 1, 0, Some(gpu_run(Some(8), 3600)));
        let new = ended("new", &[], 9, 0, Some(gpu_run(Some(1), 3600)));
        store.open(&old).unwrap();
        store.open(&new).unwrap();
        let all = usage_of(&store, None, &GroupBy::Name).unwrap();
        assert_eq!(all.total.jobs, 2);
        assert_eq!(all.total.gpu_hours, Some(9.0));
        let recent = usage_of(&store, Some(at(5, 0)), &GroupBy::Name).unwrap();
        assert_eq!(recent.total.jobs, 1);
        assert_eq!(recent.rows[0].key, "new");
    }
}
