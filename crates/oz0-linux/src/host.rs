//! What the host looks like, gathered once per run: the facts the plan is a
//! pure function of. Gathering is the only I/O before launch.
//!
//! Every caller-named path is opened without following any link on the way
//! or at its end (`openat2` with `RESOLVE_NO_SYMLINKS`), and the names inside
//! a writable folder are looked at through the folder's descriptor, never by
//! a path looked up again; each is recorded with its identity (device and
//! inode), which the stage checks against what bubblewrap mounted (see
//! `hold::verify_binds`). With `lock`, every writable folder is locked for
//! the run ([`Held`]).

use std::fs;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::folder_lock::{lock_briefly, Held};

use oz0_policy::protected::{self, Kind};
use oz0_policy::spec::SYSTEM_READ_ONLY;
use oz0_policy::{AbsPath, RunSpec};
use rustix::fs::{AtFlags, FileType, OFlags};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};

/// What one path is on the host (by `lstat`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "target")]
pub enum Entry {
    /// Nothing there.
    Missing,
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link, with its target text (or, for a caller's path, the
    /// link met on the way).
    Symlink(String),
    /// Something else (socket, device, fifo).
    Other,
}

impl Entry {
    /// `lstat`s `p`.
    pub fn of(p: &Path) -> io::Result<Entry> {
        match fs::symlink_metadata(p) {
            Ok(m) if m.file_type().is_symlink() => Ok(Entry::Symlink(
                fs::read_link(p)?.to_string_lossy().into_owned(),
            )),
            Ok(m) if m.is_dir() => Ok(Entry::Dir),
            Ok(m) if m.is_file() => Ok(Entry::File),
            Ok(_) => Ok(Entry::Other),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Entry::Missing),
            Err(e) => Err(e),
        }
    }

    fn of_type(ft: FileType) -> Entry {
        match ft {
            FileType::Directory => Entry::Dir,
            FileType::RegularFile => Entry::File,
            _ => Entry::Other,
        }
    }
}

/// Which object a path is: its device and inode numbers, as `stat` gives
/// them on the host and `statx` inside the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileId {
    /// Device (major).
    pub major: u32,
    /// Device (minor).
    pub minor: u32,
    /// Inode.
    pub ino: u64,
}

impl FileId {
    fn of(st: &rustix::fs::Stat) -> FileId {
        FileId {
            major: rustix::fs::major(st.st_dev),
            minor: rustix::fs::minor(st.st_dev),
            ino: st.st_ino,
        }
    }
}

/// A caller-named path as found on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RootFact {
    /// The path.
    pub path: AbsPath,
    /// What it is.
    pub entry: Entry,
    /// Its fully resolved form (`realpath`), when it is reached through a
    /// link (for the message that names the real path).
    pub canonical: Option<String>,
}

/// The protected names of one writable folder, as found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProtectedFacts {
    /// The writable folder.
    pub root: AbsPath,
    /// `(name, what it is)` for each of [`protected::READ_ONLY_NAMES`].
    pub names: Vec<(&'static str, Kind, Entry)>,
    /// `.git` itself.
    pub git: Entry,
    /// When `.git` is a folder: each entry at its top (sorted by name) and
    /// each of [`protected::GIT_HELD`] that is missing there.
    pub git_entries: Vec<(String, Entry)>,
    /// When `.git/objects/info` is a folder: each of
    /// [`protected::GIT_OBJECTS_HELD`] in it; else what it is.
    pub objects_info: Entry,
    /// `(name, kind, what it is)` for each of [`protected::GIT_OBJECTS_HELD`].
    pub objects_held: Vec<(&'static str, Kind, Entry)>,
}

/// Most entries at the top of a `.git` folder that a run may not write
/// (each is held read-only for the run): more refuses the run.
pub const MAX_GIT_HELD: usize = 256;

/// Everything the plan needs to know about the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostFacts {
    /// `(path, entry)` for each system path, as the run sees it.
    pub system: Vec<(AbsPath, Entry)>,
    /// Where the system paths are found on the host: `None` at their own
    /// paths, or an image's rootfs (`/usr` is `<rootfs>/usr`).
    pub system_root: Option<AbsPath>,
    /// The node binary (canonical).
    pub node_exe: AbsPath,
    /// In an image's root, where the host's system is not there: the
    /// node binary's dynamic loader and libraries when it is not static
    /// (the loader first), each bound at `/oz0/lib/<name>`.
    pub node_libs: Vec<AbsPath>,
    /// The work directory and each `--read`/`--write` path.
    pub roots: Vec<RootFact>,
    /// The protected names of each writable folder that is a directory.
    pub protected: Vec<ProtectedFacts>,
    /// The identity of every caller path and protected name that exists,
    /// as it was opened (without links), of each system folder, of the node
    /// binary and of `/dev`.
    pub ids: Vec<(AbsPath, FileId)>,
    /// The mount points of the node's mount namespace (a bind of a folder
    /// takes those under it along).
    pub mounts: Vec<String>,
    /// The node user's home (`HOME`, when it is a plain absolute path):
    /// its secrets there answer as refused in the run.
    pub home: Option<AbsPath>,
}

