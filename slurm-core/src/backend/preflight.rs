//! Preflight: every check a submit depends on, run in one round trip, reported one line per check with its remedy.

use std::fmt;

use serde::Serialize;

use super::slurm::SlurmBackend;
use crate::batch::{batch, split_batch_output};
use crate::image::ImageRef;
use crate::record::RecordStore;
use crate::render::Renderer;
use crate::slurm::is_accounting_disabled;
use crate::spec::{JobSpec, WallTime};
use crate::storage::RemotePath;
use crate::transport::{Command, Output, Transport};
use crate::{Error, Result};

/// One preflight check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PreflightCheck {
    /// The check's name, e.g. `ssh`, `partition gpu`.
    pub check: String,
    /// Whether it passed.
    pub ok: bool,
    /// What was found.
    pub detail: String,
    /// What to do when it failed (empty when it passed).
    pub remedy: String,
}

/// The outcome of a preflight: one [`PreflightCheck`] per line.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct PreflightReport {
    /// The checks, in the order they ran.
    pub checks: Vec<PreflightCheck>,
}

impl PreflightReport {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }

    /// The checks that failed.
    pub fn failures(&self) -> impl Iterator<Item = &PreflightCheck> {
        self.checks.iter().filter(|c| !c.ok)
    }

    /// `Ok(())` when every check passed, else [`Error::Preflight`] for the first failure.
    pub fn into_result(self) -> Result<()> {
        match self.checks.into_iter().find(|c| !c.ok) {
            None => Ok(()),
            Some(failed) => Err(Error::Preflight {
                check: failed.check,
                message: failed.detail,
                remedy: failed.remedy,
            }),
        }
    }

    fn push(
        &mut self,
        check: impl Into<String>,
        ok: bool,
        detail: impl Into<String>,
        remedy: impl Into<String>,
    ) {
        self.checks.push(PreflightCheck {
            check: check.into(),
            ok,
            detail: detail.into(),
            remedy: if ok { String::new() } else { remedy.into() },
        });
    }
}

