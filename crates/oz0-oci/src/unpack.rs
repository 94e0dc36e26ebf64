//! Layers applied to a rootfs, in order, by descriptor.
//!
//! The rules, each enforced before anything is written:
//! - every entry lands inside the rootfs: a name with `..` or an absolute
//!   one is refused, and every parent is opened beneath the rootfs's
//!   descriptor without following a link (`RESOLVE_BENEATH |
//!   RESOLVE_NO_SYMLINKS`), so an entry that goes through a link the image
//!   placed earlier is refused; a hard link may only name a regular file
//!   already inside;
//! - whiteouts (`.wh.NAME`, `.wh..wh..opq`) remove what lower layers left,
//!   by descriptor;
//! - device nodes and named pipes are dropped (and counted); setuid,
//!   setgid and sticky bits are cleared (and counted); extended attributes
//!   (file capabilities among them) and owners are never applied: every
//!   file is the node's user's;
//! - the entries' bytes (a file's, and any other entry's data, which is
//!   skipped), the number of entries, the bytes of long names and PAX
//!   headers, the bytes of the names held while a layer is applied, a
//!   path's length and its depth are bounded, each checked before what it
//!   bounds is read or allocated: so the uncompressed stream of an image
//!   (a gzip bomb's) is bounded too;
//! - each layer's uncompressed stream must have the digest its image's
//!   config names for it (`diff_ids`).
//!
//! When every layer is in, the tree is made read-only: no write bit
//! anywhere, folders last.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::io::{self, BufReader, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{FileType, Mode};
use rustix::io::Errno;
use serde::Serialize;
use sha2::Digest as _;

use crate::fsx;
use crate::manifest::Compression;
use crate::reference::Digest;
use crate::tar::{Header, Kind, Reader};

/// Most path components an entry may have.
pub const MAX_DEPTH: usize = 128;
/// Longest file name component.
pub const MAX_COMPONENT: usize = 255;
/// Most bytes an image's layers may hold after the end of their archive
/// (tar writers pad to a record; more is not a tar layer).
pub const MAX_TRAILER: u64 = 1 << 20;
/// Most bytes of long names and PAX headers in all layers together.
pub const MAX_META: u64 = 64 << 20;
/// Most bytes of entry names held while the layers are applied (each
/// entry's path is remembered until its layer ends, each folder's until
/// the last).
pub const MAX_NAME_BYTES: u64 = 256 << 20;
/// Most names kept for a report (setuid files, dropped nodes).
const MAX_NAMED: usize = 16;

/// An image's bounds.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Most bytes of entry data in all layers together.
    pub bytes: u64,
    /// Most tar headers in all layers together.
    pub entries: u64,
}

/// What unpacking did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Unpacked {
    /// Bytes of entry data read (a file's is written, anything else's
    /// skipped).
    pub bytes: u64,
    /// Tar headers read.
    pub entries: u64,
    /// Device nodes and named pipes dropped.
    pub dropped_nodes: u64,
    /// Files and folders whose setuid, setgid or sticky bit was cleared.
    pub cleared_bits: u64,
    /// The first of those, by path.
    pub cleared_named: Vec<String>,
    /// The first of the dropped nodes, by path.
    pub dropped_named: Vec<String>,
}

/// Why a layer was refused: which layer, which entry, why.
#[derive(Debug, thiserror::Error)]
#[error("layer {layer} of {layers} ({digest}){}: {why}", entry.as_ref().map(|e| format!(", entry {e}")).unwrap_or_default())]
pub struct LayerError {
    /// The layer, from 1.
    pub layer: usize,
    /// How many the image has.
    pub layers: usize,
    /// Its blob's digest.
    pub digest: Digest,
    /// The entry (escaped), when one is at fault.
    pub entry: Option<String>,
    /// What is wrong.
    pub why: String,
    /// Whether a bound of the node (not the image's form) was met.
    pub bound: bool,
}

