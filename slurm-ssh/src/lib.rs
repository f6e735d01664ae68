//! SSH transports for slurm-run.
#![deny(missing_docs)]
