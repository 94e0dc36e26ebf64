//! The node's look at git after a run: what the run left in its writable
//! folders that the host's git would run or follow, found and reported — and
//! by default put out of git's way — before the node returns, so before
//! anyone on the host runs git there.
//!
//! Every process of the run is gone by then, and the folders are still the
//! node's (locked). Each writable folder is walked by descriptor, never
//! following a link and never leaving its file system, up to
//! [`MAX_ENTRIES`] entries (more is reported as an incomplete look). Every
//! repository met is looked at: a `.git` folder, the folder a `.git` file
//! names (when it lies in the run's folders), a bare repository, and the
//! repositories of submodules and linked worktrees inside each. What counts
//! is what the run changed: an entry whose status changed at or after the
//! run's start (`ctime`, which no process can set back), measured by the
//! same clock (the `ctime` of a folder the node makes as the run starts;
//! a change made on the host in the same tick of that clock counts as the
//! run's). In it, a finding is:
//! - `config` or `config.worktree` with a setting that is not inert (see
//!   `oz0_policy::gitconfig`), or that cannot be read;
//! - a hook (any entry of `hooks/` but `*.sample`);
//! - `commondir`; `objects/info/alternates` or `http-alternates`;
//! - a rebase in progress whose list holds `exec` lines;
//! - legacy remote definitions (`remotes/*`, `branches/*`);
//! - a `.git` file (it names another repository).
//!
//! With [`Policy::Neutralise`] (the default) each is renamed aside in its
//! own folder, `<name>.oz0-quarantine-<run id>`, where git never looks:
//! nothing is deleted, nothing is executed, and git never runs.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use oz0_policy::gitconfig;
use oz0_policy::protected;
use rustix::fs::{AtFlags, FileType, OFlags, RenameFlags};
use rustix::io::Errno;
use serde::Serialize;

/// Most directory entries one look walks through; beyond, the look is
/// reported incomplete.
pub const MAX_ENTRIES: usize = 200_000;
/// Largest configuration or rebase list read.
const MAX_FILE: u64 = 1 << 20;
/// How deep repositories inside repositories (submodules, linked
/// worktrees) are looked at.
const MAX_NESTED: usize = 4;
/// The folders of a bare repository that [`Looker::repository`] looks at
/// itself, or that hold only git's data: not walked for more repositories.
const BARE_INTERNAL: &[&str] = &[
    "objects",
    "refs",
    "logs",
    "hooks",
    "info",
    "modules",
    "worktrees",
    "remotes",
    "branches",
    "rebase-merge",
    "rebase-apply",
];

/// What the node does with a finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// Rename it aside where git never looks (the default).
    #[default]
    Neutralise,
    /// Only report it.
    Report,
}

impl std::str::FromStr for Policy {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Policy, UnknownPolicy> {
        match s {
            "neutralise" | "neutralize" => Ok(Policy::Neutralise),
            "report" => Ok(Policy::Report),
            other => Err(UnknownPolicy(other.to_string())),
        }
    }
}

/// A `--git-findings` value that is not a policy.
#[derive(Debug, thiserror::Error)]
#[error("{0:?}: use neutralise or report")]
pub struct UnknownPolicy(String);

/// What was found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "what")]
pub enum What {
    /// A configuration with settings that are not inert (their names).
    Config {
        /// `section.key` (a subsection shown as `*`).
        settings: Vec<String>,
    },
    /// A configuration this reader cannot make sense of.
    UnreadableConfig {
        /// Why.
        reason: String,
    },
    /// A hook git would run.
    Hook,
    /// A `commondir`: config and hooks are read from elsewhere.
    Commondir,
    /// Other object stores git would read as this repository's.
    Alternates,
    /// A rebase in progress whose list would run commands.
    RebaseExec,
    /// A legacy remote definition.
    LegacyRemote,
    /// A `.git` file naming another repository.
    GitFile,
    /// A link where git reads a file or folder.
    Link,
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Where.
    pub path: PathBuf,
    /// What.
    #[serde(flatten)]
    pub what: What,
    /// Where it was renamed to, with [`Policy::Neutralise`].
    pub aside: Option<PathBuf>,
    /// Why it could not be renamed aside, when it could not.
    pub left: Option<String>,
}

/// The look's result, for the run's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GitLook {
    /// What was done with findings.
    pub policy: Policy,
    /// Whether every entry of the writable folders was walked.
    pub complete: bool,
    /// Entries walked.
    pub entries: usize,
    /// Repositories looked at.
    pub repositories: usize,
    /// What was found.
    pub findings: Vec<Finding>,
}

