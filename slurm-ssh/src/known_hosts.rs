//! Strict host-key checking against a known_hosts file (hashed and `[host]:port` entries), with opt-in trust on first use.

use std::io::Write;
use std::path::Path;

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use base64::Engine;
use sha2::{Digest, Sha256};
use ssh2::{CheckResult, HostKeyType, KnownHostFileKind, KnownHosts, Session};

/// Why a host key was refused (the message names host, key type, fingerprint and the fix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostKeyRefusal {
    /// The host as known_hosts names it (`host` or `[host]:port`).
    pub(crate) host: String,
    /// What is wrong and what to do.
    pub(crate) message: String,
}

/// The OpenSSH name of a host key type.
pub(crate) fn key_type_name(kind: HostKeyType) -> &'static str {
    match kind {
        HostKeyType::Rsa => "ssh-rsa",
        HostKeyType::Dss => "ssh-dss",
        HostKeyType::Ecdsa256 => "ecdsa-sha2-nistp256",
        HostKeyType::Ecdsa384 => "ecdsa-sha2-nistp384",
        HostKeyType::Ecdsa521 => "ecdsa-sha2-nistp521",
        HostKeyType::Ed25519 => "ssh-ed25519",
        HostKeyType::Unknown => "unknown",
    }
}

/// The OpenSSH fingerprint of a key blob: `SHA256:` and unpadded base64.
pub(crate) fn fingerprint(key: &[u8]) -> String {
    format!("SHA256:{}", STANDARD_NO_PAD.encode(Sha256::digest(key)))
}

/// How known_hosts names a host on a port: plain for 22, else `[host]:port`.
pub(crate) fn known_hosts_name(host: &str, port: u16) -> String {
    if port == 22 {
        host.to_string()
    } else {
        format!("[{host}]:{port}")
    }
}

/// Load a known_hosts file line by line, skipping lines libssh2 cannot read (e.g.
/// `@cert-authority` or key types it does not know) instead of failing the whole file.
/// A missing file is an empty one.
pub(crate) fn load(known_hosts: &mut KnownHosts, path: &Path) -> std::io::Result<usize> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut loaded = 0;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        match known_hosts.read_str(trimmed, KnownHostFileKind::OpenSSH) {
            Ok(()) => loaded += 1,
            Err(e) => tracing::debug!(error = %e, "skipped a known_hosts line libssh2 cannot read"),
        }
    }
    Ok(loaded)
}

/// Check the key `session` presented for `host`:`port` against the file at `path`.
/// With `trust_on_first_use`, a host that has no entry at all is added (a changed
/// key is refused all the same).
pub(crate) fn check(
    session: &Session,
    host: &str,
    port: u16,
    path: &Path,
    trust_on_first_use: bool,
) -> Result<(), HostKeyRefusal> {
    let name = known_hosts_name(host, port);
    let refuse = |message: String| HostKeyRefusal {
        host: name.clone(),
        message,
    };
    let Some((key, kind)) = session.host_key() else {
        return Err(refuse("the server presented no host key".into()));
    };
    let key_type = key_type_name(kind);
    let print = fingerprint(key);
    let mut known = session
        .known_hosts()
        .map_err(|e| refuse(format!("cannot initialise known_hosts checking: {e}")))?;
    load(&mut known, path).map_err(|e| {
        refuse(format!(
            "cannot read known_hosts file {}: {e}",
            path.display()
        ))
    })?;
    let file = path.display();
    match known.check_port(host, port, key) {
        CheckResult::Match => Ok(()),
        CheckResult::NotFound if trust_on_first_use => {
            append(path, &name, key_type, key).map_err(|e| {
                refuse(format!(
                    "trust on first use: cannot add {key_type} {print} to {file}: {e}"
                ))
            })?;
            tracing::warn!(host = %name, key_type, fingerprint = %print, file = %file,
                "trusted a new host key on first use");
            Ok(())
        }
        CheckResult::NotFound => Err(refuse(format!(
            "unknown host key: the server offers {key_type} {print}, and {file} has no entry for {name}. \
             Verify this fingerprint with the cluster's administrators, then add the key with \
             `ssh-keyscan -p {port} {host} >> {file}` (or enable trust on first use explicitly)"
        ))),
        CheckResult::Mismatch => Err(refuse(format!(
            "HOST KEY CHANGED: the server offers {key_type} {print}, which does not match the key for {name} in {file}. \
             This can be an attack, or the host was reinstalled. Verify the new fingerprint with the cluster's \
             administrators, then replace the entry: `ssh-keygen -R '{name}' -f {file}` and \
             `ssh-keyscan -p {port} {host} >> {file}`"
        ))),
        CheckResult::Failure => Err(refuse(format!(
            "known_hosts check failed for {key_type} {print} against {file}"
        ))),
    }
}

