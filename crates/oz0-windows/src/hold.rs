//! Holding a run's writable folders on Windows (Windows only): each
//! protected entry that is missing is made as an empty placeholder for the
//! run's length, and each writable folder, its `.git` and its protected
//! folders are held open without delete sharing, so that none can be
//! renamed aside or removed while the run has them (`crate::plan` lists
//! them: `protected`, `hold_open`). What was made is removed after, when
//! still empty; what the run wrote in it stays.

use std::fs;
use std::path::{Path, PathBuf};

use crate::plan::{Protected, When};
use crate::winpath::WinPath;

/// `FILE_FLAG_BACKUP_SEMANTICS`: what opens a folder as a file.
const FILE_FLAG_BACKUP_SEMANTICS: u32 = 0x0200_0000;
/// `FILE_FLAG_OPEN_REPARSE_POINT`: a link is opened itself, never followed.
pub const FILE_FLAG_OPEN_REPARSE_POINT: u32 = 0x0020_0000;
/// `FILE_SHARE_READ | FILE_SHARE_WRITE`: never `FILE_SHARE_DELETE`, so the
/// folder cannot be renamed or removed while it is held.
const SHARE_NO_DELETE: u32 = 0x1 | 0x2;

/// Why a run's folders could not be held: nothing of the run is started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HoldError {
    /// A link where the node makes, holds or removes something.
    #[error("{} is a symbolic link or junction, which the node never follows in a folder a run writes (a run may have left it): remove it, or name the real folder", .0.display())]
    Link(PathBuf),
    /// A folder on the way to a protected entry could not be made.
    #[error("cannot make {} for a protected entry: {source}", path.display())]
    MakeParent {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A missing protected entry could not be made as a placeholder.
    #[error("cannot hold {} with a placeholder: {source}", path.display())]
    Placeholder {
        /// The entry.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A writable folder could not be opened without delete sharing.
    #[error("cannot hold {} for the run (is another program using it?): {source}", path.display())]
    Open {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Removes what it made (placeholders, then folders, innermost first) and
/// lets go of the held folders when dropped.
#[derive(Default)]
pub struct Held {
    files: Vec<PathBuf>,
    dirs: Vec<PathBuf>,
    held: Vec<fs::File>,
    /// A folder removed whole after (the run's TEMP).
    pub temp: Option<PathBuf>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.held.clear();
        for f in self.files.iter().rev() {
            if fs::symlink_metadata(f).is_ok_and(|m| m.is_file() && m.len() == 0) {
                let _ = fs::remove_file(f);
            }
        }
        for d in self.dirs.iter().rev() {
            // Removed only when still empty (what the run left in it stays).
            let _ = fs::remove_dir(d);
        }
        if let Some(t) = &self.temp {
            let _ = fs::remove_dir_all(t);
        }
    }
}

/// Err when `p` is a symbolic link or junction (Windows' name surrogates):
/// a run may have left it in a folder it writes, and the node never makes,
/// holds or removes anything through one there.
fn no_link(p: &Path) -> Result<(), HoldError> {
    if fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(HoldError::Link(p.to_path_buf()));
    }
    Ok(())
}

/// `path` opened as it is (a link there is opened itself, never its
/// target) and without delete sharing: while the handle lives, neither it
/// nor a folder above it can be renamed aside or removed.
pub fn hold_folder(path: &Path) -> std::io::Result<fs::File> {
    use std::os::windows::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .read(true)
        .share_mode(SHARE_NO_DELETE)
        .custom_flags(FILE_FLAG_BACKUP_SEMANTICS | FILE_FLAG_OPEN_REPARSE_POINT)
        .open(path)
}

/// The `.git` folder a protected entry lies under.
fn git_of(p: &Path) -> Option<&Path> {
    p.ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == ".git"))
}

