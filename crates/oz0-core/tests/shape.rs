//! The code keeps the shape the architecture promises.
//!
//! - **One door.** A process is started only by the files listed in
//!   [`STARTERS`]: the platform crates' walls (what implements `Sandbox`
//!   and the raw calls under it), and code that itself runs inside a wall
//!   (the witness, the guest agents). Anything else that starts a process
//!   — a new `Command`, `fork`, `posix_spawn`, `CreateProcessW` — fails
//!   here: a run goes through `oz0_core::Sandbox`, and a new wall or
//!   runtime is a new implementation of it, listed here with its reason.
//!   A listed file that no longer starts a process fails too (the list
//!   says what is true).
//! - **Sizes.** No source file over [`MAX_FILE_LINES`] lines, no function
//!   over [`MAX_FN_LINES`], at most [`MAX_STRING_ERRORS`] public functions
//!   whose error is a bare `String` (errors are types that name the value
//!   and the fix).
//!
//! Test files (`tests/`, `tests.rs`, a trailing `#[cfg(test)] mod`) may
//! start what they test and are not counted. The figures are printed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest source file.
const MAX_FILE_LINES: usize = 800;
/// The longest function.
const MAX_FN_LINES: usize = 120;
/// Public functions whose error is a `String`.
const MAX_STRING_ERRORS: usize = 5;

/// Every file that starts a process, and why it may.
const STARTERS: &[(&str, &str)] = &[
    // Linux: the walls and the calls under them.
    (
        "oz0-sys/src/spawn.rs",
        "the launchers' primitive: a child with descriptors at fixed numbers, in its job",
    ),
    (
        "oz0-sys/src/ns.rs",
        "inside the wall: the stage's own user namespace, the egress bridge's fork",
    ),
    (
        "oz0-linux/src/gvisor.rs",
        "gVisor (a Sandbox): runsc runs the image's root, and kills and deletes its sandbox",
    ),
    (
        "oz0-linux/src/spawn.rs",
        "tier 1 and tier 0 on Linux: the run's process, through oz0-sys",
    ),
    (
        "oz0-linux/src/bwrap.rs",
        "tier 1 on Linux: bubblewrap's argument list and its start",
    ),
    ("oz0-linux/src/plain.rs", "tier 0 on Linux (Plain)"),
    (
        "oz0-linux/src/stage.rs",
        "inside the wall: the stage executes the run's command",
    ),
    (
        "oz0-linux/src/check.rs",
        "asks bubblewrap its version; runs nothing of a job",
    ),
    // macOS.
    (
        "oz0-macos/src/sandbox.rs",
        "Seatbelt (tier 1) and Plain (tier 0) on macOS",
    ),
    (
        "oz0-macos/src/probe.rs",
        "inside the wall on macOS: the witness's children",
    ),
    (
        "oz0-macos/src/vm.rs",
        "Apple's container CLI: a tool server's microVM on macOS",
    ),
    // Windows.
    (
        "oz0-windows/src/native/imp/run.rs",
        "the tier-0 job object on Windows",
    ),
    (
        "oz0-windows/src/native/imp/spawn.rs",
        "PSEC (tier 1) on Windows: a process in its environment with its streams alone",
    ),
    // Inside a wall or a guest.
    (
        "oz0-node/src/witness/procs.rs",
        "inside the wall: the witness's children",
    ),
    (
        "oz0-microvm/src/guest.rs",
        "inside the microVM: the guest agent starts the tool server",
    ),
    (
        "oz0-microvm/src/smolguest.rs",
        "inside the microVM: smolvm's guest starts the tool server",
    ),
];

/// What starts a process, as code spells it.
const STARTS: &[&str] = &[
    "std::process::Command",
    "process::{Command",
    "tokio::process",
    "CommandExt",
    "posix_spawn(",
    "libc::fork(",
    "libc::vfork(",
    "libc::execv",
    "libc::execve(",
    "rustix::runtime::execve",
    "CreateProcessW(",
    "CreateProcessAsUserW(",
    "ShellExecute",
];

fn crates() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// Every `.rs` file under each crate's `src/`, by its path from `crates/`,
/// with its text.
fn sources() -> BTreeMap<String, String> {
    fn walk(dir: &Path, base: &Path, out: &mut BTreeMap<String, String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, base, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
                let text =
                    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                out.insert(rel, text);
            }
        }
    }
    let base = crates();
    let mut out = BTreeMap::new();
    for c in std::fs::read_dir(&base).unwrap() {
        let src = c.unwrap().path().join("src");
        if src.is_dir() {
            walk(&src, &base, &mut out);
        }
    }
    assert!(out.len() > 100, "found only {} source files", out.len());
    out
}

fn is_test_file(rel: &str) -> bool {
    rel.ends_with("/tests.rs") || rel.contains("/tests/")
}