/// Append one plain known_hosts line, creating the file with mode 0600.
fn append(path: &Path, name: &str, key_type: &str, key: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() && !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    writeln!(file, "{name} {key_type} {}", STANDARD.encode(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ED_KEY: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIMMeBUPN8vBtBpIjd8C5vZ2xpbYmipVoSaPZPv6pI54e";
    const OTHER_KEY: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIASB+PrRlhiftQpQzXE7BoC+45bGzy3IEdbidratggcN";

    fn key(b64: &str) -> Vec<u8> {
        STANDARD.decode(b64).unwrap()
    }

    fn known_with(lines: &str) -> (KnownHosts, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("known_hosts");
        std::fs::write(&path, lines).unwrap();
        let session = Session::new().unwrap();
        let mut known = session.known_hosts().unwrap();
        load(&mut known, &path).unwrap();
        (known, dir)
    }

    #[test]
    fn port_entries_match_only_their_port() {
        let (known, _d) = known_with(&format!("[127.0.0.1]:22022 ssh-ed25519 {ED_KEY}\n"));
        let k = key(ED_KEY);
        assert!(matches!(
            known.check_port("127.0.0.1", 22022, &k),
            CheckResult::Match
        ));
        assert!(matches!(
            known.check_port("127.0.0.1", 22023, &k),
            CheckResult::NotFound
        ));
        assert!(matches!(
            known.check_port("127.0.0.1", 22022, &key(OTHER_KEY)),
            CheckResult::Mismatch
        ));
    }

    #[test]
    fn hashed_entries_are_understood() {
        // `ssh-keygen -H` form of "login.example.org": |1|salt|hmac-sha1(salt, host).
        use hmac_sha1::hmac;
        let salt = [7u8; 20];
        let mac = hmac(&salt, b"login.example.org");
        let line = format!(
            "|1|{}|{} ssh-ed25519 {ED_KEY}\n# a comment\n@cert-authority *.x ssh-ed25519 {OTHER_KEY}\n",
            STANDARD.encode(salt),
            STANDARD.encode(mac)
        );
        let (known, _d) = known_with(&line);
        let k = key(ED_KEY);
        assert!(matches!(
            known.check_port("login.example.org", 22, &k),
            CheckResult::Match
        ));
        assert!(matches!(
            known.check_port("other.example.org", 22, &k),
            CheckResult::NotFound
        ));
    }

    #[test]
    fn fingerprint_matches_openssh_format() {
        // `ssh-keygen -lf` of the test key above prints this fingerprint.
        assert_eq!(
            fingerprint(&key(ED_KEY)),
            "SHA256:FfzcTPSg1kLNAkxGPPPSEGAddI3FU5VY8gBjWzhN4K4"
        );
        assert_eq!(known_hosts_name("h", 22), "h");
        assert_eq!(known_hosts_name("h", 2222), "[h]:2222");
    }

    mod hmac_sha1 {
        //! HMAC-SHA1 for building a hashed known_hosts line in the test (RFC 2104).
        pub(super) fn hmac(key: &[u8; 20], message: &[u8]) -> [u8; 20] {
            let mut k = [0u8; 64];
            k[..20].copy_from_slice(key);
            let inner: Vec<u8> = k
                .iter()
                .map(|b| b ^ 0x36)
                .chain(message.iter().copied())
                .collect();
            let inner_hash = super::sha1(&inner);
            let outer: Vec<u8> = k.iter().map(|b| b ^ 0x5c).chain(inner_hash).collect();
            super::sha1(&outer)
        }
    }

    /// SHA-1 via the system `sha1sum`, to avoid a dependency for one test.
    fn sha1(data: &[u8]) -> [u8; 20] {
        use std::process::{Command, Stdio};
        let mut child = Command::new("sha1sum")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(data).unwrap();
        let out = child.wait_with_output().unwrap();
        let hex_text = String::from_utf8(out.stdout).unwrap();
        let bytes = hex::decode(&hex_text[..40]).unwrap();
        bytes.try_into().unwrap()
    }
}
