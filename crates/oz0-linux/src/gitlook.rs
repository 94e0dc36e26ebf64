//! The node's look after a run at what it left in its writable folders that
//! the host's git, an agent or an editor would run or follow, found and
//! reported — and by default put out of their way — before the node
//! returns, so before anyone on the host runs git there.
//!
//! Every process of the run is gone by then, and the folders are still the
//! node's (locked). Each writable folder is walked whole, by descriptor,
//! never following a link, holding one descriptor per level of depth (at
//! most [`MAX_DEPTH`] levels) whatever the tree's breadth; names are bytes,
//! whatever their encoding.
//!
//! # Fail safe
//!
//! Whatever the look cannot open, read, decode or follow is itself a
//! finding ([`What::Unexamined`], or [`What::UnreadableConfig`] for a
//! configuration), handled like any other: with [`Policy::Neutralise`] it
//! is renamed aside, so that nothing the look could not prove clean stays
//! where git looks. The same holds when the look reaches its bounds
//! ([`MAX_ENTRIES`] entries, [`MAX_TIME`], [`MAX_DEPTH`] levels,
//! [`MAX_PENDING_BYTES`] of names waiting to be walked): each folder not
//! walked is renamed aside, and the look says it is not complete. A folder
//! of the node's user that the run left unreadable (git needs only search
//! permission; the look needs read) gets its owner's permissions back and
//! is walked. A finding that cannot be renamed aside (a folder the run left
//! without write permission gets it back first) is left in place, and the
//! run then fails (see [`GitLook::left_in_place`]).
//!
//! # What counts as the run's
//!
//! An entry the run changed: its status changed at or after the run's start
//! (`ctime`, which no process can set back), measured by the same clock
//! (the `ctime` of a folder the node makes as the run starts; a change made
//! on the host in the same tick of that clock counts as the run's). A
//! repository is the run's as a whole when its git folder, or any folder on
//! the way to it from the writable folder, changed during the run (a rename
//! changes the `ctime` of what is moved, so a repository prepared in one run
//! and renamed into place by the next is the next one's), except folders
//! the wall kept in place for the run's length (a writable folder itself,
//! its protected `.git` and the folders held in it).
//!
//! # Findings
//!
//! In every repository met (a `.git` folder, or any folder git would take
//! for a git directory: `HEAD` beside `objects`, `refs` or `commondir`):
//! - `config` or `config.worktree` with a setting that is not inert (see
//!   `oz0_policy::gitconfig`), or that cannot be read;
//! - a hook (any entry of `hooks/` but `*.sample`), and a hook the run
//!   changed in a folder that an unchanged configuration names as
//!   `core.hooksPath` inside the writable folders; likewise a file inside
//!   the writable folders that an unchanged configuration includes
//!   (`include.path`, `includeIf.*.path`);
//! - `commondir`; `objects/info/alternates` or `http-alternates`;
//! - a rebase or sequencer in progress whose list runs commands (`exec`
//!   or `x`, read as git reads it);
//! - legacy remote definitions (`remotes/*`, `branches/*`);
//! - a `.git` file (it names another repository);
//! - a link where git reads one of the above, when the run made it, or
//!   when it leads into the writable folders to something the run changed.
//!
//! At any depth below the top of a writable folder (where they are held
//! read-only): agents' and editors' settings the run created or changed
//! ([`oz0_policy::protected::AGENT_SETTINGS`]).
//!
//! Reported, never moved: project files host tools execute that the run
//! changed ([`oz0_policy::protected::HOST_EXEC`]: CI workflows, make,
//! pre-commit, git attributes…), as [`GitLook::changed_host_exec`].
//!
//! With [`Policy::Neutralise`] (the default) each finding is renamed aside
//! in its own folder, `<name>.oz0-quarantine-<run id>`, where git never
//! looks: nothing is deleted, nothing is executed, and git never runs.

mod fsops;
mod repo;
mod walk;

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Serialize, Serializer};

pub(crate) use fsops::ctime;