impl HostFacts {
    /// The identity recorded for `path`.
    pub fn id(&self, path: &AbsPath) -> Option<FileId> {
        self.ids.iter().find(|(p, _)| p == path).map(|(_, id)| *id)
    }
}

/// Why the host could not be examined.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// An I/O error on a named path.
    #[error("cannot examine {path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The error.
        source: io::Error,
    },
    /// The node binary's path is not usable.
    #[error("the node binary's own path {0:?} is not an absolute UTF-8 path")]
    NodeExe(String),
    /// A `.git` folder with more entries to hold than a run takes.
    #[error("{0} holds more than {MAX_GIT_HELD} entries that git does not write in ordinary work, each of which a run would have to hold read-only: move the ones you do not need out of it")]
    GitCrowded(AbsPath),
    /// No data directory was named and none can be derived.
    #[error(
        "neither XDG_DATA_HOME nor HOME is set: name the node's data directory with --data-dir"
    )]
    NoDataDir,
    /// This binary's own path could not be found.
    #[error("cannot find this binary's own path: {0}")]
    OwnPath(#[source] io::Error),
    /// An image's rootfs cannot be a run's root.
    #[error("the image root {root}: {why}")]
    Image {
        /// The rootfs.
        root: AbsPath,
        /// What is wrong, and the fix.
        why: String,
    },
    /// A dynamically linked node binary whose libraries are not known.
    #[error("the node binary {0} is dynamically linked and is not this process's own, so the libraries it needs in an image's root are not known: use the static build (scripts/build-node)")]
    NodeLibs(AbsPath),
    /// Another run holds a writable folder.
    #[error("another run is using {0} (as its work folder or a --write folder): runs never share a writable folder at once, since each holds the protected names there for its length; give each run its own folder, or wait for the other to end")]
    InUse(AbsPath),
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> HostError + '_ {
    move |source| HostError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn errno_err(path: &Path) -> impl FnOnce(Errno) -> HostError + '_ {
    move |e| HostError::Io {
        path: path.display().to_string(),
        source: e.into(),
    }
}

/// A caller's path opened without links: its entry and descriptor, or
/// `Missing`, or the link met on the way.
fn open_root(path: &Path, writable: bool) -> Result<(Entry, Option<OwnedFd>), HostError> {
    use crate::hostfs::open_no_links;
    // A writable folder is opened for reading, so that it can be locked.
    let flags = if writable {
        OFlags::RDONLY | OFlags::DIRECTORY
    } else {
        OFlags::PATH
    };
    let mut r = open_no_links(path, flags);
    if writable && matches!(r, Err(Errno::NOTDIR)) {
        r = open_no_links(path, OFlags::PATH);
    }
    match r {
        Ok(fd) => {
            let st = rustix::fs::fstat(&fd).map_err(errno_err(path))?;
            match FileType::from_raw_mode(st.st_mode) {
                // O_PATH with O_NOFOLLOW opens a link at the end itself.
                FileType::Symlink => Ok((Entry::Symlink(path.display().to_string()), None)),
                ft => Ok((Entry::of_type(ft), Some(fd))),
            }
        }
        Err(Errno::NOENT) => Ok((Entry::Missing, None)),
        Err(e) => match crate::hostfs::first_link(path) {
            Some(link) => Ok((Entry::Symlink(link.display().to_string()), None)),
            None => Err(errno_err(path)(e)),
        },
    }
}

