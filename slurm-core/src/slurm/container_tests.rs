//! Unit tests of the container decisions with a mockall transport: where the registry
//! secret travels, and what a failed conversion says.

use super::images::Conversion;
use super::tests::MockRemote;
use super::{SlurmBackend, SlurmConfig};
use crate::image::ImageRef;
use crate::record::MemoryRecordStore;
use crate::redact::SecretRegistry;
use crate::render::{Renderer, ScriptContext, TemplateKind};
use crate::transport::Output;
use crate::{CheckKind, Error, Result};

#[derive(Debug)]
struct NoRenderer;

impl Renderer for NoRenderer {
    fn render(&self, _: TemplateKind, _: &ScriptContext) -> Result<String> {
        Ok(String::new())
    }
    fn lint(&self, _: &str, _: &SecretRegistry) -> Result<()> {
        Ok(())
    }
}

fn backend(remote: MockRemote) -> SlurmBackend<MockRemote, NoRenderer, MemoryRecordStore> {
    let config = SlurmConfig::builder()
        .with_partition("gpu")
        .with_results_root("/shared/results")
        .with_state_dir("/nonexistent")
        .build()
        .unwrap();
    SlurmBackend::new(remote, NoRenderer, MemoryRecordStore::new(), config)
}

fn output(status: i32, stdout: &str, stderr: &str) -> Output {
    Output {
        status,
        stdout: stdout.as_bytes().to_vec(),
        stderr: stderr.as_bytes().to_vec(),
    }
}

#[tokio::test]
async fn the_registry_secret_travels_on_stdin_only() {
    let secret = "canary-secret-7d1e";
    let mut remote = MockRemote::new();
    remote.expect_run().times(2).returning(move |command| {
        let argv = format!("{} {:?} {}", command.program(), command.get_args(), command.label());
        assert!(!argv.contains(secret), "the secret is in an argv or a label: {argv}");
        let stdin = String::from_utf8_lossy(command.stdin_bytes().unwrap_or_default()).into_owned();
        if command.get_args().iter().any(|a| a == "install") {
            assert_eq!(
                stdin,
                format!("machine nvcr.io login $oauthtoken password {secret}\nmachine authn.nvidia.com login $oauthtoken password {secret}\n")
            );
            Ok(output(0, "file /h/.credentials\n", ""))
        } else {
            assert!(stdin.is_empty());
            Ok(output(0, "file /h/.credentials\n", ""))
        }
    });
    let status = backend(remote)
        .install_credentials("nvcr.io", "$oauthtoken", secret)
        .await
        .unwrap();
    assert!(status.is_present());
    assert_eq!(status.present, ["nvcr.io", "authn.nvidia.com"]);
    assert!(!status.to_string().contains(secret));
}

#[tokio::test]
async fn secrets_enroot_cannot_hold_are_refused_naming_the_field() {
    let b = backend(MockRemote::new());
    for (user, password, field) in [
        ("u", "has space", "password"),
        ("u", "$NGC_KEY_VAR", "password"),
        ("u", "abc", "password"),
        ("", "long-enough", "user"),
        ("u", "long-enough\nmachine evil", "password"),
    ] {
        let err = b
            .install_credentials("nvcr.io", user, password)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::Invalid { field: f, .. } if f == field),
            "{user:?} {password:?}: {err}"
        );
        assert!(!err.to_string().contains(password) || password.len() < 4);
    }
}

/// enroot exits 1 with no error line when the registry refuses it: the message names
/// the registry and the check, with enroot's own lines (it said "never falls back" only).
#[tokio::test]
async fn a_silent_import_failure_names_the_registry_and_the_check() {
    let mut remote = MockRemote::new();
    remote.expect_run().returning(|_| {
        Ok(output(
            super::scripts::ConvertExit::RegistryRefused.status(),
            "",
            "[INFO] Querying registry for permission grant\n[INFO] Authenticating with user: me\n[INFO] Using credentials from file: /h/.credentials\nsrun: error: n1: task 0: Exited with exit code 1\n",
        ))
    });
    let conversion = Conversion {
        image: ImageRef::parse("registry.example.com:5000/team/img:1").unwrap(),
        path: "/shared/results/images/x.sqsh".into(),
        force: false,
    };
    let err = backend(remote)
        .convert_image(&conversion)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Preflight {
                kind: CheckKind::Credentials,
                ..
            }
        ),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("registry registry.example.com:5000 refused or was unreachable; check `credentials check registry.example.com:5000`"),
        "{text}"
    );
    assert!(
        text.contains("[INFO] Authenticating with user: me"),
        "{text}"
    );
    assert!(
        text.contains("slurmctl credentials install registry.example.com:5000"),
        "{text}"
    );
}
