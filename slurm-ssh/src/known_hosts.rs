//! Strict host-key checking against a known_hosts file as OpenSSH does it (patterns, hashed names, ports, `@revoked`, `@cert-authority`), with opt-in trust on first use.
//!
//! The rules, checked against OpenSSH's `ssh` on the test bed (`tests/testbed/host_keys.rs`):
//! - A host on port 22 is looked up by its name, on another port as `[host]:port`.
//!   Patterns may use `*`, `?` and `!negation`; hashed names (`|1|salt|hash`) are understood.
//! - A key that an `@revoked` line for the host lists is refused, whatever else the file
//!   says, and is never trusted on first use.
//! - A `[host]:port` entry with the key's type decides: the same key matches, another
//!   key is a changed key. Only when no such entry exists does a plain `host` entry
//!   holding the very same key match (OpenSSH: "found matching key w/out port").
//! - `@cert-authority` lines are understood but cannot be used: libssh2 does not check
//!   host certificates. A host that only a certificate authority vouches for is refused
//!   with that reason (never trusted on first use); use `OpenSshTransport` for it.
//! - Lines that cannot be read (other markers, bad base64) are skipped, as OpenSSH does.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use ssh2::{HostKeyType, Session};
use wildmatch::WildMatch;

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

/// The marker at the start of a known_hosts line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    /// A plain entry: this key is the host's.
    Plain,
    /// `@revoked`: this key must never be accepted.
    Revoked,
    /// `@cert-authority`: host certificates signed by this key are accepted.
    CertAuthority,
}

/// The host part of a line: patterns, or one hashed name.
#[derive(Debug, Clone)]
enum Hosts {
    Patterns(String),
    Hashed { salt: Vec<u8>, hash: Vec<u8> },
}

impl Hosts {
    /// Whether `name` (lower case) is one of these hosts, by OpenSSH's rules: any
    /// pattern matches and no negated one does.
    fn matches(&self, name: &str) -> bool {
        match self {
            Hosts::Hashed { salt, hash } => {
                let Ok(mut mac) = Hmac::<sha1::Sha1>::new_from_slice(salt) else {
                    return false;
                };
                mac.update(name.as_bytes());
                mac.verify_slice(hash).is_ok()
            }
            Hosts::Patterns(list) => {
                let mut found = false;
                for pattern in list.split(',') {
                    let (negated, pattern) = match pattern.strip_prefix('!') {
                        Some(p) => (true, p),
                        None => (false, pattern),
                    };
                    if WildMatch::new(&pattern.to_lowercase()).matches(name) {
                        if negated {
                            return false;
                        }
                        found = true;
                    }
                }
                found
            }
        }
    }
}

/// One readable line of a known_hosts file.
#[derive(Debug, Clone)]
struct Entry {
    /// Its line number (from 1), for messages.
    line: usize,
    marker: Marker,
    hosts: Hosts,
    key_type: String,
    key: Vec<u8>,
}

impl Entry {
    /// Parse `[@marker] hosts keytype base64 [comment]`; `None` for what OpenSSH skips.
    fn parse(line: usize, text: &str) -> Option<Entry> {
        let mut words = text.split_whitespace().peekable();
        let marker = match words.peek().copied() {
            Some("@revoked") => Marker::Revoked,
            Some("@cert-authority") => Marker::CertAuthority,
            Some(other) if other.starts_with('@') => return None,
            _ => Marker::Plain,
        };
        if marker != Marker::Plain {
            words.next();
        }
        let hosts = words.next()?;
        let key_type = words.next()?.to_string();
        let key = STANDARD.decode(words.next()?).ok()?;
        let hosts = match hosts.strip_prefix("|1|") {
            Some(hashed) => {
                let (salt, hash) = hashed.split_once('|')?;
                Hosts::Hashed {
                    salt: STANDARD.decode(salt).ok()?,
                    hash: STANDARD.decode(hash).ok()?,
                }
            }
            None => Hosts::Patterns(hosts.to_string()),
        };
        Some(Entry {
            line,
            marker,
            hosts,
            key_type,
            key,
        })
    }
}

/// What the file says about a presented key.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    /// A plain entry holds this key.
    Match,
    /// An `@revoked` line (its number) lists this key.
    Revoked(usize),
    /// An entry for the host holds another key of this type (its line number).
    Changed(usize),
    /// Only a certificate authority (its line number) vouches for the host.
    CertificateOnly(usize),
    /// The host has entries, of other key types only (their types).
    OtherTypes(Vec<String>),
    /// Nothing is known of the host.
    Unknown,
}

/// The readable entries of one known_hosts file.
#[derive(Debug, Clone)]
pub(crate) struct KnownHosts {
    path: PathBuf,
    entries: Vec<Entry>,
}

