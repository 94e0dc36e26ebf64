//! Signed releases: the manifest an operator signs with the release key
//! (`oz0 release sign`), the edge serves from `--release-dir`, and a node
//! checks against the key built into it before it uses a file of it: a
//! Mac's copy of the Linux node binary its microVMs' bridge runs.
//!
//! The manifest names each file with its SHA-256 and size; the signature
//! (ed25519) covers the manifest's exact bytes, kept as a string, so that
//! nothing is re-encoded between the signer and the checker. A node takes
//! only a manifest signed by its own key, of its own version, and a file
//! whose bytes have the digest the manifest names; anything else is
//! refused with what it found.
//!
//! ```text
//! <release dir>/<version>/release.json        Signed
//! <release dir>/<version>/oz0-node-linux-aarch64
//! ```

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
/// The public half of a release key, as a node holds it.
pub use ed25519_dalek::VerifyingKey;
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The signed manifest's name in a version's folder.
pub const MANIFEST_NAME: &str = "release.json";
/// The most bytes of a file the edge sends in one answer.
pub const PIECE_BYTES: u64 = 4 << 20;
/// The largest file a release may name.
pub const MAX_FILE_BYTES: u64 = 512 << 20;
/// The largest signed manifest read.
pub const MAX_MANIFEST_BYTES: u64 = 64 << 10;

/// What a release holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// 1.
    pub schema: u32,
    /// The release's version (the nodes' `CARGO_PKG_VERSION`).
    pub version: String,
    /// Its files.
    pub files: Vec<FileEntry>,
}

/// One file of a release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// Its name in the version's folder (`oz0-node-linux-aarch64`).
    pub name: String,
    /// The OS it runs on (`linux`).
    pub os: String,
    /// Its architecture (`x86_64`, `aarch64`).
    pub arch: String,
    /// SHA-256 of its bytes, hex.
    pub sha256: String,
    /// Its size in bytes.
    pub size: u64,
}

/// A manifest with its signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signed {
    /// The manifest's JSON, exactly as signed.
    pub manifest: String,
    /// The public key that signed it (base64), to name a wrong key.
    pub key: String,
    /// The ed25519 signature over `manifest`'s bytes (base64).
    pub signature: String,
}

