//! The node's identity: an ed25519 key in a private file.

use std::path::Path;

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use ed25519_dalek::{Signer, SigningKey};

use super::ClientError;
use crate::auth;

const KEY_PREFIX: &str = "oz0-node-key-v1 ed25519 ";

/// The node's identity: an ed25519 key.
#[derive(Clone)]
pub struct NodeKey {
    pub(super) signing: SigningKey,
    id: String,
}

impl std::fmt::Debug for NodeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NodeKey({})", self.id)
    }
}

impl NodeKey {
    /// A new random key (not saved).
    pub fn generate() -> NodeKey {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).expect("the OS random source failed");
        NodeKey::from_seed(seed)
    }

    fn from_seed(seed: [u8; 32]) -> NodeKey {
        let signing = SigningKey::from_bytes(&seed);
        let id = auth::node_id(&signing.verifying_key());
        NodeKey { signing, id }
    }

    /// A new key for the node this key is (the node keeps its id when
    /// its key is rotated).
    pub fn successor(&self) -> NodeKey {
        NodeKey {
            id: self.id.clone(),
            ..NodeKey::generate()
        }
    }

    /// The key file's text: the seed and, for a rotated key, the node's id.
    fn file_text(&self) -> String {
        let seed = B64.encode(self.signing.to_bytes());
        if self.id == auth::node_id(&self.signing.verifying_key()) {
            format!("{KEY_PREFIX}{seed}\n")
        } else {
            format!("{KEY_PREFIX}{seed} id={}\n", self.id)
        }
    }

    /// Replaces the key file at `path` with this key (written aside, 0600,
    /// then renamed into place).
    pub fn save(&self, path: &Path) -> Result<(), ClientError> {
        let kerr = |source| ClientError::KeyFile {
            path: path.to_path_buf(),
            source,
        };
        let tmp = path.with_extension(format!("tmp-{}", auth::random_id()));
        write_private(&tmp, self.file_text().as_bytes()).map_err(kerr)?;
        std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            kerr(e)
        })
    }

    /// Loads the key at `path`, or makes one there: the file mode 0600, its
    /// folder 0700. A key file others can read is refused.
    pub fn load_or_create(path: &Path) -> Result<NodeKey, ClientError> {
        let kerr = |source| ClientError::KeyFile {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent() {
            make_private_dir(dir).map_err(|source| ClientError::KeyFile {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        match std::fs::read_to_string(path) {
            Ok(text) => {
                check_private(path)?;
                let bad = || ClientError::KeyFormat {
                    path: path.to_path_buf(),
                };
                let body = text.trim_end().strip_prefix(KEY_PREFIX).ok_or_else(bad)?;
                let (seed, id) = match body.split_once(" id=") {
                    Some((s, id)) if auth::is_node_id(id) => (s, Some(id)),
                    Some(_) => return Err(bad()),
                    None => (body, None),
                };
                let seed: [u8; 32] = B64
                    .decode(seed)
                    .ok()
                    .and_then(|b| b.try_into().ok())
                    .ok_or_else(bad)?;
                let mut key = NodeKey::from_seed(seed);
                if let Some(id) = id {
                    key.id = id.to_string();
                }
                Ok(key)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = NodeKey::generate();
                let text = key.file_text();
                // Written aside, then linked into place: never a half-written key,
                // and a key another process made first wins.
                let tmp = path.with_extension(format!("tmp-{}", auth::random_id()));
                write_private(&tmp, text.as_bytes()).map_err(kerr)?;
                let linked = std::fs::hard_link(&tmp, path);
                let _ = std::fs::remove_file(&tmp);
                match linked {
                    Ok(()) => Ok(key),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        NodeKey::load_or_create(path)
                    }
                    Err(e) => Err(kerr(e)),
                }
            }
            Err(e) => Err(kerr(e)),
        }
    }

    /// The node id the edge knows this key by.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The public key, base64url.
    pub fn public_key(&self) -> String {
        auth::encode_key(&self.signing.verifying_key())
    }

    /// The headers that authenticate one request.
    pub fn sign(&self, method: &str, path: &str, body: &[u8]) -> Vec<(&'static str, String)> {
        let ts = crate::time::now_ms();
        let nonce = auth::random_id();
        let msg = auth::signed_message(method, path, &self.id, ts, &nonce, body);
        let sig = B64.encode(self.signing.sign(&msg).to_bytes());
        vec![
            (auth::H_NODE, self.id.clone()),
            (auth::H_TIMESTAMP, ts.to_string()),
            (auth::H_NONCE, nonce),
            (auth::H_SIGNATURE, sig),
        ]
    }
}

#[cfg(unix)]
fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let meta = std::fs::metadata(dir)?;
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

#[cfg(not(unix))]
fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    // The data directory's ACL is set by the node (only its user).
    std::fs::create_dir_all(dir)
}

#[cfg(unix)]
fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(data)?;
    f.sync_all()
}

#[cfg(not(unix))]
fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    f.write_all(data)?;
    f.sync_all()
}

#[cfg(unix)]
fn check_private(path: &Path) -> Result<(), ClientError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(|source| ClientError::KeyFile {
            path: path.to_path_buf(),
            source,
        })?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(ClientError::KeyPermissions {
            path: path.to_path_buf(),
            mode: mode & 0o7777,
        });
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_path: &Path) -> Result<(), ClientError> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn key_file_is_private_and_stable() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("oz0-edge-key-{}", auth::random_id()));
        let path = dir.join("identity").join("node.key");
        let a = NodeKey::load_or_create(&path).unwrap();
        let b = NodeKey::load_or_create(&path).unwrap();
        assert_eq!(a.id(), b.id());
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            std::fs::metadata(path.parent().unwrap())
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o700
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            NodeKey::load_or_create(&path),
            Err(ClientError::KeyPermissions { .. })
        ));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&path, "garbage").unwrap();
        assert!(matches!(
            NodeKey::load_or_create(&path),
            Err(ClientError::KeyFormat { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
