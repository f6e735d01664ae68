//! slurm-run: run GPU jobs on a SLURM cluster reached over SSH.
//!
//! This facade only re-exports the workspace crates: [`core`] (the domain, the
//! `Backend`, `Transport` and `Renderer` seams), [`ssh`] (SSH transports) and
//! [`render`] (sbatch templates).
#![deny(missing_docs)]

pub use slurm_core as core;
pub use slurm_render as render;
pub use slurm_ssh as ssh;

pub use slurm_core::{Error, ErrorKind, Result};
