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
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// One sweep at the node's start: a full walk.
    fn sweep(jobs: &Path, r: Retention, running: &Mutex<BTreeSet<String>>) -> Swept {
        Records::new(jobs.to_path_buf()).sweep(None, r, running)
    }

    /// A temporary folder of this test's own.
    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("oz0-retention-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    /// A job's record as a job leaves it: output and status, all last
    /// written at `t`.
    fn ended(jobs: &Path, id: &str, bytes: usize, t: SystemTime) {
        let d = jobs.join(id);
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("stdout"), vec![b'x'; bytes]).unwrap();
        fs::write(d.join("status.json"), b"{}").unwrap();
        for p in [d.join("stdout"), d.join("status.json"), d.clone()] {
            fs::File::open(&p).unwrap().set_modified(t).unwrap();
        }
    }

    /// The records in `jobs`, by id.
    fn on_disk(jobs: &Path) -> BTreeSet<String> {
        fs::read_dir(jobs)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().into_string().unwrap())
            .collect()
    }

    /// A small deterministic sequence of numbers (an LCG).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, below: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 33) % below
        }
    }

    /// The index's listing: (newest, id, bytes), oldest first.
    fn listing(rs: &Records) -> Vec<(SystemTime, String, u64)> {
        let ix = rs.index.lock().unwrap();
        ix.by_age
            .iter()
            .map(|((t, id), b)| (*t, id.to_string(), *b))
            .collect()
    }

    #[test]
    fn the_index_and_the_walk_agree() {
        for max_listed in [MAX_LISTED, 3] {
            let base = scratch(&format!("agree-{max_listed}"));
            let (a, b) = (base.join("a"), base.join("b"));
            // `a` is swept through its index, `b` walked whole at every
            // sweep, as the node did before it had one.
            let indexed = Records::with(a.clone(), WALK_EVERY, max_listed);
            let walked = Records::with(b.clone(), Duration::ZERO, MAX_LISTED);
            let running = Mutex::new(BTreeSet::from(["running".to_string()]));
            let r = Retention {
                max_age: Duration::from_secs(7 * 86_400),
                max_bytes: 400 << 10,
            };
            let start = SystemTime::now() - Duration::from_secs(86_400);
            for d in [&a, &b] {
                fs::create_dir_all(d).unwrap();
                ended(
                    d,
                    "running",
                    50 << 10,
                    start - Duration::from_secs(30 * 86_400),
                );
                ended(d, "before", 10 << 10, start);
            }
            assert_eq!(
                indexed.sweep(None, r, &running),
                walked.sweep(None, r, &running)
            );
            let mut rng = Lcg(7);
            for i in 0..200u64 {
                let bytes = usize::try_from(rng.next(50 << 10)).unwrap();
                // Mostly in order; some ended a little before the last
                // ones (a long job's output), some long ago, some reuse an
                // id (a job taken again).
                let mut t =
                    start + Duration::from_secs(i * 60) - Duration::from_secs(rng.next(600));
                if i % 17 == 5 {
                    t -= Duration::from_secs(10 * 86_400);
                }
                let id = if max_listed == MAX_LISTED && i % 23 == 7 {
                    format!("job{}", i - 3)
                } else {
                    format!("job{i}")
                };
                for d in [&a, &b] {
                    ended(d, &id, bytes, t);
                }
                fs::write(
                    a.join("running/stdout"),
                    vec![b'y'; usize::try_from(i).unwrap() << 8],
                )
                .unwrap();
                fs::write(
                    b.join("running/stdout"),
                    vec![b'y'; usize::try_from(i).unwrap() << 8],
                )
                .unwrap();
                let (x, y) = (
                    indexed.sweep(Some(&id), r, &running),
                    walked.sweep(Some(&id), r, &running),
                );
                assert_eq!(x, y, "after job {i} ({id})");
                assert_eq!(on_disk(&a), on_disk(&b), "after job {i} ({id})");
                if max_listed == MAX_LISTED {
                    // What the index lists is what a walk finds.
                    // (A running job's record is measured at each sweep.)
                    let not_running = |l: Vec<(SystemTime, String, u64)>| {
                        l.into_iter()
                            .filter(|x| x.1 != "running")
                            .collect::<Vec<_>>()
                    };
                    assert_eq!(
                        not_running(listing(&indexed)),
                        not_running(listing(&walked)),
                        "after job {i}"
                    );
                }
            }
            fs::remove_dir_all(&base).unwrap();
        }
    }

    #[test]
    fn the_bounds_hold_after_many_jobs() {
        for max_listed in [MAX_LISTED, 8] {
            let jobs = scratch(&format!("bounds-{max_listed}"));
            let rs = Records::with(jobs.clone(), WALK_EVERY, max_listed);
            let running = Mutex::new(BTreeSet::new());
            let r = Retention {
                max_age: Duration::from_secs(7 * 86_400),
                max_bytes: 200 << 10,
            };
            let start = SystemTime::now() - Duration::from_secs(86_400);
            let mut all: BTreeMap<String, (SystemTime, u64)> = BTreeMap::new();
            let mut rng = Lcg(11);
            let (mut walks, mut last_walk) = (0, None);
            for i in 0..500u64 {
                let id = format!("job{i}");
                let bytes = rng.next(30 << 10);
                let mut t = start + Duration::from_secs(i * 60);
                if i % 29 == 3 {
                    t -= Duration::from_secs(8 * 86_400);
                }
                ended(&jobs, &id, usize::try_from(bytes).unwrap(), t);
                // stdout and status.json: 2 bytes of status.
                all.insert(id.clone(), (t, bytes + 2));
                let s = rs.sweep(Some(&id), r, &running);
                assert!(s.failed.is_empty() && s.unread.is_empty(), "{s:?}");
                let w = rs.index.lock().unwrap().walked;
                if w != last_walk {
                    walks += 1;
                    last_walk = w;
                }
                let kept = on_disk(&jobs);
                let key = |id: &String| (all[id].0, id.clone());
                let kept_bytes: u64 = kept.iter().map(|id| all[id].1).sum();
                assert!(
                    kept_bytes <= r.max_bytes,
                    "after job {i} (listing at most {max_listed}): {kept_bytes}, {s:?}"
                );
                assert_eq!((s.kept, s.kept_bytes), (kept.len(), kept_bytes));
                let now = SystemTime::now();
                for id in &kept {
                    assert!(
                        now.duration_since(all[id].0).unwrap() <= r.max_age,
                        "{id} kept"
                    );
                }
                // Oldest first, and no more than needed: every record gone
                // is older than every record kept, and the newest gone that
                // was young enough would not have fit.
                let gone: Vec<&String> = all.keys().filter(|id| !kept.contains(*id)).collect();
                if let (Some(g), Some(k)) = (
                    gone.iter().map(|id| key(id)).max(),
                    kept.iter().map(key).min(),
                ) {
                    assert!(g < k, "after job {i}: {g:?} went before {k:?}");
                }
                if let Some(g) = gone
                    .iter()
                    .filter(|id| now.duration_since(all[**id].0).unwrap() <= r.max_age)
                    .max_by_key(|id| key(id))
                {
                    assert!(
                        kept_bytes + all[*g].1 > r.max_bytes,
                        "after job {i}: {g} need not have gone"
                    );
                }
            }
            if max_listed == MAX_LISTED {
                // The folder was walked once, at the start.
                assert_eq!(walks, 1);
            } else {
                // Walked again only when the listed records ran out.
                assert!((2..=500 / 4).contains(&walks), "{walks} walks");
                assert!(rs.index.lock().unwrap().by_age.len() <= max_listed);
            }
            fs::remove_dir_all(&jobs).unwrap();
        }
    }

    static STUCK: AtomicBool = AtomicBool::new(true);

    /// Removes a record, except `stuck` while [`STUCK`] holds.
    fn remove_unless_stuck(p: &Path) -> std::io::Result<()> {
        if p.ends_with("stuck") && STUCK.load(Ordering::SeqCst) {
            return Err(std::io::Error::from(ErrorKind::PermissionDenied));
        }
        fs::remove_dir_all(p)
    }

    #[test]
    fn a_record_that_cannot_be_removed_is_retried_and_reported() {
        let jobs = scratch("stuck");
        let rs = Records::new(jobs.clone());
        rs.index.lock().unwrap().remove = remove_unless_stuck;
        let running = Mutex::new(BTreeSet::new());
        let r = Retention::new(7, 1);
        let now = SystemTime::now();
        ended(&jobs, "stuck", 10, now - Duration::from_secs(30 * 86_400));
        ended(&jobs, "old", 10, now - Duration::from_secs(20 * 86_400));
        ended(&jobs, "fresh", 10, now);
        let s = rs.sweep(None, r, &running);
        assert_eq!((s.old, s.kept), (1, 2), "{s:?}");
        assert_eq!(s.failed.len(), 1, "{s:?}");
        let line = describe(&s, r).unwrap();
        assert!(
            line.contains(&format!(
                "could not remove {}",
                jobs.join("stuck").display()
            )) && line.contains("tried again"),
            "{line}"
        );
        let walked = rs.index.lock().unwrap().walked;
        // Tried again after the next job, from the index, and reported
        // again.
        ended(&jobs, "next", 10, now);
        let s = rs.sweep(Some("next"), r, &running);
        assert_eq!((s.old, s.kept, s.failed.len()), (0, 3, 1), "{s:?}");
        assert!(describe(&s, r).unwrap().contains("could not remove"));
        // Once it can be, it goes.
        STUCK.store(false, Ordering::SeqCst);
        ended(&jobs, "last", 10, now);
        let s = rs.sweep(Some("last"), r, &running);
        assert_eq!((s.old, s.kept, s.failed.len()), (1, 3, 0), "{s:?}");
        assert_eq!(
            on_disk(&jobs),
            BTreeSet::from(["fresh", "next", "last"].map(String::from))
        );
        assert_eq!(
            rs.index.lock().unwrap().walked,
            walked,
            "no walk since the start"
        );
        fs::remove_dir_all(&jobs).unwrap();
    }

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
