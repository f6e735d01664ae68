//! The house rules of the workspace's layout, checked on its source: in no crate does a
//! module import a module that imports it back (directly, around a longer circle, or
//! through a child or a re-export), slurm-core's domain names no scheduler, its generic
//! `backend` module names no SLURM type, and no function of the SLURM room is longer
//! than [`LONGEST_FUNCTION`] lines.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;

/// The crates of the workspace whose `src/` the circle check walks.
const CRATES: [&str; 4] = ["slurm-core", "slurm-records", "slurm-render", "slurm-ssh"];

/// The most lines a function of the SLURM room may take, its `fn` line and closing
/// brace included.
const LONGEST_FUNCTION: usize = 80;

/// A module's path in its crate: `["slurm", "poll"]`; the crate root is empty.
type Module = Vec<String>;

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

/// Whether `file` holds unit tests only (`tests.rs`, `*_tests.rs`, the SLURM room's
/// `testkit.rs`): such a file may reach anywhere.
fn is_test_file(file: &Path) -> bool {
    file.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n == "tests.rs" || n.ends_with("_tests.rs") || n == "testkit.rs")
}

/// The module path of a source file: `slurm/poll.rs` -> `slurm::poll`, `slurm/mod.rs` ->
/// `slurm`, `spec.rs` -> `spec`.
fn module_of(src: &Path, file: &Path) -> Module {
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

/// The code of a file without comment lines and without its `#[cfg(test)]` modules of
/// inline tests (tests may reach anywhere); what is dropped is blanked, so lines keep
/// their numbers.
fn code(text: &str) -> String {
    let inline_tests = Regex::new(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{").unwrap();
    let mut lines: Vec<&str> = text
        .lines()
        .map(|line| match line.trim_start().starts_with("//") {
            true => "",
            false => line,
        })
        .collect();
    let mut at = 0;
    while at + 1 < lines.len() {
        if lines[at].trim() == "#[cfg(test)]" && inline_tests.is_match(lines[at + 1]) {
            let end = closing_line(&lines[at + 1..].join("\n")).unwrap_or(lines.len());
            let end = (at + 2 + end).min(lines.len());
            lines[at..end].fill("");
            at = end;
        } else {
            at += 1;
        }
    }
    lines.join("\n")
}

/// One name a `use` declaration brings in: the path it names and the name it is known
/// by in the module (`use a::b as c`: `a::b`, `c`).
struct UseLeaf {
    path: Vec<String>,
    name: String,
}

/// The names of a `use` tree (`a::{b, c::{d as e, self}}`), nested groups expanded.
fn use_leaves(tree: &str, prefix: &[String], out: &mut Vec<UseLeaf>) {
    let tree = tree.trim();
    if tree.is_empty() {
        return;
    }
    if let Some(open) = tree.find('{') {
        let mut path = prefix.to_vec();
        path.extend(segments(tree[..open].trim_end_matches(':')));
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        // Split the group at its top-level commas.
        let (mut depth, mut start) = (0, 0);
        for (at, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    use_leaves(&inner[start..at], &path, out);
                    start = at + 1;
                }
                _ => {}
            }
        }
        use_leaves(&inner[start..], &path, out);
        return;
    }
    let (named, alias) = match tree.split_once(" as ") {
        Some((named, alias)) => (named, Some(alias.trim().to_string())),
        None => (tree, None),
    };
    let mut path = prefix.to_vec();
    path.extend(segments(named));
    if path.last().map(String::as_str) == Some("self") {
        path.pop();
    }
    let Some(last) = path.last().cloned() else {
        return;
    };
    out.push(UseLeaf {
        path,
        name: alias.unwrap_or(last),
    });
}

/// The segments of a path written `a::b::c`.
fn segments(path: &str) -> Vec<String> {
    path.split("::")
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// The source files of one crate, read: each module's code (comments and test tails
/// dropped), unit-test files left out.
struct Crate {
    files: BTreeMap<Module, String>,
}

impl Crate {
    /// The crate whose sources are under `src`.
    fn read(src: &Path) -> Crate {
        let mut paths = Vec::new();
        sources(src, &mut paths);
        let files = paths
            .iter()
            .filter(|f| !is_test_file(f))
            .map(|f| {
                let text = std::fs::read_to_string(f).unwrap();
                (module_of(src, f), code(&text))
            })
            .collect();
        Crate { files }
    }
}

/// A path of `module`'s code made absolute: `crate::` from the root, `super::` from the
/// parent, `self::` from the module, a child module's name from the module (any other
/// first segment names another crate: `None`).
fn absolute(module: &[String], path: &[String], modules: &BTreeSet<Module>) -> Option<Vec<String>> {
    let (first, rest) = path.split_first()?;
    let mut parts: Vec<String> = match first.as_str() {
        "crate" => Vec::new(),
        "super" => module[..module.len().saturating_sub(1)].to_vec(),
        "self" => module.to_vec(),
        child => {
            let own: Module = module.iter().cloned().chain([child.to_string()]).collect();
            return modules
                .contains(&own)
                .then(|| own.into_iter().chain(rest.iter().cloned()).collect());
        }
    };
    let mut rest = rest.iter().peekable();
    while rest.peek().map(|s| s.as_str()) == Some("super") {
        rest.next();
        parts.pop();
    }
    parts.extend(rest.cloned());
    Some(parts)
}

/// One import of a module: the path it names, absolute.
struct Reference {
    from: Module,
    path: Vec<String>,
}

/// A crate's module graph: an edge from each module to every module it refers to, but
/// its own ancestors and descendants (a parent declaring its children and re-exporting
/// their items is structure, not an import). A path through a re-export counts as a
/// reference to the module that defines the item, and a child's imports count as its
/// parent's when seen from the parent's siblings: `a::b -> c` makes `a -> c` too.
struct Tree {
    modules: BTreeSet<Module>,
    edges: BTreeMap<Module, BTreeSet<Module>>,
    /// For each edge, the import that made it first (`from` imports `target`).
    why: BTreeMap<(Module, Module), (Module, Module)>,
}

impl Tree {
    /// The module graph of the crate whose sources are under `src`.
    fn of(src: &Path) -> Tree {
        let krate = Crate::read(src);
        let modules: BTreeSet<Module> = krate.files.keys().cloned().collect();
        let declared = Regex::new(r"(?m)^\s*(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);").unwrap();
        let inline = Regex::new(r"\b(?:crate|super)(?:::[A-Za-z_][A-Za-z0-9_]*)+").unwrap();
        // What each module re-exports: (module, name) -> the path it names.
        let mut reexports: BTreeMap<(Module, String), Vec<String>> = BTreeMap::new();
        let mut references = Vec::new();
        for (module, code) in &krate.files {
            for caps in declared.captures_iter(code) {
                let mut leaves = Vec::new();
                use_leaves(&caps[2], &[], &mut leaves);
                for leaf in leaves {
                    let Some(path) = absolute(module, &leaf.path, &modules) else {
                        continue;
                    };
                    if caps.get(1).is_some() {
                        reexports.insert((module.clone(), leaf.name), path.clone());
                    }
                    references.push(Reference {
                        from: module.clone(),
                        path,
                    });
                }
            }
            // Paths written in the code itself (`crate::slurm::states::map_state(..)`).
            let body = declared.replace_all(code, "");
            for found in inline.find_iter(&body) {
                let written = segments(found.as_str());
                if let Some(path) = absolute(module, &written, &modules) {
                    references.push(Reference {
                        from: module.clone(),
                        path,
                    });
                }
            }
        }
        let mut tree = Tree {
            modules,
            edges: BTreeMap::new(),
            why: BTreeMap::new(),
        };
        for reference in references {
            // The crate root re-exports the rooms: its own imports are no layer.
            if reference.from.is_empty() {
                continue;
            }
            let target = tree.defining_module(&reference.path, &reexports);
            tree.add(&reference.from, &target);
        }
        tree
    }

    /// The module that defines what `path` names, re-exports followed to their source.
    fn defining_module(
        &self,
        path: &[String],
        reexports: &BTreeMap<(Module, String), Vec<String>>,
    ) -> Module {
        let mut path = path.to_vec();
        // A re-export names an item further down; a few steps reach any definition.
        for _ in 0..16 {
            let module = self.longest_module(&path);
            let Some(item) = path.get(module.len()) else {
                return module;
            };
            match reexports.get(&(module.clone(), item.clone())) {
                Some(source) if source != &path[..=module.len()] => {
                    let rest = path[module.len() + 1..].to_vec();
                    path = source.iter().cloned().chain(rest).collect();
                }
                _ => return module,
            }
        }
        self.longest_module(&path)
    }

    /// The longest module that prefixes `path` (the rest are items).
    fn longest_module(&self, path: &[String]) -> Module {
        (0..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|prefix| self.modules.contains(prefix))
            .unwrap_or_default()
    }

    /// The edges an import of `target` by `from` makes: `from -> target`, and between
    /// the two children of their nearest common ancestor that hold them.
    fn add(&mut self, from: &Module, target: &Module) {
        if target.starts_with(from) || from.starts_with(target) {
            return;
        }
        let common = from.iter().zip(target).take_while(|(a, b)| a == b).count();
        let lifted = (from[..=common].to_vec(), target[..=common].to_vec());
        for (a, b) in [(from.clone(), target.clone()), lifted] {
            self.edges.entry(a.clone()).or_default().insert(b.clone());
            self.why
                .entry((a, b))
                .or_insert_with(|| (from.clone(), target.clone()));
        }
    }

    /// A circle of the graph, told with the import behind each step, if there is one.
    fn first_circle(&self) -> Option<String> {
        // Every path from a module back to itself is a circle; the first one found.
        for start in &self.modules {
            let mut stack: Vec<(Module, Vec<Module>)> = vec![(start.clone(), vec![])];
            let mut seen = BTreeSet::new();
            while let Some((at, path)) = stack.pop() {
                for next in self.edges.get(&at).into_iter().flatten() {
                    let mut trail = path.clone();
                    trail.push(at.clone());
                    if next == start {
                        trail.push(start.clone());
                        return Some(self.tell(&trail));
                    }
                    if seen.insert(next.clone()) {
                        stack.push((next.clone(), trail));
                    }
                }
            }
        }
        None
    }

    /// `a -> b (c imports d) -> ...` for the modules of `trail`.
    fn tell(&self, trail: &[Module]) -> String {
        let mut told = name(&trail[0]);
        for step in trail.windows(2) {
            let (from, target) = &self.why[&(step[0].clone(), step[1].clone())];
            told.push_str(&format!(
                " -> {} ({} imports {})",
                name(&step[1]),
                name(from),
                name(target)
            ));
        }
        told
    }
}

/// The `src/` of the workspace's crate `name`.
fn src_of(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name)
        .join("src")
}

/// slurm-core's module graph.
fn tree() -> Tree {
    Tree::of(&src_of("slurm-core"))
}

/// A module's path as written in Rust (`crate` for the root).
fn name(module: &[String]) -> String {
    match module.is_empty() {
        true => "crate".to_string(),
        false => module.join("::"),
    }
}

/// The path of a module written `a::b`.
fn module(written: &str) -> Module {
    segments(written)
}

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let tree = tree();
    assert!(tree.modules.len() > 30, "the walk found the sources");
    assert!(
        tree.edges[&module("slurm::status")].contains(&module("slurm::poll")),
        "the graph sees sibling imports"
    );
    for krate in CRATES {
        let tree = Tree::of(&src_of(krate));
        assert!(
            tree.modules.len() > 2,
            "the walk found the sources of {krate}"
        );
        if let Some(circle) = tree.first_circle() {
            panic!("a circle in {krate}: {circle}");
        }
    }
}

