//! One repository (a git directory) as host git reads it: each entry git
//! reads to decide what to run or where to look, reached without following
//! a link; a link there is followed only to learn where it leads, and is a
//! finding when the run made it, when it cannot be followed, or when it
//! leads into the writable folders to something the run changed. The
//! `core.hooksPath` and includes of a configuration the run did not change
//! are followed the same way (the configuration is the user's, but what it
//! names inside the writable folders may be the run's).

use std::ffi::{CStr, CString, OsString};
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

use oz0_policy::gitconfig;
use rustix::fs::{FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

use super::fsops::{self, id, ReadError};
use super::walk::Looker;
use super::{What, MAX_FILE};

/// Most configuration files followed from one repository's configuration
/// (includes of includes, `core.hooksPath`).
const MAX_FOLLOWED: usize = 32;
/// Most entries of a folder inside a repository listed (hooks, remotes).
const MAX_LISTED: usize = 100_000;

/// What is at a name git reads.
enum Reach {
    /// Nothing (or a link leading nowhere, or outside the writable folders:
    /// not the run's).
    Missing,
    /// A finding was made of it.
    Handled,
    /// An entry that is no link; `changed`: the run changed it (or its
    /// repository is the run's).
    Here { st: Stat, changed: bool },
    /// A link the run did not make, leading into the writable folders, to
    /// `fd` (an `O_PATH` descriptor) at `path`; `changed`: the run changed
    /// what it leads to, or a folder on the way there.
    Through {
        fd: OwnedFd,
        st: Stat,
        path: PathBuf,
        changed: bool,
    },
}

/// Where following a path as git would ends.
enum Followed {
    /// At this object (an `O_PATH` descriptor).
    To(OwnedFd, Stat),
    /// Nowhere: a name on the way is missing or no folder, or too many
    /// links (git cannot use it either).
    Nowhere,
    /// At a link the run made or changed, in a writable folder: `name`
    /// in `dir`, at `path`.
    RunsLink {
        dir: OwnedFd,
        name: CString,
        path: PathBuf,
    },
}

/// Most links followed in one path, as the kernel allows.
const MAX_LINKS: usize = 40;

/// `/`, opened only as a path, where an absolute path is followed from.
fn root() -> Result<OwnedFd, Errno> {
    rustix::fs::open(
        "/",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Puts the names of `p` in front of `todo`, a stack whose next name is
/// its last (`.` left out: it changes nothing).
fn push_front(todo: &mut Vec<OsString>, p: &Path) {
    for c in p.components().rev() {
        match c {
            Component::Normal(n) => todo.push(n.to_os_string()),
            Component::ParentDir => todo.push(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
}

/// What a configuration the run did not change names, to be followed.
#[derive(Default)]
struct Follow {
    /// `(value, the folder of the file that includes it)`.
    includes: Vec<(String, PathBuf)>,
    /// Each `core.hooksPath`.
    hooks_paths: Vec<String>,
}

fn is_dir(st: &Stat) -> bool {
    FileType::from_raw_mode(st.st_mode) == FileType::Directory
}

fn cname(name: &[u8]) -> Option<CString> {
    CString::new(name).ok()
}

impl Looker<'_> {
    /// Looks at the git directory open at `g` (the current path) once; its
    /// entries are all the run's when `moved`. `worktree`: its working
    /// tree, for a `.git` folder.
    pub(super) fn repository(&mut self, g: &OwnedFd, moved: bool, worktree: Option<PathBuf>) {
        let Ok(st) = rustix::fs::fstat(g) else { return };
        if !self.seen_repos.insert(id(&st)) {
            return;
        }
        if self.late("it looked at this repository") {
            return;
        }
        self.repositories += 1;
        let at = self.here();
        let mut follow = Follow::default();
        for name in [c"config", c"config.worktree"] {
            self.config(g, name, &at, moved, &mut follow);
        }
        let commondir = at.join("commondir");
        if let Some(true) = self.changed_at(g, c"commondir", &commondir, moved) {
            self.found(g, c"commondir", commondir, What::Commondir);
        }
        self.hooks(g, &at, moved);
        self.alternates(g, &at, moved);
        self.todo(g, c"rebase-merge", c"git-rebase-todo", &at, moved);
        self.todo(g, c"sequencer", c"todo", &at, moved);
        for dir in [c"remotes", c"branches"] {
            self.legacy(g, dir, &at, moved);
        }
        let base = worktree.unwrap_or_else(|| at.clone());
        self.follow_configs(follow, &base);
    }

    /// What is at `name` in `dir` (shown as `path`); `moved`: the folder
    /// it is in is the run's.
    fn reach(&mut self, dir: &OwnedFd, name: &CStr, path: &Path, moved: bool) -> Reach {
        let st = match fsops::lstat(dir, name) {
            Ok(st) => st,
            Err(Errno::NOENT) => return Reach::Missing,
            Err(e) => {
                let reason = format!("it cannot be looked at: {e}");
                self.found(dir, name, path.to_path_buf(), What::Unexamined { reason });
                return Reach::Handled;
            }
        };
        let changed = moved || self.moved_here(&st);
        if FileType::from_raw_mode(st.st_mode) != FileType::Symlink {
            return Reach::Here { st, changed };
        }
        if changed {
            self.found(dir, name, path.to_path_buf(), What::Link);
            return Reach::Handled;
        }
        let start = match rustix::io::fcntl_dupfd_cloexec(dir, 0) {
            Ok(d) => d,
            Err(_) => {
                self.found(dir, name, path.to_path_buf(), What::Link);
                return Reach::Handled;
            }
        };
        let from = path.parent().unwrap_or(Path::new("/")).to_path_buf();
        let rest = Path::new(std::ffi::OsStr::from_bytes(name.to_bytes()));
        match self.follow_checked(start, from, rest) {
            Ok(Followed::Nowhere) => Reach::Missing,
            Ok(Followed::RunsLink { dir, name, path }) => {
                self.found(&dir, &name, path, What::Link);
                Reach::Handled
            }
            Err(_) => {
                self.found(dir, name, path.to_path_buf(), What::Link);
                Reach::Handled
            }
            Ok(Followed::To(fd, st)) => match self.inside(&fd) {
                Ok(None) => Reach::Missing,
                Ok(Some((path, changed))) => Reach::Through {
                    fd,
                    st,
                    path,
                    changed,
                },
                Err(_) => {
                    self.found(dir, name, path.to_path_buf(), What::Link);
                    Reach::Handled
                }
            },
        }
    }

    /// Whether `name` in `dir` is there and the run changed it (or what it
    /// leads to); `None` when it is not there or a finding was made of it.
    fn changed_at(&mut self, dir: &OwnedFd, name: &CStr, path: &Path, moved: bool) -> Option<bool> {
        match self.reach(dir, name, path, moved) {
            Reach::Missing | Reach::Handled => None,
            Reach::Here { changed, .. } | Reach::Through { changed, .. } => Some(changed),
        }
    }

    /// The folder `name` in `dir`, opened to read, and whether it is the
    /// run's; `None` when it is not there, is no folder, or a finding was
    /// made of it.
    fn folder(
        &mut self,
        dir: &OwnedFd,
        name: &CStr,
        path: &Path,
        moved: bool,
    ) -> Option<(OwnedFd, PathBuf, bool)> {
        match self.reach(dir, name, path, moved) {
            Reach::Missing | Reach::Handled => None,
            Reach::Here { st, changed } => {
                if !is_dir(&st) {
                    return None;
                }
                match fsops::open_dir(dir, name) {
                    Ok(o) => Some((o.fd, path.to_path_buf(), changed)),
                    Err(Errno::NOENT) => None,
                    Err(e) => {
                        let reason = format!("it cannot be opened: {e}");
                        self.found(dir, name, path.to_path_buf(), What::Unexamined { reason });
                        None
                    }
                }
            }
            Reach::Through {
                fd,
                st,
                path: real,
                changed,
            } => {
                if !is_dir(&st) {
                    return None;
                }
                match fsops::reopen(&fd, true) {
                    Ok(d) => Some((d, real, changed)),
                    Err(_) => {
                        self.found(dir, name, path.to_path_buf(), What::Link);
                        None
                    }
                }
            }
        }
    }

    /// Where the object open at `fd` lies: in a writable folder (its path,
    /// and whether the run changed it or a folder on the way there), or
    /// not (`None`).
    fn inside(&self, fd: &OwnedFd) -> Result<Option<(PathBuf, bool)>, Errno> {
        let p = fsops::path_of(fd)?;
        for root in self.roots {
            if let Ok(rel) = p.strip_prefix(root.path) {
                let changed = self.changed_beneath(root.fd, rel)?;
                return Ok(Some((p, changed)));
            }
        }
        Ok(None)
    }

    /// Whether any entry on the way from the writable folder `root` to
    /// `rel` (itself included) changed during the run, reached without
    /// following links.
    fn changed_beneath(&self, root: &OwnedFd, rel: &Path) -> Result<bool, Errno> {
        let mut cur = rustix::io::fcntl_dupfd_cloexec(root, 0)?;
        for c in rel.components() {
            let Component::Normal(c) = c else {
                return Err(Errno::INVAL);
            };
            let next = rustix::fs::openat(
                &cur,
                c,
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            let st = rustix::fs::fstat(&next)?;
            if self.moved_here(&st) {
                return Ok(true);
            }
            cur = next;
        }
        Ok(false)
    }

    /// A configuration file: when the run's, its settings that are not
    /// inert, or why it cannot be read; when not, what it names to follow.
    fn config(&mut self, g: &OwnedFd, name: &CStr, at: &Path, moved: bool, follow: &mut Follow) {
        let path = at.join(OsString::from_vec(name.to_bytes().to_vec()));
        match self.reach(g, name, &path, moved) {
            Reach::Missing | Reach::Handled => {}
            Reach::Here { st, changed } => {
                let data = if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile {
                    fsops::read_small(g, name, MAX_FILE)
                } else {
                    Err(ReadError::Unreadable("not a regular file".into()))
                };
                if changed {
                    if let Some(what) = judge(data) {
                        self.found(g, name, path, what);
                    }
                } else if let Ok(text) = data {
                    names_to_follow(&text, at, follow);
                }
            }
            Reach::Through {
                fd,
                path: real,
                changed,
                ..
            } => {
                let data = fsops::reopen(&fd, false)
                    .map_err(|e| ReadError::Unreadable(e.to_string()))
                    .and_then(|f| fsops::read_fd(f, MAX_FILE));
                if changed {
                    if judge(data).is_some() {
                        self.found(g, name, path, What::Link);
                    }
                } else if let Ok(text) = data {
                    names_to_follow(&text, real.parent().unwrap_or(at), follow);
                }
            }
        }
    }

    /// The files an unchanged configuration includes, and the hooks of its
    /// `core.hooksPath`, where they lie in the writable folders. `base`:
    /// where hooks run (the working tree, or the git directory).
    fn follow_configs(&mut self, mut follow: Follow, base: &Path) {
        let mut budget = MAX_FOLLOWED;
        while let Some((value, from)) = follow.includes.pop() {
            if budget == 0 || self.late("it followed this repository's includes") {
                break;
            }
            budget -= 1;
            let Some(target) = resolve(&value, &from) else {
                continue;
            };
            let Some((fd, real, changed)) = self.follow_path(&target) else {
                continue;
            };
            let data = fsops::reopen(&fd, false)
                .map_err(|e| ReadError::Unreadable(e.to_string()))
                .and_then(|f| fsops::read_fd(f, MAX_FILE));
            if changed {
                if let Some(what) = judge(data) {
                    self.found_at(&real, what);
                }
            } else if let Ok(text) = data {
                names_to_follow(&text, real.parent().unwrap_or(base), &mut follow);
            }
        }
        for value in follow.hooks_paths.into_iter().take(MAX_FOLLOWED) {
            if self.late("it followed this repository's core.hooksPath") {
                break;
            }
            let Some(target) = resolve(&value, base) else {
                continue;
            };
            let Some((fd, real, changed)) = self.follow_path(&target) else {
                continue;
            };
            match fsops::reopen(&fd, true) {
                Ok(dir) => self.hooks_in(&dir, &real, changed),
                Err(Errno::NOTDIR) => {}
                Err(e) => self.found_at(
                    &real,
                    What::Unexamined {
                        reason: format!("core.hooksPath cannot be opened: {e}"),
                    },
                ),
            }
        }
    }

    /// `target` followed as git would: the object, its path and whether it
    /// is the run's, when it lies in the writable folders.
    fn follow_path(&mut self, target: &Path) -> Option<(OwnedFd, PathBuf, bool)> {
        let lexically_inside = self.roots.iter().any(|r| target.starts_with(r.path));
        // A root that cannot be opened is an error like any other on the
        // way: inside the writable folders, a finding.
        match root().and_then(|slash| self.follow_checked(slash, PathBuf::from("/"), target)) {
            Ok(Followed::RunsLink { dir, name, path }) => {
                self.found(&dir, &name, path, What::Link);
                None
            }
            Ok(Followed::To(fd, _)) => match self.inside(&fd) {
                Ok(Some((real, changed))) => Some((fd, real, changed)),
                Ok(None) => None,
                Err(e) => {
                    self.found_left(
                        target.to_path_buf(),
                        What::Unexamined {
                            reason: format!("cannot tell where it leads: {e}"),
                        },
                        "not renamed: reached only through links",
                    );
                    None
                }
            },
            Ok(Followed::Nowhere) => None,
            Err(e) if lexically_inside => {
                self.found_left(
                    target.to_path_buf(),
                    What::Unexamined {
                        reason: format!("named by a git config and cannot be followed: {e}"),
                    },
                    "not renamed: reached only through links",
                );
                None
            }
            Err(_) => None,
        }
    }

    /// `rest` followed as git would, from the folder `start` (at the path
    /// `from`), one name at a time: each link met on the way is read and
    /// followed, unless it lies in a writable folder and the run made or
    /// changed it. That one is the answer, wherever it leads: git would
    /// follow it, and what it leads to (another run's folder, or the
    /// user's own script elsewhere in the work folder, unchanged) says
    /// nothing of the run's intent. The kernel's rules hold: at most 40
    /// links (then, as for a missing name, git cannot use it either).
    fn follow_checked(
        &self,
        start: OwnedFd,
        from: PathBuf,
        rest: &Path,
    ) -> Result<Followed, Errno> {
        let mut cur = start;
        let mut at = from;
        let mut todo: Vec<OsString> = Vec::new();
        push_front(&mut todo, rest);
        let mut links = 0;
        while let Some(c) = todo.pop() {
            if c.as_bytes() == b".." {
                cur = rustix::fs::openat(
                    &cur,
                    c"..",
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                at.pop();
                continue;
            }
            let next = match rustix::fs::openat(
                &cur,
                c.as_os_str(),
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => fd,
                Err(Errno::NOENT | Errno::NOTDIR) => return Ok(Followed::Nowhere),
                Err(e) => return Err(e),
            };
            let st = rustix::fs::fstat(&next)?;
            let here = at.join(&c);
            if FileType::from_raw_mode(st.st_mode) != FileType::Symlink {
                cur = next;
                at = here;
                continue;
            }
            if self.moved_here(&st) && self.roots.iter().any(|r| at.starts_with(r.path)) {
                let name = cname(c.as_bytes()).ok_or(Errno::INVAL)?;
                return Ok(Followed::RunsLink {
                    dir: cur,
                    name,
                    path: here,
                });
            }
            links += 1;
            if links > MAX_LINKS {
                return Ok(Followed::Nowhere);
            }
            let target = rustix::fs::readlinkat(&next, c"", Vec::new())?;
            let target = PathBuf::from(OsString::from_vec(target.into_bytes()));
            if target.is_absolute() {
                cur = root()?;
                at = PathBuf::from("/");
            }
            push_front(&mut todo, &target);
        }
        let st = rustix::fs::fstat(&cur)?;
        Ok(Followed::To(cur, st))
    }

    /// A finding of the file at `real` (a path in a writable folder
    /// without links), renamed aside from its folder.
    fn found_at(&mut self, real: &Path, what: What) {
        let (Some(parent), Some(name)) = (real.parent(), real.file_name()) else {
            return;
        };
        let opened = self.roots.iter().find_map(|r| {
            let rel = parent.strip_prefix(r.path).ok()?;
            let flags = OFlags::RDONLY | OFlags::DIRECTORY;
            Some(if rel.as_os_str().is_empty() {
                rustix::io::fcntl_dupfd_cloexec(r.fd, 0)
            } else {
                crate::hostfs::open_beneath(r.fd, rel, flags)
            })
        });
        match (opened, cname(name.as_bytes())) {
            (Some(Ok(dir)), Some(c)) => self.found(&dir, &c, real.to_path_buf(), what),
            (Some(Err(e)), _) => self.found_left(
                real.to_path_buf(),
                what,
                &format!("its folder cannot be opened without links: {e}"),
            ),
            _ => self.found_left(
                real.to_path_buf(),
                what,
                "it lies outside the writable folders",
            ),
        }
    }

    /// `hooks/`: each hook the run made or changed.
    fn hooks(&mut self, g: &OwnedFd, at: &Path, moved: bool) {
        let path = at.join("hooks");
        if let Some((dir, shown, changed)) = self.folder(g, c"hooks", &path, moved) {
            self.hooks_in(&dir, &shown, changed);
        }
    }

    /// The hooks in the folder open at `dir` (shown as `shown`): each entry
    /// but `*.sample` that the run made or changed, or that leads to what
    /// it changed.
    fn hooks_in(&mut self, dir: &OwnedFd, shown: &Path, moved: bool) {
        let Some(names) = self.names(dir, shown) else {
            return;
        };
        for name in names {
            let b = name.to_bytes();
            if b.ends_with(b".sample") || contains(b, b".oz0-quarantine-") {
                continue;
            }
            let path = shown.join(OsString::from_vec(b.to_vec()));
            if let Some(true) = self.changed_at(dir, &name, &path, moved) {
                self.found(dir, &name, path, What::Hook);
            }
        }
    }

    /// `objects/info/alternates` and `http-alternates`.
    fn alternates(&mut self, g: &OwnedFd, at: &Path, moved: bool) {
        let Some((objects, shown, moved)) = self.folder(g, c"objects", &at.join("objects"), moved)
        else {
            return;
        };
        let Some((info, shown, moved)) = self.folder(&objects, c"info", &shown.join("info"), moved)
        else {
            return;
        };
        for name in [c"alternates", c"http-alternates"] {
            let path = shown.join(OsString::from_vec(name.to_bytes().to_vec()));
            if let Some(true) = self.changed_at(&info, name, &path, moved) {
                self.found(&info, name, path, What::Alternates);
            }
        }
    }

    /// A sequencer in progress (`rebase-merge`, `sequencer`) whose list the
    /// run changed and that runs commands, or cannot be read: the whole
    /// folder is the finding.
    fn todo(&mut self, g: &OwnedFd, dir: &CStr, list: &CStr, at: &Path, moved: bool) {
        let path = at.join(OsString::from_vec(dir.to_bytes().to_vec()));
        let Some((d, shown, moved)) = self.folder(g, dir, &path, moved) else {
            return;
        };
        let list_path = shown.join(OsString::from_vec(list.to_bytes().to_vec()));
        let data = match self.reach(&d, list, &list_path, moved) {
            Reach::Missing | Reach::Handled => return,
            Reach::Here { changed: false, .. } | Reach::Through { changed: false, .. } => return,
            Reach::Here { .. } => fsops::read_small(&d, list, MAX_FILE),
            Reach::Through { fd, .. } => fsops::reopen(&fd, false)
                .map_err(|e| ReadError::Unreadable(e.to_string()))
                .and_then(|f| fsops::read_fd(f, MAX_FILE)),
        };
        let runs = match data {
            Ok(text) => oz0_policy::gittodo::runs_commands(&text),
            Err(ReadError::Missing) => false,
            Err(ReadError::Unreadable(_)) => true,
        };
        if runs {
            self.found(g, dir, path, What::RebaseExec);
        }
    }

    /// Legacy remote definitions the run made or changed.
    fn legacy(&mut self, g: &OwnedFd, dir: &CStr, at: &Path, moved: bool) {
        let path = at.join(OsString::from_vec(dir.to_bytes().to_vec()));
        let Some((d, shown, moved)) = self.folder(g, dir, &path, moved) else {
            return;
        };
        let Some(names) = self.names(&d, &shown) else {
            return;
        };
        for name in names {
            if contains(name.to_bytes(), b".oz0-quarantine-") {
                continue;
            }
            let path = shown.join(OsString::from_vec(name.to_bytes().to_vec()));
            if let Some(true) = self.changed_at(&d, &name, &path, moved) {
                self.found(&d, &name, path, What::LegacyRemote);
            }
        }
    }

    /// The names in the folder open at `dir`; `None` (with a finding) when
    /// it cannot be listed or holds more than [`MAX_LISTED`].
    fn names(&mut self, dir: &OwnedFd, shown: &Path) -> Option<Vec<CString>> {
        let mut buf = vec![MaybeUninit::<u8>::uninit(); 16 * 1024];
        let mut raw = rustix::fs::RawDir::new(dir, &mut buf);
        let mut out = Vec::new();
        let mut failed = None;
        while let Some(e) = raw.next() {
            match e {
                Ok(e) => {
                    let n = e.file_name();
                    if n.to_bytes() == b"." || n.to_bytes() == b".." {
                        continue;
                    }
                    if out.len() >= MAX_LISTED {
                        failed = Some(format!("more than {MAX_LISTED} entries"));
                        break;
                    }
                    out.push(n.to_owned());
                }
                Err(e) => {
                    failed = Some(format!("it cannot be listed: {e}"));
                    break;
                }
            }
        }
        let Some(reason) = failed else {
            return Some(out);
        };
        // The folder itself is what could not be proven clean.
        self.found_at(shown, What::Unexamined { reason });
        None
    }
}

/// What makes the configuration read as `data` a finding, if anything.
fn judge(data: Result<Vec<u8>, ReadError>) -> Option<What> {
    let text = match data {
        Err(ReadError::Missing) => return None,
        Err(ReadError::Unreadable(reason)) => return Some(What::UnreadableConfig { reason }),
        Ok(t) => t,
    };
    let Ok(text) = String::from_utf8(text) else {
        return Some(What::UnreadableConfig {
            reason: "not UTF-8".into(),
        });
    };
    match gitconfig::settings(&text) {
        Err(e) => Some(What::UnreadableConfig {
            reason: e.to_string(),
        }),
        Ok(s) => {
            let bad: std::collections::BTreeSet<String> = s
                .iter()
                .filter(|s| !gitconfig::is_inert(s))
                .map(gitconfig::Setting::name)
                .collect();
            (!bad.is_empty()).then(|| What::Config {
                settings: bad.into_iter().take(super::MAX_SETTINGS).collect(),
            })
        }
    }
}

/// The includes and `core.hooksPath` of the configuration `text` (in the
/// folder `dir`), for [`Looker::follow_configs`]. A configuration git
/// cannot read names nothing git would follow.
fn names_to_follow(text: &[u8], dir: &Path, follow: &mut Follow) {
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let Ok(settings) = gitconfig::settings(text) else {
        return;
    };
    for s in settings {
        let Some(v) = s.value else { continue };
        match (s.section.as_str(), s.subsection.is_some(), s.key.as_str()) {
            ("include", false, "path") | ("includeif", true, "path") => {
                follow.includes.push((v, dir.to_path_buf()));
            }
            ("core", false, "hookspath") => follow.hooks_paths.push(v),
            _ => {}
        }
    }
}

/// `value` (a path git reads from a configuration) resolved against
/// `base`, with `.` and `..` taken out by name; `None` for a path under
/// a home folder (`~`), which is not the run's.
fn resolve(value: &str, base: &Path) -> Option<PathBuf> {
    if value.is_empty() || value.starts_with('~') {
        return None;
    }
    let p = Path::new(value);
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    Some(out)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}
