//! In the stage, before anything of the caller runs: the run's `/dev` is
//! built, the placeholders of protected names that did not exist are
//! mounted read-only and the run's root is made read-only; then the stage
//! moves into a user namespace of its own and gives up every capability.
//!
//! Why here and not in bubblewrap: bubblewrap re-reads the whole mount
//! table for every mount it makes or changes, so each placeholder cost it
//! about a third of a millisecond, and an empty work folder has one per
//! protected name. Here each is one bind mount.
//!
//! The node makes the placeholders on the host (an empty folder or file at
//! each place, see `launch`) while bubblewrap builds the sandbox, and says
//! on [`fds::READY`] when they are all there; the stage waits for that word
//! before it mounts anything.
//!
//! What holds the placeholders afterwards:
//! - Their sources (an empty file and an empty folder) are made on the
//!   run's root at [`PLACEHOLDERS_INSIDE`], bound onto themselves and made
//!   read-only before any placeholder is bound from them, so every
//!   placeholder is a read-only mount itself. The command may see the
//!   sources there (where Landlock is missing), empty and read-only.
//! - The run's mount namespace is bubblewrap's, owned by the run's first
//!   user namespace. The command runs in a second one below it (see
//!   [`enter_own_user_namespace`]), where it has no capability either (given
//!   up below, with the bounding and ambient sets emptied and no_new_privs
//!   set before the command is executed) and cannot get one: it cannot make
//!   a user namespace (`user.max_user_namespaces`, and seccomp).
//! - No path is followed through a link: each component is resolved with
//!   `RESOLVE_NO_SYMLINKS`, what is at the placeholder's place must be of
//!   its kind, and the mount is attached by descriptor onto what was
//!   checked (`open_tree`/`move_mount`), never onto a path again.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{Mode, OFlags, CWD};
use rustix::io::Errno;

use rustix::mount::MountFlags;

use crate::host::FileId;
use crate::plan::{
    fds, Expect, Hold, Placeholder, PlaceholderKind, TmpfsSize, PLACEHOLDERS_INSIDE,
    PLACEHOLDER_DIR, PLACEHOLDER_FILE, PLACEHOLDER_SELF, SELF_REF, TMP_INSIDE,
};
use oz0_policy::AbsPath;

/// The node's word on [`fds::READY`] that every placeholder is in place.
pub const READY_WORD: &[u8] = b"ready";

/// Builds the run's `/dev` with `devices` (see [`crate::devfs`]), gives it
/// and the run's `/tmp` (bubblewrap's, under the caller's folders there)
/// the size `tmp`, mounts `placeholders` (once the node
/// says they are in place) and makes the run's root read-only (bubblewrap leaves it writable for this). All in
/// bubblewrap's mount namespace, where the stage still has `CAP_SYS_ADMIN`
/// (see [`enter_own_user_namespace`]).
pub fn prepare_mounts(
    devices: &[String],
    tmp: TmpfsSize,
    holds: &[Hold],
    placeholders: &[Placeholder],
) -> Result<(), StageError> {
    crate::devfs::build(devices, tmp).map_err(within("the run's /dev"))?;
    crate::devfs::size_tmpfs(TMP_INSIDE, tmp)?;
    let sources = if placeholders.is_empty() {
        None
    } else {
        Some(make_sources().map_err(os("placeholder sources"))?)
    };
    wait_ready()?;
    for h in holds {
        bind_in_place(h).map_err(within(format!("protected path {}", h.path)))?;
    }
    if let Some(sources) = &sources {
        let mut folders = Folders::default();
        for p in placeholders {
            let (dir, name) = folders.place(p)?;
            mount_one(sources, dir, name, p.kind)
                .map_err(within(format!("placeholder {}", p.path)))?;
        }
    }
    rustix::mount::mount_remount(
        "/",
        MountFlags::BIND | MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV,
        "",
    )
    .map_err(os("cannot make the run's root read-only"))
}

