//! The look after a PSEC run at what it left in its writable folders that
//! the host's git, an agent or an editor would run or follow: reported,
//! never moved.
//!
//! It runs when every process of the run is gone (its job ended) and its
//! folders are still its claims, so nothing of the run changes them
//! meanwhile. Each writable folder is walked whole, never through a link:
//! an entry that is a reparse point (a symbolic link, a junction or any
//! other) is itself a finding and is not entered.
//!
//! # What it reports
//!
//! - a link anywhere in the writable folders;
//! - below the top of a writable folder: a repository (a `.git` folder or
//!   file, or a folder git would take for a git directory: `HEAD` beside
//!   `objects`, `refs` or `commondir`), and agents' and editors' settings
//!   (`oz0_policy::protected::AGENT_SETTINGS`); names compared as Windows
//!   compares them (any letter case, trailing dots and spaces dropped, and
//!   `.git`'s short name `GIT~1`);
//! - in every repository met, the top's own `.git` too: a sequencer in
//!   progress whose list runs commands (`rebase-merge/git-rebase-todo`,
//!   `sequencer/todo`, read as git reads it), which `git rebase
//!   --continue` would run;
//! - whatever it cannot list, read or examine, and every folder its bounds
//!   leave unwalked ([`MAX_ENTRIES`], [`MAX_DEPTH`], [`MAX_TIME`]): what the
//!   look could not prove clean is a finding, never "nothing there".
//!
//! # Why it moves nothing, and how it knows what was there before
//!
//! On Linux a finding is the run's when its status changed at or after
//! the run's start (`ctime`, which no process can set back), and the look
//! renames it aside. Windows keeps no such time: a process that may write
//! a file may also set its change time (`FileBasicInformation`). Renaming
//! a repository aside could break the user's tree (a submodule's
//! checkout, a vendored repository), so the look moves nothing. What was
//! there before is known by content instead ([`before`]): the look before
//! the run takes a fingerprint of each finding, and the look after it
//! tells only what is new or changed, counting the rest
//! ([`Look::unchanged`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use oz0_policy::protected::AGENT_SETTINGS;

mod before;
pub use before::{before, Before, MAX_PRINT_BYTES, MAX_PRINT_ENTRIES};

/// Entries examined at most, over all the run's folders.
pub const MAX_ENTRIES: usize = 500_000;
/// Levels of folders entered at most below a writable folder.
pub const MAX_DEPTH: usize = 64;
/// The longest look.
pub const MAX_TIME: Duration = Duration::from_secs(10);
/// The largest sequencer list read.
const MAX_LIST: u64 = 1024 * 1024;

/// What a finding is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum What {
    /// A reparse point: a symbolic link, a junction or another.
    Link,
    /// A repository below the top of a writable folder.
    Repository,
    /// Agents' or editors' settings below the top of a writable folder.
    AgentSettings,
    /// A sequencer in progress whose list runs commands.
    TodoRunsCommands,
    /// What could not be listed, read or examined, or was left unwalked
    /// by the look's bounds: why.
    Unexamined(String),
}

impl What {
    /// How a finding is told.
    pub fn describe(&self) -> String {
        match self {
            What::Link => "a link (git and editors follow it)".into(),
            What::Repository => "a repository (its config and hooks run with git there)".into(),
            What::AgentSettings => {
                "agents' or editors' settings (read by one started there)".into()
            }
            What::TodoRunsCommands => {
                "a rebase in progress whose list runs commands (on `git rebase --continue`)".into()
            }
            What::Unexamined(why) => format!("not examined ({why})"),
        }
    }
}

/// One finding: where, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The entry.
    pub path: PathBuf,
    /// What it is.
    pub what: What,
}

/// What the look found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Look {
    /// Its findings, in the order met.
    pub findings: Vec<Finding>,
    /// Entries examined.
    pub entries: usize,
    /// Whether every folder was walked whole.
    pub complete: bool,
    /// Findings left out because the look before the run found them with
    /// the same content ([`Look::since`]).
    pub unchanged: usize,
}

impl Look {
    /// The findings as lines for the run's warnings, at most `max` (and a
    /// line saying how many more), each path shown escaped (a name the run
    /// chose never reaches a terminal raw).
    pub fn lines(&self, max: usize) -> Vec<String> {
        let mut out: Vec<String> = self
            .findings
            .iter()
            .take(max)
            .map(|f| {
                format!(
                    "the look after the run found {}: {:?}",
                    f.what.describe(),
                    f.path
                )
            })
            .collect();
        if self.findings.len() > max {
            out.push(format!(
                "the look after the run found {} more (reported, not moved)",
                self.findings.len() - max
            ));
        }
        out
    }
}

