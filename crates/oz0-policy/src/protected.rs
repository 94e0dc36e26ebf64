//! Paths inside every writable folder that a run may not change.
//!
//! This is the one list. Agents' settings folders and shell start-up files
//! steer what later runs (and people) execute, and a repository's git files
//! decide what the next `git` command outside the sandbox runs or reads; a
//! hostile run must not plant anything there.
//!
//! # What a run may change in `.git`
//!
//! git's repository layout (gitrepository-layout(5)) has two kinds of
//! entries. Data that ordinary commands write — the object store, refs and
//! their logs, the index, `HEAD` and the other state files of merges,
//! rebases and bisects — which a run may change, so that commits work
//! ([`GIT_WRITABLE`]). And everything git reads to decide what to run or
//! where to look: `config` and `config.worktree` (`core.fsmonitor`,
//! `core.hooksPath`, `core.sshCommand`, filters, includes…), `hooks/`,
//! `commondir` (which moves config and hooks elsewhere), `info/`,
//! `objects/info/alternates`, `worktrees/` and `modules/` (the repositories
//! of linked worktrees and submodules, each with its own config and hooks).
//! The rule, in one place:
//!
//! - `.git` itself, `.git/objects` and `.git/objects/info` cannot be renamed
//!   or replaced ([`GIT_UNMOVABLE`]), so that what is held under them stays
//!   where git looks;
//! - every entry at the top of `.git` that exists and is not in
//!   [`GIT_WRITABLE`] is read-only;
//! - the names of [`GIT_HELD`] and [`GIT_OBJECTS_HELD`] are read-only even
//!   when they do not exist yet (an empty placeholder holds each; `commondir`
//!   is held by one naming `.git` itself, which git takes as no common
//!   directory at all, where an empty one would stop it);
//! - anything else a run creates in `.git`, or any repository it makes or
//!   changes elsewhere, is for the node's look at git after the run.

/// What kind of entry a protected name is when it has to be created as a
/// placeholder (it does not exist yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A folder.
    Dir,
    /// A file.
    File,
    /// A file naming its own folder: `.` and a line break (`commondir`).
    SelfRef,
}

/// Names at the top of every writable folder that are read-only, whether or
/// not they exist when the run starts (a missing one is held by an empty,
/// read-only placeholder for the run's duration).
pub const READ_ONLY_NAMES: &[(&str, Kind)] = &[
    (".oz0", Kind::Dir),
    (".codex", Kind::Dir),
    (".claude", Kind::Dir),
    (".agents", Kind::Dir),
    (".vscode", Kind::Dir),
    (".idea", Kind::Dir),
    (".cursor", Kind::Dir),
    (".gemini", Kind::Dir),
    (".mcp.json", Kind::File),
    (".envrc", Kind::File),
    (".bashrc", Kind::File),
    (".bash_profile", Kind::File),
    (".bash_login", Kind::File),
    (".bash_logout", Kind::File),
    (".profile", Kind::File),
    (".zshrc", Kind::File),
    (".zshenv", Kind::File),
    (".zprofile", Kind::File),
    (".zlogin", Kind::File),
];

/// Agents' and editors' settings among [`READ_ONLY_NAMES`]: an agent or an
/// editor started in any folder reads those there, not only at the top of
/// a writable folder (where they are held). Below the top, the node's look
/// after a run reports each one the run created or changed, and by default
/// renames it aside.
pub const AGENT_SETTINGS: &[&str] = &[
    ".oz0",
    ".codex",
    ".claude",
    ".agents",
    ".vscode",
    ".idea",
    ".cursor",
    ".gemini",
    ".mcp.json",
];

/// A project file that tools on the host execute or obey, and that a run
/// may legitimately edit: reported after a run that changed it (so an
/// operator can review it), never moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostExec {
    /// The folder it must be in (`.cargo` for `.cargo/config.toml`), or
    /// `None` for any.
    pub parent: Option<&'static str>,
    /// Its name.
    pub name: &'static str,
    /// A folder whose every entry counts (`.github/workflows`).
    pub tree: bool,
}

/// Project files host tools execute: CI workflows, pre-commit, git's
/// attributes (filter and diff drivers) and submodule list, make, npm's
/// and cargo's settings, direnv.
pub const HOST_EXEC: &[HostExec] = &[
    HostExec {
        parent: Some(".github"),
        name: "workflows",
        tree: true,
    },
    HostExec {
        parent: None,
        name: ".pre-commit-config.yaml",
        tree: false,
    },
    HostExec {
        parent: None,
        name: ".gitattributes",
        tree: false,
    },
    HostExec {
        parent: None,
        name: ".gitmodules",
        tree: false,
    },
    HostExec {
        parent: None,
        name: "Makefile",
        tree: false,
    },
    HostExec {
        parent: None,
        name: "makefile",
        tree: false,
    },
    HostExec {
        parent: None,
        name: "GNUmakefile",
        tree: false,
    },
    HostExec {
        parent: None,
        name: ".npmrc",
        tree: false,
    },
    HostExec {
        parent: Some(".cargo"),
        name: "config.toml",
        tree: false,
    },
    HostExec {
        parent: Some(".cargo"),
        name: "config",
        tree: false,
    },
    HostExec {
        parent: None,
        name: ".envrc",
        tree: false,
    },
];

/// The repository folder. When it exists it stays writable but cannot be
/// renamed aside or replaced, and what git reads in it is read-only (see
/// the module's documentation). A `.git` that is a file (a worktree's or
/// submodule's pointer) is read-only as a whole.
pub const GIT_DIR: &str = ".git";

