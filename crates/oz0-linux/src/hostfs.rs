//! Host-side opens of caller-named files that a run could have written or
//! could write: the `--json-status` document, `--env-file`s, the run's own
//! record. A run controls every folder it may write, and a run that ended
//! may have left links there for the node to follow later; so each of these
//! is reached without following any link on the way (`openat2` with
//! `RESOLVE_NO_SYMLINKS`), files are created with `O_EXCL | O_NOFOLLOW`
//! under names no one can guess, and a document is put in place by a rename
//! inside the folder the node opened, never by a path looked up again.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{openat2, renameat, Mode, OFlags, ResolveFlags, CWD};
use rustix::io::Errno;

/// Largest `--env-file` read.
pub const MAX_ENV_FILE: u64 = 1 << 20;

/// Opens `path` without following any link on the way or at its end.
pub fn open_no_links(path: &Path, flags: OFlags) -> Result<OwnedFd, Errno> {
    open_beneath(CWD, path, flags)
}

/// Opens `path` under `dir` without following any link on the way or at
/// its end.
pub fn open_beneath(dir: impl AsFd, path: &Path, flags: OFlags) -> Result<OwnedFd, Errno> {
    openat2(
        dir,
        path,
        flags | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
}

/// Why a caller-named file could not be opened, read or written: each
/// names the flag (`what`), the path and the fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostFsError {
    /// A symbolic link on the way, which the node never follows there.
    #[error("{what} {} is reached through the symbolic link {}, which the node never follows there (a run may have left it): name the real path", path.display(), link.display())]
    Link {
        /// The flag or file's role.
        what: String,
        /// The path.
        path: PathBuf,
        /// The link on the way.
        link: PathBuf,
    },
    /// The OS refused.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// The flag or file's role.
        what: String,
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// Not a file the node takes there.
    #[error("{what} {} {why}", path.display())]
    Kind {
        /// The flag or file's role.
        what: String,
        /// The path.
        path: PathBuf,
        /// What it is not (`is not a regular file`).
        why: &'static str,
    },
    /// Larger than the node reads.
    #[error("{what} {} is larger than {max} bytes", path.display())]
    TooLarge {
        /// The flag or file's role.
        what: String,
        /// The path.
        path: PathBuf,
        /// The largest read.
        max: u64,
    },
}

/// What to tell the user about an open that failed: a link on the way is
/// named as such, with the fix.
pub fn explain(what: &str, path: &Path, e: impl Into<io::Error>) -> HostFsError {
    match first_link(path) {
        Some(link) => HostFsError::Link {
            what: what.into(),
            path: path.into(),
            link,
        },
        None => HostFsError::Io {
            what: what.into(),
            path: path.into(),
            source: e.into(),
        },
    }
}

fn kind(what: &str, path: &Path, why: &'static str) -> HostFsError {
    HostFsError::Kind {
        what: what.into(),
        path: path.into(),
        why,
    }
}

/// The first component of `path` that is a symbolic link, if any.
pub fn first_link(path: &Path) -> Option<PathBuf> {
    let mut at = PathBuf::new();
    for c in path.components() {
        at.push(c);
        if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            return Some(at);
        }
    }
    None
}

/// Reads the caller-named file `path` as `what` (e.g. `--env-file`): a
/// regular file reached without links, at most [`MAX_ENV_FILE`] bytes. A
/// descriptor of the caller's own (`/dev/fd/N`, `/proc/self/fd/N`, as a
/// shell's `<(…)` gives) is read from that descriptor: it is the caller's,
/// not a path a run controls.
pub fn read_caller_file(what: &str, path: &Path) -> Result<Vec<u8>, HostFsError> {
    let file = match own_descriptor(path) {
        // Opened anew through the process's own descriptor table (the
        // descriptor itself stays the caller's).
        Some(n) => File::open(format!("/proc/self/fd/{n}")).map_err(|e| explain(what, path, e))?,
        None => {
            let fd = open_no_links(path, OFlags::RDONLY | OFlags::NONBLOCK)
                .map_err(|e| explain(what, path, e))?;
            let st = rustix::fs::fstat(&fd).map_err(|e| explain(what, path, e))?;
            if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile
            {
                return Err(kind(what, path, "is not a regular file"));
            }
            File::from(fd)
        }
    };
    let mut data = Vec::new();
    file.take(MAX_ENV_FILE + 1)
        .read_to_end(&mut data)
        .map_err(|e| explain(what, path, e))?;
    if u64::try_from(data.len()).unwrap_or(u64::MAX) > MAX_ENV_FILE {
        return Err(HostFsError::TooLarge {
            what: what.into(),
            path: path.into(),
            max: MAX_ENV_FILE,
        });
    }
    Ok(data)
}

/// `N` when `path` names this process's descriptor `N` (`/dev/fd/N` or
/// `/proc/self/fd/N`), as a shell's process substitution does.
fn own_descriptor(path: &Path) -> Option<i32> {
    let s = path.to_str()?;
    let n = s
        .strip_prefix("/dev/fd/")
        .or_else(|| s.strip_prefix("/proc/self/fd/"))?;
    let n: i32 = n.parse().ok()?;
    // 0-2 are the node's standard streams; a number it did not inherit is
    // not the caller's either (checked by the open).
    (n > 2).then_some(n)
}

