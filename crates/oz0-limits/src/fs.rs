//! The operations a job needs from the system, behind one trait.
//!
//! Everything that decides *which* cgroup to use and *what* to write is written
//! against [`CgroupFs`], so it runs unchanged on the real kernel ([`RealFs`])
//! and on an in-memory model of a v1 or v2 cgroup tree
//! (the unit tests' `FakeFs`). The trait also carries the few non-file
//! operations the job logic needs (effective uid, `SIGKILL`), so the fake can
//! model them too.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

/// File-system and process operations on a cgroup tree (and `/proc`, `/etc/passwd`).
pub trait CgroupFs: Send + Sync {
    /// Reads a whole (small) file as UTF-8.
    fn read(&self, path: &Path) -> io::Result<String>;
    /// Writes `data` to an existing file in one `write(2)`, without creating or truncating it
    /// (cgroup control files take one value per write).
    fn write(&self, path: &Path, data: &str) -> io::Result<()>;
    /// Creates one directory (not its parents).
    fn mkdir(&self, path: &Path) -> io::Result<()>;
    /// Removes one empty directory (for a cgroup: one with no process and no child cgroup).
    fn rmdir(&self, path: &Path) -> io::Result<()>;
    /// Names of the sub-directories of `path` (for a cgroup: its child cgroups).
    fn list_dirs(&self, path: &Path) -> io::Result<Vec<String>>;
    /// True when `path` exists.
    fn exists(&self, path: &Path) -> bool;
    /// True when this process may write `path` (for a directory: create entries in it).
    fn can_write(&self, path: &Path) -> bool;
    /// Changes the owner of `path` (setup only).
    fn chown(&self, path: &Path, uid: u32, gid: u32) -> io::Result<()>;
    /// Opens an existing file write-only and close-on-exec (for placement from `pre_exec`).
    fn open_write(&self, path: &Path) -> io::Result<File>;
    /// This process's effective uid.
    fn euid(&self) -> u32;
    /// Sends `SIGKILL` to `pid`; a process that is already gone is not an error.
    fn sigkill(&self, pid: i32) -> io::Result<()>;
}

/// The real system.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealFs;

impl CgroupFs for RealFs {
    fn read(&self, path: &Path) -> io::Result<String> {
        std::fs::read_to_string(path)
    }

    fn write(&self, path: &Path, data: &str) -> io::Result<()> {
        use std::io::Write;
        let mut f = OpenOptions::new().write(true).open(path)?;
        // One write: cgroup files parse each write(2) as one value.
        let n = f.write(data.as_bytes())?;
        if n != data.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short write ({n} of {} bytes)", data.len()),
            ));
        }
        Ok(())
    }

    fn mkdir(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir(path)
    }

    fn rmdir(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir(path)
    }

    fn list_dirs(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(path)? {
            let e = e?;
            if e.file_type()?.is_dir() {
                if let Some(n) = e.file_name().to_str() {
                    out.push(n.to_owned());
                }
            }
        }
        out.sort();
        Ok(out)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn can_write(&self, path: &Path) -> bool {
        rustix::fs::access(path, rustix::fs::Access::WRITE_OK).is_ok()
    }

    fn chown(&self, path: &Path, uid: u32, gid: u32) -> io::Result<()> {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))
    }

    fn open_write(&self, path: &Path) -> io::Result<File> {
        // std opens with O_CLOEXEC; no O_CREAT, no O_TRUNC.
        OpenOptions::new().write(true).open(path)
    }

    fn euid(&self) -> u32 {
        rustix::process::geteuid().as_raw()
    }

    fn sigkill(&self, pid: i32) -> io::Result<()> {
        let Some(p) = rustix::process::Pid::from_raw(pid) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("not a process id: {pid}"),
            ));
        };
        match rustix::process::kill_process(p, rustix::process::Signal::KILL) {
            Ok(()) | Err(rustix::io::Errno::SRCH) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// `a/b` for a cgroup-relative path `b` that may start with `/`.
pub(crate) fn join_rel(base: &Path, rel: &str) -> PathBuf {
    let rel = rel.trim_start_matches('/');
    if rel.is_empty() {
        base.to_path_buf()
    } else {
        base.join(rel)
    }
}
