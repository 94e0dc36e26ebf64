//! In the stage, before anything of the caller runs: the placeholders of
//! protected names that did not exist, mounted read-only in a mount
//! namespace of the stage's own, then every capability given up.
//!
//! Why here and not in bubblewrap: bubblewrap re-reads the whole mount
//! table for every mount it makes, so each placeholder cost it about a
//! third of a millisecond, and an empty work folder has one per protected
//! name. Here each is one bind mount.
//!
//! What holds the placeholders afterwards:
//! - Each is bound from a source inside a read-only mount
//!   ([`PLACEHOLDERS_INSIDE`]), so the new mount is read-only itself.
//! - The stage's mount namespace is owned by the run's innermost user
//!   namespace, where the command has no capability (given up below, with
//!   the bounding and ambient sets emptied and no_new_privs set before the
//!   command is executed) and cannot get one: it cannot make a user
//!   namespace (bubblewrap's `--disable-userns`, and seccomp).
//! - No path is followed through a link: each component is resolved with
//!   `RESOLVE_NO_SYMLINKS`, the placeholder is created with `O_EXCL`/`mkdirat`
//!   under the resolved parent, and the mount goes onto the descriptor of
//!   what was checked (`/proc/self/fd/N`), never onto a path again.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{openat2, Mode, OFlags, ResolveFlags, CWD};
use rustix::io::Errno;

use crate::plan::{Placeholder, PlaceholderKind, PLACEHOLDERS_INSIDE};

/// Mounts `placeholders` (none: nothing happens, no namespace is made).
pub fn mount_placeholders(placeholders: &[Placeholder]) -> Result<(), String> {
    if placeholders.is_empty() {
        return Ok(());
    }
    oz0_sys::ns::unshare_mount_namespace()
        .map_err(|e| format!("placeholders: cannot make the stage's mount namespace: {e}"))?;
    for p in placeholders {
        mount_one(p).map_err(|e| format!("placeholder {}: {e}", p.path))?;
    }
    Ok(())
}

pub(crate) fn no_links(dir: impl AsFd, path: &Path, flags: OFlags) -> Result<OwnedFd, Errno> {
    openat2(
        dir,
        path,
        flags | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
}

fn mount_one(p: &Placeholder) -> Result<(), String> {
    let path = p.path.as_path();
    let (parent, name) = match (path.parent(), path.file_name()) {
        (Some(d), Some(n)) => (d, n),
        _ => return Err("not a path with a parent".into()),
    };
    let dir = no_links(CWD, parent, OFlags::PATH | OFlags::DIRECTORY)
        .map_err(|e| format!("its folder {}: {e}", parent.display()))?;
    let made = match p.kind {
        PlaceholderKind::Dir => rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o755)),
        PlaceholderKind::File => rustix::fs::openat(
            &dir,
            name,
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .map(drop),
    };
    match made {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => return Err(format!("cannot create it: {e}")),
    }
    // What is there now (made here, or made by someone else meanwhile) must
    // be of the expected kind and not a link.
    let target = no_links(&dir, Path::new(name), OFlags::PATH)
        .map_err(|e| format!("cannot open it without following links: {e}"))?;
    let st = rustix::fs::fstat(&target).map_err(|e| e.to_string())?;
    let ft = rustix::fs::FileType::from_raw_mode(st.st_mode);
    let ok = match p.kind {
        PlaceholderKind::Dir => ft == rustix::fs::FileType::Directory,
        PlaceholderKind::File => ft == rustix::fs::FileType::RegularFile,
    };
    if !ok {
        return Err(format!(
            "it appeared as a {ft:?} meanwhile: the run is refused"
        ));
    }
    let onto = format!("/proc/self/fd/{}", rustix::fd::AsRawFd::as_raw_fd(&target));
    rustix::mount::mount_bind(p.kind.source_inside().as_str(), onto.as_str())
        .map_err(|e| format!("cannot mount it read-only from {PLACEHOLDERS_INSIDE}: {e}"))
}

/// Gives up every capability: empties the bounding set (while
/// `CAP_SETPCAP` is still effective) and the ambient set, then the
/// effective, permitted and inheritable sets. Run in every stage, with or
/// without placeholders; a run whose stage cannot do it does not start.
pub fn drop_capabilities() -> Result<(), String> {
    use rustix::thread::{
        capabilities, capability_is_in_bounding_set, clear_ambient_capability_set,
        remove_capability_from_bounding_set, set_capabilities, CapabilitySet, CapabilitySets,
    };
    for cap in CapabilitySet::all().iter() {
        if capability_is_in_bounding_set(cap).unwrap_or(false) {
            remove_capability_from_bounding_set(cap)
                .map_err(|e| format!("cannot drop {cap:?} from the bounding set: {e}"))?;
        }
    }
    clear_ambient_capability_set().map_err(|e| format!("cannot clear the ambient set: {e}"))?;
    set_capabilities(
        None,
        CapabilitySets {
            effective: CapabilitySet::empty(),
            permitted: CapabilitySet::empty(),
            inheritable: CapabilitySet::empty(),
        },
    )
    .map_err(|e| format!("cannot give up capabilities: {e}"))?;
    let left = capabilities(None).map_err(|e| e.to_string())?;
    if !(left.effective.is_empty() && left.permitted.is_empty() && left.inheritable.is_empty()) {
        return Err(format!(
            "capabilities remain after giving them up: {left:?}"
        ));
    }
    Ok(())
}
