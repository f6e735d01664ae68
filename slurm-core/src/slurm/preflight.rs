//! Preflight: every check a submit depends on, run in one round trip, reported one line per check with its remedy.

use super::commands;
use super::config::SlurmConfig;
use super::context::Context;
use super::credentials::{credential_machines, install_hint, CredentialsStatus};
use super::facts::{Facts, PartitionInfo};
use super::parse::{expand_nodelist, is_accounting_disabled, parse_cluster_config};
use super::scripts;
use crate::backend::{CheckKind, PreflightReport};
use crate::image::ImageRef;
use crate::nccl::cluster_key;
use crate::spec::{JobSpec, WallTime};
use crate::storage::RemotePath;
use crate::transport::{round_trip, Command, Output};
use crate::{Error, ErrorKind, Result};

/// The scheduler tools a submit needs.
const TOOLS: &[&str] = &["sbatch", "srun", "squeue", "sacct", "scancel", "scontrol"];

/// One query of the preflight round trip, in the order the answers come back.
enum Query {
    Tools,
    Accounting,
    Partition(String),
    Pyxis,
    Enroot(String, Vec<String>),
    ConvertPartition(String),
    ResultsRoot,
    Datasets(Vec<String>),
    ClusterConfig,
}

/// Run every check for `spec` (or the backend's defaults) in one round trip.
pub(super) async fn preflight(
    ctx: &Context<'_>,
    spec: Option<&JobSpec>,
) -> Result<PreflightReport> {
    let config = ctx.config();
    let mut report = PreflightReport::default();
    let partitions = match spec {
        Some(spec) => config.partitions_for(spec),
        None => config.partitions_for(&JobSpec::new("preflight", "true")),
    };
    let image = spec_image(spec, &mut report);
    let datasets = spec_datasets(spec, &mut report);

    let (queries, commands) = preflight_queries(config, spec, partitions, &image, datasets);

    let outputs = match ctx.transport().run(&round_trip::join(&commands)).await {
        Ok(output) => match round_trip::split(&output, commands.len()) {
            Ok(parts) => parts,
            Err(e) => {
                report.push(CheckKind::Connection, "ssh", false, e.to_string(), "the login shell printed something unexpected; check the remote shell start-up files");
                return Ok(report);
            }
        },
        Err(e) => {
            let remedy = match e.kind() {
                ErrorKind::HostKey => "verify the host key and add it to known_hosts (the error says how)",
                ErrorKind::Auth => "check SLURM_USER and SSH_KEY_PATH (or SSH_AUTH_SOCK); the key must be authorised on the login node",
                ErrorKind::Config => "set the variable the error names",
                _ => "check SLURM_HOSTNAME and that the login node is reachable (ssh -o BatchMode=yes works)",
            };
            report.push(CheckKind::Connection, "ssh", false, e.to_string(), remedy);
            return Ok(report);
        }
    };
    report.push(
        CheckKind::Connection,
        "ssh",
        true,
        "batch-mode login with a verified host key",
        "",
    );

    ctx.facts()
        .change(|learnt| learn(learnt, &mut report, spec, image.is_some(), queries, outputs));
    Ok(report)
}

/// The image of `spec` (none without a spec or an image); an image that does not parse
/// is reported as a failed spec check.
fn spec_image(spec: Option<&JobSpec>, report: &mut PreflightReport) -> Option<ImageRef> {
    match spec.map(JobSpec::image_ref).transpose() {
        Ok(image) => image.flatten(),
        Err(e) => {
            report.push(
                CheckKind::Spec,
                "spec",
                false,
                e.to_string(),
                "fix the spec's image",
            );
            None
        }
    }
}

/// The resolved paths of `spec`'s datasets (none without a spec); datasets that do not
/// parse are reported as a failed spec check.
fn spec_datasets(spec: Option<&JobSpec>, report: &mut PreflightReport) -> Vec<String> {
    match spec.map(JobSpec::dataset_uris).transpose() {
        Ok(uris) => uris
            .unwrap_or_default()
            .iter()
            .map(|u| u.resolve().as_str().to_string())
            .collect(),
        Err(e) => {
            report.push(
                CheckKind::Spec,
                "spec",
                false,
                e.to_string(),
                "fix the spec's datasets",
            );
            Vec::new()
        }
    }
}