/// Makes each missing entry of `protected` as an empty placeholder
/// (`.git`'s only where `.git` is a folder; missing folders on the way are
/// made too) and holds each folder of `hold_open` that exists open without
/// delete sharing, recording all of it in `made`, which undoes it when
/// dropped. Refused (Err) at the first entry that cannot be held, and at
/// a protected entry, a folder on its way inside `.git` or a held folder
/// that is a symbolic link or junction (as on Linux, where such a
/// protected name refuses the run).
pub fn hold(
    protected: &[Protected],
    hold_open: &[WinPath],
    made: &mut Held,
) -> Result<(), HoldError> {
    for e in protected {
        let path = PathBuf::from(e.path.as_str());
        // The entry, and inside `.git` every folder on its way from `.git`,
        // is never a link.
        no_link(&path)?;
        if let Some(git) = git_of(&path) {
            for a in path.ancestors().skip(1) {
                no_link(a)?;
                if a == git {
                    break;
                }
            }
        }
        if fs::symlink_metadata(&path).is_ok() {
            continue;
        }
        if e.when == When::IfGitDir
            && !git_of(&path).is_some_and(|g| fs::symlink_metadata(g).is_ok_and(|m| m.is_dir()))
        {
            continue;
        }
        // Missing parents inside `.git` are made too, and removed after.
        if let Some(parent) = path.parent() {
            let mut missing: Vec<&Path> = parent.ancestors().take_while(|a| !a.exists()).collect();
            missing.reverse();
            for d in missing {
                fs::create_dir(d).map_err(|source| HoldError::MakeParent {
                    path: d.to_path_buf(),
                    source,
                })?;
                made.dirs.push(d.to_path_buf());
            }
        }
        if e.kind == "dir" {
            fs::create_dir(&path).map_err(|source| HoldError::Placeholder {
                path: path.clone(),
                source,
            })?;
            made.dirs.push(path);
        } else {
            fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
                .map_err(|source| HoldError::Placeholder {
                    path: path.clone(),
                    source,
                })?;
            made.files.push(path);
        }
    }
    for d in hold_open {
        let path = Path::new(d.as_str());
        no_link(path)?;
        if !fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        // Opened as it is: a link swapped in since the look above is held
        // itself, never its target.
        let f = hold_folder(path).map_err(|source| HoldError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        made.held.push(f);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("oz0-hold-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn w(p: &Path) -> WinPath {
        WinPath::parse(p.to_str().unwrap()).unwrap()
    }

    fn entry(p: &Path, kind: &'static str, when: When) -> Protected {
        Protected {
            path: w(p),
            kind,
            when,
        }
    }

    #[test]
    fn placeholders_are_made_for_the_run_and_removed_after() {
        let root = dir("ph");
        fs::create_dir_all(root.join(".git")).unwrap();
        fs::write(root.join(".envrc"), "kept").unwrap();
        let protected = [
            entry(&root.join(".claude"), "dir", When::Always),
            entry(&root.join(".envrc"), "file", When::Always),
            entry(&root.join(".mcp.json"), "file", When::Always),
            entry(&root.join(".git").join("hooks"), "dir", When::IfGitDir),
            entry(
                &root
                    .join(".git")
                    .join("objects")
                    .join("info")
                    .join("alternates"),
                "file",
                When::IfGitDir,
            ),
        ];
        {
            let mut held = Held::default();
            hold(&protected, &[w(&root)], &mut held).unwrap();
            assert!(root.join(".claude").is_dir());
            assert_eq!(fs::read_to_string(root.join(".envrc")).unwrap(), "kept");
            assert_eq!(fs::metadata(root.join(".mcp.json")).unwrap().len(), 0);
            assert!(root.join(".git/hooks").is_dir());
            assert!(root.join(".git/objects/info/alternates").is_file());
            // A placeholder the run wrote into is kept after.
            fs::write(root.join(".claude").join("left"), "x").unwrap();
        }
        assert!(
            root.join(".claude/left").exists(),
            "what the run left stays"
        );
        assert!(!root.join(".mcp.json").exists());
        assert!(!root.join(".git/hooks").exists());
        assert!(
            !root.join(".git/objects").exists(),
            "folders made on the way go too"
        );
        assert_eq!(fs::read_to_string(root.join(".envrc")).unwrap(), "kept");
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn git_entries_only_where_git_is_a_folder() {
        let root = dir("nogit");
        let protected = [entry(
            &root.join(".git").join("hooks"),
            "dir",
            When::IfGitDir,
        )];
        let mut held = Held::default();
        hold(&protected, &[], &mut held).unwrap();
        assert!(!root.join(".git").exists());
        drop(held);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_held_folder_cannot_be_renamed_aside() {
        let root = dir("held");
        let work = root.join("work");
        fs::create_dir_all(&work).unwrap();
        {
            let mut held = Held::default();
            hold(&[], &[w(&work)], &mut held).unwrap();
            assert!(
                fs::rename(&work, root.join("aside")).is_err(),
                "renamed while held"
            );
            assert!(work.is_dir());
        }
        fs::rename(&work, root.join("aside")).expect("free after");
        fs::remove_dir_all(&root).unwrap();
    }
}