impl KnownHosts {
    /// Read the file at `path` (a missing file is an empty one).
    pub(crate) fn load(path: &Path) -> std::io::Result<Self> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e),
        };
        Ok(Self::parse(path, &text))
    }

    fn parse(path: &Path, text: &str) -> Self {
        let mut entries = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let trimmed = line.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            match Entry::parse(i + 1, trimmed) {
                Some(entry) => entries.push(entry),
                None => tracing::debug!(file = %path.display(), line = i + 1,
                    "skipped a known_hosts line that cannot be read"),
            }
        }
        KnownHosts {
            path: path.to_path_buf(),
            entries,
        }
    }

    /// The entries with `marker` for the host known as `name`.
    fn for_name<'a>(&'a self, name: &'a str, marker: Marker) -> impl Iterator<Item = &'a Entry> {
        let name = name.to_lowercase();
        self.entries
            .iter()
            .filter(move |e| e.marker == marker && e.hosts.matches(&name))
    }

    /// The names `host`:`port` is looked up by, in order: `[host]:port`, then (on a
    /// port other than 22) the plain host.
    fn names(host: &str, port: u16) -> Vec<String> {
        let mut names = vec![known_hosts_name(host, port)];
        if port != 22 {
            names.push(host.to_string());
        }
        names
    }

    /// The key types plain entries list for the host, in file order (what OpenSSH
    /// asks the server for first).
    pub(crate) fn key_types(&self, host: &str, port: u16) -> Vec<String> {
        let mut types: Vec<String> = Vec::new();
        for name in Self::names(host, port) {
            for e in self.for_name(&name, Marker::Plain) {
                if !types.contains(&e.key_type) {
                    types.push(e.key_type.clone());
                }
            }
        }
        types
    }

    fn verdict(&self, host: &str, port: u16, key_type: &str, key: &[u8]) -> Verdict {
        let names = Self::names(host, port);
        for name in &names {
            if let Some(e) = self.for_name(name, Marker::Revoked).find(|e| e.key == key) {
                return Verdict::Revoked(e.line);
            }
        }
        let primary: Vec<&Entry> = self.for_name(&names[0], Marker::Plain).collect();
        let same_type: Vec<&Entry> = primary
            .iter()
            .copied()
            .filter(|e| e.key_type == key_type)
            .collect();
        if same_type.iter().any(|e| e.key == key) {
            return Verdict::Match;
        }
        if let Some(e) = same_type.first() {
            return Verdict::Changed(e.line);
        }
        if let Some(plain) = names.get(1) {
            if self.for_name(plain, Marker::Plain).any(|e| e.key == key) {
                return Verdict::Match;
            }
        }
        if let Some(e) = names
            .iter()
            .find_map(|n| self.for_name(n, Marker::CertAuthority).next())
        {
            return Verdict::CertificateOnly(e.line);
        }
        if primary.is_empty() {
            Verdict::Unknown
        } else {
            Verdict::OtherTypes(self.key_types(host, port))
        }
    }
}

/// The host key algorithms to offer, most wanted first: those of the key types
/// known_hosts lists for the host, then the rest libssh2 `supported` (as OpenSSH does,
/// so a server with several keys shows the one that is known). `None` when nothing is known.
pub(crate) fn preferred_algorithms(
    known: &KnownHosts,
    host: &str,
    port: u16,
    supported: &[&str],
) -> Option<String> {
    let mut first: Vec<&str> = Vec::new();
    for key_type in known.key_types(host, port) {
        let algorithms: &[&str] = match key_type.as_str() {
            "ssh-rsa" => &["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"],
            _ => &[],
        };
        for alg in algorithms.iter().copied().chain([key_type.as_str()]) {
            if let Some(s) = supported.iter().find(|s| **s == alg) {
                if !first.contains(s) {
                    first.push(s);
                }
            }
        }
    }
    if first.is_empty() {
        return None;
    }
    let rest = supported.iter().filter(|s| !first.contains(s)).copied();
    Some(
        first
            .iter()
            .copied()
            .chain(rest)
            .collect::<Vec<_>>()
            .join(","),
    )
}

