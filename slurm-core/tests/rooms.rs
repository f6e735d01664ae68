//! The house rules of slurm-core's layout, checked on its source: no module imports a
//! module that imports it back (directly or around a longer circle), the domain names
//! no scheduler, and the generic `backend` module names no SLURM type.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;

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

/// The module path of a source file: `slurm/poll.rs` -> `slurm::poll`, `slurm/mod.rs` ->
/// `slurm`, `spec.rs` -> `spec`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The code of a file without comments and without its `#[cfg(test)]` tail (tests may
/// reach anywhere).
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|line| match line.trim_start().starts_with("//") {
            true => "",
            false => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module paths a file refers to: `crate::a::b::Item` and `super::x::Item`, with
/// braced `use` groups expanded one level (`use crate::a::{b, c::D}`).
fn references(module: &[String], code: &str) -> BTreeSet<Vec<String>> {
    let path =
        Regex::new(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)*)(::\{([^}]*)\})?").unwrap();
    let mut found = BTreeSet::new();
    for caps in path.captures_iter(code) {
        let base: Vec<String> = if &caps[1] == "crate" {
            Vec::new()
        } else {
            // `super` of a module file is its parent module.
            module[..module.len().saturating_sub(1)].to_vec()
        };
        let mut parts = base.clone();
        let mut rest: Vec<String> = caps[2]
            .split("::")
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect();
        while rest.first().map(String::as_str) == Some("super") {
            rest.remove(0);
            parts.pop();
        }
        parts.extend(rest);
        found.insert(parts.clone());
        if let Some(group) = caps.get(4) {
            for item in group.as_str().split(',') {
                let first = item.trim().split("::").next().unwrap_or("").trim();
                if !first.is_empty() && first != "self" {
                    let mut full = parts.clone();
                    full.push(first.to_string());
                    found.insert(full);
                }
            }
        }
    }
    found
}

struct Tree {
    modules: BTreeSet<Vec<String>>,
    edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
}

/// The module graph of slurm-core's `src/`: an edge from each module to every module
/// it refers to, except its own ancestors and descendants (a parent declaring its
/// children and re-exporting their items is structure, not an import).
fn tree() -> Tree {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    // Unit-test files (`tests.rs`, `*_tests.rs`, the SLURM room's `testkit.rs`) may
    // reach anywhere.
    files.retain(|f| {
        f.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n != "tests.rs" && !n.ends_with("_tests.rs") && n != "testkit.rs")
    });
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(&src, f)).collect();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for file in &files {
        let module = module_of(&src, file);
        if module.is_empty() {
            continue; // lib.rs: the crate root re-exports the rooms
        }
        let text = std::fs::read_to_string(file).unwrap();
        for reference in references(&module, &code(&text)) {
            // The longest module that prefixes the path (the rest are items).
            let target = (1..=reference.len())
                .rev()
                .map(|n| reference[..n].to_vec())
                .find(|prefix| modules.contains(prefix));
            let Some(target) = target else { continue };
            let related = target.starts_with(&module) || module.starts_with(&target);
            if !related {
                edges.entry(module.clone()).or_default().insert(target);
            }
        }
    }
    Tree { modules, edges }
}

fn name(module: &[String]) -> String {
    module.join("::")
}

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let tree = tree();
    assert!(tree.modules.len() > 30, "the walk found the sources");
    assert!(
        tree.edges[&vec!["slurm".to_string(), "status".to_string()]]
            .contains(&vec!["slurm".to_string(), "poll".to_string()]),
        "the graph sees sibling imports"
    );
    // Every path from a module back to itself is a circle; report the first one found.
    for start in &tree.modules {
        let mut stack: Vec<(Vec<String>, Vec<Vec<String>>)> = vec![(start.clone(), vec![])];
        let mut seen = BTreeSet::new();
        while let Some((at, path)) = stack.pop() {
            for next in tree.edges.get(&at).into_iter().flatten() {
                let mut trail = path.clone();
                trail.push(at.clone());
                if next == start {
                    let circle: Vec<String> = trail.iter().map(|m| name(m)).collect();
                    panic!("a circle: {} -> {}", circle.join(" -> "), name(start));
                }
                if seen.insert(next.clone()) {
                    stack.push((next.clone(), trail));
                }
            }
        }
    }
}

#[test]
fn the_domain_names_no_scheduler_and_backend_no_slurm_type() {
    let tree = tree();
    let rooms_of_a_scheduler = ["slurm", "nccl", "testing"];
    for (module, targets) in &tree.edges {
        let room = module[0].as_str();
        if rooms_of_a_scheduler.contains(&room) {
            continue;
        }
        for target in targets {
            assert!(
                !["slurm", "nccl"].contains(&target[0].as_str()),
                "{} (the domain) imports {}",
                name(module),
                name(target)
            );
        }
    }
    // The generic backend room, source text included: not one SLURM word in its code.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/backend");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let slurm_type =
        Regex::new(r"\bSlurm[A-Z]\w*|\bslurm::|\bsbatch\b|\bsqueue\b|\bsacct\b").unwrap();
    for file in files {
        let text = code(&std::fs::read_to_string(&file).unwrap());
        // Doc comments were dropped by `code`; string literals may name a command.
        if let Some(found) = slurm_type.find(&text) {
            panic!("{} names {}", file.display(), found.as_str());
        }
    }
}

/// The SLURM backend's operations are functions of their own modules, called through
/// imports the module graph above sees: `SlurmBackend` has methods in its own file only
/// (a method in another file would be a call between files no import shows).
#[test]
fn slurm_backend_has_methods_in_its_own_file_only() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let block = Regex::new(r"impl\s*<[^>]*>\s*(?:[\w:]+\s+for\s+)?SlurmBackend\s*<").unwrap();
    let mut owners: Vec<String> = files
        .iter()
        .filter(|f| block.is_match(&code(&std::fs::read_to_string(f).unwrap())))
        .map(|f| f.strip_prefix(&src).unwrap().display().to_string())
        .collect();
    owners.sort();
    assert_eq!(
        owners,
        ["slurm/backend.rs"],
        "files with impl blocks of SlurmBackend"
    );
}
