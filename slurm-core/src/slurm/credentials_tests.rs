//! Where the registry secret travels, and which secrets enroot cannot hold.

use super::testkit::{output, unprepared_backend as backend, MockRemote};
use crate::Error;

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