/// The queries of the preflight round trip for `spec` (its `partitions`, `image` and
/// `datasets`), and their commands in the same order.
fn preflight_queries(
    config: &SlurmConfig,
    spec: Option<&JobSpec>,
    partitions: Vec<String>,
    image: &Option<ImageRef>,
    datasets: Vec<String>,
) -> (Vec<Query>, Vec<Command>) {
    let mut queries = vec![Query::Tools, Query::ClusterConfig, Query::Accounting];
    let mut commands = vec![
        scripts::MISSING_TOOLS.command(TOOLS.iter().copied()),
        scripts::CLUSTER_CONFIG.command(Vec::<String>::new()),
        commands::sacct_answers(),
    ];
    for p in &partitions {
        queries.push(Query::Partition(p.clone()));
        commands.push(commands::scontrol_show_partition(p));
    }
    queries.push(Query::Pyxis);
    commands.push(commands::srun_help());
    let needs_conversion = image.as_ref().is_some_and(ImageRef::is_registry)
        && !spec.is_some_and(|s| s.allow_registry_image);
    if let Some(image) = image.as_ref().filter(|_| needs_conversion) {
        // Docker Hub (no registry named) takes anonymous pulls: no credentials needed.
        let registry = image.registry().unwrap_or_default().to_string();
        let machines = match image.registry() {
            Some(r) => credential_machines(r).unwrap_or_default(),
            None => Vec::new(),
        };
        queries.push(Query::Enroot(registry, machines.clone()));
        commands.push(scripts::ENROOT.command(machines));
        let partition = config.convert_partition.clone();
        commands.push(commands::scontrol_show_partition(&partition));
        queries.push(Query::ConvertPartition(partition));
    }
    queries.push(Query::ResultsRoot);
    commands.push(scripts::RESULTS_ROOT.command([config.results_root.clone().unwrap_or_default()]));
    if !datasets.is_empty() {
        queries.push(Query::Datasets(datasets.clone()));
        commands.push(scripts::MISSING_PATHS.command(datasets.clone()));
    }
    (queries, commands)
}

/// Read the answers of the preflight round trip into `report` and the facts `learnt`.
fn learn(
    learnt: &mut Facts,
    report: &mut PreflightReport,
    spec: Option<&JobSpec>,
    has_image: bool,
    queries: Vec<Query>,
    outputs: Vec<Output>,
) {
    let mut base_ok = true;
    for (query, out) in queries.into_iter().zip(outputs) {
        match query {
            Query::Tools => read_tools(report, &mut base_ok, out),
            Query::Accounting => read_accounting(learnt, report, out),
            Query::Partition(name) => read_partition(learnt, report, &mut base_ok, spec, name, out),
            Query::Pyxis => read_pyxis(learnt, report, has_image, out),
            Query::Enroot(registry, machines) => read_enroot(report, registry, machines, out),
            Query::ConvertPartition(name) => read_convert_partition(report, name, out),
            Query::ResultsRoot => read_results_root(learnt, report, &mut base_ok, out),
            Query::ClusterConfig => read_cluster_config(learnt, report, &mut base_ok, out),
            Query::Datasets(paths) => read_datasets(report, paths, out),
        }
    }
    learnt.base_checked = base_ok;
}

/// Read the scheduler tools missing on the login node into `report`; `base_ok` is
/// cleared when one is.
fn read_tools(report: &mut PreflightReport, base_ok: &mut bool, out: Output) {
    let missing = out
        .stdout_text()
        .split_whitespace()
        .map(str::to_string)
        .collect::<Vec<_>>();
    *base_ok &= missing.is_empty();
    report.push(
        CheckKind::Scheduler,
        "scheduler tools",
        missing.is_empty(),
        if missing.is_empty() { TOOLS.join(", ") } else { format!("missing: {}", missing.join(", ")) },
        "install the Slurm client tools on the login node, or log in to a node that has them (module load slurm)",
    );
}