/// Why a release is refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReleaseError {
    /// Not a signed manifest, or not a manifest.
    #[error("the release manifest cannot be read: {0}")]
    Malformed(String),
    /// Signed by another key than the one trusted.
    #[error("the release manifest is signed by key {signed_by}, and this node trusts only {trusted}: sign it with the release key this node was built with")]
    WrongKey {
        /// The key it names.
        signed_by: String,
        /// The key trusted.
        trusted: String,
    },
    /// The signature does not hold.
    #[error("the release manifest's signature does not hold: it was changed after it was signed")]
    BadSignature,
    /// Another version's manifest.
    #[error("the release manifest is of version {manifest}, and this node is {node}: it takes only its own version's files")]
    OtherVersion {
        /// Its version.
        manifest: String,
        /// The node's.
        node: String,
    },
    /// No file for this OS and architecture.
    #[error("release {version} has no file for {os}/{arch}: sign one with `oz0 release sign … {os}-{arch}=PATH`")]
    NoFile {
        /// The version.
        version: String,
        /// The OS.
        os: String,
        /// The architecture.
        arch: String,
    },
    /// A file whose bytes are not those the manifest names.
    #[error("{name}: {why}: refused")]
    Tampered {
        /// The file.
        name: String,
        /// What differed.
        why: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The edge refused or could not be reached.
    #[error("the edge: {0}")]
    Edge(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ReleaseError + '_ {
    move |source| ReleaseError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A release file's name: `[a-z0-9._-]`, 1 to 64, not starting with `.`.
pub fn is_file_name(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
}

/// The public key of `key`, base64 (what a node is built with:
/// `OZ0_RELEASE_KEY`).
pub fn public_key(key: &SigningKey) -> String {
    B64.encode(key.verifying_key().to_bytes())
}

/// Reads a base64 public key.
pub fn parse_public_key(s: &str) -> Result<VerifyingKey, ReleaseError> {
    let bytes: [u8; 32] = B64
        .decode(s.trim())
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| {
            ReleaseError::Malformed(format!("{s:?} is not a base64 ed25519 public key"))
        })?;
    VerifyingKey::from_bytes(&bytes)
        .map_err(|e| ReleaseError::Malformed(format!("not an ed25519 public key: {e}")))
}

/// Signs `m` with `key`.
pub fn sign(key: &SigningKey, m: &Manifest) -> Signed {
    let manifest = serde_json::to_string_pretty(m).expect("a manifest serialises");
    Signed {
        signature: B64.encode(key.sign(manifest.as_bytes()).to_bytes()),
        key: public_key(key),
        manifest,
    }
}

/// The manifest of `signed`, when `trusted` signed it and it is of
/// `version`.
pub fn verify(
    signed: &Signed,
    trusted: &VerifyingKey,
    version: &str,
) -> Result<Manifest, ReleaseError> {
    let trusted_b64 = B64.encode(trusted.to_bytes());
    if signed.key != trusted_b64 {
        return Err(ReleaseError::WrongKey {
            signed_by: shown(&signed.key),
            trusted: trusted_b64,
        });
    }
    let sig: [u8; 64] = B64
        .decode(&signed.signature)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or(ReleaseError::BadSignature)?;
    trusted
        .verify(signed.manifest.as_bytes(), &Signature::from_bytes(&sig))
        .map_err(|_| ReleaseError::BadSignature)?;
    let m: Manifest = serde_json::from_str(&signed.manifest)
        .map_err(|e| ReleaseError::Malformed(format!("its manifest: {e}")))?;
    if m.version != version {
        return Err(ReleaseError::OtherVersion {
            manifest: shown(&m.version),
            node: version.to_string(),
        });
    }
    if let Some(f) = m
        .files
        .iter()
        .find(|f| !is_file_name(&f.name) || f.size > MAX_FILE_BYTES)
    {
        return Err(ReleaseError::Malformed(format!(
            "it names a file {} of {} bytes (names are [a-z0-9._-], files at most {MAX_FILE_BYTES} bytes)",
            shown(&f.name),
            f.size
        )));
    }
    Ok(m)
}

/// Text of a manifest or key, bounded and escaped, for a message.
fn shown(s: &str) -> String {
    s.chars()
        .take(80)
        .collect::<String>()
        .escape_debug()
        .to_string()
}

/// The SHA-256 (hex) and size of the file at `path`.
pub fn digest_file(path: &Path) -> Result<(String, u64), ReleaseError> {
    let mut f = std::fs::File::open(path).map_err(io(path))?;
    let mut h = Sha256::new();
    let n = std::io::copy(&mut f, &mut h).map_err(io(path))?;
    Ok((hex(&h.finalize()), n))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `oz0 release sign`: copies each `(os, arch, path)` into
/// `<dir>/<version>/oz0-node-<os>-<arch>` (new files only) and writes the
/// manifest signed by `key` beside them. Returns the folder.
pub fn sign_release(
    key: &SigningKey,
    version: &str,
    dir: &Path,
    files: &[(String, String, PathBuf)],
) -> Result<PathBuf, ReleaseError> {
    let out = dir.join(version);
    std::fs::create_dir_all(&out).map_err(io(&out))?;
    let mut entries = Vec::new();
    for (os, arch, path) in files {
        let name = format!("oz0-node-{os}-{arch}");
        if !is_file_name(&name) {
            return Err(ReleaseError::Malformed(format!(
                "{os}-{arch}: not an OS and architecture"
            )));
        }
        let dest = out.join(&name);
        let mut from = std::fs::File::open(path).map_err(io(path))?;
        let mut to = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&dest)
            .map_err(io(&dest))?;
        std::io::copy(&mut from, &mut to).map_err(io(&dest))?;
        let (sha256, size) = digest_file(&dest)?;
        entries.push(FileEntry {
            name,
            os: os.clone(),
            arch: arch.clone(),
            sha256,
            size,
        });
    }
    let signed = sign(
        key,
        &Manifest {
            schema: 1,
            version: version.to_string(),
            files: entries,
        },
    );
    let m = out.join(MANIFEST_NAME);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&m)
        .and_then(|mut f| f.write_all(&serde_json::to_vec_pretty(&signed).expect("serialises")))
        .map_err(io(&m))?;
    Ok(out)
}