/// Most directory entries one look walks through; the folders beyond are
/// renamed aside unwalked (see the module's documentation).
pub const MAX_ENTRIES: usize = 2_000_000;
/// Longest a look walks; the folders beyond are renamed aside unwalked.
pub const MAX_TIME: Duration = Duration::from_secs(60);
/// Deepest folder walked below a writable folder: the look holds one
/// descriptor per level, so at most this many (and a few more for a
/// repository's files) at once, whatever the tree's breadth.
pub const MAX_DEPTH: usize = 128;
/// Most bytes of folder names waiting to be walked at once.
pub const MAX_PENDING_BYTES: usize = 32 << 20;
/// Largest configuration or sequencer list read.
const MAX_FILE: u64 = 1 << 20;
/// Most project files listed in [`GitLook::changed_host_exec`].
const MAX_HOST_EXEC: usize = 1000;
/// Most findings shown as warnings; the rest are in the status document.
const MAX_WARNINGS: usize = 50;
/// Most findings kept in [`GitLook::findings`]: each is still handled
/// (renamed aside, counted), and the look's memory stays bounded whatever
/// the run left (a run can hard-link one file into a million places).
const MAX_FINDINGS: usize = 1000;
/// Most setting names kept in one [`What::Config`] finding.
const MAX_SETTINGS: usize = 100;

/// What the look's findings add up to, those past [`MAX_FINDINGS`]
/// included.
#[derive(Debug, Default)]
struct Tally {
    /// Findings past [`MAX_FINDINGS`], handled and counted only.
    more: usize,
    /// Findings left where host git reads.
    left: usize,
    /// Whether any finding is [`What::Unexamined`].
    unexamined: bool,
}

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
#[non_exhaustive]
pub enum What {
    /// A configuration with settings that are not inert (their names).
    Config {
        /// `section.key` (a subsection shown as `*`), sorted, each once,
        /// at most 100.
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
    /// A rebase or sequencer in progress whose list would run commands (or
    /// that cannot be read).
    RebaseExec,
    /// A legacy remote definition.
    LegacyRemote,
    /// A `.git` file naming another repository.
    GitFile,
    /// A link where git reads a file or folder.
    Link,
    /// Agents' or editors' settings below the top of a writable folder.
    AgentSettings,
    /// Something the look could not open, read or follow, or did not reach
    /// within its bounds.
    Unexamined {
        /// Why.
        reason: String,
    },
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Where (shown with [`shown`]'s escapes).
    #[serde(serialize_with = "ser_path")]
    pub path: PathBuf,
    /// What.
    #[serde(flatten)]
    pub what: What,
    /// Where it was renamed to, with [`Policy::Neutralise`].
    #[serde(serialize_with = "ser_opt_path")]
    pub aside: Option<PathBuf>,
    /// Why it could not be renamed aside, when it could not.
    pub left: Option<String>,
}

/// The look's result, for the run's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GitLook {
    /// What was done with findings.
    pub policy: Policy,
    /// Whether every entry of the writable folders was examined: no
    /// [`What::Unexamined`] finding, no bound reached.
    pub complete: bool,
    /// Why the walk stopped before its end, when it did.
    pub stopped: Option<String>,
    /// Entries walked.
    pub entries: usize,
    /// Repositories looked at.
    pub repositories: usize,
    /// Folders the run left unreadable to their owner that the look gave
    /// read and search permission back, to walk them.
    pub folders_made_readable: usize,
    /// Findings that host git could still run or follow: not renamed aside
    /// with [`Policy::Neutralise`] (the run then fails), or every finding
    /// with [`Policy::Report`].
    pub left_in_place: usize,
    /// What was found, at most 1,000.
    pub findings: Vec<Finding>,
    /// How many more findings there were (each handled as those listed).
    pub findings_more: usize,
    /// Project files host tools execute that the run changed (never
    /// moved), at most 1,000.
    #[serde(serialize_with = "ser_paths")]
    pub changed_host_exec: Vec<PathBuf>,
    /// How many more there were.
    pub changed_host_exec_more: usize,
    /// How long the look took, milliseconds.
    pub duration_ms: u64,
}

impl GitLook {
    /// Whether the run must fail: with [`Policy::Neutralise`], something
    /// host git could run or follow could not be put aside.
    pub fn failed(&self) -> bool {
        self.policy == Policy::Neutralise && self.left_in_place > 0
    }

