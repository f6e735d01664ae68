//! Host keys as OpenSSH treats them: for each known_hosts file, `Ssh2Transport` and the
//! system `ssh` (OpenSSH, strict checking) give the same verdict on the test bed's sshd;
//! revoked keys are never pinned on first use; appending keeps the previous entry whole.

use std::path::Path;
use std::process::Stdio;

use slurm_core::{Command, ErrorKind, Transport};
use slurm_run_testsupport::transports::ssh2_builder as builder;
use slurm_run_testsupport::{cluster, testbed_env, Testbed};
use slurm_ssh::Ssh2Transport;

/// An ed25519 key that is not the test bed's.
const OTHER_ED25519: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIASB+PrRlhiftQpQzXE7BoC+45bGzy3IEdbidratggcN";

/// The test bed's host keys as `TYPE BASE64`: (ed25519, rsa).
fn real_keys(tb: &Testbed) -> (String, String) {
    let text = std::fs::read_to_string(tb.get("SSH_KNOWN_HOSTS")).unwrap();
    let key = |kind: &str| {
        text.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(kind))
            .map(|l| {
                l.split_whitespace()
                    .skip(1)
                    .take(2)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_else(|| panic!("no {kind} key in the test bed's known_hosts"))
    };
    (key("ssh-ed25519"), key("ssh-rsa"))
}

/// Whether `ssh` (OpenSSH, StrictHostKeyChecking=yes) accepts the host with `known_hosts`.
fn openssh_accepts(tb: &Testbed, known_hosts: &Path) -> (bool, String) {
    let out = std::process::Command::new("ssh")
        .args(["-F", "/dev/null", "-o", "BatchMode=yes"])
        .args(["-o", "StrictHostKeyChecking=yes", "-o", "UpdateHostKeys=no"])
        .args([
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "CheckHostIP=no",
        ])
        .arg("-o")
        .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
        .args(["-o", "IdentitiesOnly=yes", "-i", tb.get("SSH_KEY_PATH")])
        .args(["-p", &tb.ssh_port().to_string(), "-l", tb.get("SLURM_USER")])
        .args(["127.0.0.1", "true"])
        .stdin(Stdio::null())
        .output()
        .expect("run ssh");
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.success(), said)
}

