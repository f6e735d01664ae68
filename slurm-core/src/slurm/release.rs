//! The Slurm release a cluster runs, as `scontrol show config` (`SLURM_VERSION`, the
//! controller's) and `scontrol --version` (the login node's client) print it: the
//! releases slurm-run is tested against, and what the library uses of newer ones.

use std::fmt;

/// A Slurm release, `major.minor.micro` (`24.11.5`; Slurm names its releases by year and
/// month, so they order as numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct SlurmRelease {
    pub(crate) major: u16,
    pub(crate) minor: u16,
    pub(crate) micro: u16,
}

/// The oldest release the test bed runs (`make test`); preflight refuses older ones.
pub(crate) const OLDEST_TESTED: SlurmRelease = SlurmRelease::new(22, 5, 0);

/// The newest release the test bed runs; a newer one passes preflight with a note.
pub(crate) const NEWEST_TESTED: SlurmRelease = SlurmRelease::new(26, 5, 0);

/// Since this release sacct has the `FailedNode` field (the node that caused a job's
/// failure), and slurmdbd keeps it.
pub(crate) const FAILED_NODE_SINCE: SlurmRelease = SlurmRelease::new(23, 2, 0);

impl SlurmRelease {
    /// The release `major.minor.micro`.
    pub(crate) const fn new(major: u16, minor: u16, micro: u16) -> Self {
        SlurmRelease {
            major,
            minor,
            micro,
        }
    }

    /// Read a release from what Slurm prints: `24.11.5`, `slurm 22.05.8`,
    /// `slurm-wlm 26.05.5`, `23.02.0-0rc1` (a suffix after the micro number is
    /// ignored), `25.05` (micro 0). `None` for anything else.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let word = text.split_whitespace().last()?;
        let mut parts = word.splitn(3, '.');
        let number = |part: Option<&str>| -> Option<u16> {
            let digits: String = part?.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        };
        let major = number(parts.next())?;
        let minor = number(parts.next())?;
        let micro = match parts.next() {
            Some(rest) => number(Some(rest))?,
            None => 0,
        };
        Some(SlurmRelease::new(major, minor, micro))
    }

    /// The release's series, `24.11` (what the test bed and the docs name).
    pub(crate) fn series(&self) -> String {
        format!("{}.{:02}", self.major, self.minor)
    }

    /// Whether its sacct prints `FailedNode` ([`FAILED_NODE_SINCE`]).
    pub(crate) fn has_failed_node(&self) -> bool {
        *self >= FAILED_NODE_SINCE
    }

    /// Whether the test bed runs a release at least as old (its series is not older
    /// than [`OLDEST_TESTED`]).
    pub(crate) fn is_supported(&self) -> bool {
        (self.major, self.minor) >= (OLDEST_TESTED.major, OLDEST_TESTED.minor)
    }

    /// Whether its series is newer than any the test bed runs.
    pub(crate) fn is_newer_than_tested(&self) -> bool {
        (self.major, self.minor) > (NEWEST_TESTED.major, NEWEST_TESTED.minor)
    }
}

impl fmt::Display for SlurmRelease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:02}.{}", self.major, self.minor, self.micro)
    }
}

/// The releases of a cluster: its controller's (the daemons that run the jobs) and its
/// login node's client (whose commands slurm-run runs, and whose output it reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ClusterRelease {
    /// `SLURM_VERSION` of `scontrol show config`: slurmctld's release.
    pub(crate) controller: Option<SlurmRelease>,
    /// `scontrol --version` on the login node.
    pub(crate) client: Option<SlurmRelease>,
}

impl ClusterRelease {
    /// The release that runs the jobs (the controller's; the client's when the
    /// controller's is unknown).
    pub(crate) fn running(&self) -> Option<SlurmRelease> {
        self.controller.or(self.client)
    }

    /// Whether the client's sacct prints `FailedNode` (the client parses the field, and
    /// a slurmdbd is never older than the clients it serves).
    pub(crate) fn has_failed_node(&self) -> bool {
        self.client.is_some_and(|c| c.has_failed_node())
    }

