//! enroot's registry credentials on the cluster (`~/.config/enroot/.credentials`, netrc
//! lines): install once per cluster and user (the secret on stdin only, merged under
//! `umask 077`), check without reading the secret back, remove.

use std::fmt;

use serde::Serialize;

use super::context::Context;
use super::scripts::{CREDENTIALS, ENROOT};
use crate::redact::{SecretRegistry, MIN_SECRET_LEN};
use crate::transport::{Command, Output};
use crate::{Error, Result};

/// The machine NGC's token service authenticates on, beside `nvcr.io`.
const NGC_AUTH_MACHINE: &str = "authn.nvidia.com";

/// The netrc machines enroot looks up for images of `registry` (`host` or `host:port`):
/// the host without its port (enroot matches it so), and for `nvcr.io` also
/// `authn.nvidia.com` (NGC's form needs both lines).
///
/// ```
/// use slurm_core::credential_machines;
/// assert_eq!(credential_machines("127.0.0.1:5000").unwrap(), ["127.0.0.1"]);
/// assert_eq!(credential_machines("nvcr.io").unwrap(), ["nvcr.io", "authn.nvidia.com"]);
/// assert!(credential_machines("bad host").is_err());
/// ```
pub fn credential_machines(registry: &str) -> Result<Vec<String>> {
    let (host, port) = match registry.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (registry, None),
    };
    let host_ok = !host.is_empty()
        && !host.starts_with(['-', '.'])
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
    let port_ok = port.is_none_or(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()));
    if !host_ok || !port_ok {
        return Err(Error::invalid(
            "registry",
            format!("`{registry}` is not a registry host; give it as the image names it, e.g. nvcr.io or registry.example.com:5000"),
        ));
    }
    let host = host.to_ascii_lowercase();
    let mut machines = vec![host.clone()];
    if host == "nvcr.io" {
        machines.push(NGC_AUTH_MACHINE.to_string());
    }
    Ok(machines)
}

/// Whether the cluster holds enroot credentials for a registry (never the secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CredentialsStatus {
    /// The registry as asked (`nvcr.io`, `host:port`).
    pub registry: String,
    /// enroot's credentials file on the cluster.
    pub file: String,
    /// The machines that have a line.
    pub present: Vec<String>,
    /// The machines that have none.
    pub missing: Vec<String>,
}

impl CredentialsStatus {
    /// Whether every machine the registry needs has a line.
    pub fn is_present(&self) -> bool {
        self.missing.is_empty()
    }

    pub(super) fn from_enroot_output(registry: &str, machines: &[String], output: &Output) -> Self {
        let text = output.stdout_text();
        let file = text
            .lines()
            .find_map(|l| l.strip_prefix("file "))
            .unwrap_or_default()
            .to_string();
        let missing: Vec<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("missing "))
            .map(str::to_string)
            .collect();
        CredentialsStatus {
            registry: registry.to_string(),
            file,
            present: machines
                .iter()
                .filter(|m| !missing.contains(m))
                .cloned()
                .collect(),
            missing,
        }
    }
}

impl fmt::Display for CredentialsStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_present() {
            write!(
                f,
                "credentials for {} present in {} ({})",
                self.registry,
                self.file,
                self.present.join(", ")
            )
        } else {
            write!(
                f,
                "credentials for {} absent from {} (no line for {})",
                self.registry,
                self.file,
                self.missing.join(", ")
            )
        }
    }
}

/// The command that installs credentials for `registry`: what the remedies print.
pub(crate) fn install_hint(registry: &str) -> String {
    format!("slurmctl credentials install {registry} --user USER (the secret on stdin or --password-env VAR), or SlurmBackend::install_credentials")
}

/// Refuse a login or secret enroot's netrc lines cannot hold as they are.
fn check_netrc_word(field: &str, value: &str) -> Result<()> {
    if value.is_empty() || value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::invalid(
            field,
            "is empty or holds whitespace or control characters; enroot's netrc lines cannot hold it",
        ));
    }
    Ok(())
}

/// Install enroot credentials for `registry` (`host` or `host:port`) as `user` on the
/// cluster, once per cluster and user: the lines of its machines
/// ([`credential_machines`]) replace any earlier ones, every other line is kept,
/// under `umask 077` (mode 600). `password` travels on the command's stdin only:
/// never in an argv, a log, a record or an error.
pub(super) async fn install_credentials(
    ctx: &Context<'_>,
    registry: &str,
    user: &str,
    password: &str,
) -> Result<CredentialsStatus> {
    let machines = credential_machines(registry)?;
    check_netrc_word("user", user)?;
    check_netrc_word("password", password)?;
    if password.starts_with('$') {
        return Err(Error::invalid(
            "password",
            "starts with `$`, which enroot evaluates as a shell expression; give the secret itself",
        ));
    }
    let mut secrets = SecretRegistry::new();
    if !secrets.register("password", password) {
        return Err(Error::invalid(
            "password",
            format!(
                "shorter than {MIN_SECRET_LEN} characters, too short to keep out of logs safely"
            ),
        ));
    }
    let lines: String = machines
        .iter()
        .map(|m| format!("machine {m} login {user} password {password}\n"))
        .collect();
    let command = CREDENTIALS
        .command(std::iter::once("install".to_string()).chain(machines.iter().cloned()))
        .stdin(lines.into_bytes())
        .display_as(format!("credentials install {registry}"));
    run_credentials(ctx, &command, &secrets).await?;
    check_credentials(ctx, registry).await
}

