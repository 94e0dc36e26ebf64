//! How long `<data-dir>/jobs/<job>/` records are kept: by age and by the
//! total size of all records (`--keep-jobs-days`, `--keep-jobs-mib`),
//! applied when the node starts and after each job.
//!
//! A record older than the age limit goes; then, while the records together
//! are larger than the size limit, the oldest goes. A record is aged by its
//! newest file (its `status.json`, written when the job ended). The record
//! of a job that is running is never touched, whatever its size. Only
//! folders named like a job id are records: anything else an operator put
//! in `jobs/` stays.
//!
//! The data directory is the node's own (mode 0700): no run sees it, so no
//! run can plant a link there; the walk below still reads entries without
//! following links (`symlink_metadata`), and `remove_dir_all` does not
//! follow them either.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use super::job::safe_id;

/// The limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Retention {
    /// Records older than this go.
    pub max_age: Duration,
    /// The records together stay at or under this many bytes.
    pub max_bytes: u64,
}

/// Default `--keep-jobs-days`.
pub const DEFAULT_DAYS: u64 = 7;
/// Default `--keep-jobs-mib`.
pub const DEFAULT_MIB: u64 = 1024;

impl Retention {
    /// From the flags' values (days, MiB).
    pub fn new(days: u64, mib: u64) -> Retention {
        Retention {
            max_age: Duration::from_secs(days.saturating_mul(86_400)),
            max_bytes: mib.saturating_mul(1 << 20),
        }
    }
}

/// What one sweep did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// Records removed for their age.
    pub old: usize,
    /// Records removed to bring the total under the size limit.
    pub over: usize,
    /// Bytes freed.
    pub freed: u64,
    /// Records kept, and their bytes.
    pub kept: usize,
    /// Bytes kept.
    pub kept_bytes: u64,
    /// Records that could not be removed, with why.
    pub failed: Vec<String>,
}

struct Record {
    id: String,
    path: PathBuf,
    bytes: u64,
    newest: SystemTime,
}

/// The bytes of the regular files in `dir` (not following links) and the
/// newest modification time among them and `dir` itself.
fn measure(dir: &Path) -> (u64, SystemTime) {
    let mut bytes = 0;
    let mut newest = fs::symlink_metadata(dir)
        .and_then(|m| m.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH);
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            let Ok(m) = fs::symlink_metadata(e.path()) else {
                continue;
            };
            if m.is_file() {
                bytes += m.len();
                if let Ok(t) = m.modified() {
                    newest = newest.max(t);
                }
            }
        }
    }
    (bytes, newest)
}

/// Applies `r` to the records under `jobs`, never touching those in
/// `running` (checked under its lock at each removal).
pub fn sweep(jobs: &Path, r: Retention, running: &Mutex<BTreeSet<String>>) -> Swept {
    let mut out = Swept::default();
    let Ok(rd) = fs::read_dir(jobs) else {
        return out;
    };
    let mut recs: Vec<Record> = rd
        .flatten()
        .filter_map(|e| {
            let id = e.file_name().to_str()?.to_string();
            let path = e.path();
            let m = fs::symlink_metadata(&path).ok()?;
            (safe_id(&id) && m.is_dir()).then(|| {
                let (bytes, newest) = measure(&path);
                Record {
                    id,
                    path,
                    bytes,
                    newest,
                }
            })
        })
        .collect();
    // Oldest first.
    recs.sort_by_key(|x| (x.newest, x.id.clone()));
    let now = SystemTime::now();
    let mut total: u64 = recs.iter().map(|x| x.bytes).sum();
    for rec in recs {
        let old = now
            .duration_since(rec.newest)
            .is_ok_and(|age| age > r.max_age);
        let over = total > r.max_bytes;
        if old || over {
            let busy = running.lock().unwrap_or_else(|e| e.into_inner());
            if !busy.contains(&rec.id) {
                match fs::remove_dir_all(&rec.path) {
                    Ok(()) => {
                        total -= rec.bytes;
                        out.freed += rec.bytes;
                        if old {
                            out.old += 1;
                        } else {
                            out.over += 1;
                        }
                        continue;
                    }
                    Err(e) => out.failed.push(format!("{}: {e}", rec.path.display())),
                }
            }
        }
        out.kept += 1;
        out.kept_bytes += rec.bytes;
    }
    out
}