    /// One warning per thing the run left that host git, an agent or an
    /// editor would run or follow, with what was done with it (a path is
    /// shown escaped: the run chose it); one for the project files host
    /// tools execute that the run changed; one more when the look did not
    /// examine everything.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for f in self.findings.iter().take(MAX_WARNINGS) {
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
                What::AgentSettings => "agent or editor settings".into(),
                What::Unexamined { reason } => {
                    format!("something the look could not examine ({reason})")
                }
            };
            let done = match (&f.aside, &f.left) {
                (Some(a), _) => format!("renamed aside to \"{}\"", shown(a)),
                (None, Some(why)) => format!("LEFT IN PLACE: {why}"),
                (None, None) => "left in place (--git-findings report)".into(),
            };
            out.push(format!(
                "the run left {what} at \"{}\": {done}",
                shown(&f.path)
            ));
        }
        if self.findings.len() > MAX_WARNINGS {
            out.push(format!(
                "and {} more findings of the look at git (listed in --json-status)",
                self.findings.len() - MAX_WARNINGS
            ));
        }
        if self.findings_more > 0 {
            out.push(format!(
                "and {} more findings than --json-status lists (at most {MAX_FINDINGS}), each handled the same way",
                self.findings_more
            ));
        }
        if self.failed() {
            out.push(format!(
                "{} of them could not be renamed aside: host git may still run what the run left there; the run fails",
                self.left_in_place
            ));
        }
        if !self.changed_host_exec.is_empty() {
            let mut list: Vec<String> = self
                .changed_host_exec
                .iter()
                .take(10)
                .map(|p| format!("\"{}\"", shown(p)))
                .collect();
            let more =
                self.changed_host_exec.len().saturating_sub(10) + self.changed_host_exec_more;
            if more > 0 {
                list.push(format!("and {more} more"));
            }
            out.push(format!(
                "the run changed files that tools on the host execute (review them before running them): {}",
                list.join(", ")
            ));
        }
        if let Some(why) = &self.stopped {
            out.push(format!(
                "the look at git after the run stopped after {} entries ({why}); the folders it did not walk were {}",
                self.entries,
                match self.policy {
                    Policy::Neutralise => "renamed aside",
                    Policy::Report => "left in place unexamined (--git-findings report)",
                }
            ));
        }
        if self.folders_made_readable > 0 {
            out.push(format!(
                "the look gave {} folder(s) the run had made unreadable their owner's permissions back",
                self.folders_made_readable
            ));
        }
        out
    }
}

/// `p` for a terminal or a document: valid UTF-8 as it is but for control
/// characters (shown as `\u{…}`) and backslashes (doubled); any other byte
/// as `\xNN`. A run chooses its names; this shows every one of them, and
/// tells two apart whenever their bytes differ.
pub fn shown(p: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    for chunk in p.as_os_str().as_bytes().utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                c if c.is_control()
                    || matches!(c, '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') =>
                {
                    out.push_str(&format!("\\u{{{:x}}}", c as u32))
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

fn ser_path<S: Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&shown(p))
}

fn ser_opt_path<S: Serializer>(p: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
    match p {
        Some(p) => s.serialize_some(&shown(p)),
        None => s.serialize_none(),
    }
}

fn ser_paths<S: Serializer>(ps: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(ps.iter().map(|p| shown(p)))
}

/// The look's bounds (the constants above; smaller in tests).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub entries: usize,
    pub time: Duration,
    pub depth: usize,
    pub pending_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            entries: MAX_ENTRIES,
            time: MAX_TIME,
            depth: MAX_DEPTH,
            pending_bytes: MAX_PENDING_BYTES,
        }
    }
}

/// A writable folder to look at: the descriptor the node holds, and the
/// path it stands for (a caller path, reached without links).
pub struct Root<'a> {
    /// The path.
    pub path: &'a Path,
    /// The descriptor.
    pub fd: &'a OwnedFd,
}

/// Looks at the writable folders `roots` after a run that started at
/// `since` (a `ctime`, since the Unix epoch), doing `policy` with what it
/// finds; `run_id` names the quarantine. `kept` holds `(device, inode)` of
/// the folders the wall kept in place for the run's length (see the
/// module's documentation).
pub fn look(
    roots: &[Root<'_>],
    since: Duration,
    policy: Policy,
    run_id: &str,
    kept: &std::collections::HashSet<(u64, u64)>,
) -> GitLook {
    look_with(roots, since, policy, run_id, kept, Limits::default())
}

pub(crate) fn look_with(
    roots: &[Root<'_>],
    since: Duration,
    policy: Policy,
    run_id: &str,
    kept: &std::collections::HashSet<(u64, u64)>,
    limits: Limits,
) -> GitLook {
    let started = std::time::Instant::now();
    let mut l = walk::Looker::new(roots, since, policy, run_id, kept, limits);
    for i in 0..roots.len() {
        l.walk_root(i);
    }
    l.finish(started.elapsed())
}

#[cfg(test)]
mod tests;
