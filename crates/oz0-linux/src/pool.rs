//! Spare empty folders for folder placeholders, kept in the node's data
//! directory (`<data-dir>/placeholders`, mode 0700, never visible to a run).
//!
//! A folder placeholder is moved into place from here and moved back after
//! the run, instead of being made and removed each time. Both are a rename:
//! on a file system that allocates a block for every new folder and, mounted
//! with `discard`, waits for the disk to discard it at every removal (ext4
//! on many cloud disks), making and removing the eight folder placeholders
//! of an empty work folder took about 2 ms; moving them takes about 0.3 ms.
//!
//! A rename works only within one mount. A writable folder on another mount
//! than the data directory gets its placeholders made and removed as before
//! (the first rename says `EXDEV`). Nothing is moved through a link: the pool
//! and every placeholder folder are opened without following any, and each
//! rename is `RENAME_NOREPLACE`, so it never replaces what is there.
//!
//! What comes back must be empty: a placeholder is a mount point inside the
//! run, read-only there, but another process on the host could write into
//! it meanwhile. A folder that is not empty is left where it is; one that
//! turns out not to be empty once moved (written between the check and the
//! move) is moved back, or, if its place was taken, left in the pool with a
//! warning naming where it is. Nothing written there is removed.

use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{renameat_with, OFlags, RenameFlags, CWD};
use rustix::io::Errno;

use crate::hold::no_links;

/// The pool's folder, under the node's data directory.
pub const POOL_DIR: &str = "placeholders";

/// At most this many spare folders are kept; more are removed.
const MAX_SPARE: usize = 256;

/// The pool of one node process.
pub struct Pool {
    dir: OwnedFd,
    /// The spare folders, as far as this process knows: listed when the
    /// pool was opened, taken from the back, given back onto it.
    names: Vec<OsString>,
    /// Prefix of names given back (unique to the run).
    tag: String,
    given: usize,
}

/// What giving a placeholder folder back did.
#[derive(Debug, PartialEq, Eq)]
pub enum Back {
    /// It is in the pool now.
    Pooled,
    /// The pool cannot take it (full, another mount): the caller removes it.
    Remove,
    /// Not an empty folder (or written to while it was moved): left alone.
    Leave,
}

/// What taking a spare folder did.
#[derive(Debug, PartialEq, Eq)]
pub enum Taken {
    /// A spare folder is now at the placeholder's place.
    Moved,
    /// Something is already there (nothing was moved).
    Exists,
    /// The pool has no spare folder, or is on another mount.
    No,
}

impl Pool {
    /// Opens (making it if needed) the pool under `data_dir`. `None` when it
    /// cannot be made, or is not a private folder of this user: then
    /// placeholders are made and removed instead.
    pub fn open(data_dir: &Path, tag: &str) -> Option<Pool> {
        use std::os::unix::fs::DirBuilderExt;
        let path = data_dir.join(POOL_DIR);
        let _ = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&path);
        let dir = no_links(CWD, &path, OFlags::RDONLY | OFlags::DIRECTORY).ok()?;
        let st = rustix::fs::fstat(&dir).ok()?;
        if st.st_uid != rustix::process::getuid().as_raw() || st.st_mode & 0o077 != 0 {
            return None;
        }
        let names = list(&dir).ok()?;
        Some(Pool {
            dir,
            names,
            tag: tag.to_string(),
            given: 0,
        })
    }

    /// Moves a spare folder to `name` in `into`.
    pub fn take(&mut self, into: &impl AsFd, name: &Path) -> Taken {
        while let Some(spare) = self.names.pop() {
            match renameat_with(
                &self.dir,
                spare.as_os_str(),
                into,
                name,
                RenameFlags::NOREPLACE,
            ) {
                Ok(()) => return Taken::Moved,
                Err(Errno::EXIST) => {
                    self.names.push(spare);
                    return Taken::Exists;
                }
                // Taken by another run meanwhile.
                Err(Errno::NOENT) => {}
                Err(_) => {
                    // Another mount (EXDEV) or something else: keep the name
                    // for a folder where the pool may work.
                    self.names.push(spare);
                    return Taken::No;
                }
            }
        }
        Taken::No
    }

    /// Moves the empty folder `name` in `from` (shown as `shown` in a
    /// warning) into the pool.
    pub fn give_back(&mut self, from: &impl AsFd, name: &Path, shown: &Path) -> Back {
        let Ok(dir) = no_links(from, name, OFlags::RDONLY | OFlags::DIRECTORY) else {
            return Back::Leave;
        };
        if !is_empty(&dir) {
            return Back::Leave;
        }
        if self.names.len() >= MAX_SPARE {
            return Back::Remove;
        }
        self.given += 1;
        let spare = format!("{}-{}", self.tag, self.given);
        match renameat_with(
            from,
            name,
            &self.dir,
            spare.as_str(),
            RenameFlags::NOREPLACE,
        ) {
            Ok(()) => {}
            Err(_) => return Back::Remove,
        }
        // Written between the check and the move: back where it was.
        if !is_empty(&dir) {
            if renameat_with(
                &self.dir,
                spare.as_str(),
                from,
                name,
                RenameFlags::NOREPLACE,
            )
            .is_err()
            {
                eprintln!(
                    "oz0-node: the placeholder folder {} was written to from outside the run while it ended; it is kept as {}",
                    shown.display(),
                    Path::new(POOL_DIR).join(&spare).display()
                );
            }
            return Back::Leave;
        }
        self.names.push(OsString::from(spare));
        Back::Pooled
    }
}

