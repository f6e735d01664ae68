//! The scripts' shared functions, run by a local bash: `sqsh_whole` (sqsh.sh) and the
//! job folder's claim (claim.sh).

use std::path::Path;

/// Run `call` after defining `library`; its exit status is 0.
fn holds(library: &str, call: &str, args: &[&Path]) -> bool {
    library_call(library, call, args)
        .status()
        .unwrap()
        .success()
}

/// The bash that runs `call` after defining `library`, with `args` as `$1`...
fn library_call(library: &str, call: &str, args: &[&Path]) -> std::process::Command {
    let mut bash = std::process::Command::new("bash");
    bash.args(["--noprofile", "--norc", "-c"])
        .arg(format!("{library}\n{call}"))
        .arg("library")
        .args(args);
    bash
}

/// A squashfs superblock's first 48 bytes claiming `used` bytes, then `len - 48` more.
fn image(magic: &[u8; 4], used: u64, len: usize) -> Vec<u8> {
    let mut bytes = magic.to_vec();
    bytes.resize(40, 0);
    bytes.extend_from_slice(&used.to_le_bytes());
    bytes.resize(len, 7);
    bytes
}

#[test]
fn sqsh_whole_takes_a_whole_image_and_refuses_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, Option<Vec<u8>>, bool); 7] = [
        ("exact", Some(image(b"hsqs", 4096, 4096)), true),
        ("padded", Some(image(b"hsqs", 4096, 8192)), true),
        ("large", Some(image(b"hsqs", 70_000, 70_000)), true),
        ("one byte short", Some(image(b"hsqs", 4096, 4095)), false),
        ("other magic", Some(image(b"hsqX", 4096, 4096)), false),
        ("no superblock", Some(b"hsqs".to_vec()), false),
        ("missing", None, false),
    ];
    for (name, bytes, whole) in cases {
        let path = dir.path().join(format!("{name}.sqsh"));
        if let Some(bytes) = bytes {
            std::fs::write(&path, bytes).unwrap();
        }
        assert_eq!(
            holds(super::SQSH_LIBRARY, r#"sqsh_whole "$1""#, &[&path]),
            whole,
            "{name}"
        );
    }
    let used_zero = dir.path().join("zero.sqsh");
    std::fs::write(&used_zero, image(b"hsqs", 0, 100)).unwrap();
    assert!(!holds(
        super::SQSH_LIBRARY,
        r#"sqsh_whole "$1""#,
        &[&used_zero]
    ));
}

#[test]
fn a_folder_is_claimed_once_and_then_known_as_ours_or_foreign() {
    let claim = include_str!("claim.sh");
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path();
    let mine = r#"claim_folder "$1" tok-mine"#;
    let theirs = r#"claim_folder "$1" tok-theirs"#;
    assert!(!holds(claim, r#"folder_foreign "$1" tok-mine"#, &[folder]));
    assert!(holds(claim, mine, &[folder]), "a fresh folder is claimed");
    assert_eq!(
        std::fs::read_to_string(folder.join(".owner")).unwrap(),
        "tok-mine\n"
    );
    assert!(holds(claim, mine, &[folder]), "and stays ours");
    assert!(!holds(claim, theirs, &[folder]), "another token is refused");
    assert!(holds(claim, r#"folder_foreign "$1" tok-theirs"#, &[folder]));
    assert!(!holds(claim, r#"folder_foreign "$1" tok-mine"#, &[folder]));
    assert!(
        holds(claim, r#"claim_folder "$1" """#, &[folder]),
        "no token claims nothing"
    );
    let names: Vec<String> = std::fs::read_dir(folder)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec![".owner"], "no claim leaves a file behind");
}

#[test]
fn a_claim_starts_no_process() {
    // With nothing on PATH, any program the claim started would fail it: the exclusive
    // create and the read are bash's own (the claim was `ln` and `rm` before).
    let claim = include_str!("claim.sh");
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path();
    let bare = |call: &str| {
        library_call(claim, &format!("PATH=/nonexistent\n{call}"), &[folder])
            .status()
            .unwrap()
            .success()
    };
    assert!(
        bare(r#"claim_folder "$1" tok-mine"#),
        "claimed without a program"
    );
    assert!(bare(r#"claim_folder "$1" tok-mine"#), "and found ours");
    assert!(!bare(r#"claim_folder "$1" tok-theirs"#));
    assert!(bare(r#"folder_foreign "$1" tok-theirs"#));
    assert_eq!(
        std::fs::read_to_string(folder.join(".owner")).unwrap(),
        "tok-mine\n"
    );
}

#[test]
fn of_claimers_racing_for_a_folder_exactly_one_wins() {
    let claim = include_str!("claim.sh");
    for round in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let (folder, go) = (dir.path().join("job"), dir.path().join("go"));
        std::fs::create_dir(&folder).unwrap();
        // Each claimer waits for the go file, then claims with its own token and says
        // whether it won.
        let racers: Vec<_> = (0..8)
            .map(|n| {
                library_call(
                    claim,
                    &format!("until [ -e \"$2\" ]; do :; done\nclaim_folder \"$1\" tok-{n}"),
                    &[&folder, &go],
                )
                .spawn()
                .unwrap()
            })
            .collect();
        std::fs::write(&go, "").unwrap();
        let won: Vec<usize> = racers
            .into_iter()
            .enumerate()
            .filter_map(|(n, mut racer)| racer.wait().unwrap().success().then_some(n))
            .collect();
        assert_eq!(won.len(), 1, "round {round}: winners {won:?}");
        assert_eq!(
            std::fs::read_to_string(folder.join(".owner")).unwrap(),
            format!("tok-{}\n", won[0])
        );
    }
}

#[test]
fn a_claim_caught_between_create_and_write_is_read_once_written() {
    // A `.owner` created and not yet written: the reader waits for its line instead of
    // taking the folder for nobody's (or another's).
    let claim = include_str!("claim.sh");
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path();
    std::fs::write(folder.join(".owner"), "").unwrap();
    let mut reader = library_call(claim, r#"claim_folder "$1" tok-first"#, &[folder])
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(reader.try_wait().unwrap().is_none(), "the reader waits");
    std::fs::write(folder.join(".owner"), "tok-first\n").unwrap();
    assert!(
        reader.wait().unwrap().success(),
        "the folder is the writer's"
    );

    // A claimer killed between the two leaves a folder that refuses every claim.
    let abandoned = tempfile::tempdir().unwrap();
    std::fs::write(abandoned.path().join(".owner"), "").unwrap();
    assert!(!holds(
        claim,
        r#"claim_folder "$1" tok-late"#,
        &[abandoned.path()]
    ));
    assert_eq!(
        std::fs::read_to_string(abandoned.path().join(".owner")).unwrap(),
        ""
    );
}
