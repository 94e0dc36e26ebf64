//! Spare empty folders and files for placeholders, kept in the node's data
//! directory (`<data-dir>/placeholder-pool`, mode 0700, never visible to a
//! run).
//!
//! A folder placeholder is moved into place from here instead of being made
//! at the start of the run, and moved out of the way after it instead of
//! being removed then. Both are a rename: on a file system that allocates a
//! block for every new folder and, mounted with `discard`, waits for the
//! disk at every removal (ext4 on many cloud disks), making and removing
//! the eight folder placeholders of an empty work folder took about 0.75 ms
//! here; moving them, about 0.15 ms. The making and removing still happen,
//! but while the node would otherwise only wait (see [`Pool::tend`]).
//!
//! File placeholders are taken from here the same way, but removed in
//! place after the run: an empty file holds no block, so its removal waits
//! for no disk, and a removal costs less than a rename and a removal later.
//! Each is a file of its own (never links to one file): what a host user
//! writes into one while the run goes on stays in that one.
//!
//! **A placeholder is used once.** A placeholder sits in a folder that
//! other runs may be able to write (one whose `--write` folder holds this
//! run's work folder), and such a run can keep a descriptor of it and write
//! into it whenever it likes, wherever it has gone. So a folder or file
//! that has been a placeholder never becomes one again: `fresh/` and
//! `fresh-files/` hold only what the node made there and no run has seen
//! (a node takes a fresh file by moving it into place, which only one can),
//! and a folder given back goes to `used/`, from where it is removed (with
//! whatever was written into it meanwhile, and a warning). The layouts
//! before this one kept their folders in `placeholders/`: first spare
//! folders at its top, which may have been seen, then `fresh/` and `used/`
//! there, which a node of the first would take for spare folders (and hand
//! a run `used/` itself, with what was written into it). No node of either
//! uses `placeholder-pool/`; `placeholders/` is emptied and removed the
//! same way.
//!
//! A rename works only within one mount. A writable folder on another mount
//! than the data directory gets its placeholders made and removed in place
//! (the first rename says `EXDEV`). Nothing is moved through a link: the
//! pool and every placeholder folder are opened without following any, and
//! each rename is `RENAME_NOREPLACE`, so it never replaces what is there.
//! What is given back must be empty: a folder written to from outside the
//! run while it was a placeholder is left where it is, content and all.
//! Once in `used/`, a folder is any node process's to remove (they share
//! the pool), so the one that gave it back does not look at it again: what
//! was written into it just as it moved is removed with it, with a warning,
//! as what is written into it later is.

use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{mkdirat, renameat_with, unlinkat, AtFlags, Mode, OFlags, RenameFlags, CWD};
use rustix::io::Errno;

use crate::hold::no_links;

/// The pool's folder, under the node's data directory.
pub const POOL_DIR: &str = "placeholder-pool";
/// The pool's folder in the layouts before this one.
const OLD_DIR: &str = "placeholders";
/// Folders the node made and no run has seen.
const FRESH: &str = "fresh";
/// Empty files the node made and no run has seen.
const FRESH_FILES: &str = "fresh-files";
/// Folders and files that were placeholders, to be removed.
const USED: &str = "used";
/// [`Pool::tend`] makes fresh folders up to this many.
const FRESH_TARGET: usize = 16;
/// [`Pool::tend`] makes fresh files up to this many (an empty work folder
/// takes a dozen: `.bashrc`, `.mcp.json`, …).
const FRESH_FILES_TARGET: usize = 24;

/// The pool of one node process.
pub struct Pool {
    path: PathBuf,
    /// Where the layouts before this one kept the pool.
    old: PathBuf,
    fresh: OwnedFd,
    fresh_files: OwnedFd,
    used: OwnedFd,
    /// The fresh folders, as far as this process knows: listed when the pool
    /// was opened, taken from the back.
    names: Vec<OsString>,
    /// The fresh files, likewise.
    file_names: Vec<OsString>,
    /// Prefix of the names this process makes (unique to the run).
    tag: String,
    made: usize,
    /// A rename said the data directory is on another mount than a
    /// placeholder's folder: fresh folders would not help there.
    elsewhere: bool,
}