/// Sources written to a new folder, for the checks' own tests.
fn planted(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let file = dir.path().join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, text).unwrap();
    }
    dir
}

#[test]
fn the_check_finds_a_circle_through_a_child() {
    // `ctx` imports a child of `op`, and another child of `op` imports `ctx`.
    let files = [
        ("lib.rs", "mod ctx;\nmod op;\n"),
        (
            "ctx.rs",
            "use crate::op::memo::Memo;\npub struct Ctx(Memo);\n",
        ),
        ("op/mod.rs", "mod memo;\nmod run;\n"),
        ("op/memo.rs", "pub struct Memo;\n"),
        ("op/run.rs", "use crate::ctx::Ctx;\nfn run(_: Ctx) {}\n"),
    ];
    let dir = planted(&files);
    let circle = Tree::of(dir.path()).first_circle();
    assert_eq!(
        circle.as_deref(),
        Some("ctx -> op (ctx imports op::memo) -> ctx (op::run imports ctx)")
    );
    // With the memo beside `ctx` instead, there is no circle.
    let files = [
        ("lib.rs", "mod ctx;\nmod memo;\nmod op;\n"),
        ("ctx.rs", "use crate::memo::Memo;\npub struct Ctx(Memo);\n"),
        ("memo.rs", "pub struct Memo;\n"),
        ("op/mod.rs", "mod run;\n"),
        ("op/run.rs", "use crate::ctx::Ctx;\nfn run(_: Ctx) {}\n"),
    ];
    let dir = planted(&files);
    assert_eq!(Tree::of(dir.path()).first_circle(), None);
}