/// Whether the folder open at `dir` has no entry but `.` and `..` (read
/// from its start, on the descriptor itself: no other open).
fn is_empty(dir: &OwnedFd) -> bool {
    use std::mem::MaybeUninit;
    if rustix::fs::seek(dir, rustix::fs::SeekFrom::Start(0)).is_err() {
        return false;
    }
    let mut buf = [MaybeUninit::<u8>::uninit(); 1024];
    let mut entries = rustix::fs::RawDir::new(dir, &mut buf);
    while let Some(e) = entries.next() {
        match e {
            Ok(e) if matches!(e.file_name().to_bytes(), b"." | b"..") => {}
            _ => return false,
        }
    }
    true
}

fn list(dir: &OwnedFd) -> Result<Vec<OsString>, Errno> {
    let mut names = Vec::new();
    for e in rustix::fs::Dir::read_from(dir)? {
        let e = e?;
        let n = e.file_name().to_bytes();
        if n != b"." && n != b".." {
            names.push(OsString::from(std::ffi::OsStr::from_bytes(n)));
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("oz0-pool-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn open_dir(p: &Path) -> OwnedFd {
        no_links(CWD, p, OFlags::PATH | OFlags::DIRECTORY).unwrap()
    }

    #[test]
    fn folders_go_round_and_only_empty_ones_come_back() {
        let root = tmp("round");
        let (data, work) = (root.join("data"), root.join("work"));
        std::fs::create_dir_all(&work).unwrap();
        let w = open_dir(&work);

        // An empty pool gives nothing; a folder made meanwhile goes back.
        let mut pool = Pool::open(&data, "r1").unwrap();
        assert_eq!(pool.take(&w, Path::new(".claude")), Taken::No);
        std::fs::create_dir(work.join(".claude")).unwrap();
        assert_eq!(
            pool.give_back(&w, Path::new(".claude"), Path::new(".claude")),
            Back::Pooled
        );
        assert!(!work.join(".claude").exists());
        assert_eq!(std::fs::read_dir(data.join(POOL_DIR)).unwrap().count(), 1);

        // A new pool (another run) finds and moves it; an existing name is
        // never replaced.
        let mut pool = Pool::open(&data, "r2").unwrap();
        std::fs::create_dir(work.join(".codex")).unwrap();
        assert_eq!(pool.take(&w, Path::new(".codex")), Taken::Exists);
        assert_eq!(pool.take(&w, Path::new(".claude")), Taken::Moved);
        assert!(work.join(".claude").is_dir());
        assert_eq!(std::fs::read_dir(data.join(POOL_DIR)).unwrap().count(), 0);

        // Written to from outside: left where it is, content and all.
        std::fs::write(work.join(".claude/settings.json"), "x").unwrap();
        assert_eq!(
            pool.give_back(&w, Path::new(".claude"), Path::new(".claude")),
            Back::Leave
        );
        assert_eq!(
            std::fs::read(work.join(".claude/settings.json")).unwrap(),
            b"x"
        );
        // A link is never followed, nor a file taken.
        std::os::unix::fs::symlink(&work, work.join(".idea")).unwrap();
        assert_eq!(
            pool.give_back(&w, Path::new(".idea"), Path::new(".idea")),
            Back::Leave
        );
        std::fs::write(work.join(".vscode"), "").unwrap();
        assert_eq!(
            pool.give_back(&w, Path::new(".vscode"), Path::new(".vscode")),
            Back::Leave
        );
        assert!(std::fs::symlink_metadata(work.join(".idea"))
            .unwrap()
            .file_type()
            .is_symlink());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_pool_others_can_enter_is_not_used() {
        use std::os::unix::fs::PermissionsExt;
        let root = tmp("shared");
        std::fs::create_dir_all(root.join(POOL_DIR)).unwrap();
        std::fs::set_permissions(root.join(POOL_DIR), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        assert!(Pool::open(&root, "x").is_none());
        std::fs::remove_dir(root.join(POOL_DIR)).unwrap();
        std::os::unix::fs::symlink("/tmp", root.join(POOL_DIR)).unwrap();
        assert!(Pool::open(&root, "x").is_none());
        let _ = std::fs::remove_dir_all(&root);
    }
}
