//! The public surface, checked on the sources: each library crate's modules are private
//! behind the re-exports of its root (slurm-core's `testing` feature aside), unreachable
//! `pub` is an error, no hidden fixture is part of an API, the facade holds re-exports and
//! a prelude only, and its examples use nothing but what the facade re-exports.

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The names of the file modules a crate root declares `pub` (`pub mod x;`; a module
/// written inline in the root, `pub mod x { ... }`, is a namespace of re-exports).
fn public_file_modules(lib: &str) -> Vec<String> {
    lib.lines()
        .filter_map(|line| line.strip_prefix("pub mod "))
        .filter_map(|rest| rest.strip_suffix(';'))
        .map(str::to_string)
        .collect()
}

#[test]
fn library_modules_are_private_behind_their_roots_reexports() {
    for (krate, allowed) in [
        ("slurm-core", &["testing"][..]),
        ("slurm-ssh", &[][..]),
        ("slurm-render", &[][..]),
        ("slurm-records", &["testing"][..]),
    ] {
        let lib = read(&workspace().join(krate).join("src/lib.rs"));
        assert!(
            lib.contains("#![deny(unreachable_pub)]"),
            "{krate}: its root denies unreachable `pub` (a `pub` item nobody outside can name)"
        );
        let public: Vec<String> = public_file_modules(&lib)
            .into_iter()
            .filter(|m| !allowed.contains(&m.as_str()))
            .collect();
        assert!(
            public.is_empty(),
            "{krate}: public modules {public:?}; make them private and re-export what users need from the root"
        );
    }
}

#[test]
fn no_hidden_item_is_part_of_a_library_api() {
    let mut files = vec![workspace().join("src/lib.rs")];
    for krate in ["slurm-core", "slurm-ssh", "slurm-render", "slurm-records"] {
        sources(&workspace().join(krate).join("src"), &mut files);
    }
    for file in files {
        let text = read(&file);
        assert!(
            !text.contains("#[doc(hidden)]"),
            "{}: a #[doc(hidden)] item is public API nobody reads about; a test fixture goes behind cfg(test) or into the tests that use it",
            file.display()
        );
    }
}

#[test]
fn the_facade_holds_reexports_and_a_prelude_only() {
    let lib = read(&workspace().join("src/lib.rs"));
    let mut depth = 0usize;
    let mut continued = false;
    for line in lib.lines() {
        let code = line.trim();
        let opens = code.matches('{').count();
        let closes = code.matches('}').count();
        let inside_use = continued;
        continued = (code.starts_with("pub use ") || inside_use) && !code.ends_with(';');
        let allowed = code.is_empty()
            || code.starts_with("//")
            || code.starts_with("#![")
            || code.starts_with("#[cfg(doctest)]")
            || code.starts_with("#[doc = include_str!(")
            || code.starts_with("pub use ")
            || code == "pub mod prelude {"
            || code == "pub struct ReadmeDoctests;"
            || inside_use
            || (code == "}" && depth > 0);
        assert!(
            allowed,
            "src/lib.rs holds `{code}`: the facade re-exports the crates' names and holds a prelude, nothing else"
        );
        depth = (depth + opens).saturating_sub(closes);
    }
}

/// The body of `pub struct <name> {` in `text`, up to its closing brace at column 0.
fn struct_body<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let start = text.find(&format!("pub struct {name} {{\n"))?;
    let body = &text[start..];
    Some(&body[..body.find("\n}\n")?])
}

#[test]
fn answer_types_are_read_through_accessors() {
    // Users read these; only the crate writes them (a record changes through its store).
    let mut files = Vec::new();
    sources(&workspace().join("slurm-core/src"), &mut files);
    for name in ["JobRecord", "TaskRecord", "Transition", "JobStatus"] {
        let bodies: Vec<String> = files
            .iter()
            .filter_map(|f| struct_body(&read(f), name).map(str::to_string))
            .collect();
        assert_eq!(bodies.len(), 1, "one definition of {name}");
        let public: Vec<&str> = bodies[0]
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("pub ") && !l.starts_with("pub struct"))
            .collect();
        assert!(
            public.is_empty(),
            "{name} has public fields {public:?}: make them pub(crate) and give each a documented read accessor"
        );
    }
}
#[test]
fn the_facade_examples_use_only_what_the_facade_reexports() {
    let examples = workspace().join("examples");
    let mut files: Vec<std::path::PathBuf> = ["quickstart", "orchestrator", "pipeline"]
        .iter()
        .map(|example| examples.join(format!("{example}.rs")))
        .collect();
    // slurmctl, the command line, is a small program of its own folder.
    let mut folders = vec![examples.join("slurmctl")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    assert!(files.len() > 5, "slurmctl's modules were found");
    for path in files {
        let example = path.strip_prefix(&examples).unwrap().display().to_string();
        let text = read(&path);
        for inner in [
            "slurm_run::core",
            "slurm_run::ssh",
            "slurm_run::render",
            "slurm_run::records",
            "slurm_core",
            "slurm_records",
        ] {
            assert!(
                !text.contains(inner),
                "examples/{example} reaches `{inner}`: an example of the facade uses the names `slurm_run` re-exports (or its prelude)"
            );
        }
    }
}
