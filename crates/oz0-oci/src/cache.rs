//! The image cache under `<data dir>/oci/`: content-addressed by the
//! digest an image is named by, bounded in size, unpacked once per image.
//!
//! ```text
//! oci/images/<hex>/rootfs/     the image's read-only rootfs
//! oci/images/<hex>/image.json  what it is (Record); its time is its last use
//! oci/locks/<hex>              held shared while an image is used,
//!                              exclusive while it is pulled or evicted
//! oci/tmp/<hex>.<random>/      a pull in progress, or an eviction
//! ```
//!
//! A pull holds its image's lock exclusively, so two pulls of one digest
//! never race: the second waits and finds the image there. An image
//! appears whole or not at all (unpacked under `tmp/`, then renamed into
//! `images/`). Layers are downloaded to `tmp/`, checked, unpacked and
//! deleted: the cache holds rootfs trees, not blobs. When the images'
//! bytes are over the bound, the least recently used ones nobody holds
//! are evicted; what a crash left under `tmp/` goes at the next pull.

use std::ffi::OsStr;
use std::io::{Seek, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, Mode, OFlags};
use serde::{Deserialize, Serialize};

use crate::fsx;
use crate::manifest::{self, Document, ManifestError, RunConfig, MAX_MANIFEST};
use crate::reference::{Digest, Reference};
use crate::registry::{Client, RegistryError};
use crate::unpack::{Bounds, LayerError, Tree, Unpacked};

/// The cache's default bound, in bytes of image data.
pub const DEFAULT_MAX_BYTES: u64 = 10 << 30;
/// Most entries (files, folders, links) one image may have.
pub const MAX_ENTRIES: u64 = 1_000_000;

/// What an image in the cache is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The reference it was first pulled as.
    pub reference: String,
    /// The digest it is named by (a manifest's or an index's).
    pub digest: Digest,
    /// Its image manifest's digest (this platform's, for an index).
    pub manifest: Digest,
    /// Its config's digest.
    pub config_digest: Digest,
    /// What a run of it starts with.
    pub config: RunConfig,
    /// Its layers' blob digests, lowest first.
    pub layers: Vec<Digest>,
    /// What unpacking did.
    pub unpacked: Unpacked,
}

/// An image in the cache, held (shared) until dropped: it is not evicted
/// while held.
#[derive(Debug)]
pub struct Image {
    /// Its read-only rootfs.
    pub rootfs: PathBuf,
    /// What it is.
    pub record: Record,
    /// Whether this call pulled it (rather than finding it).
    pub pulled: bool,
    _lock: OwnedFd,
}

/// Why a pull failed: which blob, and why.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PullError {
    /// The registry could not be spoken to, or a blob it sent is refused.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// A manifest or config that does not parse, or is refused.
    #[error("{what} {digest}: {why}")]
    Document {
        /// `the manifest`, `the index`, `the config`.
        what: &'static str,
        /// Its digest.
        digest: Digest,
        /// Why.
        why: ManifestError,
    },
    /// A layer refused while unpacking.
    #[error(transparent)]
    Layer(#[from] LayerError),
    /// The image is over the cache's bound.
    #[error("its layers are {need} bytes compressed, over the cache's bound of {max} bytes: raise the bound, or use a smaller image")]
    TooBig {
        /// Bytes the layers declare.
        need: u64,
        /// The bound.
        max: u64,
    },
    /// The cache itself.
    #[error("the image cache {path}: {why}")]
    Cache {
        /// Where.
        path: String,
        /// What failed.
        why: String,
    },
}

/// The image cache.
#[derive(Debug)]
pub struct Cache {
    path: PathBuf,
    images: OwnedFd,
    locks: OwnedFd,
    tmp: OwnedFd,
    max_bytes: u64,
}

/// Removes a folder under `tmp/` when dropped (a pull that failed).
struct Scratch<'a> {
    tmp: &'a OwnedFd,
    name: String,
}

impl Drop for Scratch<'_> {
    fn drop(&mut self) {
        let _ = fsx::remove_at(self.tmp.as_fd(), OsStr::new(&self.name));
    }
}

