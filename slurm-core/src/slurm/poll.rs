//! Status of many jobs in one round trip: squeue for every tracked id and, in the same
//! command, sacct for the ones squeue cannot settle; scontrol, the completion check and
//! failure classification only when a job needs them. What the answers mean is decided
//! in [`observe`](super::observe); this file asks and records.

use std::collections::{BTreeMap, HashMap};

use super::backend::SlurmBackend;
use super::commands;
use super::observe::{decide, from_scontrol, merge, settle, Decision, Followup, Observation};
use super::parse::SlurmJobId;
use super::scripts::{POLL, TAIL_LOGS};
use super::states::live_state_names;
use crate::backend::JobStatus;
use crate::classify::LOG_TAIL_LINES;
use crate::record::{BackendRef, JobId, JobRecord, RecordStore};
use crate::render::Renderer;
use crate::state::JobState;
use crate::transport::{round_trip, Command, Output, Transport};
use crate::{Error, Result};

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

/// One poll of one cluster (see `poll.sh`): squeue for `ids`, then sacct for those
/// squeue cannot settle; `running` are the ids whose records are RUNNING.
fn poll_command(
    cluster: Option<&str>,
    ids: &[SlurmJobId],
    running: &[SlurmJobId],
) -> Result<Command> {
    let csv = |ids: &[SlurmJobId]| {
        ids.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    let squeue = commands::squeue_jobs(ids, cluster)?;
    let sacct = commands::sacct_rows(cluster)?;
    let mut params = vec![csv(ids), csv(running), live_state_names()];
    params.push(squeue.program().to_string());
    params.extend(squeue.get_args().iter().cloned());
    params.push("--slurm-run-next--".to_string());
    params.push(sacct.program().to_string());
    params.extend(sacct.get_args().iter().cloned());
    Ok(POLL.command(params))
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
        let mut keys: Vec<Option<Key>> = Vec::with_capacity(records.len());
        let mut groups: BTreeMap<Option<String>, Vec<SlurmJobId>> = BTreeMap::new();
        let mut running: Vec<SlurmJobId> = Vec::new();
        for record in &records {
            let key = if record.state.is_terminal() {
                None
            } else {
                slurm_job(record)?
            };
            if let Some((cluster, id)) = &key {
                let ids = groups.entry(cluster.clone()).or_default();
                if !ids.contains(id) {
                    ids.push(*id);
                }
                if record.state == JobState::Running {
                    running.push(*id);
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
        self.run_followups(&records, &keys, &mut decisions).await?;

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
    /// cannot settle (`poll.sh`). `running` are the jobs whose records are RUNNING: if
    /// squeue shows one pending again, sacct says why (a requeue).
    async fn observe(
        &self,
        groups: &BTreeMap<Option<String>, Vec<SlurmJobId>>,
        running: &[SlurmJobId],
    ) -> Result<HashMap<Key, Observation>> {
        let mut commands: Vec<Command> = Vec::new();
        for (cluster, ids) in groups {
            let running: Vec<SlurmJobId> = running
                .iter()
                .filter(|id| ids.contains(id))
                .copied()
                .collect();
            commands.push(poll_command(cluster.as_deref(), ids, &running)?);
        }
        let label = format!(
            "poll {} job(s)",
            groups.values().map(Vec::len).sum::<usize>()
        );
        // One group (the usual case) runs as it is; several go in one round trip.
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
                .run(&round_trip::join(&commands).display_as(label))
                .await?;
            round_trip::split(&output, commands.len())?
        };
        let mut observations = HashMap::new();
        for ((cluster, ids), output) in groups.iter().zip(&outputs) {
            let parts = round_trip::split(output, 2)?;
            for (id, observation) in merge(ids, &parts[0], &parts[1])? {
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
        let output = self
            .inner
            .transport
            .run(&round_trip::join(&commands))
            .await?;
        let parts = round_trip::split(&output, commands.len())?;
        let mut observations = HashMap::new();
        for (key, part) in keys.iter().zip(parts) {
            if let Some(observation) = from_scontrol(key.1, &part)? {
                observations.insert(key.clone(), observation);
            }
        }
        Ok(observations)
    }

    /// Classify failures from their logs and run the status.json check, for every job
    /// that needs one, in one more round trip.
    async fn run_followups(
        &self,
        records: &[JobRecord],
        keys: &[Option<Key>],
        decisions: &mut [Option<Decision>],
    ) -> Result<()> {
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
        if commands.is_empty() {
            return Ok(());
        }
        let output = self
            .inner
            .transport
            .run(&round_trip::join(&commands))
            .await?;
        let parts = round_trip::split(&output, commands.len())?;
        for (index, part) in owners.into_iter().zip(parts) {
            if let Some(decision) = decisions[index].as_mut() {
                settle(decision, &part);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the poll script locally against fake `squeue` / `sacct` programs; returns
    /// the two parts and the `--jobs=` sacct was given (None when it was not run).
    async fn poll_locally(
        squeue_lines: &str,
        squeue_rc: i32,
        all: &[u64],
        running: &[u64],
    ) -> (Vec<Output>, Option<String>) {
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
        let poll = poll_command(None, &ids(all), &ids(running)).unwrap();
        let command = Command::new("env")
            .arg(path)
            .arg(poll.program())
            .args(poll.get_args().iter().cloned());
        let output = LocalTransport::new().run(&command).await.unwrap();
        let parts = round_trip::split(&output, 2).unwrap();
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
}
