//! SLURM output parsing (filled in by the slurm-core domain work).
