//! The run's `/dev`, built by the stage before anything of the caller runs.
//!
//! Why here and not in bubblewrap: bubblewrap's `--dev` binds each device
//! node on its own and re-reads the whole mount table after each bind, so it
//! cost about 1.2 ms of every run. Instead bubblewrap binds the host's `/dev`
//! once, at [`HOST_DEV_INSIDE`], and the stage, in the run's one mount
//! namespace (bubblewrap's), before anything of the caller runs:
//! - mounts a tmpfs at `/dev` (mode 0755, nosuid, nodev), as `--dev` does;
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

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags, CWD};
use rustix::io::Errno;
use rustix::mount::{MountFlags, UnmountFlags};

use crate::hold::no_links;
use crate::plan::HOST_DEV_INSIDE;

/// Builds the run's `/dev` with `devices` (names under `/dev`) from the
/// host's at [`HOST_DEV_INSIDE`], then detaches the host's.
pub fn build(devices: &[String]) -> Result<(), String> {
    let host = no_links(
        CWD,
        Path::new(HOST_DEV_INSIDE),
        OFlags::PATH | OFlags::DIRECTORY,
    )
    .map_err(|e| format!("the host's /dev at {HOST_DEV_INSIDE}: {e}"))?;
    match rustix::fs::mkdir("/dev", Mode::from_raw_mode(0o755)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => return Err(format!("cannot make /dev: {e}")),
    }
    rustix::mount::mount(
        "tmpfs",
        "/dev",
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        c"mode=0755",
    )
    .map_err(|e| format!("cannot mount a tmpfs at /dev: {e}"))?;
    let dev = no_links(CWD, Path::new("/dev"), OFlags::RDONLY | OFlags::DIRECTORY)
        .map_err(|e| format!("/dev: {e}"))?;
    for name in devices {
        bind_node(&host, &dev, name).map_err(|e| format!("/dev/{name}: {e}"))?;
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
        rustix::fs::symlinkat(target, &dev, name).map_err(|e| format!("/dev/{name}: {e}"))?;
    }
    for name in ["shm", "pts"] {
        rustix::fs::mkdirat(&dev, name, Mode::from_raw_mode(0o755))
            .map_err(|e| format!("/dev/{name}: {e}"))?;
    }
    rustix::mount::mount(
        "devpts",
        "/dev/pts",
        "devpts",
        MountFlags::NOSUID | MountFlags::NOEXEC,
        c"newinstance,ptmxmode=0666,mode=620",
    )
    .map_err(|e| format!("cannot mount a devpts instance at /dev/pts: {e}"))?;
    console(&host, &dev).map_err(|e| format!("/dev/console: {e}"))?;
    drop(host);
    rustix::mount::unmount(HOST_DEV_INSIDE, UnmountFlags::DETACH)
        .map_err(|e| format!("cannot detach the host's /dev from {HOST_DEV_INSIDE}: {e}"))?;
    rustix::fs::rmdir(HOST_DEV_INSIDE).map_err(|e| format!("{HOST_DEV_INSIDE}: {e}"))
}

/// Binds host device `name` (a path under `/dev`, maybe in a subfolder)
/// onto an empty file at the same place under `dev`.
fn bind_node(host: &OwnedFd, dev: &OwnedFd, name: &str) -> Result<(), String> {
    let path = Path::new(name);
    let (Some(parent), Some(leaf)) = (path.parent(), path.file_name()) else {
        return Err("not a device name".into());
    };
    let (mut from, mut onto) = (None, None);
    for part in parent.components() {
        let part: &Path = part.as_os_str().as_ref();
        let up = from.as_ref().unwrap_or(host);
        from = Some(
            no_links(up, part, OFlags::PATH | OFlags::DIRECTORY)
                .map_err(|e| format!("the host's folder: {e}"))?,
        );
        let up = onto.as_ref().unwrap_or(dev);
        match rustix::fs::mkdirat(up, part, Mode::from_raw_mode(0o755)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(format!("cannot make its folder: {e}")),
        }
        onto = Some(
            no_links(up, part, OFlags::RDONLY | OFlags::DIRECTORY)
                .map_err(|e| format!("its folder: {e}"))?,
        );
    }
    let (from, onto) = (from.as_ref().unwrap_or(host), onto.as_ref().unwrap_or(dev));
    let node = clone_mount(from, leaf).map_err(|e| format!("the host's: {e}"))?;
    if !is_char_device(&node) {
        return Err("the host's is not a character device".into());
    }
    let target = rustix::fs::openat(
        onto,
        leaf,
        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o444),
    )
    .map_err(|e| format!("cannot make its mount point: {e}"))?;
    attach(&node, &target).map_err(|e| format!("cannot bind it from the host's: {e}"))
}

/// Binds the terminal on the standard output, if it is one that the host's
/// `/dev` holds, to `console`. Anything else leaves no `console`.
fn console(host: &OwnedFd, dev: &OwnedFd) -> Result<(), String> {
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
    // The terminal's folder (`pts`) and name, reached without links.
    let Some(rel) = name.to_str().ok().and_then(|n| n.strip_prefix("/dev/")) else {
        return Ok(());
    };
    let rel = Path::new(rel);
    let (Some(parent), Some(leaf)) = (rel.parent(), rel.file_name()) else {
        return Ok(());
    };
    let from = if parent.as_os_str().is_empty() {
        None
    } else {
        match no_links(host, parent, OFlags::PATH | OFlags::DIRECTORY) {
            Ok(d) => Some(d),
            Err(_) => return Ok(()),
        }
    };
    let Ok(tty) = clone_mount(from.as_ref().unwrap_or(host), leaf) else {
        return Ok(());
    };
    match rustix::fs::fstat(&tty) {
        Ok(s) if is_char_device(&tty) && s.st_rdev == st.st_rdev => {}
        _ => return Ok(()),
    }
    let target = rustix::fs::openat(
        dev,
        "console",
        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o444),
    )
    .map_err(|e| format!("cannot make its mount point: {e}"))?;
    attach(&tty, &target).map_err(|e| format!("cannot bind the terminal: {e}"))
}

fn is_char_device(fd: &impl AsFd) -> bool {
    rustix::fs::fstat(fd)
        .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::CharacterDevice)
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
