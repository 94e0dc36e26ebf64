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
