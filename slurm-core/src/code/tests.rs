use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use super::*;

fn write(dir: &Path, path: &str, text: &str) {
    let path = dir.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&ok.stderr)
    );
}

fn spec(dir: &Path) -> CodeSpec {
    CodeSpec::new(dir.display().to_string())
}

fn paths(tree: &CodeTree) -> Vec<&str> {
    tree.manifest
        .lines()
        .map(|l| l.split_once(' ').unwrap().1)
        .collect()
}

#[test]
fn a_plain_directory_is_sent_whole_each_content_once() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "train.py", "print('hi')\n");
    write(dir.path(), "copy/train.py", "print('hi')\n");
    write(dir.path(), ".hidden", "kept\n");
    write(dir.path(), "run.sh", "#!/bin/sh\n");
    std::fs::set_permissions(
        dir.path().join("run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    write(dir.path(), "big.ckpt", "weights");
    let mut s = spec(dir.path());
    s.exclude.push("*.ckpt".into());
    let tree = snapshot(&s, DEFAULT_CODE_LIMIT).unwrap();
    assert_eq!(
        paths(&tree),
        [".hidden", "copy/train.py", "run.sh", "train.py"]
    );
    assert_eq!(tree.files, 4);
    assert_eq!(tree.objects.len(), 3, "one object for the two equal files");
    assert!(
        tree.objects
            .iter()
            .any(|o| o.name.ends_with('x') && o.name.len() == 65),
        "{:?}",
        tree.objects
    );
    assert_eq!(tree.commit, None);
    assert_eq!(
        snapshot(&s, DEFAULT_CODE_LIMIT).unwrap().id,
        tree.id,
        "the same files, the same id"
    );
    write(dir.path(), "train.py", "print('changed')\n");
    assert_ne!(snapshot(&s, DEFAULT_CODE_LIMIT).unwrap().id, tree.id);
}

#[test]
fn in_a_git_work_tree_ignored_files_stay_out_and_a_dirty_tree_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    git(d, &["init", "-q"]);
    write(d, ".gitignore", "*.log\nout/\n");
    write(d, "train.py", "print(1)\n");
    write(d, "debug.log", "noise\n");
    write(d, "out/model.bin", "weights\n");
    git(d, &["add", "."]);
    git(d, &["commit", "-qm", "first"]);
    let tree = snapshot(&spec(d), DEFAULT_CODE_LIMIT).unwrap();
    assert_eq!(paths(&tree), [".gitignore", "train.py"]);
    let head = Command::new("git")
        .arg("-C")
        .arg(d)
        .args(["rev-parse", "HEAD"])
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
    assert_eq!(tree.commit.as_deref(), Some(head.as_str()));

    write(d, "train.py", "print(2)\n");
    let err = snapshot(&spec(d), DEFAULT_CODE_LIMIT).unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::Invalid);
    assert!(err.to_string().contains("uncommitted changes"), "{err}");
    assert!(err.to_string().contains("allow_dirty: true"), "{err}");
    let mut dirty = spec(d);
    dirty.allow_dirty = true;
    let tree = snapshot(&dirty, DEFAULT_CODE_LIMIT).unwrap();
    assert_eq!(tree.commit, Some(format!("{head}-dirty")));
}

#[test]
fn symlinks_and_trees_above_the_limit_are_refused_naming_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "data.bin", &"x".repeat(2048));
    let err = snapshot(&spec(dir.path()), 1024).unwrap_err();
    assert!(err.to_string().contains("shared storage"), "{err}");
    std::os::unix::fs::symlink("data.bin", dir.path().join("link")).unwrap();
    let err = snapshot(&spec(dir.path()), DEFAULT_CODE_LIMIT).unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert!(err.to_string().contains("exclude"), "{err}");
    let err = snapshot(&CodeSpec::new("/no/such/dir"), DEFAULT_CODE_LIMIT).unwrap_err();
    assert!(err.to_string().contains("code.path"), "{err}");
}
