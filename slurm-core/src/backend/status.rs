//! Status of many jobs in one round trip: squeue and sacct for every tracked id at once,
//! mapped through the state machine into the records; scontrol, the completion check and
//! failure classification only when a job needs them.

use std::collections::{BTreeMap, HashMap};

use super::slurm::SlurmBackend;
use super::{JobStatus, NativeStatus};
use crate::batch::{batch, split_batch_output};
use crate::classify::{classify_failure, ErrorClass, LOG_TAIL_LINES};
use crate::record::{JobId, JobRecord, Mark, RecordStore, TransitionSource};
use crate::render::Renderer;
use crate::slurm::{
    is_accounting_disabled, is_invalid_job_id, is_transient_scheduler_error, map_state,
    parse_sacct, parse_scontrol_show_job, parse_squeue, resolve_newest, scontrol_show_job_command,
    SacctRow, SlurmBaseState, SlurmJobId, SlurmState, SACCT_FORMAT, SQUEUE_FORMAT,
};
use crate::spec::CompletionCheck;
use crate::state::JobState;
use crate::transport::{Command, Output, Transport};
use crate::{Error, Result};

/// A job as the scheduler described it in this poll.
#[derive(Debug, Clone)]
struct Observation {
    state: SlurmState,
    reason: Option<String>,
    exit_code: Option<i32>,
    nodes: Option<String>,
    source: &'static str,
    /// An earlier run of a requeued job ended this way (NODE_FAIL, PREEMPTED, ...).
    requeued_after: Option<String>,
    /// A step of the newest run that did not finish (`0 CANCELLED`, `batch FAILED`).
    failed_step: Option<(String, SlurmState)>,
}

type Key = (Option<String>, SlurmJobId);

/// What a poll decided for one record: the mark, what the scheduler said, and what
/// must still be read before the mark is final.
struct Decision {
    mark: Mark,
    native: Option<NativeStatus>,
    followup: Followup,
    observed: Option<Observation>,
}

/// What a job needs after the first round trip, before it can be marked.
enum Followup {
    None,
    Classify,
    StatusJson,
}

