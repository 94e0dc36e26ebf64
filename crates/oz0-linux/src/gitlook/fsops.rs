//! The look's operations on what a run left, each by descriptor and never
//! through a link it did not mean to follow: opening a folder (giving the
//! owner back the read and search bits a run took away), reading a small
//! file, renaming an entry aside in its own folder, following a link only
//! to learn where it leads.

use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::Duration;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags, Stat};
use rustix::io::Errno;

/// The status-change time (`ctime`) in `st`, since the Unix epoch; one
/// before the epoch counts as the epoch.
pub(crate) fn ctime(st: &Stat) -> Duration {
    let secs = u64::try_from(st.st_ctime).unwrap_or(0);
    // The kernel keeps a timestamp's nanoseconds below one second, so they
    // fit a u32.
    #[allow(clippy::cast_possible_truncation)]
    let nanos = st.st_ctime_nsec as u32;
    Duration::new(secs, nanos)
}

/// `(device, inode)` of `st`.
pub(super) fn id(st: &Stat) -> (u64, u64) {
    (st.st_dev, st.st_ino)
}

/// What `name` in `dir` is, not followed.
pub(super) fn lstat(dir: impl AsFd, name: &CStr) -> Result<Stat, Errno> {
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
}

/// Whether the owner of `st` lacks read or search permission on it.
fn lacks_owner_rx(st: &Stat) -> bool {
    st.st_mode & 0o500 != 0o500
}

/// A folder opened for the walk: its descriptor (readable), what it is,
/// and whether the look gave its owner back read and search permission.
pub(super) struct OpenDir {
    pub fd: OwnedFd,
    pub st: Stat,
    pub restored: bool,
}

/// Opens the folder `name` in `dir` to read it, without following a link.
/// A folder of this process's user that the run left unreadable or
/// unsearchable (git needs only search permission to use it; the look
/// needs both) gets its owner's read, write and search bits back, on the
/// descriptor of the very object (so never through a link). A folder of
/// another user that cannot be read is an error.
pub(super) fn open_dir(dir: impl AsFd, name: &CStr) -> Result<OpenDir, Errno> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat(&dir, name, flags, Mode::empty()) {
        Ok(fd) => {
            let st = rustix::fs::fstat(&fd)?;
            let mut restored = false;
            if lacks_owner_rx(&st) && st.st_uid == rustix::process::geteuid().as_raw() {
                rustix::fs::fchmod(&fd, Mode::from_raw_mode(st.st_mode | 0o700))?;
                restored = true;
            }
            Ok(OpenDir { fd, st, restored })
        }
        Err(Errno::ACCESS) => {
            // Not readable: reached as an object only (which needs search
            // permission on `dir` alone), its mode given back through the
            // descriptor's own /proc name (fchmod takes no O_PATH
            // descriptor), then opened again from that very object.
            let path = rustix::fs::openat(
                &dir,
                name,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            let st = rustix::fs::fstat(&path)?;
            if st.st_uid != rustix::process::geteuid().as_raw() || !lacks_owner_rx(&st) {
                return Err(Errno::ACCESS);
            }
            let proc = format!("/proc/self/fd/{}", path.as_raw_fd());
            rustix::fs::chmod(proc.as_str(), Mode::from_raw_mode(st.st_mode | 0o700))?;
            let fd = rustix::fs::openat(&path, c".", flags, Mode::empty())?;
            let st = rustix::fs::fstat(&fd)?;
            Ok(OpenDir {
                fd,
                st,
                restored: true,
            })
        }
        Err(e) => Err(e),
    }
}

/// Why a small file could not be read.
pub(super) enum ReadError {
    /// It is not there.
    Missing,
    /// It is there and could not be read: why.
    Unreadable(String),
}

/// The content of the regular file `name` in `dir` (not followed), when
/// it is at most `max` bytes.
pub(super) fn read_small(dir: impl AsFd, name: &CStr, max: u64) -> Result<Vec<u8>, ReadError> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        Errno::NOENT => ReadError::Missing,
        Errno::LOOP => ReadError::Unreadable("a symbolic link".into()),
        e => ReadError::Unreadable(e.to_string()),
    })?;
    read_fd(fd, max)
}

/// The content of the regular file open at `fd`, when at most `max` bytes.
pub(super) fn read_fd(fd: OwnedFd, max: u64) -> Result<Vec<u8>, ReadError> {
    use std::io::Read;
    let st = rustix::fs::fstat(&fd).map_err(|e| ReadError::Unreadable(e.to_string()))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(ReadError::Unreadable("not a regular file".into()));
    }
    let mut data = Vec::new();
    std::fs::File::from(fd)
        .take(max + 1)
        .read_to_end(&mut data)
        .map_err(|e| ReadError::Unreadable(e.to_string()))?;
    if data.len() as u64 > max {
        return Err(ReadError::Unreadable(format!("larger than {max} bytes")));
    }
    Ok(data)
}