/// What `name` is in the folder `dir`, without following it, and its
/// identity.
fn entry_at(dir: &OwnedFd, name: &str, shown: &Path) -> Result<(Entry, Option<FileId>), HostError> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => {
            let ft = FileType::from_raw_mode(st.st_mode);
            if ft == FileType::Symlink {
                let target =
                    rustix::fs::readlinkat(dir, name, Vec::new()).map_err(errno_err(shown))?;
                return Ok((Entry::Symlink(target.to_string_lossy().into_owned()), None));
            }
            Ok((Entry::of_type(ft), Some(FileId::of(&st))))
        }
        Err(Errno::NOENT) => Ok((Entry::Missing, None)),
        Err(e) => Err(errno_err(shown)(e)),
    }
}

/// The mount points listed in the mountinfo file at `path` (field 5,
/// with the kernel's octal escapes undone), in order.
pub fn mount_points(path: &str) -> io::Result<Vec<String>> {
    Ok(parse_mount_points(&read_proc(path)?)
        .into_iter()
        .map(|(m, _)| m)
        .collect())
}

/// Reads a file of `/proc` whole. Its size is not known ahead (its stat
/// says 0), so std's `read_to_string` starts with 32 bytes and doubles:
/// nine reads of a host's mountinfo, each a system call that formats more
/// of the table. With room for 64 KiB from the start, std reads in chunks
/// of 8 KiB: two reads for a table of 8 KiB.
pub fn read_proc(path: &str) -> io::Result<String> {
    use std::io::Read;
    let mut text = String::with_capacity(64 * 1024);
    fs::File::open(path)?.read_to_string(&mut text)?;
    Ok(text)
}

/// The `(mount point, file system type)` of each line of a mountinfo text;
/// a line without both is left out.
pub fn parse_mount_points(text: &str) -> Vec<(String, &str)> {
    text.lines()
        .filter_map(|l| {
            // Field 5 is the mount point; after the optional fields, a
            // lone "-", then the file system type.
            let mut f = l.split(' ');
            let point = f.nth(4)?;
            let fs = f.skip_while(|x| *x != "-").nth(1)?;
            Some((unescape(point), fs))
        })
        .collect()
}

