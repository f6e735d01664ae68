//! `SlurmConfig`: what the SLURM backend needs to know about the cluster, from a builder or from the environment.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::SlurmSubmitOptions;
use crate::{Error, Result};

/// The SLURM backend's configuration. Connection settings (`SLURM_HOSTNAME`,
/// `SLURM_USER`, `SSH_KEY_PATH`) belong to the transport, not here.
#[derive(Clone, PartialEq, Eq)]
pub struct SlurmConfig {
    /// Partition(s) for GPU jobs (a spec may override).
    pub partition: String,
    /// Absolute results root on shared storage; `None` means `$HOME/slurm-run` on the cluster.
    pub results_root: Option<String>,
    /// Account for `#SBATCH --account`.
    pub account: Option<String>,
    /// CPU partition for image conversion.
    pub convert_partition: String,
    /// Mounts added to every container job.
    pub container_mounts: Vec<String>,
    /// Where the job folder is mounted inside the container; `None`: the same path.
    pub container_results_dir: Option<String>,
    /// Local folder of job records.
    pub state_dir: PathBuf,
    /// Default interval between polls of `watch`.
    pub poll_interval: Duration,
    /// How long a submit whose outcome is unknown waits for the job to show up by name
    /// before it may try once more.
    pub reconcile_wait: Duration,
    /// The time limit of an image conversion job, in minutes.
    pub convert_minutes: u32,
    /// The interface the NCCL probe's last knob rung sets as `NCCL_SOCKET_IFNAME`.
    pub nccl_socket_ifname: String,
    /// What every submit does beyond the generic options (the NCCL probe), unless
    /// [`SlurmBackend::submit_with`](super::SlurmBackend::submit_with) says otherwise.
    pub submit: SlurmSubmitOptions,
    /// The largest code tree (`code:` in a spec) a submit sends, in bytes (default 100
    /// MiB): code, not data, which belongs on shared storage.
    pub code_limit: u64,
}

impl fmt::Debug for SlurmConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlurmConfig")
            .field("partition", &self.partition)
            .field("results_root", &self.results_root)
            .field("account", &self.account)
            .field("convert_partition", &self.convert_partition)
            .field("container_mounts", &self.container_mounts)
            .field("container_results_dir", &self.container_results_dir)
            .field("state_dir", &self.state_dir)
            .field("poll_interval", &self.poll_interval)
            .field("nccl_socket_ifname", &self.nccl_socket_ifname)
            .field("submit", &self.submit)
            .field("code_limit", &self.code_limit)
            .finish_non_exhaustive()
    }
}