impl GitLook {
    /// One warning per thing the run left that host git would run or
    /// follow, with what was done with it (a path is shown escaped: the
    /// run chose it), and one more when the look stopped early.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for f in &self.findings {
            let what = match &f.what {
                What::Config { settings } => {
                    format!("a git config that sets {}", settings.join(", "))
                }
                What::UnreadableConfig { reason } => {
                    format!("a git config the node cannot read ({reason})")
                }
                What::Hook => "a git hook".into(),
                What::Commondir => "a git commondir (config and hooks read from elsewhere)".into(),
                What::Alternates => "git alternates (objects read from elsewhere)".into(),
                What::RebaseExec => "a rebase in progress that would run commands".into(),
                What::LegacyRemote => "a legacy git remote".into(),
                What::GitFile => "a .git file naming another repository".into(),
                What::Link => "a symbolic link where git reads".into(),
            };
            let done = match (&f.aside, &f.left) {
                (Some(a), _) => format!("renamed aside to {:?}", a.display().to_string()),
                (None, Some(why)) => format!("left in place: {why}"),
                (None, None) => "left in place (--git-findings report)".into(),
            };
            out.push(format!(
                "the run left {what} at {:?}: {done}",
                f.path.display().to_string()
            ));
        }
        if !self.complete {
            out.push(format!(
                "the look at git after the run stopped after {} entries of the writable folders; what lies beyond was not looked at",
                self.entries
            ));
        }
        out
    }
}

/// The status-change time (`ctime`) in `st`, since the Unix epoch; one
/// before the epoch counts as the epoch.
pub(crate) fn ctime(st: &rustix::fs::Stat) -> Duration {
    let secs = u64::try_from(st.st_ctime).unwrap_or(0);
    // The kernel keeps a timestamp's nanoseconds below one second, so they
    // fit a u32.
    #[allow(clippy::cast_possible_truncation)]
    let nanos = st.st_ctime_nsec as u32;
    Duration::new(secs, nanos)
}

/// Looks at git in the writable folders `roots` (descriptors the node
/// holds, with the path each stands for) after a run that started at
/// `since` (a `ctime`, since the Unix epoch), doing `policy` with what it
/// finds; `run_id` names the quarantine.
pub fn look(roots: &[(&Path, &OwnedFd)], since: Duration, policy: Policy, run_id: &str) -> GitLook {
    let mut l = Looker {
        since,
        policy,
        suffix: format!(".oz0-quarantine-{run_id}"),
        entries: 0,
        complete: true,
        repositories: 0,
        findings: Vec::new(),
        roots: roots.iter().map(|(p, _)| p.to_path_buf()).collect(),
        seen: Default::default(),
    };
    for (path, fd) in roots {
        l.walk(fd, path);
    }
    GitLook {
        policy,
        complete: l.complete,
        entries: l.entries,
        repositories: l.repositories,
        findings: l.findings,
    }
}

struct Looker {
    since: Duration,
    policy: Policy,
    suffix: String,
    entries: usize,
    complete: bool,
    repositories: usize,
    findings: Vec<Finding>,
    roots: Vec<PathBuf>,
    /// Repositories looked at (device, inode).
    seen: std::collections::HashSet<(u64, u64)>,
}

/// An entry of a folder: its name and type (as `getdents` gives it).
struct Entry {
    name: String,
    ft: FileType,
}

fn open_dir(dir: impl AsFd, name: &str) -> Result<OwnedFd, Errno> {
    crate::hostfs::open_beneath(dir, Path::new(name), OFlags::RDONLY | OFlags::DIRECTORY)
}

impl Looker {
    /// Whether what `st` describes changed at or after the run's start.
    fn changed(&self, st: &rustix::fs::Stat) -> bool {
        ctime(st) >= self.since
    }

    /// The entries of the folder open at `dir`, counted against the budget;
    /// `None` when the budget is spent.
    fn entries(&mut self, dir: &OwnedFd) -> Option<Vec<Entry>> {
        let mut out = Vec::new();
        let Ok(d) = rustix::fs::Dir::read_from(dir) else {
            return Some(out);
        };
        for e in d.flatten() {
            let Ok(name) = e.file_name().to_str() else {
                continue;
            };
            if name == "." || name == ".." {
                continue;
            }
            self.entries += 1;
            if self.entries > MAX_ENTRIES {
                self.complete = false;
                return None;
            }
            let ft = e.file_type();
            let ft = if ft == FileType::Unknown {
                rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
                    .map(|st| FileType::from_raw_mode(st.st_mode))
                    .unwrap_or(FileType::Unknown)
            } else {
                ft
            };
            out.push(Entry {
                name: name.to_string(),
                ft,
            });
        }
        Some(out)
    }

