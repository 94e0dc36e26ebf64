//! What the host looks like, gathered once per run: the facts the plan is a
//! pure function of. Gathering is the only I/O before launch; it follows no
//! symbolic link it is not asked to report.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use oz0_policy::protected::{self, Kind};
use oz0_policy::spec::SYSTEM_READ_ONLY;
use oz0_policy::{AbsPath, RunSpec};
use serde::Serialize;

/// What one path is on the host (by `lstat`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "target")]
pub enum Entry {
    /// Nothing there.
    Missing,
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link, with its target text.
    Symlink(String),
    /// Something else (socket, device, fifo).
    Other,
}

impl Entry {
    /// `lstat`s `p`.
    pub fn of(p: &Path) -> io::Result<Entry> {
        match fs::symlink_metadata(p) {
            Ok(m) if m.file_type().is_symlink() => Ok(Entry::Symlink(
                fs::read_link(p)?.to_string_lossy().into_owned(),
            )),
            Ok(m) if m.is_dir() => Ok(Entry::Dir),
            Ok(m) if m.is_file() => Ok(Entry::File),
            Ok(_) => Ok(Entry::Other),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Entry::Missing),
            Err(e) => Err(e),
        }
    }
}

/// A caller-named path as found on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RootFact {
    /// The path.
    pub path: AbsPath,
    /// What it is.
    pub entry: Entry,
    /// Its fully resolved form (`realpath`), when it exists.
    pub canonical: Option<String>,
}

/// The protected names of one writable folder, as found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProtectedFacts {
    /// The writable folder.
    pub root: AbsPath,
    /// `(name, what it is)` for each of [`protected::READ_ONLY_NAMES`].
    pub names: Vec<(&'static str, Kind, Entry)>,
    /// `.git` itself.
    pub git: Entry,
    /// `(name, kind, what it is)` for each of [`protected::GIT_READ_ONLY`] when `.git` is a folder.
    pub git_inner: Vec<(&'static str, Kind, Entry)>,
}

/// Everything the plan needs to know about the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostFacts {
    /// `(path, entry)` for each system path.
    pub system: Vec<(AbsPath, Entry)>,
    /// The node binary (canonical).
    pub node_exe: AbsPath,
    /// The work directory and each `--read`/`--write` path.
    pub roots: Vec<RootFact>,
    /// The protected names of each writable folder that is a directory.
    pub protected: Vec<ProtectedFacts>,
}

/// Why the host could not be examined.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// An I/O error on a named path.
    #[error("cannot examine {path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The error.
        source: io::Error,
    },
    /// The node binary's path is not usable.
    #[error("the node binary's own path {0:?} is not an absolute UTF-8 path")]
    NodeExe(String),
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> HostError + '_ {
    move |source| HostError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Gathers the facts for `spec`, with `node_exe` as the binary to bind.
pub fn gather(spec: &RunSpec, node_exe: &Path) -> Result<HostFacts, HostError> {
    let mut system = Vec::new();
    for s in SYSTEM_READ_ONLY {
        let p = AbsPath::new(s).expect("constant is valid");
        let e = Entry::of(p.as_path()).map_err(io_err(p.as_path()))?;
        system.push((p, e));
    }
    let exe = fs::canonicalize(node_exe).map_err(io_err(node_exe))?;
    let node_exe =
        AbsPath::from_path(&exe).map_err(|_| HostError::NodeExe(exe.display().to_string()))?;

    let mut roots = Vec::new();
    let all = std::iter::once(&spec.work)
        .chain(spec.read.iter())
        .chain(spec.write.iter());
    for p in all {
        let entry = Entry::of(p.as_path()).map_err(io_err(p.as_path()))?;
        let canonical = match entry {
            Entry::Missing => None,
            _ => Some(
                fs::canonicalize(p.as_path())
                    .map_err(io_err(p.as_path()))?
                    .to_string_lossy()
                    .into_owned(),
            ),
        };
        roots.push(RootFact {
            path: p.clone(),
            entry,
            canonical,
        });
    }

    let mut protected = Vec::new();
    for root in spec.writable() {
        if Entry::of(root.as_path()).map_err(io_err(root.as_path()))? != Entry::Dir {
            continue;
        }
        let mut names = Vec::new();
        for (name, kind) in protected::READ_ONLY_NAMES {
            let p = root.as_path().join(name);
            names.push((*name, *kind, Entry::of(&p).map_err(io_err(&p))?));
        }
        let git_path = root.as_path().join(protected::GIT_DIR);
        let git = Entry::of(&git_path).map_err(io_err(&git_path))?;
        let mut git_inner = Vec::new();
        if git == Entry::Dir {
            for (name, kind) in protected::GIT_READ_ONLY {
                let p = git_path.join(name);
                git_inner.push((*name, *kind, Entry::of(&p).map_err(io_err(&p))?));
            }
        }
        protected.push(ProtectedFacts {
            root: root.clone(),
            names,
            git,
            git_inner,
        });
    }

    Ok(HostFacts {
        system,
        node_exe,
        roots,
        protected,
    })
}

/// The node's data directory: `--data-dir`, else under the XDG data home.
pub fn data_dir(flag: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(d) = flag {
        return Ok(d.to_path_buf());
    }
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|x| !x.is_empty()) {
        return Ok(PathBuf::from(x).join("oz0-node"));
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".local/share/oz0-node")),
        None => Err(
            "neither XDG_DATA_HOME nor HOME is set: name the node's data directory with --data-dir"
                .into(),
        ),
    }
}