/// Check the key `session` presented for `host`:`port` against `known`. With
/// `trust_on_first_use`, a host that has no entry at all (and no certificate
/// authority) is added to the file; a revoked or changed key is refused all the same.
pub(crate) fn check(
    session: &Session,
    known: &KnownHosts,
    host: &str,
    port: u16,
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
    let file = known.path.display();
    let keyscan = format!("ssh-keyscan -p {port} {host} >> {file}");
    match known.verdict(host, port, key_type, key) {
        Verdict::Match => Ok(()),
        Verdict::Revoked(line) => Err(refuse(format!(
            "REVOKED HOST KEY: the server offers {key_type} {print}, which {file} line {line} marks @revoked. \
             Do not use this host until its administrators give you its new key; then remove the old entries \
             (`ssh-keygen -R '{name}' -f {file}`) and add the new key"
        ))),
        Verdict::Changed(line) => Err(refuse(format!(
            "HOST KEY CHANGED: the server offers {key_type} {print}, which does not match the key for {name} in {file} (line {line}). \
             This can be an attack, or the host was reinstalled. Verify the new fingerprint with the cluster's \
             administrators, then replace the entry: `ssh-keygen -R '{name}' -f {file}` and `{keyscan}`"
        ))),
        Verdict::CertificateOnly(line) => Err(refuse(format!(
            "{file} line {line} trusts a certificate authority (@cert-authority) for {name}, but Ssh2Transport \
             cannot check host certificates; the server offers the plain key {key_type} {print}. Verify that \
             fingerprint with the cluster's administrators and add the key (`{keyscan}`), or use OpenSshTransport, \
             whose system ssh checks host certificates"
        ))),
        Verdict::OtherTypes(types) => Err(refuse(format!(
            "unknown host key type: the server offers {key_type} {print}, and {file} lists only {} keys for {name}. \
             Verify this fingerprint with the cluster's administrators, then add the key with \
             `ssh-keyscan -t {key_type} -p {port} {host} >> {file}`",
            types.join(", ")
        ))),
        Verdict::Unknown if trust_on_first_use => {
            append(&known.path, &name, key_type, key).map_err(|e| {
                refuse(format!(
                    "trust on first use: cannot add {key_type} {print} to {file}: {e}"
                ))
            })?;
            tracing::warn!(host = %name, key_type, fingerprint = %print, file = %file,
                "trusted a new host key on first use");
            Ok(())
        }
        Verdict::Unknown => Err(refuse(format!(
            "unknown host key: the server offers {key_type} {print}, and {file} has no entry for {name}. \
             Verify this fingerprint with the cluster's administrators, then add the key with \
             `{keyscan}` (or enable trust on first use explicitly)"
        ))),
    }
}