    /// Walks the folder open at `dir` (shown as `shown`), depth first,
    /// staying on its file system.
    fn walk(&mut self, dir: &OwnedFd, shown: &Path) {
        let Ok(root_dev) = rustix::fs::fstat(dir).map(|st| st.st_dev) else {
            return;
        };
        let Ok(first) = rustix::io::fcntl_dupfd_cloexec(dir, 0) else {
            return;
        };
        let mut stack = vec![(first, shown.to_path_buf())];
        while let Some((fd, at)) = stack.pop() {
            let Some(list) = self.entries(&fd) else {
                return;
            };
            let has = |n: &str| {
                list.iter()
                    .any(|e| e.name == n && e.ft == FileType::Directory)
            };
            let bare = list.iter().any(|e| e.name == "HEAD") && has("objects") && has("refs");
            if bare {
                self.repository(&fd, &at, 0);
            }
            for e in &list {
                // A bare repository's own folders were looked at above.
                if bare && BARE_INTERNAL.contains(&e.name.as_str()) {
                    continue;
                }
                let path = at.join(&e.name);
                if e.name == protected::GIT_DIR {
                    match e.ft {
                        FileType::Directory => {
                            if let Ok(g) = open_dir(&fd, &e.name) {
                                self.repository(&g, &path, 0);
                            }
                        }
                        _ => self.git_file(&fd, &e.name, &path, e.ft),
                    }
                    continue;
                }
                if e.ft != FileType::Directory {
                    continue;
                }
                let Ok(sub) = open_dir(&fd, &e.name) else {
                    continue;
                };
                if rustix::fs::fstat(&sub).is_ok_and(|st| st.st_dev == root_dev) {
                    stack.push((sub, path));
                }
            }
        }
    }

