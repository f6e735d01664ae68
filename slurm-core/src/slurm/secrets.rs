//! Secrets on the cluster: the values this backend submitted (kept in memory only, for
//! log redaction and for its own retries), the redactor of a record's logs, and the
//! removal of a record's secrets sidecar once its job has ended.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;

use super::context::Context;
use super::scripts::FORGET_SECRETS;
use crate::record::{JobId, JobRecord};
use crate::redact::{is_secret_name, SecretRegistry};
use crate::transport::{round_trip, Command, Output};
use crate::Result;

/// The most jobs one `forget-secrets` command names.
const FORGET_CHUNK: usize = 200;

/// The most commands of one joined round trip of forgets.
const ROUND_TRIP_CHUNK: usize = 200;

/// The secret values one backend submitted, never stored.
#[derive(Debug, Default)]
pub(super) struct SecretMemory {
    /// Every value submitted: logs are redacted of them.
    known: Mutex<SecretRegistry>,
    /// The same values by record, for the retries this backend makes.
    by_record: Mutex<HashMap<JobId, BTreeMap<String, String>>>,
}

impl SecretMemory {
    /// Remember the values of `secrets` of record `id`.
    pub(super) fn remember(&self, id: &JobId, secrets: &SecretRegistry) {
        if secrets.is_empty() {
            return;
        }
        let mut known = self.known.lock().expect("secrets lock");
        for (name, value) in secrets.entries() {
            if !known.entries().any(|(_, v)| v == value) {
                known.register(name, value);
            }
        }
        self.by_record.lock().expect("secrets lock").insert(
            id.clone(),
            secrets
                .entries()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
        );
    }

    /// The values record `id` was submitted with by this backend, if it was.
    pub(super) fn values_of(&self, id: &JobId) -> Option<BTreeMap<String, String>> {
        self.by_record
            .lock()
            .expect("secrets lock")
            .get(id)
            .cloned()
    }

    /// Logs may echo a secret the job received; hide every value this process knows:
    /// the secrets this backend submitted, the values in this process's environment of
    /// the names the record declares in `secrets` (`WANDB_KEY`, `DB_PASS`, ...), and of
    /// every variable named like a secret.
    pub(super) fn redactor_for(&self, record: &JobRecord) -> SecretRegistry {
        let mut registry = self.known.lock().expect("secrets lock").clone();
        for name in &record.secret_names {
            if let Ok(value) = std::env::var(name) {
                registry.register(name.clone(), value);
            }
        }
        for (name, value) in std::env::vars() {
            if is_secret_name(&name) {
                registry.register(name, value);
            }
        }
        registry
    }
}

/// The `forget-secrets` commands for `records` (folder and name of each).
pub(super) fn forget_commands(records: &[&JobRecord]) -> Vec<Command> {
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
pub(super) fn forgotten(records: &[&JobRecord], parts: &[Output]) -> BTreeSet<JobId> {
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

/// Note in the store that the sidecars of `ids` are gone; the records as stored.
pub(super) fn note_forgotten(
    ctx: &Context<'_>,
    ids: impl IntoIterator<Item = JobId>,
) -> Result<Vec<JobRecord>> {
    ids.into_iter()
        .map(|id| {
            ctx.store().update(&id, &mut |r| {
                r.secrets_staged = false;
                Ok(())
            })
        })
        .collect()
}

/// Remove the secrets sidecars of `records` (ended), best effort: the records whose
/// sidecar is confirmed gone are updated; the others keep `secrets_staged` and are
/// tried again at their next status.
pub(super) async fn forget(ctx: &Context<'_>, records: &[JobRecord]) {
    let staged: Vec<&JobRecord> = records.iter().filter(|r| r.secrets_staged).collect();
    let commands = forget_commands(&staged);
    if commands.is_empty() {
        return;
    }
    let mut parts = Vec::with_capacity(commands.len());
    for chunk in commands.chunks(ROUND_TRIP_CHUNK) {
        let run = ctx.transport().run(&round_trip::join(chunk)).await;
        match run.and_then(|output| round_trip::split(&output, chunk.len())) {
            Ok(answers) => parts.extend(answers),
            Err(error) => {
                tracing::warn!(%error, "could not remove secrets sidecars yet; the next status tries again");
                return;
            }
        }
    }
    if let Err(error) = note_forgotten(ctx, forgotten(&staged, &parts)) {
        tracing::warn!(%error, "a removed sidecar could not be noted in its record; the next status notes it");
    }
}