/// Whether `Ssh2Transport` accepts the host with `known_hosts`; the refusal's text.
async fn ssh2_accepts(tb: &Testbed, known_hosts: &Path, tofu: bool) -> (bool, String) {
    let t = Ssh2Transport::new(
        builder(tb)
            .with_sessions(1)
            .with_known_hosts(known_hosts)
            .with_trust_on_first_use(tofu),
    )
    .unwrap();
    match t.run(&Command::new("true")).await {
        Ok(out) => {
            assert_eq!(out.status, 0);
            (true, String::new())
        }
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::HostKey, "{e}");
            assert!(!e.is_transient() && !e.may_have_run(), "{e}");
            (false, e.to_string())
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh2_and_openssh_agree_on_every_known_hosts_file() {
    let _cluster = cluster::shared().await;
    let tb = testbed_env();
    let (ed, rsa) = real_keys(&tb);
    let port = tb.ssh_port();
    let at = format!("[127.0.0.1]:{port}");
    let dir = tempfile::tempdir().unwrap();
    // Each case: what it shows, the file, whether OpenSSH accepts, and a word the
    // refusal of Ssh2Transport names.
    let hashed = {
        let path = dir.path().join("to_hash");
        std::fs::write(&path, format!("{at} {ed}\n{at} {rsa}\n")).unwrap();
        let status = std::process::Command::new("ssh-keygen")
            .args(["-q", "-H", "-f"])
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        std::fs::read_to_string(&path).unwrap()
    };
    assert!(hashed.starts_with("|1|"), "{hashed}");
    let cases: Vec<(&str, String, bool, &str)> = vec![
        ("[host]:port entries", format!("{at} {ed}\n{at} {rsa}\n"), true, ""),
        ("hashed entries", hashed, true, ""),
        (
            "a wildcard pattern",
            format!("[127.0.0.*]:{port} {ed}\n[127.0.0.*]:{port} {rsa}\n"),
            true,
            "",
        ),
        ("only the rsa key listed", format!("{at} {rsa}\n"), true, ""),
        (
            "a plain host entry with the same key stands in for the port",
            format!("127.0.0.1 {ed}\n127.0.0.1 {rsa}\n"),
            true,
            "",
        ),
        (
            "a plain host entry with another key does not",
            format!("127.0.0.1 {OTHER_ED25519}\n"),
            false,
            "unknown host key",
        ),
        (
            "a key revoked under the plain name",
            format!("127.0.0.1 {ed}\n127.0.0.1 {rsa}\n@revoked 127.0.0.1 {ed}\n@revoked 127.0.0.1 {rsa}\n"),
            false,
            "REVOKED",
        ),
        (
            "a plain entry matches but [host]:port lists another key",
            format!("127.0.0.1 {ed}\n127.0.0.1 {rsa}\n{at} {OTHER_ED25519}\n"),
            false,
            "CHANGED",
        ),
        (
            "a negated pattern",
            format!(
                "[127.0.0.*]:{port},!{at} {ed}\n[127.0.0.*]:{port},!{at} {rsa}\n"
            ),
            false,
            "unknown host key",
        ),
        (
            "revoked keys",
            format!("{at} {ed}\n{at} {rsa}\n@revoked * {ed}\n@revoked * {rsa}\n"),
            false,
            "REVOKED",
        ),
        (
            "only a certificate authority",
            format!("@cert-authority {at} {OTHER_ED25519}\n"),
            false,
            "certificate",
        ),
        (
            "another key of the same type",
            format!("{at} {OTHER_ED25519}\n"),
            false,
            "CHANGED",
        ),
    ];
    let mut disagreements = Vec::new();
    for (i, (what, text, accepted, word)) in cases.iter().enumerate() {
        let kh = dir.path().join(format!("known_hosts_{i}"));
        std::fs::write(&kh, text).unwrap();
        let (openssh, openssh_said) = openssh_accepts(&tb, &kh);
        assert_eq!(
            openssh, *accepted,
            "{what}: OpenSSH's verdict is not what this test expects: {openssh_said}"
        );
        let (ours, said) = ssh2_accepts(&tb, &kh, false).await;
        if ours != openssh || (!ours && !said.contains(word)) {
            disagreements.push(format!(
                "{what}: OpenSSH {}, Ssh2Transport {} ({said})",
                if openssh { "accepts" } else { "refuses" },
                if ours { "accepts" } else { "refuses" },
            ));
        }
        if !ours {
            for part in ["ssh-", "SHA256:"] {
                assert!(
                    said.contains(part),
                    "{what}: the refusal names {part}: {said}"
                );
            }
        }
        assert_eq!(
            std::fs::read_to_string(&kh).unwrap(),
            *text,
            "{what}: the file was changed"
        );
    }
    assert!(disagreements.is_empty(), "{disagreements:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_on_first_use_never_pins_a_revoked_key_or_a_host_under_a_certificate_authority() {
    let _cluster = cluster::shared().await;
    let tb = testbed_env();
    let (ed, rsa) = real_keys(&tb);
    let dir = tempfile::tempdir().unwrap();
    for (what, text, word) in [
        (
            "revoked",
            format!("@revoked * {ed}\n@revoked * {rsa}\n"),
            "REVOKED",
        ),
        (
            "certificate authority",
            format!("@cert-authority [127.0.0.1]:* {OTHER_ED25519}\n"),
            "certificate",
        ),
    ] {
        let kh = dir.path().join(what.replace(' ', "_"));
        std::fs::write(&kh, &text).unwrap();
        let (accepted, said) = ssh2_accepts(&tb, &kh, true).await;
        assert!(!accepted, "{what}: trusted on first use");
        assert!(said.contains(word), "{what}: {said}");
        assert_eq!(
            std::fs::read_to_string(&kh).unwrap(),
            text,
            "{what}: pinned"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_on_first_use_appends_after_an_entry_without_a_final_newline() {
    let _cluster = cluster::shared().await;
    let tb = testbed_env();
    let dir = tempfile::tempdir().unwrap();
    let kh = dir.path().join("known_hosts");
    let previous = format!("other.example.org {OTHER_ED25519}");
    std::fs::write(&kh, &previous).unwrap();
    let (accepted, said) = ssh2_accepts(&tb, &kh, true).await;
    assert!(accepted, "{said}");
    let text = std::fs::read_to_string(&kh).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0], previous, "the previous entry is intact");
    assert!(
        lines[1].starts_with(&format!("[127.0.0.1]:{} ssh-", tb.ssh_port())),
        "{text}"
    );
    assert!(text.ends_with('\n'));
    // The pinned key is now known, to us and to OpenSSH.
    assert!(ssh2_accepts(&tb, &kh, false).await.0);
    let (openssh, said) = openssh_accepts(&tb, &kh);
    assert!(openssh, "{said}");
}
