//! The node's private files on Linux and macOS: its data directory
//! (0700) and the enrolment token's file (readable by its owner alone).

use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

/// Reads the enrolment token from a file only its owner can read.
pub fn read_token(path: &Path) -> Result<String, String> {
    let meta = fs::metadata(path)
        .map_err(|e| format!("--enrolment-token-file {}: {e}", path.display()))?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "--enrolment-token-file {} has mode {mode:o}, readable by others: chmod 600 {}",
            path.display(),
            path.display()
        ));
    }
    let text = fs::read_to_string(path)
        .map_err(|e| format!("--enrolment-token-file {}: {e}", path.display()))?;
    crate::flags::enrolment_token(&text, path)
}

/// Makes the data directory private, creating it if needed. A directory
/// others can read is made private again, with a warning.
pub fn prepare_data_dir(d: &Path) -> Result<(), String> {
    match fs::symlink_metadata(d) {
        Ok(m) if m.file_type().is_symlink() => {
            return Err(format!(
                "--data-dir {} is a symbolic link: name the real folder",
                d.display()
            ))
        }
        Ok(m) if !m.is_dir() => {
            return Err(format!(
                "--data-dir {} is not a folder: name a folder (it is created if missing)",
                d.display()
            ))
        }
        Ok(m) => {
            if m.permissions().mode() & 0o077 != 0 {
                fs::set_permissions(d, fs::Permissions::from_mode(0o700)).map_err(|e| {
                    format!(
                        "--data-dir {} is readable by others and cannot be made private: {e}",
                        d.display()
                    )
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
            .map_err(|e| format!("cannot create the data directory {}: {e}", d.display()))?,
    }
    let probe = d.join(".oz0-write-test");
    fs::write(&probe, b"")
        .and_then(|_| fs::remove_file(&probe))
        .map_err(|e| format!("the data directory {} is not writable: {e}", d.display()))?;
    Ok(())
}
