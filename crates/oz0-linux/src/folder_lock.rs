//! What the node holds locked for a run's length: each writable folder
//! (`flock`, exclusive), so that no two runs share one at once, and for a
//! runtime that binds its work folder by path (gVisor), every folder above
//! it (shared), so that no run can rename it away meanwhile.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::OFlags;
use rustix::io::Errno;

/// What the node holds for the run's length: a descriptor of each writable
/// folder, locked (`flock`) so that no other run shares it meanwhile (see
/// [`gather`](crate::host::gather)). Dropping it (or the node's end) lets them go.
#[derive(Debug, Default)]
pub struct Held {
    _locked: Vec<OwnedFd>,
    /// Each folder above a held one, locked shared (see [`lock_with_ancestors`]).
    _above: Vec<OwnedFd>,
    /// The folders, as named.
    paths: Vec<PathBuf>,
}

impl Held {
    /// Adds the folder `path`, locked at `fd`.
    pub(crate) fn push(&mut self, fd: OwnedFd, path: PathBuf) {
        self._locked.push(fd);
        self.paths.push(path);
    }

    /// Each folder held, with its descriptor.
    pub fn folders(&self) -> Vec<(&Path, &OwnedFd)> {
        self.paths
            .iter()
            .map(PathBuf::as_path)
            .zip(self._locked.iter())
            .collect()
    }
}

/// How long a run waits for a folder that is held: a sweep of a dead run's
/// leftovers holds it for a moment (see `launch::sweep_stale`); a live run
/// holds it for its whole length.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

/// Locks the folder open at `fd`, waiting up to [`LOCK_WAIT`] for another
/// holder to let it go.
pub(crate) fn lock_briefly(fd: &OwnedFd) -> Result<(), Errno> {
    lock_briefly_as(fd, rustix::fs::FlockOperation::NonBlockingLockExclusive)
}

/// [`lock_briefly`] with the lock `how`.
fn lock_briefly_as(fd: &OwnedFd, how: rustix::fs::FlockOperation) -> Result<(), Errno> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match rustix::fs::flock(fd, how) {
            Err(Errno::WOULDBLOCK) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            r => return r,
        }
    }
}

/// Locks each of the writable folders `roots` (as [`gather`](crate::host::gather) does), or
/// `None` when another run holds one of them. A folder that is gone or is
/// not one (no longer a folder, or reached through a link) needs no lock.
pub fn lock_folders(roots: &[PathBuf]) -> Option<Held> {
    let mut held = Held::default();
    for r in roots {
        let Ok(fd) = crate::hostfs::open_no_links(r, OFlags::RDONLY | OFlags::DIRECTORY) else {
            continue;
        };
        match rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {
                held.push(fd, r.clone());
            }
            Err(_) => return None,
        }
    }
    Some(held)
}

/// Why a folder and those above it could not be held.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HoldError {
    /// The path is not absolute, or names no folder reached without a link.
    #[error("{path}: not a folder reached from / without any symbolic link ({source}): name the folder itself")]
    NotAFolder {
        /// The path, as far as it was walked.
        path: String,
        /// What the walk met.
        source: Errno,
    },
    /// Another run holds the folder, or one above it, writable.
    #[error("another run holds {0} writable (its work folder or a --write folder): runs never share a writable folder at once, nor one inside it")]
    InUse(String),
}

/// Holds the folder `path` as [`lock_folders`] does (locked exclusively),
/// and every folder above it up to `/` locked shared, each opened from the
/// one above it with no link followed.
///
/// For a runtime that binds the folder by its path rather than by a
/// descriptor: a run can rename a folder's entry only by writing the folder
/// that holds it, and every run holds its writable folders locked
/// exclusively for its length. So while this is held, no run can write
/// any folder on the way, the path names the folder held, and a run that
/// would hold one of them writable is refused (after a quarter second).
pub fn lock_with_ancestors(path: &Path) -> Result<Held, HoldError> {
    use std::path::Component;
    let walked = |upto: &Path, source| HoldError::NotAFolder {
        path: upto.display().to_string(),
        source,
    };
    let flags = OFlags::RDONLY | OFlags::DIRECTORY;
    let mut parts = path.components();
    if parts.next() != Some(Component::RootDir) {
        return Err(walked(path, Errno::INVAL));
    }
    let mut at = PathBuf::from("/");
    let mut fd = crate::hostfs::open_no_links(&at, flags).map_err(|e| walked(&at, e))?;
    let mut above = Vec::new();
    for part in parts {
        let Component::Normal(name) = part else {
            return Err(walked(path, Errno::INVAL));
        };
        lock_briefly_as(&fd, rustix::fs::FlockOperation::NonBlockingLockShared)
            .map_err(|_| HoldError::InUse(at.display().to_string()))?;
        let next = crate::hostfs::open_beneath(&fd, Path::new(name), flags);
        at.push(name);
        above.push(std::mem::replace(
            &mut fd,
            next.map_err(|e| walked(&at, e))?,
        ));
    }
    if above.is_empty() {
        return Err(walked(path, Errno::INVAL));
    }
    lock_briefly(&fd).map_err(|_| HoldError::InUse(at.display().to_string()))?;
    Ok(Held {
        _locked: vec![fd],
        _above: above,
        paths: vec![at],
    })
}