    /// A `.git` that is not a folder: a file naming another repository (or
    /// a link), changed by the run.
    fn git_file(&mut self, dir: &OwnedFd, name: &str, path: &Path, ft: FileType) {
        let Ok(st) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
            return;
        };
        if !self.changed(&st) {
            return;
        }
        let what = if ft == FileType::Symlink {
            What::Link
        } else {
            What::GitFile
        };
        self.found(dir, name, path, what);
        // The repository it names, when it lies in the run's folders.
        if ft != FileType::RegularFile {
            return;
        }
        let Some(target) = read_small(dir, name).and_then(|t| {
            let t = String::from_utf8(t).ok()?;
            t.trim_end().strip_prefix("gitdir: ").map(PathBuf::from)
        }) else {
            return;
        };
        let target = lexical(&if target.is_absolute() {
            target
        } else {
            path.parent().unwrap_or(Path::new("/")).join(target)
        });
        if self.roots.iter().any(|r| target.starts_with(r)) {
            if let Ok(g) = crate::hostfs::open_no_links(&target, OFlags::RDONLY | OFlags::DIRECTORY)
            {
                self.repository(&g, &target, 0);
            }
        }
    }

    /// Looks at the repository (git directory) open at `g`, once (a
    /// repository met twice, through a `.git` file and in the walk, is
    /// looked at the first time).
    fn repository(&mut self, g: &OwnedFd, at: &Path, depth: usize) {
        let Ok(st) = rustix::fs::fstat(g) else { return };
        if !self.seen.insert((st.st_dev, st.st_ino)) {
            return;
        }
        self.repositories += 1;
        for name in ["config", "config.worktree"] {
            self.config(g, name, &at.join(name));
        }
        for name in ["commondir"] {
            if let Some(true) = self.is_changed(g, name) {
                self.found(g, name, &at.join(name), What::Commondir);
            }
        }
        if let Ok(hooks) = open_dir(g, "hooks") {
            if let Some(list) = self.entries(&hooks) {
                for e in list {
                    if e.name.ends_with(".sample") || e.name.contains(".oz0-quarantine-") {
                        continue;
                    }
                    if let Some(true) = self.is_changed(&hooks, &e.name) {
                        self.found(&hooks, &e.name, &at.join("hooks").join(&e.name), What::Hook);
                    }
                }
            }
        }
        if let Ok(info) = crate::hostfs::open_beneath(
            g,
            Path::new(protected::GIT_OBJECTS_INFO),
            OFlags::PATH | OFlags::DIRECTORY,
        ) {
            for (name, _) in protected::GIT_OBJECTS_HELD {
                if let Some(true) = self.is_changed(&info, name) {
                    let path = at.join(protected::GIT_OBJECTS_INFO).join(name);
                    self.found(&info, name, &path, What::Alternates);
                }
            }
        }
        for dir in ["rebase-merge", "rebase-apply"] {
            let Ok(r) = open_dir(g, dir) else { continue };
            let runs = ["git-rebase-todo", "done"].iter().any(|f| {
                self.is_changed(&r, f) == Some(true)
                    && read_small(&r, f).is_some_and(|t| {
                        String::from_utf8_lossy(&t).lines().any(|l| {
                            let l = l.trim_start();
                            l.starts_with("exec ") || l.starts_with("x ")
                        })
                    })
            });
            if runs {
                self.found(g, dir, &at.join(dir), What::RebaseExec);
            }
        }
        for dir in ["remotes", "branches"] {
            let Ok(r) = open_dir(g, dir) else { continue };
            let Some(list) = self.entries(&r) else { return };
            for e in list {
                if e.name.contains(".oz0-quarantine-") {
                    continue;
                }
                if let Some(true) = self.is_changed(&r, &e.name) {
                    self.found(&r, &e.name, &at.join(dir).join(&e.name), What::LegacyRemote);
                }
            }
        }
        if depth >= MAX_NESTED {
            return;
        }
        // The repositories of submodules and linked worktrees.
        for dir in ["modules", "worktrees"] {
            let Ok(m) = open_dir(g, dir) else { continue };
            let Some(list) = self.entries(&m) else { return };
            for e in list {
                if e.ft != FileType::Directory {
                    continue;
                }
                if let Ok(sub) = open_dir(&m, &e.name) {
                    self.repository(&sub, &at.join(dir).join(&e.name), depth + 1);
                }
            }
        }
    }

    /// Whether `name` in `dir` (not followed) changed during the run; `None`
    /// when it is not there.
    fn is_changed(&self, dir: &OwnedFd, name: &str) -> Option<bool> {
        rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
            .ok()
            .map(|st| self.changed(&st))
    }

    /// A configuration file the run changed: its settings that are not
    /// inert, or why it cannot be read.
    fn config(&mut self, g: &OwnedFd, name: &str, path: &Path) {
        let Ok(st) = rustix::fs::statat(g, name, AtFlags::SYMLINK_NOFOLLOW) else {
            return;
        };
        if !self.changed(&st) {
            return;
        }
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return self.found(g, name, path, What::Link);
        }
        let what = match read_small(g, name).map(String::from_utf8) {
            None => What::UnreadableConfig {
                reason: format!("larger than {MAX_FILE} bytes, or unreadable"),
            },
            Some(Err(_)) => What::UnreadableConfig {
                reason: "not UTF-8".into(),
            },
            Some(Ok(text)) => match gitconfig::settings(&text) {
                Err(e) => What::UnreadableConfig {
                    reason: e.to_string(),
                },
                Ok(s) => {
                    let mut bad: Vec<String> = s
                        .iter()
                        .filter(|s| !gitconfig::is_inert(s))
                        .map(gitconfig::Setting::name)
                        .collect();
                    bad.dedup();
                    if bad.is_empty() {
                        return;
                    }
                    What::Config { settings: bad }
                }
            },
        };
        self.found(g, name, path, what);
    }

    /// Records a finding of `name` in `dir` and, with
    /// [`Policy::Neutralise`], renames it aside there.
    fn found(&mut self, dir: &OwnedFd, name: &str, path: &Path, what: What) {
        let mut f = Finding {
            path: path.to_path_buf(),
            what,
            aside: None,
            left: None,
        };
        if self.policy == Policy::Neutralise {
            let aside = format!("{name}{}", self.suffix);
            match rustix::fs::renameat_with(dir, name, dir, aside.as_str(), RenameFlags::NOREPLACE)
            {
                Ok(()) => f.aside = Some(path.with_file_name(&aside)),
                Err(e) => f.left = Some(format!("could not rename it aside: {e}")),
            }
        }
        self.findings.push(f);
    }
}

/// `p` with `.` and `..` taken out by name (the path is only compared and
/// shown; it is opened without following links).
fn lexical(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// The content of `name` in `dir` (a regular file, not followed), when it
/// is at most [`MAX_FILE`] bytes.
fn read_small(dir: &OwnedFd, name: &str) -> Option<Vec<u8>> {
    use std::io::Read;
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return None;
    }
    let mut data = Vec::new();
    std::fs::File::from(fd)
        .take(MAX_FILE + 1)
        .read_to_end(&mut data)
        .ok()?;
    (data.len() as u64 <= MAX_FILE).then_some(data)
}

#[cfg(test)]
mod tests;