/// The name `name` is renamed to: `name` and `suffix`, with `name` cut to
/// fit a file name's 255 bytes, and `-N` for the `attempt`-th try after a
/// clash.
pub(super) fn aside_name(name: &[u8], suffix: &[u8], attempt: usize) -> Vec<u8> {
    let tail = if attempt == 0 {
        Vec::new()
    } else {
        format!("-{attempt}").into_bytes()
    };
    let room = 255usize.saturating_sub(suffix.len() + tail.len());
    let mut out = name[..name.len().min(room)].to_vec();
    out.extend_from_slice(suffix);
    out.extend_from_slice(&tail);
    out
}

/// Why an entry could not be renamed aside: the system's answer, and
/// whether the folder's owner is another user.
#[derive(Debug, thiserror::Error)]
pub(super) enum AsideError {
    /// The folder's own status could not be read.
    #[error("{0}")]
    Stat(Errno),
    /// The rename was refused in a folder of another user.
    #[error("could not rename it aside ({0}), in a folder of another user")]
    OtherUser(Errno),
    /// The rename was refused and write permission could not be given back.
    #[error(
        "could not rename it aside ({rename}), nor give its folder write permission back ({chmod})"
    )]
    NoWriteBack {
        /// Why the rename was refused.
        rename: Errno,
        /// Why the folder's mode could not be changed.
        chmod: Errno,
    },
    /// The rename failed.
    #[error("could not rename it aside: {0}")]
    Rename(Errno),
    /// Every name tried was taken.
    #[error("could not rename it aside: every name tried was taken")]
    Taken,
}

/// Renames `name` in `dir` aside, in `dir` itself, to a name no one has
/// taken (never replacing anything). A folder of this process's user that
/// the run left without write permission gets its owner's bits back first.
/// Returns the new name, or why it could not be done.
pub(super) fn rename_aside(
    dir: &OwnedFd,
    name: &CStr,
    suffix: &[u8],
) -> Result<Vec<u8>, AsideError> {
    let mut restored = false;
    let mut attempt = 0;
    while attempt < 16 {
        let new = aside_name(name.to_bytes(), suffix, attempt);
        match rustix::fs::renameat_with(dir, name, dir, new.as_slice(), RenameFlags::NOREPLACE) {
            Ok(()) => return Ok(new),
            Err(Errno::EXIST) => attempt += 1,
            Err(e @ (Errno::ACCESS | Errno::PERM)) if !restored => {
                restored = true;
                let st = rustix::fs::fstat(dir).map_err(AsideError::Stat)?;
                if st.st_uid != rustix::process::geteuid().as_raw() {
                    return Err(AsideError::OtherUser(e));
                }
                rustix::fs::fchmod(dir, Mode::from_raw_mode(st.st_mode | 0o700)).map_err(|e2| {
                    AsideError::NoWriteBack {
                        rename: e,
                        chmod: e2,
                    }
                })?;
            }
            Err(e) => return Err(AsideError::Rename(e)),
        }
    }
    Err(AsideError::Taken)
}

/// The path of the object open at `fd`, as the kernel names it now.
pub(super) fn path_of(fd: impl AsFd) -> Result<std::path::PathBuf, Errno> {
    use std::os::unix::ffi::OsStringExt;
    let proc = format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd());
    let p = rustix::fs::readlink(proc.as_str(), Vec::new())?;
    Ok(std::ffi::OsString::from_vec(p.into_bytes()).into())
}

/// Opens the object at `fd` (an `O_PATH` descriptor) again to read it.
pub(super) fn reopen(fd: impl AsFd, dir: bool) -> Result<OwnedFd, Errno> {
    let proc = format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd());
    let mut flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC;
    if dir {
        flags |= OFlags::DIRECTORY;
    }
    rustix::fs::open(proc.as_str(), flags, Mode::empty())
}

#[cfg(test)]
mod tests {
    use super::aside_name;

    #[test]
    fn aside_names_fit_and_differ() {
        let long = vec![b'a'; 255];
        let n = aside_name(&long, b".oz0-quarantine-r1", 0);
        assert_eq!(n.len(), 255);
        assert!(n.ends_with(b".oz0-quarantine-r1"));
        let m = aside_name(&long, b".oz0-quarantine-r1", 3);
        assert_eq!(m.len(), 255);
        assert!(m.ends_with(b"-3"));
        assert_eq!(aside_name(b"config", b".q", 0), b"config.q");
    }
}
