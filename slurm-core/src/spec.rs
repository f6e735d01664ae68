//! spec (filled in by the slurm-core domain work).