/// Why a filled tree could not be made read-only: which folder, and the
/// system's answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FinishError {
    /// A folder's mode could not be set.
    #[error("cannot make {folder} read-only: {errno}")]
    ReadOnly {
        /// The folder, in the rootfs (escaped).
        folder: String,
        /// Why.
        errno: Errno,
    },
    /// A folder could not be opened (other than gone, or no longer a
    /// folder, which later layers may do).
    #[error("cannot open {folder}: {errno}")]
    Open {
        /// The folder, in the rootfs (escaped).
        folder: String,
        /// Why.
        errno: Errno,
    },
    /// The rootfs's own mode could not be set.
    #[error("cannot make the rootfs read-only: {0}")]
    Root(Errno),
}

/// An entry's path, escaped for a message.
fn shown(p: &[u8]) -> String {
    let s = String::from_utf8_lossy(p);
    crate::reference::shown(&s)
}

/// A rootfs being filled.
pub struct Tree {
    root: OwnedFd,
    bounds: Bounds,
    done: Unpacked,
    /// Each folder's mode from its entry (made read-only at the end).
    dir_modes: HashMap<Vec<u8>, u32>,
    /// Bytes of long names and PAX headers read.
    meta: u64,
    /// Bytes of names held in `dir_modes` and the current layer's set.
    names: u64,
}

/// Reads `r` while hashing and counting it.
struct Hashing<R> {
    r: R,
    hash: sha2::Sha256,
    read: u64,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.r.read(buf)?;
        self.hash.update(&buf[..n]);
        self.read += u64::try_from(n).expect("usize fits u64");
        Ok(n)
    }
}

enum Entry {
    Skip,
    Done,
}

struct Why {
    why: String,
    bound: bool,
}

impl From<String> for Why {
    fn from(why: String) -> Why {
        Why { why, bound: false }
    }
}

fn os(e: Errno, what: &str) -> Why {
    format!("{what}: {}", io::Error::from(e)).into()
}

impl Tree {
    /// A tree to fill at the empty folder `root`.
    pub fn new(root: OwnedFd, bounds: Bounds) -> Tree {
        Tree {
            root,
            bounds,
            done: Unpacked::default(),
            dir_modes: HashMap::new(),
            meta: 0,
            names: 0,
        }
    }

    /// Applies layer `layer` (from 1) of `layers`: `blob` (the verified
    /// blob, compressed as `compression`), whose tar stream must have the
    /// digest `diff_id`.
    pub fn apply(
        &mut self,
        layer: usize,
        layers: usize,
        digest: &Digest,
        blob: impl Read,
        compression: Compression,
        diff_id: &Digest,
    ) -> Result<(), LayerError> {
        let fail = |entry: Option<&[u8]>, w: Why| LayerError {
            layer,
            layers,
            digest: digest.clone(),
            entry: entry.map(shown),
            why: w.why,
            bound: w.bound,
        };
        let buffered = BufReader::with_capacity(64 * 1024, blob);
        let stream: Box<dyn Read> = match compression {
            Compression::None => Box::new(buffered),
            Compression::Gzip => Box::new(flate2::bufread::GzDecoder::new(buffered)),
        };
        let mut tar = Reader::new(Hashing {
            r: stream,
            hash: sha2::Sha256::new(),
            read: 0,
        });
        let mut this_layer: HashSet<Vec<u8>> = HashSet::new();
        let max_headers = self.bounds.entries.saturating_sub(self.done.entries);
        tar.limit_headers(max_headers);
        tar.limit_meta(MAX_META.saturating_sub(self.meta));
        loop {
            let h = match tar.next_entry() {
                Ok(Some(h)) => h,
                Ok(None) => break,
                Err(e) if tar.over_bound() => {
                    let why = if tar.headers_read() >= max_headers {
                        format!(
                            "the image has over {} entries, the bound of one image",
                            self.bounds.entries
                        )
                    } else {
                        format!("{e} ({MAX_META} bytes)")
                    };
                    return Err(fail(None, Why { why, bound: true }));
                }
                Err(e) => {
                    return Err(fail(
                        None,
                        format!("the layer is not a tar stream the node reads: {e}").into(),
                    ))
                }
            };
            let path = h.path.clone();
            self.entry(&mut tar, h, &mut this_layer)
                .map_err(|w| fail(Some(&path), w))?;
        }
        self.done.entries += tar.headers_read();
        self.meta += tar.meta_read();
        // The layer's names are let go.
        let held: u64 = this_layer
            .iter()
            .map(|p| u64::try_from(p.len()).expect("usize fits u64"))
            .sum();
        self.names = self.names.saturating_sub(held);
        // What follows the archive's end is part of the digest too.
        let mut inner = tar.into_inner();
        let mut rest = [0u8; 8192];
        let mut trailer: u64 = 0;
        loop {
            let n = inner
                .read(&mut rest)
                .map_err(|e| fail(None, format!("the layer's stream is damaged: {e}").into()))?;
            if n == 0 {
                break;
            }
            trailer += u64::try_from(n).expect("usize fits u64");
            if trailer > MAX_TRAILER {
                return Err(fail(
                    None,
                    format!(
                        "over {MAX_TRAILER} bytes follow the archive's end: it is not a tar layer"
                    )
                    .into(),
                ));
            }
        }
        let got = Digest::from_sha256(inner.hash.finalize().as_slice());
        if &got != diff_id {
            return Err(fail(
                None,
                format!(
                    "its uncompressed content has the digest {got}, not {diff_id} as the image's config names it: the image is damaged or was changed"
                )
                .into(),
            ));
        }
        Ok(())
    }

