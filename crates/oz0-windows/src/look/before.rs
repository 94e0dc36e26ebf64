//! The look before a run, so that the look after it tells only what the
//! run made or changed.
//!
//! Windows keeps no time a run cannot set back (see the module above), so
//! what was there before the run is known by its content: before the run
//! starts, the look walks the writable folders as it will after, and takes
//! a fingerprint of each finding that names a thing (a link, a repository,
//! agents' settings): SHA-256 over the whole of it, every name, kind and
//! size below it, every file's bytes and every link's target, read without
//! following a link. After the run, a finding at the same path, of the
//! same kind, whose fingerprint is the same, is counted and not told again.
//! Anything else is told: what is new, what changed, and whatever could not
//! be fingerprinted whole, before or after (its bounds: [`MAX_PRINT_BYTES`],
//! [`MAX_PRINT_ENTRIES`], the look's own depth and time).
//!
//! One part is fingerprinted by names and sizes only: the files below an
//! `objects` folder of a repository (its object store, which can be large).
//! Git names what is stored there by its hash and runs none of it; what git
//! runs comes from the repository's config and hooks, which are read whole.
//!
//! A sequencer list that runs commands, and whatever the look could not
//! examine, are told after every run.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

use sha2::{Digest, Sha256};

use super::{is_link, look, same_name, Bounds, Look, What, MAX_DEPTH};

/// Bytes of files read at most for the fingerprints of one look.
pub const MAX_PRINT_BYTES: u64 = 64 << 20;
/// Entries fingerprinted at most in one look.
pub const MAX_PRINT_ENTRIES: usize = 100_000;

/// The findings of the look before a run, each with its fingerprint.
#[derive(Debug, Default)]
pub struct Before {
    prints: HashMap<PathBuf, (What, [u8; 32])>,
}

impl Before {
    /// How many findings it holds a fingerprint of.
    pub fn len(&self) -> usize {
        self.prints.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.prints.is_empty()
    }
}

/// What is left of one look's fingerprinting.
struct Budget {
    bytes: u64,
    entries: usize,
    until: Instant,
}

impl Budget {
    fn new(bounds: Bounds, bytes: u64) -> Budget {
        Budget {
            bytes,
            entries: MAX_PRINT_ENTRIES,
            until: Instant::now() + bounds.time,
        }
    }

    /// One more entry met (a finding's own, or a name listed), if the
    /// bounds allow it.
    fn entry(&mut self) -> Option<()> {
        self.entries = self.entries.checked_sub(1)?;
        self.in_time()
    }

    /// Whether there is time left.
    fn in_time(&self) -> Option<()> {
        (Instant::now() < self.until).then_some(())
    }

    /// `n` more bytes, if the bounds allow them.
    fn read(&mut self, n: u64) -> Option<()> {
        self.bytes = self.bytes.checked_sub(n)?;
        Some(())
    }
}

/// The look at `folders` before a run, within `bounds`.
pub fn before(folders: &[PathBuf], bounds: Bounds) -> Before {
    before_within(folders, bounds, MAX_PRINT_BYTES)
}

fn before_within(folders: &[PathBuf], bounds: Bounds, bytes: u64) -> Before {
    let l = look(folders, bounds);
    let mut budget = Budget::new(bounds, bytes);
    let prints = l
        .findings
        .into_iter()
        .filter_map(|f| {
            let p = print(&f.path, &f.what, &mut budget)?;
            Some((f.path, (f.what, p)))
        })
        .collect();
    Before { prints }
}

impl Look {
    /// This look less what `before` holds unchanged (the same kind at the
    /// same path, with the same fingerprint now), which is counted in
    /// [`Look::unchanged`].
    pub fn since(self, before: &Before, bounds: Bounds) -> Look {
        self.since_within(before, bounds, MAX_PRINT_BYTES)
    }

