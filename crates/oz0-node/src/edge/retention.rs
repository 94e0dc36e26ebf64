//! How long `<data-dir>/jobs/<job>/` records are kept: by age and by the
//! total size of all records (`--keep-jobs-days`, `--keep-jobs-mib`),
//! applied when the node starts and after each job.
//!
//! A record older than the age limit goes; then, while the records together
//! are larger than the size limit, the oldest goes. A record is aged by its
//! newest file (its `status.json`, written when the job ended). The record
//! of a job that is running is never touched, whatever its size (it counts
//! in the total, measured afresh at each sweep). Only folders named like a
//! job id are records: anything else an operator put in `jobs/` stays.
//!
//! The records are indexed in memory ([`Records`]): a full walk of `jobs/`
//! at the node's start lists each record's size and age, and after each job
//! only that job's record is measured and added; the oldest are then taken
//! from the index, so a sweep costs the same with ten records or ten
//! thousand. The folder is walked whole again the first sweep an hour or
//! more after the last walk (records an operator added or removed by hand
//! are then seen), after a walk that could not read it, and when the
//! records the index lists are used up while more must go (see
//! [`MAX_LISTED`]).
//!
//! Nothing that fails is taken for nothing: a record or folder that cannot
//! be read, and a record that cannot be removed, is named in the sweep's
//! log line, and tried again at every sweep after (a record that could not
//! be removed stays in the index, still the oldest).
//!
//! The data directory is the node's own (mode 0700): no run sees it, so no
//! run can plant a link there; records are still measured without
//! following links (`symlink_metadata`), a record is checked to be a folder
//! (not a link) just before it is removed, and `remove_dir_all` removes
//! through descriptors opened without following links.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io::ErrorKind;
use std::ops::Bound::{Excluded, Unbounded};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use super::job::safe_id;

/// The limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Retention {
    /// Records older than this go.
    pub max_age: Duration,
    /// The records together stay at or under this many bytes.
    pub max_bytes: u64,
}

impl Retention {
    /// From the flags' values (days, MiB).
    pub fn new(days: u64, mib: u64) -> Retention {
        Retention {
            max_age: Duration::from_secs(days.saturating_mul(86_400)),
            max_bytes: mib.saturating_mul(1 << 20),
        }
    }
}

/// Records the index lists one by one, oldest first; any more (a node
/// that ran this many jobs within `--keep-jobs-days`) are counted, with
/// their bytes, but not listed. An entry is about 150 bytes (its id twice,
/// its time and size), so the index stays under about 8 MB. When a sweep
/// has removed every listed record that may go and more must, it walks the
/// folder again and lists the next oldest.
pub const MAX_LISTED: usize = 50_000;

/// How long the index is trusted before the folder is walked whole again.
pub const WALK_EVERY: Duration = Duration::from_secs(3600);

/// Record folders or names a log line names, at most; then how many more.
const NAMED: usize = 5;

/// What one sweep did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// Records removed for their age.
    pub old: usize,
    /// Records removed to bring the total under the size limit.
    pub over: usize,
    /// Bytes freed.
    pub freed: u64,
    /// Records kept.
    pub kept: usize,
    /// Bytes kept.
    pub kept_bytes: u64,
    /// Records that could not be removed, with why.
    pub failed: Vec<String>,
    /// Records (or `jobs/` itself) that could not be read, with why.
    pub unread: Vec<String>,
}

/// A record's place in the index: oldest first (its newest file's time),
/// then by id, as the walk orders them.
type Key = (SystemTime, Box<str>);

/// A record measured.
struct Measured {
    bytes: u64,
    newest: SystemTime,
    /// What could not be read in it (the rest was measured).
    problem: Option<String>,
}