/// Checks that bubblewrap mounted each of `expect` where the plan put it:
/// at its path, reached without any link, a mount of its own (the root of a
/// mount) whose object is the one the node opened on the host, and
/// read-only when it must be. bubblewrap binds by path; a run that can write
/// a parent folder of another run's path could swap a link or another
/// folder in between the node's look and the bind (a `--read` folder
/// exchanged for a link to `~/.ssh`, say). Then the run is refused: nothing
/// of the caller has run yet.
pub fn verify_binds(expect: &[Expect]) -> Result<(), StageError> {
    for e in expect {
        check_mounted(&e.path, e.id, e.readonly).map_err(|why| {
            StageError::Refused(format!(
                "{} is not what the node looked at ({why}): it was replaced while the sandbox was being built, by another process that can write its folder; the run is refused",
                e.path
            ))
        })?;
    }
    Ok(())
}

/// Checks that the run's mount table holds exactly `expected` mount
/// points (see `plan::mount_points`), and nothing else but a console and
/// the proc file system's own: a bubblewrap that mounted one more host
/// folder into the run (`--ro-bind /home /home`, or a writable one), or one
/// fewer, is refused before anything of the caller runs. With the identity
/// of each bind checked (see [`verify_binds`]), the mount layer is proven
/// on its own, not only together with Landlock.
pub fn verify_mount_table(expected: &[String]) -> Result<(), StageError> {
    let text = crate::host::read_proc("/proc/self/mountinfo")
        .map_err(os("cannot read the run's mount table"))?;
    let mut found: Vec<String> = crate::host::parse_mount_points(&text)
        .into_iter()
        .filter(|(m, fs)| !(m == "/dev/console" || (m.starts_with("/proc/") && *fs == "proc")))
        .map(|(m, _)| m)
        .collect();
    found.sort();
    if found == expected {
        return Ok(());
    }
    let count = |v: &[String], m: &String| v.iter().filter(|x| *x == m).count();
    let extra = found.iter().find(|m| count(&found, m) > count(expected, m));
    let missing = expected
        .iter()
        .find(|m| count(expected, m) > count(&found, m));
    Err(StageError::Refused(match (extra, missing) {
        (Some(m), _) => format!(
            "the run's mount table holds {m:?}, which the node did not plan: bubblewrap (or what stands in its place) mounted more than it was asked to; the mount layer is not the plan, so the run is refused"
        ),
        (None, Some(m)) => format!(
            "{m:?} is not mounted in the run, though the node planned it: the mount layer is not the plan, so the run is refused"
        ),
        (None, None) => "the run's mount table is not the plan".into(),
    }))
}

/// Checks that `path`, reached without any link, is the root of a mount
/// whose object is `id`, read-only when `readonly`; or says what it is not.
fn check_mounted(path: &AbsPath, id: FileId, readonly: bool) -> Result<(), StageError> {
    use rustix::fs::{statx, AtFlags, StatVfsMountFlags, StatxAttributes, StatxFlags};
    let fd = no_links(CWD, path.as_path(), OFlags::PATH)
        .map_err(os("it cannot be opened without following a link"))?;
    let st = statx(&fd, "", AtFlags::EMPTY_PATH, StatxFlags::BASIC_STATS).map_err(os("stat"))?;
    if !st.stx_attributes_mask.contains(StatxAttributes::MOUNT_ROOT) {
        return Err(StageError::Refused("this kernel does not say which paths are mount points (statx STATX_ATTR_MOUNT_ROOT, Linux 5.8 or newer), so the stage cannot check it".into()));
    }
    if !st.stx_attributes.contains(StatxAttributes::MOUNT_ROOT) {
        return Err(StageError::Refused("nothing is mounted there".into()));
    }
    if (st.stx_dev_major, st.stx_dev_minor, st.stx_ino) != (id.major, id.minor, id.ino) {
        return Err(StageError::Refused(
            "another object is mounted there".into(),
        ));
    }
    if readonly {
        let vfs = rustix::fs::fstatvfs(&fd).map_err(os("stat"))?;
        if !vfs.f_flag.contains(StatVfsMountFlags::RDONLY) {
            return Err(StageError::Refused("it is mounted writable".into()));
        }
    }
    Ok(())
}