/// Read whether accounting answers into `report` and the facts `learnt` (a cluster
/// without it passes, degraded).
fn read_accounting(learnt: &mut Facts, report: &mut PreflightReport, out: Output) {
    // Jobs run without accounting: a submit works, status reads finished
    // jobs from scontrol while slurmctld remembers them. So a cluster
    // without it (or whose slurmdbd is down now) passes, degraded.
    let stderr = out.stderr_text();
    let disabled = is_accounting_disabled(&stderr);
    let ok = out.success() && !disabled && !stderr.to_lowercase().contains("error");
    learnt.accounting = Some(ok);
    if ok {
        report.push(
            CheckKind::Accounting,
            "accounting (sacct)",
            true,
            "sacct answers",
            "",
        );
    } else if disabled {
        report.push_degraded(
            CheckKind::Accounting,
            "accounting (sacct)",
            "disabled on this cluster: jobs run, but a finished job is read from scontrol only while slurmctld remembers it (MinJobAge), and a submit whose answer was lost is settled only while it is young",
            "ask the cluster admins to enable slurmdbd accounting",
        );
    } else {
        report.push_degraded(
            CheckKind::Accounting,
            "accounting (sacct)",
            format!(
                "sacct does not answer now ({}): jobs run, but finished jobs and lost submit answers wait until it does",
                first_line(&stderr, "sacct failed")
            ),
            "check slurmdbd (sacctmgr show cluster); ask the cluster admins if it stays down",
        );
    }
}

/// Read partition `name` into `report` and the facts `learnt`, its MaxTime checked
/// against `spec`'s wall time; `base_ok` is cleared when it is missing or not up.
fn read_partition(
    learnt: &mut Facts,
    report: &mut PreflightReport,
    base_ok: &mut bool,
    spec: Option<&JobSpec>,
    name: String,
    out: Output,
) {
    let check = format!("partition {name}");
    match parse_partition(&out) {
        Some(info) => {
            let wall = spec.and_then(|s| s.time);
            let fits = match (wall, info.max_time) {
                (Some(w), Some(max)) => w.as_secs() <= max.as_secs(),
                _ => true,
            };
            let max_text = info
                .max_time
                .map(|m| m.to_slurm())
                .unwrap_or_else(|| "UNLIMITED".into());
            let ok = info.up && fits;
            *base_ok &= info.up;
            report.push(
                CheckKind::Partition,
                check,
                ok,
                if !info.up {
                    "is not UP".to_string()
                } else if !fits {
                    format!("MaxTime {max_text} is below the requested wall time {}", wall.map(|w| w.to_slurm()).unwrap_or_default())
                } else {
                    format!("UP, MaxTime {max_text}")
                },
                if !info.up {
                    format!("choose another partition (sinfo) or wait until {name} is up")
                } else {
                    format!("lower `time` to at most {max_text} or choose a partition with a longer MaxTime")
                },
            );
            learnt.partitions.insert(name, info);
        }
        None => {
            *base_ok = false;
            report.push(
                CheckKind::Partition,
                check,
                false,
                first_line(&out.stderr_text(), "not found"),
                "check SLURM_PARTITION or the spec's partition against `sinfo -s`",
            );
        }
    }
}

/// Read whether Pyxis is present into `report` and the facts `learnt` (needed only
/// when the job has an image).
fn read_pyxis(learnt: &mut Facts, report: &mut PreflightReport, has_image: bool, out: Output) {
    let present = out.stdout_text().contains("--container-image");
    learnt.pyxis = Some(present);
    let needed = has_image;
    report.push(
        CheckKind::Containers,
        "pyxis (srun --container-image)",
        present || !needed,
        match (present, needed) {
            (true, _) => "present".to_string(),
            (false, false) => "absent (not needed: the job has no image)".to_string(),
            (false, true) => "absent: srun --help does not list --container-image".to_string(),
        },
        "ask the cluster admins for the Pyxis SPANK plugin, or run the job without `image`",
    );
}