#[test]
fn the_check_finds_a_circle_through_a_reexport() {
    // `left` names `right`'s item through its parent's re-export; `right` imports `left`.
    let files = [
        ("lib.rs", "mod room;\n"),
        (
            "room/mod.rs",
            "mod left;\nmod right;\n\npub(crate) use self::right::{Item, Other as Renamed};\n",
        ),
        (
            "room/left.rs",
            "use crate::room::Renamed;\npub fn helper() {}\n",
        ),
        (
            "room/right.rs",
            "pub struct Item;\npub struct Other;\nfn call() {\n    super::left::helper();\n}\n",
        ),
    ];
    let dir = planted(&files);
    let circle = Tree::of(dir.path()).first_circle();
    assert_eq!(
        circle.as_deref(),
        Some("room::left -> room::right (room::left imports room::right) -> room::left (room::right imports room::left)")
    );
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

/// The functions of `code` with their first line (from 1) and their length in lines,
/// from the `fn` line to the closing brace. Braces in strings, characters and comments
/// are not counted.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let start = Regex::new(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?fn\s+([A-Za-z_][A-Za-z0-9_]*)").unwrap();
    let lines: Vec<&str> = code.lines().collect();
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let Some(caps) = start.captures(line) else {
            continue;
        };
        let rest = lines[at..].join("\n");
        if let Some(end) = closing_line(&rest) {
            found.push((caps[1].to_string(), at + 1, end + 1));
        }
    }
    found
}