    fn since_within(mut self, before: &Before, bounds: Bounds, bytes: u64) -> Look {
        let mut budget = Budget::new(bounds, bytes);
        let mut told = Vec::with_capacity(self.findings.len());
        for f in std::mem::take(&mut self.findings) {
            let same = before.prints.get(&f.path).is_some_and(|(what, was)| {
                *what == f.what && print(&f.path, &f.what, &mut budget).as_ref() == Some(was)
            });
            if same {
                self.unchanged += 1;
            } else {
                told.push(f);
            }
        }
        self.findings = told;
        self
    }
}

/// The fingerprint of what `path` holds, for a finding of `what`; None
/// when it names nothing to fingerprint, or cannot be read whole within
/// the budget.
fn print(path: &Path, what: &What, budget: &mut Budget) -> Option<[u8; 32]> {
    let repository = match what {
        What::Repository => true,
        What::Link | What::AgentSettings => false,
        What::TodoRunsCommands | What::Unexamined(_) => return None,
    };
    let mut h = Sha256::new();
    // The finding itself; what is below it is counted as it is listed.
    budget.entry()?;
    entry(path, OsString::new(), repository, false, 0, &mut h, budget)?;
    Some(h.finalize().into())
}

/// Feeds `h` with a length and the bytes.
fn framed(h: &mut Sha256, bytes: &[u8]) {
    h.update((bytes.len() as u64).to_le_bytes());
    h.update(bytes);
}