    /// Applies one entry: its bounds are charged, then it is a whiteout
    /// or it is made in its parent folder.
    fn entry<R: Read>(
        &mut self,
        tar: &mut Reader<R>,
        h: Header,
        this_layer: &mut HashSet<Vec<u8>>,
    ) -> Result<Entry, Why> {
        let parts = components(&h.path)?;
        let name_bytes = self.charge(&h, &parts)?;
        let Some((last, parents)) = parts.split_last() else {
            // The archive's own root (`./`): the rootfs's mode stays.
            return Ok(Entry::Skip);
        };
        let parent_path = parents.join(&b'/');
        // Whiteouts hide what lower layers left, never this layer's own.
        if let Some(hidden) = last.strip_prefix(b".wh.") {
            return self.whiteout(parents, &parent_path, hidden, this_layer);
        }
        let full = join(&parent_path, last);
        let name = OsStr::from_bytes(last);
        let dir = self.parent(parents)?;
        let mode = self.mode(&full, h.mode);
        match &h.kind {
            Kind::Dir => {
                make_dir(dir.as_fd(), name)?;
                if self.dir_modes.insert(full.clone(), mode).is_none() {
                    self.names += name_bytes;
                }
            }
            Kind::File => write_file(tar, dir.as_fd(), name, mode)?,
            Kind::Symlink(target) => make_symlink(dir.as_fd(), name, target)?,
            Kind::Hardlink(target) => {
                if !self.hard_link(dir.as_fd(), name, &parts, target)? {
                    return Ok(Entry::Done);
                }
            }
            Kind::Device | Kind::Fifo => self.drop_node(dir.as_fd(), name, &full)?,
        }
        if this_layer.insert(full) {
            self.names += name_bytes;
        }
        Ok(Entry::Done)
    }

    /// Charges the entry's data and name against the image's bounds;
    /// returns the bytes its name holds while it is remembered.
    fn charge(&mut self, h: &Header, parts: &[&[u8]]) -> Result<u64, Why> {
        // Every entry's data is bounded, a file's written, anything
        // else's read and dropped.
        if self.done.bytes.saturating_add(h.size) > self.bounds.bytes {
            return Err(Why {
                why: format!(
                    "its {} bytes would take the image over {} MiB of data, the bound of one image",
                    h.size,
                    self.bounds.bytes >> 20
                ),
                bound: true,
            });
        }
        self.done.bytes += h.size;
        let name_bytes: u64 = parts
            .iter()
            .map(|p| u64::try_from(p.len() + 1).expect("usize fits u64"))
            .sum();
        if self.names.saturating_add(name_bytes) > MAX_NAME_BYTES {
            return Err(Why {
                why: format!(
                    "its name would take the names held over {MAX_NAME_BYTES} bytes, the bound of one image"
                ),
                bound: true,
            });
        }
        Ok(name_bytes)
    }