/// Binds the protected path of `h` onto itself, by descriptor: a copy of
/// what is at its place (checked to be the object the node looked at, and
/// reached without following any link), read-only if it must be, attached
/// onto that very object; then checks the result by path. A mount point
/// cannot be renamed or removed from within the run, so neither can what
/// is held.
fn bind_in_place(h: &Hold) -> Result<(), StageError> {
    let path = h.path.as_path();
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(StageError::Refused("not a path with a parent".into()));
    };
    let dir = no_links(CWD, parent, OFlags::PATH | OFlags::DIRECTORY).map_err(os("its folder"))?;
    let target = no_links(&dir, Path::new(name), OFlags::PATH)
        .map_err(os("cannot open it without following links"))?;
    let st = rustix::fs::fstat(&target).map_err(os("stat"))?;
    let found = FileId {
        major: rustix::fs::major(st.st_dev),
        minor: rustix::fs::minor(st.st_dev),
        ino: st.st_ino,
    };
    if found != h.id {
        return Err(StageError::Refused(
            "it is not what the node looked at (it was replaced meanwhile): the run is refused"
                .into(),
        ));
    }
    let tree = crate::devfs::clone_mount(&dir, name).map_err(os("cannot copy its mount"))?;
    if h.readonly {
        oz0_sys::ns::make_mount_read_only(tree.as_fd()).map_err(os("cannot make it read-only"))?;
    }
    crate::devfs::attach(&tree, &target).map_err(os("cannot bind it onto itself"))?;
    check_mounted(&h.path, h.id, h.readonly)
}

/// Takes the run out of reach of its own namespaces and forbids nested user
/// namespaces, the way bubblewrap's `--disable-userns` does: in the run's
/// first user namespace (which owns its mount, pid, network... namespaces)
/// it sets `user.max_user_namespaces` to 1, then moves into a new user
/// namespace below it, with the same uid and gid, and checks that no further
/// one can be made. The command runs there: with no capability in the
/// namespace that owns its mounts, and none to get, since a user namespace
/// below would be a second one under the first.
///
/// Leaves the stage with every capability of the new namespace and a full
/// bounding set: [`drop_capabilities`] must follow.
pub fn enter_own_user_namespace() -> Result<(), StageError> {
    let (uid, gid) = (
        rustix::process::getuid().as_raw(),
        rustix::process::getgid().as_raw(),
    );
    std::fs::write("/proc/sys/user/max_user_namespaces", b"1")
        .map_err(os("cannot set user.max_user_namespaces in the run"))?;
    oz0_sys::ns::unshare_user_namespace()
        .map_err(os("cannot make the run's own user namespace"))?;
    let write = |file: &str, text: String| {
        std::fs::write(format!("/proc/self/{file}"), text)
            .map_err(os(format!("cannot write /proc/self/{file}")))
    };
    // The stage is undumpable from its start, and `/proc/self` of an
    // undumpable process belongs to a root that the run's namespaces do not
    // map, so the stage could not write its own maps. It is dumpable for
    // these three writes only: no other process of the run exists yet (the
    // bridge and the command start later), so nothing of the run can reach
    // it meanwhile; the stage checks again that it is undumpable before
    // either starts.
    use rustix::process::{set_dumpable_behavior, DumpableBehavior};
    set_dumpable_behavior(DumpableBehavior::Dumpable)
        .map_err(os("cannot write the run's user namespace maps"))?;
    let written = write("setgroups", "deny".into())
        .and_then(|()| write("uid_map", format!("{uid} {uid} 1\n")))
        .and_then(|()| write("gid_map", format!("{gid} {gid} 1\n")));
    set_dumpable_behavior(DumpableBehavior::NotDumpable)
        .map_err(os("cannot make the stage undumpable again"))?;
    written?;
    match oz0_sys::ns::unshare_user_namespace() {
        Ok(()) => Err(StageError::Refused(
            "a user namespace could still be made inside the run".into(),
        )),
        Err(_) => Ok(()),
    }
}

/// Reads the node's word on [`fds::READY`] to its end: [`READY_WORD`] once
/// the run is recorded and its placeholders are in place, or why not. Every
/// stage waits for it, so that nothing of the caller runs before then.
fn wait_ready() -> Result<(), StageError> {
    use std::io::Read;
    let fd = oz0_sys::spawn::inherited_fd(fds::READY).map_err(os("no placeholder descriptor"))?;
    let mut word = Vec::new();
    std::fs::File::from(fd)
        .read_to_end(&mut word)
        .map_err(os("waiting for the placeholders"))?;
    if word == READY_WORD {
        return Ok(());
    }
    if word.is_empty() {
        return Err(StageError::Refused(
            "the node closed the word without saying it (did it end?)".into(),
        ));
    }
    Err(StageError::Refused(
        String::from_utf8_lossy(&word).into_owned(),
    ))
}