/// The edge's side: the signed manifest of `version` under `dir`, as
/// bytes, or None when the edge has none.
pub fn read_manifest(dir: &Path, version: &str) -> Result<Option<Vec<u8>>, ReleaseError> {
    read_piece(dir, version, MANIFEST_NAME, 0, MAX_MANIFEST_BYTES)
}

/// The edge's side: at most `max` bytes of `name` of `version` from
/// `offset`, or None when there is no such file. Names are checked before
/// any path is made, and no link is followed at the file.
pub fn read_piece(
    dir: &Path,
    version: &str,
    name: &str,
    offset: u64,
    max: u64,
) -> Result<Option<Vec<u8>>, ReleaseError> {
    if !is_file_name(version) || !(is_file_name(name) || name == MANIFEST_NAME) {
        return Ok(None);
    }
    let path = dir.join(version).join(name);
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(i32::try_from(rustix::fs::OFlags::NOFOLLOW.bits()).unwrap_or(0));
    }
    let mut f = match opts.open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&path)(e)),
    };
    f.seek(SeekFrom::Start(offset)).map_err(io(&path))?;
    let mut out = Vec::new();
    f.take(max.min(PIECE_BYTES))
        .read_to_end(&mut out)
        .map_err(io(&path))?;
    Ok(Some(out))
}

/// What a node asks of the edge: a version's signed manifest, or a piece
/// of one of its files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    /// The version (the node's own).
    pub version: String,
    /// The file, for a piece.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Where the piece starts.
    #[serde(default)]
    pub offset: u64,
}

/// A piece of a release file, as the edge sends it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Piece {
    /// At most [`PIECE_BYTES`] bytes, base64; empty at the file's end.
    pub data: String,
}

/// Removes every folder under `dir` (a node's `<data dir>/microvm/guest/`)
/// but `keep`'s: the copies of other versions. Returns their names.
pub fn prune(dir: &Path, keep: &str) -> Result<Vec<String>, ReleaseError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(dir)(e)),
    };
    let mut removed = Vec::new();
    for e in entries {
        let e = e.map_err(io(dir))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name == keep {
            continue;
        }
        let p = e.path();
        // Not followed: a link is removed as a link.
        let kind = std::fs::symlink_metadata(&p).map_err(io(&p))?;
        if kind.is_dir() {
            std::fs::remove_dir_all(&p).map_err(io(&p))?;
        } else {
            std::fs::remove_file(&p).map_err(io(&p))?;
        }
        removed.push(name);
    }
    Ok(removed)
}

/// A node's side: the file of release `version` for `os`/`arch`, checked
/// against the manifest `trusted` signed, under `dir/<version>/` (fetched
/// from the edge when not there already, or not whole). Other versions'
/// copies under `dir` are removed first.
pub async fn fetch_file(
    client: &crate::client::NodeClient,
    trusted: &VerifyingKey,
    version: &str,
    (os, arch): (&str, &str),
    dir: &Path,
) -> Result<PathBuf, ReleaseError> {
    if !is_file_name(version) {
        return Err(ReleaseError::Malformed(format!(
            "version {}",
            shown(version)
        )));
    }
    prune(dir, version)?;
    let signed = client
        .release_manifest(version)
        .await
        .map_err(|e| ReleaseError::Edge(e.to_string()))?;
    let m = verify(&signed, trusted, version)?;
    let entry = m
        .files
        .iter()
        .find(|f| f.os == os && f.arch == arch)
        .ok_or_else(|| ReleaseError::NoFile {
            version: version.into(),
            os: os.into(),
            arch: arch.into(),
        })?;
    let folder = dir.join(version);
    std::fs::create_dir_all(&folder).map_err(io(&folder))?;
    let dest = folder.join(&entry.name);
    if let Ok((sha256, size)) = digest_file(&dest) {
        if sha256 == entry.sha256 && size == entry.size {
            return Ok(dest);
        }
        std::fs::remove_file(&dest).map_err(io(&dest))?;
    }
    let part = folder.join(format!(".{}.part", entry.name));
    let _ = std::fs::remove_file(&part);
    let r = download(client, version, entry, &part).await;
    if let Err(e) = r {
        let _ = std::fs::remove_file(&part);
        return Err(e);
    }
    std::fs::rename(&part, &dest).map_err(io(&dest))?;
    Ok(dest)
}

