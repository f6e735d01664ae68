//! sbatch script rendering for slurm-run.
#![deny(missing_docs)]
