//! The backend slurmctl drives, built from the flags and the environment.

use std::sync::Arc;

use slurm_run::prelude::*;
use slurm_run::{OpenSshTransport, OpenSshTransportBuilder};

use crate::args::{Global, SshKind};

/// The concrete backend slurmctl drives: any transport, the built-in templates, records in a folder.
pub(crate) type Slurm = SlurmBackend<Arc<dyn Transport>, HandlebarsRenderer, FileRecordStore>;

/// The backend the flags and the environment describe (connecting happens on first use).
pub(crate) fn backend(global: &Global) -> slurm_run::Result<Slurm> {
    let lookup = |name: &str| global.lookup(name);
    let config = SlurmConfig::builder().with_env_from(lookup).build()?;
    let store = FileRecordStore::new(&config.state_dir)?;
    let transport: Arc<dyn Transport> = match global.ssh {
        SshKind::Ssh2 => Arc::new(Ssh2TransportBuilder::from_lookup(lookup)?.build()?),
        SshKind::Openssh => {
            // Every host of SLURM_HOSTNAME, tried in order (each with its own master).
            let builder = OpenSshTransportBuilder::from_lookup(lookup)?;
            Arc::new(OpenSshTransport::new(builder)?)
        }
    };
    Ok(SlurmBackend::new(
        transport,
        HandlebarsRenderer::new(),
        store,
        config,
    ))
}
