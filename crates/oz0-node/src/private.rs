//! The node's private files on Linux and macOS: its data directory
//! (0700) and the enrolment token's file (readable by its owner alone).

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::flags::FlagError;

/// Why the token file or the data directory cannot be used: each names
/// the path and, where one exists, the fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrivateError {
    /// The token file cannot be read.
    #[error("--enrolment-token-file {}: {source}", path.display())]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The token file is readable by others.
    #[error("--enrolment-token-file {} has mode {mode:o}, readable by others: chmod 600 {}", path.display(), path.display())]
    TokenReadable {
        /// The file.
        path: PathBuf,
        /// Its mode.
        mode: u32,
    },
    /// The token file does not hold one token.
    #[error(transparent)]
    Token(#[from] FlagError),
    /// The data directory is a symbolic link.
    #[error("--data-dir {} is a symbolic link: name the real folder", .0.display())]
    DataDirLink(PathBuf),
    /// The data directory is not a folder.
    #[error("--data-dir {} is not a folder: name a folder (it is created if missing)", .0.display())]
    DataDirNotFolder(PathBuf),
    /// The data directory is readable by others and stays so.
    #[error("--data-dir {} is readable by others and cannot be made private: {source}", path.display())]
    DataDirShared {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The data directory cannot be made.
    #[error("cannot create the data directory {}: {source}", path.display())]
    DataDirCreate {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The data directory cannot be written.
    #[error("the data directory {} is not writable: {source}", path.display())]
    DataDirWrite {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

impl From<PrivateError> for String {
    fn from(e: PrivateError) -> String {
        e.to_string()
    }
}

/// Reads the enrolment token from a file only its owner can read.
pub fn read_token(path: &Path) -> Result<String, PrivateError> {
    let unreadable = |source| PrivateError::TokenFile {
        path: path.to_path_buf(),
        source,
    };
    let meta = fs::metadata(path).map_err(unreadable)?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(PrivateError::TokenReadable {
            path: path.to_path_buf(),
            mode,
        });
    }
    let text = fs::read_to_string(path).map_err(unreadable)?;
    Ok(crate::flags::enrolment_token(&text, path)?)
}

/// Makes the data directory private, creating it if needed. A directory
/// others can read is made private again, with a warning.
pub fn prepare_data_dir(d: &Path) -> Result<(), PrivateError> {
    match fs::symlink_metadata(d) {
        Ok(m) if m.file_type().is_symlink() => {
            return Err(PrivateError::DataDirLink(d.to_path_buf()))
        }
        Ok(m) if !m.is_dir() => return Err(PrivateError::DataDirNotFolder(d.to_path_buf())),
        Ok(m) => {
            if m.permissions().mode() & 0o077 != 0 {
                fs::set_permissions(d, fs::Permissions::from_mode(0o700)).map_err(|source| {
                    PrivateError::DataDirShared {
                        path: d.to_path_buf(),
                        source,
                    }
                })?;
                eprintln!(
                    "oz0-node: warning: the data directory {} was readable by others (mode {:o}); it is now 0700",
                    d.display(),
                    m.permissions().mode() & 0o777
                );
            }
        }
        Err(_) => fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(d)
            .map_err(|source| PrivateError::DataDirCreate {
                path: d.to_path_buf(),
                source,
            })?,
    }
    let probe = d.join(".oz0-write-test");
    fs::write(&probe, b"")
        .and_then(|_| fs::remove_file(&probe))
        .map_err(|source| PrivateError::DataDirWrite {
            path: d.to_path_buf(),
            source,
        })?;
    Ok(())
}