    /// A whiteout `.wh.<hidden>` in `parents`: removes what lower layers
    /// left there (all of it for the opaque `.wh..wh..opq`).
    fn whiteout(
        &mut self,
        parents: &[&[u8]],
        parent_path: &[u8],
        hidden: &[u8],
        this_layer: &HashSet<Vec<u8>>,
    ) -> Result<Entry, Why> {
        if hidden == b".wh..opq" {
            let dir = self.parent(parents)?;
            for (n, _) in fsx::names(dir.as_fd()).map_err(|e| os(e, "cannot list its folder"))? {
                if !this_layer.contains(&join(parent_path, &n)) {
                    fsx::remove_at(dir.as_fd(), OsStr::from_bytes(&n))
                        .map_err(|e| os(e, "cannot remove what it hides"))?;
                }
            }
            return Ok(Entry::Done);
        }
        if hidden.starts_with(b".wh.") {
            // Other AUFS metadata: nothing to apply.
            return Ok(Entry::Skip);
        }
        if hidden.is_empty() || hidden == b"." || hidden == b".." || hidden.contains(&b'/') {
            return Err("it is a whiteout of no valid name".to_string().into());
        }
        let target = join(parent_path, hidden);
        if !this_layer.contains(&target) {
            match fsx::open_dir(self.root.as_fd(), Path::new(OsStr::from_bytes(parent_path))) {
                Ok(dir) => fsx::remove_at(dir.as_fd(), OsStr::from_bytes(hidden))
                    .map_err(|e| os(e, "cannot remove what it hides"))?,
                // Nothing below to hide.
                Err(Errno::NOENT) => {}
                Err(e) => return Err(self.why_not_dir(parents, e)),
            }
        }
        Ok(Entry::Done)
    }

    /// A hard link `name` in `dir` (the entry `parts`) to `target`, which
    /// must be a regular file already in the image; `false` when the
    /// entry names itself (nothing to do).
    fn hard_link(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        parts: &[&[u8]],
        target: &[u8],
    ) -> Result<bool, Why> {
        let tparts = components(target).map_err(|w| Why {
            why: format!("its hard link target {}: {}", shown(target), w.why),
            bound: w.bound,
        })?;
        let Some((tlast, tparents)) = tparts.split_last() else {
            return Err("it is a hard link to the rootfs itself".to_string().into());
        };
        let tdir = self.parent(tparents).map_err(|w| Why {
            why: format!("its hard link target {}: {}", shown(target), w.why),
            bound: w.bound,
        })?;
        let tname = OsStr::from_bytes(tlast);
        if fsx::kind_at(tdir.as_fd(), tname).map_err(|e| os(e, "cannot look at its target"))?
            != Some(FileType::RegularFile)
        {
            return Err(format!(
                "it is a hard link to {}, which is not a regular file already in the image",
                shown(target)
            )
            .into());
        }
        if tparts == parts {
            return Ok(false);
        }
        fsx::remove_at(dir, name).map_err(|e| os(e, "cannot replace it"))?;
        rustix::fs::linkat(tdir.as_fd(), tname, dir, name, rustix::fs::AtFlags::empty())
            .map_err(|e| os(e, "cannot link it"))?;
        Ok(true)
    }

    /// A device node or a named pipe: never made; what a lower layer had
    /// there is gone, as the entry would have replaced it (counted).
    fn drop_node(&mut self, dir: BorrowedFd<'_>, name: &OsStr, full: &[u8]) -> Result<(), Why> {
        fsx::remove_at(dir, name).map_err(|e| os(e, "cannot replace it"))?;
        self.done.dropped_nodes += 1;
        if self.done.dropped_named.len() < MAX_NAMED {
            self.done
                .dropped_named
                .push(String::from_utf8_lossy(full).into_owned());
        }
        Ok(())
    }