/// The bounds of one look.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// [`MAX_ENTRIES`].
    pub entries: usize,
    /// [`MAX_DEPTH`].
    pub depth: usize,
    /// [`MAX_TIME`].
    pub time: Duration,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            entries: MAX_ENTRIES,
            depth: MAX_DEPTH,
            time: MAX_TIME,
        }
    }
}

/// Whether the entry of `meta` is a link of any kind, never to be entered.
#[cfg(windows)]
pub fn is_link(meta: &std::fs::Metadata) -> bool {
    use std::os::windows::fs::MetadataExt;
    /// `FILE_ATTRIBUTE_REPARSE_POINT`.
    const REPARSE_POINT: u32 = 0x400;
    meta.file_attributes() & REPARSE_POINT != 0 || meta.file_type().is_symlink()
}

/// Whether the entry of `meta` is a link of any kind, never to be entered.
#[cfg(not(windows))]
pub fn is_link(meta: &std::fs::Metadata) -> bool {
    meta.file_type().is_symlink()
}

/// Whether `name` names the entry `want` as Windows compares names: in
/// any letter case, and with the trailing dots and spaces Windows drops
/// (`.Claude`, `.vscode.` are `.claude` and `.vscode` to a program).
fn same_name(name: &str, want: &str) -> bool {
    name.trim_end_matches(['.', ' ']).eq_ignore_ascii_case(want)
}

/// Whether `name` is a repository's `.git` to git on Windows: in any
/// letter case, with trailing dots and spaces, or its short name `GIT~1`.
fn is_dot_git(name: &str) -> bool {
    same_name(name, ".git") || name.eq_ignore_ascii_case("git~1")
}

struct Walk {
    look: Look,
    bounds: Bounds,
    start: Instant,
}

impl Walk {
    fn found(&mut self, path: PathBuf, what: What) {
        self.look.findings.push(Finding { path, what });
    }

    /// Why the look may go no further, if it may not.
    fn over(&self, depth: usize) -> Option<String> {
        if self.look.entries >= self.bounds.entries {
            Some(format!(
                "not walked: the look's bound of {} entries",
                self.bounds.entries
            ))
        } else if self.start.elapsed() >= self.bounds.time {
            Some(format!(
                "not walked: the look's bound of {} s",
                self.bounds.time.as_secs()
            ))
        } else if depth > self.bounds.depth {
            Some(format!(
                "not walked: the look's bound of {} levels",
                self.bounds.depth
            ))
        } else {
            None
        }
    }

    /// The sequencer lists of the git folder `git`.
    fn todos(&mut self, git: &Path) {
        for (dir, list) in [("rebase-merge", "git-rebase-todo"), ("sequencer", "todo")] {
            let path = git.join(dir).join(list);
            match std::fs::symlink_metadata(&path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => self.found(path, What::Unexamined(e.to_string())),
                // A link there is reported where the walk meets it.
                Ok(m) if is_link(&m) => {}
                Ok(m) if m.len() > MAX_LIST => self.found(
                    path,
                    What::Unexamined(format!("a list of {} bytes, over {MAX_LIST}", m.len())),
                ),
                Ok(_) => match std::fs::read(&path) {
                    Ok(text) if oz0_policy::gittodo::runs_commands(&text) => {
                        self.found(git.join(dir), What::TodoRunsCommands);
                    }
                    Ok(_) => {}
                    Err(e) => self.found(path, What::Unexamined(e.to_string())),
                },
            }
        }
    }