impl SlurmConfig {
    /// The partitions `spec` may run in: its own, else the configured ones
    /// (comma-separated, empty names dropped).
    pub(crate) fn partitions_for(&self, spec: &crate::spec::JobSpec) -> Vec<String> {
        spec.partition
            .as_deref()
            .unwrap_or(&self.partition)
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// A builder with the defaults; `partition` must be set before [`SlurmConfigBuilder::build`].
    pub fn builder() -> SlurmConfigBuilder {
        SlurmConfigBuilder::default()
    }

    /// Read the configuration from the environment:
    ///
    /// | variable | what for |
    /// |---|---|
    /// | `SLURM_PARTITION` | partition(s) for GPU jobs, comma-separated (required) |
    /// | `SLURM_BASE_RESULTS_DIR` | absolute results root on shared storage (optional: default `$HOME/slurm-run` on the cluster) |
    /// | `SLURM_ACCOUNT` | account for `#SBATCH --account` (optional) |
    /// | `SLURM_CONVERT_PARTITION` | CPU partition for container image conversion (optional: default `cpu_long`) |
    /// | `SLURM_CONTAINER_MOUNTS` | container mounts added to every job, `SRC:DST[,SRC:DST]` (optional) |
    /// | `SLURM_CONTAINER_RESULTS_DIR` | where the job folder is mounted inside the container (optional: default the same path as on the cluster) |
    /// | `SLURM_RUN_STATE_DIR` | local folder of job records (optional: default `~/.slurm-run/jobs`) |
    /// | `SLURM_NCCL_SOCKET_IFNAME` | network interface the NCCL probe's last rung pins with NCCL_SOCKET_IFNAME (optional: default `eth0`) |
    /// | `SLURM_NCCL_PROBE` | whether multi-GPU jobs are preceded by the NCCL probe: auto, always or never (optional: default `auto`; a spec's nccl_probe wins) |
    ///
    pub fn from_env() -> Result<Self> {
        Self::builder()
            .with_env_from(|name| std::env::var(name).ok())
            .build()
    }
}

/// Builds a [`SlurmConfig`]; `with_*` setters override what the environment gave.
#[derive(Debug, Clone, Default)]
pub struct SlurmConfigBuilder {
    partition: Option<String>,
    results_root: Option<String>,
    account: Option<String>,
    convert_partition: Option<String>,
    container_mounts: Vec<String>,
    container_results_dir: Option<String>,
    state_dir: Option<PathBuf>,
    poll_interval: Option<Duration>,
    reconcile_wait: Option<Duration>,
    convert_minutes: Option<u32>,
    nccl_socket_ifname: Option<String>,
    /// `SLURM_NCCL_PROBE` as given, checked by `build`.
    nccl_probe: Option<String>,
    submit: SlurmSubmitOptions,
    code_limit: Option<u64>,
}

impl SlurmConfigBuilder {
    /// Fill every field the lookup knows (by the names [`SlurmConfig::from_env`] lists);
    /// empty values count as unset.
    pub fn with_env_from(mut self, lookup: impl Fn(&str) -> Option<String>) -> Self {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        if let Some(v) = get("SLURM_PARTITION") {
            self.partition = Some(v);
        }
        if let Some(v) = get("SLURM_BASE_RESULTS_DIR") {
            self.results_root = Some(v);
        }
        if let Some(v) = get("SLURM_ACCOUNT") {
            self.account = Some(v);
        }
        if let Some(v) = get("SLURM_CONVERT_PARTITION") {
            self.convert_partition = Some(v);
        }
        if let Some(v) = get("SLURM_CONTAINER_MOUNTS") {
            self.container_mounts = v
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect();
        }
        if let Some(v) = get("SLURM_CONTAINER_RESULTS_DIR") {
            self.container_results_dir = Some(v.trim().to_string());
        }
        if let Some(v) = get("SLURM_RUN_STATE_DIR") {
            self.state_dir = Some(PathBuf::from(v));
        }
        if let Some(v) = get("SLURM_NCCL_SOCKET_IFNAME") {
            self.nccl_socket_ifname = Some(v.trim().to_string());
        }
        if let Some(v) = get("SLURM_NCCL_PROBE") {
            self.nccl_probe = Some(v);
        }
        self
    }

    /// Partition(s) for GPU jobs.
    pub fn with_partition(mut self, partition: impl Into<String>) -> Self {
        self.partition = Some(partition.into());
        self
    }

    /// The largest code tree a submit sends, in bytes (default 100 MiB).
    pub fn with_code_limit(mut self, bytes: u64) -> Self {
        self.code_limit = Some(bytes);
        self
    }

    /// Absolute results root on shared storage.
    pub fn with_results_root(mut self, root: impl Into<String>) -> Self {
        self.results_root = Some(root.into());
        self
    }

    /// Account for `#SBATCH --account`.
    pub fn with_account(mut self, account: impl Into<String>) -> Self {
        self.account = Some(account.into());
        self
    }

    /// CPU partition for image conversion.
    pub fn with_convert_partition(mut self, partition: impl Into<String>) -> Self {
        self.convert_partition = Some(partition.into());
        self
    }

    /// Mounts added to every container job.
    pub fn with_container_mounts(mut self, mounts: Vec<String>) -> Self {
        self.container_mounts = mounts;
        self
    }