/// What giving a placeholder folder back did.
#[derive(Debug, PartialEq, Eq)]
pub enum Back {
    /// It is out of the way, in `used/`, to be removed by [`Pool::tend`].
    Aside,
    /// The pool cannot take it (another mount): the caller removes it.
    Remove,
    /// Not an empty folder: left alone.
    Leave,
}

/// What taking a spare folder did.
#[derive(Debug, PartialEq, Eq)]
pub enum Taken {
    /// A fresh folder is now at the placeholder's place.
    Moved,
    /// Something is already there (nothing was moved).
    Exists,
    /// The pool has no fresh folder, or is on another mount.
    No,
}

/// A private folder of this user's at `name` in `dir` (made if missing),
/// opened without following links.
fn private_dir(dir: impl AsFd, name: &Path) -> Option<OwnedFd> {
    match mkdirat(&dir, name, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(_) => return None,
    }
    existing_private_dir(dir, name)
}

/// The private folder of this user's at `name` in `dir`, opened without
/// following links.
fn existing_private_dir(dir: impl AsFd, name: &Path) -> Option<OwnedFd> {
    let fd = no_links(dir, name, OFlags::RDONLY | OFlags::DIRECTORY).ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    (st.st_uid == rustix::process::getuid().as_raw() && st.st_mode & 0o077 == 0).then_some(fd)
}

impl Pool {
    /// Opens (making it if needed) the pool under `data_dir`. `None` when it
    /// cannot be made, or is not a private folder of this user: then
    /// placeholders are made and removed in place instead.
    pub fn open(data_dir: &Path, tag: &str) -> Option<Pool> {
        use std::os::unix::fs::DirBuilderExt;
        let path = data_dir.join(POOL_DIR);
        let _ = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&path);
        let root = private_dir(CWD, &path)?;
        let fresh = private_dir(&root, Path::new(FRESH))?;
        let fresh_files = private_dir(&root, Path::new(FRESH_FILES))?;
        let used = private_dir(&root, Path::new(USED))?;
        let names = list(&fresh).ok()?;
        let file_names = list(&fresh_files).ok()?;
        Some(Pool {
            path,
            old: data_dir.join(OLD_DIR),
            fresh,
            fresh_files,
            used,
            names,
            file_names,
            tag: tag.to_string(),
            made: 0,
            elsewhere: false,
        })
    }

    /// Moves a fresh folder to `name` in `into`.
    pub fn take(&mut self, into: &impl AsFd, name: &Path) -> Taken {
        let (from, names) = (&self.fresh, &mut self.names);
        take_from(from, names, &mut self.elsewhere, into, name)
    }

    /// Moves a fresh empty file to `name` in `into` (it is removed in
    /// place after the run, not given back).
    pub fn take_file(&mut self, into: &impl AsFd, name: &Path) -> Taken {
        let (from, names) = (&self.fresh_files, &mut self.file_names);
        take_from(from, names, &mut self.elsewhere, into, name)
    }

    /// Moves the empty folder `name` in `from` out of the way, into `used/`.
    pub fn give_back(&mut self, from: &impl AsFd, name: &Path) -> Back {
        self.give_back_then(from, name, || {})
    }

    /// [`Pool::give_back`], calling `moved` once the folder is in `used/`
    /// (where a test puts what another node process does meanwhile). The
    /// folder is not looked at there: another process tending the pool may
    /// have removed it already (see the module's doc).
    fn give_back_then(&mut self, from: &impl AsFd, name: &Path, moved: impl FnOnce()) -> Back {
        let Ok(dir) = no_links(from, name, OFlags::RDONLY | OFlags::DIRECTORY) else {
            return Back::Leave;
        };
        if !is_empty(&dir) {
            return Back::Leave;
        }
        let back = self.put_aside(from, name);
        if back == Back::Aside {
            moved();
        }
        back
    }

    /// Renames `name` in `from` into `used/` under a name of this
    /// process's: `Aside`, or `Remove` when it cannot (another mount).
    fn put_aside(&mut self, from: &impl AsFd, name: &Path) -> Back {
        let aside = self.new_name();
        match renameat_with(from, name, &self.used, &aside, RenameFlags::NOREPLACE) {
            Ok(()) => Back::Aside,
            Err(e) => {
                self.elsewhere |= e == Errno::XDEV;
                Back::Remove
            }
        }
    }

    /// A name no other entry of the pool has: this process's tag and a
    /// count.
    fn new_name(&mut self) -> OsString {
        self.made += 1;
        OsString::from(format!("{}-{}", self.tag, self.made))
    }

    /// Removes the folders in `used/` (and what any run wrote into them
    /// after they were placeholders, with a warning), and those of the
    /// layouts before, then makes fresh folders up to a few more than a
    /// run takes. Called while the node would otherwise only wait.
    pub fn tend(&mut self) {
        let used = self.path.join(USED);
        for name in list(&self.used).unwrap_or_default() {
            remove(&self.used, &used, &name);
        }
        self.remove_old();
        if self.elsewhere {
            return;
        }
        while self.names.len() < FRESH_TARGET {
            let name = self.new_name();
            if mkdirat(&self.fresh, name.as_os_str(), Mode::from_raw_mode(0o755)).is_err() {
                return;
            }
            self.names.push(name);
        }
        while self.file_names.len() < FRESH_FILES_TARGET {
            let name = self.new_name();
            let made = rustix::fs::openat(
                &self.fresh_files,
                name.as_os_str(),
                OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o644),
            );
            if made.is_err() {
                return;
            }
            self.file_names.push(name);
        }
    }

    /// Empties and removes the pool's folder of the layouts before this
    /// one, if there is one (a folder of this user's only).
    fn remove_old(&self) {
        if std::fs::symlink_metadata(&self.old).is_err() {
            return;
        }
        let Some(old) = existing_private_dir(CWD, &self.old) else {
            return;
        };
        for name in list(&old).unwrap_or_default() {
            if name == FRESH || name == USED {
                if let Some(sub) = existing_private_dir(&old, Path::new(&name)) {
                    let within = self.old.join(&name);
                    for n in list(&sub).unwrap_or_default() {
                        remove(&sub, &within, &n);
                    }
                }
            }
            remove(&old, &self.old, &name);
        }
        let _ = unlinkat(CWD, &self.old, AtFlags::REMOVEDIR);
    }
}

