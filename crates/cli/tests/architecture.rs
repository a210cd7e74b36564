//! docs/ARCHITECTURE.md matches the tree, and modules do not import each other in circles.
//!
//! - Every `crates/<crate>/src/...` path the page names exists.
//! - Every top-level module of every crate of the workspace (`src/<name>.rs` or
//!   `src/<name>/mod.rs`) is named on the page: a new module gets its line there.
//! - No module of any crate depends on a module that depends back on it, directly or through
//!   others; nor does any top-level room (a file of `src/`, or a folder with all it holds). A module depends on another when its code (tests excluded)
//!   names it through a `crate::`, `super::` or `self::` path, or names a child module it
//!   declares (`mod child;` ... `child::item`).

mod workspace;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use workspace::{workspace_crates, workspace_root};

fn architecture_md() -> String {
    let path = workspace_root().join("docs/ARCHITECTURE.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Every `crates/<crate>/src/...` path on the page.
fn paths_named(doc: &str) -> BTreeSet<String> {
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '/' | '.' | '-');
    let mut out = BTreeSet::new();
    let mut rest = doc;
    while let Some(at) = rest.find("crates/") {
        let tail = &rest[at..];
        let end = tail.find(|c| !is_path_char(c)).unwrap_or(tail.len());
        let path = tail[..end].trim_end_matches('.');
        if path.contains("/src/") {
            out.insert(path.to_string());
        }
        rest = &tail[end..];
    }
    out
}

#[test]
fn every_path_the_page_names_exists() {
    let named = paths_named(&architecture_md());
    assert!(named.len() > 20, "the page names only {named:?}");
    let missing: Vec<&String> = named
        .iter()
        .filter(|p| !workspace_root().join(p).exists())
        .collect();
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md names files that do not exist: {missing:?}"
    );
}

/// Top-level module files of a crate: `src/<name>.rs` and `src/<name>/mod.rs`.
fn top_level_modules(krate: &str) -> Vec<String> {
    let src = workspace_root().join("crates").join(krate).join("src");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&src).expect("ls src").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if path.is_dir() && path.join("mod.rs").exists() {
            out.push(format!("crates/{krate}/src/{name}/mod.rs"));
        } else if name.ends_with(".rs") {
            out.push(format!("crates/{krate}/src/{name}"));
        }
    }
    out.sort();
    out
}

#[test]
fn every_top_level_module_is_on_the_page() {
    let named = paths_named(&architecture_md());
    let unnamed: Vec<String> = workspace_crates()
        .iter()
        .flat_map(|krate| top_level_modules(krate))
        .filter(|m| !named.contains(m))
        .collect();
    assert!(
        unnamed.is_empty(),
        "modules missing from docs/ARCHITECTURE.md (give each a line): {unnamed:?}"
    );
}

/// Module path ("" for the crate root, "trace::events", ...) -> its file, for every module file
/// under `src`.
fn module_files(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("ls").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let Some(relative) = path
                .strip_prefix(src)
                .ok()
                .and_then(|p| p.to_str())
                .and_then(|p| p.strip_suffix(".rs"))
            else {
                continue;
            };
            let mut parts: Vec<&str> = relative.split('/').collect();
            if matches!(parts.last(), Some(&"mod" | &"lib" | &"main")) {
                parts.pop();
            }
            out.insert(parts.join("::"), path);
        }
    }
    // Modules compiled in from elsewhere (`#[path = "..."] mod name;`) are modules too.
    let declared: Vec<(String, PathBuf)> = out
        .iter()
        .flat_map(|(module, file)| path_modules(module, file))
        .collect();
    out.extend(declared);
    out
}

/// The `#[path = "..."] mod name;` declarations of `module` (in `file`): (module path, file).
fn path_modules(module: &str, file: &Path) -> Vec<(String, PathBuf)> {
    let text = std::fs::read_to_string(file).expect("read module");
    let mut out = Vec::new();
    let mut pending: Option<&str> = None;
    for line in text.lines().map(str::trim) {
        if let Some(path) = line
            .strip_prefix("#[path = \"")
            .and_then(|l| l.strip_suffix("\"]"))
        {
            pending = Some(path);
            continue;
        }
        if line.starts_with("#[") {
            continue;
        }
        let name = line
            .strip_prefix("mod ")
            .or_else(|| line.strip_prefix("pub mod "))
            .and_then(|l| l.strip_suffix(';'));
        if let (Some(path), Some(name)) = (pending.take(), name) {
            let full = if module.is_empty() {
                name.to_string()
            } else {
                format!("{module}::{name}")
            };
            out.push((full, file.parent().expect("a file's folder").join(path)));
        }
    }
    out
}

