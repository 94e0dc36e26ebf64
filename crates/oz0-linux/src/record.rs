//! A run's private host folder and its record, and the sweep that removes
//! what runs of dead node processes left.
//!
//! Each run has a private folder (`oz0-run-<id>`, mode 0700) under the
//! node's folder for run records ([`scratch_base`]), never in a folder the
//! run may write. Its record names the node process (pid and start time),
//! the writable folders the run holds, and the placeholders it will make,
//! written before anything of the run exists outside the folder: so that
//! a later node can undo what a node killed with SIGKILL left.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::outcome::{prep, SandboxError};
use crate::plan::Placeholder;

/// A new run id: 16 hex digits from the OS random source.
pub fn new_run_id() -> String {
    let mut b = [0u8; 8];
    let _ = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty());
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The run's private host folder; removed on drop.
pub(crate) struct Scratch {
    pub(crate) dir: PathBuf,
    /// When it was made, by the kernel's clock for file changes (its
    /// `ctime`): what the run changes later is stamped no earlier (see
    /// `gitlook`).
    pub(crate) made: std::time::Duration,
}

impl Scratch {
    pub(crate) fn create(base: &Path, run_id: &str) -> Result<Scratch, SandboxError> {
        let dir = base.join(format!("oz0-run-{run_id}"));
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(prep("creating the run's folder"))?;
        let st = rustix::fs::stat(&dir).map_err(prep("the run's folder"))?;
        let made = crate::gitlook::ctime(&st);
        Ok(Scratch { dir, made })
    }
}

/// A stamp of the kernel's clock for file changes strictly later than
/// `after`, handed out now: the `ctime` `dir` (the run's own folder) gets
/// when its times are set to now, set again until it is later than `after`.
///
/// File times come from a clock that may tick only every few milliseconds:
/// a file the caller made just before the run, in the same tick as the
/// run's folder, has that folder's very `ctime`, and would count as changed
/// by the run. What is stamped before this call is stamped no later than
/// `after` (or than this, when `after` is the stamp of a change made
/// first); what the run changes after it is stamped no earlier. The wait
/// is at most a tick of that clock; when the clock does not move within
/// 50 ms, `after` is returned (a look from then counts more as changed,
/// never less).
pub(crate) fn later_stamp(dir: &Path, after: std::time::Duration) -> std::time::Duration {
    use rustix::fs::{stat, utimensat, AtFlags, Timespec, Timestamps, CWD, UTIME_NOW};
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: UTIME_NOW,
    };
    let times = Timestamps {
        last_access: now,
        last_modification: now,
    };
    let until = std::time::Instant::now() + std::time::Duration::from_millis(50);
    loop {
        if utimensat(CWD, dir, &times, AtFlags::empty()).is_err() {
            return after;
        }
        match stat(dir) {
            Ok(st) if crate::gitlook::ctime(&st) > after => return crate::gitlook::ctime(&st),
            Ok(_) if std::time::Instant::now() < until => {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            _ => return after,
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        remove_run_dir(&self.dir);
    }
}

fn remove_run_dir(dir: &Path) {
    let _ = fs::remove_dir_all(dir);
}

/// The record of a run in its private folder: who runs it, and the
/// placeholders it will create.
#[derive(Serialize, serde::Deserialize)]
struct RunRecord {
    pid: i32,
    /// The process's start time (clock ticks since boot), so that a reused
    /// pid is not taken for the live run.
    start: u64,
    /// The writable folders the run held (locked): a sweep removes the
    /// placeholders only while it holds them itself, so never those of a
    /// live run that now uses the same names.
    #[serde(default)]
    roots: Vec<PathBuf>,
    placeholders: Vec<Placeholder>,
}

/// `/proc/PID/stat` field 22: the start time, or None if no such process.
fn start_time(pid: i32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces or parentheses: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

const RECORD: &str = "run.json";

pub(crate) fn record_run(
    dir: &Path,
    roots: &[PathBuf],
    placeholders: &[Placeholder],
) -> Result<(), SandboxError> {
    let pid = rustix::process::getpid().as_raw_nonzero().get();
    // Without its start time, a sweep of another node process could take
    // this live run for a dead one (a pid is reused): no record, no run.
    let start = start_time(pid).ok_or_else(|| SandboxError::Prepare {
        what: "the run record (this process's start time in /proc/self/stat)",
        source: io::Error::new(io::ErrorKind::NotFound, "/proc is not readable; mount it"),
    })?;
    let rec = RunRecord {
        pid,
        start,
        roots: roots.to_vec(),
        placeholders: placeholders.to_vec(),
    };
    let text = serde_json::to_vec(&rec).map_err(prep("the run record"))?;
    // The folder was just made, private: the record is new there, and no
    // link is followed to it.
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o600)
        .open(dir.join(RECORD))
        .and_then(|mut f| f.write_all(&text))
        .map_err(prep("the run record"))
}

/// Where a run's private host folder (its record, its proxy socket) goes
/// when the caller names none: `$TMPDIR` when it is set; else a memory file
/// system of this user's or everyone's (`$XDG_RUNTIME_DIR`, `/dev/shm`),
/// where making and removing the folder costs no disk work (on a file
/// system mounted with `discard` and no journal, removing a folder waits for
/// the disk); else `/tmp`.
pub fn scratch_base() -> PathBuf {
    if let Some(t) = std::env::var_os("TMPDIR").filter(|t| !t.is_empty()) {
        return PathBuf::from(t);
    }
    let uid = rustix::process::getuid().as_raw();
    let runtime = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|d| d.is_absolute() && private_dir_of(d, uid));
    runtime
        .or_else(|| Some(PathBuf::from("/dev/shm")).filter(|d| shared_sticky_dir(d)))
        .unwrap_or_else(std::env::temp_dir)
}