/// Feeds `h` with the entry at `path` (`rel` below the finding) and all
/// below it, in name order, never through a link.
fn entry(
    path: &Path,
    rel: OsString,
    repository: bool,
    in_objects: bool,
    depth: usize,
    h: &mut Sha256,
    budget: &mut Budget,
) -> Option<()> {
    budget.in_time()?;
    if depth > MAX_DEPTH {
        return None;
    }
    framed(h, rel.as_encoded_bytes());
    let meta = std::fs::symlink_metadata(path).ok()?;
    if is_link(&meta) {
        h.update(b"L");
        framed(
            h,
            std::fs::read_link(path)
                .ok()?
                .as_os_str()
                .as_encoded_bytes(),
        );
    } else if meta.is_dir() {
        h.update(b"D");
        let mut names = Vec::new();
        for e in std::fs::read_dir(path).ok()? {
            budget.entry()?;
            names.push(e.ok()?.file_name());
        }
        names.sort();
        h.update((names.len() as u64).to_le_bytes());
        for n in names {
            let objects = repository && same_name(&n.to_string_lossy(), "objects");
            let mut below = rel.clone();
            below.push("/");
            below.push(&n);
            entry(
                &path.join(&n),
                below,
                repository,
                in_objects || objects,
                depth + 1,
                h,
                budget,
            )?;
        }
    } else if meta.is_file() {
        h.update(b"F");
        h.update(meta.len().to_le_bytes());
        if !in_objects {
            budget.read(meta.len())?;
            let mut bytes = Vec::new();
            std::fs::File::open(path)
                .ok()?
                .take(meta.len() + 1)
                .read_to_end(&mut bytes)
                .ok()?;
            // A file that grew or shrank since is not read whole.
            (bytes.len() as u64 == meta.len()).then_some(())?;
            h.update(&bytes);
        }
    } else {
        h.update(b"O");
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::super::tests::{found, Tree};
    use super::*;

    fn after(t: &Tree, before: &Before) -> Look {
        look(std::slice::from_ref(&t.0), Bounds::default()).since(before, Bounds::default())
    }

    fn submodule(t: &Tree) -> &Tree {
        t.file(".git/HEAD", "ref: refs/heads/main\n")
            .dir(".git/objects")
            .file(".git/modules/lib/HEAD", "ref: refs/heads/main\n")
            .file(".git/modules/lib/config", "[core]\n")
            .file(".git/modules/lib/objects/ab/cdef", "blob")
            .dir(".git/modules/lib/refs")
            .file("lib/.git", "gitdir: ../.git/modules/lib\n")
            .file("app/.vscode/settings.json", "{}")
    }

    #[test]
    fn what_was_there_unchanged_is_not_told_again() {
        let t = Tree::new("before-same");
        submodule(&t);
        let b = before(std::slice::from_ref(&t.0), Bounds::default());
        assert_eq!(b.len(), 3, "{b:?}");
        // The run makes a repository of its own and a file elsewhere.
        t.file("src/main.rs", "fn main() {}\n")
            .file("new/.git/config", "[core]\n");
        let l = after(&t, &b);
        assert_eq!(found(&l), vec![(".git".into(), What::Repository)], "{l:?}");
        assert!(l.findings[0].path.ends_with("new/.git"), "{l:?}");
        assert_eq!(l.unchanged, 3);
    }

    #[test]
    fn what_changed_is_told() {
        for (rel, text) in [
            (
                ".git/modules/lib/config",
                "[core]\n\tfsmonitor = calc.exe\n",
            ),
            (".git/modules/lib/hooks/post-checkout", "calc.exe\n"),
            ("lib/.git", "gitdir: C:/elsewhere\n"),
            ("app/.vscode/tasks.json", "{}"),
            ("app/.vscode/settings.json", "{\"x\": 1}"),
            // A new object is a new name in the store.
            (".git/modules/lib/objects/ab/0123", "blob"),
        ] {
            let t = Tree::new("before-changed");
            submodule(&t);
            let b = before(std::slice::from_ref(&t.0), Bounds::default());
            t.file(rel, text);
            let l = after(&t, &b);
            assert_eq!(l.findings.len(), 1, "{rel}: {l:?}");
            assert_eq!(l.unchanged, 2, "{rel}: {l:?}");
        }
    }

    #[test]
    fn an_objects_content_is_printed_by_its_size_alone() {
        let t = Tree::new("before-objects");
        submodule(&t);
        let b = before(std::slice::from_ref(&t.0), Bounds::default());
        t.file(".git/modules/lib/objects/ab/cdef", "BLOB");
        assert_eq!(after(&t, &b).unchanged, 3);
    }

    #[test]
    fn what_could_not_be_printed_whole_is_told_and_lists_are_told_always() {
        let t = Tree::new("before-budget");
        submodule(&t);
        t.file(
            ".git/modules/lib/rebase-merge/git-rebase-todo",
            "exec calc.exe\n",
        );
        // 8 bytes: the gitfile (27 bytes) and the config are over it.
        let b = before_within(std::slice::from_ref(&t.0), Bounds::default(), 8);
        let l = look(std::slice::from_ref(&t.0), Bounds::default()).since_within(
            &b,
            Bounds::default(),
            MAX_PRINT_BYTES,
        );
        let told: Vec<What> = l.findings.iter().map(|f| f.what.clone()).collect();
        assert!(told.contains(&What::TodoRunsCommands), "{l:?}");
        assert_eq!(
            told.iter().filter(|w| **w == What::Repository).count(),
            2,
            "{l:?}"
        );
        // The settings' 2 bytes fit: unchanged, not told.
        assert_eq!(l.unchanged, 1, "{l:?}");
        // Printed whole before, not after: told.
        let b = before(std::slice::from_ref(&t.0), Bounds::default());
        let l = look(std::slice::from_ref(&t.0), Bounds::default()).since_within(
            &b,
            Bounds::default(),
            8,
        );
        assert_eq!(l.unchanged, 1, "{l:?}");
        assert!(l.findings.iter().any(|f| f.what == What::TodoRunsCommands));
    }

    #[cfg(unix)]
    #[test]
    fn a_link_is_known_by_its_target() {
        let t = Tree::new("before-link");
        t.dir("a").dir("b");
        std::os::unix::fs::symlink(t.0.join("a"), t.0.join("here")).unwrap();
        let b = before(std::slice::from_ref(&t.0), Bounds::default());
        assert_eq!(after(&t, &b).unchanged, 1);
        std::fs::remove_file(t.0.join("here")).unwrap();
        std::os::unix::fs::symlink(t.0.join("b"), t.0.join("here")).unwrap();
        let l = after(&t, &b);
        assert_eq!((l.unchanged, l.findings.len()), (0, 1), "{l:?}");
    }
}