fn is_ident_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The paths that follow `at` in `text` (just after a `crate::`-like head): `a::b::c`, or a
/// group `{a, b::{c, d}}` giving one path per leaf.
fn paths_at(text: &[u8], mut at: usize) -> Vec<Vec<String>> {
    let mut prefix: Vec<String> = Vec::new();
    loop {
        if text.get(at) == Some(&b'{') {
            let mut out = Vec::new();
            let mut depth = 0;
            let mut item_start = at + 1;
            let mut i = at;
            while i < text.len() {
                match text[i] {
                    b'{' => depth += 1,
                    b'}' | b',' if depth == 1 => {
                        let item = std::str::from_utf8(&text[item_start..i]).unwrap_or("");
                        let trimmed = item.trim_start();
                        let offset = item_start + (item.len() - trimmed.len());
                        for path in paths_at(text, offset) {
                            out.push(prefix.iter().cloned().chain(path).collect());
                        }
                        item_start = i + 1;
                        if text[i] == b'}' {
                            return out;
                        }
                    }
                    b'}' => depth -= 1,
                    _ => {}
                }
                i += 1;
            }
            return out;
        }
        let start = at;
        while at < text.len() && is_ident_char(text[at]) {
            at += 1;
        }
        if at == start {
            return vec![prefix];
        }
        prefix.push(String::from_utf8_lossy(&text[start..at]).into_owned());
        if text[at..].starts_with(b"::") {
            at += 2;
        } else {
            return vec![prefix];
        }
    }
}

/// The modules `module` (in `file`) depends on, among `modules`.
fn dependencies(
    module: &str,
    file: &Path,
    modules: &BTreeMap<String, PathBuf>,
) -> BTreeSet<String> {
    let full_text = std::fs::read_to_string(file).expect("read module");
    // Unit tests sit at the end of a file, after `#[cfg(test)]`: they may use anything.
    let text = full_text.split("#[cfg(test)]").next().unwrap_or("");
    let bytes = text.as_bytes();
    let parts: Vec<String> = if module.is_empty() {
        Vec::new()
    } else {
        module.split("::").map(str::to_string).collect()
    };
    let resolve = |full: Vec<String>| -> Option<String> {
        (0..=full.len())
            .rev()
            .map(|k| full[..k].join("::"))
            .find(|candidate| modules.contains_key(candidate))
    };
    let mut out = BTreeSet::new();
    let mut add = |target: Option<String>| {
        if let Some(target) = target.filter(|t| t != module) {
            out.insert(target);
        }
    };
    // Paths through crate::, super:: (any number) and self::.
    for (at, _) in text.match_indices("::") {
        let head_start = bytes[..at]
            .iter()
            .rposition(|c| !is_ident_char(*c))
            .map_or(0, |p| p + 1);
        if head_start > 0 && bytes[head_start - 1] == b':' {
            continue; // the middle of a path: its head was handled
        }
        let mut base: Vec<String> = match &text[head_start..at] {
            "crate" => Vec::new(),
            "self" => parts.clone(),
            "super" => parts[..parts.len().saturating_sub(1)].to_vec(),
            _ => continue,
        };
        let mut after = at + 2;
        while text[after..].starts_with("super::") {
            base.pop();
            after += "super::".len();
        }
        for path in paths_at(bytes, after) {
            add(resolve(base.iter().cloned().chain(path).collect()));
        }
    }
    // Child modules named by their bare name.
    for line in text.lines() {
        let line = line.trim();
        let declaration = line
            .strip_prefix("pub mod ")
            .or_else(|| line.strip_prefix("mod "))
            .or_else(|| line.strip_prefix("pub(crate) mod "));
        let Some(child) = declaration.and_then(|d| d.strip_suffix(';')) else {
            continue;
        };
        let needle = format!("{child}::");
        let named = text
            .match_indices(&needle)
            .any(|(at, _)| at == 0 || !(is_ident_char(bytes[at - 1]) || bytes[at - 1] == b':'));
        if named {
            add(resolve(
                parts.iter().cloned().chain([child.to_string()]).collect(),
            ));
        }
    }
    out
}

/// Groups of modules that depend on each other in a circle (strongly connected components of
/// more than one module), each as a sorted list.
fn import_cycles(krate: &str) -> Vec<Vec<String>> {
    cycles_among(krate, |module| module.to_string())
}

/// Groups of top-level rooms (a file of `src/`, or a folder with all it holds) that depend on
/// each other in a circle: a folder's files may import each other, two folders may not.
fn room_cycles(krate: &str) -> Vec<Vec<String>> {
    cycles_among(krate, |module| {
        module.split("::").next().unwrap_or_default().to_string()
    })
}

