//! The layout ARCHITECTURE.md draws, held: every module imports only what its row of the
//! rooms table allows, every module has a row, config's files keep to their own table
//! (no circles, nothing through mod.rs), a kind's file never reaches into another
//! kind's, and no file of code (src/ and the tests' own code under tests/) grows into one
//! a newcomer must read whole to change a part. The tables are read from ARCHITECTURE.md
//! itself, so the map and the code cannot drift.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Longest source file under src/, in lines: changing one kind (or one concern) never
/// means reading a 2,000-line file.
const MAX_SOURCE_LINES: usize = 900;

/// Longest file of the tests' own code under tests/, in lines.
const MAX_TEST_LINES: usize = 1000;

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
    "answer",
    "tools",
    "structured",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// module -> the modules it may import, from the rows between the table's markers.
fn rooms() -> BTreeMap<String, BTreeSet<String>> {
    table("rooms")
}

/// A rooms table of ARCHITECTURE.md, between `<!-- {name}:` and `<!-- end {name} -->`.
fn table(name: &str) -> BTreeMap<String, BTreeSet<String>> {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let start = text
        .find(&format!("<!-- {name}:"))
        .unwrap_or_else(|| panic!("the {name} table's start marker"));
    let end = text
        .find(&format!("<!-- end {name} -->"))
        .unwrap_or_else(|| panic!("the {name} table's end marker"));
    let mut rooms = BTreeMap::new();
    for line in text[start..end].lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let [module, _owns, imports] = cells[..] else {
            panic!("a rooms row has three cells: {line}");
        };
        if module == "module" || module == "file" || module.starts_with("---") {
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
    for (dir, bound) in [("src", MAX_SOURCE_LINES), ("tests", MAX_TEST_LINES)] {
        let mut files = Vec::new();
        rust_files(&root().join(dir), &mut files);
        assert!(!files.is_empty(), "no Rust files under {dir}/");
        long.extend(files.iter().filter_map(|f| {
            let lines = std::fs::read_to_string(f).unwrap().lines().count();
            (lines > bound).then(|| format!("{}: {lines} lines, over {bound}", f.display()))
        }));
    }
    long.sort();
    assert!(
        long.is_empty(),
        "files too long (split them by concern, see ARCHITECTURE.md):\n{}",
        long.join("\n")
    );
}

/// The config files a piece of config code names: `super::x` and each `x` of a grouped
/// `super::{x, y::z}`, and `crate::config::x`; `through_mod` gets the names that are not
/// files (items taken from mod.rs).
fn config_files_named(
    code: &str,
    files: &BTreeSet<String>,
    through_mod: &mut BTreeSet<String>,
) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut named = BTreeSet::new();
    let mut note = |name: String| {
        if files.contains(&name) {
            named.insert(name);
        } else if !name.is_empty() && name != "super" && name != "self" {
            through_mod.insert(name);
        }
    };
    for prefix in ["super::", "crate::config::"] {
        for (i, m) in code.match_indices(prefix) {
            // `super::super::x` and paths into probe/ or notify/ are not config's.
            if prefix == "super::" && code[..i].ends_with("::") {
                continue;
            }
            let rest = &code[i + m.len()..];
            match rest.strip_prefix('{') {
                Some(group) => {
                    let group = &group[..group.find('}').unwrap_or(group.len())];
                    for item in group.split(',') {
                        note(ident(item));
                    }
                }
                None => note(ident(rest)),
            }
        }
    }
    named
}

#[test]
fn config_files_keep_to_their_rooms_with_no_circles() {
    let rooms = table("config rooms");
    let dir = root().join("src/config");
    let mut files: BTreeSet<String> = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if let Some(stem) = name.strip_suffix(".rs")
            && stem != "mod"
        {
            files.insert(stem.to_owned());
        }
    }
    let mut problems = Vec::new();
    for file in &files {
        let Some(allowed) = rooms.get(file) else {
            problems.push(format!("config/{file}.rs has no row in the config rooms table"));
            continue;
        };
        let mut through_mod = BTreeSet::new();
        let code = shipped_code(&dir.join(format!("{file}.rs")));
        for named in config_files_named(&code, &files, &mut through_mod) {
            if named != *file && !allowed.contains(&named) {
                problems.push(format!(
                    "config/{file}.rs imports config/{named}.rs, which its row does not allow"
                ));
            }
        }
        for item in through_mod {
            problems.push(format!(
                "config/{file}.rs takes `{item}` through mod.rs; import it from its file"
            ));
        }
    }
    for (file, allowed) in &rooms {
        if !files.contains(file) {
            problems.push(format!(
                "the config rooms table lists {file}, which is not a file"
            ));
        }
        for other in allowed {
            if !rooms.contains_key(other) {
                problems.push(format!("{file}'s row allows {other}, which has no row"));
            }
        }
    }
    // The table itself has no circle: every file can be ordered after what it imports.
    let mut placed: BTreeSet<&String> = BTreeSet::new();
    while placed.len() < rooms.len() {
        let next: Vec<&String> = rooms
            .iter()
            .filter(|(f, allowed)| {
                !placed.contains(f)
                    && allowed
                        .iter()
                        .all(|a| placed.contains(a) || !rooms.contains_key(a))
            })
            .map(|(f, _)| f)
            .collect();
        if next.is_empty() {
            let left: Vec<&String> = rooms.keys().filter(|f| !placed.contains(f)).collect();
            problems.push(format!("the config rooms table has a circle among {left:?}"));
            break;
        }
        placed.extend(next);
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn config_imports_are_read_grouped_plain_and_through_mod() {
    let files: BTreeSet<String> = ["probe", "cost"].map(str::to_owned).into();
    let mut through_mod = BTreeSet::new();
    let named = config_files_named(
        "use super::probe::Schedule;\nuse super::{cost, Config};\nlet x = super::super::parse;",
        &files,
        &mut through_mod,
    );
    assert_eq!(named, files);
    // `super::super::` leaves config: not counted.
    assert_eq!(through_mod, ["Config".to_owned()].into());
}
