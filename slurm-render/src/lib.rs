//! sbatch script rendering for slurm-run: strict handlebars templates, a secret lint and a `bash -n` check.
//!
//! [`HandlebarsRenderer`] implements the [`Renderer`](slurm_core::Renderer)
//! seam of slurm-core with two built-in templates, `singlenode` and `multinode` (a
//! strict superset: `--nodes`, `--wait-all-nodes=1` and the rendezvous block). The
//! design choices:
//!
//! - **Strict.** A variable the template names but the context lacks is an error, never
//!   an empty string, and the [`ScriptContext`](slurm_core::ScriptContext) is
//!   validated before rendering (every error names the field and the fix).
//! - **Shell-quoted, not HTML-escaped.** A batch script is not HTML. The escape
//!   function is [`shell_quote`](slurm_core::shell_quote), so a plain
//!   `{{value}}` lands in a command line as exactly one word; `{{sh value}}` says
//!   the same explicitly and refuses a missing value. Values in `#SBATCH` lines go
//!   through `{{sbatch value}}` / `{{sbatch_line line}}`, which refuse anything that
//!   could end the directive line (newlines, control characters).
//! - **Logs in the reference's layout despite Slurm.** Slurm 22.05 does not create a
//!   missing folder for `--output`, so Slurm's own output goes to
//!   `<log_dir>/<job>-<id>.slurm.out|err` and the script makes
//!   `<log_dir>/<job>-<id>/` and redirects itself to `main.out` / `main.err` there.
//! - **No secret in the script.** Secrets travel in a mode-600 env sidecar the script
//!   sources and shreds on exit; [`lint_script`] refuses scripts holding a
//!   registered secret value or anything that looks like a literal credential, and
//!   runs `bash -n`; each finding names its rule (the names are in [`rules`]).
//!
//! The modules are private: [`HandlebarsRenderer`], the lint's three functions
//! ([`lint_script`] = [`scan_secrets`] + [`check_syntax`]) and [`rules`] are the whole
//! public surface.
//!
//! ```
//! use slurm_core::{Renderer, SecretRegistry, TemplateKind};
//! use slurm_render::HandlebarsRenderer;
//! # let context = include!("../tests/fixtures/example_context.rs");
//! let renderer = HandlebarsRenderer::new();
//! let script = renderer.render(TemplateKind::SingleNode, &context).unwrap();
//! assert!(script.starts_with("#!/bin/bash\n#SBATCH --job-name="));
//! renderer.lint(&script, &SecretRegistry::new()).unwrap();
//! ```
#![deny(missing_docs)]
#![deny(unreachable_pub)]

mod lint;
mod renderer;
mod syntax;
mod validate;

pub use lint::{check_syntax, lint_script, scan_secrets};
pub use renderer::HandlebarsRenderer;

pub mod rules {
    //! The rules of the lint, by the names its findings carry in
    //! [`LintFinding::rule`](slurm_core::LintFinding::rule).
    //!
    //! [`scan_secrets`](crate::scan_secrets) looks for, line by line:
    //!
    //! | rule | what |
    //! |---|---|
    //! | [`REGISTERED_SECRET`] | a value registered in the [`SecretRegistry`](slurm_core::SecretRegistry) |
    //! | [`PRIVATE_KEY`] | a `-----BEGIN … PRIVATE KEY-----` block |
    //! | [`SECRET_ASSIGNMENT`] | a secret-named variable given a literal: `X=lit`, `export X='lit'`, `-e X=lit`, `--export=ALL,X=lit`, `${X:-lit}` |
    //! | [`CREDENTIAL_FLAG`] | `--password`, `--passwd`, `--token`, `--api-key`, `--secret` with a literal |
    //! | [`LOGIN_PASSWORD`] | `-p VALUE` after `login` on a line (`docker login -u me -p …`) |
    //! | [`TOKEN_PREFIX`] | a known token shape: `nvapi-`, `hf_`, `ghp_`, `github_pat_`, `AKIA` + 16, `xox[baprs]-`, `sk-` |
    //! | [`PRESIGNED_URL`] | presigned URL parameters (`X-Amz-Signature`, `X-Amz-Credential`, `X-Amz-Security-Token`, `X-Goog-*`) |
    //! | [`URL_PASSWORD`] | a password in URL userinfo (`https://user:pw@host`) |
    //! | [`JSON_CREDENTIAL`] | a secret-named JSON key with a non-empty string value |
    //!
    //! A name is secret-named when one of its word parts (split at `_`, `-`, `.` and camel
    //! case) is SECRET, PASSWORD, PASSWD, TOKEN, CREDENTIAL or APIKEY, or two adjacent parts
    //! are API KEY, ACCESS KEY or NGC KEY: `HF_TOKEN` and `apiKey` are, `TOKENIZERS_PARALLELISM`
    //! and `max_new_tokens` are not. References (`$HF_TOKEN`, `${HF_TOKEN}`, `"$(cat f)"`),
    //! empty values, `--password-stdin`, port maps (`-p 8080:8080`) and names without a
    //! value (`--export=ALL,HF_TOKEN`) pass. [`check_syntax`](crate::check_syntax) adds [`BASH_SYNTAX`] findings.

    pub use crate::lint::{
        BASH_SYNTAX, CREDENTIAL_FLAG, JSON_CREDENTIAL, LOGIN_PASSWORD, PRESIGNED_URL, PRIVATE_KEY,
        REGISTERED_SECRET, SECRET_ASSIGNMENT, TOKEN_PREFIX, URL_PASSWORD,
    };
}