/// What an image's manifest and config say, read from its registry without
/// its layers.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The manifest's digest (the platform's, when `r` names an index).
    pub manifest_digest: Digest,
    /// The manifest.
    pub manifest: manifest::Manifest,
    /// The config, parsed for this node's platform.
    pub config: manifest::ImageConfig,
}

/// The manifest and config of the image `r` names (the platform's manifest
/// of an index), each checked against its digest as it streams and
/// bounded before it is parsed; no layer is fetched. A registry the
/// operator did not allow is refused.
pub fn resolve(client: &Client, r: &Reference) -> Result<Resolved, PullError> {
    client.check_allowed(r)?;
    let doc = |what: &'static str, digest: &Digest, why: ManifestError| PullError::Document {
        what,
        digest: digest.clone(),
        why,
    };
    let (body, ct) = client.manifest(r, &r.digest)?;
    let (manifest_digest, m) = match manifest::parse_document(&body, ct.as_deref())
        .map_err(|w| doc("the manifest", &r.digest, w))?
    {
        Document::Image(m) => (r.digest.clone(), m),
        Document::Index(list) => {
            let d = manifest::pick_platform(&list).map_err(|w| doc("the index", &r.digest, w))?;
            let (body, ct) = client.manifest(r, &d.digest)?;
            match manifest::parse_document(&body, ct.as_deref())
                .map_err(|w| doc("the manifest", &d.digest, w))?
            {
                Document::Image(m) => (d.digest, m),
                Document::Index(_) => {
                    return Err(doc("the manifest", &d.digest, ManifestError::NestedIndex))
                }
            }
        }
    };
    let mut config = Vec::new();
    client.blob(
        r,
        &m.config,
        &format!("the config {}", m.config.digest),
        MAX_MANIFEST,
        &mut config,
    )?;
    let cfg = manifest::parse_config(&config, m.layers.len())
        .map_err(|w| doc("the config", &m.config.digest, w))?;
    Ok(Resolved {
        manifest_digest,
        manifest: m,
        config: cfg,
    })
}

impl Cache {
    /// The cache under `data_dir/oci`, made when missing, bounded at
    /// `max_bytes` of image data.
    pub fn open(data_dir: &Path, max_bytes: u64) -> Result<Cache, PullError> {
        let path = data_dir.join("oci");
        let err = |why: String| PullError::Cache {
            path: path.display().to_string(),
            why,
        };
        let data = rustix::fs::open(
            data_dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| err(format!("cannot open the data directory: {e}")))?;
        let oci =
            fsx::dir_at(data.as_fd(), "oci").map_err(|e| err(format!("cannot open it: {e}")))?;
        let sub = |name: &str| {
            fsx::dir_at(oci.as_fd(), name).map_err(|e| err(format!("cannot open its {name}/: {e}")))
        };
        Ok(Cache {
            images: sub("images")?,
            locks: sub("locks")?,
            tmp: sub("tmp")?,
            path,
            max_bytes,
        })
    }

    fn err(&self, why: String) -> PullError {
        PullError::Cache {
            path: self.path.display().to_string(),
            why,
        }
    }

    /// The image `digest`, held, when the cache has it.
    pub fn get(&self, digest: &Digest) -> Result<Option<Image>, PullError> {
        let lock = self.lock(digest, FlockOperation::LockShared)?;
        Ok(self
            .found(digest)?
            .map(|record| self.image(record, false, lock)))
    }

    fn lock(&self, digest: &Digest, op: FlockOperation) -> Result<OwnedFd, PullError> {
        fsx::lock(self.locks.as_fd(), digest.hex(), op)
            .map_err(|e| self.err(format!("cannot lock {digest}: {e}")))?
            .ok_or_else(|| self.err(format!("{digest} is locked")))
    }

    fn image(&self, record: Record, pulled: bool, lock: OwnedFd) -> Image {
        Image {
            rootfs: self
                .path
                .join("images")
                .join(record.digest.hex())
                .join("rootfs"),
            record,
            pulled,
            _lock: lock,
        }
    }