    /// Walks `top` (a writable folder), depth first, one folder's names at
    /// a time.
    fn folder(&mut self, top: &Path) {
        match std::fs::symlink_metadata(top) {
            Ok(m) if is_link(&m) => return self.found(top.to_path_buf(), What::Link),
            Ok(m) if m.is_dir() => {}
            Ok(_) => return,
            Err(e) => return self.found(top.to_path_buf(), What::Unexamined(e.to_string())),
        }
        let mut stack: Vec<(PathBuf, usize)> = vec![(top.to_path_buf(), 0)];
        while let Some((dir, depth)) = stack.pop() {
            if let Some(why) = self.over(depth) {
                self.found(dir, What::Unexamined(why));
                self.look.complete = false;
                continue;
            }
            let entries = match std::fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) => {
                    self.found(dir, What::Unexamined(e.to_string()));
                    continue;
                }
            };
            let mut folders: Vec<PathBuf> = Vec::new();
            // Whether it holds a `HEAD`, and the store git wants beside it.
            let (mut head, mut store) = (false, false);
            for entry in entries {
                // A folder of more names than the bound is not listed to
                // its end: what was not read is unexamined.
                if let Some(why) = self.over(depth) {
                    self.found(
                        dir.clone(),
                        What::Unexamined(format!("{why}, partly listed")),
                    );
                    self.look.complete = false;
                    break;
                }
                self.look.entries += 1;
                let entry = match entry {
                    Ok(e) => e,
                    Err(e) => {
                        self.found(dir.clone(), What::Unexamined(e.to_string()));
                        break;
                    }
                };
                let path = entry.path();
                let name = entry.file_name().to_string_lossy().into_owned();
                let meta = match entry.metadata() {
                    Ok(m) => m,
                    Err(e) => {
                        self.found(path, What::Unexamined(e.to_string()));
                        continue;
                    }
                };
                if is_link(&meta) {
                    self.found(path, What::Link);
                    continue;
                }
                let below_top = depth > 0;
                let git = is_dot_git(&name);
                // The top's own `.git` is no finding (the wall held it).
                if git && below_top {
                    self.found(path.clone(), What::Repository);
                } else if below_top && AGENT_SETTINGS.iter().any(|a| same_name(&name, a)) {
                    self.found(path.clone(), What::AgentSettings);
                }
                if meta.is_dir() {
                    if git {
                        self.todos(&path);
                    }
                    folders.push(path);
                }
                head |= same_name(&name, "HEAD");
                store |= ["objects", "refs", "commondir"]
                    .iter()
                    .any(|n| same_name(&name, n));
            }
            // A folder git would take for a git directory (a bare
            // repository, or one named otherwise).
            let is_git_dir = head && store;
            let named_git = dir
                .file_name()
                .is_some_and(|n| is_dot_git(&n.to_string_lossy()));
            if is_git_dir && !named_git {
                self.found(dir.clone(), What::Repository);
                self.todos(&dir);
            }
            stack.extend(folders.into_iter().map(|f| (f, depth + 1)));
        }
    }
}