/// Append one plain known_hosts line, creating the file with mode 0600, and starting
/// a new line first when the file does not end with one.
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
        .read(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    let mut line = format!("{name} {key_type} {}\n", STANDARD.encode(key));
    if file.seek(SeekFrom::End(0))? > 0 {
        file.seek(SeekFrom::End(-1))?;
        let mut last = [0u8; 1];
        file.read_exact(&mut last)?;
        if last[0] != b'\n' {
            line.insert(0, '\n');
        }
    }
    // Append mode: the write goes to the end whatever the position.
    file.write_all(line.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ED_KEY: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIMMeBUPN8vBtBpIjd8C5vZ2xpbYmipVoSaPZPv6pI54e";
    const OTHER_KEY: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIASB+PrRlhiftQpQzXE7BoC+45bGzy3IEdbidratggcN";
    const ED: &str = "ssh-ed25519";

    fn key(b64: &str) -> Vec<u8> {
        STANDARD.decode(b64).unwrap()
    }

    fn known(text: &str) -> KnownHosts {
        KnownHosts::parse(Path::new("kh"), text)
    }

    fn verdict(text: &str, host: &str, port: u16, b64: &str) -> Verdict {
        known(text).verdict(host, port, ED, &key(b64))
    }

    #[test]
    fn port_entries_match_only_their_port_and_plain_entries_only_the_same_key() {
        let text = format!("[127.0.0.1]:22022 {ED} {ED_KEY}\n");
        assert_eq!(verdict(&text, "127.0.0.1", 22022, ED_KEY), Verdict::Match);
        assert_eq!(verdict(&text, "127.0.0.1", 22023, ED_KEY), Verdict::Unknown);
        assert_eq!(
            verdict(&text, "127.0.0.1", 22022, OTHER_KEY),
            Verdict::Changed(1)
        );
        // A plain entry stands in for a port only with the very same key, and never
        // against a [host]:port entry that lists another.
        let plain = format!("h {ED} {ED_KEY}\n");
        assert_eq!(verdict(&plain, "h", 2222, ED_KEY), Verdict::Match);
        assert_eq!(verdict(&plain, "h", 2222, OTHER_KEY), Verdict::Unknown);
        assert_eq!(verdict(&plain, "h", 22, OTHER_KEY), Verdict::Changed(1));
        let both = format!("{plain}[h]:2222 {ED} {OTHER_KEY}\n");
        assert_eq!(verdict(&both, "h", 2222, ED_KEY), Verdict::Changed(2));
        // Other key types only.
        let rsa = "[h]:2222 ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQC7\n";
        assert_eq!(
            verdict(rsa, "h", 2222, ED_KEY),
            Verdict::OtherTypes(vec!["ssh-rsa".into()])
        );
    }

    #[test]
    fn revoked_keys_are_refused_whatever_else_matches() {
        let text = format!("[h]:2222 {ED} {ED_KEY}\n@revoked * {ED} {ED_KEY}\n");
        assert_eq!(verdict(&text, "h", 2222, ED_KEY), Verdict::Revoked(2));
        assert_eq!(verdict(&text, "h", 2222, OTHER_KEY), Verdict::Changed(1));
        // Revoked under the plain name too, and for a host with no other entry.
        let text = format!("@revoked h {ED} {ED_KEY}\n");
        assert_eq!(verdict(&text, "h", 2222, ED_KEY), Verdict::Revoked(1));
        assert_eq!(verdict(&text, "other", 22, ED_KEY), Verdict::Unknown);
    }

    #[test]
    fn certificate_authorities_are_named_when_nothing_else_vouches() {
        let text = format!("@cert-authority *.example.org {ED} {OTHER_KEY}\n");
        let v = verdict(&text, "login.example.org", 22, ED_KEY);
        assert_eq!(v, Verdict::CertificateOnly(1));
        let text = format!("{text}login.example.org {ED} {ED_KEY}\n");
        assert_eq!(
            verdict(&text, "login.example.org", 22, ED_KEY),
            Verdict::Match
        );
        // An unknown marker's line is skipped.
        assert_eq!(
            verdict(&format!("@bogus h {ED} {ED_KEY}\n"), "h", 22, ED_KEY),
            Verdict::Unknown
        );
    }

    #[test]
    fn patterns_wildcards_negation_and_case() {
        let text = format!("*.example.org,!bad.example.org {ED} {ED_KEY}\n");
        assert_eq!(
            verdict(&text, "Login.Example.ORG", 22, ED_KEY),
            Verdict::Match
        );
        assert_eq!(
            verdict(&text, "bad.example.org", 22, ED_KEY),
            Verdict::Unknown
        );
        let text = format!("[10.0.0.?]:* {ED} {ED_KEY}\n");
        assert_eq!(verdict(&text, "10.0.0.7", 2200, ED_KEY), Verdict::Match);
        assert_eq!(verdict(&text, "10.0.0.17", 2200, ED_KEY), Verdict::Unknown);
    }

    #[test]
    fn hashed_entries_are_understood() {
        // The `ssh-keygen -H` form of "login.example.org": |1|salt|hmac-sha1(salt, host).
        let salt = [7u8; 20];
        let mut mac = Hmac::<sha1::Sha1>::new_from_slice(&salt).unwrap();
        mac.update(b"login.example.org");
        let line = format!(
            "|1|{}|{} {ED} {ED_KEY}\n# a comment\n\n|1|bad {ED} {ED_KEY}\n",
            STANDARD.encode(salt),
            STANDARD.encode(mac.finalize().into_bytes())
        );
        assert_eq!(
            verdict(&line, "login.example.org", 22, ED_KEY),
            Verdict::Match
        );
        assert_eq!(
            verdict(&line, "other.example.org", 22, ED_KEY),
            Verdict::Unknown
        );
    }

    #[test]
    fn the_known_key_types_come_first_among_the_algorithms() {
        let supported = [
            "ecdsa-sha2-nistp256",
            "ssh-ed25519",
            "rsa-sha2-256",
            "ssh-rsa",
        ];
        let k = known(&format!("[h]:2 ssh-rsa {ED_KEY}\nh {ED} {ED_KEY}\n"));
        assert_eq!(
            preferred_algorithms(&k, "h", 2, &supported).as_deref(),
            Some("rsa-sha2-256,ssh-rsa,ssh-ed25519,ecdsa-sha2-nistp256")
        );
        assert_eq!(preferred_algorithms(&k, "other", 2, &supported), None);
    }

    #[test]
    fn appending_starts_a_new_line_when_the_file_lacks_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/known_hosts");
        append(&path, "a", ED, &key(ED_KEY)).unwrap();
        let first = std::fs::read_to_string(&path).unwrap();
        assert_eq!(first, format!("a {ED} {ED_KEY}\n"));
        std::fs::write(&path, first.trim_end()).unwrap();
        append(&path, "[b]:2", ED, &key(OTHER_KEY)).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("a {ED} {ED_KEY}\n[b]:2 {ED} {OTHER_KEY}\n"));
        let k = KnownHosts::load(&path).unwrap();
        assert_eq!(k.verdict("a", 22, ED, &key(ED_KEY)), Verdict::Match);
        assert_eq!(k.verdict("b", 2, ED, &key(OTHER_KEY)), Verdict::Match);
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
}