/// Remove the credential lines of `registry`'s machines, keeping every other line.
pub(super) async fn remove_credentials(
    ctx: &Context<'_>,
    registry: &str,
) -> Result<CredentialsStatus> {
    let machines = credential_machines(registry)?;
    let command = CREDENTIALS
        .command(std::iter::once("remove".to_string()).chain(machines.iter().cloned()))
        .display_as(format!("credentials remove {registry}"));
    run_credentials(ctx, &command, &SecretRegistry::new()).await?;
    check_credentials(ctx, registry).await
}

/// Whether the cluster holds credentials for `registry`, without reading the secret back.
pub(super) async fn check_credentials(
    ctx: &Context<'_>,
    registry: &str,
) -> Result<CredentialsStatus> {
    let machines = credential_machines(registry)?;
    let output = ctx
        .transport()
        .run(&ENROOT.command(machines.clone()))
        .await?;
    Ok(CredentialsStatus::from_enroot_output(
        registry, &machines, &output,
    ))
}

async fn run_credentials(
    ctx: &Context<'_>,
    command: &Command,
    secrets: &SecretRegistry,
) -> Result<()> {
    let output = ctx.transport().run(command).await?;
    if !output.success() {
        return Err(Error::Remote {
            command: command.label(),
            status: output.status,
            stderr: secrets.redact(output.stderr_text().trim()),
            transient: false,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machines_drop_the_port_and_ngc_needs_two() {
        assert_eq!(
            credential_machines("Registry.Example.com:5000").unwrap(),
            ["registry.example.com"]
        );
        assert_eq!(credential_machines("localhost").unwrap(), ["localhost"]);
        assert_eq!(
            credential_machines("nvcr.io:443").unwrap(),
            ["nvcr.io", "authn.nvidia.com"]
        );
        for bad in ["", ":5000", "a b", "host:", "host:x1", "-x", "a;b", "a/b"] {
            let err = credential_machines(bad).unwrap_err();
            assert!(err.to_string().contains("registry"), "{bad}: {err}");
        }
    }

    #[test]
    fn status_reads_the_script_lines() {
        let output = Output {
            status: 0,
            stdout: b"file /home/u/.config/enroot/.credentials\nmissing authn.nvidia.com\n"
                .to_vec(),
            stderr: Vec::new(),
        };
        let machines = credential_machines("nvcr.io").unwrap();
        let status = CredentialsStatus::from_enroot_output("nvcr.io", &machines, &output);
        assert!(!status.is_present());
        assert_eq!(status.present, ["nvcr.io"]);
        assert_eq!(status.missing, ["authn.nvidia.com"]);
        assert!(status.to_string().contains("no line for authn.nvidia.com"));
    }

    /// The merge keeps other registries' lines, replaces this registry's, writes both NGC
    /// lines, mode 600 (the old remedy wrote only `nvcr.io`, with `cat >` over the file).
    #[test]
    fn install_merges_under_umask_077_and_remove_keeps_the_others() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(".credentials");
        std::fs::write(&file, "machine other.example login o password keep-me\nmachine nvcr.io login old password stale\n").unwrap();
        let run = |args: &[&str], stdin: &str| {
            let command = CREDENTIALS.command(args.iter().copied());
            let mut child = std::process::Command::new(command.program())
                .args(command.get_args())
                .env("ENROOT_CONFIG_PATH", dir.path())
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            std::io::Write::write_all(&mut child.stdin.take().unwrap(), stdin.as_bytes()).unwrap();
            assert!(child.wait_with_output().unwrap().status.success());
        };
        let machines = credential_machines("nvcr.io").unwrap();
        let lines: String = machines
            .iter()
            .map(|m| format!("machine {m} login $oauthtoken password nvapi-new\n"))
            .collect();
        let mut args = vec!["install"];
        args.extend(machines.iter().map(String::as_str));
        run(&args, &lines);
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(
            text,
            "machine other.example login o password keep-me\nmachine nvcr.io login $oauthtoken password nvapi-new\nmachine authn.nvidia.com login $oauthtoken password nvapi-new\n"
        );
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );
        run(&["remove", "nvcr.io", "authn.nvidia.com"], "");
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "machine other.example login o password keep-me\n"
        );
    }

    #[test]
    fn netrc_words_are_checked() {
        assert!(check_netrc_word("user", "$oauthtoken").is_ok());
        assert!(check_netrc_word("password", "two words").is_err());
        assert!(check_netrc_word("password", "").is_err());
        assert!(check_netrc_word("password", "line\nbreak").is_err());
    }
}
