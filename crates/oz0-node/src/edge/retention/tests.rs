//! The index against the walk, the bounds after many jobs, and a record
//! that cannot be removed.

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
            let mut t = start + Duration::from_secs(i * 60) - Duration::from_secs(rng.next(600));
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
