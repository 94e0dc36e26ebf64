//! The run's `/dev`, built by the stage before anything of the caller runs.
//!
//! Why here and not in bubblewrap: bubblewrap's `--dev` binds each device
//! node on its own and re-reads the whole mount table after each bind, so it
//! cost about 1.2 ms of every run. Instead bubblewrap binds the host's `/dev`
//! once, at [`HOST_DEV_INSIDE`], and the stage, in the run's one mount
//! namespace (bubblewrap's), before anything of the caller runs:
//! - mounts a tmpfs at `/dev` (mode 0755, nosuid, nodev), as `--dev` does,
//!   of the run's bounded size and number of files (`/dev/shm` is in it);
//! - binds each of the plan's device nodes onto an empty file there, from
//!   the host's: each must be a character device, and no link is followed
//!   on the way to it;
//! - makes the links `stdin`, `stdout`, `stderr`, `fd`, `core` and `ptmx`,
//!   the folder `shm`, and a new devpts instance at `pts` (the run's
//!   terminals are its own, not the host's);
//! - binds the terminal on the standard output to `console` when it is one
//!   (so `ttyname` works inside), checked to be the very same device;
//! - detaches the host's `/dev`, with every mount under it, and removes its
//!   mount point.
//!
//! If any step fails, the run is refused with the reason, and nothing of the
//! caller runs.

use crate::hold::{os, within, StageError};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags, CWD};
use rustix::io::Errno;
use rustix::mount::{MountFlags, UnmountFlags};

use crate::hold::no_links;
use crate::plan::{TmpfsSize, HOST_DEV_INSIDE};

/// Builds the run's `/dev` with `devices` (names under `/dev`) from the
/// host's at [`HOST_DEV_INSIDE`], then detaches the host's.
pub fn build(devices: &[String], size: TmpfsSize) -> Result<(), StageError> {
    let host = no_links(
        CWD,
        Path::new(HOST_DEV_INSIDE),
        OFlags::PATH | OFlags::DIRECTORY,
    )
    .map_err(os(format!("the host's /dev at {HOST_DEV_INSIDE}")))?;
    mount_tmpfs("/dev", size)?;
    let dev =
        no_links(CWD, Path::new("/dev"), OFlags::RDONLY | OFlags::DIRECTORY).map_err(os("/dev"))?;
    for name in devices {
        bind_node(&host, &dev, name).map_err(within(format!("/dev/{name}")))?;
    }
    let links = [
        ("/proc/self/fd/0", "stdin"),
        ("/proc/self/fd/1", "stdout"),
        ("/proc/self/fd/2", "stderr"),
        ("/proc/self/fd", "fd"),
        ("/proc/kcore", "core"),
        ("pts/ptmx", "ptmx"),
    ];
    for (target, name) in links {
        rustix::fs::symlinkat(target, &dev, name).map_err(os(format!("/dev/{name}")))?;
    }
    for name in ["shm", "pts"] {
        rustix::fs::mkdirat(&dev, name, Mode::from_raw_mode(0o755))
            .map_err(os(format!("/dev/{name}")))?;
    }
    mount_fs(
        "devpts",
        "/dev/pts",
        MountFlags::NOSUID | MountFlags::NOEXEC,
        c"newinstance,ptmxmode=0666,mode=620",
    )?;
    console(&host, &dev).map_err(within("/dev/console"))?;
    drop(host);
    rustix::mount::unmount(HOST_DEV_INSIDE, UnmountFlags::DETACH).map_err(os(format!(
        "cannot detach the host's /dev from {HOST_DEV_INSIDE}"
    )))?;
    rustix::fs::rmdir(HOST_DEV_INSIDE).map_err(os(HOST_DEV_INSIDE))
}

/// Mounts a tmpfs of `size` (mode 0755, nosuid, nodev) at `at`, a folder
/// of the run's root made for it when missing.
fn mount_tmpfs(at: &str, size: TmpfsSize) -> Result<(), StageError> {
    match rustix::fs::mkdir(at, Mode::from_raw_mode(0o755)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => return Err(os(format!("cannot make {at}"))(e)),
    }
    let options =
        std::ffi::CString::new(format!("mode=0755,{}", size.options())).expect("no NUL in numbers");
    mount_fs(
        "tmpfs",
        at,
        MountFlags::NOSUID | MountFlags::NODEV,
        &options,
    )
}

/// Gives the tmpfs mounted at `at` the size `size` (a remount: what is
/// mounted under it stays).
pub fn size_tmpfs(at: &str, size: TmpfsSize) -> Result<(), StageError> {
    let options = std::ffi::CString::new(size.options()).expect("no NUL in numbers");
    rustix::mount::mount_remount(at, MountFlags::NOSUID | MountFlags::NODEV, &*options).map_err(os(
        format!("cannot give {at} its size ({})", size.options()),
    ))
}

