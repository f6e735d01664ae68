//! Secrets sidecars on the cluster: removed (`forget-secrets.sh`) once a record's job
//! has ended, confirmed per record; a removal that fails is tried again at the next
//! status.

use std::collections::BTreeSet;

use super::context::Context;
use super::scripts::FORGET_SECRETS;
use crate::record::{JobId, JobRecord};
use crate::transport::{round_trip, Command, Output};
use crate::Result;

/// The most jobs one `forget-secrets` command names.
const FORGET_CHUNK: usize = 200;

/// The most commands of one joined round trip of forgets.
const ROUND_TRIP_CHUNK: usize = 200;

/// The `forget-secrets` commands for `records` (folder, name and owner token of each:
/// a folder another record claimed is left alone).
pub(super) fn forget_commands(records: &[&JobRecord]) -> Vec<Command> {
    records
        .chunks(FORGET_CHUNK)
        .map(|chunk| {
            FORGET_SECRETS.command(chunk.iter().flat_map(|r| {
                [
                    r.results_dir.as_str().to_string(),
                    r.id.to_string(),
                    r.owner_token.clone().unwrap_or_default(),
                ]
            }))
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
pub(super) async fn note_forgotten(
    ctx: &Context<'_>,
    ids: impl IntoIterator<Item = JobId>,
) -> Result<Vec<JobRecord>> {
    let ids: Vec<JobId> = ids.into_iter().collect();
    ctx.records()
        .run(move |store| {
            ids.iter()
                .map(|id| {
                    store.update(id, &mut |r| {
                        r.secrets_staged = false;
                        Ok(())
                    })
                })
                .collect()
        })
        .await
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
    if let Err(error) = note_forgotten(ctx, forgotten(&staged, &parts)).await {
        tracing::warn!(%error, "a removed sidecar could not be noted in its record; the next status notes it");
    }
}