impl<T, R, S> SlurmBackend<T, R, S>
where
    T: Transport + 'static,
    R: Renderer + 'static,
    S: RecordStore + 'static,
{
    /// Observe `ids` and update their records. One round trip for any number of jobs
    /// in the common case; answers in the order of `ids`.
    pub(super) async fn poll(&self, ids: &[JobId]) -> Result<Vec<JobStatus>> {
        let store = &self.inner.store;
        let records: Vec<JobRecord> = ids.iter().map(|id| store.get(id)).collect::<Result<_>>()?;
        let mut groups: BTreeMap<Option<String>, Vec<SlurmJobId>> = BTreeMap::new();
        for record in &records {
            if record.state.is_terminal() {
                continue;
            }
            if let Some(backend_ref) = &record.backend_ref {
                let ids = groups.entry(backend_ref.cluster.clone()).or_default();
                if !ids.contains(&backend_ref.slurm_job_id) {
                    ids.push(backend_ref.slurm_job_id);
                }
            }
        }
        let running: Vec<SlurmJobId> = records
            .iter()
            .filter(|r| r.state == JobState::Running)
            .filter_map(|r| r.backend_ref.as_ref().map(|b| b.slurm_job_id))
            .collect();
        let mut observations = if groups.is_empty() {
            HashMap::new()
        } else {
            self.observe(&groups, &running).await?
        };

        // Jobs neither squeue nor sacct knows: ask scontrol (a second round trip, rare).
        let missing: Vec<Key> = groups
            .iter()
            .flat_map(|(cluster, ids)| ids.iter().map(move |id| (cluster.clone(), *id)))
            .filter(|key| !observations.contains_key(key))
            .collect();
        if !missing.is_empty() {
            observations.extend(self.observe_scontrol(&missing).await?);
        }

        // Decide each record's next state; collect the follow-ups that need the cluster.
        let mut decisions: Vec<Option<Decision>> = Vec::new();
        for record in &records {
            let key = match (&record.backend_ref, record.state.is_terminal()) {
                (Some(r), false) => (r.cluster.clone(), r.slurm_job_id),
                _ => {
                    decisions.push(None);
                    continue;
                }
            };
            let Some(observed) = observations.get(&key).cloned() else {
                let mark = Mark::new(JobState::Unknown, TransitionSource::Poll)
                    .message("not found by squeue, sacct or scontrol");
                decisions.push(Some(Decision {
                    mark,
                    native: None,
                    followup: Followup::None,
                    observed: None,
                }));
                continue;
            };
            let native = NativeStatus {
                state: observed.state.raw.clone(),
                reason: observed.reason.clone(),
                exit_code: observed.exit_code,
                nodes: observed.nodes.clone(),
                source: observed.source,
            };
            let (state, class) = map_state(&observed.state);
            let mut message = describe(&observed);
            let (state, class, followup) = match state {
                JobState::Pending
                    if observed
                        .reason
                        .as_deref()
                        .is_some_and(|r| r.contains("DependencyNeverSatisfied")) =>
                {
                    message = format!("{message}: its dependency can never be satisfied");
                    (JobState::Error, Some(ErrorClass::Program), Followup::None)
                }
                JobState::Complete => match &observed.failed_step {
                    Some((step, step_state)) => {
                        message = format!("{message}, but step {step} ended {}", step_state.raw);
                        match map_state(step_state) {
                            (_, Some(class)) => (JobState::Error, Some(class), Followup::None),
                            _ => (JobState::Error, None, Followup::Classify),
                        }
                    }
                    None if observed.exit_code.is_some_and(|c| c != 0) => {
                        message = format!(
                            "{message} with exit code {}",
                            observed.exit_code.unwrap_or(0)
                        );
                        (JobState::Error, None, Followup::Classify)
                    }
                    None if record.completion_check == CompletionCheck::StatusJson => {
                        (JobState::Complete, None, Followup::StatusJson)
                    }
                    None => (JobState::Complete, None, Followup::None),
                },
                JobState::Error if class.is_none() => (JobState::Error, None, Followup::Classify),
                other => (other, class, Followup::None),
            };
            let mut mark = Mark::new(state, TransitionSource::Poll).message(message);
            if let Some(class) = class {
                mark = mark.err_class(class);
            }
            decisions.push(Some(Decision {
                mark,
                native: Some(native),
                followup,
                observed: Some(observed),
            }));
        }

        self.run_followups(&records, &mut decisions).await?;

        let mut answers = Vec::with_capacity(records.len());
        for (record, decision) in records.into_iter().zip(decisions) {
            match decision {
                None => answers.push(JobStatus {
                    record,
                    native: None,
                }),
                Some(Decision { mark, native, .. }) if mark.state == record.state => {
                    // Nothing new: the store would do nothing, so it is not asked.
                    answers.push(JobStatus { record, native });
                }
                Some(Decision { mark, native, .. }) => {
                    let updated = match store.mark(&record.id, mark) {
                        Ok(updated) => updated,
                        Err(Error::InvalidTransition { id, from, to }) => {
                            tracing::warn!(job = %id, %from, %to, "the scheduler reported a state the record cannot take; kept the record");
                            store.get(&record.id)?
                        }
                        Err(error) => return Err(error),
                    };
                    answers.push(JobStatus {
                        record: updated,
                        native,
                    });
                }
            }
        }
        Ok(answers)
    }

    /// squeue for every group and, in the same round trip, sacct for the jobs squeue
    /// cannot settle (see [`POLL_SCRIPT`]). `running` are the jobs whose records are
    /// RUNNING: if squeue shows one pending again, sacct says why (a requeue).
    async fn observe(
        &self,
        groups: &BTreeMap<Option<String>, Vec<SlurmJobId>>,
        running: &[SlurmJobId],
    ) -> Result<HashMap<Key, Observation>> {
        let csv = |ids: &mut dyn Iterator<Item = &SlurmJobId>| {
            ids.map(ToString::to_string).collect::<Vec<_>>().join(",")
        };
        let mut commands: Vec<Command> = Vec::new();
        for (cluster, ids) in groups {
            let cluster_arg = match cluster {
                Some(c) => crate::slurm::squeue::cluster_arg(c)?,
                None => String::new(),
            };
            commands.push(Command::bash_script(
                POLL_SCRIPT,
                [
                    cluster_arg,
                    csv(&mut ids.iter()),
                    csv(&mut running.iter().filter(|id| ids.contains(id))),
                    SQUEUE_FORMAT.to_string(),
                    SACCT_FORMAT.to_string(),
                ],
            ));
        }
        let label = format!(
            "poll {} job(s)",
            groups.values().map(Vec::len).sum::<usize>()
        );
        // One group (the usual case) runs as it is; several go in one batch.
        let outputs: Vec<Output> = if commands.len() == 1 {
            vec![
                self.inner
                    .transport
                    .run(&commands[0].clone().display_as(label))
                    .await?,
            ]
        } else {
            let output = self
                .inner
                .transport
                .run(&batch(&commands).display_as(label))
                .await?;
            split_batch_output(&output, commands.len())?
        };
        let mut parts = Vec::with_capacity(outputs.len() * 2);
        for output in &outputs {
            parts.extend(split_batch_output(output, 2)?);
        }
        let mut observations = HashMap::new();
        for ((cluster, ids), pair) in groups.iter().zip(parts.chunks(2)) {
            let (squeue, sacct) = (&pair[0], &pair[1]);
            let squeue_rows = if squeue.success() {
                parse_squeue(&squeue.stdout_text())?
            } else {
                scheduler_failure("squeue", squeue)?;
                Vec::new()
            };
            // sacct ran and accounting is on: its silence about a job means lag.
            let accounting = sacct.success() && !is_accounting_disabled(&sacct.stderr_text());
            let sacct_rows = if accounting {
                parse_sacct(&sacct.stdout_text())?
            } else {
                scheduler_failure("sacct", sacct)?;
                Vec::new()
            };
            for id in ids {
                let from_sacct = observe_sacct(&sacct_rows, *id);
                let live = squeue_rows
                    .iter()
                    .rfind(|row| row.id.job == *id && row.id.is_job_itself());
                let observation = match (live, from_sacct) {
                    (Some(row), sacct) => Some(Observation {
                        state: row.state.clone(),
                        reason: row.reason.clone(),
                        exit_code: sacct.as_ref().and_then(|s| s.exit_code),
                        nodes: row.nodelist.clone(),
                        source: "squeue",
                        // Just after a requeue sacct may know only the run that ended
                        // (NODE_FAIL) while squeue already shows the job pending again.
                        requeued_after: sacct.as_ref().and_then(|s| {
                            s.requeued_after.clone().or_else(|| {
                                (is_requeue_cause(&s.state.base)
                                    && map_state(&row.state).0 == JobState::Pending)
                                    .then(|| s.state.raw.clone())
                            })
                        }),
                        // Steps confirm only a finished job; sacct decides those.
                        failed_step: None,
                    }),
                    // squeue answered and no longer lists the job, yet sacct says it
                    // is pending or running: slurmdbd lags behind slurmctld, so that
                    // row is stale. Ask scontrol instead of taking a step back.
                    (None, Some(stale))
                        if squeue.success() && !map_state(&stale.state).0.is_terminal() =>
                    {
                        None
                    }
                    (None, sacct) => sacct,
                };
                if let Some(observation) = observation {
                    // squeue's COMPLETED is confirmed by sacct's steps. While accounting
                    // lags behind (no row yet, or a row that has not ended), the job is
                    // not called COMPLETE: terminal states are final, so it waits a poll.
                    let settled = observe_sacct(&sacct_rows, *id)
                        .filter(|s| map_state(&s.state).0.is_terminal());
                    let observation = match (&observation.state.base, settled) {
                        (SlurmBaseState::Completed, Some(sacct))
                            if observation.source == "squeue" =>
                        {
                            sacct
                        }
                        (SlurmBaseState::Completed, None)
                            if observation.source == "squeue" && accounting =>
                        {
                            Observation {
                                state: SlurmState::from_base(SlurmBaseState::Completing),
                                reason: Some(
                                    "ended; waiting for accounting to confirm its steps".into(),
                                ),
                                ..observation
                            }
                        }
                        (_, _) => observation,
                    };
                    observations.insert((cluster.clone(), *id), observation);
                }
            }
        }
        Ok(observations)
    }

    /// `scontrol show job` for jobs squeue and sacct did not know.
    async fn observe_scontrol(&self, keys: &[Key]) -> Result<HashMap<Key, Observation>> {
        let commands: Vec<Command> = keys
            .iter()
            .map(|(cluster, id)| {
                let command = scontrol_show_job_command(*id);
                match cluster {
                    Some(c) => Command::new(command.program())
                        .arg("-M")
                        .arg(c.as_str())
                        .args(command.get_args().iter().cloned()),
                    None => command,
                }
            })
            .collect();
        let output = self.inner.transport.run(&batch(&commands)).await?;
        let parts = split_batch_output(&output, commands.len())?;
        let mut observations = HashMap::new();
        for (key, part) in keys.iter().zip(parts) {
            if !part.success() {
                scheduler_failure("scontrol", &part)?;
                continue;
            }
            for job in parse_scontrol_show_job(&part.stdout_text()).unwrap_or_default() {
                if job.job_id().ok() != Some(key.1) {
                    continue;
                }
                if let Ok(state) = job.state() {
                    observations.insert(
                        key.clone(),
                        Observation {
                            state,
                            reason: job.reason().map(str::to_string),
                            exit_code: job.exit_code(),
                            nodes: job.nodelist().map(str::to_string),
                            source: "scontrol",
                            requeued_after: None,
                            failed_step: None,
                        },
                    );
                }
            }
        }
        Ok(observations)
    }

    /// Classify failures from their logs and run the status.json check, for every job
    /// that needs one, in one more round trip.
    async fn run_followups(
        &self,
        records: &[JobRecord],
        decisions: &mut [Option<Decision>],
    ) -> Result<()> {
        let mut commands = Vec::new();
        let mut owners = Vec::new();
        for (index, (record, decision)) in records.iter().zip(decisions.iter()).enumerate() {
            let Some(Decision { followup, .. }) = decision else {
                continue;
            };
            let Some(backend_ref) = &record.backend_ref else {
                continue;
            };
            match followup {
                Followup::None => {}
                Followup::Classify => {
                    let folder = self.log_folder(record, backend_ref.slurm_job_id)?;
                    commands.push(Command::bash_script(
                        TAIL_BOTH_SCRIPT,
                        [
                            LOG_TAIL_LINES.to_string(),
                            format!("{folder}/main.out"),
                            format!("{folder}/main.err"),
                        ],
                    ));
                    owners.push(index);
                }
                Followup::StatusJson => {
                    let path = record.results_dir.join("status.json")?;
                    commands.push(Command::new("cat").arg("--").arg(path.as_str()));
                    owners.push(index);
                }
            }
        }
        if commands.is_empty() {
            return Ok(());
        }
        let output = self.inner.transport.run(&batch(&commands)).await?;
        let parts = split_batch_output(&output, commands.len())?;
        for (index, part) in owners.into_iter().zip(parts) {
            let Some(Decision {
                mark,
                followup,
                observed,
                ..
            }) = decisions[index].as_mut()
            else {
                continue;
            };
            match followup {
                Followup::Classify => {
                    let tail = part.stdout_text();
                    let state = observed
                        .as_ref()
                        .map(|o| o.state.clone())
                        .unwrap_or_else(|| SlurmState::from_base(SlurmBaseState::Failed));
                    let exit = observed.as_ref().and_then(|o| o.exit_code);
                    let class = classify_failure(&state, exit, &tail);
                    mark.err_class = Some(class);
                    let note = format!(" (classed {} from the logs)", class.as_str());
                    mark.message = Some(format!(
                        "{}{note}",
                        mark.message.clone().unwrap_or_default()
                    ));
                }
                Followup::StatusJson => {
                    if !status_json_says_success(&part) {
                        mark.state = JobState::Error;
                        mark.err_class = Some(ErrorClass::Program);
                        mark.message = Some(format!(
                            "{}, but status.json in the results folder does not report success",
                            mark.message.clone().unwrap_or_default()
                        ));
                    }
                }
                Followup::None => {}
            }
        }
        Ok(())
    }

    /// `<job_dir>/logs/<id>-<slurm id>`: the reference's log folder of one run.
    pub(super) fn log_folder(
        &self,
        record: &JobRecord,
        slurm_job_id: SlurmJobId,
    ) -> Result<String> {
        Ok(format!(
            "{}/{}-{}",
            record.results_dir.join("logs")?.as_str(),
            record.id,
            slurm_job_id
        ))
    }
}