    /// Where the job folder is mounted inside the container (default: the same path).
    pub fn with_container_results_dir(mut self, dir: impl Into<String>) -> Self {
        self.container_results_dir = Some(dir.into());
        self
    }

    /// Local folder of job records.
    pub fn with_state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.state_dir = Some(dir.into());
        self
    }

    /// Default interval between polls of `watch`.
    pub fn with_poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = Some(interval);
        self
    }

    /// How long an ambiguous submit waits for its job to show up by name.
    pub fn with_reconcile_wait(mut self, wait: Duration) -> Self {
        self.reconcile_wait = Some(wait);
        self
    }

    /// The time limit of an image conversion job, in minutes.
    pub fn with_convert_minutes(mut self, minutes: u32) -> Self {
        self.convert_minutes = Some(minutes);
        self
    }

    /// The interface the NCCL probe's last knob rung pins (`NCCL_SOCKET_IFNAME`).
    pub fn with_nccl_socket_ifname(mut self, ifname: impl Into<String>) -> Self {
        self.nccl_socket_ifname = Some(ifname.into());
        self
    }

    /// What every submit does beyond the generic options (the NCCL probe); overrides
    /// `SLURM_NCCL_PROBE`.
    pub fn with_submit_options(mut self, options: SlurmSubmitOptions) -> Self {
        self.submit = options;
        self.nccl_probe = None;
        self
    }

    /// Check and build. Errors name the variable and the fix.
    pub fn build(self) -> Result<SlurmConfig> {
        let partition = self.partition.ok_or_else(|| {
            Error::config(
                "SLURM_PARTITION",
                "not set: export SLURM_PARTITION=<gpu partition[,another]> or call with_partition",
            )
        })?;
        for part in partition.split(',') {
            crate::names::validate_safe_name("SLURM_PARTITION", part.trim())?;
        }
        check_places(
            self.results_root.as_deref(),
            self.account.as_deref(),
            self.container_results_dir.as_deref(),
        )?;
        let convert_partition = self
            .convert_partition
            .unwrap_or_else(|| "cpu_long".to_string());
        crate::names::validate_safe_name("SLURM_CONVERT_PARTITION", &convert_partition)?;
        let nccl_socket_ifname = self
            .nccl_socket_ifname
            .unwrap_or_else(|| "eth0".to_string());
        // NCCL accepts a list (`eth0,eth1`) and prefixes (`^docker`, `=eth0`).
        if nccl_socket_ifname.is_empty()
            || !nccl_socket_ifname
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-,^=:".contains(c))
        {
            return Err(Error::config(
                "SLURM_NCCL_SOCKET_IFNAME",
                format!("`{nccl_socket_ifname}` is not an interface name (letters, digits, `._-,^=:`); give e.g. eth0 or ib0"),
            ));
        }
        let mut submit = self.submit;
        if let Some(mode) = &self.nccl_probe {
            submit.nccl_probe = mode.parse().map_err(|_| {
                Error::config(
                    "SLURM_NCCL_PROBE",
                    format!(
                        "`{}` is not a probe mode; give auto, always or never",
                        mode.trim()
                    ),
                )
            })?;
        }
        let state_dir = match self.state_dir {
            Some(dir) => dir,
            None => default_state_dir()?,
        };
        Ok(SlurmConfig {
            partition,
            results_root: self
                .results_root
                .map(|r| r.trim_end_matches('/').to_string()),
            account: self.account,
            convert_partition,
            container_mounts: self.container_mounts,
            container_results_dir: self
                .container_results_dir
                .map(|d| d.trim_end_matches('/').to_string()),
            state_dir,
            poll_interval: self.poll_interval.unwrap_or(Duration::from_secs(10)),
            reconcile_wait: self.reconcile_wait.unwrap_or(Duration::from_secs(20)),
            convert_minutes: self.convert_minutes.unwrap_or(120),
            nccl_socket_ifname,
            submit,
            code_limit: self.code_limit.unwrap_or(crate::code::DEFAULT_CODE_LIMIT),
        })
    }
}