/// The code of `text`: comments dropped, and a trailing test module.
fn code(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut it = text.lines().peekable();
    while let Some(l) = it.next() {
        let t = l.trim_start();
        if t.starts_with("#[cfg(test)]")
            && it
                .peek()
                .is_some_and(|n| n.trim_start().starts_with("mod ") && !n.contains(';'))
            && !l.starts_with(' ')
        {
            break;
        }
        lines.push(match l.find("//") {
            // A `//` inside a string (a URL) is kept: good enough for
            // the words looked for here, which no string holds.
            Some(i) if !l[..i].contains('"') => l[..i].to_string(),
            _ => l.to_string(),
        });
    }
    lines
}

#[test]
fn a_process_is_started_only_behind_the_door() {
    let listed: BTreeMap<&str, &str> = STARTERS.iter().copied().collect();
    let mut starters = BTreeMap::new();
    for (rel, text) in sources() {
        if is_test_file(&rel) {
            continue;
        }
        let hits: Vec<String> = code(&text)
            .iter()
            .enumerate()
            .filter(|(_, l)| STARTS.iter().any(|s| l.contains(s)))
            .map(|(i, l)| format!("{rel}:{}: {}", i + 1, l.trim()))
            .collect();
        if !hits.is_empty() {
            starters.insert(rel, hits);
        }
    }
    let outside: Vec<&String> = starters
        .iter()
        .filter(|(f, _)| !listed.contains_key(f.as_str()))
        .flat_map(|(_, h)| h)
        .collect();
    let stale: Vec<&&str> = listed
        .keys()
        .filter(|f| !starters.contains_key(**f))
        .collect();
    println!(
        "files that start a process: {} (all listed, each a wall or inside one)",
        starters.len()
    );
    assert!(
        outside.is_empty(),
        "a process started outside the door: start the run through oz0_core::Sandbox (a new wall or runtime is a Sandbox in its platform crate, listed in STARTERS with its reason):\n{}",
        outside.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")
    );
    assert!(
        stale.is_empty(),
        "listed in STARTERS but starting no process any more: remove them: {stale:?}"
    );
}

#[test]
fn a_process_start_is_seen_and_test_modules_are_not_counted() {
    let starts = code(
        "use std::process::Command; // run\n#[cfg(test)]\nmod tests {\n use tokio::process;\n}",
    );
    assert_eq!(starts.len(), 1);
    assert!(STARTS.iter().any(|s| starts[0].contains(s)));
    assert!(!code("// std::process::Command in a comment")
        .iter()
        .any(|l| STARTS.iter().any(|s| l.contains(s))));
}

/// The lines of each function of `lines` longer than `max`, as
/// (lines, name, first line); braces in strings and comments ignored.
fn long_functions(lines: &[String], max: usize) -> Vec<(usize, String, usize)> {
    let is_fn = |l: &str| {
        let mut t = l.trim_start();
        for p in [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "const ",
            "async ",
            "unsafe ",
            "extern \"C\" ",
        ] {
            t = t.strip_prefix(p).unwrap_or(t);
        }
        t.strip_prefix("fn ").map(|r| {
            r.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()
                .unwrap_or("")
                .to_string()
        })
    };
    let strip = |l: &str| {
        let mut out = String::new();
        let mut in_str = false;
        let mut chars = l.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' if in_str => {
                    chars.next();
                }
                '"' => in_str = !in_str,
                '/' if !in_str && chars.peek() == Some(&'/') => break,
                '\'' if !in_str => {
                    // A char literal ('{', '\'') or a lifetime.
                    let rest: String = chars.clone().take(3).collect();
                    if rest.chars().nth(1) == Some('\'') {
                        chars.next();
                        chars.next();
                    } else if rest.starts_with('\\') && rest.chars().nth(2) == Some('\'') {
                        chars.next();
                        chars.next();
                        chars.next();
                    }
                }
                _ if !in_str => out.push(c),
                _ => {}
            }
        }
        out
    };
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if let Some(name) = is_fn(&lines[i]) {
            let (mut depth, mut started, mut j) = (0i64, false, i);
            'body: while j < lines.len() {
                for c in strip(&lines[j]).chars() {
                    match c {
                        '{' => {
                            depth += 1;
                            started = true;
                        }
                        '}' => depth -= 1,
                        ';' if !started && depth == 0 => break 'body,
                        _ => {}
                    }
                }
                if started && depth <= 0 {
                    break;
                }
                j += 1;
            }
            let n = j - i + 1;
            if started && n > max {
                found.push((n, name, i + 1));
            }
        }
        i += 1;
    }
    found
}

/// Public functions (`pub`, not `pub(crate)`) of `text` whose error is
/// a bare `String`.
fn string_errors(text: &str) -> Vec<String> {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut found = Vec::new();
    let mut rest = flat.as_str();
    while let Some(at) = rest.find("pub ") {
        rest = &rest[at + 4..];
        let sig_end = rest.find(['{', ';']).unwrap_or(rest.len());
        let sig = &rest[..sig_end];
        let Some(name) = sig
            .strip_prefix("fn ")
            .or_else(|| sig.strip_prefix("async fn "))
        else {
            continue;
        };
        if let Some(ret) = sig.rsplit_once(") -> ").map(|(_, r)| r.trim()) {
            let ret = ret.split(" where ").next().unwrap_or(ret).trim();
            if ret.starts_with("Result<") && ret.replace(' ', "").ends_with(",String>") {
                found.push(name.split('(').next().unwrap_or(name).to_string());
            }
        }
    }
    found
}

