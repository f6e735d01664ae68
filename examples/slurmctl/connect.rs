//! The backend slurmctl drives, built from the flags and the environment.

use std::sync::Arc;

use slurm_run::prelude::*;
use slurm_run::{OpenSshTransport, OpenSshTransportBuilder};

use crate::args::{Global, SshKind};

/// The concrete backend slurmctl drives: any transport, the built-in templates, records
/// wherever `--records` / `SLURM_RUN_RECORDS` says (the state folder's SQLite by default).
pub(crate) type Slurm = SlurmBackend<Arc<dyn Transport>, HandlebarsRenderer, Box<dyn RecordStore>>;

/// The backend the flags and the environment describe (connecting happens on first use).
pub(crate) fn backend(global: &Global) -> slurm_run::Result<Slurm> {
    let lookup = |name: &str| global.lookup(name);
    let config = SlurmConfig::builder().with_env_from(lookup).build()?;
    let store = records(global, &config.state_dir)?.open()?;
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

/// Where the records live, by the flags and the environment, for state folder `state_dir`.
pub(crate) fn records(
    global: &Global,
    state_dir: &std::path::Path,
) -> slurm_run::Result<RecordsLocation> {
    RecordsLocation::from_lookup(|name| global.lookup(name), state_dir)
}

/// The state folder the flags and the environment name (no cluster settings needed).
pub(crate) fn state_dir(global: &Global) -> slurm_run::Result<std::path::PathBuf> {
    match global.lookup("SLURM_RUN_STATE_DIR") {
        Some(dir) => Ok(std::path::PathBuf::from(dir)),
        None => slurm_run::default_state_dir(),
    }
}