/// The line (from 0) of `text` where the body opened by its first `{` closes; `None`
/// when a `;` comes first (a declaration without a body).
fn closing_line(text: &str) -> Option<usize> {
    let chars: Vec<char> = text.chars().collect();
    let (mut depth, mut line, mut i) = (0usize, 0usize, 0usize);
    let mut opened = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\n' => line += 1,
            '/' if chars.get(i + 1) == Some(&'/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
                continue;
            }
            '"' => {
                // A string (a raw one's hashes do not matter: its quotes end it).
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' {
                        i += 1;
                    } else if chars[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
            '\'' => {
                // A character ('{', '\n'), or a lifetime ('a), which is skipped as code.
                if chars.get(i + 1) == Some(&'\\') {
                    i += 2;
                    while i < chars.len() && chars[i] != '\'' {
                        i += 1;
                    }
                } else if chars.get(i + 2) == Some(&'\'') {
                    i += 2;
                }
            }
            ';' if !opened => return None,
            '{' => {
                opened = true;
                depth += 1;
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(line);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

#[test]
fn no_function_of_the_slurm_room_is_longer_than_the_limit() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/slurm");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let mut long = Vec::new();
    for file in files.iter().filter(|f| !is_test_file(f)) {
        let text = std::fs::read_to_string(file).unwrap();
        let file = file.strip_prefix(&src).unwrap().display().to_string();
        for (function, line, length) in functions(&code(&text)) {
            if length > LONGEST_FUNCTION {
                long.push(format!("{file}:{line} {function} ({length} lines)"));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions of src/slurm longer than {LONGEST_FUNCTION} lines (split them):\n{}",
        long.join("\n")
    );
}

#[test]
fn a_function_is_measured_from_its_fn_line_to_its_closing_brace() {
    let code = "fn one() {\n    let open = '{';\n    let text = \"}}\";\n}\n\n/// Doc.\npub(crate) async fn two<'a>(x: &'a str) -> usize\nwhere\n{\n    // }\n    x.len()\n}\nfn declared();\n";
    assert_eq!(
        functions(code),
        [("one".to_string(), 1, 4), ("two".to_string(), 7, 6)]
    );
}
