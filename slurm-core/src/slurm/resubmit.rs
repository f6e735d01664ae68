//! `resubmit` on SLURM: the domain's retry ([`crate::retry`]) with the cluster's copy of
//! the spec for records that keep none, the secret values the first submit was given
//! (from this backend's memory), and the dependants re-pointed on the cluster too.

use super::context::Context;
use super::dependants::follow_retries;
use super::paths::spec_copy;
use super::submit::submit;
use crate::backend::SubmitOptions;
use crate::dependency::follow_retry;
use crate::dependency::Attempts;
use crate::record::{JobId, JobRecord};
use crate::retry::{begin, retry_spec, RetryStart};
use crate::Result;

/// Submit the finished record `id` again, linked to it; a retry made elsewhere already
/// is the answer.
pub(super) async fn resubmit(ctx: &Context<'_>, id: &JobId) -> Result<JobRecord> {
    let asked = id.clone();
    let previous = match ctx.records().run(move |store| begin(store, &asked)).await? {
        RetryStart::Followed(winner) => return Ok(*winner),
        RetryStart::Retry(previous) => previous,
    };
    // The client's own copy of the spec; the cluster's only for records without one,
    // and then only with the submitted digest.
    let cluster_copy = match previous.spec {
        Some(_) => None,
        None => {
            let text = ctx
                .transport()
                .read_file(spec_copy(&previous)?.as_str())
                .await?;
            Some(String::from_utf8_lossy(&text).into_owned())
        }
    };
    let spec = retry_spec(&previous, cluster_copy.as_deref())?;
    // The secrets' values this backend submitted the failed record with (kept in memory
    // only), else this process's environment.
    let options = SubmitOptions::for_retry_of(&previous, ctx.secrets().values_of(id));
    let record = submit(ctx, &spec, options, ctx.config().submit.clone()).await?;
    // Dependants of the failed attempt wait for this one instead (on the cluster too).
    let (previous_id, retry_id) = (id.clone(), record.id.clone());
    let (dependants, attempts) = ctx
        .records()
        .run(move |store| {
            let dependants = follow_retry(store, &previous_id, &retry_id)?;
            let attempts = match dependants.is_empty() {
                true => None,
                false => Some(Attempts::read(store)),
            };
            Ok((dependants, attempts))
        })
        .await?;
    let followed = match attempts {
        None => Ok(()),
        Some(Ok(attempts)) => follow_retries(ctx, &dependants, &attempts).await,
        Some(Err(error)) => Err(error),
    };
    if let Err(error) = followed {
        tracing::warn!(job = %record.id, %error, "re-pointing the dependants of a retry failed; the next poll tries again");
    }
    Ok(record)
}
