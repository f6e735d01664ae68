//! What a failed conversion says.

use super::images::{convert_image, Conversion};
use super::testkit::{output, unprepared_backend as backend, MockRemote};
use crate::image::ImageRef;
use crate::{CheckKind, Error};

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
    let backend = backend(remote);
    let err = convert_image(&backend.context(), &conversion)
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