/// Undoes mountinfo's escapes (`\040` for a space, `\011`, `\012`,
/// `\134`).
fn unescape(s: &str) -> String {
    if !s.contains('\\') {
        return s.to_string();
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The names in the folder open at `dir` (without `.` and `..`).
fn list_names(dir: &OwnedFd) -> Result<Vec<String>, Errno> {
    let mut names = Vec::new();
    for e in rustix::fs::Dir::read_from(dir)? {
        let e = e?;
        // A name that is not UTF-8 cannot be named to the stage: refused.
        let n = e.file_name().to_str().map_err(|_| Errno::ILSEQ)?;
        if n != "." && n != ".." {
            names.push(n.to_string());
        }
    }
    Ok(names)
}

/// The names at the top of an image's rootfs that the run's own mounts
/// take (its kernel interfaces, TEMP, work folder and the node's files):
/// what the image has there is not bound.
pub const IMAGE_SKIPPED: &[&str] = &["proc", "sys", "dev", "tmp", "work", "oz0"];

/// At most this many names at the top of an image's rootfs (each is a
/// mount of the run).
pub const MAX_IMAGE_TOP: usize = 64;

/// The system paths of the host: each of `SYSTEM_READ_ONLY`, with the
/// identity of each folder.
fn host_system(ids: &mut Vec<(AbsPath, FileId)>) -> Result<Vec<(AbsPath, Entry)>, HostError> {
    let mut system = Vec::new();
    for s in SYSTEM_READ_ONLY {
        let p = AbsPath::new(s).expect("constant is valid");
        let e = Entry::of(p.as_path()).map_err(io_err(p.as_path()))?;
        if e == Entry::Dir {
            let st = rustix::fs::stat(p.as_path()).map_err(errno_err(p.as_path()))?;
            ids.push((p.clone(), FileId::of(&st)));
        }
        system.push((p, e));
    }
    Ok(system)
}

/// The system paths of an image: every name at the top of `rootfs` but
/// [`IMAGE_SKIPPED`], as `/<name>`, its folders' identities recorded at
/// their host paths. A name that is not UTF-8, or more than
/// [`MAX_IMAGE_TOP`] of them, refuses the run (the unpacker admits
/// neither).
fn image_system(
    rootfs: &AbsPath,
    ids: &mut Vec<(AbsPath, FileId)>,
) -> Result<Vec<(AbsPath, Entry)>, HostError> {
    let refuse = |why: String| HostError::Image {
        root: rootfs.clone(),
        why,
    };
    let dir = crate::hostfs::open_no_links(
        rootfs.as_path(),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
    )
    .map_err(|e| {
        refuse(format!(
            "cannot be opened without links ({e}): pull the image again"
        ))
    })?;
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(&dir).map_err(errno_err(rootfs.as_path()))? {
        let entry = entry.map_err(errno_err(rootfs.as_path()))?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let name = std::str::from_utf8(name)
            .map_err(|_| refuse("holds a name that is not UTF-8".into()))?;
        if !IMAGE_SKIPPED.contains(&name) {
            names.push(name.to_string());
        }
        if names.len() > MAX_IMAGE_TOP {
            return Err(refuse(format!(
                "holds more than {MAX_IMAGE_TOP} names at its top"
            )));
        }
    }
    names.sort();
    let mut system = Vec::new();
    for name in names {
        let inside = AbsPath::new("/")
            .and_then(|r| r.join(&name))
            .map_err(|e| refuse(format!("{name:?}: {e}")))?;
        let src = rootfs
            .join(&name)
            .map_err(|e| refuse(format!("{name:?}: {e}")))?;
        let (e, id) = entry_at(&dir, &name, src.as_path())?;
        if let (Entry::Dir, Some(id)) = (&e, id) {
            ids.push((src, id));
        }
        system.push((inside, e));
    }
    Ok(system)
}

/// The dynamic loader and libraries of the node binary `node_exe`, the
/// loader first, each with its identity; none when it is static (the
/// shipped build). They are read from this process's own mappings, so
/// `node_exe` must be this very binary: another dynamically linked one
/// refuses the run (its libraries are not known here).
fn libraries(
    node_exe: &AbsPath,
    ids: &mut Vec<(AbsPath, FileId)>,
) -> Result<Vec<AbsPath>, HostError> {
    let maps = Path::new("/proc/self/maps");
    let text = fs::read_to_string(maps).map_err(io_err(maps))?;
    let mut libs: Vec<AbsPath> = Vec::new();
    for path in text.lines().filter_map(|l| l.split_whitespace().nth(5)) {
        let name = path.rsplit('/').next().unwrap_or_default();
        let shared = name.ends_with(".so") || name.contains(".so.");
        if !shared || !path.starts_with('/') || libs.iter().any(|l| l.as_str() == path) {
            continue;
        }
        let p = AbsPath::new(path).map_err(|_| HostError::NodeExe(path.to_string()))?;
        if name.starts_with("ld-") {
            libs.insert(0, p);
        } else {
            libs.push(p);
        }
    }
    if libs.is_empty() {
        return Ok(libs);
    }
    let me = rustix::fs::stat("/proc/self/exe").map_err(errno_err(Path::new("/proc/self/exe")))?;
    let exe = rustix::fs::stat(node_exe.as_path()).map_err(errno_err(node_exe.as_path()))?;
    if FileId::of(&me) != FileId::of(&exe)
        || !libs[0]
            .as_str()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .starts_with("ld-")
    {
        return Err(HostError::NodeLibs(node_exe.clone()));
    }
    for l in &libs {
        let st = rustix::fs::stat(l.as_path()).map_err(errno_err(l.as_path()))?;
        ids.push((l.clone(), FileId::of(&st)));
    }
    Ok(libs)
}

/// The dynamic loader and libraries the node binary `node_exe` needs (the
/// loader first), none when it is static; see [`gather`].
pub fn node_libraries(node_exe: &AbsPath) -> Result<Vec<AbsPath>, HostError> {
    libraries(node_exe, &mut Vec::new())
}

/// Gathers the facts for `spec`, with `node_exe` as the binary to bind and
/// the system of the host, or of the image unpacked at `image`.
/// With `lock`, each writable folder is locked for the run: a folder another
/// run holds refuses this one ([`HostError::InUse`]).
pub fn gather(
    spec: &RunSpec,
    node_exe: &Path,
    image: Option<&AbsPath>,
    lock: bool,
) -> Result<(HostFacts, Held), HostError> {
    let mut ids = Vec::new();
    let system = match image {
        None => host_system(&mut ids)?,
        Some(rootfs) => image_system(rootfs, &mut ids)?,
    };
    let exe = fs::canonicalize(node_exe).map_err(io_err(node_exe))?;
    let node_exe =
        AbsPath::from_path(&exe).map_err(|_| HostError::NodeExe(exe.display().to_string()))?;
    let st = rustix::fs::stat(node_exe.as_path()).map_err(errno_err(node_exe.as_path()))?;
    ids.push((node_exe.clone(), FileId::of(&st)));
    let dev = AbsPath::new("/dev").expect("constant is valid");
    let st = rustix::fs::stat(dev.as_path()).map_err(errno_err(dev.as_path()))?;
    ids.push((dev, FileId::of(&st)));
    let mounts =
        mount_points("/proc/self/mountinfo").map_err(io_err(Path::new("/proc/self/mountinfo")))?;
    let node_libs = match image {
        None => Vec::new(),
        Some(_) => libraries(&node_exe, &mut ids)?,
    };

    let mut roots = Vec::new();
    let mut held = Held::default();
    let mut protected = Vec::new();
    let all = std::iter::once((&spec.work, true))
        .chain(spec.read.iter().map(|p| (p, false)))
        .chain(spec.write.iter().map(|p| (p, true)));
    for (p, writable) in all {
        let (entry, fd) = open_root(p.as_path(), writable)?;
        let canonical = match &entry {
            Entry::Symlink(_) => fs::canonicalize(p.as_path())
                .ok()
                .map(|c| c.to_string_lossy().into_owned()),
            _ => None,
        };
        if let Some(fd) = &fd {
            let st = rustix::fs::fstat(fd).map_err(errno_err(p.as_path()))?;
            ids.push((p.clone(), FileId::of(&st)));
        }
        roots.push(RootFact {
            path: p.clone(),
            entry: entry.clone(),
            canonical,
        });
        let (true, Entry::Dir, Some(fd)) = (writable, &entry, fd) else {
            continue;
        };
        // A folder named twice is held once (a second lock on it would
        // conflict with the first).
        if protected.iter().any(|f: &ProtectedFacts| &f.root == p) {
            continue;
        }
        if lock {
            match lock_briefly(&fd) {
                Ok(()) => {}
                Err(Errno::WOULDBLOCK) => return Err(HostError::InUse(p.clone())),
                Err(e) => return Err(errno_err(p.as_path())(e)),
            }
        }
        protected.push(protected_facts(p, &fd, &mut ids)?);
        held.push(fd, p.to_path_buf());
    }

    Ok((
        HostFacts {
            system,
            system_root: image.cloned(),
            node_exe,
            node_libs,
            roots,
            protected,
            ids,
            mounts,
            home: std::env::var("HOME")
                .ok()
                .and_then(|h| AbsPath::new(&h).ok()),
        },
        held,
    ))
}

/// The protected names of the writable folder `root`, open at `fd`.
fn protected_facts(
    root: &AbsPath,
    fd: &OwnedFd,
    ids: &mut Vec<(AbsPath, FileId)>,
) -> Result<ProtectedFacts, HostError> {
    let mut names = Vec::new();
    for (name, kind) in protected::READ_ONLY_NAMES {
        let path = root.join(name).expect("constant name");
        let (entry, id) = entry_at(fd, name, path.as_path())?;
        if let Some(id) = id {
            ids.push((path, id));
        }
        names.push((*name, *kind, entry));
    }
    let git_path = root.join(protected::GIT_DIR).expect("constant name");
    let (git, git_id) = entry_at(fd, protected::GIT_DIR, git_path.as_path())?;
    if let Some(id) = git_id {
        ids.push((git_path.clone(), id));
    }
    let mut git_entries = Vec::new();
    let mut objects_info = Entry::Missing;
    let mut objects_held = Vec::new();
    if git == Entry::Dir {
        let git_fd = crate::hostfs::open_beneath(
            fd.as_fd(),
            Path::new(protected::GIT_DIR),
            OFlags::RDONLY | OFlags::DIRECTORY,
        )
        .map_err(errno_err(git_path.as_path()))?;
        // Every entry git does not write in ordinary work is held, so each
        // is looked at; the writable ones only by name (but `objects`).
        let mut held = 0;
        for name in list_names(&git_fd).map_err(errno_err(git_path.as_path()))? {
            if protected::git_writable(&name) && name != "objects" {
                continue;
            }
            held += 1;
            if held > MAX_GIT_HELD {
                return Err(HostError::GitCrowded(git_path.clone()));
            }
            let path = git_path.join(&name).map_err(|_| HostError::Io {
                path: format!("{}/{name:?}", git_path),
                source: io::Error::from(io::ErrorKind::InvalidInput),
            })?;
            let (entry, id) = entry_at(&git_fd, &name, path.as_path())?;
            if let Some(id) = id {
                ids.push((path, id));
            }
            git_entries.push((name, entry));
        }
        for (name, _) in protected::GIT_HELD {
            if !git_entries.iter().any(|(n, _)| n == name) {
                git_entries.push((name.to_string(), Entry::Missing));
            }
        }
        git_entries.sort_by(|a, b| a.0.cmp(&b.0));
        let objects_is_dir = git_entries
            .iter()
            .any(|(n, e)| n == "objects" && *e == Entry::Dir);
        if objects_is_dir {
            let info_path = crate::plan::join_all(&git_path, protected::GIT_OBJECTS_INFO);
            let info_fd = match crate::hostfs::open_beneath(
                &git_fd,
                Path::new(protected::GIT_OBJECTS_INFO),
                OFlags::PATH | OFlags::DIRECTORY,
            ) {
                Ok(f) => Some(f),
                Err(Errno::NOENT) => None,
                Err(_) => {
                    // A link, or not a folder: named as what it is.
                    let (e, _) =
                        entry_at(&git_fd, protected::GIT_OBJECTS_INFO, info_path.as_path())?;
                    objects_info = match e {
                        Entry::Dir => Entry::Symlink(info_path.to_string()),
                        other => other,
                    };
                    None
                }
            };
            if let Some(info_fd) = info_fd {
                let st = rustix::fs::fstat(&info_fd).map_err(errno_err(info_path.as_path()))?;
                ids.push((info_path.clone(), FileId::of(&st)));
                objects_info = Entry::Dir;
                for (name, kind) in protected::GIT_OBJECTS_HELD {
                    let path = info_path.join(name).expect("constant name");
                    let (entry, id) = entry_at(&info_fd, name, path.as_path())?;
                    if let Some(id) = id {
                        ids.push((path, id));
                    }
                    objects_held.push((*name, *kind, entry));
                }
            }
        }
    }
    Ok(ProtectedFacts {
        root: root.clone(),
        names,
        git,
        git_entries,
        objects_info,
        objects_held,
    })
}

/// The node's data directory: `--data-dir`, else under the XDG data home.
pub fn data_dir(flag: Option<&Path>) -> Result<PathBuf, HostError> {
    if let Some(d) = flag {
        return Ok(d.to_path_buf());
    }
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|x| !x.is_empty()) {
        return Ok(PathBuf::from(x).join("oz0-node"));
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".local/share/oz0-node")),
        None => Err(HostError::NoDataDir),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mount point is field 5 with its escapes undone, the type the
    /// field after the lone "-", whatever optional fields lie between; a
    /// line without them is left out.
    #[test]
    fn mountinfo_lines_give_their_mount_point_and_type() {
        let text = "22 27 0:21 / /proc rw,relatime - proc proc rw\n\
                    71 70 254:0 /usr /usr ro,nosuid shared:1 master:7 - ext4 /dev/vda rw\n\
                    80 70 0:50 / /a\\040b\\134c rw - tmpfs tmpfs rw\n\
                    81 70 0:51 / /short rw\n\
                    \n";
        assert_eq!(
            parse_mount_points(text),
            [
                ("/proc".to_string(), "proc"),
                ("/usr".to_string(), "ext4"),
                ("/a b\\c".to_string(), "tmpfs"),
            ]
        );
    }

    /// `/proc` files are read whole, as std reads them.
    #[test]
    fn proc_files_are_read_whole() {
        let ours = read_proc("/proc/self/mountinfo").unwrap();
        assert!(ours.ends_with('\n') && ours.lines().count() > 1, "{ours}");
        // The table of this process is the same for both reads.
        let std = fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert_eq!(ours, std);
        assert_eq!(
            mount_points("/proc/self/mountinfo").unwrap().len(),
            std.lines().count()
        );
    }
}
