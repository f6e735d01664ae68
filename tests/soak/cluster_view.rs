//! What the cluster says about the soak's jobs: squeue and sacct by name, and every job
//! of the user, in one round trip.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use slurm_core::{Command, JobRecord, Transport};
use slurm_run_testsupport::Harness;

use crate::load::slurm_id;

/// One SLURM job as squeue or sacct printed it.
#[derive(Debug, Clone)]
struct Row {
    job: u64,
    name: String,
    state: String,
    from_sacct: bool,
}

/// What the cluster says about our names.
pub struct ClusterView {
    /// Job ids per record name, from `squeue --name` and `sacct --name`.
    pub by_name: BTreeMap<String, BTreeSet<u64>>,
    /// Every job of the user whose name starts with the soak's prefix (squeue --me, sacct).
    pub prefixed: BTreeMap<u64, String>,
    /// sacct's state of each job (its last row).
    pub sacct_state: HashMap<u64, String>,
}

/// `$1` sacct start time, then chunks of comma-separated names: squeue and sacct by
/// name for each chunk, then every job of the user (for the prefix check).
const VERIFY_SCRIPT: &str = r#"start=$1; shift
for chunk in "$@"; do
  echo '#name-squeue'
  squeue --noheader --states=all --format='%i|%j|%T' --name="$chunk" || exit 1
  echo '#name-sacct'
  sacct --noheader -X --parsable2 --starttime="$start" --format=JobIDRaw,JobName,State --name="$chunk" || exit 1
done
echo '#all-squeue'
squeue --me --noheader --states=all --format='%i|%j|%T' || exit 1
echo '#all-sacct'
sacct --noheader -X --parsable2 --starttime="$start" --format=JobIDRaw,JobName,State || exit 1"#;

/// One query of the cluster's view of `names` and of the jobs named `{prefix}*`,
/// accounting from `start` on.
async fn query(
    h: &Harness,
    start: &str,
    names: &[String],
    prefix: &str,
) -> Result<ClusterView, String> {
    let mut args = vec![start.to_string()];
    for chunk in names.chunks(60) {
        args.push(chunk.join(","));
    }
    let command = Command::bash_script(VERIFY_SCRIPT, args).timeout(Duration::from_secs(120));
    let output = h.transport.run(&command).await.map_err(|e| e.to_string())?;
    if !output.success() {
        return Err(format!(
            "verify query exited {}: {}",
            output.status,
            output.stderr_text().trim()
        ));
    }
    let mut section = String::new();
    let mut by_name: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    let mut prefixed = BTreeMap::new();
    let mut sacct_state = HashMap::new();
    for line in output.stdout_text().lines() {
        let line = line.trim();
        if let Some(s) = line.strip_prefix('#') {
            section = s.to_string();
            continue;
        }
        let fields: Vec<&str> = line.split('|').collect();
        if fields.len() < 3 {
            continue;
        }
        let Ok(job) = fields[0].parse::<u64>() else {
            continue;
        };
        let row = Row {
            job,
            name: fields[1].to_string(),
            state: fields[2].to_string(),
            from_sacct: section.ends_with("sacct"),
        };
        if row.from_sacct {
            sacct_state.insert(row.job, row.state.clone());
        }
        if section.starts_with("name-") {
            by_name.entry(row.name.clone()).or_default().insert(row.job);
        } else if row.name.starts_with(prefix) {
            prefixed.insert(row.job, row.name.clone());
        }
    }
    Ok(ClusterView {
        by_name,
        prefixed,
        sacct_state,
    })
}

/// The cluster's view, asked until sacct has a final state for every job `records` hold
/// (or `limit` passes; a query that keeps failing until then is a panic).
pub async fn settled(
    h: &Harness,
    start: &str,
    records: &[JobRecord],
    prefix: &str,
    limit: Duration,
) -> ClusterView {
    let names: Vec<String> = records.iter().map(|r| r.id().to_string()).collect();
    let deadline = Instant::now() + limit;
    loop {
        match query(h, start, &names, prefix).await {
            Ok(view) => {
                let settled = records.iter().filter_map(|r| r.backend_ref()).all(|b| {
                    view.sacct_state
                        .get(&slurm_id(b))
                        .is_some_and(|s| !matches!(s.as_str(), "PENDING" | "RUNNING"))
                });
                if settled || Instant::now() >= deadline {
                    return view;
                }
            }
            Err(error) => {
                assert!(
                    Instant::now() < deadline,
                    "the final squeue/sacct query kept failing: {error}"
                );
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}