/// Circles among the groups `group` puts modules in (a module's dependencies within its own
/// group do not count).
fn cycles_among(krate: &str, group: impl Fn(&str) -> String) -> Vec<Vec<String>> {
    let src = workspace_root().join("crates").join(krate).join("src");
    let modules = module_files(&src);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, file) in &modules {
        let from = group(m);
        let to: BTreeSet<String> = dependencies(m, file, &modules)
            .iter()
            .map(|d| group(d))
            .filter(|d| *d != from)
            .collect();
        graph.entry(from).or_default().extend(to);
    }
    // Two modules are in one circle when each reaches the other.
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(m) = stack.pop() {
            for next in graph.get(&m).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|m| (m, reach(m))).collect();
    let mut cycles: BTreeSet<Vec<String>> = BTreeSet::new();
    for (m, from_m) in &reachable {
        let circle: Vec<String> = from_m
            .iter()
            .filter(|other| reachable[other].contains(*m))
            .map(|other| {
                if other.is_empty() {
                    "(crate root)".into()
                } else {
                    other.clone()
                }
            })
            .collect();
        if circle.len() > 1 {
            cycles.insert(circle);
        }
    }
    cycles.into_iter().collect()
}

#[test]
fn no_module_of_any_crate_imports_a_module_that_imports_it_back() {
    let crates = workspace_crates();
    for krate in ["engine", "server", "testbed", "bench", "lab", "cli", "wire"] {
        assert!(crates.iter().any(|c| c == krate), "no crate {krate}");
    }
    let cycles: Vec<(String, Vec<Vec<String>>)> = crates
        .into_iter()
        .map(|krate| {
            let cycles = import_cycles(&krate);
            (krate, cycles)
        })
        .filter(|(_, cycles)| !cycles.is_empty())
        .collect();
    assert!(
        cycles.is_empty(),
        "modules that import each other: {cycles:?}"
    );
}

#[test]
fn no_two_rooms_of_any_crate_import_each_other() {
    let cycles: Vec<(String, Vec<Vec<String>>)> = workspace_crates()
        .into_iter()
        .map(|krate| {
            let cycles = room_cycles(&krate);
            (krate, cycles)
        })
        .filter(|(_, cycles)| !cycles.is_empty())
        .collect();
    assert!(
        cycles.is_empty(),
        "top-level files or folders that import each other: {cycles:?}"
    );
}

/// The most top-level rooms (files of `src/` and folders) a crate may have: its folder list is
/// its table of contents, so a reader sees the parts at a glance. The engine's fifteen are
/// DESIGN's parts; the server's twelve are the routes, ingest, departures, handoff,
/// retention, observability, settings, the state, and four leaves (the number here only ever
/// goes down).
const ROOMS_MAX_DEFAULT: usize = 15;
const ROOMS_MAX: &[(&str, usize)] = &[("engine", 15), ("server", 12)];

/// The longest a source or test file may be: past it, a file holds more than one concept.
const FILE_LINES_MAX: usize = 600;

/// The top-level rooms of a crate's `src/`: its files and folders.
fn rooms(krate: &str) -> Vec<String> {
    let src = workspace_root().join("crates").join(krate).join("src");
    let mut out: Vec<String> = std::fs::read_dir(&src)
        .expect("ls src")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| !name.starts_with('.'))
        .collect();
    out.sort();
    out
}

#[test]
fn every_crate_keeps_to_its_room_limit() {
    let over: Vec<String> = workspace_crates()
        .into_iter()
        .filter_map(|krate| {
            let max = ROOMS_MAX
                .iter()
                .find(|(name, _)| *name == krate)
                .map_or(ROOMS_MAX_DEFAULT, |(_, max)| *max);
            let rooms = rooms(&krate);
            (rooms.len() > max)
                .then(|| format!("{krate}: {} rooms, at most {max}: {rooms:?}", rooms.len()))
        })
        .collect();
    assert!(
        over.is_empty(),
        "crates with more top-level rooms than their limit: {over:?}"
    );
}