impl fmt::Display for PreflightReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self.checks.iter().map(|c| c.check.len()).max().unwrap_or(0);
        for c in &self.checks {
            write!(
                f,
                "{} {:width$}  {}",
                if c.ok { "ok  " } else { "FAIL" },
                c.check,
                c.detail
            )?;
            if !c.ok {
                write!(f, "\n     {:width$}  remedy: {}", "", c.remedy)?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// A partition as `scontrol show partition` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartitionInfo {
    /// `State=UP`.
    pub(crate) up: bool,
    /// `MaxTime`, `None` for UNLIMITED.
    pub(crate) max_time: Option<WallTime>,
}

/// The scheduler tools a submit needs.
const TOOLS: &[&str] = &["sbatch", "srun", "squeue", "sacct", "scancel", "scontrol"];

/// Prints the tools that are missing, one a line.
const MISSING_TOOLS_SCRIPT: &str =
    r#"for t in "$@"; do command -v "$t" >/dev/null 2>&1 || echo "$t"; done"#;

/// `$1` the results root or empty for `$HOME/slurm-run`: makes it, checks it is
/// writable, prints it.
const RESULTS_ROOT_SCRIPT: &str = r#"root=${1:-$HOME/slurm-run}
mkdir -p -- "$root" || exit 1
probe=$(mktemp "$root/.slurm-run-probe.XXXXXX") || { echo "cannot create files in $root" >&2; exit 1; }
rm -f -- "$probe"
printf '%s\n' "$root""#;

/// Prints `enroot` when missing and `credentials` when the credentials file is empty.
const ENROOT_SCRIPT: &str = r#"command -v enroot >/dev/null 2>&1 || echo enroot
f="${ENROOT_CONFIG_PATH:-$HOME/.config/enroot}/.credentials"
[ -s "$f" ] || echo "credentials $f""#;

/// Prints the cluster's `ClusterName` (nothing when scontrol cannot say).
pub(super) const CLUSTER_NAME_SCRIPT: &str = r#"scontrol show config 2>/dev/null | sed -n 's/^ClusterName *= *//p' | head -n 1
exit 0"#;

/// Prints each path that does not exist.
const MISSING_PATHS_SCRIPT: &str = r#"for p in "$@"; do [ -e "$p" ] || printf '%s\n' "$p"; done"#;

enum Probe {
    Tools,
    Accounting,
    Partition(String),
    Pyxis,
    Enroot,
    ResultsRoot,
    Datasets(Vec<String>),
    ClusterName,
}

impl<T, R, S> SlurmBackend<T, R, S>
where
    T: Transport + 'static,
    R: Renderer + 'static,
    S: RecordStore + 'static,
{
    /// Run every check for `spec` (or the backend's defaults) in one round trip.
    pub(super) async fn run_preflight(&self, spec: Option<&JobSpec>) -> Result<PreflightReport> {
        let config = &self.inner.config;
        let mut report = PreflightReport::default();
        let partitions: Vec<String> = spec
            .and_then(|s| s.partition.clone())
            .unwrap_or_else(|| config.partition.clone())
            .split(',')
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .collect();
        let image = match spec.map(JobSpec::image_ref).transpose() {
            Ok(image) => image.flatten(),
            Err(e) => {
                report.push("spec", false, e.to_string(), "fix the spec's image");
                None
            }
        };
        let datasets: Vec<String> = match spec.map(JobSpec::dataset_uris).transpose() {
            Ok(uris) => uris
                .unwrap_or_default()
                .iter()
                .map(|u| u.resolve().as_str().to_string())
                .collect(),
            Err(e) => {
                report.push("spec", false, e.to_string(), "fix the spec's datasets");
                Vec::new()
            }
        };

        let mut probes = vec![Probe::Tools, Probe::Accounting];
        let mut commands = vec![
            Command::bash_script(MISSING_TOOLS_SCRIPT, TOOLS.iter().copied()),
            Command::new("sacct").args(["--noheader", "-X", "--starttime=now", "--format=JobID"]),
        ];
        for p in &partitions {
            probes.push(Probe::Partition(p.clone()));
            commands.push(
                Command::new("scontrol")
                    .args(["--oneliner", "show", "partition"])
                    .arg(p.as_str()),
            );
        }
        probes.push(Probe::Pyxis);
        commands.push(Command::new("srun").arg("--help"));
        let needs_conversion = image.as_ref().is_some_and(ImageRef::is_registry)
            && !spec.is_some_and(|s| s.allow_registry_image);
        if needs_conversion {
            probes.push(Probe::Enroot);
            commands.push(Command::bash_script(ENROOT_SCRIPT, Vec::<String>::new()));
        }
        probes.push(Probe::ResultsRoot);
        commands.push(Command::bash_script(
            RESULTS_ROOT_SCRIPT,
            [config.results_root.clone().unwrap_or_default()],
        ));
        probes.push(Probe::ClusterName);
        commands.push(Command::bash_script(
            CLUSTER_NAME_SCRIPT,
            Vec::<String>::new(),
        ));
        if !datasets.is_empty() {
            probes.push(Probe::Datasets(datasets.clone()));
            commands.push(Command::bash_script(MISSING_PATHS_SCRIPT, datasets.clone()));
        }

        let outputs = match self.inner.transport.run(&batch(&commands)).await {
            Ok(output) => match split_batch_output(&output, commands.len()) {
                Ok(parts) => parts,
                Err(e) => {
                    report.push("ssh", false, e.to_string(), "the login shell printed something unexpected; check the remote shell start-up files");
                    return Ok(report);
                }
            },
            Err(e) => {
                let remedy = match e.kind() {
                    crate::ErrorKind::HostKey => "verify the host key and add it to known_hosts (the error says how)",
                    crate::ErrorKind::Auth => "check SLURM_USER and SSH_KEY_PATH (or SSH_AUTH_SOCK); the key must be authorised on the login node",
                    crate::ErrorKind::Config => "set the variable the error names",
                    _ => "check SLURM_HOSTNAME and that the login node is reachable (ssh -o BatchMode=yes works)",
                };
                report.push("ssh", false, e.to_string(), remedy);
                return Ok(report);
            }
        };
        report.push("ssh", true, "batch-mode login with a verified host key", "");

        let mut cache = self.inner.cache.lock().expect("cache lock");
        let mut base_ok = true;
        for (probe, out) in probes.into_iter().zip(outputs) {
            match probe {
                Probe::Tools => {
                    let missing = out
                        .stdout_text()
                        .split_whitespace()
                        .map(str::to_string)
                        .collect::<Vec<_>>();
                    base_ok &= missing.is_empty();
                    report.push(
                        "scheduler tools",
                        missing.is_empty(),
                        if missing.is_empty() { TOOLS.join(", ") } else { format!("missing: {}", missing.join(", ")) },
                        "install the Slurm client tools on the login node, or log in to a node that has them (module load slurm)",
                    );
                }
                Probe::Accounting => {
                    let stderr = out.stderr_text();
                    let ok = out.success()
                        && !is_accounting_disabled(&stderr)
                        && !stderr.to_lowercase().contains("error");
                    cache.accounting = Some(ok);
                    report.push(
                        "accounting (sacct)",
                        ok,
                        if ok { "sacct answers".to_string() } else { first_line(&stderr, "sacct failed") },
                        "ask the cluster admins to enable slurmdbd accounting; without it finished jobs are read from scontrol while slurmctld remembers them (MinJobAge)",
                    );
                }
                Probe::Partition(name) => {
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
                            base_ok &= info.up;
                            report.push(
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
                            cache.partitions.insert(name, info);
                        }
                        None => {
                            base_ok = false;
                            report.push(
                                check,
                                false,
                                first_line(&out.stderr_text(), "not found"),
                                "check SLURM_PARTITION or the spec's partition against `sinfo -s`",
                            );
                        }
                    }
                }
                Probe::Pyxis => {
                    let present = out.stdout_text().contains("--container-image");
                    cache.pyxis = Some(present);
                    let needed = image.is_some();
                    report.push(
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
                Probe::Enroot => {
                    let text = out.stdout_text();
                    let no_enroot = text.lines().any(|l| l == "enroot");
                    let no_credentials = text.lines().find(|l| l.starts_with("credentials "));
                    report.push(
                        "enroot",
                        !no_enroot,
                        if no_enroot { "enroot is not on PATH".to_string() } else { "present".to_string() },
                        "install enroot on the login node and the conversion partition, or stage a .sqsh image and give its path as `image`",
                    );
                    report.push(
                        "enroot credentials",
                        no_credentials.is_none(),
                        match no_credentials {
                            Some(line) => format!("{} is missing or empty", line.trim_start_matches("credentials ")),
                            None => "present".to_string(),
                        },
                        "install them once: printf 'machine nvcr.io login $oauthtoken password %s\\n' \"$NGC_KEY\" | ssh LOGIN 'umask 077; mkdir -p ~/.config/enroot; cat > ~/.config/enroot/.credentials'",
                    );
                }
                Probe::ResultsRoot => {
                    let root = out.stdout_text().trim().to_string();
                    let parsed = if out.success() {
                        RemotePath::parse_for("SLURM_BASE_RESULTS_DIR", &root).ok()
                    } else {
                        None
                    };
                    base_ok &= parsed.is_some();
                    report.push(
                        "results root",
                        parsed.is_some(),
                        match &parsed {
                            Some(p) => format!("{} is writable", p.as_str()),
                            None => first_line(&out.stderr_text(), "not writable"),
                        },
                        "set SLURM_BASE_RESULTS_DIR to a folder on shared storage you can write (both login and compute nodes must see it)",
                    );
                    if parsed.is_some() {
                        cache.results_root = parsed;
                    }
                }
                Probe::ClusterName => {
                    // Not a check: the key of the NCCL knob cache, learnt on the way.
                    cache.cluster_name = Some(super::knobs::cluster_key(&out.stdout_text()));
                }
                Probe::Datasets(paths) => {
                    let missing: Vec<String> =
                        out.stdout_text().lines().map(str::to_string).collect();
                    report.push(
                        "datasets",
                        missing.is_empty() && out.success(),
                        if missing.is_empty() { format!("{} present", paths.len()) } else { format!("missing on the cluster: {}", missing.join(", ")) },
                        "stage the data on shared storage first (never inside the GPU allocation) and give lustre:///absolute/path",
                    );
                }
            }
        }
        cache.base_checked = base_ok;
        Ok(report)
    }

    /// The base checks (tools, accounting, partitions, results root), once per
    /// backend; returns the results root. Fails with the first failed check.
    pub(super) async fn ensure_ready(&self, spec: &JobSpec) -> Result<RemotePath> {
        let partitions: Vec<String> = spec
            .partition
            .clone()
            .unwrap_or_else(|| self.inner.config.partition.clone())
            .split(',')
            .map(|p| p.trim().to_string())
            .collect();
        let cached = || {
            let cache = self.inner.cache.lock().expect("cache lock");
            let known = partitions.iter().all(|p| cache.partitions.contains_key(p));
            match (&cache.results_root, cache.base_checked && known) {
                (Some(root), true) => Some(root.clone()),
                _ => None,
            }
        };
        if let Some(root) = cached() {
            return Ok(root);
        }
        // One preflight at a time: submits that arrive together wait for the first.
        let _once = self.inner.preflight_once.lock().await;
        if let Some(root) = cached() {
            return Ok(root);
        }
        let mut base = spec.clone();
        // Per-job checks (datasets, the image) run inside the submit command itself.
        base.datasets.clear();
        base.image = None;
        base.time = None;
        self.run_preflight(Some(&base)).await?.into_result()?;
        let cache = self.inner.cache.lock().expect("cache lock");
        cache.results_root.clone().ok_or_else(|| {
            Error::config(
                "SLURM_BASE_RESULTS_DIR",
                "the results root could not be resolved; set it",
            )
        })
    }

    /// The smallest MaxTime of the partitions a spec may run in, as preflight saw them.
    pub(super) fn max_wall(&self, spec: &JobSpec) -> Option<WallTime> {
        let cache = self.inner.cache.lock().expect("cache lock");
        spec.partition
            .clone()
            .unwrap_or_else(|| self.inner.config.partition.clone())
            .split(',')
            .filter_map(|p| cache.partitions.get(p.trim()).and_then(|i| i.max_time))
            .min_by_key(|w| w.as_secs())
    }

    /// Whether preflight found Pyxis (None before any preflight).
    pub(super) fn pyxis_present(&self) -> Option<bool> {
        self.inner.cache.lock().expect("cache lock").pyxis
    }
}

fn parse_partition(out: &Output) -> Option<PartitionInfo> {
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
    Some(PartitionInfo { up, max_time })
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

    #[test]
    fn report_fails_with_the_first_failure() {
        let mut report = PreflightReport::default();
        report.push("a", true, "fine", "none");
        report.push("b", false, "broken", "fix b");
        assert!(!report.passed());
        let text = report.to_string();
        assert!(
            text.contains("FAIL b") && text.contains("remedy: fix b"),
            "{text}"
        );
        let err = report.into_result().unwrap_err();
        assert!(err.to_string().contains("fix b"));
    }
}
