//! The layout ARCHITECTURE.md draws, held: every module imports only what its row of the
//! rooms table allows, every module has a row, a kind's file never reaches into another
//! kind's, and no source file (src/ and the tests' own code under tests/) grows into one a
//! newcomer must read whole to change a part.
//! The table is read from ARCHITECTURE.md itself, so the map and the code cannot drift.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Longest source file, in lines, under src/ and tests/: the re-layout's goal was that
/// changing one kind (or one concern, or one test) never means reading a 2,000-line file.
const MAX_FILE_LINES: usize = 1000;

/// The probe/ files that are shared machinery rather than a kind.
const PROBE_MACHINERY: &[&str] = &[
    "mod",
    "kinds",
    "generation",
    "endpoint",
    "framing",
    "dialect",
    "grpc",
    "tensors",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// module -> the modules it may import, from the rows between the table's markers.
fn rooms() -> BTreeMap<String, BTreeSet<String>> {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let start = text.find("<!-- rooms:").expect("the rooms table's start marker");
    let end = text
        .find("<!-- end rooms -->")
        .expect("the rooms table's end marker");
    let mut rooms = BTreeMap::new();
    for line in text[start..end].lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let [module, _owns, imports] = cells[..] else {
            panic!("a rooms row has three cells: {line}");
        };
        if module == "module" || module.starts_with("---") {
            continue;
        }
        let allowed = imports
            .split(',')
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(str::to_owned)
            .collect();
        assert!(
            rooms.insert(module.to_owned(), allowed).is_none(),
            "{module} has two rows"
        );
    }
    rooms
}

/// Every .rs file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file that ships: comments and the unit tests at its end left out (tests
/// may import what they check).
fn shipped_code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => &text[..],
    };
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The crate's top-level modules a piece of code names: `crate::x`, and each `x` of a
/// grouped `crate::{x, y::z}`.
fn named_modules(code: &str) -> BTreeSet<String> {
    let word = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect()
    };
    let mut named = BTreeSet::new();
    for (i, m) in code.match_indices("crate::") {
        let rest = &code[i + m.len()..];
        match rest.strip_prefix('{') {
            Some(group) => {
                // Top-level items of the group only: nested braces belong to an item.
                let mut depth = 0;
                let mut item_start = 0;
                for (j, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => {
                            named.insert(word(&group[item_start..j]));
                            break;
                        }
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            named.insert(word(&group[item_start..j]));
                            item_start = j + 1;
                        }
                        _ => {}
                    }
                }
            }
            None => {
                named.insert(word(rest));
            }
        }
    }
    named.remove("");
    named
}

#[test]
fn grouped_and_plain_paths_are_both_read() {
    let code = "use crate::{schedule, server::{self, x}};\nlet a = crate::metrics::Metrics::new();";
    let named: Vec<String> = named_modules(code).into_iter().collect();
    assert_eq!(named, ["metrics", "schedule", "server"]);
}

/// The top-level module a file under src/ belongs to (`None`: the binary's own files).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next()?.as_os_str().to_str()?.to_owned();
    let module = first.strip_suffix(".rs").unwrap_or(&first).to_owned();
    match module.as_str() {
        "main" | "cli" | "lib" => None,
        _ => Some(module),
    }
}

#[test]
fn every_module_stays_in_its_room() {
    let rooms = rooms();
    let src = root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut outside = Vec::new();
    let mut seen = BTreeSet::new();
    for file in &files {
        let Some(module) = module_of(&src, file) else {
            continue;
        };
        if file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        seen.insert(module.clone());
        let Some(allowed) = rooms.get(&module) else {
            outside.push(format!(
                "{}: module `{module}` has no row in ARCHITECTURE.md's rooms table",
                file.display()
            ));
            continue;
        };
        for named in named_modules(&shipped_code(file)) {
            if named != module && rooms.contains_key(&named) && !allowed.contains(&named) {
                outside.push(format!(
                    "{}: `{module}` imports `{named}`, which its room does not allow",
                    file.display()
                ));
            }
        }
    }
    for module in rooms.keys() {
        if !seen.contains(module) {
            outside.push(format!(
                "ARCHITECTURE.md lists `{module}`, which src/ does not have"
            ));
        }
    }
    assert!(outside.is_empty(), "{}", outside.join("\n"));
}

#[test]
fn a_kind_never_reaches_into_another_kind() {
    let probe = root().join("src/probe");
    let kinds: Vec<String> = std::fs::read_dir(&probe)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            let stem = name.strip_suffix(".rs")?.to_owned();
            (!PROBE_MACHINERY.contains(&stem.as_str())).then_some(stem)
        })
        .collect();
    assert!(kinds.len() >= 6, "kinds found: {kinds:?}");
    let mut sideways = Vec::new();
    for kind in &kinds {
        let code = shipped_code(&probe.join(format!("{kind}.rs")));
        for other in kinds.iter().filter(|k| *k != kind) {
            for path in [format!("super::{other}"), format!("probe::{other}")] {
                let reaches = code.match_indices(&path).any(|(i, m)| {
                    let next = code[i + m.len()..].chars().next();
                    !next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                });
                if reaches {
                    sideways.push(format!("probe/{kind}.rs reaches into probe/{other}.rs"));
                }
            }
        }
    }
    assert!(sideways.is_empty(), "{}", sideways.join("\n"));
}

#[test]
fn no_source_file_is_a_wall_of_code() {
    let mut long = Vec::new();
    for dir in ["src", "tests"] {
        let mut files = Vec::new();
        rust_files(&root().join(dir), &mut files);
        assert!(!files.is_empty(), "no Rust files under {dir}/");
        long.extend(files.iter().filter_map(|f| {
            let lines = std::fs::read_to_string(f).unwrap().lines().count();
            (lines > MAX_FILE_LINES).then(|| format!("{}: {lines} lines", f.display()))
        }));
    }
    long.sort();
    assert!(
        long.is_empty(),
        "files over {MAX_FILE_LINES} lines (split them by concern, see ARCHITECTURE.md):\n{}",
        long.join("\n")
    );
}
