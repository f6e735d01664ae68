//! Sending a code tree against a mock cluster: only the missing objects travel, a
//! tree this backend made is not asked about again, a damaged object is an error.
use std::io::Read;
use std::sync::{Arc, Mutex};

use super::code::send_code;
use crate::code::snapshot;
use crate::slurm::testkit::{backend, MockRemote};
use crate::spec::CodeSpec;
use crate::storage::RemotePath;
use crate::transport::Output;

fn ok(stdout: &str) -> crate::Result<Output> {
    Ok(Output {
        status: 0,
        stdout: stdout.as_bytes().to_vec(),
        stderr: Vec::new(),
    })
}

/// The entry names of a tar archive.
fn entries(archive: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    for entry in tar::Archive::new(archive).entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().display().to_string();
        let mut body = Vec::new();
        entry.read_to_end(&mut body).unwrap();
        names.push(name);
    }
    names
}

/// One code-put the mock saw: its arguments and its archive's entries.
type Put = (Vec<String>, Vec<String>);

fn tree() -> (tempfile::TempDir, crate::code::CodeTree) {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [("a.py", "a\n"), ("b.py", "b\n"), ("c.py", "c\n")] {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let tree = snapshot(&CodeSpec::new(dir.path().display().to_string()), 1 << 20).unwrap();
    (dir, tree)
}

#[tokio::test]
async fn only_the_missing_objects_travel_and_a_made_tree_is_not_asked_about_again() {
    let (_dir, tree) = tree();
    let lacking = tree.objects[1].name.clone();
    let put: Arc<Mutex<Vec<Put>>> = Arc::default();
    let seen = Arc::clone(&put);
    let mut remote = MockRemote::new();
    let answer = format!("{lacking}\n");
    remote
        .expect_run()
        .withf(|c| c.label() == "code-missing")
        .times(1)
        .returning(move |c| {
            // Every object is asked about, by name, on stdin.
            assert_eq!(
                String::from_utf8_lossy(c.stdin_bytes().unwrap())
                    .lines()
                    .count(),
                3
            );
            ok(&answer)
        });
    remote
        .expect_run()
        .withf(|c| c.label() == "code-put")
        .times(1)
        .returning(move |c| {
            let args = c.get_args().to_vec();
            seen.lock()
                .unwrap()
                .push((args, entries(c.stdin_bytes().unwrap())));
            ok("")
        });
    let b = backend(remote);
    let root = RemotePath::parse("/shared/results").unwrap();
    let staged = send_code(&b.context(), &tree, &root).await.unwrap();
    assert_eq!(
        staged.dir.as_str(),
        format!("/shared/results/.code/trees/{}", tree.id)
    );
    assert!(
        staged.note.contains("1 of 3 files sent (2 bytes)"),
        "{}",
        staged.note
    );
    let put = put.lock().unwrap().clone();
    let (args, names) = &put[0];
    assert!(
        args.ends_with(&[
            "/shared/results/.code".into(),
            tree.id.clone(),
            "tree".into()
        ]),
        "{args:?}"
    );
    assert_eq!(
        names,
        &[format!("objects/{lacking}"), "manifest".to_string()]
    );
    // The same tree again from this backend: no round trip (the mock allows one of each).
    let again = send_code(&b.context(), &tree, &root).await.unwrap();
    assert_eq!(again.dir, staged.dir);
    assert!(again.note.contains("already on the cluster"));
}

#[tokio::test]
async fn a_whole_tree_sends_nothing_and_a_damaged_object_is_an_error() {
    let (_dir, tree) = tree();
    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(|c| c.label() == "code-missing")
        .times(1)
        .returning(|_| ok("tree present\n"));
    let b = backend(remote);
    let root = RemotePath::parse("/shared/results").unwrap();
    let staged = send_code(&b.context(), &tree, &root).await.unwrap();
    assert!(
        staged.note.contains("already on the cluster (3 files)"),
        "{}",
        staged.note
    );

    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(|c| c.label() == "code-missing")
        .returning(|c| ok(&String::from_utf8_lossy(c.stdin_bytes().unwrap())));
    remote
        .expect_run()
        .withf(|c| c.label() == "code-put")
        .returning(|_| {
            Ok(Output {
                status: 65,
                stdout: Vec::new(),
                stderr: b"sha256sum: WARNING: 1 computed checksum did NOT match".to_vec(),
            })
        });
    let b = backend(remote);
    let err = send_code(&b.context(), &tree, &root).await.unwrap_err();
    assert!(err.to_string().contains("arrived damaged"), "{err}");
    assert!(err.is_transient());
}
