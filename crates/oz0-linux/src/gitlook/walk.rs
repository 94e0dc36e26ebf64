//! The walk: every folder of every writable folder, depth first, by
//! descriptor. The walk holds one descriptor per level (the folders on the
//! way to where it is); a folder is listed whole (its entries read in large
//! batches, the names of its subfolders kept as bytes in one arena shared
//! by every level) before anything in it is looked at or renamed, so no
//! rename ever races the listing. Nothing is allocated per entry, and an
//! entry's name is compared with the names that matter only when its
//! first byte and length are those of one of them.

use std::collections::HashSet;
use std::ffi::{CStr, CString, OsString};
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use oz0_policy::protected::{self, HostExec};
use rustix::fs::{FileType, Stat};
use rustix::io::Errno;

use super::fsops::{self, ctime, id};
use super::{Finding, GitLook, Limits, Policy, Root, Tally, What, MAX_FINDINGS, MAX_HOST_EXEC};

/// Bytes read from a folder per `getdents64` (some 8,000 entries).
const LIST_BUFFER: usize = 256 * 1024;

/// The first bytes and lengths of the names an entry can matter by (a
/// `.git`, a git directory's `HEAD`, `objects`, `refs` or `commondir`,
/// agents' settings, project files host tools execute): a name that has
/// not both cannot be one of them.
struct Names {
    first: [bool; 256],
    len: [bool; 256],
}

impl Names {
    fn new() -> Names {
        let mut n = Names {
            first: [false; 256],
            len: [false; 256],
        };
        let all = [protected::GIT_DIR, "HEAD", "objects", "refs", "commondir"]
            .into_iter()
            .chain(protected::AGENT_SETTINGS.iter().copied())
            .chain(protected::HOST_EXEC.iter().map(|h| h.name));
        for name in all {
            let b = name.as_bytes();
            n.first[usize::from(b[0])] = true;
            n.len[b.len().min(255)] = true;
        }
        n
    }

    /// Whether `name` may be one of the names that matter.
    fn may_matter(&self, name: &[u8]) -> bool {
        name.first().is_some_and(|&b| self.first[usize::from(b)]) && self.len[name.len().min(255)]
    }
}

/// What a folder of the walk is part of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Region {
    /// Nothing in particular.
    Plain,
    /// Agents' or editors' settings (the frame that is their top):
    /// whether the run changed anything in them.
    Settings { top: usize },
    /// A tree of files host tools execute (`.github/workflows`).
    HostTree,
}

/// One folder on the way: open, listed.
struct Frame {
    /// Shared with the listing and the look at what is in it, so that
    /// neither takes a descriptor of its own.
    fd: Rc<OwnedFd>,
    st: Stat,
    /// Length of the path buffer with this folder's path.
    path_len: usize,
    /// Where this folder's name starts in the path buffer.
    name_at: usize,
    /// Where this folder's pending subfolders start in `pending`, and the
    /// next one to walk.
    pending_start: usize,
    next: usize,
    /// Where this folder's names start in the arena.
    arena_start: usize,
    /// This folder, or one on the way to it, changed during the run (and
    /// is not kept in place by the wall).
    moved: bool,
    region: Region,
    /// For a settings top: whether anything in it changed.
    changed: bool,
    /// Why this folder could not be examined whole, when it could not
    /// (it is then renamed aside as it is left).
    unexamined: Option<String>,
}

/// Why the walk stops before its end.
#[derive(Debug)]
pub(super) enum Stop {
    Entries(usize),
    Time(Duration),
    Pending(usize),
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Entries(n) => write!(f, "more than {n} entries"),
            Stop::Time(t) => write!(f, "longer than {}s", t.as_secs_f64()),
            Stop::Pending(n) => write!(f, "more than {} MiB of folder names waiting", n >> 20),
        }
    }
}

/// A folder's listing could not be finished.
enum ListError {
    Stop(Stop),
    Os(Errno),
}