/// Writes `entry`'s bytes, piece by piece, to `part` (new), checking its
/// size as it goes and its digest at the end; executable when whole.
async fn download(
    client: &crate::client::NodeClient,
    version: &str,
    entry: &FileEntry,
    part: &Path,
) -> Result<(), ReleaseError> {
    let tampered = |why: String| ReleaseError::Tampered {
        name: entry.name.clone(),
        why,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(part)
        .map_err(io(part))?;
    let mut h = Sha256::new();
    let mut offset = 0u64;
    while offset < entry.size {
        let piece = client
            .release_piece(version, &entry.name, offset)
            .await
            .map_err(|e| ReleaseError::Edge(e.to_string()))?;
        if piece.is_empty() {
            return Err(tampered(format!(
                "it is {offset} bytes, and the manifest names {}",
                entry.size
            )));
        }
        offset += piece.len() as u64;
        if offset > entry.size {
            return Err(tampered(format!(
                "it is longer than the {} bytes the manifest names",
                entry.size
            )));
        }
        h.update(&piece);
        f.write_all(&piece).map_err(io(part))?;
    }
    let got = hex(&h.finalize());
    if got != entry.sha256 {
        return Err(tampered(format!(
            "its SHA-256 is {got}, and the manifest names {}",
            entry.sha256
        )));
    }
    f.sync_all().map_err(io(part))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(part, std::fs::Permissions::from_mode(0o755)).map_err(io(part))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(version: &str) -> Manifest {
        Manifest {
            schema: 1,
            version: version.into(),
            files: vec![FileEntry {
                name: "oz0-node-linux-aarch64".into(),
                os: "linux".into(),
                arch: "aarch64".into(),
                sha256: "00".repeat(32),
                size: 3,
            }],
        }
    }

    #[test]
    fn only_the_trusted_key_of_this_version_with_its_signature_holding() {
        let key = SigningKey::from_bytes(&[7u8; 32]);
        let other = SigningKey::from_bytes(&[8u8; 32]);
        let trusted = key.verifying_key();
        let s = sign(&key, &manifest("0.1.0"));
        assert_eq!(verify(&s, &trusted, "0.1.0").unwrap(), manifest("0.1.0"));
        // Another key.
        let e = verify(&sign(&other, &manifest("0.1.0")), &trusted, "0.1.0").unwrap_err();
        assert!(matches!(e, ReleaseError::WrongKey { .. }), "{e}");
        // Another key's signature under this key's name.
        let mut forged = sign(&other, &manifest("0.1.0"));
        forged.key = public_key(&key);
        assert!(matches!(
            verify(&forged, &trusted, "0.1.0"),
            Err(ReleaseError::BadSignature)
        ));
        // The manifest changed after signing (a digest swapped).
        let mut changed = s.clone();
        changed.manifest = changed.manifest.replace(&"00".repeat(32), &"11".repeat(32));
        assert!(matches!(
            verify(&changed, &trusted, "0.1.0"),
            Err(ReleaseError::BadSignature)
        ));
        // Another version.
        let e = verify(&s, &trusted, "0.2.0").unwrap_err();
        assert!(
            e.to_string()
                .contains("of version 0.1.0, and this node is 0.2.0"),
            "{e}"
        );
        // A file name that could walk out of the version's folder.
        let mut m = manifest("0.1.0");
        m.files[0].name = "../x".into();
        assert!(matches!(
            verify(&sign(&key, &m), &trusted, "0.1.0"),
            Err(ReleaseError::Malformed(_))
        ));
        assert!(parse_public_key(&public_key(&key)).is_ok());
        assert!(parse_public_key("nope").is_err());
    }
}
