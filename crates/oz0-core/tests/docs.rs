//! The documents say what the code is.
//!
//! - `docs/ARCHITECTURE.md`'s `crate-arrows` block is every dependency
//!   between the workspace's crates that `cargo metadata` reports (normal
//!   dependencies, with the target when only for one), and its
//!   `crate-layers` block puts each crate on one row, every arrow pointing
//!   to a row below. When a `Cargo.toml` changes, the failure lists the
//!   lines to add and to remove.
//! - Its `unsafe-homes` block is every file under `crates/` that allows
//!   `unsafe_code`, and every crate takes the workspace's lints (which deny
//!   it).
//! - `README.md` stays short (at most 250 lines) and links every page of
//!   `docs/`; every relative link in the README, `docs/` and the crates'
//!   READMEs leads to a file that exists, and to a heading there when it
//!   names one.
//!
//! The workspace has no root package, so these live with `oz0-core`, the
//! crate every platform implements; they read the workspace around it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The longest README a newcomer reads in five minutes.
const README_MAX_LINES: usize = 250;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn read(rel: &str) -> String {
    let path = root().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The lines of the fenced block whose info string is `info`, without
/// `#` comments and blank lines.
fn block(text: &str, info: &str, file: &str) -> Vec<String> {
    let fence = format!("```{info}\n");
    let start = text
        .find(&fence)
        .unwrap_or_else(|| panic!("{file} has no ```{info} block"))
        + fence.len();
    let end = start
        + text[start..]
            .find("\n```")
            .unwrap_or_else(|| panic!("{file}: the ```{info} block never ends"));
    text[start..end]
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

struct Workspace {
    /// Package name → its manifest.
    crates: BTreeMap<String, PathBuf>,
    /// `a -> b` or `a -> b [cfg(…)]`, as the document writes them.
    arrows: BTreeSet<String>,
}

fn workspace() -> Workspace {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(&cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .arg("--manifest-path")
        .arg(root().join("Cargo.toml"))
        .output()
        .unwrap_or_else(|e| panic!("running {} metadata: {e}", cargo.to_string_lossy()));
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let crates: BTreeMap<String, PathBuf> = packages
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                PathBuf::from(p["manifest_path"].as_str().unwrap()),
            )
        })
        .collect();
    // (from, to) → the targets it is declared for; None: every target.
    let mut edges: BTreeMap<(String, String), BTreeSet<Option<String>>> = BTreeMap::new();
    for p in packages {
        for d in p["dependencies"].as_array().unwrap() {
            let to = d["name"].as_str().unwrap();
            if !d["kind"].is_null() || !crates.contains_key(to) {
                continue;
            }
            edges
                .entry((p["name"].as_str().unwrap().to_string(), to.to_string()))
                .or_default()
                .insert(d["target"].as_str().map(str::to_string));
        }
    }
    let arrows = edges
        .into_iter()
        .map(|((from, to), targets)| {
            if targets.contains(&None) {
                format!("{from} -> {to}")
            } else {
                let t: Vec<String> = targets.into_iter().flatten().collect();
                format!("{from} -> {to} [{}]", t.join(" or "))
            }
        })
        .collect();
    Workspace { crates, arrows }
}

#[test]
fn the_architecture_draws_every_crate_arrow_and_no_other() {
    let ws = workspace();
    let doc = read("docs/ARCHITECTURE.md");
    let drawn_lines = block(&doc, "crate-arrows", "docs/ARCHITECTURE.md");
    let drawn: BTreeSet<String> = drawn_lines.iter().cloned().collect();
    let mut problems = Vec::new();
    if drawn.len() != drawn_lines.len() {
        problems.push("a line appears twice".to_string());
    }
    let add: Vec<&String> = ws.arrows.difference(&drawn).collect();
    let remove: Vec<&String> = drawn.difference(&ws.arrows).collect();
    if !add.is_empty() {
        problems.push(format!(
            "add to its ```crate-arrows block (cargo metadata has them):\n  {}",
            add.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n  ")
        ));
    }
    if !remove.is_empty() {
        problems.push(format!(
            "remove from its ```crate-arrows block (no such dependency):\n  {}",
            remove
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n  ")
        ));
    }
    assert!(
        problems.is_empty(),
        "docs/ARCHITECTURE.md's crate arrows are not the workspace's: {}\n\
         (and redraw its crate-layers rows and the crate table if a crate is new or renamed)",
        problems.join("\n")
    );
}