/// A document the node writes at a caller-named path when the run is over
/// (`--json-status`): its folder is opened when the run is asked for,
/// without following links, and the document is written to a new file of
/// an unguessable name there and renamed over the name, inside that folder.
#[derive(Debug)]
pub struct OutFile {
    dir: OwnedFd,
    name: OsString,
    shown: PathBuf,
}

impl OutFile {
    /// Opens the folder of `path` (named as `what` in errors).
    pub fn open(what: &str, path: &Path) -> Result<OutFile, HostFsError> {
        let name = path
            .file_name()
            .filter(|n| *n != "." && *n != "..")
            .ok_or_else(|| kind(what, path, "does not name a file"))?;
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let dir = open_no_links(parent, OFlags::PATH | OFlags::DIRECTORY)
            .map_err(|e| explain(what, parent, e))?;
        Ok(OutFile {
            dir,
            name: name.to_os_string(),
            shown: path.to_path_buf(),
        })
    }

    /// The path, for messages.
    pub fn path(&self) -> &Path {
        &self.shown
    }

    /// Writes `data` as the document, mode 0600 (0644 is not needed: the
    /// caller reads it as the same user).
    pub fn write(&self, data: &[u8]) -> io::Result<()> {
        let mut rnd = [0u8; 8];
        rustix::rand::getrandom(&mut rnd, rustix::rand::GetRandomFlags::empty())?;
        let mut tmp = OsString::from(".");
        tmp.push(&self.name);
        tmp.push(format!(".{:016x}.tmp", u64::from_ne_bytes(rnd)));
        let fd = rustix::fs::openat(
            &self.dir,
            tmp.as_os_str(),
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        let mut f = File::from(fd);
        let written = f
            .write_all(data)
            .and_then(|()| f.sync_all())
            .and_then(|()| {
                renameat(&self.dir, tmp.as_os_str(), &self.dir, self.name.as_os_str())
                    .map_err(Into::into)
            });
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&self.dir, tmp.as_os_str(), rustix::fs::AtFlags::empty());
        }
        written
    }
}

/// A log grows to this size before it is renamed to `<name>.1` (replacing
/// the one before) and a new one is begun.
pub const MAX_LOG: u64 = 64 << 20;

/// Opens the node's log at `path` for appending (made 0600 when missing,
/// with its folder, 0700): reached without following links, a regular
/// file of this user's. One that has grown past [`MAX_LOG`] is renamed to
/// `<name>.1` first.
pub fn open_log(what: &str, path: &Path) -> Result<File, HostFsError> {
    use std::os::unix::fs::DirBuilderExt;
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| kind(what, path, "does not name a file"))?;
    let _ = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(parent);
    let dir = open_no_links(parent, OFlags::PATH | OFlags::DIRECTORY)
        .map_err(|e| explain(what, parent, e))?;
    let open = || {
        rustix::fs::openat(
            &dir,
            name,
            OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| explain(what, path, e))
    };
    let mut fd = open()?;
    let st = rustix::fs::fstat(&fd).map_err(|e| explain(what, path, e))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile
        || st.st_uid != rustix::process::getuid().as_raw()
    {
        return Err(kind(what, path, "is not a regular file of this user's"));
    }
    if u64::try_from(st.st_size).unwrap_or(0) > MAX_LOG {
        let mut old = name.to_os_string();
        old.push(".1");
        renameat(&dir, name, &dir, old.as_os_str()).map_err(|e| explain(what, path, e))?;
        fd = open()?;
    }
    Ok(File::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("oz0-hostfs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn out_file_never_writes_through_a_link() {
        let d = tmp("out");
        let victim = d.join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, d.join("status.json")).unwrap();
        let out = OutFile::open("--json-status", &d.join("status.json")).unwrap();
        out.write(b"{}\n").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert_eq!(
            std::fs::read_to_string(d.join("status.json")).unwrap(),
            "{}\n"
        );
        // Only the document is left.
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 2);
        // A folder reached through a link is refused, with the fix.
        std::os::unix::fs::symlink(&d, d.join("linked")).unwrap();
        let e = OutFile::open("--json-status", &d.join("linked/s.json"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("symbolic link") && e.contains("real path"),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn logs_are_appended_without_links() {
        let d = tmp("log");
        let log = d.join("sub/audit.jsonl");
        let mut f = open_log("the audit log", &log).unwrap();
        f.write_all(b"one\n").unwrap();
        let mut f = open_log("the audit log", &log).unwrap();
        f.write_all(b"two\n").unwrap();
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "one\ntwo\n");
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&log), mode(&d.join("sub"))), (0o600, 0o700));
        std::fs::write(d.join("victim"), "keep").unwrap();
        std::os::unix::fs::symlink(d.join("victim"), d.join("linked.jsonl")).unwrap();
        let e = open_log("the audit log", &d.join("linked.jsonl"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(d.join("victim")).unwrap(), "keep");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn caller_files_are_read_without_links_and_bounded() {
        let d = tmp("read");
        std::fs::write(d.join("secret"), "A=secret\n").unwrap();
        std::os::unix::fs::symlink(d.join("secret"), d.join("env")).unwrap();
        let e = read_caller_file("--env-file", &d.join("env"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert_eq!(
            read_caller_file("--env-file", &d.join("secret")).unwrap(),
            b"A=secret\n"
        );
        let e = read_caller_file("--env-file", &d).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        std::fs::write(
            d.join("big"),
            vec![b'x'; usize::try_from(MAX_ENV_FILE).unwrap() + 1],
        )
        .unwrap();
        let e = read_caller_file("--env-file", &d.join("big"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("larger"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