#[test]
fn files_functions_and_errors_stay_small() {
    let (mut biggest, mut longest, mut strings) = (Vec::new(), Vec::new(), Vec::new());
    let mut largest = (0, String::new());
    let mut longest_fn = (0, String::new());
    for (rel, text) in sources() {
        let n = text.lines().count();
        if n > largest.0 {
            largest = (n, rel.clone());
        }
        if n > MAX_FILE_LINES {
            biggest.push(format!("{rel}: {n} lines"));
        }
        if is_test_file(&rel) {
            continue;
        }
        let code = code(&text);
        for (n, name, line) in long_functions(&code, 0) {
            if n > longest_fn.0 {
                longest_fn = (n, format!("{rel}:{line} {name}"));
            }
            if n > MAX_FN_LINES {
                longest.push(format!("{rel}:{line}: fn {name}, {n} lines"));
            }
        }
        strings.extend(
            string_errors(&code.join("\n"))
                .into_iter()
                .map(|f| format!("{rel}: {f}")),
        );
    }
    println!("largest source file: {} lines ({})", largest.0, largest.1);
    println!(
        "longest function: {} lines ({})",
        longest_fn.0, longest_fn.1
    );
    println!("public functions erring with a String: {}", strings.len());
    for s in &strings {
        println!("  {s}");
    }
    assert!(
        biggest.is_empty(),
        "source files over {MAX_FILE_LINES} lines: split them by what they do:\n{}",
        biggest.join("\n")
    );
    assert!(
        longest.is_empty(),
        "functions over {MAX_FN_LINES} lines: split them into named phases:\n{}",
        longest.join("\n")
    );
    assert!(
        strings.len() <= MAX_STRING_ERRORS,
        "{} public functions err with a String (at most {MAX_STRING_ERRORS}): give them an error type that names the value and the fix",
        strings.len()
    );
}

#[test]
fn the_measures_measure() {
    // A long function, a String error and a process start are each seen.
    let f: Vec<String> = std::iter::once("pub fn f() -> Result<(), String> {".to_string())
        .chain((0..130).map(|_| "    let s = \"}\"; // {".to_string()))
        .chain(std::iter::once("}".to_string()))
        .collect();
    assert_eq!(long_functions(&code(&f.join("\n")), 120)[0].0, 132);
    assert_eq!(
        string_errors("pub fn a(x: u8)\n -> Result<u8,\n String> { }"),
        ["a"]
    );
    assert!(string_errors("pub fn a() -> Result<u8, Error> {}").is_empty());
    // Functions of a crate's own (pub(crate), pub(super)) are its inside.
    assert!(string_errors("pub(crate) fn b() -> Result<(), String>;").is_empty());
    let starts = code(
        "use std::process::Command; // run\n#[cfg(test)]\nmod tests {\n use tokio::process;\n}",
    );
    assert_eq!(starts.len(), 1);
    assert!(STARTS.iter().any(|s| starts[0].contains(s)));
}

/// The node binary's modules (`oz0-node/src/<module>`) and the modules
/// each names as `crate::<module>`, from its code (tests left out).
fn node_imports(sources: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (rel, text) in sources {
        let Some(inner) = rel.strip_prefix("oz0-node/src/") else {
            continue;
        };
        if is_test_file(rel) {
            continue;
        }
        let top = inner
            .split('/')
            .next()
            .unwrap_or(inner)
            .trim_end_matches(".rs");
        if top == "main" {
            continue;
        }
        let used = graph.entry(top.to_string()).or_default();
        for line in code(text) {
            let mut rest = line.as_str();
            while let Some(at) = rest.find("crate::") {
                rest = &rest[at + "crate::".len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                if !name.is_empty() && name != top {
                    used.insert(name);
                }
            }
        }
    }
    graph
}

/// A circle in `graph`, if there is one (its modules in order).
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        g: &BTreeMap<String, BTreeSet<String>>,
        v: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == v) {
            return Some(path[i..].to_vec());
        }
        if done.contains(v) {
            return None;
        }
        path.push(v.to_string());
        for w in g.get(v).into_iter().flatten() {
            if let Some(c) = visit(g, w, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(v.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|v| visit(graph, v, &mut Vec::new(), &mut done))
}

/// The node binary's modules import downwards only: a command's module may
/// use shared ones (`flags`, `log`, the daemon), none uses the module that
/// dispatches to it, so each can be read (and moved) on its own.
#[test]
fn the_node_modules_form_no_circle() {
    let graph = node_imports(&sources());
    assert!(graph.len() > 10, "found only {} modules", graph.len());
    if let Some(c) = circle(&graph) {
        panic!(
            "the node's modules import each other in a circle: {} -> {}: move what they share into a module of its own (flags.rs, log.rs)",
            c.join(" -> "),
            c[0]
        );
    }
    // The check finds a circle when there is one.
    let mut g = graph.clone();
    g.entry("flags".into()).or_default().insert("cli".into());
    g.entry("cli".into()).or_default().insert("flags".into());
    assert!(circle(&g).is_some());
}