/// `~/.slurm-run/jobs`.
pub fn default_state_dir() -> Result<PathBuf> {
    let home = std::env::var_os("HOME").ok_or_else(|| {
        Error::config(
            "SLURM_RUN_STATE_DIR",
            "HOME is not set: set SLURM_RUN_STATE_DIR to a folder for job records",
        )
    })?;
    Ok(PathBuf::from(home).join(".slurm-run").join("jobs"))
}

/// Check the results root (absolute, no `..`), the account (a safe name) and the
/// results folder inside the container (absolute, plain), those given.
fn check_places(
    results_root: Option<&str>,
    account: Option<&str>,
    container_results_dir: Option<&str>,
) -> Result<()> {
    if let Some(root) = results_root {
        if !root.starts_with('/') || root.split('/').any(|c| c == "..") {
            return Err(Error::config(
                "SLURM_BASE_RESULTS_DIR",
                format!("`{root}` must be an absolute path on the cluster's shared storage, without `..`"),
            ));
        }
    }
    if let Some(account) = account {
        crate::names::validate_safe_name("SLURM_ACCOUNT", account)?;
    }
    if let Some(dir) = container_results_dir {
        let plain = dir.starts_with('/')
            && dir.len() > 1
            && !dir.split('/').any(|c| c == "..")
            && dir
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c));
        if !plain {
            return Err(Error::config(
                "SLURM_CONTAINER_RESULTS_DIR",
                format!("`{dir}` must be an absolute path inside the container (letters, digits, `/._-`, no `..`), e.g. /results"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(vars: &[(&str, &str)]) -> Result<SlurmConfig> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        SlurmConfig::builder()
            .with_env_from(move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
            .with_state_dir("/tmp/records")
            .build()
    }

    /// The variables `from_env` documents, with what each is for.
    const ENV_VARS: &[(&str, &str)] = &[
    ("SLURM_PARTITION", "partition(s) for GPU jobs, comma-separated (required)"),
    (
        "SLURM_BASE_RESULTS_DIR",
        "absolute results root on shared storage (optional: default `$HOME/slurm-run` on the cluster)",
    ),
    ("SLURM_ACCOUNT", "account for `#SBATCH --account` (optional)"),
    (
        "SLURM_CONVERT_PARTITION",
        "CPU partition for container image conversion (optional: default `cpu_long`)",
    ),
    (
        "SLURM_CONTAINER_MOUNTS",
        "container mounts added to every job, `SRC:DST[,SRC:DST]` (optional)",
    ),
    (
        "SLURM_CONTAINER_RESULTS_DIR",
        "where the job folder is mounted inside the container (optional: default the same path as on the cluster)",
    ),
    (
        "SLURM_RUN_STATE_DIR",
        "local folder of job records (optional: default `~/.slurm-run/jobs`)",
    ),
    (
        "SLURM_NCCL_SOCKET_IFNAME",
        "network interface the NCCL probe's last rung pins with NCCL_SOCKET_IFNAME (optional: default `eth0`)",
    ),
    (
        "SLURM_NCCL_PROBE",
        "whether multi-GPU jobs are preceded by the NCCL probe: auto, always or never (optional: default `auto`; a spec's nccl_probe wins)",
    ),
    ];

    #[test]
    fn the_documented_variables_are_the_ones_read() {
        let asked = std::sync::Mutex::new(Vec::<String>::new());
        let _ = SlurmConfig::builder().with_env_from(|name| {
            asked.lock().unwrap().push(name.to_string());
            None
        });
        let mut asked = asked.into_inner().unwrap();
        asked.sort();
        let mut listed: Vec<String> = ENV_VARS.iter().map(|(n, _)| n.to_string()).collect();
        listed.sort();
        assert_eq!(asked, listed);
    }

    #[test]
    fn missing_partition_names_the_variable() {
        let err = from(&[]).unwrap_err();
        assert!(err.to_string().contains("SLURM_PARTITION"), "{err}");
    }

    #[test]
    fn reads_every_variable() {
        let config = from(&[
            ("SLURM_PARTITION", "gpu,gpu2"),
            ("SLURM_BASE_RESULTS_DIR", "/lustre/results/"),
            ("SLURM_ACCOUNT", "proj"),
            ("SLURM_CONTAINER_MOUNTS", "/a:/a, /b:/c"),
            ("SLURM_CONTAINER_RESULTS_DIR", "/results/"),
        ])
        .unwrap();
        assert_eq!(config.container_results_dir.as_deref(), Some("/results"));
        assert_eq!(config.partition, "gpu,gpu2");
        assert_eq!(config.results_root.as_deref(), Some("/lustre/results"));
        assert_eq!(config.account.as_deref(), Some("proj"));
        assert_eq!(config.container_mounts, vec!["/a:/a", "/b:/c"]);
        assert_eq!(config.convert_partition, "cpu_long");
        assert_eq!(config.nccl_socket_ifname, "eth0");
    }

    #[test]
    fn socket_ifname_is_read_and_checked() {
        let config = from(&[
            ("SLURM_PARTITION", "gpu"),
            ("SLURM_NCCL_SOCKET_IFNAME", "ib0,eth1"),
        ])
        .unwrap();
        assert_eq!(config.nccl_socket_ifname, "ib0,eth1");
        let err = from(&[
            ("SLURM_PARTITION", "gpu"),
            ("SLURM_NCCL_SOCKET_IFNAME", "eth0; reboot"),
        ])
        .unwrap_err();
        assert!(
            err.to_string().contains("SLURM_NCCL_SOCKET_IFNAME"),
            "{err}"
        );
    }

    #[test]
    fn the_probe_switch_is_read_and_checked() {
        let config = from(&[("SLURM_PARTITION", "gpu"), ("SLURM_NCCL_PROBE", "Never")]).unwrap();
        assert_eq!(config.submit.nccl_probe, crate::nccl::NcclProbe::Never);
        let config = from(&[("SLURM_PARTITION", "gpu")]).unwrap();
        assert_eq!(config.submit.nccl_probe, crate::nccl::NcclProbe::Auto);
        let err = from(&[
            ("SLURM_PARTITION", "gpu"),
            ("SLURM_NCCL_PROBE", "sometimes"),
        ])
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("SLURM_NCCL_PROBE") && text.contains("auto, always or never"),
            "{text}"
        );
        // A setter overrides the environment.
        let config = SlurmConfig::builder()
            .with_env_from(|name| (name == "SLURM_NCCL_PROBE").then(|| "never".to_string()))
            .with_partition("gpu")
            .with_state_dir("/tmp/x")
            .with_submit_options(SlurmSubmitOptions {
                nccl_probe: crate::nccl::NcclProbe::Always,
                ..SlurmSubmitOptions::default()
            })
            .build()
            .unwrap();
        assert_eq!(config.submit.nccl_probe, crate::nccl::NcclProbe::Always);
    }

    #[test]
    fn container_results_dir_must_be_a_plain_absolute_path() {
        for bad in ["results", "/", "/a/../b", "/a b", "/a:b"] {
            let err = from(&[
                ("SLURM_PARTITION", "gpu"),
                ("SLURM_CONTAINER_RESULTS_DIR", bad),
            ])
            .unwrap_err();
            assert!(
                err.to_string().contains("SLURM_CONTAINER_RESULTS_DIR"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn relative_results_root_is_refused() {
        let err = from(&[
            ("SLURM_PARTITION", "gpu"),
            ("SLURM_BASE_RESULTS_DIR", "results"),
        ])
        .unwrap_err();
        assert!(err.to_string().contains("SLURM_BASE_RESULTS_DIR"), "{err}");
    }

    #[test]
    fn hostile_partition_is_refused() {
        let err = from(&[("SLURM_PARTITION", "gpu;rm -rf /")]).unwrap_err();
        assert!(err.to_string().contains("SLURM_PARTITION"), "{err}");
    }
}