/// Every `.rs` file under a crate's `src/`, `tests/`, `benches/` and `fuzz/` (target dirs left out).
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if name != "target" && name != "corpus" && name != "artifacts" {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_file_is_over_the_line_limit() {
    let mut files = Vec::new();
    for krate in workspace_crates() {
        rust_files(&workspace_root().join("crates").join(&krate), &mut files);
    }
    assert!(files.len() > 100, "found only {} files", files.len());
    let over: Vec<String> = files
        .iter()
        .filter_map(|path| {
            let lines = std::fs::read_to_string(path).expect("read").lines().count();
            (lines > FILE_LINES_MAX).then(|| format!("{} ({lines} lines)", path.display()))
        })
        .collect();
    assert!(
        over.is_empty(),
        "files over {FILE_LINES_MAX} lines (split them by concept): {over:?}"
    );
}

/// Every crate of the workspace has its row in the README's layout table and in
/// docs/ARCHITECTURE.md's table of crates.
#[test]
fn every_crate_is_in_the_readme_and_on_the_page() {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).expect("README");
    let page = architecture_md();
    let missing: Vec<String> = workspace_crates()
        .into_iter()
        .filter(|krate| {
            let row = format!("| `crates/{krate}` |");
            let root = ["lib.rs", "main.rs"].map(|f| format!("| `crates/{krate}/src/{f}` |"));
            !readme.contains(&row) || !root.iter().any(|r| page.contains(r))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "crates without a row in the README's layout table or docs/ARCHITECTURE.md's crates: {missing:?}"
    );
}

/// The crates' own arrows point one way: the engine depends on no other roamkv crate but its
/// LevelDB bindings, the rig (testbed) on none, the wire contract on the engine alone, and the
/// bench uses the rig and the wire contract, not the lab's experiments nor the server.
#[test]
fn the_crates_depend_on_each_other_as_the_page_draws_it() {
    let roamkv_dependencies = |krate: &str| -> BTreeSet<String> {
        let path = workspace_root()
            .join("crates")
            .join(krate)
            .join("Cargo.toml");
        let text = std::fs::read_to_string(&path).expect("Cargo.toml");
        let dependencies = text
            .split("\n[")
            .find(|section| section.starts_with("dependencies]"))
            .unwrap_or("");
        dependencies
            .lines()
            .filter_map(|l| l.trim().strip_prefix("roamkv-"))
            .filter_map(|l| l.split(['.', ' ', '=']).next())
            .map(str::to_string)
            .collect()
    };
    let set = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(roamkv_dependencies("engine"), set(&["leveldb"]));
    assert_eq!(roamkv_dependencies("testbed"), set(&[]));
    assert_eq!(roamkv_dependencies("leveldb"), set(&[]));
    assert_eq!(roamkv_dependencies("wire"), set(&["engine"]));
    assert_eq!(
        roamkv_dependencies("server"),
        set(&["engine", "export", "sink", "wire"])
    );
    assert_eq!(roamkv_dependencies("export"), set(&["engine", "wire"]));
    assert_eq!(roamkv_dependencies("sink"), set(&["engine"]));
    assert_eq!(
        roamkv_dependencies("bench"),
        set(&["engine", "export", "leveldb", "testbed", "wire"])
    );
    assert!(
        !roamkv_dependencies("bench").contains("server"),
        "the bench takes the wire contract, not the server (it runs `roamkv serve` as a child)"
    );
    assert_eq!(roamkv_dependencies("lab"), set(&["engine", "testbed"]));
    assert_eq!(
        roamkv_dependencies("cli"),
        set(&["bench", "engine", "export", "lab", "server", "sink", "wire"])
    );
}

#[test]
fn the_cycle_check_finds_a_cycle_when_there_is_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\nmod c;\n").expect("write");
    std::fs::write(src.join("a.rs"), "use crate::b::Thing;\n").expect("write");
    std::fs::write(src.join("b.rs"), "use crate::{c::{self, Other}};\n").expect("write");
    std::fs::write(
        src.join("c.rs"),
        "fn f() { super::a::g() }\n#[cfg(test)]\nmod tests { use crate::b; }\n",
    )
    .expect("write");
    let modules = module_files(src);
    let deps = |m: &str| dependencies(m, &modules[m], &modules);
    assert_eq!(deps("a"), BTreeSet::from(["b".to_string()]));
    assert_eq!(deps("b"), BTreeSet::from(["c".to_string()]));
    assert_eq!(deps("c"), BTreeSet::from(["a".to_string()]));
    // A module compiled in from another folder is a module of its own, not the crate root.
    std::fs::create_dir(src.join("elsewhere")).expect("mkdir");
    std::fs::write(src.join("elsewhere/shared.rs"), "pub fn f() {}\n").expect("write");
    std::fs::write(
        src.join("lib.rs"),
        "mod a;\nmod b;\nmod c;\n#[path = \"elsewhere/shared.rs\"]\nmod shared;\n",
    )
    .expect("write");
    std::fs::write(src.join("a.rs"), "use crate::shared::f;\n").expect("write");
    let modules = module_files(src);
    assert!(modules.contains_key("shared"), "{modules:?}");
    assert_eq!(
        dependencies("a", &modules["a"], &modules),
        BTreeSet::from(["shared".to_string()])
    );
}