/// Looks at `folders` (the run's writable folders) within `bounds`.
pub fn look(folders: &[PathBuf], bounds: Bounds) -> Look {
    let mut w = Walk {
        look: Look {
            complete: true,
            ..Look::default()
        },
        bounds,
        start: Instant::now(),
    };
    for f in folders {
        w.folder(f);
    }
    w.look
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) struct Tree(pub(super) PathBuf);

    impl Tree {
        pub(super) fn new(tag: &str) -> Tree {
            let d = std::env::temp_dir().join(format!("oz0-look-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            Tree(d)
        }

        pub(super) fn file(&self, rel: &str, text: &str) -> &Tree {
            let p = self.0.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
            self
        }

        pub(super) fn dir(&self, rel: &str) -> &Tree {
            std::fs::create_dir_all(self.0.join(rel)).unwrap();
            self
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    pub(super) fn found(l: &Look) -> Vec<(String, What)> {
        let mut v: Vec<(String, What)> = l
            .findings
            .iter()
            .map(|f| {
                (
                    f.path.file_name().unwrap().to_string_lossy().into_owned(),
                    f.what.clone(),
                )
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    #[test]
    fn a_clean_tree_and_its_own_repository_are_no_finding() {
        let t = Tree::new("clean");
        t.file(".git/HEAD", "ref: refs/heads/main\n")
            .dir(".git/objects")
            .dir(".git/refs")
            .file(".git/config", "[core]\n")
            .file("src/main.rs", "fn main() {}\n")
            .file(".vscode/settings.json", "{}");
        let l = look(std::slice::from_ref(&t.0), Bounds::default());
        assert_eq!(found(&l), vec![]);
        assert!(l.complete);
        assert!(l.entries >= 6, "{}", l.entries);
    }

    #[test]
    fn repositories_settings_and_todo_lists_below_the_top_are_found() {
        let t = Tree::new("found");
        t.file(".git/HEAD", "ref: refs/heads/main\n")
            .dir(".git/objects")
            .file(
                ".git/rebase-merge/git-rebase-todo",
                "pick 1 a\nexec calc.exe\n",
            )
            .file("vendor/lib/.git/config", "[core]\n\tfsmonitor = evil\n")
            .file("sub/.git", "gitdir: ../elsewhere\n")
            .file("bare/HEAD", "ref: refs/heads/main\n")
            .dir("bare/refs")
            .file("bare/sequencer/todo", "x evil\n")
            .file("deep/er/.claude/settings.json", "{}")
            .file("ok/.git/rebase-merge/git-rebase-todo", "pick 1 a\n");
        let l = look(std::slice::from_ref(&t.0), Bounds::default());
        assert_eq!(
            found(&l),
            vec![
                (".claude".into(), What::AgentSettings),
                (".git".into(), What::Repository),
                (".git".into(), What::Repository),
                (".git".into(), What::Repository),
                ("bare".into(), What::Repository),
                ("rebase-merge".into(), What::TodoRunsCommands),
                ("sequencer".into(), What::TodoRunsCommands),
            ]
        );
        assert!(l.complete);
        let lines = l.lines(3);
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert!(lines[3].contains("4 more"), "{lines:?}");
    }

    #[test]
    fn names_are_compared_as_windows_compares_them() {
        for n in [".git", ".GIT", ".Git.", ".git .", "GIT~1", "git~1"] {
            assert!(is_dot_git(n), "{n:?}");
        }
        for n in [".gitignore", "git", ".git~1", "GIT~2", "x.git"] {
            assert!(!is_dot_git(n), "{n:?}");
        }
        assert!(same_name(".Claude", ".claude") && same_name(".vscode. ", ".vscode"));
        assert!(!same_name(".claude2", ".claude"));
        let t = Tree::new("case");
        t.file("a/.GIT/config", "[core]\n")
            .file("b/GIT~1/HEAD", "x")
            .file("c/.Claude/settings.json", "{}")
            .file("d/Head", "x")
            .dir("d/OBJECTS");
        let l = look(std::slice::from_ref(&t.0), Bounds::default());
        assert_eq!(
            found(&l),
            vec![
                (".Claude".into(), What::AgentSettings),
                (".GIT".into(), What::Repository),
                ("GIT~1".into(), What::Repository),
                ("d".into(), What::Repository),
            ]
        );
    }

    #[test]
    fn what_its_bounds_leave_is_a_finding_and_the_look_says_it_is_not_complete() {
        let t = Tree::new("bounds");
        t.file("a/b/c/d/e.txt", "x");
        let l = look(
            std::slice::from_ref(&t.0),
            Bounds {
                depth: 2,
                ..Bounds::default()
            },
        );
        assert!(!l.complete);
        assert_eq!(l.findings.len(), 1, "{:?}", l.findings);
        assert!(l.findings[0].path.ends_with("a/b/c"), "{:?}", l.findings);
        assert!(matches!(&l.findings[0].what, What::Unexamined(w) if w.contains("2 levels")));
        let l = look(
            std::slice::from_ref(&t.0),
            Bounds {
                entries: 2,
                ..Bounds::default()
            },
        );
        assert!(!l.complete && !l.findings.is_empty(), "{l:?}");
        assert!(l
            .findings
            .iter()
            .all(|f| matches!(&f.what, What::Unexamined(w) if w.contains("2 entries"))));
        // A folder of more names than the bound stops being listed there.
        let wide = Tree::new("wide");
        for i in 0..50 {
            wide.file(&format!("f{i}"), "x");
        }
        let l = look(
            std::slice::from_ref(&wide.0),
            Bounds {
                entries: 10,
                ..Bounds::default()
            },
        );
        assert_eq!(l.entries, 10);
        assert!(!l.complete);
        assert!(
            matches!(&l.findings[..], [Finding { what: What::Unexamined(w), .. }] if w.contains("partly listed")),
            "{l:?}"
        );
    }

    #[test]
    fn a_missing_folder_is_unexamined_never_clean() {
        let t = Tree::new("missing");
        let l = look(&[t.0.join("gone")], Bounds::default());
        assert!(
            matches!(
                &l.findings[..],
                [Finding {
                    what: What::Unexamined(_),
                    ..
                }]
            ),
            "{l:?}"
        );
    }

    #[test]
    fn a_name_the_run_chose_reaches_the_warning_escaped() {
        let l = Look {
            findings: vec![Finding {
                path: PathBuf::from("w/\u{1b}]0;owned\u{7}/.git"),
                what: What::Repository,
            }],
            entries: 1,
            complete: true,
            unchanged: 0,
        };
        let line = &l.lines(10)[0];
        assert!(
            !line.contains('\u{1b}') && !line.contains('\u{7}'),
            "{line:?}"
        );
        assert!(line.contains("\\u{1b}"), "{line:?}");
    }

    #[cfg(unix)]
    #[test]
    fn a_link_is_found_and_never_entered() {
        let t = Tree::new("link");
        t.file("outside/.git/HEAD", "x").dir("inside");
        std::os::unix::fs::symlink(t.0.join("outside"), t.0.join("inside/to")).unwrap();
        let l = look(&[t.0.join("inside")], Bounds::default());
        assert_eq!(found(&l), vec![("to".into(), What::Link)]);
        let l = look(&[t.0.join("inside/to")], Bounds::default());
        assert_eq!(found(&l), vec![("to".into(), What::Link)]);
    }
}