/// Moves a fresh entry of `from` (one of `names`, taken from the back) to
/// `name` in `into`, never replacing what is there.
fn take_from(
    from: &OwnedFd,
    names: &mut Vec<OsString>,
    elsewhere: &mut bool,
    into: &impl AsFd,
    name: &Path,
) -> Taken {
    while let Some(spare) = names.pop() {
        match renameat_with(from, spare.as_os_str(), into, name, RenameFlags::NOREPLACE) {
            Ok(()) => return Taken::Moved,
            Err(Errno::EXIST) => {
                names.push(spare);
                return Taken::Exists;
            }
            // Taken by another run meanwhile.
            Err(Errno::NOENT) => {}
            Err(e) => {
                // Another mount (EXDEV) or something else: keep the name
                // for a folder where the pool may work.
                *elsewhere |= e == Errno::XDEV;
                names.push(spare);
                return Taken::No;
            }
        }
    }
    Taken::No
}

/// Removes `name` from `dir` (the pool's folder `within`): an empty folder
/// or file at once; anything else, with what is in it (written by a
/// process that kept it open after it was a placeholder), with a warning.
fn remove(dir: &OwnedFd, within: &Path, name: &OsString) {
    match unlinkat(dir, name.as_os_str(), AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT) => return,
        Err(Errno::NOTDIR) => {
            // A file: removed whatever it holds; said when it holds something.
            let st = rustix::fs::statat(dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW);
            match unlinkat(dir, name.as_os_str(), AtFlags::empty()) {
                Ok(()) if st.is_ok_and(|st| st.st_size == 0) => return,
                Ok(()) => {
                    eprintln!(
                        "oz0-node: {} was written to after it had been a placeholder (by a process that kept it open, or as its run ended); it is removed with what was written into it",
                        within.join(name).display()
                    );
                    return;
                }
                Err(Errno::NOENT) => return,
                Err(_) => {}
            }
        }
        Err(_) => {}
    }
    let path = within.join(name);
    eprintln!(
        "oz0-node: {} was written to after it had been a placeholder (by a process that kept it open, or as its run ended); it is removed with what was written into it, and no placeholder is ever made from it again",
        path.display()
    );
    // std's remove_dir_all never follows a link inside; the path is the
    // node's own (its private data directory).
    let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
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

    fn count(p: &Path) -> usize {
        std::fs::read_dir(p).map(|d| d.count()).unwrap_or(0)
    }

    #[test]
    fn a_folder_is_a_placeholder_once_and_only_empty_ones_are_taken_back() {
        let root = tmp("once");
        let (data, work) = (root.join("data"), root.join("work"));
        std::fs::create_dir_all(&work).unwrap();
        let w = open_dir(&work);
        let (fresh, used) = (
            data.join(POOL_DIR).join(FRESH),
            data.join(POOL_DIR).join(USED),
        );

        // An empty pool gives nothing; tending it makes fresh folders.
        let mut pool = Pool::open(&data, "r1").unwrap();
        assert_eq!(pool.take(&w, Path::new(".claude")), Taken::No);
        pool.tend();
        assert_eq!(count(&fresh), FRESH_TARGET);
        assert_eq!(pool.take(&w, Path::new(".claude")), Taken::Moved);
        assert!(work.join(".claude").is_dir());
        assert_eq!(count(&fresh), FRESH_TARGET - 1);
        // An existing name is never replaced.
        std::fs::create_dir(work.join(".codex")).unwrap();
        assert_eq!(pool.take(&w, Path::new(".codex")), Taken::Exists);

        // A run elsewhere keeps the placeholder open; given back, it goes to
        // used/, never to fresh/.
        let kept = open_dir(&work.join(".claude"));
        assert_eq!(pool.give_back(&w, Path::new(".claude")), Back::Aside);
        assert!(!work.join(".claude").exists());
        assert_eq!((count(&fresh), count(&used)), (FRESH_TARGET - 1, 1));
        // That run writes into it now, wherever it is...
        let planted = rustix::fs::openat(
            &kept,
            "settings.json",
            OFlags::CREATE | OFlags::WRONLY,
            Mode::from_raw_mode(0o644),
        )
        .unwrap();
        drop(planted);
        // ...and tending removes it, with what was written; the next run's
        // folders are all fresh and empty.
        let mut pool = Pool::open(&data, "r2").unwrap();
        pool.tend();
        assert_eq!((count(&fresh), count(&used)), (FRESH_TARGET, 0));
        for e in std::fs::read_dir(&fresh).unwrap() {
            assert_eq!(count(&e.unwrap().path()), 0);
        }

        // Written to from outside while it was a placeholder: left where it
        // is, content and all.
        assert_eq!(pool.take(&w, Path::new(".claude")), Taken::Moved);
        std::fs::write(work.join(".claude/settings.json"), "x").unwrap();
        assert_eq!(pool.give_back(&w, Path::new(".claude")), Back::Leave);
        assert_eq!(
            std::fs::read(work.join(".claude/settings.json")).unwrap(),
            b"x"
        );
        // A link is never followed, nor a file taken.
        std::os::unix::fs::symlink(&work, work.join(".idea")).unwrap();
        assert_eq!(pool.give_back(&w, Path::new(".idea")), Back::Leave);
        std::fs::write(work.join(".vscode"), "").unwrap();
        assert_eq!(pool.give_back(&w, Path::new(".vscode")), Back::Leave);
        assert!(std::fs::symlink_metadata(work.join(".idea"))
            .unwrap()
            .file_type()
            .is_symlink());
        let _ = std::fs::remove_dir_all(&root);
    }

    /// Files: each a placeholder once, a file of its own, never over what
    /// is there, never one another run took.
    #[test]
    fn a_file_is_a_placeholder_once_and_of_its_own() {
        use std::os::unix::fs::MetadataExt;
        let root = tmp("files");
        let (data, work) = (root.join("data"), root.join("work"));
        std::fs::create_dir_all(&work).unwrap();
        let w = open_dir(&work);
        let fresh = data.join(POOL_DIR).join(FRESH_FILES);
        let mut pool = Pool::open(&data, "f1").unwrap();
        assert_eq!(pool.take_file(&w, Path::new(".bashrc")), Taken::No);
        pool.tend();
        assert_eq!(count(&fresh), FRESH_FILES_TARGET);
        // Two runs, their pools opened on the same fresh files: both take
        // from the back, and the second finds the first's taken.
        let (mut one, mut two) = (
            Pool::open(&data, "f2").unwrap(),
            Pool::open(&data, "f3").unwrap(),
        );
        assert_eq!(one.take_file(&w, Path::new(".bashrc")), Taken::Moved);
        assert_eq!(two.take_file(&w, Path::new(".profile")), Taken::Moved);
        let (a, b) = (
            std::fs::symlink_metadata(work.join(".bashrc")).unwrap(),
            std::fs::symlink_metadata(work.join(".profile")).unwrap(),
        );
        assert!(a.is_file() && a.len() == 0 && a.nlink() == 1);
        assert_ne!(a.ino(), b.ino(), "one file, one place");
        assert_eq!(count(&fresh), FRESH_FILES_TARGET - 2);
        // Never over what is there.
        std::fs::write(work.join(".zshrc"), "mine").unwrap();
        assert_eq!(one.take_file(&w, Path::new(".zshrc")), Taken::Exists);
        assert_eq!(std::fs::read(work.join(".zshrc")).unwrap(), b"mine");
        assert_eq!(count(&fresh), FRESH_FILES_TARGET - 2);
        let _ = std::fs::remove_dir_all(&root);
    }

    /// Node processes share the pool: one tends it (removing what is in
    /// `used/`) just after another has moved a placeholder there. Removed
    /// under it, the giver's folder read as written to from outside the run
    /// (a warning naming a folder that was gone, the folder left alone);
    /// whoever removes it, it is put aside, never read as written to, and
    /// what was written into it as it moved is removed, never put back.
    #[test]
    fn a_folder_given_back_while_another_process_tends_is_put_aside() {
        let root = tmp("two");
        let (data, work) = (root.join("data"), root.join("work"));
        std::fs::create_dir_all(&work).unwrap();
        let w = open_dir(&work);
        let used = data.join(POOL_DIR).join(USED);
        let mut a = Pool::open(&data, "a").unwrap();
        a.tend();
        let mut b = Pool::open(&data, "b").unwrap();
        let name = Path::new(".cursor");

        assert_eq!(a.take(&w, name), Taken::Moved);
        let back = a.give_back_then(&w, name, || b.tend());
        assert_eq!(back, Back::Aside, "an empty placeholder read as written to");
        assert_eq!(count(&used), 0);

        assert_eq!(a.take(&w, name), Taken::Moved);
        let kept = open_dir(&work.join(name));
        let back = a.give_back_then(&w, name, || {
            let f = rustix::fs::openat(
                &kept,
                "settings.json",
                OFlags::CREATE | OFlags::WRONLY,
                Mode::from_raw_mode(0o644),
            )
            .unwrap();
            rustix::io::write(&f, b"x").unwrap();
            b.tend();
        });
        assert_eq!(back, Back::Aside);
        assert!(!work.join(name).exists(), "a used folder was put back");
        assert_eq!(count(&used), 0);
        let _ = std::fs::remove_dir_all(&root);
    }

    /// The layouts before this one kept the pool in `placeholders/`: spare
    /// folders at its top (which may have been seen), then `fresh/` and
    /// `used/` there, which a node of the first layout takes for spare
    /// folders. Nothing there is taken, and it is emptied and removed; this
    /// pool's folders are never there.
    #[test]
    fn folders_of_the_old_layouts_are_removed_never_taken() {
        use std::os::unix::fs::PermissionsExt;
        let root = tmp("old");
        let (data, work) = (root.join("data"), root.join("work"));
        let old = data.join(OLD_DIR);
        for d in ["r0-1/planted", "fresh/r1-1", "used/r1-2/planted"] {
            std::fs::create_dir_all(old.join(d)).unwrap();
        }
        for d in [&old, &old.join(FRESH), &old.join(USED)] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        std::fs::create_dir_all(&work).unwrap();
        let mut pool = Pool::open(&data, "r2").unwrap();
        assert_eq!(pool.take(&open_dir(&work), Path::new(".claude")), Taken::No);
        pool.tend();
        assert!(!old.exists(), "the old layout's folder is still there");
        assert_eq!(count(&data.join(POOL_DIR).join(FRESH)), FRESH_TARGET);
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
