//! `oz0-node key rotate`: a new node key, taken by the edge on the old
//! key's signature, while the node keeps its id, approval and history.
//!
//! The new key is written next to the old one first (`node.key.next`,
//! 0600), then sent; only once the edge took it does it replace
//! `node.key`. A rotation cut short (the answer lost) is finished by the
//! next `key rotate`: if the edge already has the waiting key, it is
//! moved into place; if not, it is discarded and a new one is made.

use std::path::PathBuf;

use clap::Args;
use oz0_core::exit::Exit;
use oz0_edge::client::{NodeClient, NodeKey, Trust};

use crate::cli::DataDirArg;

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

fn fail(msg: impl std::fmt::Display) -> i32 {
    eprintln!("oz0-node: key rotate: {msg}");
    Exit::CheckFailed.code()
}

/// Runs `key rotate`; returns the exit status.
pub fn rotate(a: RotateArgs) -> i32 {
    let data_dir = match oz0_linux::host::data_dir(a.data.data_dir.as_deref()) {
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
