//! Absolute, normalised, UTF-8 paths.

use std::fmt;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The longest path we accept, in bytes (Linux `PATH_MAX`, including the NUL).
pub const MAX_PATH_BYTES: usize = 4095;

/// An absolute path with no `.`/`..` components, no repeated or trailing
/// slashes, valid UTF-8 and no NUL or control character.
///
/// It is *syntactically* valid only: whether it exists is for the platform
/// layer to find out, at the moment it binds it.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct AbsPath(String);

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathError {
    /// Not valid UTF-8.
    #[error("{0:?} is not valid UTF-8: name it with a UTF-8 path")]
    NotUtf8(String),
    /// Does not start at `/`.
    #[error("{0:?} is not an absolute path: name it from / (e.g. \"$PWD/{0}\")")]
    Relative(String),
    /// Contains `..` or `.`.
    #[error("{0:?} contains \".\" or \"..\": name the path without them")]
    DotComponent(String),
    /// NUL, newline or another control character.
    #[error("{0:?} contains a control character, which no path given to a sandbox may")]
    ControlChar(String),
    /// Longer than [`MAX_PATH_BYTES`].
    #[error("path of {0} bytes is longer than the limit of {MAX_PATH_BYTES}")]
    TooLong(usize),
    /// The empty string.
    #[error("empty path")]
    Empty,
}

impl AbsPath {
    /// Parses `s`, normalising repeated and trailing slashes.
    pub fn new(s: &str) -> Result<Self, PathError> {
        if s.is_empty() {
            return Err(PathError::Empty);
        }
        if s.len() > MAX_PATH_BYTES {
            return Err(PathError::TooLong(s.len()));
        }
        if s.chars().any(|c| c.is_control()) {
            return Err(PathError::ControlChar(s.escape_debug().to_string()));
        }
        if !s.starts_with('/') {
            return Err(PathError::Relative(s.to_string()));
        }
        let mut out = String::with_capacity(s.len());
        for part in s.split('/').filter(|p| !p.is_empty()) {
            if part == "." || part == ".." {
                return Err(PathError::DotComponent(s.to_string()));
            }
            out.push('/');
            out.push_str(part);
        }
        if out.is_empty() {
            out.push('/');
        }
        Ok(AbsPath(out))
    }

    /// Parses an OS path (refusing non-UTF-8).
    pub fn from_path(p: &Path) -> Result<Self, PathError> {
        match p.to_str() {
            Some(s) => Self::new(s),
            None => Err(PathError::NotUtf8(p.to_string_lossy().into_owned())),
        }
    }

    /// The path as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The path as a [`Path`].
    pub fn as_path(&self) -> &Path {
        Path::new(&self.0)
    }

    /// This path with one more component. `name` must be a single, plain
    /// component (no `/`, not `.` or `..`).
    pub fn join(&self, name: &str) -> Result<Self, PathError> {
        if name.contains('/') || name.is_empty() {
            return Err(PathError::DotComponent(name.to_string()));
        }
        if self.0 == "/" {
            Self::new(&format!("/{name}"))
        } else {
            Self::new(&format!("{}/{name}", self.0))
        }
    }

    /// True when `self` is `other` or lies below it.
    pub fn starts_with(&self, other: &AbsPath) -> bool {
        other.0 == "/"
            || self.0 == other.0
            || (self.0.starts_with(&other.0) && self.0.as_bytes()[other.0.len()] == b'/')
    }

    /// Number of components (`/` has 0).
    pub fn depth(&self) -> usize {
        self.as_path()
            .components()
            .filter(|c| matches!(c, Component::Normal(_)))
            .count()
    }

    /// The parent directory, `None` for `/`.
    pub fn parent(&self) -> Option<AbsPath> {
        self.as_path()
            .parent()
            .map(|p| AbsPath(p.to_str().expect("a prefix of UTF-8 is UTF-8").to_string()))
    }

    /// An owned [`PathBuf`].
    pub fn to_path_buf(&self) -> PathBuf {
        PathBuf::from(&self.0)
    }
}

/// `p` (absolute) taken by name: `.` left out and each `..` taking the name
/// before it away, no link resolved. A caller's path made so keeps the
/// links it names, for the wall to refuse; made real (canonicalised), the
/// wall would see the link's target and never the link.
pub fn by_name(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

impl fmt::Display for AbsPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for AbsPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl TryFrom<String> for AbsPath {
    type Error = PathError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::new(&s)
    }
}

impl From<AbsPath> for String {
    fn from(p: AbsPath) -> String {
        p.0
    }
}

impl AsRef<Path> for AbsPath {
    fn as_ref(&self) -> &Path {
        self.as_path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_slashes() {
        assert_eq!(AbsPath::new("//a///b/").unwrap().as_str(), "/a/b");
        assert_eq!(AbsPath::new("/").unwrap().as_str(), "/");
        assert_eq!(AbsPath::new("///").unwrap().as_str(), "/");
    }

    #[test]
    fn refuses_bad_input() {
        assert_eq!(AbsPath::new(""), Err(PathError::Empty));
        assert!(matches!(AbsPath::new("a/b"), Err(PathError::Relative(_))));
        assert!(matches!(
            AbsPath::new("/a/../b"),
            Err(PathError::DotComponent(_))
        ));
        assert!(matches!(
            AbsPath::new("/a/./b"),
            Err(PathError::DotComponent(_))
        ));
        assert!(matches!(
            AbsPath::new("/a\nb"),
            Err(PathError::ControlChar(_))
        ));
        assert!(matches!(
            AbsPath::new("/a\0b"),
            Err(PathError::ControlChar(_))
        ));
        let long = format!("/{}", "a".repeat(MAX_PATH_BYTES));
        assert!(matches!(AbsPath::new(&long), Err(PathError::TooLong(_))));
    }

    #[cfg(unix)]
    #[test]
    fn refuses_non_utf8() {
        use std::ffi::OsStr;
        use std::os::unix::ffi::OsStrExt;
        let p = Path::new(OsStr::from_bytes(b"/a/\xff"));
        assert!(matches!(AbsPath::from_path(p), Err(PathError::NotUtf8(_))));
    }

    #[test]
    fn prefix_is_by_component() {
        let a = AbsPath::new("/work/a").unwrap();
        assert!(a.starts_with(&AbsPath::new("/work").unwrap()));
        assert!(a.starts_with(&AbsPath::new("/").unwrap()));
        assert!(a.starts_with(&a));
        assert!(!AbsPath::new("/work/ab").unwrap().starts_with(&a));
        assert!(!AbsPath::new("/wor").unwrap().starts_with(&a));
    }

    #[test]
    fn join_and_parent() {
        let a = AbsPath::new("/w").unwrap();
        assert_eq!(a.join(".git").unwrap().as_str(), "/w/.git");
        assert!(a.join("a/b").is_err());
        assert!(a.join("..").is_err());
        assert_eq!(a.parent().unwrap().as_str(), "/");
        assert_eq!(AbsPath::new("/").unwrap().parent(), None);
        assert_eq!(a.depth(), 1);
    }
}

#[cfg(test)]
mod by_name_tests {
    #[test]
    fn by_name_resolves_dots_and_no_link() {
        use std::path::Path;
        assert_eq!(super::by_name(Path::new("/a/./b/../c/")), Path::new("/a/c"));
        assert_eq!(super::by_name(Path::new("/../x")), Path::new("/x"));
    }
}