/// One poll of one cluster, framed like a two-command [`batch`] (squeue, then sacct):
/// `$1` the `--clusters=` argument or empty, `$2` every job id (comma list), `$3` the
/// ids whose records are RUNNING, `$4` the squeue format, `$5` the sacct format.
/// squeue answers for every job; sacct, the slower accounting query, is asked only for
/// the jobs squeue cannot settle: those it no longer lists or lists in a finished state
/// (exit code, steps), and RUNNING records it shows pending again (why: a requeue). A
/// poll of jobs that are all pending or running costs one squeue and no sacct.
const POLL_SCRIPT: &str = r#"cl=$1 all=$2 running=$3 sqfmt=$4 safmt=$5
m=(); [ -n "$cl" ] && m=("$cl")
d=$(mktemp -d "${TMPDIR:-/tmp}/slurm-run-poll.XXXXXXXX") || exit 70
trap 'rm -rf -- "$d"' EXIT
emit() { echo "@@begin $1"; awk '{print "O " $0}' "$3"; awk '{print "E " $0}' "$4"; echo "@@end $1 $2"; }
squeue "${m[@]}" --noheader --states=all --jobs="$all" --format="$sqfmt" </dev/null >"$d/qo" 2>"$d/qe"
qrc=$?
emit 0 "$qrc" "$d/qo" "$d/qe"
need=$all
if [ "$qrc" -eq 0 ]; then
  need=$(awk -F'|' -v all="$all" -v running="$running" '
    BEGIN {
      n = split("PENDING RUNNING SUSPENDED STOPPED COMPLETING CONFIGURING RESIZING SIGNALING STAGE_OUT REQUEUED REQUEUE_FED REQUEUE_HOLD RESV_DEL_HOLD", l, " ")
      for (i = 1; i <= n; i++) live[l[i]] = 1
      n = split(running, r, ","); for (i = 1; i <= n; i++) run[r[i]] = 1
    }
    { state[$1] = $2 }
    END {
      n = split(all, a, ","); out = ""
      for (i = 1; i <= n; i++) {
        id = a[i]; s = (id in state) ? state[id] : ""
        if (!(s in live) || ((id in run) && (s == "PENDING" || s ~ /^REQUEUE/))) out = out (out == "" ? "" : ",") id
      }
      print out
    }' "$d/qo")
fi
if [ -n "$need" ]; then
  sacct "${m[@]}" --noheader --parsable2 --duplicates --jobs="$need" --format="$safmt" </dev/null >"$d/ao" 2>"$d/ae"
  emit 1 "$?" "$d/ao" "$d/ae"
else
  echo "@@begin 1"; echo "@@end 1 0"
fi"#;

/// `$1` lines, then files: the last lines of each file that exists, concatenated.
const TAIL_BOTH_SCRIPT: &str = r#"n=$1; shift
for f in "$@"; do [ -r "$f" ] && tail -n "$n" -- "$f"; done
exit 0"#;

/// What sacct says of job `id`: its newest row, the way an earlier run ended when it
/// was requeued, and a step of the newest run that did not finish.
fn observe_sacct(rows: &[SacctRow], id: SlurmJobId) -> Option<Observation> {
    let newest = resolve_newest(rows, id)?;
    let requeued_after = rows
        .iter()
        .filter(|r| r.id.job == id && r.id.is_job_itself() && r.position != newest.position)
        .filter(|r| is_requeue_cause(&r.state.base))
        .map(|r| r.state.raw.clone())
        .next_back();
    // sacct prints a job row, then that run's steps: the newest run's steps are those
    // after its row and before the next job row.
    let failed_step = rows
        .iter()
        .skip_while(|r| r.position != newest.position)
        .skip(1)
        .take_while(|r| !r.id.is_job_itself())
        .filter(|r| r.id.job == id && r.id.is_step())
        .filter(|r| r.id.step.as_deref() != Some("extern"))
        .find(|r| {
            matches!(
                r.state.base,
                SlurmBaseState::Cancelled
                    | SlurmBaseState::Failed
                    | SlurmBaseState::OutOfMemory
                    | SlurmBaseState::NodeFail
                    | SlurmBaseState::Timeout
            )
        })
        .map(|r| (r.id.step.clone().unwrap_or_default(), r.state.clone()));
    Some(Observation {
        state: newest.state.clone(),
        reason: newest.reason.clone().filter(|r| r != "None"),
        exit_code: newest.exit_code,
        nodes: newest
            .nodelist
            .clone()
            .filter(|n| !n.is_empty() && n != "None assigned"),
        source: "sacct",
        requeued_after,
        failed_step,
    })
}

/// The ways a run can end that make Slurm requeue a job with `--requeue`.
fn is_requeue_cause(state: &SlurmBaseState) -> bool {
    matches!(
        state,
        SlurmBaseState::NodeFail
            | SlurmBaseState::Preempted
            | SlurmBaseState::BootFail
            | SlurmBaseState::Requeued
    )
}

/// A scheduler command that failed: fine when the job simply left the queue, a
/// transient error when the scheduler did not answer, otherwise a remote error.
fn scheduler_failure(tool: &str, output: &Output) -> Result<()> {
    let stderr = output.stderr_text();
    if is_invalid_job_id(&stderr) || is_accounting_disabled(&stderr) {
        return Ok(());
    }
    let transient = is_transient_scheduler_error(&stderr);
    if !transient && tool == "sacct" {
        // sacct is an addition to squeue; its failure alone does not stop a poll.
        tracing::warn!(stderr = %stderr.trim(), "sacct failed; using squeue and scontrol only");
        return Ok(());
    }
    Err(Error::Remote {
        command: tool.to_string(),
        status: output.status,
        stderr: stderr.trim().chars().take(500).collect(),
        transient,
    })
}

fn describe(observed: &Observation) -> String {
    let mut text = format!("{} ({})", observed.state.raw, observed.source);
    if let Some(reason) = &observed.reason {
        text.push_str(&format!(", reason {reason}"));
    }
    if let Some(previous) = &observed.requeued_after {
        text.push_str(&format!(", requeued by Slurm after {previous}"));
        if previous.starts_with("NODE_FAIL") || previous.starts_with("BOOT_FAIL") {
            text.push_str(" (infra)");
        }
    }
    text
}

/// Whether a `cat status.json` says success: the last JSON object with a `status`
/// key holds `SUCCESS`, `COMPLETE` or `COMPLETED` (any case).
fn status_json_says_success(output: &Output) -> bool {
    if !output.success() {
        return false;
    }
    let text = output.stdout_text();
    let mut verdict = None;
    let mut consider = |value: &serde_json::Value| {
        if let Some(status) = value.get("status").and_then(|s| s.as_str()) {
            verdict = Some(matches!(
                status.to_ascii_uppercase().as_str(),
                "SUCCESS" | "COMPLETE" | "COMPLETED"
            ));
        }
    };
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) {
        consider(&value);
    } else {
        for line in text.lines() {
            if let Ok(value) = serde_json::from_str::<serde_json::Value>(line) {
                consider(&value);
            }
        }
    }
    verdict.unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(text: &str) -> Vec<SacctRow> {
        parse_sacct(text).unwrap()
    }

    #[test]
    fn a_requeued_job_reads_as_its_newest_run_and_remembers_the_node_failure() {
        let sacct = "\
42|42|NODE_FAIL|0:0|None|2026-11-30T10:00:00|2026-11-30T10:00:01|2026-11-30T10:01:00|n2|job-a
42.batch|42.batch|CANCELLED|0:15||2026-11-30T10:00:01|2026-11-30T10:00:01|2026-11-30T10:01:00|n2|batch
42|42|PENDING|0:0|BeginTime|2026-11-30T10:01:01|Unknown|Unknown|None assigned|job-a
";
        let observed = observe_sacct(&rows(sacct), SlurmJobId::new(42).unwrap()).unwrap();
        assert_eq!(observed.state.base, SlurmBaseState::Pending);
        assert_eq!(observed.requeued_after.as_deref(), Some("NODE_FAIL"));
        assert!(
            observed.failed_step.is_none(),
            "steps of an earlier run do not count"
        );
        assert!(describe(&observed).contains("requeued by Slurm after NODE_FAIL (infra)"));
    }

    #[test]
    fn a_completed_job_with_a_cancelled_step_did_not_finish() {
        let sacct = "\
7|7|COMPLETED|0:0||2026-11-30T10:00:00|2026-11-30T10:00:01|2026-11-30T10:01:00|n1|job-b
7.batch|7.batch|COMPLETED|0:0||2026-11-30T10:00:01|2026-11-30T10:00:01|2026-11-30T10:01:00|n1|batch
7.extern|7.extern|CANCELLED|0:0||2026-11-30T10:00:01|2026-11-30T10:00:01|2026-11-30T10:01:00|n1|extern
7.0|7.0|CANCELLED|0:15||2026-11-30T10:00:02|2026-11-30T10:00:02|2026-11-30T10:01:00|n1|bash
";
        let observed = observe_sacct(&rows(sacct), SlurmJobId::new(7).unwrap()).unwrap();
        let (step, state) = observed.failed_step.unwrap();
        assert_eq!(step, "0");
        assert_eq!(state.base, SlurmBaseState::Cancelled);
    }

    #[test]
    fn status_json_verdicts() {
        let out = |text: &str, status| Output {
            status,
            stdout: text.as_bytes().to_vec(),
            stderr: Vec::new(),
        };
        assert!(status_json_says_success(&out(
            r#"{"status": "SUCCESS"}"#,
            0
        )));
        assert!(status_json_says_success(&out(
            "{\"status\":\"RUNNING\"}\n{\"status\":\"completed\"}\n",
            0
        )));
        assert!(!status_json_says_success(&out(
            r#"{"status": "FAILURE"}"#,
            0
        )));
        assert!(!status_json_says_success(&out("", 1)));
        assert!(!status_json_says_success(&out("not json", 0)));
    }

    #[test]
    fn scheduler_failures_are_sorted() {
        let out = |stderr: &str| Output {
            status: 1,
            stdout: Vec::new(),
            stderr: stderr.as_bytes().to_vec(),
        };
        assert!(scheduler_failure(
            "squeue",
            &out("slurm_load_jobs error: Invalid job id specified")
        )
        .is_ok());
        let err = scheduler_failure(
            "squeue",
            &out("slurm_load_jobs error: Socket timed out on send/recv operation"),
        )
        .unwrap_err();
        assert!(err.is_transient());
        assert!(scheduler_failure("sacct", &out("sacct: error: something odd")).is_ok());
    }

    /// Runs the poll script locally against fake `squeue` / `sacct` programs; returns
    /// the two parts and the `--jobs=` sacct was given (None when it was not run).
    async fn poll_locally(
        squeue_lines: &str,
        squeue_rc: i32,
        all: &str,
        running: &str,
    ) -> (Vec<Output>, Option<String>) {
        use crate::transport::{LocalTransport, Transport};
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path();
        std::fs::write(bin.join("squeue.out"), squeue_lines).unwrap();
        std::fs::write(
            bin.join("squeue"),
            format!(
                "#!/bin/bash\ncat {}/squeue.out\nexit {squeue_rc}\n",
                bin.display()
            ),
        )
        .unwrap();
        std::fs::write(
            bin.join("sacct"),
            format!(
                "#!/bin/bash\nfor a; do case $a in --jobs=*) echo \"${{a#--jobs=}}\" > {}/sacct.jobs;; esac; done\n",
                bin.display()
            ),
        )
        .unwrap();
        for tool in ["squeue", "sacct"] {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(bin.join(tool), std::fs::Permissions::from_mode(0o755))
                .unwrap();
        }
        let path = format!(
            "PATH={}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let command = Command::new("env")
            .arg(path)
            .arg("bash")
            .arg("-c")
            .arg(POLL_SCRIPT)
            .arg("poll")
            .args(["", all, running, SQUEUE_FORMAT, SACCT_FORMAT]);
        let output = LocalTransport::new().run(&command).await.unwrap();
        let parts = split_batch_output(&output, 2).unwrap();
        let jobs = std::fs::read_to_string(bin.join("sacct.jobs"))
            .ok()
            .map(|j| j.trim().to_string());
        (parts, jobs)
    }

    #[tokio::test]
    async fn jobs_squeue_settles_cost_no_sacct() {
        let (parts, sacct) = poll_locally(
            "1|PENDING|Priority|(null)|a\n2|RUNNING|None|n1|b\n",
            0,
            "1,2",
            "",
        )
        .await;
        assert_eq!(sacct, None, "all live: no sacct");
        assert!(parts[0].stdout_text().contains("2|RUNNING"));
        assert!(parts[1].stdout.is_empty() && parts[1].success());
    }

    #[tokio::test]
    async fn sacct_is_asked_only_for_what_squeue_cannot_settle() {
        // 3 finished (exit code and steps from sacct), 4 gone from squeue, 5 a RUNNING
        // record pending again (a requeue: sacct says why), 6 pending as before.
        let (_, sacct) = poll_locally(
            "3|COMPLETED|None|n1|c\n5|PENDING|BeginTime|(null)|e\n6|PENDING|Priority|(null)|f\n",
            0,
            "3,4,5,6",
            "5",
        )
        .await;
        assert_eq!(sacct.as_deref(), Some("3,4,5"));
        let (_, sacct) = poll_locally("", 1, "7,8", "").await;
        assert_eq!(
            sacct.as_deref(),
            Some("7,8"),
            "squeue failed: sacct for every job"
        );
    }
}
