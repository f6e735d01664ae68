//! `scontrol show config` (its `Key = Value` lines) and `scontrol --version`, as the
//! cluster-config script prints them: the cluster's name and its releases.

use crate::slurm::release::{ClusterRelease, SlurmRelease};

/// The prefix the cluster-config script puts before `scontrol --version`'s line.
pub(crate) const CLIENT_PREFIX: &str = "client ";

/// What slurm-run reads of a cluster's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct ClusterConfig {
    /// `ClusterName` (`None` when not printed, e.g. slurmctld did not answer).
    pub(crate) cluster_name: Option<String>,
    /// `SLURM_VERSION` (the controller's release) and the client's.
    pub(crate) release: ClusterRelease,
}

/// The value of `key` in `Key = Value` lines (`scontrol show config`; the spaces around
/// `=` vary with the key's length).
fn value_of<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once('=')?;
        (k.trim() == key).then(|| v.trim())
    })
}

/// Read the cluster-config script's output: the `ClusterName` and `SLURM_VERSION` lines
/// of `scontrol show config` (any of its other lines are ignored, so the whole output
/// reads too) and a `client <scontrol --version>` line. Total: what is missing or
/// unreadable is `None`.
pub(crate) fn parse_cluster_config(stdout: &str) -> ClusterConfig {
    let cluster_name = value_of(stdout, "ClusterName")
        .filter(|name| !name.is_empty())
        .map(str::to_string);
    let controller = value_of(stdout, "SLURM_VERSION").and_then(SlurmRelease::parse);
    let client = stdout
        .lines()
        .find_map(|line| line.strip_prefix(CLIENT_PREFIX))
        .and_then(SlurmRelease::parse);
    ClusterConfig {
        cluster_name,
        release: ClusterRelease { controller, client },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `scontrol show config` as each release's test bed printed it (the fixtures).
    const SHOW_CONFIG: [(&str, &str); 3] = [
        (
            "22.05.8",
            include_str!("../../../../tests/fixtures/slurm-22.05/scontrol-show-config"),
        ),
        (
            "24.11.5",
            include_str!("../../../../tests/fixtures/slurm-24.11/scontrol-show-config"),
        ),
        (
            "26.05.5",
            include_str!("../../../../tests/fixtures/slurm-26.05/scontrol-show-config"),
        ),
    ];

    /// `sinfo --version` of each release (the client prints the same as scontrol's).
    const VERSIONS: [(&str, &str); 3] = [
        (
            "22.05.8",
            include_str!("../../../../tests/fixtures/slurm-22.05/sinfo-version"),
        ),
        (
            "24.11.5",
            include_str!("../../../../tests/fixtures/slurm-24.11/sinfo-version"),
        ),
        (
            "26.05.5",
            include_str!("../../../../tests/fixtures/slurm-26.05/sinfo-version"),
        ),
    ];

    #[test]
    fn reads_the_name_and_the_releases_of_each_releases_real_output() {
        for ((release, config), (_, version)) in SHOW_CONFIG.iter().zip(VERSIONS) {
            let text = format!("{config}{CLIENT_PREFIX}{version}");
            let read = parse_cluster_config(&text);
            assert_eq!(read.cluster_name.as_deref(), Some("testbed"), "{release}");
            let expected = SlurmRelease::parse(release);
            assert_eq!(read.release.controller, expected, "{release}");
            assert_eq!(read.release.client, expected, "{release}");
        }
    }

    #[test]
    fn what_the_script_prints_and_what_it_may_not() {
        let read = parse_cluster_config(
            "ClusterName=tiny\nSLURM_VERSION           = 24.11.5\nclient slurm 24.11.5\n",
        );
        assert_eq!(read.cluster_name.as_deref(), Some("tiny"));
        assert_eq!(read.release.running(), SlurmRelease::parse("24.11.5"));
        // slurmctld down: only the client answers.
        let read = parse_cluster_config("client slurm-wlm 23.02.7\n");
        assert_eq!(read.cluster_name, None);
        assert_eq!(read.release.controller, None);
        assert_eq!(read.release.running(), SlurmRelease::parse("23.02.7"));
        assert_eq!(parse_cluster_config(""), ClusterConfig::default());
        let odd = parse_cluster_config("ClusterName =\nSLURM_VERSION = soon\nclient ?\n");
        assert_eq!(odd, ClusterConfig::default());
    }
}