/// The entries at the top of `.git` that a run may change: the data of
/// ordinary git commands (gitrepository-layout(5)). Any other entry there
/// is read-only for the run. `objects` is writable, but not
/// [`GIT_OBJECTS_HELD`] in it.
pub const GIT_WRITABLE: &[&str] = &[
    // The object store, refs and their logs.
    "objects",
    "refs",
    "logs",
    "packed-refs",
    "reftable",
    "shallow",
    // The index and HEAD.
    "index",
    "HEAD",
    // State of commits, merges, rebases, cherry-picks, reverts, bisects.
    "ORIG_HEAD",
    "FETCH_HEAD",
    "MERGE_HEAD",
    "MERGE_MSG",
    "MERGE_MODE",
    "MERGE_RR",
    "MERGE_AUTOSTASH",
    "AUTO_MERGE",
    "CHERRY_PICK_HEAD",
    "REVERT_HEAD",
    "REBASE_HEAD",
    "COMMIT_EDITMSG",
    "TAG_EDITMSG",
    "SQUASH_MSG",
    "NOTES_EDITMSG",
    "rebase-merge",
    "rebase-apply",
    "sequencer",
    "rr-cache",
    "lost-found",
    "description",
    "gc.pid",
    "gc.log",
    // Large-file stores of git-lfs and git-annex: data.
    "lfs",
    "annex",
];

/// Prefixes of writable names at the top of `.git` (the split index, bisect
/// and notes-merge state).
pub const GIT_WRITABLE_PREFIXES: &[&str] = &["sharedindex.", "BISECT_", "NOTES_MERGE_"];

/// Whether a run may change `name` at the top of `.git`: it is one of
/// [`GIT_WRITABLE`], starts with one of [`GIT_WRITABLE_PREFIXES`], or is a
/// lock file (`*.lock`) git makes while it writes.
pub fn git_writable(name: &str) -> bool {
    GIT_WRITABLE.contains(&name)
        || GIT_WRITABLE_PREFIXES.iter().any(|p| name.starts_with(p))
        || (name.ends_with(".lock") && name.len() > ".lock".len())
}

/// Names at the top of `.git` held read-only even when missing: each would
/// change what host git runs or where it reads.
pub const GIT_HELD: &[(&str, Kind)] = &[
    ("config", Kind::File),
    ("config.worktree", Kind::File),
    ("hooks", Kind::Dir),
    ("info", Kind::Dir),
    ("modules", Kind::Dir),
    ("worktrees", Kind::Dir),
    ("commondir", Kind::SelfRef),
];

/// Folders under `.git` bound onto themselves for the run (as `.git` is),
/// so that nothing held under them can be moved away with them.
pub const GIT_UNMOVABLE: &[&str] = &["objects", "objects/info"];

/// Names in `.git/objects/info` held read-only even when missing: other
/// object stores git would read (and write through) as this repository's.
pub const GIT_OBJECTS_HELD: &[(&str, Kind)] =
    &[("alternates", Kind::File), ("http-alternates", Kind::File)];

/// The folder of [`GIT_OBJECTS_HELD`], under `.git`.
pub const GIT_OBJECTS_INFO: &str = "objects/info";

/// Every path under `.git` that is read-only whether or not it exists, as
/// `(path relative to .git, kind)`: [`GIT_HELD`], then [`GIT_OBJECTS_HELD`]
/// in [`GIT_OBJECTS_INFO`]. For sandboxes that deny writes by path rules
/// (Seatbelt, PSEC), where holding a name needs no placeholder.
pub fn git_held() -> Vec<(String, Kind)> {
    GIT_HELD
        .iter()
        .map(|(n, k)| (n.to_string(), *k))
        .chain(
            GIT_OBJECTS_HELD
                .iter()
                .map(|(n, k)| (format!("{GIT_OBJECTS_INFO}/{n}"), *k)),
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_components() {
        for (n, _) in READ_ONLY_NAMES
            .iter()
            .chain(GIT_HELD)
            .chain(GIT_OBJECTS_HELD)
        {
            assert!(!n.contains('/') && !n.is_empty() && *n != "." && *n != "..");
        }
        let mut all: Vec<_> = READ_ONLY_NAMES.iter().map(|(n, _)| *n).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), READ_ONLY_NAMES.len(), "no name twice");
        assert!(!all.contains(&GIT_DIR));
        for n in AGENT_SETTINGS {
            assert!(all.contains(n), "{n} is held at the top too");
        }
    }

    /// Nothing git reads to decide what to run is writable, and what
    /// commits write is.
    #[test]
    fn the_git_rule() {
        for (n, _) in GIT_HELD {
            assert!(!git_writable(n), "{n}");
        }
        for n in [
            "hooks", "config", "info", "branches", "remotes", "modules", "x.lock.d",
        ] {
            assert!(!git_writable(n), "{n}");
        }
        for n in [
            "objects",
            "refs",
            "index",
            "HEAD",
            "index.lock",
            "HEAD.lock",
            "sharedindex.0123",
            "BISECT_LOG",
            "COMMIT_EDITMSG",
        ] {
            assert!(git_writable(n), "{n}");
        }
        assert!(!git_writable(".lock"));
        assert_eq!(GIT_UNMOVABLE, ["objects", GIT_OBJECTS_INFO]);
    }
}
