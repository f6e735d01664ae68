//! Whether a job is preceded by the NCCL probe ([`NcclProbe`]): a spec's `nccl_probe`,
//! a submit's option, a configuration's default. The probe itself is [`crate::nccl`]'s.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Whether a submit runs the NCCL probe first.
///
/// Only jobs that need NCCL are concerned: more than one node, or more than one GPU
/// per node (the intra-node P2P hang needs no second node). Other jobs never probe
/// and never get knobs. Written `auto`, `always` or `never` (in a spec:
/// `nccl_probe: never`; on the command line: `--probe never`).
///
/// ```
/// use slurm_core::NcclProbe;
/// assert_eq!("never".parse::<NcclProbe>().unwrap(), NcclProbe::Never);
/// assert_eq!(NcclProbe::default().to_string(), "auto");
/// assert!("sometimes".parse::<NcclProbe>().unwrap_err().to_string().contains("auto, always or never"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NcclProbe {
    /// Probe when the job has a container image (the probe runs the container's
    /// torchrun) and the cluster has no cached knobs probed at a shape covering the
    /// job's (two nodes or more for a multi-node job, two GPUs a node or more for a
    /// multi-GPU one); otherwise submit with the cached knobs, if any.
    #[default]
    Auto,
    /// Probe before every such job (and refresh the cache).
    Always,
    /// Neither probe nor add cached knobs: the job runs with its own env only.
    Never,
}

impl NcclProbe {
    /// `auto`, `always` or `never`.
    pub fn as_str(self) -> &'static str {
        match self {
            NcclProbe::Auto => "auto",
            NcclProbe::Always => "always",
            NcclProbe::Never => "never",
        }
    }
}

impl fmt::Display for NcclProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for NcclProbe {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(NcclProbe::Auto),
            "always" => Ok(NcclProbe::Always),
            "never" => Ok(NcclProbe::Never),
            other => Err(Error::invalid(
                "nccl_probe",
                format!("`{other}` is not a probe mode; give auto, always or never"),
            )),
        }
    }
}