/// A real folder (not a link) owned by `uid` that only its owner can enter.
fn private_dir_of(d: &Path, uid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    fs::symlink_metadata(d).is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0)
}

/// A real folder (not a link) everyone may create in, with the sticky bit
/// (so no one removes another's entries), as `/tmp` is.
fn shared_sticky_dir(d: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    fs::symlink_metadata(d).is_ok_and(|m| m.is_dir() && shared_sticky(m.mode(), m.uid()))
}

/// Whether a folder of `mode` owned by `uid` is one everyone may create in
/// and no one but its owner may remove another's entries from, owned by
/// root.
fn shared_sticky(mode: u32, uid: u32) -> bool {
    mode & 0o1777 == 0o1777 && uid == 0
}

/// How old a run folder without a record must be before a sweep takes it
/// for the leftover of a dead node.
const UNRECORDED_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// Removes what runs of dead node processes left in `base`: their
/// placeholders (only if still empty, never through a link) and their
/// private folders. Folders of live runs, or that this user does not own,
/// are left alone, and so is a dead run whose writable folders another
/// live run holds now (which may have made placeholders of its own under
/// the same names); a later sweep takes them. A run sweeps before it looks
/// at its own folders, so that it never takes a dead run's leftovers there
/// for the caller's.
pub fn sweep_stale(base: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    let uid = rustix::process::getuid().as_raw();
    for e in entries.flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().starts_with("oz0-run-") {
            continue;
        }
        let dir = e.path();
        let Ok(meta) = fs::symlink_metadata(&dir) else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != uid {
            continue;
        }
        let record = crate::hostfs::open_no_links(&dir.join(RECORD), rustix::fs::OFlags::RDONLY)
            .map(File::from)
            .map_err(io::Error::from)
            .and_then(|f| {
                let mut text = Vec::new();
                f.take(1 << 20).read_to_end(&mut text).map(|_| text)
            });
        let Ok(text) = record else {
            // A node writes its record right after making the folder, before
            // anything of the run exists outside it; a folder still without
            // one after a minute belongs to a node that died in between.
            let age = meta.modified().ok().and_then(|m| m.elapsed().ok());
            if age.is_some_and(|a| a > UNRECORDED_GRACE) {
                remove_run_dir(&dir);
            }
            continue;
        };
        let Ok(rec) = serde_json::from_slice::<RunRecord>(&text) else {
            continue;
        };
        if start_time(rec.pid).is_some_and(|s| s == rec.start) {
            continue;
        }
        // The dead run's folders, held while its placeholders go: one a live
        // run holds now may have placeholders of that run's own under the
        // same names. Then the record waits for a later sweep.
        let Some(_held) = crate::folder_lock::lock_folders(&rec.roots) else {
            continue;
        };
        crate::placeholders::remove_placeholders(&rec.placeholders, None);
        remove_run_dir(&dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("oz0-launch-unit-{tag}-{}", new_run_id()));
        fs::create_dir_all(&d).unwrap();
        d
    }

    /// A file the caller made just before the run, in the same tick of the
    /// file clock as the run's folder (on this machine nearly always: the
    /// clock is coarse), is older than the stamp the look starts from; a
    /// file made after the stamp is not.
    #[test]
    fn what_was_made_before_the_run_is_older_than_its_stamp() {
        let d = tmp("stamp");
        for i in 0..200 {
            let before = d.join(format!("before-{i}"));
            fs::write(&before, "{}").unwrap();
            let s = Scratch::create(&d, &format!("{i}")).unwrap();
            let since = later_stamp(&s.dir, s.made);
            assert!(since > s.made, "no later stamp than the folder's");
            let st = rustix::fs::stat(&before).unwrap();
            assert!(
                crate::gitlook::ctime(&st) < since,
                "a file made before the run counts as the run's ({i})"
            );
            let after = d.join(format!("after-{i}"));
            fs::write(&after, "x").unwrap();
            let st = rustix::fs::stat(&after).unwrap();
            assert!(crate::gitlook::ctime(&st) >= since, "a later file is older");
        }
        fs::remove_dir_all(&d).unwrap();
    }

    /// A user's runtime folder counts only when it is a real folder of this
    /// user's that no one else may enter; a shared one only with everyone's
    /// write and the sticky bit, owned by root.
    #[test]
    fn scratch_folders_are_checked_before_use() {
        use std::os::unix::fs::PermissionsExt;
        let base = tmp("scratch");
        let uid = rustix::process::getuid().as_raw();
        let private = base.join("private");
        fs::create_dir(&private).unwrap();
        fs::set_permissions(&private, fs::Permissions::from_mode(0o700)).unwrap();
        assert!(private_dir_of(&private, uid));
        assert!(!private_dir_of(&private, uid + 1), "another user's folder");
        fs::set_permissions(&private, fs::Permissions::from_mode(0o755)).unwrap();
        assert!(!private_dir_of(&private, uid), "a folder others may enter");
        fs::set_permissions(&private, fs::Permissions::from_mode(0o700)).unwrap();
        let link = base.join("link");
        std::os::unix::fs::symlink(&private, &link).unwrap();
        assert!(!private_dir_of(&link, uid), "a link");
        assert!(!shared_sticky_dir(&private));
        assert!(!shared_sticky_dir(&link));
        // What makes a shared folder, whatever this host's /tmp is.
        assert!(shared_sticky(0o41777, 0));
        assert!(!shared_sticky(0o40777, 0), "no sticky bit");
        assert!(!shared_sticky(0o41775, 0), "not writable by all");
        assert!(!shared_sticky(0o41777, 1000), "not root's");
        if rustix::process::getuid().is_root() {
            use std::os::unix::fs::PermissionsExt;
            let shared = base.join("shared");
            fs::create_dir(&shared).unwrap();
            fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
            assert!(shared_sticky_dir(&shared));
        }
        fs::remove_dir_all(&base).unwrap();
    }

    /// A folder without a record is a dead node's only after the grace
    /// period: a live node writes its record right after making it.
    #[test]
    fn sweep_takes_unrecorded_folders_only_when_old() {
        let base = tmp("sweep");
        let fresh = base.join("oz0-run-fresh");
        let old = base.join("oz0-run-old");
        let other = base.join("not-a-run");
        for d in [&fresh, &old, &other] {
            fs::create_dir(d).unwrap();
        }
        let long_ago = std::time::SystemTime::now() - UNRECORDED_GRACE * 2;
        for d in [&old, &other] {
            File::open(d).unwrap().set_modified(long_ago).unwrap();
        }
        sweep_stale(&base);
        assert!(fresh.is_dir(), "a fresh folder was taken");
        assert!(!old.exists(), "an old folder without a record was left");
        assert!(other.is_dir(), "a folder not named as a run's was taken");
        fs::remove_dir_all(&base).unwrap();
    }
}