/// Read whether enroot is on PATH, and the credentials of `registry`'s `machines`
/// when it has any, into `report`.
fn read_enroot(report: &mut PreflightReport, registry: String, machines: Vec<String>, out: Output) {
    let no_enroot = out.stdout_text().lines().any(|l| l == "enroot");
    report.push(
        CheckKind::Containers,
        "enroot",
        !no_enroot,
        if no_enroot { "enroot is not on PATH".to_string() } else { "present".to_string() },
        "install enroot on the login node and the conversion partition, or stage a .sqsh image and give its path as `image`",
    );
    if !machines.is_empty() {
        let status = CredentialsStatus::from_enroot_output(&registry, &machines, &out);
        report.push(
            CheckKind::Credentials,
            "enroot credentials",
            status.is_present(),
            status.to_string(),
            format!("install them once: {}", install_hint(&registry)),
        );
    }
}

/// Read whether the conversion partition `name` exists and is up into `report`.
fn read_convert_partition(report: &mut PreflightReport, name: String, out: Output) {
    let info = parse_partition(&out);
    report.push(
        CheckKind::Partition,
        format!("conversion partition {name}"),
        info.as_ref().is_some_and(|i| i.up),
        match info {
            Some(i) if i.up => "UP".to_string(),
            Some(_) => "is not UP".to_string(),
            None => first_line(&out.stderr_text(), "not found"),
        },
        "set SLURM_CONVERT_PARTITION to a CPU partition that exists and is up (sinfo -s), or stage a .sqsh and give its path as `image`",
    );
}

/// Read whether the results root is writable into `report` and the facts `learnt`;
/// `base_ok` is cleared when it is not.
fn read_results_root(
    learnt: &mut Facts,
    report: &mut PreflightReport,
    base_ok: &mut bool,
    out: Output,
) {
    let root = out.stdout_text().trim().to_string();
    let parsed = if out.success() {
        RemotePath::parse_for("SLURM_BASE_RESULTS_DIR", &root).ok()
    } else {
        None
    };
    *base_ok &= parsed.is_some();
    report.push(
        CheckKind::Storage,
        "results root",
        parsed.is_some(),
        match &parsed {
            Some(p) => format!("{} is writable", p.as_str()),
            None => first_line(&out.stderr_text(), "not writable"),
        },
        "set SLURM_BASE_RESULTS_DIR to a folder on shared storage you can write (both login and compute nodes must see it)",
    );
    if parsed.is_some() {
        learnt.results_root = parsed;
    }
}

/// Read the cluster's name and release into the facts `learnt`, and the release's
/// check into `report`; `base_ok` is cleared when the release is not supported.
fn read_cluster_config(
    learnt: &mut Facts,
    report: &mut PreflightReport,
    base_ok: &mut bool,
    out: Output,
) {
    // The cluster's name is no check (the key of the NCCL knob cache, learnt
    // on the way); its release is.
    let config = parse_cluster_config(&out.stdout_text());
    learnt.cluster_name = Some(cluster_key(&config.cluster_name.unwrap_or_default()));
    learnt.release = Some(config.release);
    match config.release.check() {
        Some(Ok(detail)) => {
            report.push(CheckKind::Scheduler, "slurm release", true, detail, "")
        }
        Some(Err((detail, remedy))) => {
            *base_ok = false;
            report.push(CheckKind::Scheduler, "slurm release", false, detail, remedy);
        }
        None => report.push_degraded(
            CheckKind::Scheduler,
            "slurm release",
            "unknown: neither `scontrol show config` (SLURM_VERSION) nor `scontrol --version` answered; jobs run as on the oldest release slurm-run is tested against",
            "check that slurmctld answers (scontrol ping) and that scontrol is on PATH",
        ),
    }
}