    /// The entry's mode without setuid, setgid and sticky (counted).
    fn mode(&mut self, full: &[u8], mode: u32) -> u32 {
        if mode & 0o7000 != 0 {
            self.done.cleared_bits += 1;
            if self.done.cleared_named.len() < MAX_NAMED {
                self.done
                    .cleared_named
                    .push(String::from_utf8_lossy(full).into_owned());
            }
        }
        mode & 0o777
    }

    /// The folder `parents` beneath the root, made (mode 0755 at the end)
    /// where missing; never through a link.
    fn parent(&mut self, parents: &[&[u8]]) -> Result<OwnedFd, Why> {
        let whole = parents.join(&b'/');
        match fsx::open_dir(self.root.as_fd(), Path::new(OsStr::from_bytes(&whole))) {
            Ok(fd) => return Ok(fd),
            Err(Errno::NOENT) => {}
            Err(e) => return Err(self.why_not_dir(parents, e)),
        }
        let mut at = fsx::open_dir(self.root.as_fd(), Path::new(""))
            .map_err(|e| os(e, "cannot open the rootfs"))?;
        let mut path: Vec<u8> = Vec::new();
        for c in parents {
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(c);
            let name = OsStr::from_bytes(c);
            let next = match fsx::open_dir(at.as_fd(), Path::new(name)) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => {
                    mkdir(at.as_fd(), name)?;
                    if !self.dir_modes.contains_key(&path) {
                        self.names += u64::try_from(path.len()).expect("usize fits u64");
                        self.dir_modes.insert(path.clone(), 0o755);
                    }
                    fsx::open_dir(at.as_fd(), Path::new(name))
                        .map_err(|e| os(e, "cannot open a folder it made"))?
                }
                Err(e) => return Err(self.why_not_dir(parents, e)),
            };
            at = next;
        }
        Ok(at)
    }

    fn why_not_dir(&self, parents: &[&[u8]], e: Errno) -> Why {
        // Which component is the link or the file.
        let mut path: Vec<u8> = Vec::new();
        for c in parents {
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(c);
            let p = Path::new(OsStr::from_bytes(&path));
            let dir = p.parent().unwrap_or(Path::new(""));
            let kind = fsx::open_dir(self.root.as_fd(), dir).ok().and_then(|d| {
                fsx::kind_at(d.as_fd(), p.file_name().unwrap_or_default())
                    .ok()
                    .flatten()
            });
            match kind {
                Some(FileType::Symlink) => {
                    return format!(
                        "it goes through the symbolic link {} the image placed earlier, which the node never follows while unpacking",
                        shown(&path)
                    )
                    .into()
                }
                Some(FileType::Directory) | None => {}
                Some(_) => return format!("its folder {} is not a folder", shown(&path)).into(),
            }
        }
        os(e, "cannot open its folder")
    }

    /// Makes the tree read-only (folders deepest first, the root last)
    /// and returns what was done.
    pub fn finish(self) -> Result<Unpacked, FinishError> {
        let mut dirs: Vec<(&Vec<u8>, &u32)> = self.dir_modes.iter().collect();
        dirs.sort_by_key(|(p, _)| std::cmp::Reverse(p.iter().filter(|b| **b == b'/').count()));
        for (p, mode) in dirs {
            match fsx::open_dir(self.root.as_fd(), Path::new(OsStr::from_bytes(p))) {
                Ok(fd) => {
                    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode & 0o555)).map_err(|errno| {
                        FinishError::ReadOnly {
                            folder: shown(p),
                            errno,
                        }
                    })?
                }
                // Removed, or replaced by a file, in a later layer.
                Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => {}
                Err(errno) => {
                    return Err(FinishError::Open {
                        folder: shown(p),
                        errno,
                    })
                }
            }
        }
        rustix::fs::fchmod(&self.root, Mode::from_raw_mode(0o555)).map_err(FinishError::Root)?;
        Ok(self.done)
    }
}

