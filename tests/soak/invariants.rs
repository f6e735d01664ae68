//! The soak's invariants, one function each: every one prints a PASS or FAIL line with
//! its numbers and counts in [`Verdicts`]; the soak fails if any failed.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::{Duration, Instant};

use slurm_core::{Backend, ErrorKind, JobRecord, JobState};
use slurm_run_testsupport::Harness;

use crate::chaos::ChaosLog;
use crate::cluster_view::ClusterView;
use crate::load::{slurm_id, Submitted, WatchLog};

/// Growth of open file descriptors and threads tolerated between start and end.
const FD_SLACK: usize = 16;
const THREAD_SLACK: usize = 4;

/// Collects PASS/FAIL lines.
#[derive(Default)]
pub struct Verdicts {
    /// Invariants that failed.
    pub failed: usize,
}

impl Verdicts {
    fn check(&mut self, ok: bool, what: &str, detail: impl fmt::Display) {
        if !ok {
            self.failed += 1;
        }
        println!("{} {what}: {detail}", if ok { "PASS" } else { "FAIL" });
    }
}

/// `messages`, one an indented line.
fn listed<'a>(messages: impl IntoIterator<Item = &'a String>) -> String {
    messages
        .into_iter()
        .map(|m| format!("\n      {m}"))
        .collect()
}

/// Every submit answered with a SLURM job id or a typed error, and Ambiguous (a person
/// must decide) was rare: at most one in fifty.
pub fn every_submit_answered(v: &mut Verdicts, outcomes: &[Submitted]) {
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    let mut ok_with_id = 0;
    let mut ok_without_id = Vec::new();
    let mut ambiguous = Vec::new();
    for o in outcomes {
        match &o.result {
            Ok((_, Some(_))) => ok_with_id += 1,
            Ok((id, None)) => ok_without_id.push(id.to_string()),
            Err((kind, message)) => {
                *by_kind.entry(format!("{kind:?}")).or_default() += 1;
                if *kind == ErrorKind::Ambiguous {
                    ambiguous.push(format!("{}: {message}", o.name));
                }
            }
        }
    }
    let errors: usize = by_kind.values().sum();
    v.check(
        ok_without_id.is_empty() && ok_with_id + errors == outcomes.len(),
        "every submit answered with a SLURM job id or a typed error",
        format!(
            "{ok_with_id} with an id, {} without, {errors} errors {by_kind:?}",
            ok_without_id.len()
        ),
    );
    let ambiguous_limit = (outcomes.len() / 50).max(1);
    v.check(
        ambiguous.len() <= ambiguous_limit,
        "Ambiguous submits are rare",
        format!(
            "{} (limit {ambiguous_limit}){}",
            ambiguous.len(),
            listed(&ambiguous)
        ),
    );
}

/// Exactly once: each record holding a SLURM id has exactly that one job under its name,
/// no job carries the name of a record whose submit failed, and no job of the soak's
/// prefix is unaccounted for.
pub fn exactly_once(v: &mut Verdicts, records: &[JobRecord], view: &ClusterView, prefix: &str) {
    let mut exactly_once = 0;
    let mut not_once = Vec::new();
    let mut jobs_for_failed = Vec::new();
    let mut ambiguous_with_jobs = Vec::new();
    for record in records {
        let jobs = view
            .by_name
            .get(record.id().as_str())
            .cloned()
            .unwrap_or_default();
        match &record.backend_ref() {
            Some(b) => {
                if jobs.len() == 1 && jobs.contains(&slurm_id(b)) {
                    exactly_once += 1;
                } else {
                    not_once.push(format!(
                        "{} holds {} but jobs named so: {jobs:?}",
                        record.id(),
                        b.native_id
                    ));
                }
            }
            None if record.state() == JobState::Submitting => {
                ambiguous_with_jobs.push(format!("{}: jobs {jobs:?}", record.id()));
            }
            None if !jobs.is_empty() => jobs_for_failed.push(format!(
                "{} ({}) failed to submit yet jobs {jobs:?} carry its name",
                record.id(),
                record.state()
            )),
            None => {}
        }
    }
    let with_ref = records.iter().filter(|r| r.backend_ref().is_some()).count();
    v.check(
        not_once.is_empty(),
        "exactly one SLURM job per record with a SLURM id (squeue --name + sacct --name)",
        format!("{exactly_once}/{with_ref}{}", listed(&not_once)),
    );
    v.check(
        jobs_for_failed.is_empty(),
        "no SLURM job carries the name of a record whose submit failed",
        format!(
            "{} failed records checked{}{}",
            records
                .iter()
                .filter(|r| r.backend_ref().is_none() && r.state() != JobState::Submitting)
                .count(),
            listed(&jobs_for_failed),
            ambiguous_with_jobs
                .iter()
                .map(|m| format!("\n      left SUBMITTING (ambiguous): {m}"))
                .collect::<String>()
        ),
    );
    let held: HashMap<u64, &str> = records
        .iter()
        .filter_map(|r| Some((slurm_id(r.backend_ref()?), r.id().as_str())))
        .collect();
    let unaccounted: Vec<String> = view
        .prefixed
        .iter()
        // Accounted for: the job a record holds, under that record's name.
        .filter(|(job, name)| held.get(job) != Some(&name.as_str()))
        .map(|(job, name)| format!("{job} {name}"))
        .collect();
    v.check(
        unaccounted.is_empty(),
        &format!("no SLURM job named {prefix}* is unaccounted for"),
        format!(
            "{} jobs of the soak on the cluster, {} unaccounted{}",
            view.prefixed.len(),
            unaccounted.len(),
            listed(&unaccounted)
        ),
    );
}

