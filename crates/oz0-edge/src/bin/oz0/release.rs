//! `oz0 release key|sign`: the release key, kept by the operator, and the
//! signed manifest an edge's `--release-dir` serves to nodes (see
//! `oz0_edge::release`).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use clap::Subcommand;
use ed25519_dalek::SigningKey;
use oz0_edge::release;

use crate::follow::Status;

#[derive(Subcommand, Debug)]
pub enum ReleaseCmd {
    /// Make a release key: its private half in FILE (created new, mode
    /// 0600, kept by the operator), its public half printed, to build
    /// nodes with.
    ///
    /// A node built with OZ0_RELEASE_KEY set to the public key takes only
    /// files of its own version that this key signed; a node built without
    /// one fetches none (and a Mac's has no microVMs).
    ///
    /// Example:
    ///   oz0 release key --out /etc/oz0/release.key
    ///   OZ0_RELEASE_KEY=<printed key> scripts/build-node --release
    #[command(verbatim_doc_comment)]
    Key {
        /// Where the private key goes (never overwritten).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Sign a release: copy each node binary into DIR/VERSION/ as
    /// oz0-node-OS-ARCH and write DIR/VERSION/release.json, the manifest of
    /// their SHA-256s and sizes signed with the release key.
    ///
    /// Serve DIR with `oz0-edge --release-dir DIR`. Files are created new:
    /// a version signed once is not changed.
    ///
    /// Example:
    ///   oz0 release sign --key /etc/oz0/release.key --version 0.1.0 \
    ///       --dir /var/lib/oz0-edge/releases linux-aarch64=target/aarch64/oz0-node
    #[command(verbatim_doc_comment)]
    Sign {
        /// The private release key (from `oz0 release key`).
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        /// The nodes' version the files are of.
        #[arg(long, value_name = "VERSION")]
        version: String,
        /// The edge's release folder.
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
        /// OS-ARCH=PATH: a node binary and what it runs on (repeatable).
        #[arg(required = true, value_name = "OS-ARCH=PATH")]
        files: Vec<String>,
    },
}

pub fn run(cmd: &ReleaseCmd) -> Result<Status> {
    match cmd {
        ReleaseCmd::Key { out } => key(out),
        ReleaseCmd::Sign {
            key,
            version,
            dir,
            files,
        } => sign(key, version, dir, files),
    }
}

fn key(out: &Path) -> Result<Status> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| anyhow::anyhow!("the OS's random source: {e}"))?;
    let k = SigningKey::from_bytes(&seed);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(out).with_context(|| {
        format!(
            "--out {} (an existing key is never overwritten)",
            out.display()
        )
    })?;
    f.write_all(format!("{}\n", B64.encode(seed)).as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", out.display()))?;
    println!("release key written to {}", out.display());
    println!("public key: {}", release::public_key(&k));
    println!(
        "build nodes with OZ0_RELEASE_KEY={}",
        release::public_key(&k)
    );
    Ok(Status::Done)
}

fn read_key(path: &Path) -> Result<SigningKey> {
    let text = oz0_edge::auth::read_private(path).context("--key")?;
    let seed: [u8; 32] = B64
        .decode(text.trim())
        .ok()
        .and_then(|b| b.try_into().ok())
        .with_context(|| {
            format!(
                "--key {}: not a key `oz0 release key` wrote",
                path.display()
            )
        })?;
    Ok(SigningKey::from_bytes(&seed))
}

fn sign(key: &Path, version: &str, dir: &Path, files: &[String]) -> Result<Status> {
    if !release::is_file_name(version) {
        bail!("--version {version:?}: a version is [a-z0-9._-], such as 0.1.0");
    }
    let k = read_key(key)?;
    let mut parsed = Vec::new();
    for f in files {
        let Some((what, path)) = f.split_once('=') else {
            bail!("{f:?}: give OS-ARCH=PATH, such as linux-aarch64=target/aarch64/oz0-node");
        };
        let Some((os, arch)) = what.split_once('-') else {
            bail!("{what:?}: give OS-ARCH, such as linux-aarch64");
        };
        parsed.push((os.to_string(), arch.to_string(), PathBuf::from(path)));
    }
    let out = release::sign_release(&k, version, dir, &parsed)?;
    println!(
        "release {version} signed in {} ({} file(s)); public key {}",
        out.display(),
        parsed.len(),
        release::public_key(&k)
    );
    Ok(Status::Done)
}
