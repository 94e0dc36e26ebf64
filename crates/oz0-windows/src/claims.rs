//! What a PSEC run claims for its length, in the node's data directory
//! (`<data dir>\claims\`): each writable folder and its TEMP, one file per
//! folder, named by the folder's key ([`key`]). A claim is a file its run
//! holds open for writing without sharing write or delete access, and
//! deleted when closed (`FILE_FLAG_DELETE_ON_CLOSE`), so Windows itself
//! keeps the rule, whatever ends the node:
//!
//! - **no two runs write one folder at once**: a second run's claim of the
//!   same folder is refused (a sharing violation), naming the folder;
//! - **a run is denied every other run's folders**: the claims present
//!   are exactly the live runs' folders (a dead run's went with its last
//!   handle), read before the plan is made and denied to the new run
//!   (`others`).
//!
//! A run that starts after this one's plan was made is not in it: its
//! folders are denied to the runs that start after it. The key and the
//! record's text are portable and tested on Linux; the files are Windows'
//! (under Wine in CI).

/// The claims' folder, under the node's data directory.
pub const CLAIMS_DIR: &str = "claims";

/// The claim file's name for a folder: FNV-1a (64 bits) of its real path
/// in lower case (Windows' paths ignore case), in hex.
pub fn key(real_path: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in real_path.to_lowercase().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// A claim's text: the run, then the folder as the run's spec named it.
pub fn record(run_id: &str, folder: &str) -> String {
    format!("{run_id}\n{folder}\n")
}

/// The folder a claim's text names (its second line), when it is whole.
pub fn folder_of(text: &str) -> Option<&str> {
    let mut lines = text.split('\n');
    let _run = lines.next()?;
    let folder = lines.next()?;
    (!folder.is_empty() && lines.next() == Some("")).then_some(folder)
}

/// Why a run's folders could not be claimed: nothing of the run is started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClaimError {
    /// Another live run writes the folder.
    #[error("{0} is written by another run of this node now; run this one after it ends, or give it another folder")]
    Taken(String),
    /// The claims' folder or a claim could not be made.
    #[error("cannot claim {what} for the run: {source}")]
    Io {
        /// The folder or the claim.
        what: String,
        /// Why.
        source: std::io::Error,
    },
}

#[cfg(windows)]
pub use imp::{claim, others, Claims};

#[cfg(windows)]
mod imp {
    use std::fs::{self, File, OpenOptions};
    use std::io::{Read, Write};
    use std::os::windows::fs::OpenOptionsExt;
    use std::path::{Path, PathBuf};

    use super::{folder_of, key, record, ClaimError, CLAIMS_DIR};

    /// `ERROR_SHARING_VIOLATION`.
    const SHARING_VIOLATION: i32 = 32;
    /// `ERROR_ACCESS_DENIED` (also a file whose deletion is pending).
    const ACCESS_DENIED: i32 = 5;
    /// `FILE_FLAG_DELETE_ON_CLOSE`.
    const DELETE_ON_CLOSE: u32 = 0x0400_0000;
    /// `GENERIC_WRITE | DELETE`: written once, deleted when closed.
    const ACCESS: u32 = 0x4000_0000 | 0x0001_0000;
    /// `FILE_SHARE_READ`: others may read who holds it, never write it or
    /// delete it.
    const SHARE_READ: u32 = 0x1;
    /// `FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE`: a reader
    /// of another run's claim gets in nobody's way.
    const SHARE_ALL: u32 = 0x7;

    /// The claims a run holds; let go (and deleted) when dropped.
    #[derive(Debug, Default)]
    pub struct Claims(Vec<File>);

    fn io(what: &Path, source: std::io::Error) -> ClaimError {
        ClaimError::Io {
            what: what.display().to_string(),
            source,
        }
    }