/// sacct consistency: every submitted record ended terminal, in the state sacct gives
/// (COMPLETE with COMPLETED, ERROR with FAILED), and in the one its command meant.
pub async fn records_agree_with_sacct(
    v: &mut Verdicts,
    h: &Harness,
    records: &[JobRecord],
    view: &ClusterView,
    outcomes: &[Submitted],
) {
    let expected: HashMap<&str, bool> = outcomes
        .iter()
        .map(|o| (o.name.as_str(), o.expect_failure))
        .collect();
    let with_ref = records.iter().filter(|r| r.backend_ref().is_some()).count();
    let mut consistent = 0;
    let mut inconsistent = Vec::new();
    for record in records.iter().filter(|r| r.backend_ref().is_some()) {
        let id = slurm_id(record.backend_ref().expect("filtered"));
        let current = h.backend.record(record.id()).await.expect("record");
        let sacct = view.sacct_state.get(&id).map(String::as_str);
        let fits = match (current.state(), sacct) {
            (JobState::Complete, Some("COMPLETED")) => true,
            (JobState::Error, Some(s)) => s == "FAILED",
            _ => false,
        };
        let wanted = match expected.get(current.name()) {
            Some(true) => JobState::Error,
            _ => JobState::Complete,
        };
        if fits && current.state() == wanted {
            consistent += 1;
        } else {
            inconsistent.push(format!(
                "{} ({id}): record {}, sacct {sacct:?}, expected {wanted}",
                current.id(),
                current.state()
            ));
        }
    }
    v.check(
        inconsistent.is_empty(),
        "every submitted record ended terminal, as sacct says (COMPLETE<->COMPLETED, ERROR<->FAILED) and as its command meant",
        format!(
            "{consistent}/{with_ref}{}",
            listed(inconsistent.iter().take(20))
        ),
    );
}

/// One terminal report per job: no watch reported a job's end twice, every submitted
/// record's end was reported (none abandoned at the drain limit), and no watch ended on
/// an error under connection loss (transient errors only back off).
pub fn one_terminal_report_per_job(v: &mut Verdicts, records: &[JobRecord], watch: &WatchLog) {
    let with_ref = records.iter().filter(|r| r.backend_ref().is_some()).count();
    let duplicates: Vec<String> = watch
        .terminal_reports
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, n)| format!("{id} x{n}"))
        .collect();
    let unreported = records
        .iter()
        .filter(|r| r.backend_ref().is_some() && !watch.terminal_reports.contains_key(r.id()))
        .count();
    v.check(
        duplicates.is_empty(),
        "no duplicate terminal transitions reported by the watches",
        format!(
            "{} transitions, {} terminal reports for {with_ref} records, {} duplicated{}",
            watch.transitions,
            watch.terminal_reports.values().sum::<u32>(),
            duplicates.len(),
            listed(&duplicates)
        ),
    );
    v.check(
        unreported == 0 && watch.abandoned == 0,
        "the watches followed every submitted record to its end",
        format!(
            "{unreported} records without a terminal report, {} abandoned at the drain limit",
            watch.abandoned
        ),
    );
    v.check(
        watch.ended_with.is_empty(),
        "no watch ended on an error under connection loss (transient errors back off)",
        format!(
            "{} ended, {} restarted{}",
            watch.ended_with.len(),
            watch.restarts,
            listed(watch.ended_with.iter().take(10))
        ),
    );
}

/// Open file descriptors and threads of this process.
#[derive(Debug, Clone, Copy)]
pub struct Resources {
    fds: usize,
    threads: usize,
}

fn count_dir(path: &str) -> usize {
    std::fs::read_dir(path)
        .map(|d| d.count())
        .unwrap_or_else(|e| panic!("read {path}: {e}"))
}

impl Resources {
    /// As they are now.
    pub fn now() -> Resources {
        Resources {
            fds: count_dir("/proc/self/fd"),
            threads: count_dir("/proc/self/task"),
        }
    }

    /// Polled until back within the slack of `start` (idle threads leave after a while),
    /// or `limit` passed: as they are then.
    pub async fn settled(start: Resources, limit: Duration) -> Resources {
        let deadline = Instant::now() + limit;
        loop {
            let now = Resources::now();
            if now.within_slack_of(start) || Instant::now() >= deadline {
                return now;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    fn within_slack_of(self, start: Resources) -> bool {
        self.fds <= start.fds + FD_SLACK && self.threads <= start.threads + THREAD_SLACK
    }
}

/// No fd or thread growth between `start` and `end`.
pub fn no_resource_growth(v: &mut Verdicts, start: Resources, end: Resources) {
    v.check(
        end.fds <= start.fds + FD_SLACK,
        "open file descriptors did not grow",
        format!(
            "{} at start, {} at end (slack {FD_SLACK})",
            start.fds, end.fds
        ),
    );
    v.check(
        end.threads <= start.threads + THREAD_SLACK,
        "threads did not grow",
        format!(
            "{} at start, {} at end (slack {THREAD_SLACK})",
            start.threads, end.threads
        ),
    );
}

/// The chaos happened: connections were killed, and every kill(2) worked.
pub fn chaos_happened(v: &mut Verdicts, chaos: &ChaosLog) {
    v.check(
        chaos.kills > 0 && chaos.kill_errors.is_empty(),
        "the chaos task killed connections",
        format!(
            "{} sshd sessions killed ({} times all of them just after a submit began), {} times none of ours was up, {} lost answers and {} empty answers armed{}",
            chaos.kills,
            chaos.aimed,
            chaos.no_target,
            chaos.armed_lose,
            chaos.armed_empty,
            listed(&chaos.kill_errors)
        ),
    );
}