/// Mounts a new file system of type `fs` at `at`.
fn mount_fs(
    fs: &str,
    at: &str,
    flags: MountFlags,
    data: &std::ffi::CStr,
) -> Result<(), StageError> {
    rustix::mount::mount(fs, at, fs, flags, data)
        .map_err(os(format!("cannot mount a {fs} at {at}")))
}

/// Binds host device `name` (a path under `/dev`, maybe in a subfolder)
/// onto an empty file at the same place under `dev`.
fn bind_node(host: &OwnedFd, dev: &OwnedFd, name: &str) -> Result<(), StageError> {
    let path = Path::new(name);
    let (parent, leaf) =
        split(path).ok_or_else(|| StageError::Refused("not a device name".into()))?;
    let (node, _) = host_device(host, path)?
        .ok_or_else(|| StageError::Refused("the host's is not a character device".into()))?;
    // The same folders under `dev`, made as needed.
    let mut onto = None;
    for part in parent.components() {
        let part: &Path = part.as_os_str().as_ref();
        let up = onto.as_ref().unwrap_or(dev);
        match rustix::fs::mkdirat(up, part, Mode::from_raw_mode(0o755)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(os("cannot make its folder")(e)),
        }
        onto =
            Some(no_links(up, part, OFlags::RDONLY | OFlags::DIRECTORY).map_err(os("its folder"))?);
    }
    attach_at(&node, onto.as_ref().unwrap_or(dev), leaf)
}

/// Binds the terminal on the standard output, if it is one that the host's
/// `/dev` holds, to `console`. Anything else leaves no `console`.
fn console(host: &OwnedFd, dev: &OwnedFd) -> Result<(), StageError> {
    use std::io::IsTerminal;
    let out = std::io::stdout();
    if !out.is_terminal() {
        return Ok(());
    }
    let Ok(st) = rustix::fs::fstat(&out) else {
        return Ok(());
    };
    let Ok(name) = rustix::fs::readlink(format!("/proc/self/fd/{}", out.as_raw_fd()), Vec::new())
    else {
        return Ok(());
    };
    let Some(rel) = name.to_str().ok().and_then(|n| n.strip_prefix("/dev/")) else {
        return Ok(());
    };
    match host_device(host, Path::new(rel)) {
        Ok(Some((tty, rdev))) if rdev == st.st_rdev => attach_at(&tty, dev, "console"),
        _ => Ok(()),
    }
}

/// `path`'s folder (empty at the top) and last name.
fn split(path: &Path) -> Option<(&Path, &std::ffi::OsStr)> {
    Some((path.parent()?, path.file_name()?))
}

/// A detached copy of the mount of the host's device at `rel` under `host`
/// (reached without following any link), with its device number; `None`
/// when what is there is not a character device.
fn host_device(
    host: &OwnedFd,
    rel: &Path,
) -> Result<Option<(OwnedFd, rustix::fs::Dev)>, StageError> {
    let (parent, leaf) =
        split(rel).ok_or_else(|| StageError::Refused("not a device name".into()))?;
    let folder = if parent.as_os_str().is_empty() {
        None
    } else {
        Some(
            no_links(host, parent, OFlags::PATH | OFlags::DIRECTORY)
                .map_err(os("the host's folder"))?,
        )
    };
    let node = clone_mount(folder.as_ref().unwrap_or(host), leaf).map_err(os("the host's"))?;
    let st = rustix::fs::fstat(&node).map_err(os("the host's"))?;
    Ok(
        (FileType::from_raw_mode(st.st_mode) == FileType::CharacterDevice)
            .then_some((node, st.st_rdev)),
    )
}

/// Attaches the detached mount `tree` onto a new empty file `name` in `dir`.
fn attach_at(
    tree: &OwnedFd,
    dir: &OwnedFd,
    name: impl rustix::path::Arg,
) -> Result<(), StageError> {
    let target = rustix::fs::openat(
        dir,
        name,
        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o444),
    )
    .map_err(os("cannot make its mount point"))?;
    attach(tree, &target).map_err(os("cannot bind it from the host's"))
}

/// A detached copy of the mount at `name` in `dir`, which must not be a
/// link (`open_tree(OPEN_TREE_CLONE)`), for [`attach`].
pub(crate) fn clone_mount(dir: &impl AsFd, name: impl rustix::path::Arg) -> Result<OwnedFd, Errno> {
    use rustix::mount::OpenTreeFlags;
    rustix::mount::open_tree(
        dir,
        name,
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_SYMLINK_NOFOLLOW,
    )
}

/// Attaches the detached mount `tree` (from [`clone_mount`]) onto what
/// `onto` is, by descriptor: no path is resolved again.
pub(crate) fn attach(tree: &impl AsFd, onto: &impl AsFd) -> Result<(), Errno> {
    use rustix::mount::MoveMountFlags;
    rustix::mount::move_mount(
        tree,
        "",
        onto,
        "",
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
    )
}