/// Measures the record folder `dir`: the bytes of its regular files (not
/// following links) and the newest modification time among them and `dir`
/// itself. None: no folder there (gone, or not a folder). Err: `dir`
/// itself could not be looked at.
fn measure(dir: &Path) -> Result<Option<Measured>, String> {
    let gone = |e: &std::io::Error| e.kind() == ErrorKind::NotFound;
    let m = match fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if gone(&e) => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    };
    if !m.is_dir() {
        return Ok(None);
    }
    let mut out = Measured {
        bytes: 0,
        newest: m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        problem: None,
    };
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if gone(&e) => return Ok(None),
        Err(e) => {
            out.problem = Some(format!("{}: {e}", dir.display()));
            return Ok(Some(out));
        }
    };
    for e in rd {
        // `DirEntry::metadata` does not follow a link.
        match e.and_then(|e| e.metadata()) {
            Ok(m) if m.is_file() => {
                out.bytes += m.len();
                if let Ok(t) = m.modified() {
                    out.newest = out.newest.max(t);
                }
            }
            Ok(_) => {}
            Err(e) if gone(&e) => {}
            Err(e) => {
                out.problem
                    .get_or_insert_with(|| format!("{}: {e}", dir.display()));
            }
        }
    }
    Ok(Some(out))
}

/// The records under one `jobs` folder, indexed; one sweep at a time.
pub struct Records {
    jobs: PathBuf,
    index: Mutex<Index>,
}

/// Records counted but not listed.
#[derive(Default)]
struct Counted {
    /// How many.
    n: usize,
    /// Their bytes.
    bytes: u64,
    /// The oldest one's time.
    oldest: Option<SystemTime>,
}

impl Counted {
    fn count(&mut self, newest: SystemTime, bytes: u64) {
        self.n += 1;
        self.bytes += bytes;
        self.oldest = Some(self.oldest.map_or(newest, |t| t.min(newest)));
    }
}

/// What the index holds.
struct Index {
    /// The listed records, oldest first, with their bytes.
    by_age: BTreeMap<Key, u64>,
    /// Each listed record's time, by id.
    by_id: HashMap<Box<str>, SystemTime>,
    /// The listed records' bytes.
    listed_bytes: u64,
    /// Records counted but not listed (beyond `max_listed`), each newer
    /// than (or as new as) every listed one.
    unlisted: Counted,
    /// Records measured only in part, or not at all: measured again at
    /// every sweep.
    unread: BTreeSet<Box<str>>,
    /// When the folder was last walked whole; None: at the next sweep.
    walked: Option<Instant>,
    walk_every: Duration,
    max_listed: usize,
    /// Removes a record folder (`fs::remove_dir_all`; a failing one in
    /// tests).
    remove: fn(&Path) -> std::io::Result<()>,
}

impl Records {
    /// The records under `jobs`, walked whole at the first sweep.
    pub fn new(jobs: PathBuf) -> Records {
        Records::with(jobs, WALK_EVERY, MAX_LISTED)
    }

    /// [`Records::new`], walked whole again every `walk_every` (zero: at
    /// every sweep, the cost of a sweep without the index), listing at
    /// most `max_listed` records.
    pub fn with(jobs: PathBuf, walk_every: Duration, max_listed: usize) -> Records {
        Records {
            jobs,
            index: Mutex::new(Index {
                by_age: BTreeMap::new(),
                by_id: HashMap::new(),
                listed_bytes: 0,
                unlisted: Counted::default(),
                unread: BTreeSet::new(),
                walked: None,
                walk_every,
                max_listed: max_listed.max(1),
                remove: |p| fs::remove_dir_all(p),
            }),
        }
    }

    /// Applies `r` at the node's start (`ended` None) or after the job
    /// `ended`, whose record is measured and indexed, never touching the
    /// records of the jobs in `running` (checked under its lock at each
    /// removal, held while removing).
    pub fn sweep(
        &self,
        ended: Option<&str>,
        r: Retention,
        running: &Mutex<BTreeSet<String>>,
    ) -> Swept {
        let mut ix = self.index.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Swept::default();
        let jobs = &self.jobs;
        let mut walked = ix.walked.is_none_or(|t| t.elapsed() >= ix.walk_every);
        if walked {
            ix.walk(jobs, running, &mut out);
        } else {
            if let Some(id) = ended {
                ix.add(jobs, id, &mut out);
            }
            // Again what could not be read before.
            for id in std::mem::take(&mut ix.unread) {
                ix.add(jobs, &id, &mut out);
            }
        }
        let now = SystemTime::now();
        // When the listed records are used up and more must go, a walk
        // lists the next oldest; unless one just did, and none of those
        // could go (all running, or failing).
        loop {
            let removed = out.old + out.over;
            if !ix.apply(jobs, r, running, now, &mut out)
                || (walked && removed == out.old + out.over)
                || !ix.walk(jobs, running, &mut out)
            {
                break out;
            }
            walked = true;
        }
    }
}

