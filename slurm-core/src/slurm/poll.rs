//! Status of many jobs in one round trip: squeue for every tracked id and, in the same
//! command, sacct for the ones squeue cannot settle; scontrol, the completion check and
//! failure classification only when a job needs them. What the answers mean is decided
//! in [`observe`](super::observe); this file asks and records.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use chrono::Utc;

use super::backend::SlurmBackend;
use super::commands;
use super::observe::{decide, from_scontrol, merge, settle, Decision, Followup, Observation};
use super::parse::SlurmJobId;
use super::reconcile::Verdict;
use super::scripts::{FORGET_SECRETS, POLL, TAIL_LOGS};
use super::states::live_state_names;
use crate::backend::JobStatus;
use crate::classify::LOG_TAIL_LINES;
use crate::record::{BackendRef, JobId, JobRecord, Mark, RecordStore, TransitionSource};
use crate::render::Renderer;
use crate::state::JobState;
use crate::transport::{round_trip, Command, Output, Transport};
use crate::{Error, Result};

/// A `SUBMITTING` record this old whose submit is not in progress (its lease is free)
/// is settled by `status`, `watch` and `cancel`: its submitter died or gave up.
pub(super) const SETTLE_AFTER: Duration = Duration::from_secs(5);

/// For a store that cannot tell whether a submit is in progress: settle only records
/// this old (no submit runs this long).
const SETTLE_UNLEASED_AFTER: Duration = Duration::from_secs(600);

/// How long a settle from `status` waits for an attempt still running sbatch.
const STATUS_FENCE_WAIT: Duration = Duration::from_secs(5);

/// The most commands of one follow-up round trip (their arguments stay far below the
/// kernel's limits); more go in further round trips.
const FOLLOWUP_CHUNK: usize = 200;

/// The most jobs one `forget-secrets` command names.
const FORGET_CHUNK: usize = 200;

/// A job on a cluster (`None`: the default one).
type Key = (Option<String>, SlurmJobId);

/// The SLURM job a record points at.
pub(super) fn slurm_job(record: &JobRecord) -> Result<Option<Key>> {
    record
        .backend_ref
        .as_ref()
        .map(|r: &BackendRef| {
            SlurmJobId::parse(&r.native_id)
                .map(|id| (r.cluster.clone(), id))
                .map_err(|e| {
                    Error::parse(
                        format!("the SLURM job id of record {}", record.id),
                        e.to_string(),
                    )
                })
        })
        .transpose()
}

/// One poll of every cluster in `groups` (see `poll.sh`): per cluster squeue for its
/// ids, then sacct for those squeue cannot settle; `running` are the ids whose records
/// are RUNNING. The ids travel on standard input, so any number of them fits.
pub(crate) fn poll_command(
    groups: &BTreeMap<Option<String>, Vec<SlurmJobId>>,
    running: &BTreeSet<SlurmJobId>,
) -> Result<Command> {
    let mut params = vec![live_state_names()];
    let mut stdin = String::new();
    for (k, (cluster, ids)) in groups.iter().enumerate() {
        let squeue = commands::squeue_rows(cluster.as_deref())?;
        let sacct = commands::sacct_rows(cluster.as_deref())?;
        if k > 0 {
            params.push("--slurm-run-group--".to_string());
        }
        params.push(squeue.program().to_string());
        params.extend(squeue.get_args().iter().cloned());
        params.push("--slurm-run-next--".to_string());
        params.push(sacct.program().to_string());
        params.extend(sacct.get_args().iter().cloned());
        for id in ids {
            stdin.push_str(&format!("{k} {id} {}\n", u8::from(running.contains(id))));
        }
    }
    Ok(POLL.command(params).stdin(stdin.into_bytes()))
}