/// Read the datasets of `paths` missing on the cluster into `report`.
fn read_datasets(report: &mut PreflightReport, paths: Vec<String>, out: Output) {
    let missing: Vec<String> = out.stdout_text().lines().map(str::to_string).collect();
    report.push(
        CheckKind::Datasets,
        "datasets",
        missing.is_empty() && out.success(),
        if missing.is_empty() { format!("{} present", paths.len()) } else { format!("missing on the cluster: {}", missing.join(", ")) },
        "stage the data on shared storage first (never inside the GPU allocation) and give lustre:///absolute/path",
    );
}

/// The base checks (tools, accounting, partitions, results root), once per
/// backend; returns the results root. Fails with the first failed check.
pub(super) async fn ensure_ready(ctx: &Context<'_>, spec: &JobSpec) -> Result<RemotePath> {
    let partitions = ctx.config().partitions_for(spec);
    if let Some(root) = ctx.facts().ready_root(&partitions) {
        return Ok(root);
    }
    // One preflight at a time: submits that arrive together wait for the first.
    let _once = ctx.locks().preflight.lock().await;
    if let Some(root) = ctx.facts().ready_root(&partitions) {
        return Ok(root);
    }
    let mut base = spec.clone();
    // Per-job checks (datasets, the image) run inside the submit command itself.
    base.datasets.clear();
    base.image = None;
    base.time = None;
    preflight(ctx, Some(&base)).await?.into_result()?;
    ctx.facts()
        .read(|facts| facts.results_root.clone())
        .ok_or_else(|| {
            Error::config(
                "SLURM_BASE_RESULTS_DIR",
                "the results root could not be resolved; set it",
            )
        })
}

/// The cluster's name (`ClusterName` of `scontrol show config`), the key of the NCCL
/// knob cache: learnt by preflight, else asked once (with the cluster's releases).
pub(super) async fn cluster_name(ctx: &Context<'_>) -> Result<String> {
    if let Some(name) = ctx.facts().cluster_name() {
        return Ok(name);
    }
    let command = scripts::CLUSTER_CONFIG
        .command(Vec::<String>::new())
        .display_as("scontrol show config (ClusterName, SLURM_VERSION)");
    let output = ctx.transport().run(&command).await?;
    let config = parse_cluster_config(&output.stdout_text());
    let name = cluster_key(&config.cluster_name.unwrap_or_default());
    ctx.facts().change(|facts| {
        facts.cluster_name = Some(name.clone());
        facts.release.get_or_insert(config.release);
    });
    Ok(name)
}

/// A partition as `scontrol show partition` printed it, or `None` when it was not found.
pub(super) fn parse_partition(out: &Output) -> Option<PartitionInfo> {
    if !out.success() {
        return None;
    }
    let text = out.stdout_text();
    let field = |key: &str| {
        text.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
            .map(str::to_string)
    };
    field("PartitionName")?;
    let up = field("State").is_some_and(|s| s == "UP");
    let max_time = field("MaxTime").and_then(|m| match m.as_str() {
        "UNLIMITED" | "INFINITE" => None,
        other => WallTime::parse(other).ok(),
    });
    let nodes = field("Nodes")
        .and_then(|n| expand_nodelist(&n).ok())
        .unwrap_or_default();
    Some(PartitionInfo {
        up,
        max_time,
        nodes,
    })
}

fn first_line(text: &str, fallback: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or(fallback)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_partition_line() {
        let out = Output {
            status: 0,
            stdout: b"PartitionName=gpu AllowGroups=ALL Default=YES MaxTime=04:00:00 State=UP TotalCPUs=64\n".to_vec(),
            stderr: Vec::new(),
        };
        let info = parse_partition(&out).unwrap();
        assert!(info.up);
        assert_eq!(info.max_time.unwrap().to_slurm(), "04:00:00");
        let unlimited = Output {
            stdout: b"PartitionName=cpu_long MaxTime=UNLIMITED State=DOWN".to_vec(),
            ..out
        };
        let info = parse_partition(&unlimited).unwrap();
        assert!(!info.up);
        assert_eq!(info.max_time, None);
    }
}