impl Index {
    fn clear(&mut self) {
        self.by_age.clear();
        self.by_id.clear();
        self.listed_bytes = 0;
        self.unlisted = Counted::default();
        self.unread.clear();
    }

    /// Lists the records under `jobs` afresh (the full walk), but for
    /// those of jobs `running` (measured at each sweep, and indexed when
    /// they end). False when `jobs` could not be read whole (then walked
    /// again at the next sweep).
    fn walk(&mut self, jobs: &Path, running: &Mutex<BTreeSet<String>>, out: &mut Swept) -> bool {
        let busy = running.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let rd = match fs::read_dir(jobs) {
            Ok(rd) => rd,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                self.clear();
                self.walked = Some(Instant::now());
                return true;
            }
            Err(e) => {
                out.unread.push(format!("{}: {e}", jobs.display()));
                self.walked = None;
                return false;
            }
        };
        let mut whole = true;
        let mut recs: Vec<(SystemTime, Box<str>, u64)> = Vec::new();
        let mut unread = BTreeSet::new();
        for e in rd {
            let e = match e {
                Ok(e) => e,
                Err(e) => {
                    out.unread.push(format!("{}: {e}", jobs.display()));
                    whole = false;
                    continue;
                }
            };
            let name = e.file_name();
            let Some(id) = name.to_str().filter(|id| safe_id(id)) else {
                continue;
            };
            if busy.contains(id) {
                continue;
            }
            match measure(&e.path()) {
                Ok(Some(m)) => {
                    if let Some(p) = m.problem {
                        out.unread.push(p);
                        unread.insert(Box::from(id));
                    }
                    recs.push((m.newest, Box::from(id), m.bytes));
                }
                Ok(None) => {}
                Err(p) => {
                    out.unread.push(p);
                    unread.insert(Box::from(id));
                }
            }
        }
        recs.sort_unstable();
        self.clear();
        let listed = recs.len().min(self.max_listed);
        for (newest, id, bytes) in recs.drain(..listed) {
            self.listed_bytes += bytes;
            self.by_id.insert(id.clone(), newest);
            self.by_age.insert((newest, id), bytes);
        }
        for (newest, id, bytes) in recs {
            // Counted, not listed: measured again by the next walk.
            unread.remove(&id);
            self.unlisted.count(newest, bytes);
        }
        self.unread = unread;
        self.walked = whole.then(Instant::now);
        whole
    }

    /// Takes record `id` out of the listing: its bytes, if it was listed.
    fn unlist(&mut self, id: &str) -> Option<u64> {
        let t = self.by_id.remove(id)?;
        let bytes = self.by_age.remove(&(t, Box::from(id)))?;
        self.listed_bytes -= bytes;
        Some(bytes)
    }

    /// Measures record `id` (a job just ended, or one not read whole
    /// before) and indexes it in place of what the index had.
    fn add(&mut self, jobs: &Path, id: &str, out: &mut Swept) {
        if !safe_id(id) {
            return;
        }
        self.unlist(id);
        self.unread.remove(id);
        match measure(&jobs.join(id)) {
            Ok(Some(m)) => {
                let listed = self.insert((m.newest, Box::from(id)), m.bytes);
                if let Some(p) = m.problem {
                    out.unread.push(p);
                    // A counted one is measured again by the next walk.
                    if listed {
                        self.unread.insert(Box::from(id));
                    }
                }
            }
            Ok(None) => {}
            Err(p) => {
                out.unread.push(p);
                self.unread.insert(Box::from(id));
            }
        }
    }

    /// Lists a record, or counts it when it is newer than every listed one
    /// and the listing is full or records are counted already (every
    /// counted record stays newer than every listed one). True: listed.
    fn insert(&mut self, key: Key, bytes: u64) -> bool {
        let newest = self.by_age.last_key_value().is_none_or(|(k, _)| key > *k);
        let full = self.by_age.len() >= self.max_listed;
        if newest && (full || self.unlisted.n > 0) {
            self.unlisted.count(key.0, bytes);
            return false;
        }
        if full {
            if let Some(((t, id), b)) = self.by_age.pop_last() {
                self.by_id.remove(&id);
                self.listed_bytes -= b;
                self.unlisted.count(t, b);
            }
        }
        self.listed_bytes += bytes;
        self.by_id.insert(key.1.clone(), key.0);
        self.by_age.insert(key, bytes);
        true
    }

    /// Removes records, oldest first, while one is older than the age
    /// limit or the records together are over the size limit. True when
    /// it used up the listed records while more must go: counted ones are
    /// over the age limit, or the total over the size limit (a walk lists
    /// them).
    fn apply(
        &mut self,
        jobs: &Path,
        r: Retention,
        running: &Mutex<BTreeSet<String>>,
        now: SystemTime,
        out: &mut Swept,
    ) -> bool {
        // A running job's record counts as it is now, not as listed.
        let busy: Vec<String> = running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|id| safe_id(id))
            .cloned()
            .collect();
        let mut total = self.listed_bytes + self.unlisted.bytes;
        let mut extra: isize = 0;
        for id in &busy {
            if let Some(t) = self.by_id.get(id.as_str()) {
                total = total.saturating_sub(self.by_age[&(*t, Box::from(id.as_str()))]);
                extra -= 1;
            }
            if let Ok(Some(m)) = measure(&jobs.join(id)) {
                total += m.bytes;
                extra += 1;
            }
        }
        let mut after: Option<Key> = None;
        let more = loop {
            let next = match &after {
                None => self.by_age.iter().next(),
                Some(k) => self.by_age.range((Excluded(k), Unbounded)).next(),
            };
            let Some(((newest, id), &bytes)) = next else {
                let old = |t: SystemTime| now.duration_since(t).is_ok_and(|age| age > r.max_age);
                break self.unlisted.n > 0
                    && (total > r.max_bytes || self.unlisted.oldest.is_some_and(old));
            };
            let (newest, id) = (*newest, id.clone());
            let old = now.duration_since(newest).is_ok_and(|age| age > r.max_age);
            let over = total > r.max_bytes;
            if !old && !over {
                // Every record after is newer, and the total stays.
                break false;
            }
            after = Some((newest, id.clone()));
            let busy = running.lock().unwrap_or_else(|e| e.into_inner());
            if busy.contains(&*id) {
                continue;
            }
            let path = jobs.join(&*id);
            let gone = match fs::symlink_metadata(&path) {
                Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
                // Not a folder any more: not a record; left alone.
                Ok(m) if !m.is_dir() => Ok(false),
                Err(e) => Err(e),
                Ok(_) => match (self.remove)(&path) {
                    Ok(()) => Ok(true),
                    Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
                    Err(e) => Err(e),
                },
            };
            drop(busy);
            match gone {
                Ok(ours) => {
                    self.unlist(&id);
                    self.unread.remove(&id);
                    total = total.saturating_sub(bytes);
                    if ours {
                        out.freed += bytes;
                        if old {
                            out.old += 1;
                        } else {
                            out.over += 1;
                        }
                    }
                }
                Err(e) => out.failed.push(format!("{}: {e}", path.display())),
            }
        };
        out.kept = (self.by_age.len() + self.unlisted.n).saturating_add_signed(extra);
        out.kept_bytes = total;
        more
    }
}

/// `items` joined, at most [`NAMED`] of them, then how many more.
fn named(items: &[String]) -> String {
    let mut s = items[..items.len().min(NAMED)].join(", ");
    if items.len() > NAMED {
        s.push_str(&format!(" and {} more", items.len() - NAMED));
    }
    s
}

/// The log line for a sweep that removed, or could not read or remove,
/// something.
pub fn describe(s: &Swept, r: Retention) -> Option<String> {
    if s.old + s.over == 0 && s.failed.is_empty() && s.unread.is_empty() {
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
        line.push_str(&format!("; could not remove {}", named(&s.failed)));
    }
    if !s.unread.is_empty() {
        line.push_str(&format!("; could not read {}", named(&s.unread)));
    }
    if !(s.failed.is_empty() && s.unread.is_empty()) {
        line.push_str(
            " (tried again after each job: the node's user must be able to read and remove its records)",
        );
    }
    Some(line)
}

#[cfg(test)]
// By path: benches/retention.rs includes this file from elsewhere.
#[path = "retention/tests.rs"]
mod tests;
