//! The daemon's own files on every platform: the job records' folders and
//! files (private to the node's user), and reading a job's output while it
//! is written. On Unix a folder is 0700 and a file 0600, and nothing is
//! reached through a link; on Windows they inherit the data directory's
//! access list, which the node makes private at start (`win::node`).

use std::fs::{self, File, Metadata};
use std::path::Path;

/// Makes `dir` (and its parents) a private folder of this user, refusing a
/// symbolic link, what is no folder, or (on Unix) another user's folder.
pub(super) fn private_dir(dir: &Path, what: &str) -> Result<(), String> {
    match fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_symlink() || !m.is_dir() => Err(format!(
            "{what} {} is not a folder (or is a symbolic link): name a folder",
            dir.display()
        )),
        Ok(m) => private_mode(dir, &m, what),
        Err(_) => make_dir(dir).map_err(|e| format!("cannot create {what} {}: {e}", dir.display())),
    }
}

#[cfg(unix)]
fn private_mode(dir: &Path, m: &Metadata, what: &str) -> Result<(), String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if m.uid() != rustix::process::getuid().as_raw() {
        return Err(format!(
            "{what} {} belongs to another user: name a folder of this user",
            dir.display()
        ));
    }
    if m.permissions().mode() & 0o077 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("{what} {}: {e}", dir.display()))?;
    }
    Ok(())
}

#[cfg(windows)]
fn private_mode(_: &Path, _: &Metadata, _: &str) -> Result<(), String> {
    Ok(())
}

#[cfg(unix)]
fn make_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(windows)]
fn make_dir(dir: &Path) -> std::io::Result<()> {
    fs::create_dir_all(dir)
}

/// Creates (or empties) the file `path` for writing, private to this user.
pub(super) fn create_private(path: &Path) -> std::io::Result<File> {
    let mut o = fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    o.open(path)
}

/// Opens `path` to read it, never through a link at its end (Unix).
pub(super) fn open_read(path: &Path) -> std::io::Result<File> {
    let mut o = fs::OpenOptions::new();
    o.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut o, libc::O_NOFOLLOW);
    o.open(path)
}

/// Whether `a` and `b` are the same file. On Windows, where std gives no
/// file identity, a job's record is trusted as its folder is: a tier-0 job
/// runs with the node's own rights, so no check here would hold it.
#[cfg(unix)]
pub(super) fn same_file(a: &Metadata, b: &Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    (a.dev(), a.ino()) == (b.dev(), b.ino())
}

#[cfg(windows)]
pub(super) fn same_file(_: &Metadata, _: &Metadata) -> bool {
    true
}

/// Reads at `offset` into `buf`, leaving the file's position alone.
pub(super) fn read_at(f: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    #[cfg(unix)]
    return std::os::unix::fs::FileExt::read_at(f, buf, offset);
    #[cfg(windows)]
    return std::os::windows::fs::FileExt::seek_read(f, buf, offset);
}

/// Removes a job's work folder whatever the run left in it (nothing, when
/// it is not there), or says why it could not. A folder the run made
/// unwritable or unreadable to its owner (`chmod 500 d`) would stop the
/// removal, and each such job would leave its files on the node's disk for
/// good: on Linux each folder gets its owner's permissions back first,
/// reached by descriptor without following any link. Deeper than [`MAX_DEPTH`]
/// folders, or past [`MAX_ENTRIES`] entries, it stops and says so.
pub(super) fn remove_work(work: &Path) -> Result<(), String> {
    let first = match fs::remove_dir_all(work) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => e,
    };
    let said = |e: &dyn std::fmt::Display| {
        format!(
            "cannot remove the job's work folder {}: {e}; it is left on the disk",
            work.display()
        )
    };
    #[cfg(target_os = "linux")]
    {
        // The first error is most likely the one this mends.
        drop(first);
        let mut budget = MAX_ENTRIES;
        owners_again(work, &mut budget).map_err(|e| said(&e))?;
        fs::remove_dir_all(work).map_err(|e| said(&e))
    }
    #[cfg(not(target_os = "linux"))]
    Err(said(&first))
}

/// Most levels of folders given back to their owner.
#[cfg(target_os = "linux")]
const MAX_DEPTH: usize = 256;
/// Most entries looked at when giving folders back.
#[cfg(target_os = "linux")]
const MAX_ENTRIES: usize = 2_000_000;

/// Gives `top` and every folder below it rwx for its owner (this user).
#[cfg(target_os = "linux")]
fn owners_again(top: &Path, budget: &mut usize) -> std::io::Result<()> {
    use rustix::fs::{Mode, OFlags, CWD};
    let path = rustix::fs::openat(
        CWD,
        top,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    folder_again(&path, 0, budget)
}

/// `dir` (an `O_PATH` descriptor of a folder) and the folders below it.
#[cfg(target_os = "linux")]
fn folder_again(
    dir: &std::os::fd::OwnedFd,
    depth: usize,
    budget: &mut usize,
) -> std::io::Result<()> {
    use rustix::fs::{FileType, Mode, OFlags};
    use std::os::fd::AsRawFd;
    let too = |what: String| std::io::Error::other(what);
    if depth > MAX_DEPTH {
        return Err(too(format!("folders deeper than {MAX_DEPTH} levels")));
    }
    // chmod through the descriptor's /proc name: the object itself, with
    // no path to swap.
    let own = format!("/proc/self/fd/{}", dir.as_raw_fd());
    rustix::fs::chmod(own.as_str(), Mode::from_raw_mode(0o700))?;
    let open = rustix::fs::open(
        own.as_str(),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(&open)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        *budget = budget
            .checked_sub(1)
            .ok_or_else(|| too(format!("more than {MAX_ENTRIES} entries")))?;
        if matches!(entry.file_type(), FileType::Directory | FileType::Unknown) {
            names.push(name.to_owned());
        }
    }
    for name in names {
        match rustix::fs::openat(
            &open,
            name.as_c_str(),
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(sub) => folder_again(&sub, depth + 1, budget)?,
            // No folder (a link, a file of unknown type), or gone.
            Err(rustix::io::Errno::NOTDIR | rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::os::unix::fs::{symlink, PermissionsExt};

    /// Folders a run made unwritable and unreadable are removed with the
    /// rest; a link to a folder outside is removed, not followed.
    #[test]
    fn a_work_folder_is_removed_whatever_the_run_left() {
        let base = std::env::temp_dir().join(format!("oz0-remove-work-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (work, outside) = (base.join("work"), base.join("outside"));
        std::fs::create_dir_all(work.join("d/e/g")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(work.join("d/e/f"), "x").unwrap();
        std::fs::write(outside.join("kept"), "x").unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o500)).unwrap();
        symlink(&outside, work.join("d/out")).unwrap();
        let mode = |p: &std::path::Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        mode(&work.join("d/e/g"), 0o000);
        mode(&work.join("d/e"), 0o500);
        mode(&work.join("d"), 0o000);
        // Root is not held back by a folder's mode (tests/edge_link.rs
        // shows it as the node's user, through a job).
        if !rustix::process::geteuid().is_root() {
            assert!(
                std::fs::remove_dir_all(&work).is_err(),
                "std alone removes it"
            );
        }
        super::remove_work(&work).unwrap();
        assert!(std::fs::symlink_metadata(&work).is_err());
        assert!(outside.join("kept").exists());
        let m = std::fs::metadata(&outside).unwrap().permissions().mode();
        assert_eq!(m & 0o777, 0o500, "the folder outside was changed");
        // Not there: nothing to do.
        super::remove_work(&work).unwrap();
        mode(&outside, 0o700);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