/// Makes the empty file and folder placeholders are bound from, in a
/// folder that is then a read-only mount of its own, and returns it.
fn make_sources() -> Result<OwnedFd, Errno> {
    let dir = Path::new(PLACEHOLDERS_INSIDE);
    rustix::fs::mkdir(dir, Mode::from_raw_mode(0o700))?;
    let d = no_links(CWD, dir, OFlags::DIRECTORY | OFlags::RDONLY)?;
    drop(rustix::fs::openat(
        &d,
        PLACEHOLDER_FILE,
        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o444),
    )?);
    rustix::fs::mkdirat(&d, PLACEHOLDER_DIR, Mode::from_raw_mode(0o555))?;
    let own = rustix::fs::openat(
        &d,
        PLACEHOLDER_SELF,
        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o444),
    )?;
    rustix::io::write(&own, SELF_REF)?;
    drop(own);
    rustix::mount::mount_bind(dir, dir)?;
    rustix::mount::mount_remount(
        dir,
        MountFlags::BIND
            | MountFlags::RDONLY
            | MountFlags::NOSUID
            | MountFlags::NODEV
            | MountFlags::NOEXEC,
        "",
    )?;
    no_links(CWD, dir, OFlags::PATH | OFlags::DIRECTORY)
}

/// The folder of the placeholders being worked through, opened without
/// following any link on the way, and kept while consecutive placeholders
/// share it: each folder is resolved once. Used where placeholders are
/// made (here) and where they are removed (the launcher).
#[derive(Default)]
pub(crate) struct Folders<'a> {
    open: Option<(&'a Path, OwnedFd)>,
}

impl<'a> Folders<'a> {
    /// The folder `parent`, opened `O_PATH` without following links.
    pub(crate) fn open(&mut self, parent: &'a Path) -> Result<&OwnedFd, Errno> {
        let (_, fd) = match self.open.take().filter(|(d, _)| *d == parent) {
            Some(kept) => self.open.insert(kept),
            None => {
                let fd = no_links(CWD, parent, OFlags::PATH | OFlags::DIRECTORY)?;
                self.open.insert((parent, fd))
            }
        };
        Ok(fd)
    }

    /// Placeholder `p`'s folder (see [`Folders::open`]) and its name there,
    /// or why not, naming the placeholder.
    pub(crate) fn place(&mut self, p: &'a Placeholder) -> Result<(&OwnedFd, &'a Path), PlaceError> {
        let path = p.path.as_path();
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(PlaceError::NoParent(p.path.to_string()));
        };
        let dir = self.open(parent).map_err(|source| PlaceError::Folder {
            path: p.path.to_string(),
            folder: parent.to_path_buf(),
            source,
        })?;
        Ok((dir, Path::new(name)))
    }
}

