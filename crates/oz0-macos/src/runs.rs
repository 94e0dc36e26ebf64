//! What every macOS run keeps on the host, portable (Unix) and tested on
//! Linux: its id ([`new_run_id`]), its TEMP ([`RunTemp`], also `HOME`,
//! made 0700 with `mkdir` and removed after), and its record in
//! `<data-dir>/runs/` ([`RunRecord`]): the node's pid and the run's marks,
//! so that a later start of the node ends the processes of a run whose
//! node was killed before it could ([`sweep_stale`]; macOS ends nothing
//! with its parent).

use std::path::{Path, PathBuf};

use oz0_policy::AbsPath;

use crate::tree::Membership;

/// Why a run's TEMP or record cannot be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunsError {
    /// `mkdir` of the run's TEMP failed.
    #[error("cannot make the run's TEMP {}: {source}", path.display())]
    Temp {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Every name tried was taken.
    #[error("cannot make a new run TEMP under {}", .0.display())]
    NoNewTemp(PathBuf),
    /// The TEMP's path is not one a run's spec takes.
    #[error("the run's TEMP {} has no plain path", .0.display())]
    NotPlain(PathBuf),
    /// The record could not be written.
    #[error("cannot record the run in {}: {source}", path.display())]
    Record {
        /// The record.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// A run id unique on this machine while the node runs: the node's pid,
/// the time and a count.
pub fn new_run_id() -> String {
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{t:x}-{n}", std::process::id())
}

/// A run's TEMP: a new folder only this user can enter, removed on drop.
#[derive(Debug)]
pub struct RunTemp(pub PathBuf);

impl RunTemp {
    /// A new folder under `root` (made with `mkdir`, so never one that was
    /// there: the name need not be secret, and `root` is this user's own).
    pub fn new(root: &Path) -> Result<RunTemp, RunsError> {
        use std::os::unix::fs::DirBuilderExt;
        for _ in 0..16 {
            let p = root.join(format!("oz0-run-{}", new_run_id()));
            match std::fs::DirBuilder::new().mode(0o700).create(&p) {
                Ok(()) => return Ok(RunTemp(p)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(source) => return Err(RunsError::Temp { path: p, source }),
            }
        }
        Err(RunsError::NoNewTemp(root.to_path_buf()))
    }

    /// Its path as a run's spec takes it.
    pub fn abs(&self) -> Result<AbsPath, RunsError> {
        self.0
            .to_str()
            .and_then(|s| AbsPath::new(s).ok())
            .ok_or_else(|| RunsError::NotPlain(self.0.clone()))
    }
}

impl Drop for RunTemp {
    fn drop(&mut self) {
        // std's removal opens each folder without following links.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `<data-dir>/runs`: the records of live runs.
pub fn records(data_dir: &Path) -> PathBuf {
    data_dir.join("runs")
}

/// A live run's record: removed when dropped (the run has ended), or kept
/// with [`RunRecord::keep`] when processes of the run may be left, so that
/// the next start of the node tries again.
#[derive(Debug)]
pub struct RunRecord(PathBuf);

impl RunRecord {
    /// Writes the record of a run with marks `m` in `dir` (made 0700), as
    /// the process `pid`'s.
    pub fn write(dir: &Path, pid: u32, m: &Membership) -> Result<RunRecord, RunsError> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let _ = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir);
        let p = dir.join(format!("{}.run", new_run_id()));
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&p)
            .and_then(|mut f| std::io::Write::write_all(&mut f, record_text(pid, m).as_bytes()))
            .map_err(|source| RunsError::Record {
                path: p.clone(),
                source,
            })?;
        Ok(RunRecord(p))
    }

    /// Leaves the record in place.
    pub fn keep(self) {
        std::mem::forget(self);
    }
}

impl Drop for RunRecord {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A record's text: the node's pid, then the two marks, a line each.
pub fn record_text(pid: u32, m: &Membership) -> String {
    format!("{pid}\n{}\n{}\n", m.denied, m.allowed)
}

/// A record's node pid and marks; None when it is not one.
pub fn parse_record(text: &str) -> Option<(i32, Membership)> {
    let mut lines = text.lines();
    let (Some(pid), Some(denied), Some(allowed)) = (lines.next(), lines.next(), lines.next())
    else {
        return None;
    };
    let pid = pid.parse::<i32>().ok().filter(|p| *p > 0)?;
    Some((
        pid,
        Membership {
            denied: denied.to_string(),
            allowed: allowed.to_string(),
        },
    ))
}

/// Ends the processes of every run recorded in `dir` whose node is gone
/// (`alive` answers for a pid; `end` ends a run's processes, `None` when
/// all are gone, else why not), and removes their records: what each
/// ended, for the log. A record that is not one is removed; a run some of
/// whose processes may be left keeps its record for the next start.
pub fn sweep_stale(
    dir: &Path,
    alive: &dyn Fn(i32) -> bool,
    end: &mut dyn FnMut(&Membership) -> Option<String>,
) -> Vec<String> {
    let mut said = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return said;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().and_then(|x| x.to_str()) != Some("run") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let Some((pid, m)) = parse_record(&text) else {
            let _ = std::fs::remove_file(&path);
            continue;
        };
        if alive(pid) {
            continue;
        }
        match end(&m) {
            None => {
                said.push(format!(
                    "ended what was left of a run whose node (pid {pid}) had been killed"
                ));
                let _ = std::fs::remove_file(&path);
            }
            Some(err) => said.push(format!(
                "processes of a run whose node (pid {pid}) was killed may be left: {err}"
            )),
        }
    }
    said
}

/// Why a sandbox cannot be set up on this Mac.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SetupError {
    /// The temporary folder has no real path.
    #[error("the temporary folder {}: {source}", path.display())]
    TempRoot {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// This binary's path cannot be found.
    #[error("cannot name the node binary: {0}")]
    NodeBinary(std::io::Error),
    /// This binary's path is not one a run's spec takes.
    #[error("the node binary's path {} is not plain UTF-8", .0.display())]
    NodeBinaryPath(PathBuf),
}

impl From<SetupError> for String {
    fn from(e: SetupError) -> String {
        e.to_string()
    }
}

/// Where runs' TEMPs are made: this user's temporary folder, by its real
/// path (`/private/var/folders/…`: Seatbelt matches real paths).
pub fn temp_root() -> Result<PathBuf, SetupError> {
    let t = std::env::temp_dir();
    t.canonicalize()
        .map_err(|source| SetupError::TempRoot { path: t, source })
}

/// A run's stream as a process's (Seatbelt's runs and Apple's container's).
pub(crate) fn stdio(s: oz0_core::Stdio) -> std::process::Stdio {
    match s {
        oz0_core::Stdio::Inherit => std::process::Stdio::inherit(),
        oz0_core::Stdio::Null => std::process::Stdio::null(),
        oz0_core::Stdio::File(f) => std::process::Stdio::from(f),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp() -> PathBuf {
        let d = std::env::temp_dir().join(format!("oz0-macos-runs-{}", new_run_id()));
        std::fs::create_dir(&d).unwrap();
        d
    }

    #[test]
    fn a_run_temp_is_private_new_and_removed() {
        use std::os::unix::fs::PermissionsExt;
        let root = temp();
        let t = RunTemp::new(&root).unwrap();
        let mode = std::fs::metadata(&t.0).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        assert_eq!(t.abs().unwrap().as_str(), t.0.to_str().unwrap());
        let u = RunTemp::new(&root).unwrap();
        assert_ne!(t.0, u.0);
        std::fs::write(t.0.join("left"), "x").unwrap();
        let p = t.0.clone();
        drop(t);
        assert!(!p.exists());
        drop(u);
        std::fs::remove_dir(&root).unwrap();
    }

    #[test]
    fn a_record_reads_back_and_bad_ones_are_none() {
        let m = Membership::for_temp("/private/var/x/oz0-run-1");
        assert_eq!(parse_record(&record_text(42, &m)), Some((42, m.clone())));
        for bad in ["", "42\n", "x\na\nb\n", "0\na\nb\n", "-3\na\nb\n"] {
            assert_eq!(parse_record(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_sweep_ends_runs_of_dead_nodes_only_and_keeps_what_it_could_not_end() {
        let dir = temp();
        let m = |n: &str| Membership::for_temp(&format!("/t/{n}"));
        let live = RunRecord::write(&dir, 10, &m("live")).unwrap();
        let dead = RunRecord::write(&dir, 20, &m("dead")).unwrap();
        let stuck = RunRecord::write(&dir, 30, &m("stuck")).unwrap();
        std::fs::write(dir.join("junk.run"), "not a record").unwrap();
        std::fs::write(dir.join("other.txt"), "20\na\nb\n").unwrap();
        let mut ended = Vec::new();
        let said = sweep_stale(&dir, &|pid| pid == 10, &mut |mm| {
            ended.push(mm.clone());
            (mm == &m("stuck")).then(|| "one would not die".to_string())
        });
        ended.sort_by(|a, b| a.denied.cmp(&b.denied));
        assert_eq!(ended, vec![m("dead"), m("stuck")]);
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(said
            .iter()
            .any(|s| s.contains("pid 20") && s.contains("ended")));
        assert!(said
            .iter()
            .any(|s| s.contains("pid 30") && s.contains("one would not die")));
        // The live run's record and the stuck one's stay; the dead one's
        // and the junk are gone; other files are not touched.
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left.len(), 3, "{left:?}");
        assert!(left.contains(&"other.txt".to_string()));
        assert!(live.0.exists() && stuck.0.exists() && !dead.0.exists());
        // A record kept is not removed when it goes out of scope.
        let path = stuck.0.clone();
        stuck.keep();
        assert!(path.exists());
        drop(live);
        drop(dead);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
