//! Opens, removals and locks by descriptor, never following a link: the
//! house pattern of `oz0-linux`'s `hostfs` (`openat2` with
//! `RESOLVE_NO_SYMLINKS`, `O_NOFOLLOW`, `O_EXCL`), for the cache and the
//! rootfs trees an image fills.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{
    flock, mkdirat, openat2, statat, unlinkat, AtFlags, Dir, FileType, FlockOperation, Mode,
    OFlags, ResolveFlags,
};
use rustix::io::Errno;

/// Opens `rel` beneath `dir` (an empty `rel` is `dir` itself), following
/// no link on the way or at its end and never leaving `dir`.
pub fn open_beneath(dir: BorrowedFd<'_>, rel: &Path, flags: OFlags) -> Result<OwnedFd, Errno> {
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    // openat2 refuses a mode without O_CREAT.
    let mode = if flags.contains(OFlags::CREATE) {
        Mode::from_raw_mode(0o600)
    } else {
        Mode::empty()
    };
    openat2(
        dir,
        rel,
        flags | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        mode,
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
}

/// Opens the directory `rel` beneath `dir`.
pub fn open_dir(dir: BorrowedFd<'_>, rel: &Path) -> Result<OwnedFd, Errno> {
    open_beneath(dir, rel, OFlags::RDONLY | OFlags::DIRECTORY)
}

/// Opens the directory `name` in `dir`, making it (mode 0700) when missing.
pub fn dir_at(dir: BorrowedFd<'_>, name: &str) -> Result<OwnedFd, Errno> {
    match mkdirat(dir, name, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => return Err(e),
    }
    open_dir(dir, Path::new(name))
}

/// A new file `name` in `dir` (`O_EXCL`), for writing (and reading back).
pub fn create(dir: BorrowedFd<'_>, name: &OsStr, mode: u32) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )
}

/// What `name` in `dir` is, without following it; `None` when absent.
pub fn kind_at(dir: BorrowedFd<'_>, name: &OsStr) -> Result<Option<FileType>, Errno> {
    match statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(FileType::from_raw_mode(st.st_mode))),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The names in the directory `fd` (without `.` and `..`).
pub fn names(fd: BorrowedFd<'_>) -> Result<Vec<(Vec<u8>, FileType)>, Errno> {
    let mut out = Vec::new();
    for e in Dir::read_from(fd)? {
        let e = e?;
        let n = e.file_name().to_bytes();
        if n == b"." || n == b".." {
            continue;
        }
        out.push((n.to_vec(), e.file_type()));
    }
    Ok(out)
}

/// Removes `name` from `dir` whatever it is, a whole tree included: each
/// folder is opened by descriptor, made the owner's to enter and change
/// (an image's folder may be read-only), and emptied before it goes.
pub fn remove_at(dir: BorrowedFd<'_>, name: &OsStr) -> Result<(), Errno> {
    match kind_at(dir, name)? {
        None => Ok(()),
        Some(FileType::Directory) => {
            // The cache is the node's alone: nothing can swap this folder
            // for a link between the look above and this change.
            rustix::fs::chmodat(dir, name, Mode::from_raw_mode(0o700), AtFlags::empty())?;
            let sub = open_dir(dir, Path::new(name))?;
            empty(sub.as_fd(), 0)?;
            unlinkat(dir, name, AtFlags::REMOVEDIR)
        }
        Some(_) => unlinkat(dir, name, AtFlags::empty()),
    }
}

/// Deepest tree [`remove_at`] descends (an unpacked tree is bounded
/// shallower).
const MAX_REMOVE_DEPTH: usize = 256;

fn empty(fd: BorrowedFd<'_>, depth: usize) -> Result<(), Errno> {
    if depth > MAX_REMOVE_DEPTH {
        return Err(Errno::LOOP);
    }
    for (n, t) in names(fd)? {
        let n = OsStr::from_bytes(&n);
        if t == FileType::Directory || t == FileType::Unknown {
            match kind_at(fd, n)? {
                Some(FileType::Directory) => {
                    rustix::fs::chmodat(fd, n, Mode::from_raw_mode(0o700), AtFlags::empty())?;
                    let sub = open_dir(fd, Path::new(n))?;
                    empty(sub.as_fd(), depth + 1)?;
                    unlinkat(fd, n, AtFlags::REMOVEDIR)?;
                }
                Some(_) => unlinkat(fd, n, AtFlags::empty())?,
                None => {}
            }
        } else {
            match unlinkat(fd, n, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// A lock file `name` in `dir`, locked with `op`; `None` when a
/// non-blocking `op` found it held. A lock file another holder removed
/// while this one waited is opened and locked again, so that a lock held
/// is always on the file the name leads to.
pub fn lock(dir: BorrowedFd<'_>, name: &str, op: FlockOperation) -> Result<Option<OwnedFd>, Errno> {
    loop {
        let fd = rustix::fs::openat(
            dir,
            name,
            OFlags::RDONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        match flock(&fd, op) {
            Ok(()) => {}
            Err(Errno::WOULDBLOCK) => return Ok(None),
            Err(e) => return Err(e),
        }
        if rustix::fs::fstat(&fd)?.st_nlink > 0 {
            return Ok(Some(fd));
        }
    }
}

/// Sets `fd`'s times to now (a cache entry's last use).
pub fn touch(fd: impl AsFd) {
    use rustix::fs::{Timespec, Timestamps, UTIME_NOW};
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: UTIME_NOW,
    };
    // A cache entry whose time cannot be set is only evicted earlier.
    let _ = rustix::fs::futimens(
        fd,
        &Timestamps {
            last_access: now,
            last_modification: now,
        },
    );
}

/// 16 random hex digits, for names no one can guess.
pub fn random_name() -> String {
    let mut b = [0u8; 8];
    let mut got = 0;
    while got < b.len() {
        match rustix::rand::getrandom(&mut b[got..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => got += n,
            Err(Errno::INTR) => {}
            Err(e) => panic!("getrandom failed: {e}"),
        }
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}
