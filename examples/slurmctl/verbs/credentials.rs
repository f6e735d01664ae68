//! `credentials install|check|remove`: enroot's credentials for a private registry on the cluster.

use std::io::IsTerminal;

use slurm_run::prelude::*;

use crate::args::{CredentialsCmd, Global};
use crate::connect::backend;
use crate::exit::{BAD_INPUT, OK};
use crate::json;
use crate::output::Out;
use crate::progress::Progress;

/// Install, check or remove a registry's credentials; `check` exits 2 when they are absent.
pub(crate) async fn credentials(global: &Global, action: &CredentialsCmd, out: &Out) -> Result<u8> {
    let backend = backend(global)?;
    let progress = Progress::start("credentials");
    let status = match action {
        CredentialsCmd::Install {
            registry,
            user,
            password_env,
        } => {
            let secret = read_secret(password_env.as_deref())?;
            backend.install_credentials(registry, user, &secret).await?
        }
        CredentialsCmd::Check { registry } => backend.check_credentials(registry).await?,
        CredentialsCmd::Remove { registry } => backend.remove_credentials(registry).await?,
    };
    progress.finish();
    if out.json {
        out.line(&json::credentials(&status).to_string());
    } else {
        out.line(&status.to_string());
    }
    let absent = matches!(action, CredentialsCmd::Check { .. }) && !status.is_present();
    Ok(if absent { BAD_INPUT } else { OK })
}

/// The registry secret: from the environment variable `var`, else one line on stdin
/// (never from the command line, never from a terminal: nothing would hide it).
fn read_secret(var: Option<&str>) -> Result<String> {
    let secret = match var {
        Some(var) => std::env::var(var).map_err(|_| {
            Error::config(
                var,
                format!("--password-env names {var}, which is not set; export it, or pipe the secret on stdin"),
            )
        })?,
        None => {
            let stdin = std::io::stdin();
            if stdin.is_terminal() {
                return Err(Error::invalid(
                    "password",
                    "stdin is a terminal; pipe the secret in (e.g. from a password manager) or use --password-env VAR",
                ));
            }
            let mut text = String::new();
            std::io::Read::read_to_string(&mut stdin.lock(), &mut text)
                .map_err(|e| Error::io("reading the secret from stdin", e))?;
            text
        }
    };
    let secret = secret
        .strip_suffix('\n')
        .map(|s| s.strip_suffix('\r').unwrap_or(s))
        .unwrap_or(&secret);
    if secret.is_empty() || secret.contains('\n') {
        return Err(Error::invalid(
            "password",
            "give exactly one non-empty line (stdin or --password-env)",
        ));
    }
    Ok(secret.to_string())
}