/// The walk's state and what it found.
pub(super) struct Looker<'a> {
    pub(super) since: Duration,
    pub(super) policy: Policy,
    pub(super) suffix: Vec<u8>,
    limits: Limits,
    deadline: Instant,
    kept: &'a HashSet<(u64, u64)>,
    pub(super) roots: &'a [Root<'a>],
    pub(super) entries: usize,
    stopped: Option<Stop>,
    pub(super) repositories: usize,
    made_readable: usize,
    pub(super) findings: Vec<Finding>,
    /// What every finding, listed or not, adds up to.
    tally: Tally,
    host_exec: Vec<PathBuf>,
    host_exec_more: usize,
    pub(super) seen_repos: HashSet<(u64, u64)>,
    /// The path of the folder being looked at, as bytes.
    path: Vec<u8>,
    /// Names of subfolders waiting to be walked, for every level.
    arena: Vec<u8>,
    /// `(start, length)` in the arena of each subfolder waiting.
    pending: Vec<(usize, usize)>,
    frames: Vec<Frame>,
    buf: Vec<MaybeUninit<u8>>,
    names: Names,
}

impl<'a> Looker<'a> {
    pub(super) fn new(
        roots: &'a [Root<'a>],
        since: Duration,
        policy: Policy,
        run_id: &str,
        kept: &'a HashSet<(u64, u64)>,
        limits: Limits,
    ) -> Looker<'a> {
        Looker {
            since,
            policy,
            suffix: format!(".oz0-quarantine-{run_id}").into_bytes(),
            limits,
            deadline: Instant::now() + limits.time,
            kept,
            roots,
            entries: 0,
            stopped: None,
            repositories: 0,
            made_readable: 0,
            findings: Vec::new(),
            tally: Tally::default(),
            host_exec: Vec::new(),
            host_exec_more: 0,
            seen_repos: HashSet::new(),
            path: Vec::new(),
            arena: Vec::new(),
            pending: Vec::new(),
            frames: Vec::new(),
            buf: Vec::with_capacity(LIST_BUFFER),
            names: Names::new(),
        }
    }

    pub(super) fn finish(self, took: Duration) -> GitLook {
        GitLook {
            policy: self.policy,
            complete: self.stopped.is_none() && !self.tally.unexamined,
            stopped: self.stopped.as_ref().map(ToString::to_string),
            entries: self.entries,
            repositories: self.repositories,
            folders_made_readable: self.made_readable,
            left_in_place: self.tally.left,
            findings: self.findings,
            findings_more: self.tally.more,
            changed_host_exec: self.host_exec,
            changed_host_exec_more: self.host_exec_more,
            duration_ms: u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// Whether the look is past its time: then it stops, and the folder
    /// being looked at is put aside unexamined (`why` says what was not
    /// done).
    pub(super) fn late(&mut self, why: &str) -> bool {
        if Instant::now() <= self.deadline {
            return false;
        }
        if self.stopped.is_none() {
            self.stopped = Some(Stop::Time(self.limits.time));
        }
        if let Some(top) = self.frames.last_mut() {
            top.unexamined
                .get_or_insert_with(|| format!("the look ran out of time before {why}"));
        }
        true
    }

    /// Whether what `st` describes changed at or after the run's start.
    pub(super) fn changed(&self, st: &Stat) -> bool {
        ctime(st) >= self.since
    }

    /// Whether the folder `st` moved or changed during the run, and is not
    /// one the wall kept in place.
    pub(super) fn moved_here(&self, st: &Stat) -> bool {
        self.changed(st) && !self.kept.contains(&id(st))
    }

    /// The current path joined with `name`.
    pub(super) fn at(&self, name: &[u8]) -> PathBuf {
        let mut p = self.path.clone();
        p.push(b'/');
        p.extend_from_slice(name);
        PathBuf::from(OsString::from_vec(p))
    }

    /// The current path.
    pub(super) fn here(&self) -> PathBuf {
        PathBuf::from(OsString::from_vec(self.path.clone()))
    }

    /// Records a finding of `name` in `dir` (shown as `path`) and, with
    /// [`Policy::Neutralise`], renames it aside there.
    pub(super) fn found(&mut self, dir: &OwnedFd, name: &CStr, path: PathBuf, what: What) {
        let mut f = Finding {
            path,
            what,
            aside: None,
            left: None,
        };
        if self.policy == Policy::Neutralise {
            match fsops::rename_aside(dir, name, &self.suffix) {
                Ok(new) => {
                    f.aside = Some(f.path.with_file_name(OsString::from_vec(new.clone())));
                    self.renamed_in(dir, name.to_bytes(), &new);
                }
                Err(why) => f.left = Some(why.to_string()),
            }
        }
        self.keep(f);
    }

    /// Counts `f` and keeps it while fewer than [`MAX_FINDINGS`] are.
    fn keep(&mut self, f: Finding) {
        self.tally.left += usize::from(f.aside.is_none());
        self.tally.unexamined |= matches!(f.what, What::Unexamined { .. });
        if self.findings.len() < MAX_FINDINGS {
            self.findings.push(f);
        } else {
            self.tally.more += 1;
        }
    }

    /// A finding about something that is not in a folder the look holds
    /// (or cannot be renamed from where it is): left in place, with why.
    pub(super) fn found_left(&mut self, path: PathBuf, what: What, why: &str) {
        let left = match self.policy {
            Policy::Neutralise => Some(why.to_string()),
            Policy::Report => None,
        };
        self.keep(Finding {
            path,
            what,
            aside: None,
            left,
        });
    }

    /// `name` in `dir` was renamed to `new`: when `dir` is the folder
    /// being walked and `name` one of its subfolders still to walk, it is
    /// walked under its new name.
    fn renamed_in(&mut self, dir: &OwnedFd, name: &[u8], new: &[u8]) {
        let Some(top) = self.frames.last() else {
            return;
        };
        let same = rustix::fs::fstat(dir).is_ok_and(|st| id(&st) == id(&top.st));
        if !same {
            return;
        }
        let (from, to) = (top.next, self.pending.len());
        for i in from..to {
            let (s, l) = self.pending[i];
            if &self.arena[s..s + l] == name {
                let start = self.arena.len();
                self.arena.extend_from_slice(new);
                self.pending[i] = (start, new.len());
            }
        }
    }

    /// Whatever `name` in `dir` is, the look could not examine it: a
    /// finding, renamed aside like any other.
    fn unexamined(&mut self, dir: &OwnedFd, name: &[u8], reason: String) {
        let path = self.at(name);
        match CString::new(name) {
            Ok(c) => self.found(dir, &c, path, What::Unexamined { reason }),
            Err(_) => self.found_left(path, What::Unexamined { reason }, "a name with a NUL byte"),
        }
    }

    /// Walks the writable folder `roots[i]`.
    pub(super) fn walk_root(&mut self, i: usize) {
        let root = &self.roots[i];
        use std::os::unix::ffi::OsStrExt;
        self.path.clear();
        self.path
            .extend_from_slice(root.path.as_os_str().as_bytes());
        let opened = rustix::fs::openat(
            root.fd,
            c".",
            rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .and_then(|fd| Ok((rustix::fs::fstat(&fd)?, fd)));
        let (st, fd) = match opened {
            Ok(o) => o,
            Err(e) => {
                let path = root.path.to_path_buf();
                return self.found_left(
                    path,
                    What::Unexamined {
                        reason: format!("the writable folder cannot be read: {e}"),
                    },
                    "a writable folder itself is never renamed",
                );
            }
        };
        let len = self.path.len();
        let root_name_at = len - root.path.file_name().map_or(0, |n| n.len());
        self.push(fd, st, root_name_at, false, Region::Plain);
        if let Err(e) = self.list_top() {
            self.frames.pop();
            let reason = match e {
                ListError::Stop(s) => {
                    let why = format!("the look stopped: {s}");
                    self.stopped = Some(s);
                    why
                }
                ListError::Os(e) => format!("the writable folder cannot be listed: {e}"),
            };
            self.found_left(
                self.roots[i].path.to_path_buf(),
                What::Unexamined { reason },
                "a writable folder itself is never renamed",
            );
            self.pending.clear();
            self.arena.clear();
            return;
        }
        while let Some(top) = self.frames.last() {
            if self.stopped.is_none() && Instant::now() > self.deadline {
                self.stopped = Some(Stop::Time(self.limits.time));
            }
            if self.stopped.is_some() {
                self.abandon();
                break;
            }
            if top.next < self.pending.len() {
                let (s, l) = self.pending[top.next];
                self.frames.last_mut().expect("a frame").next += 1;
                self.descend(s, l);
            } else {
                self.pop();
            }
        }
        self.frames.clear();
        self.pending.clear();
        self.arena.clear();
    }

    fn push(&mut self, fd: OwnedFd, st: Stat, name_at: usize, moved: bool, region: Region) {
        self.frames.push(Frame {
            fd: Rc::new(fd),
            st,
            path_len: self.path.len(),
            name_at,
            pending_start: self.pending.len(),
            next: self.pending.len(),
            arena_start: self.arena.len(),
            moved,
            region,
            changed: false,
            unexamined: None,
        });
    }

    /// Walks into the subfolder named `arena[s..s + l]` of the top frame.
    fn descend(&mut self, s: usize, l: usize) {
        let name = self.arena[s..s + l].to_vec();
        let Ok(c) = CString::new(name.clone()) else {
            return;
        };
        if self.frames.len() > self.limits.depth {
            let top = self.frames.last().expect("a frame");
            let fd = rustix::io::fcntl_dupfd_cloexec(&top.fd, 0);
            match fd {
                Ok(fd) => self.unexamined(
                    &fd,
                    &name,
                    format!("deeper than {} folders", self.limits.depth),
                ),
                Err(e) => self.unexamined_here(&name, e),
            }
            return;
        }
        let opened = fsops::open_dir(&self.frames.last().expect("a frame").fd, &c);
        let o = match opened {
            Ok(o) => o,
            // Gone since it was listed: nothing is there for git to use.
            Err(Errno::NOENT) => return,
            Err(e) => {
                let why = match e {
                    Errno::LOOP | Errno::NOTDIR => {
                        "it was replaced by a link or a file while the look ran".to_string()
                    }
                    e => format!("it cannot be opened: {e}"),
                };
                let fd = self.top_fd_dup();
                match fd {
                    Ok(fd) => self.unexamined(&fd, &name, why),
                    Err(e) => self.unexamined_here(&name, e),
                }
                return;
            }
        };
        if o.restored {
            self.made_readable += 1;
        }
        let parent = self.frames.last().expect("a frame");
        let parent_region = parent.region;
        let parent_name = self.path[parent.name_at..parent.path_len].to_vec();
        let moved = parent.moved || self.moved_here(&o.st);
        let name_at = self.path.len() + 1;
        self.path.push(b'/');
        self.path.extend_from_slice(&name);
        let depth = self.frames.len();
        let region = match parent_region {
            Region::Settings { top } => Region::Settings { top },
            Region::HostTree => Region::HostTree,
            Region::Plain if agent_settings(&name) => Region::Settings { top: depth },
            Region::Plain if host_exec(&parent_name, &name).is_some_and(|h| h.tree) => {
                Region::HostTree
            }
            Region::Plain => Region::Plain,
        };
        let changed = self.changed(&o.st);
        if region == Region::HostTree && changed {
            self.report_host_exec(self.here());
        }
        self.push(o.fd, o.st, name_at, moved, region);
        if let Region::Settings { top } = region {
            if changed {
                self.frames[top].changed = true;
            }
        }
        if let Err(e) = self.list_top() {
            // Not listed whole: not proven clean.
            let frame = self.frames.pop().expect("the frame just pushed");
            self.truncate_to(&frame);
            self.path.truncate(name_at - 1);
            let reason = match e {
                ListError::Stop(s) => {
                    let why = format!("the look stopped: {s}");
                    self.stopped = Some(s);
                    why
                }
                ListError::Os(e) => format!("it cannot be listed: {e}"),
            };
            let fd = self.top_fd_dup();
            match fd {
                Ok(fd) => self.unexamined(&fd, &name, reason),
                Err(e) => self.unexamined_here(&name, e),
            }
        }
    }

    fn top_fd_dup(&self) -> Result<OwnedFd, Errno> {
        rustix::io::fcntl_dupfd_cloexec(&self.frames.last().expect("a frame").fd, 0)
    }

    /// When not even a descriptor is left to rename with.
    fn unexamined_here(&mut self, name: &[u8], e: Errno) {
        let path = self.at(name);
        self.found_left(
            path,
            What::Unexamined {
                reason: format!("the look ran out of descriptors: {e}"),
            },
            "no descriptor was left to rename it with",
        );
    }

    fn truncate_to(&mut self, frame: &Frame) {
        self.pending.truncate(frame.pending_start);
        self.arena.truncate(frame.arena_start);
    }

    /// Leaves the top frame: settings the run changed are renamed aside
    /// from the folder above.
    fn pop(&mut self) {
        let frame = self.frames.pop().expect("a frame");
        self.truncate_to(&frame);
        let name = self.path[frame.name_at..frame.path_len].to_vec();
        let depth = self.frames.len();
        let path = self.here();
        self.path.truncate(frame.name_at.saturating_sub(1));
        let what = if let Some(reason) = frame.unexamined.clone() {
            Some(What::Unexamined { reason })
        } else if frame.region == (Region::Settings { top: depth }) && frame.changed {
            Some(What::AgentSettings)
        } else {
            None
        };
        drop(frame);
        let Some(what) = what else { return };
        if depth == 0 {
            return self.found_left(path, what, "a writable folder itself is never renamed");
        }
        match (self.top_fd_dup(), CString::new(name)) {
            (Ok(parent), Ok(c)) => self.found(&parent, &c, path, what),
            _ => self.found_left(path, what, "no descriptor was left to rename it with"),
        }
    }

    /// The walk stopped at a bound: every folder not walked yet is renamed
    /// aside (with Neutralise), level by level, the deepest first.
    fn abandon(&mut self) {
        let why = format!(
            "not walked: the look stopped ({})",
            self.stopped.as_ref().expect("stopped")
        );
        while let Some(top) = self.frames.last() {
            // A folder put aside whole takes what is in it along.
            let skip = if top.unexamined.is_some() {
                self.pending.len()
            } else {
                top.next
            };
            let rest: Vec<Vec<u8>> = self.pending[skip..]
                .iter()
                .map(|&(s, l)| self.arena[s..s + l].to_vec())
                .collect();
            let len = self.pending.len();
            self.frames.last_mut().expect("a frame").next = len;
            if let Ok(fd) = self.top_fd_dup() {
                for name in rest {
                    self.unexamined(&fd, &name, why.clone());
                }
            }
            self.pop();
        }
    }

    /// Lists the top frame's folder whole, then looks at what is in it.
    fn list_top(&mut self) -> Result<(), ListError> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.resize(LIST_BUFFER, MaybeUninit::uninit());
        let r = self.list_into(&mut buf);
        self.buf = buf;
        let flags = r?;
        self.after_listing(flags);
        Ok(())
    }

    fn list_into(&mut self, buf: &mut [MaybeUninit<u8>]) -> Result<Flags, ListError> {
        let frame = self.frames.last().expect("a frame");
        let region = frame.region;
        let dir_name = self.path[frame.name_at..frame.path_len].to_vec();
        let fd = Rc::clone(&frame.fd);
        let mut flags = Flags::default();
        let mut raw = rustix::fs::RawDir::new(&*fd, buf);
        while let Some(e) = raw.next() {
            let e = e.map_err(ListError::Os)?;
            let name = e.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            self.entries += 1;
            // Past the bound of entries, the folder being listed is still
            // listed whole (so that it is examined, not put aside), but no
            // folder more is walked into.
            if self.entries > self.limits.entries && self.stopped.is_none() {
                self.stopped = Some(Stop::Entries(self.limits.entries));
            }
            if self.entries % 4096 == 0 && Instant::now() > self.deadline {
                return Err(ListError::Stop(Stop::Time(self.limits.time)));
            }
            let mut ft = e.file_type();
            let mut st = None;
            if ft == FileType::Unknown || region != Region::Plain {
                match fsops::lstat(&fd, e.file_name()) {
                    Ok(s) => {
                        ft = FileType::from_raw_mode(s.st_mode);
                        st = Some(s);
                    }
                    Err(Errno::NOENT) => continue,
                    Err(e) => return Err(ListError::Os(e)),
                }
            }
            if ft == FileType::Directory {
                let start = self.arena.len();
                if start + name.len() > self.limits.pending_bytes {
                    return Err(ListError::Stop(Stop::Pending(self.limits.pending_bytes)));
                }
                self.arena.extend_from_slice(name);
                self.pending.push((start, name.len()));
            }
            let may_matter = self.names.may_matter(name);
            if may_matter {
                match name {
                    b"HEAD" => flags.head = true,
                    b"objects" | b"refs" | b"commondir" => flags.store = true,
                    _ => {}
                }
            }
            if let Some(st) = st {
                if self.changed(&st) {
                    match region {
                        Region::Settings { top } => self.frames[top].changed = true,
                        Region::HostTree => {
                            let p = self.at(name);
                            self.report_host_exec(p);
                        }
                        Region::Plain => {}
                    }
                }
            }
            if may_matter && special(&dir_name, name, ft, region) {
                let start = self.arena.len();
                self.arena.extend_from_slice(name);
                flags.special.push((start, name.len(), ft));
            }
        }
        Ok(flags)
    }

    /// What the listing of the top frame's folder showed: its entries that
    /// matter on their own, and the folder itself when git takes it for a
    /// git directory.
    fn after_listing(&mut self, flags: Flags) {
        let frame = self.frames.last().expect("a frame");
        let fd = Rc::clone(&frame.fd);
        let moved = frame.moved;
        let dir_name = self.path[frame.name_at..frame.path_len].to_vec();
        for (s, l, ft) in flags.special {
            let name = self.arena[s..s + l].to_vec();
            self.entry(&fd, &dir_name, &name, ft);
        }
        if dir_name == protected::GIT_DIR.as_bytes() || (flags.head && flags.store) {
            let worktree = if dir_name == protected::GIT_DIR.as_bytes() {
                let mut p = self.path.clone();
                p.truncate(
                    self.frames
                        .last()
                        .expect("a frame")
                        .name_at
                        .saturating_sub(1),
                );
                Some(PathBuf::from(OsString::from_vec(p)))
            } else {
                None
            };
            self.repository(&fd, moved, worktree);
        }
    }

    /// An entry that matters by its name: a `.git` that is not a folder,
    /// agents' settings that are files, a project file host tools run.
    fn entry(&mut self, dir: &OwnedFd, dir_name: &[u8], name: &[u8], ft: FileType) {
        let Ok(c) = CString::new(name) else { return };
        let st = match fsops::lstat(dir, &c) {
            Ok(st) => st,
            Err(Errno::NOENT) => return,
            Err(e) => {
                return self.unexamined(dir, name, format!("it cannot be looked at: {e}"));
            }
        };
        let changed = self.changed(&st);
        let path = self.at(name);
        if name == protected::GIT_DIR.as_bytes() && ft != FileType::Directory {
            // A `.git` file names another repository (which the walk
            // reaches where it lies, if in the writable folders); a link
            // is followed by git.
            if changed {
                let what = if ft == FileType::Symlink {
                    What::Link
                } else {
                    What::GitFile
                };
                self.found(dir, &c, path, what);
            }
            return;
        }
        if agent_settings(name) && ft != FileType::Directory {
            if changed {
                self.found(dir, &c, path, What::AgentSettings);
            }
            return;
        }
        if let Some(h) = host_exec(dir_name, name) {
            if !h.tree && changed {
                self.report_host_exec(path);
            }
        }
    }

    fn report_host_exec(&mut self, p: PathBuf) {
        if self.host_exec.len() < MAX_HOST_EXEC {
            self.host_exec.push(p);
        } else {
            self.host_exec_more += 1;
        }
    }
}

/// What a folder's listing showed.
#[derive(Default)]
struct Flags {
    head: bool,
    store: bool,
    /// `(start, length, type)` in the arena of entries that matter by name.
    special: Vec<(usize, usize, FileType)>,
}

/// Whether an entry matters by its name alone.
fn special(dir_name: &[u8], name: &[u8], ft: FileType, region: Region) -> bool {
    (name == protected::GIT_DIR.as_bytes() && ft != FileType::Directory)
        || (region == Region::Plain
            && ((ft != FileType::Directory && agent_settings(name))
                || host_exec(dir_name, name).is_some_and(|h| !h.tree)))
}

/// The project file host tools execute that `name` in a folder named
/// `dir_name` is, if any.
fn host_exec(dir_name: &[u8], name: &[u8]) -> Option<&'static HostExec> {
    protected::HOST_EXEC
        .iter()
        .find(|h| h.name.as_bytes() == name && h.parent.is_none_or(|p| p.as_bytes() == dir_name))
}

/// Whether `name` is one of agents' or editors' settings (compared as
/// bytes, whatever its encoding).
fn agent_settings(name: &[u8]) -> bool {
    protected::AGENT_SETTINGS
        .iter()
        .any(|s| s.as_bytes() == name)
}

#[cfg(test)]
mod names_tests {
    use super::*;

    /// The quick test lets every name that matters through, and stops
    /// names that are none of them.
    #[test]
    fn the_quick_test_keeps_every_name_that_matters() {
        let n = Names::new();
        let all = [protected::GIT_DIR, "HEAD", "objects", "refs", "commondir"]
            .into_iter()
            .chain(protected::AGENT_SETTINGS.iter().copied())
            .chain(protected::HOST_EXEC.iter().map(|h| h.name));
        for name in all {
            assert!(n.may_matter(name.as_bytes()), "{name}");
        }
        for name in ["f12345.txt", "README", "d0001", "index", "\u{e9}t\u{e9}"] {
            assert!(!n.may_matter(name.as_bytes()), "{name}");
        }
    }
}
