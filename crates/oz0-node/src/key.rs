//! `oz0-node key rotate`: a new node key, taken by the edge on the old
//! key's signature, while the node keeps its id, approval and history.
//!
//! The new key is written next to the old one first (`node.key.next`,
//! 0600), then sent; only once the edge took it does it replace
//! `node.key`. A rotation cut short (the answer lost) is finished by the
//! next `key rotate`: if the edge already has the waiting key, it is
//! moved into place; if not, it is discarded and a new one is made.
//!
//! A rotation is refused while `oz0-node run` runs on the same data
//! directory (the running node would go on signing with the old key, which
//! the edge then refuses): `run` holds a shared lock on
//! `<data-dir>/node.lock` for as long as it runs, and `key rotate` takes it
//! exclusively, without waiting, for the rotation.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use clap::Args;
use oz0_core::exit::Exit;
use oz0_edge::client::{NodeClient, NodeKey, Trust};

use crate::flags::DataDirArg;

/// `key rotate` flags.
#[derive(Debug, Args)]
pub struct RotateArgs {
    /// The edge the node is registered with (https://HOST:PORT, or http://
    /// on loopback).
    #[arg(long, value_name = "URL")]
    pub edge: String,
    /// The CA certificate(s) the edge's certificate must be signed by (PEM)
    /// [default: the system's CAs].
    #[arg(long = "edge-ca", value_name = "FILE")]
    pub edge_ca: Option<PathBuf>,
    #[command(flatten)]
    pub data: DataDirArg,
}

/// Says why the rotation failed: escaped, as the edge's refusal carries
/// the edge's own words.
fn fail(msg: impl std::fmt::Display) -> i32 {
    let msg = msg.to_string();
    eprintln!(
        "oz0-node: key rotate: {}",
        oz0_edge::term::escape(msg.as_bytes())
    );
    Exit::CheckFailed.code()
}

/// The lock a node's daemon holds on its data directory while it runs.
fn lock_path(data_dir: &Path) -> PathBuf {
    data_dir.join("node.lock")
}

/// Who holds the data directory's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// `oz0-node run` (shared: it only reads the key).
    Run,
    /// `oz0-node key rotate` (exclusive: it replaces the key).
    Rotate,
}

/// Why the data directory's lock was not taken: each names the fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// `key rotate` while `oz0-node run` runs on the data directory.
    #[error("a node runs on the data directory {} (oz0-node run holds {}): it would go on signing with the old key, which the edge then refuses. Stop it first (systemctl stop oz0-node, or SIGTERM to oz0-node run), rotate, then start it again", .data_dir.display(), .lock.display())]
    NodeRuns {
        /// The data directory.
        data_dir: PathBuf,
        /// Its lock file.
        lock: PathBuf,
    },
    /// `oz0-node run` while `key rotate` replaces the key.
    #[error("oz0-node key rotate is replacing the key in the data directory {} (it holds {}): start the node again when it is done", .data_dir.display(), .lock.display())]
    Rotating {
        /// The data directory.
        data_dir: PathBuf,
        /// Its lock file.
        lock: PathBuf,
    },
    /// The lock file cannot be opened or locked.
    #[error("cannot lock the data directory's lock file {}: {source}", .lock.display())]
    Io {
        /// The lock file.
        lock: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl From<LockError> for String {
    fn from(e: LockError) -> String {
        e.to_string()
    }
}

/// Takes the data directory's lock for `who`, without waiting: the open
/// lock file (the lock goes with it, and with the process; no job
/// inherits it), or why not.
pub fn hold(data_dir: &Path, who: Holder) -> Result<File, LockError> {
    let lock = lock_path(data_dir);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&lock)
        .map_err(|source| LockError::Io {
            lock: lock.clone(),
            source,
        })?;
    let op = match who {
        Holder::Run => rustix::fs::FlockOperation::NonBlockingLockShared,
        Holder::Rotate => rustix::fs::FlockOperation::NonBlockingLockExclusive,
    };
    let data_dir = data_dir.to_path_buf();
    match rustix::fs::flock(&f, op) {
        Ok(()) => Ok(f),
        Err(rustix::io::Errno::WOULDBLOCK) => Err(match who {
            Holder::Rotate => LockError::NodeRuns { data_dir, lock },
            Holder::Run => LockError::Rotating { data_dir, lock },
        }),
        Err(e) => Err(LockError::Io {
            lock,
            source: e.into(),
        }),
    }
}

/// Runs `key rotate`; returns the exit status.
pub fn rotate(a: RotateArgs) -> i32 {
    let data_dir = match a.data.resolve() {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    let path = data_dir.join("identity").join("node.key");
    let next_path = data_dir.join("identity").join("node.key.next");
    if !path.exists() {
        return fail(format!(
            "{} does not exist: this node has no key to rotate (oz0-node run makes one)",
            path.display()
        ));
    }
    let _held = match hold(&data_dir, Holder::Rotate) {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    let key = match NodeKey::load_or_create(&path) {
        Ok(k) => k,
        Err(e) => return fail(e),
    };
    let trust = a.edge_ca.clone().map_or(Trust::System, Trust::CaFile);
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(e),
    };
    let client = |k: NodeKey| NodeClient::with_trust(&a.edge, "", k, &trust);
    // A rotation cut short: does the edge already have the waiting key?
    if next_path.exists() {
        match NodeKey::load_or_create(&next_path) {
            Ok(next) if next.id() == key.id() => {
                let c = match client(next.clone()) {
                    Ok(c) => c,
                    Err(e) => return fail(e),
                };
                if rt.block_on(c.whoami()).is_ok() {
                    return finish(&next_path, &path, key.id());
                }
            }
            _ => {}
        }
        let _ = std::fs::remove_file(&next_path);
    }
    let next = key.successor();
    if let Err(e) = next.save(&next_path) {
        return fail(e);
    }
    let c = match client(key.clone()) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    match rt.block_on(c.rotate_key(&next)) {
        Ok(_) => finish(&next_path, &path, key.id()),
        Err(e @ oz0_edge::client::ClientError::Refused { .. }) => {
            let _ = std::fs::remove_file(&next_path);
            fail(format!("{e}; the key is unchanged"))
        }
        Err(e) => fail(format!(
            "{e}; the edge may or may not have the new key ({}): run `oz0-node key rotate` again to finish",
            next_path.display()
        )),
    }
}

fn finish(next: &std::path::Path, path: &std::path::Path, id: &str) -> i32 {
    if let Err(e) = std::fs::rename(next, path) {
        return fail(format!(
            "the edge has the new key, and it cannot replace {}: {e}: move {} there yourself",
            path.display(),
            next.display()
        ));
    }
    println!("node {id}: key rotated; the old key is refused from now on (restart oz0-node run to use the new one)");
    Exit::Ok.code()
}
