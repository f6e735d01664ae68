//! sbatch script rendering for slurm-run: strict handlebars templates, a secret lint and a `bash -n` check.
//!
//! [`HandlebarsRenderer`] implements the [`Renderer`](slurm_core::render::Renderer)
//! seam of slurm-core with two built-in templates, `singlenode` and `multinode` (a
//! strict superset: `--nodes`, `--wait-all-nodes=1` and the rendezvous block). The
//! design choices:
//!
//! - **Strict.** A variable the template names but the context lacks is an error, never
//!   an empty string, and the [`ScriptContext`](slurm_core::render::ScriptContext) is
//!   validated before rendering (every error names the field and the fix).
//! - **Shell-quoted, not HTML-escaped.** A batch script is not HTML. The escape
//!   function is [`shell_quote`](slurm_core::transport::shell_quote), so a plain
//!   `{{value}}` lands in a command line as exactly one word; `{{sh value}}` says
//!   the same explicitly and refuses a missing value. Values in `#SBATCH` lines go
//!   through `{{sbatch value}}` / `{{sbatch_line line}}`, which refuse anything that
//!   could end the directive line (newlines, control characters).
//! - **Logs in the reference's layout despite Slurm.** Slurm 22.05 does not create a
//!   missing folder for `--output`, so Slurm's own output goes to
//!   `<log_dir>/<job>-<id>.slurm.out|err` and the script makes
//!   `<log_dir>/<job>-<id>/` and redirects itself to `main.out` / `main.err` there.
//! - **No secret in the script.** Secrets travel in a mode-600 env sidecar the script
//!   sources and shreds on exit; [`lint`] refuses scripts holding a
//!   registered secret value or anything that looks like a literal credential, and
//!   runs `bash -n`.
//!
//! ```
//! use slurm_core::render::{Renderer, ScriptContext, TemplateKind};
//! use slurm_core::redact::SecretRegistry;
//! use slurm_render::HandlebarsRenderer;
//! # let context = slurm_render::example_context();
//! let renderer = HandlebarsRenderer::new();
//! let script = renderer.render(TemplateKind::SingleNode, &context).unwrap();
//! assert!(script.starts_with("#!/bin/bash\n#SBATCH --job-name="));
//! renderer.lint(&script, &SecretRegistry::new()).unwrap();
//! ```
#![deny(missing_docs)]
#![warn(unreachable_pub)]

pub mod lint;
mod renderer;
mod syntax;
mod validate;

pub use lint::{check_syntax, lint_script, scan_secrets};
pub use renderer::{HandlebarsRenderer, MULTINODE_TEMPLATE, SINGLENODE_TEMPLATE, TEMPLATE_SUFFIX};
pub use validate::validate_context;

/// A small, valid single-node context, for examples and tests.
#[doc(hidden)]
pub fn example_context() -> slurm_core::render::ScriptContext {
    slurm_core::render::ScriptContext {
        job_name: "resnet-train-a1b2c3".into(),
        partition: Some("gpu".into()),
        account: None,
        nodes: 1,
        gpus_per_node: 4,
        cpus_per_task: 16,
        memory: None,
        time: "04:00:00".into(),
        child_timeout_secs: 13_680,
        log_dir: "/lustre/users/me/logs".into(),
        results_dir: "/lustre/users/me/results/resnet-train-a1b2c3".into(),

        results_dir_in_job: "/lustre/users/me/results/resnet-train-a1b2c3".into(),
        image: None,
        container_mounts: Vec::new(),
        command: "echo hello".into(),
        env_file: None,
        env: Vec::new(),
        extra_env: Vec::new(),
        requeue: true,
        exclusive: false,
        extra_sbatch: Vec::new(),
        dependency: None,
        exclude: Vec::new(),
        array: None,
        probe: false,
        knobs_file: None,
    }
}