    /// The record of `digest`, its last use now, when the cache has it.
    fn found(&self, digest: &Digest) -> Result<Option<Record>, PullError> {
        let rel = Path::new(digest.hex()).join("image.json");
        let f = match fsx::open_beneath(self.images.as_fd(), &rel, OFlags::RDONLY) {
            Ok(f) => f,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(self.err(format!("cannot open the record of {digest}: {e}"))),
        };
        let mut f = std::fs::File::from(f);
        let mut body = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(&mut f, MAX_MANIFEST), &mut body)
            .map_err(|e| self.err(format!("cannot read the record of {digest}: {e}")))?;
        let record: Record = serde_json::from_slice(&body).map_err(|e| {
            self.err(format!(
                "the record of {digest} is damaged ({e}): remove {}",
                self.path.join("images").join(digest.hex()).display()
            ))
        })?;
        fsx::touch(&f);
        Ok(Some(record))
    }

    /// The image `r` names: from the cache, or pulled through `client`,
    /// checked and unpacked (once, however many pull it at once).
    pub fn pull(&self, client: &Client, r: &Reference) -> Result<Image, PullError> {
        client.check_allowed(r)?;
        if let Some(i) = self.get(&r.digest)? {
            return Ok(i);
        }
        let lock = self.lock(&r.digest, FlockOperation::LockExclusive)?;
        // Another pull may have brought it while this one waited.
        let (record, pulled) = match self.found(&r.digest)? {
            Some(record) => (record, false),
            None => {
                self.clean_tmp();
                (self.fetch(client, r)?, true)
            }
        };
        rustix::fs::flock(&lock, FlockOperation::LockShared)
            .map_err(|e| self.err(format!("cannot lock {}: {e}", r.digest)))?;
        if pulled {
            self.evict(&r.digest);
        }
        Ok(self.image(record, pulled, lock))
    }

    /// Pulls and unpacks `r` into `images/` (its lock held).
    fn fetch(&self, client: &Client, r: &Reference) -> Result<Record, PullError> {
        let Resolved {
            manifest_digest,
            manifest: m,
            config: cfg,
        } = resolve(client, r)?;
        let need: u64 = m
            .layers
            .iter()
            .map(|l| l.blob.size)
            .fold(0, u64::saturating_add);
        if need > self.max_bytes {
            return Err(PullError::TooBig {
                need,
                max: self.max_bytes,
            });
        }
        let scratch = Scratch {
            tmp: &self.tmp,
            name: format!("{}.{}", r.digest.hex(), fsx::random_name()),
        };
        let work = fsx::dir_at(self.tmp.as_fd(), &scratch.name)
            .map_err(|e| self.err(format!("cannot make a folder under tmp/: {e}")))?;
        let root = fsx::dir_at(work.as_fd(), "rootfs")
            .map_err(|e| self.err(format!("cannot make a rootfs under tmp/: {e}")))?;
        let mut tree = Tree::new(
            root,
            Bounds {
                bytes: self.max_bytes,
                entries: MAX_ENTRIES,
            },
        );
        let n = m.layers.len();
        for (i, (l, diff_id)) in m.layers.iter().zip(&cfg.diff_ids).enumerate() {
            let what = format!("layer {} of {n} ({})", i + 1, l.blob.digest);
            let blob = fsx::create(work.as_fd(), OsStr::new("layer"), 0o600)
                .map_err(|e| self.err(format!("cannot make a file under tmp/: {e}")))?;
            let mut blob = std::fs::File::from(blob);
            {
                let mut w = std::io::BufWriter::with_capacity(256 * 1024, &mut blob);
                client.blob(r, &l.blob, &what, self.max_bytes, &mut w)?;
                w.flush()
                    .map_err(|e| self.err(format!("cannot store {what}: {e}")))?;
            }
            blob.rewind()
                .map_err(|e| self.err(format!("cannot read {what} back: {e}")))?;
            rustix::fs::unlinkat(work.as_fd(), "layer", rustix::fs::AtFlags::empty())
                .map_err(|e| self.err(format!("cannot remove {what} under tmp/: {e}")))?;
            tree.apply(i + 1, n, &l.blob.digest, blob, l.compression, diff_id)?;
        }
        let unpacked = tree.finish().map_err(|w| self.err(format!("{}: {w}", r)))?;
        let record = Record {
            reference: r.to_string(),
            digest: r.digest.clone(),
            manifest: manifest_digest,
            config_digest: m.config.digest.clone(),
            config: cfg.run,
            layers: m.layers.iter().map(|l| l.blob.digest.clone()).collect(),
            unpacked,
        };
        let f = fsx::create(work.as_fd(), OsStr::new("image.json"), 0o600)
            .map_err(|e| self.err(format!("cannot write a record under tmp/: {e}")))?;
        let mut f = std::fs::File::from(f);
        f.write_all(&serde_json::to_vec_pretty(&record).expect("a record serialises"))
            .and_then(|()| f.sync_all())
            .map_err(|e| self.err(format!("cannot write a record under tmp/: {e}")))?;
        rustix::fs::renameat(
            self.tmp.as_fd(),
            scratch.name.as_str(),
            self.images.as_fd(),
            r.digest.hex(),
        )
        .map_err(|e| self.err(format!("cannot move the image into images/: {e}")))?;
        std::mem::forget(scratch);
        Ok(record)
    }

    /// The images in the cache, with their bytes and last use.
    pub fn list(&self) -> Vec<(Record, std::time::SystemTime)> {
        let mut out = Vec::new();
        let Ok(names) = fsx::names(self.images.as_fd()) else {
            return out;
        };
        for (name, _) in names {
            let Some(d) = std::str::from_utf8(&name).ok().and_then(Digest::from_hex) else {
                continue;
            };
            let rel = Path::new(d.hex()).join("image.json");
            let Ok(f) = fsx::open_beneath(self.images.as_fd(), &rel, OFlags::RDONLY) else {
                continue;
            };
            let f = std::fs::File::from(f);
            let used = f
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(std::time::UNIX_EPOCH);
            let mut body = Vec::new();
            if std::io::Read::read_to_end(&mut std::io::Read::take(f, MAX_MANIFEST), &mut body)
                .is_err()
            {
                continue;
            }
            if let Ok(rec) = serde_json::from_slice::<Record>(&body) {
                out.push((rec, used));
            }
        }
        out
    }

    /// Evicts the least recently used images nobody holds until the
    /// cache is within its bound (`keep` stays).
    fn evict(&self, keep: &Digest) {
        let mut all = self.list();
        let mut total: u64 = all
            .iter()
            .map(|(r, _)| r.unpacked.bytes)
            .fold(0, u64::saturating_add);
        all.sort_by_key(|(_, used)| *used);
        for (rec, _) in all {
            if total <= self.max_bytes {
                break;
            }
            if &rec.digest == keep {
                continue;
            }
            let Ok(Some(_held)) = fsx::lock(
                self.locks.as_fd(),
                rec.digest.hex(),
                FlockOperation::NonBlockingLockExclusive,
            ) else {
                // In use: it stays.
                continue;
            };
            let name = format!("{}.{}", rec.digest.hex(), fsx::random_name());
            if rustix::fs::renameat(
                self.images.as_fd(),
                rec.digest.hex(),
                self.tmp.as_fd(),
                name.as_str(),
            )
            .is_ok()
            {
                let _ = fsx::remove_at(self.tmp.as_fd(), OsStr::new(&name));
                total = total.saturating_sub(rec.unpacked.bytes);
            }
        }
    }

    /// Removes what failed pulls and evictions left under `tmp/`: each
    /// entry is named for its image, whose lock nobody holds then.
    fn clean_tmp(&self) {
        let Ok(names) = fsx::names(self.tmp.as_fd()) else {
            return;
        };
        for (name, _) in names {
            let Some(hex) = std::str::from_utf8(&name)
                .ok()
                .and_then(|n| n.split_once('.'))
                .and_then(|(h, _)| Digest::from_hex(h))
            else {
                continue;
            };
            if let Ok(Some(_held)) = fsx::lock(
                self.locks.as_fd(),
                hex.hex(),
                FlockOperation::NonBlockingLockExclusive,
            ) {
                let _ = fsx::remove_at(self.tmp.as_fd(), OsStr::from_bytes(&name));
            }
        }
    }
}

#[cfg(test)]
mod tests;