    /// The preflight check of these releases: `Ok(detail)` when supported (the detail
    /// names them), `Err((detail, remedy))` when one is older than [`OLDEST_TESTED`],
    /// `None` when neither could be read.
    pub(crate) fn check(&self) -> Option<Result<String, (String, String)>> {
        let running = self.running()?;
        let client = self.client.filter(|c| *c != running);
        let named = match client {
            Some(client) => format!("Slurm {running} (slurmctld), client {client}"),
            None => format!("Slurm {running}"),
        };
        let too_old = [self.controller, self.client]
            .into_iter()
            .flatten()
            .filter(|r| !r.is_supported())
            .min();
        if let Some(old) = too_old {
            let which = if Some(old) == self.controller {
                "the cluster runs"
            } else {
                "the login node's Slurm commands are"
            };
            return Some(Err((
                format!(
                    "{named}: {which} Slurm {old}, older than {}, the oldest release slurm-run is tested against",
                    OLDEST_TESTED.series()
                ),
                format!(
                    "run slurm-run against a cluster (and login node) of Slurm {} or newer; ask the cluster's admins to upgrade Slurm {}",
                    OLDEST_TESTED.series(),
                    old.series()
                ),
            )));
        }
        Some(Ok(if running.is_newer_than_tested() {
            format!(
                "{named} (newer than {}, the newest release slurm-run is tested against)",
                NEWEST_TESTED.series()
            )
        } else {
            named
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_form_slurm_prints() {
        for (text, release) in [
            ("24.11.5", SlurmRelease::new(24, 11, 5)),
            ("slurm 22.05.8", SlurmRelease::new(22, 5, 8)),
            ("slurm-wlm 26.05.5\n", SlurmRelease::new(26, 5, 5)),
            ("23.02.0-0rc1", SlurmRelease::new(23, 2, 0)),
            ("25.05", SlurmRelease::new(25, 5, 0)),
        ] {
            assert_eq!(SlurmRelease::parse(text), Some(release), "{text}");
        }
        for bad in ["", "slurm", "x.y.z", "24", "slurm 24-11-5"] {
            assert_eq!(SlurmRelease::parse(bad), None, "{bad}");
        }
        assert_eq!(SlurmRelease::new(22, 5, 8).to_string(), "22.05.8");
        assert_eq!(SlurmRelease::new(24, 11, 5).series(), "24.11");
    }

    #[test]
    fn releases_order_by_number_and_gate_what_they_added() {
        assert!(SlurmRelease::new(22, 5, 8) < SlurmRelease::new(23, 2, 0));
        assert!(SlurmRelease::new(23, 11, 0) < SlurmRelease::new(24, 5, 0));
        assert!(!SlurmRelease::new(22, 5, 8).has_failed_node());
        assert!(SlurmRelease::new(23, 2, 0).has_failed_node());
        assert!(SlurmRelease::new(26, 5, 5).has_failed_node());
        assert!(SlurmRelease::new(22, 5, 0).is_supported());
        assert!(!SlurmRelease::new(21, 8, 8).is_supported());
        assert!(SlurmRelease::new(26, 11, 0).is_newer_than_tested());
        assert!(!SlurmRelease::new(26, 5, 9).is_newer_than_tested());
    }

    #[test]
    fn the_check_refuses_an_old_controller_or_client_naming_it_and_the_fix() {
        let release = |controller, client| ClusterRelease {
            controller: SlurmRelease::parse(controller),
            client: SlurmRelease::parse(client),
        };
        assert_eq!(
            release("24.11.5", "24.11.5").check(),
            Some(Ok("Slurm 24.11.5".into()))
        );
        assert_eq!(
            release("24.11.5", "23.11.1").check(),
            Some(Ok("Slurm 24.11.5 (slurmctld), client 23.11.1".into()))
        );
        let Some(Err((detail, remedy))) = release("21.08.8", "21.08.8").check() else {
            panic!("21.08 must be refused");
        };
        assert!(
            detail.contains("the cluster runs Slurm 21.08.8"),
            "{detail}"
        );
        assert!(detail.contains("older than 22.05"), "{detail}");
        assert!(remedy.contains("22.05 or newer"), "{remedy}");
        assert!(remedy.contains("upgrade Slurm 21.08"), "{remedy}");
        let Some(Err((detail, _))) = release("22.05.8", "20.11.9").check() else {
            panic!("a 20.11 client must be refused");
        };
        assert!(
            detail.contains("the login node's Slurm commands are Slurm 20.11.9"),
            "{detail}"
        );
        let Some(Ok(newer)) = release("27.05.0", "").check() else {
            panic!("a newer release passes");
        };
        assert!(newer.contains("newer than 26.05"), "{newer}");
        assert_eq!(release("", "").check(), None);
        assert!(release("", "23.02.1").has_failed_node());
        assert!(!release("24.11.5", "22.05.8").has_failed_node());
    }
}