/// Why the stage could not complete the sandbox: the step, the path, and
/// the OS's answer or what was found instead of the plan. The stage sends
/// its words to the launcher (`protocol::StageMessage::Failed`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StageError {
    /// A step failed with the OS's error.
    #[error("{step}: {source}")]
    Os {
        /// What the stage was doing, and on what.
        step: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A step failed for a reason found within it.
    #[error("{step}: {source}")]
    Within {
        /// What the stage was doing, and on what.
        step: String,
        /// Why.
        #[source]
        source: Box<StageError>,
    },
    /// What was found is not what the plan says: the run is refused.
    #[error("{0}")]
    Refused(String),
    /// A placeholder could not be reached.
    #[error(transparent)]
    Place(#[from] PlaceError),
    /// Landlock could not be applied.
    #[error(transparent)]
    Landlock(#[from] crate::landlock::LandlockError),
    /// The seccomp filter could not be compiled or installed.
    #[error(transparent)]
    Seccomp(#[from] crate::seccomp::SeccompError),
}

/// An OS error while doing `step`.
pub(crate) fn os<E: Into<std::io::Error>>(step: impl Into<String>) -> impl FnOnce(E) -> StageError {
    let step = step.into();
    move |e| StageError::Os {
        step,
        source: e.into(),
    }
}

/// A failure within `step`.
pub(crate) fn within(step: impl Into<String>) -> impl FnOnce(StageError) -> StageError {
    let step = step.into();
    move |e| StageError::Within {
        step,
        source: Box::new(e),
    }
}

/// Why a placeholder could not be made or reached.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlaceError {
    /// The path has no folder (the plan never makes such a placeholder).
    #[error("placeholder {0}: not a path with a parent")]
    NoParent(String),
    /// Its folder could not be opened without following a link.
    #[error("placeholder {path}: its folder {}: {source}", folder.display())]
    Folder {
        /// The placeholder.
        path: String,
        /// Its folder.
        folder: std::path::PathBuf,
        /// The OS error (`ELOOP`: a link on the way).
        source: Errno,
    },
    /// It could not be created.
    #[error("placeholder {path}: cannot create it: {source}")]
    Create {
        /// The placeholder.
        path: String,
        /// The OS error.
        source: Errno,
    },
}

pub(crate) use crate::hostfs::open_beneath as no_links;

/// Binds the read-only source of `kind` (in `sources`) onto placeholder
/// `name` in `dir` (made by the node; or, made by someone else meanwhile,
/// of the same kind).
fn mount_one(
    sources: &OwnedFd,
    dir: &OwnedFd,
    name: &Path,
    kind: PlaceholderKind,
) -> Result<(), StageError> {
    // What is there must be of the expected kind and not a link.
    let target =
        no_links(dir, name, OFlags::PATH).map_err(os("cannot open it without following links"))?;
    let st = rustix::fs::fstat(&target).map_err(os("stat"))?;
    let ft = rustix::fs::FileType::from_raw_mode(st.st_mode);
    let ok = match kind {
        PlaceholderKind::Dir => ft == rustix::fs::FileType::Directory,
        PlaceholderKind::File | PlaceholderKind::SelfRef => ft == rustix::fs::FileType::RegularFile,
    };
    if !ok {
        return Err(StageError::Refused(format!(
            "it is a {ft:?}, not what the node made there (it was replaced meanwhile): the run is refused"
        )));
    }
    crate::devfs::clone_mount(sources, kind.source_name())
        .and_then(|tree| crate::devfs::attach(&tree, &target))
        .map_err(os(format!(
            "cannot mount it read-only from {PLACEHOLDERS_INSIDE}"
        )))
}

/// Gives up every capability: empties the bounding set (while
/// `CAP_SETPCAP` is still effective) and the ambient set, then the
/// effective, permitted and inheritable sets. Run in every stage, with or
/// without placeholders; a run whose stage cannot do it does not start.
pub fn drop_capabilities() -> Result<(), StageError> {
    use rustix::thread::{
        capabilities, clear_ambient_capability_set, remove_capability_from_bounding_set,
        set_capabilities, CapabilitySet, CapabilitySets,
    };
    // Every one is dropped without asking first (the new user namespace
    // gave the stage a full bounding set); one this kernel does not know is
    // refused with EINVAL, and is in no set.
    for cap in CapabilitySet::all().iter() {
        match remove_capability_from_bounding_set(cap) {
            Ok(()) | Err(rustix::io::Errno::INVAL) => {}
            Err(e) => return Err(os(format!("cannot drop {cap:?} from the bounding set"))(e)),
        }
    }
    clear_ambient_capability_set().map_err(os("cannot clear the ambient set"))?;
    set_capabilities(
        None,
        CapabilitySets {
            effective: CapabilitySet::empty(),
            permitted: CapabilitySet::empty(),
            inheritable: CapabilitySet::empty(),
        },
    )
    .map_err(os("cannot give up capabilities"))?;
    let left = capabilities(None).map_err(os("stat"))?;
    if !(left.effective.is_empty() && left.permitted.is_empty() && left.inheritable.is_empty()) {
        return Err(StageError::Refused(format!(
            "capabilities remain after giving them up: {left:?}"
        )));
    }
    Ok(())
}
