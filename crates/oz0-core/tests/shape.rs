//! One door: a process is started only by the files listed in
//! [`STARTERS`]: the platform crates' walls (what implements `Sandbox`
//! and the raw calls under it), and code that itself runs inside a wall
//! (the witness, the guest agents). Anything else that starts a process
//! — a new `Command`, `fork`, `posix_spawn`, `CreateProcessW` — fails
//! here: a run goes through `oz0_core::Sandbox`, and a new wall or
//! runtime is a new implementation of it, listed here with its reason.
//! A listed file that no longer starts a process fails too (the list
//! says what is true).
//!
//! Test files (`tests/`, `tests.rs`, a trailing `#[cfg(test)] mod`) may
//! start what they test and are not counted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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
        "oz0-windows/src/native/imp/psec.rs",
        "PSEC (tier 1) on Windows",
    ),
    // Inside a wall or a guest.
    (
        "oz0-node/src/witness.rs",
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