    /// Claims each of `folders` (as the run's spec names them) for the run
    /// `run_id`, in `data_dir`: all of them, or none (Err, naming the
    /// first that another live run holds).
    pub fn claim(data_dir: &Path, run_id: &str, folders: &[PathBuf]) -> Result<Claims, ClaimError> {
        let dir = data_dir.join(CLAIMS_DIR);
        fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        let mut held = Claims::default();
        for f in folders {
            let real = fs::canonicalize(f).map_err(|e| io(f, e))?;
            let path = dir.join(key(&real.to_string_lossy()));
            let open = || {
                OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .access_mode(ACCESS)
                    .share_mode(SHARE_READ)
                    .custom_flags(DELETE_ON_CLOSE)
                    .open(&path)
            };
            let mut tries = 0;
            let mut file = loop {
                match open() {
                    Ok(file) => break file,
                    Err(e) if e.raw_os_error() == Some(SHARING_VIOLATION) => {
                        return Err(ClaimError::Taken(f.display().to_string()))
                    }
                    // A claim just let go, whose deletion waits for a
                    // reader's handle: gone in a moment.
                    Err(e) if e.raw_os_error() == Some(ACCESS_DENIED) && tries < 20 => {
                        tries += 1;
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                    Err(e) => return Err(io(&path, e)),
                }
            };
            file.write_all(record(run_id, &f.display().to_string()).as_bytes())
                .map_err(|e| io(&path, e))?;
            held.0.push(file);
        }
        Ok(held)
    }

    /// The folders other live runs claim now, as their specs named them.
    /// A claim that cannot be read whole is left out: its run is starting
    /// (it is written just after it is made) or has just ended.
    pub fn others(data_dir: &Path) -> Vec<String> {
        let dir = data_dir.join(CLAIMS_DIR);
        let Ok(entries) = fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for e in entries.flatten() {
            let mut text = String::new();
            let read = OpenOptions::new()
                .read(true)
                .share_mode(SHARE_ALL)
                .open(e.path())
                .and_then(|f| f.take(64 * 1024).read_to_string(&mut text));
            if read.is_ok() {
                if let Some(f) = folder_of(&text) {
                    out.push(f.to_string());
                }
            }
        }
        out
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn scratch(tag: &str) -> PathBuf {
            let d = std::env::temp_dir().join(format!("oz0-claims-{tag}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&d);
            fs::create_dir_all(&d).unwrap();
            d
        }

        #[test]
        fn a_folder_is_claimed_by_one_run_at_a_time_and_listed_for_the_others() {
            let d = scratch("one");
            let data = d.join("data");
            let (a, b) = (d.join("a"), d.join("b"));
            fs::create_dir_all(&a).unwrap();
            fs::create_dir_all(&b).unwrap();
            let first = claim(&data, "run-1", std::slice::from_ref(&a)).unwrap();
            assert_eq!(others(&data), vec![a.display().to_string()]);
            // The same folder, spelled in another case: taken.
            let upper = PathBuf::from(a.display().to_string().to_uppercase());
            for spelled in [&a, &upper] {
                match claim(&data, "run-2", &[b.clone(), spelled.clone()]) {
                    Err(ClaimError::Taken(f)) => assert_eq!(f, spelled.display().to_string()),
                    other => panic!("{other:?}"),
                }
            }
            // All or none: b was let go with the refused claim.
            let second = claim(&data, "run-2", std::slice::from_ref(&b)).unwrap();
            drop(first);
            // Its claim went with its handle.
            assert_eq!(others(&data), vec![b.display().to_string()]);
            let again = claim(&data, "run-3", std::slice::from_ref(&a)).unwrap();
            drop((second, again));
            assert!(others(&data).is_empty());
            let _ = fs::remove_dir_all(&d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_ignore_case_and_records_name_their_folder() {
        assert_eq!(key("C:\\Work\\A"), key("c:\\work\\a"));
        assert_ne!(key("C:\\work\\a"), key("C:\\work\\b"));
        assert_eq!(key("x").len(), 16);
        let r = record("r1", "C:\\work\\a");
        assert_eq!(folder_of(&r), Some("C:\\work\\a"));
        for bad in ["", "r1", "r1\n", "r1\n\n", "r1\nC:\\a", "r1\nC:\\a\nmore\n"] {
            assert_eq!(folder_of(bad), None, "{bad:?}");
        }
    }
}
