//! Paths inside every writable folder that a run may not change.
//!
//! This is the one list. Agents' settings folders and shell start-up files
//! steer what later runs (and people) execute, and a repository's hooks and
//! config run code on the next `git` command outside the sandbox; a hostile
//! run must not plant anything there.

/// What kind of entry a protected name is when it has to be created as a
/// placeholder (it does not exist yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A folder.
    Dir,
    /// A file.
    File,
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

/// The repository folder. When it exists it stays writable but cannot be
/// renamed aside or replaced, and the entries of [`GIT_READ_ONLY`] inside it
/// are read-only (placeholders when missing). A `.git` that is a file (a
/// worktree's or submodule's pointer) is read-only as a whole.
pub const GIT_DIR: &str = ".git";

/// Entries of `.git` that are read-only.
pub const GIT_READ_ONLY: &[(&str, Kind)] = &[("hooks", Kind::Dir), ("config", Kind::File)];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_components() {
        for (n, _) in READ_ONLY_NAMES.iter().chain(GIT_READ_ONLY) {
            assert!(!n.contains('/') && !n.is_empty() && *n != "." && *n != "..");
        }
        let mut all: Vec<_> = READ_ONLY_NAMES.iter().map(|(n, _)| *n).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), READ_ONLY_NAMES.len(), "no name twice");
        assert!(!all.contains(&GIT_DIR));
    }
}