impl<T, R, S> SlurmBackend<T, R, S>
where
    T: Transport + 'static,
    R: Renderer + 'static,
    S: RecordStore + 'static,
{
    /// Observe `ids` and update their records. One round trip for any number of jobs
    /// in the common case; answers in the order of `ids`. `SUBMITTING` records left by
    /// a submit that died or gave up are settled first ([`SETTLE_AFTER`]).
    pub(super) async fn poll(&self, ids: &[JobId]) -> Result<Vec<JobStatus>> {
        self.poll_settling(ids, SETTLE_AFTER).await
    }

    /// [`poll`](Self::poll), settling `SUBMITTING` records whose submit is not in
    /// progress once they are `settle_after` old.
    pub(super) async fn poll_settling(
        &self,
        ids: &[JobId],
        settle_after: Duration,
    ) -> Result<Vec<JobStatus>> {
        let store = &self.inner.store;
        let mut records: Vec<JobRecord> =
            ids.iter().map(|id| store.get(id)).collect::<Result<_>>()?;
        self.settle_stale(&mut records, settle_after).await?;
        let mut keys: Vec<Option<Key>> = Vec::with_capacity(records.len());
        let mut groups: BTreeMap<Option<String>, Vec<SlurmJobId>> = BTreeMap::new();
        let mut seen: BTreeSet<Key> = BTreeSet::new();
        let mut running: BTreeSet<SlurmJobId> = BTreeSet::new();
        for record in &records {
            let key = if record.state.is_terminal() {
                None
            } else {
                slurm_job(record)?
            };
            if let Some((cluster, id)) = &key {
                if seen.insert((cluster.clone(), *id)) {
                    groups.entry(cluster.clone()).or_default().push(*id);
                }
                if record.state == JobState::Running {
                    running.insert(*id);
                }
            }
            keys.push(key);
        }
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

        // Decide each record's next state; the follow-ups that need the cluster run next.
        let mut decisions: Vec<Option<Decision>> = records
            .iter()
            .zip(&keys)
            .map(|(record, key)| {
                key.as_ref()
                    .map(|key| decide(record, observations.get(key).cloned()))
            })
            .collect();
        // The secrets of jobs that have ended go in the same round trip: the records
        // ending now, and ended ones whose sidecar could not be removed before.
        let forget: Vec<usize> = records
            .iter()
            .zip(&decisions)
            .enumerate()
            .filter(|(_, (record, decision))| {
                record.secrets_staged
                    && match decision {
                        None => record.state.is_terminal(),
                        Some(d) => d.mark.state.is_terminal() || d.followup != Followup::None,
                    }
            })
            .map(|(index, _)| index)
            .collect();
        let forgotten = self
            .run_followups(&records, &keys, &mut decisions, &forget)
            .await?;

        let mut answers = Vec::with_capacity(records.len());
        for (record, decision) in records.into_iter().zip(decisions) {
            let record = if forgotten.contains(&record.id) {
                store.update(&record.id, &mut |r| {
                    r.secrets_staged = false;
                    Ok(())
                })?
            } else {
                record
            };
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
    /// cannot settle (`poll.sh`). `running` are the jobs whose records are RUNNING: if
    /// squeue shows one pending again, sacct says why (a requeue).
    async fn observe(
        &self,
        groups: &BTreeMap<Option<String>, Vec<SlurmJobId>>,
        running: &BTreeSet<SlurmJobId>,
    ) -> Result<HashMap<Key, Observation>> {
        let label = format!(
            "poll {} job(s)",
            groups.values().map(Vec::len).sum::<usize>()
        );
        let command = poll_command(groups, running)?.display_as(label);
        let output = self.inner.transport.run(&command).await?;
        let parts = round_trip::split(&output, 2 * groups.len())?;
        let mut observations = HashMap::new();
        for ((cluster, ids), pair) in groups.iter().zip(parts.chunks(2)) {
            for (id, observation) in merge(ids, &pair[0], &pair[1])? {
                observations.insert((cluster.clone(), id), observation);
            }
        }
        Ok(observations)
    }

    /// `scontrol show job` for jobs squeue and sacct did not know.
    async fn observe_scontrol(&self, keys: &[Key]) -> Result<HashMap<Key, Observation>> {
        let commands: Vec<Command> = keys
            .iter()
            .map(|(cluster, id)| commands::scontrol_show_job(*id, cluster.as_deref()))
            .collect();
        let parts = self.run_joined(&commands).await?;
        let mut observations = HashMap::new();
        for (key, part) in keys.iter().zip(parts) {
            if let Some(observation) = from_scontrol(key.1, &part)? {
                observations.insert(key.clone(), observation);
            }
        }
        Ok(observations)
    }

    /// `commands` in as few round trips as their number allows (at most
    /// [`FOLLOWUP_CHUNK`] each); one answer per command, in order.
    async fn run_joined(&self, commands: &[Command]) -> Result<Vec<Output>> {
        let mut parts = Vec::with_capacity(commands.len());
        for chunk in commands.chunks(FOLLOWUP_CHUNK) {
            let output = self.inner.transport.run(&round_trip::join(chunk)).await?;
            parts.extend(round_trip::split(&output, chunk.len())?);
        }
        Ok(parts)
    }

    /// Classify failures from their logs and run the status.json check, for every job
    /// that needs one, and remove the secrets of the records in `forget`, in one more
    /// round trip. Returns the records whose secrets are gone.
    async fn run_followups(
        &self,
        records: &[JobRecord],
        keys: &[Option<Key>],
        decisions: &mut [Option<Decision>],
        forget: &[usize],
    ) -> Result<BTreeSet<JobId>> {
        let mut commands = Vec::new();
        let mut owners = Vec::new();
        for (index, ((record, key), decision)) in
            records.iter().zip(keys).zip(decisions.iter()).enumerate()
        {
            let (Some(decision), Some((_, slurm_id))) = (decision, key) else {
                continue;
            };
            match decision.followup {
                Followup::None => continue,
                Followup::Classify => {
                    let folder = self.log_folder(record, *slurm_id)?;
                    commands.push(TAIL_LOGS.command([
                        LOG_TAIL_LINES.to_string(),
                        format!("{folder}/main.out"),
                        format!("{folder}/main.err"),
                    ]));
                }
                Followup::StatusJson => {
                    let path = record.results_dir.join("status.json")?;
                    commands.push(Command::new("cat").arg("--").arg(path.as_str()));
                }
            }
            owners.push(index);
        }
        let followups = commands.len();
        let forget_records: Vec<&JobRecord> = forget.iter().map(|i| &records[*i]).collect();
        commands.extend(forget_commands(&forget_records));
        if commands.is_empty() {
            return Ok(BTreeSet::new());
        }
        let parts = self.run_joined(&commands).await?;
        for (index, part) in owners.into_iter().zip(&parts) {
            if let Some(decision) = decisions[index].as_mut() {
                settle(decision, part);
            }
        }
        Ok(forgotten(&forget_records, &parts[followups..]))
    }

    /// Remove the secrets sidecars of `records` (ended), best effort: the records whose
    /// sidecar is confirmed gone are updated; the others keep `secrets_staged` and are
    /// tried again at their next status.
    pub(super) async fn forget_secrets(&self, records: &[JobRecord]) {
        let refs: Vec<&JobRecord> = records.iter().filter(|r| r.secrets_staged).collect();
        let commands = forget_commands(&refs);
        if commands.is_empty() {
            return;
        }
        let gone = match self.run_joined(&commands).await {
            Ok(parts) => forgotten(&refs, &parts),
            Err(error) => {
                tracing::warn!(%error, "could not remove secrets sidecars yet; the next status tries again");
                return;
            }
        };
        for id in gone {
            let _ = self.inner.store.update(&id, &mut |r| {
                r.secrets_staged = false;
                Ok(())
            });
        }
    }

    /// Settle the `SUBMITTING` records among `records` whose submit is not in progress
    /// and that are at least `settle_after` old, in one round trip; `records` are
    /// replaced by what the store holds afterwards. See [`reconcile`](super::reconcile).
    async fn settle_stale(&self, records: &mut [JobRecord], settle_after: Duration) -> Result<()> {
        let store = &self.inner.store;
        let now = Utc::now();
        let mut chosen: Vec<JobRecord> = Vec::new();
        for record in records.iter() {
            if record.state != JobState::Submitting
                || record.backend_ref.is_some()
                || chosen.iter().any(|c| c.id == record.id)
            {
                continue;
            }
            let age = now
                .signed_duration_since(record.submitted_at)
                .to_std()
                .unwrap_or_default();
            let eligible = match store.submit_in_progress(&record.id)? {
                Some(true) => false,
                Some(false) => age >= settle_after,
                None => age >= SETTLE_UNLEASED_AFTER.max(settle_after),
            };
            if eligible {
                chosen.push(record.clone());
            }
        }
        if chosen.is_empty() {
            return Ok(());
        }
        let settled = self.settle_records(&chosen, STATUS_FENCE_WAIT).await;
        for (record, settled) in chosen.iter().zip(settled) {
            let id = &record.id;
            let marked = match settled.verdict {
                Verdict::Adopt(job) => store.mark(
                    id,
                    Mark::new(JobState::Pending, TransitionSource::Poll)
                        .message(format!(
                            "adopted: SLURM job {job} carries its name (settled after its submit was left unsettled)"
                        ))
                        .backend_ref(job),
                ),
                Verdict::NoJob(why) => store.mark(
                    id,
                    Mark::new(JobState::NotSubmitted, TransitionSource::Poll)
                        .message(format!("never reached the scheduler: {why}; submit it again")),
                ),
                Verdict::Refused(error) => store.mark(
                    id,
                    Mark::new(JobState::Error, TransitionSource::Poll)
                        .message(format!("sbatch refused the job: {error}")),
                ),
                Verdict::Several(jobs) => {
                    let list: Vec<String> = jobs.iter().map(ToString::to_string).collect();
                    let note = format!(
                        "{} SLURM jobs carry its name ({}); a person decides which to keep (`cancel` cancels them all)",
                        jobs.len(),
                        list.join(", ")
                    );
                    note_unsettled(store, id, &jobs, note)
                }
                Verdict::Unsettled { seen, why } => note_unsettled(store, id, &seen, why),
            };
            match marked {
                Ok(_) => {}
                // Settled meanwhile by someone else: keep what they found.
                Err(Error::InvalidTransition { .. }) => {}
                Err(error) => return Err(error),
            }
            if settled.secrets_removed {
                store.update(id, &mut |r| {
                    r.secrets_staged = false;
                    Ok(())
                })?;
            }
            let fresh = store.get(id)?;
            for slot in records.iter_mut().filter(|r| &r.id == id) {
                *slot = fresh.clone();
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

/// Keep `seen` and `why` in a record that stays `SUBMITTING`.
fn note_unsettled<S: RecordStore>(
    store: &S,
    id: &JobId,
    seen: &[BackendRef],
    why: String,
) -> Result<JobRecord> {
    store.update(id, &mut |record| {
        for job in seen {
            if !record.candidates.contains(job) {
                record.candidates.push(job.clone());
            }
        }
        record.unsettled = Some(why.clone());
        Ok(())
    })
}

/// The `forget-secrets` commands for `records` (folder and name of each).
fn forget_commands(records: &[&JobRecord]) -> Vec<Command> {
    records
        .chunks(FORGET_CHUNK)
        .map(|chunk| {
            FORGET_SECRETS.command(
                chunk
                    .iter()
                    .flat_map(|r| [r.results_dir.as_str().to_string(), r.id.to_string()]),
            )
        })
        .collect()
}

/// The records among `records` whose sidecar the `forget-secrets` answers in `parts`
/// confirm gone.
fn forgotten(records: &[&JobRecord], parts: &[Output]) -> BTreeSet<JobId> {
    let names: BTreeSet<String> = parts
        .iter()
        .flat_map(|part| {
            part.stdout_text()
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    records
        .iter()
        .filter(|r| names.contains(r.id.as_str()))
        .map(|r| r.id.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the poll script locally against fake `squeue` / `sacct` programs (squeue
    /// prints `squeue_lines` and exits `squeue_rc`; sacct prints nothing); returns the
    /// two parts and every `--jobs=` sacct was given (None when it was not run).
    async fn poll_locally(
        squeue_lines: &str,
        squeue_rc: i32,
        all: &[u64],
        running: &[u64],
    ) -> (Vec<Output>, Option<String>) {
        let (parts, squeue, sacct) = poll_with_fakes(squeue_lines, squeue_rc, all, running).await;
        let _ = squeue;
        (parts, sacct)
    }

    /// [`poll_locally`], also returning every `--jobs=` squeue was given, one a line.
    async fn poll_with_fakes(
        squeue_lines: &str,
        squeue_rc: i32,
        all: &[u64],
        running: &[u64],
    ) -> (Vec<Output>, String, Option<String>) {
        use crate::transport::{LocalTransport, Transport};
        let ids = |list: &[u64]| -> Vec<SlurmJobId> {
            list.iter().map(|n| SlurmJobId::new(*n).unwrap()).collect()
        };
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path();
        std::fs::write(bin.join("squeue.out"), squeue_lines).unwrap();
        std::fs::write(
            bin.join("squeue"),
            format!(
                "#!/bin/bash\nfor a; do case $a in --jobs=*) echo \"${{a#--jobs=}}\" >> {dir}/squeue.jobs;; esac; done\ncat {dir}/squeue.out\nexit {squeue_rc}\n",
                dir = bin.display()
            ),
        )
        .unwrap();
        std::fs::write(
            bin.join("sacct"),
            format!(
                "#!/bin/bash\nfor a; do case $a in --jobs=*) echo \"${{a#--jobs=}}\" >> {}/sacct.jobs;; esac; done\n",
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
        let groups: BTreeMap<Option<String>, Vec<SlurmJobId>> = [(None, ids(all))].into();
        let running: BTreeSet<SlurmJobId> = ids(running).into_iter().collect();
        let poll = poll_command(&groups, &running).unwrap();
        let command = Command::new("env")
            .arg(path)
            .arg(poll.program())
            .args(poll.get_args().iter().cloned())
            .stdin(poll.stdin_bytes().unwrap().to_vec());
        let output = LocalTransport::new().run(&command).await.unwrap();
        let parts = round_trip::split(&output, 2).unwrap();
        let squeue = std::fs::read_to_string(bin.join("squeue.jobs")).unwrap_or_default();
        let jobs = std::fs::read_to_string(bin.join("sacct.jobs"))
            .ok()
            .map(|j| j.trim().to_string());
        (parts, squeue, jobs)
    }

    #[tokio::test]
    async fn jobs_squeue_settles_cost_no_sacct() {
        let (parts, sacct) = poll_locally(
            "1|PENDING|Priority|(null)|a\n2|RUNNING|None|n1|b\n",
            0,
            &[1, 2],
            &[],
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
            &[3, 4, 5, 6],
            &[5],
        )
        .await;
        assert_eq!(sacct.as_deref(), Some("3,4,5"));
        let (_, sacct) = poll_locally("", 1, &[7, 8], &[]).await;
        assert_eq!(
            sacct.as_deref(),
            Some("7,8"),
            "squeue failed: sacct for every job"
        );
    }

    #[tokio::test]
    async fn a_poll_of_twenty_thousand_ids_travels_on_stdin_in_chunks() {
        // 20,000 ids as one argument would be ~140 KB, above Linux's 128 KiB limit for one
        // argument: they travel on stdin, and each tool gets at most 2000 per run.
        let all: Vec<u64> = (1_000_000..1_020_000).collect();
        let poll = poll_command(
            &[(
                None,
                all.iter().map(|n| SlurmJobId::new(*n).unwrap()).collect(),
            )]
            .into(),
            &BTreeSet::new(),
        )
        .unwrap();
        assert!(
            poll.get_args().iter().all(|a| a.len() < 16 * 1024),
            "no argument carries the ids"
        );
        let (_, squeue, sacct) = poll_with_fakes("", 0, &all, &[]).await;
        let chunks: Vec<&str> = squeue.lines().collect();
        assert_eq!(chunks.len(), 10, "10 squeue runs of 2000 ids");
        assert!(chunks.iter().all(|c| c.split(',').count() == 2000));
        assert_eq!(chunks[0].split(',').next(), Some("1000000"));
        let sacct = sacct.unwrap();
        assert_eq!(
            sacct.lines().count(),
            10,
            "sacct likewise, for the jobs squeue no longer lists"
        );
        assert_eq!(sacct.lines().flat_map(|l| l.split(',')).count(), 20_000);
    }
}