fn mkdir(dir: BorrowedFd<'_>, name: &OsStr) -> Result<(), Why> {
    rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o700))
        .map_err(|e| os(e, "cannot make a folder"))
}

/// A folder `name` in `dir`: kept when one is there, else made (what
/// else was there replaced).
fn make_dir(dir: BorrowedFd<'_>, name: &OsStr) -> Result<(), Why> {
    match fsx::kind_at(dir, name).map_err(|e| os(e, "cannot look at it"))? {
        Some(FileType::Directory) => Ok(()),
        Some(_) => {
            fsx::remove_at(dir, name).map_err(|e| os(e, "cannot replace it"))?;
            mkdir(dir, name)
        }
        None => mkdir(dir, name),
    }
}

/// A regular file `name` in `dir`, made anew, its data copied from the
/// tar stream; `mode` without its write bits.
fn write_file<R: Read>(
    tar: &mut Reader<R>,
    dir: BorrowedFd<'_>,
    name: &OsStr,
    mode: u32,
) -> Result<(), Why> {
    fsx::remove_at(dir, name).map_err(|e| os(e, "cannot replace it"))?;
    let fd = fsx::create(dir, name, 0o600).map_err(|e| os(e, "cannot create it"))?;
    let mut f = std::fs::File::from(fd);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = tar
            .read_data(&mut buf)
            .map_err(|e| format!("the layer is not a tar stream the node reads: {e}"))?;
        if n == 0 {
            break;
        }
        f.write_all(&buf[..n])
            .map_err(|e| format!("cannot write it: {e}"))?;
    }
    rustix::fs::fchmod(&f, Mode::from_raw_mode(mode & 0o555))
        .map_err(|e| os(e, "cannot set its mode"))
}

/// A symbolic link `name` in `dir` to `target` (stored, never followed
/// while unpacking).
fn make_symlink(dir: BorrowedFd<'_>, name: &OsStr, target: &[u8]) -> Result<(), Why> {
    if target.is_empty() || over_name(target.len()) || target.contains(&0) {
        return Err("it is a symbolic link to no valid target"
            .to_string()
            .into());
    }
    fsx::remove_at(dir, name).map_err(|e| os(e, "cannot replace it"))?;
    rustix::fs::symlinkat(OsStr::from_bytes(target), dir, name)
        .map_err(|e| os(e, "cannot create it"))
}

/// Whether `len` bytes are over the longest name taken.
fn over_name(len: usize) -> bool {
    u64::try_from(len).map_or(true, |l| l > crate::tar::MAX_NAME)
}

fn join(parent: &[u8], name: &[u8]) -> Vec<u8> {
    let mut v = parent.to_vec();
    if !v.is_empty() {
        v.push(b'/');
    }
    v.extend_from_slice(name);
    v
}

/// An entry's path as components inside the rootfs: `./` and `.` dropped,
/// an absolute name, `..` and over-long names refused.
fn components(path: &[u8]) -> Result<Vec<&[u8]>, Why> {
    if over_name(path.len()) {
        return Err(Why {
            why: format!("its name is over {} bytes", crate::tar::MAX_NAME),
            bound: true,
        });
    }
    if path.first() == Some(&b'/') {
        return Err("its name is absolute, which could land outside the rootfs"
            .to_string()
            .into());
    }
    if path.contains(&0) {
        return Err("its name holds a NUL byte".to_string().into());
    }
    let mut out = Vec::new();
    for c in path.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                return Err("its name holds '..', which could land outside the rootfs"
                    .to_string()
                    .into())
            }
            c if c.len() > MAX_COMPONENT => {
                return Err(Why {
                    why: format!("a component of its name is over {MAX_COMPONENT} bytes"),
                    bound: true,
                })
            }
            c => out.push(c),
        }
    }
    if out.len() > MAX_DEPTH {
        return Err(Why {
            why: format!("it is over {MAX_DEPTH} folders deep"),
            bound: true,
        });
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests;