/// The records under one `jobs` folder, swept one sweep at a time.
pub struct Records {
    jobs: PathBuf,
    lock: Mutex<()>,
}

impl Records {
    /// The records under `jobs`.
    pub fn new(jobs: PathBuf) -> Records {
        Records {
            jobs,
            lock: Mutex::new(()),
        }
    }

    /// Applies `r` at the node's start (`ended` None) or after the job
    /// `ended`, never touching the records of the jobs in `running`.
    pub fn sweep(
        &self,
        ended: Option<&str>,
        r: Retention,
        running: &Mutex<BTreeSet<String>>,
    ) -> Swept {
        let _one = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let _ = ended;
        sweep(&self.jobs, r, running)
    }
}

/// The log line for a sweep that removed or failed something.
pub fn describe(s: &Swept, r: Retention) -> Option<String> {
    if s.old + s.over == 0 && s.failed.is_empty() {
        return None;
    }
    let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
    let mut line = format!(
        "job records: removed {} older than {} day(s) and {} beyond {} MiB in all ({:.1} MiB freed); kept {} ({:.1} MiB)",
        s.old,
        r.max_age.as_secs() / 86_400,
        s.over,
        r.max_bytes >> 20,
        mib(s.freed),
        s.kept,
        mib(s.kept_bytes)
    );
    if !s.failed.is_empty() {
        line.push_str(&format!("; could not remove {}", s.failed.join(", ")));
    }
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(jobs: &Path, id: &str, bytes: usize, age_days: u64) {
        let d = jobs.join(id);
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("stdout"), vec![b'x'; bytes]).unwrap();
        let t = SystemTime::now() - Duration::from_secs(age_days * 86_400);
        for p in [d.join("stdout"), d.clone()] {
            fs::File::open(&p).unwrap().set_modified(t).unwrap();
        }
    }

    #[test]
    fn old_records_go_then_the_oldest_until_under_the_size() {
        let base = std::env::temp_dir().join(format!("oz0-retention-{}", std::process::id()));
        let jobs = base.join("jobs");
        fs::create_dir_all(&jobs).unwrap();
        record(&jobs, "ancient", 10, 30);
        record(&jobs, "a", 400 << 10, 3);
        record(&jobs, "b", 400 << 10, 2);
        record(&jobs, "c", 400 << 10, 1);
        record(&jobs, "running", 10, 40);
        // Not a record: left alone.
        fs::create_dir_all(jobs.join("not a job")).unwrap();
        fs::write(jobs.join("notes.txt"), "x").unwrap();
        let running = Mutex::new(BTreeSet::from(["running".to_string()]));
        let r = Retention::new(7, 1);
        let s = sweep(&jobs, r, &running);
        let left: BTreeSet<String> = fs::read_dir(&jobs)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().into_string().unwrap())
            .collect();
        // ancient for its age (running too, but it runs); then the oldest,
        // a, to bring 1.2 MiB under 1 MiB.
        assert_eq!(
            left,
            BTreeSet::from(["b", "c", "running", "not a job", "notes.txt"].map(String::from)),
            "{s:?}"
        );
        assert_eq!((s.old, s.over, s.kept), (1, 1, 3), "{s:?}");
        assert!(describe(&s, r)
            .unwrap()
            .contains("removed 1 older than 7 day(s) and 1 beyond 1 MiB"));
        // Nothing more to do is silent.
        assert_eq!(
            describe(&sweep(&jobs, Retention::new(7, 100), &running), r),
            None
        );
        fs::remove_dir_all(&base).unwrap();
    }
}