#[test]
fn the_architecture_layers_point_every_arrow_down() {
    let ws = workspace();
    let doc = read("docs/ARCHITECTURE.md");
    let rows = block(&doc, "crate-layers", "docs/ARCHITECTURE.md");
    let mut row_of: BTreeMap<String, usize> = BTreeMap::new();
    let mut problems = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        for name in row.split_whitespace() {
            if row_of.insert(name.to_string(), i).is_some() {
                problems.push(format!("{name} is on two rows: keep one"));
            }
        }
    }
    for name in ws.crates.keys() {
        if !row_of.contains_key(name) {
            problems.push(format!("{name} is on no row: add it to a row"));
        }
    }
    for name in row_of.keys() {
        if !ws.crates.contains_key(name) {
            problems.push(format!(
                "{name} is no crate of the workspace: remove it from its row"
            ));
        }
    }
    for arrow in &ws.arrows {
        let mut parts = arrow.split_whitespace();
        let (from, to) = (parts.next().unwrap(), parts.nth(1).unwrap());
        if let (Some(&a), Some(&b)) = (row_of.get(from), row_of.get(to)) {
            if b <= a {
                problems.push(format!(
                    "{arrow}: {to} (row {}) is not below {from} (row {}): move {to} down or {from} up",
                    b + 1,
                    a + 1
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "docs/ARCHITECTURE.md's ```crate-layers block:\n  {}",
        problems.join("\n  ")
    );
}

/// Whether a line holds an attribute that allows (or expects) `unsafe_code`.
fn allows_unsafe(line: &str) -> bool {
    line.match_indices('#').any(|(i, _)| {
        let attr = line[i + 1..].trim_start_matches('!');
        let Some(inner) = attr.strip_prefix('[') else {
            return false;
        };
        let inner = &inner[..inner.find(']').unwrap_or(inner.len())];
        let inner = inner.trim_start();
        (inner.starts_with("allow(") || inner.starts_with("expect("))
            && inner.contains("unsafe_code")
    })
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "target") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn unsafe_is_allowed_only_where_the_architecture_says() {
    let root = root();
    let doc = read("docs/ARCHITECTURE.md");
    let listed: BTreeSet<String> = block(&doc, "unsafe-homes", "docs/ARCHITECTURE.md")
        .into_iter()
        .collect();
    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files);
    let found: BTreeSet<String> = files
        .iter()
        .filter(|f| {
            std::fs::read_to_string(f)
                .map(|t| t.lines().any(allows_unsafe))
                .unwrap_or(false)
        })
        .map(|f| f.strip_prefix(&root).unwrap().display().to_string())
        .collect();
    let add: Vec<&String> = found.difference(&listed).collect();
    let remove: Vec<&String> = listed.difference(&found).collect();
    assert!(
        add.is_empty() && remove.is_empty(),
        "docs/ARCHITECTURE.md's ```unsafe-homes block is not where unsafe_code is allowed:\n  \
         add (they allow it): {add:?}\n  remove (they do not): {remove:?}"
    );
    // The allowance above means something only while every crate takes
    // the workspace's `unsafe_code = "deny"`.
    let ws = workspace();
    let mut loose = Vec::new();
    for (name, manifest) in &ws.crates {
        let text = std::fs::read_to_string(manifest).unwrap();
        let takes = text
            .split("[lints]")
            .nth(1)
            .and_then(|rest| rest.lines().find(|l| !l.trim().is_empty()))
            .is_some_and(|l| l.replace(' ', "") == "workspace=true");
        if !takes {
            loose.push(name.as_str());
        }
    }
    assert!(
        loose.is_empty(),
        "these crates do not take the workspace's lints (unsafe_code = \"deny\"): {loose:?}: \
         add `[lints]` with `workspace = true` to their Cargo.toml"
    );
}

#[test]
fn the_readme_is_short_and_links_every_docs_page() {
    let readme = read("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, more than {README_MAX_LINES}: move detail to a page of docs/ and link it"
    );
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") && !readme.contains(&format!("](docs/{name}")) {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "README.md links no docs/ page {missing:?}: add a link `[…](docs/NAME)`"
    );
}

/// GitHub's anchor for a heading: lower case, punctuation but `-` and `_`
/// dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.insert(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// The targets of `[text](target)` links outside code.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            match after.find(')') {
                Some(j) => {
                    out.push(after[..j].to_string());
                    rest = &after[j..];
                }
                None => break,
            }
        }
    }
    out
}

#[test]
fn every_relative_link_leads_somewhere() {
    let root = root();
    let mut pages = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let path = entry.unwrap().path().join("README.md");
        if path.exists() {
            pages.push(path);
        }
    }
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, frag) = match link.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (link.as_str(), None),
            };
            let target = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            let shown = page.strip_prefix(&root).unwrap().display();
            if !target.exists() {
                broken.push(format!("{shown}: ({link}): no such file"));
                continue;
            }
            if let Some(frag) = frag {
                let text = std::fs::read_to_string(&target).unwrap_or_default();
                if !anchors(&text).contains(frag) {
                    broken.push(format!("{shown}: ({link}): no heading with that anchor"));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "broken links:\n  {}",
        broken.join("\n  ")
    );
}

#[test]
fn the_checks_read_what_they_mean() {
    assert_eq!(
        anchor(" One node: `plugin check` and `plugin call`"),
        "one-node-plugin-check-and-plugin-call"
    );
    assert_eq!(anchor(" Tier 2: microVMs"), "tier-2-microvms");
    assert_eq!(
        anchor(" `oz0-node` exit statuses"),
        "oz0-node-exit-statuses"
    );
    // Built at run time, so that this file allows nothing itself.
    let lint = "unsafe_code";
    assert!(allows_unsafe(&format!("#![allow({lint})]")));
    assert!(allows_unsafe(&format!(
        "fn f() {{ #[allow(dead_code, {lint})] let _ = 1; }}"
    )));
    assert!(!allows_unsafe("#![deny(unsafe_code)]"));
    assert!(!allows_unsafe(
        "// unsafe_code is allowed here for `no_mangle`"
    ));
    assert_eq!(
        links("see [a](b.md#c) and [d](e) `x`"),
        vec!["b.md#c".to_string(), "e".to_string()]
    );
}
