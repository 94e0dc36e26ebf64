//! Absolute Windows paths, strictly parsed.
//!
//! `oz0-policy` carries paths as [`AbsPath`], which starts at `/`. A Windows
//! path `C:\work\job1` travels through it as `/C:/work/job1` (see
//! [`WinPath::to_abs`]); this module turns it back and refuses every spelling
//! that could name one file in two ways, because the PSEC request's deny and
//! read-only lists match paths, and an alias would slip past them.

use std::fmt;

use oz0_policy::AbsPath;
use serde::{Deserialize, Serialize};

/// Longest path we accept, in UTF-16 units (without `\\?\`, Win32 paths stop at 32767).
pub const MAX_WIN_PATH_UNITS: usize = 32_000;

/// Device names Win32 resolves in every folder (`C:\work\NUL.txt` is the NUL device).
const DEVICE_NAMES: &[&str] = &[
    "CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$", "COM0", "COM1", "COM2", "COM3", "COM4",
    "COM5", "COM6", "COM7", "COM8", "COM9", "LPT0", "LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6",
    "LPT7", "LPT8", "LPT9",
];

/// An absolute, drive-letter Windows path: `X:\a\b` (drive letter upper case,
/// `\` separators, no trailing separator except for the drive root).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct WinPath(String);

/// Why a Windows path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WinPathError {
    /// Not `X:\…`.
    #[error(
        "{0:?} is not an absolute Windows path: name it with its drive letter, e.g. C:\\work\\job1"
    )]
    NotDrivePath(String),
    /// `\\server\share`, `\\?\…` or `\\.\…`.
    #[error("{0:?} is a UNC or device path, which PSEC rules cannot be relied on to match: use a path on a local drive letter")]
    UncOrDevice(String),
    /// `.` or `..`.
    #[error("{0:?} contains \".\" or \"..\": name the path without them")]
    DotComponent(String),
    /// A character Win32 forbids or treats specially (`<>:"|?*`, control characters).
    #[error("{path:?} contains {ch:?}, which a Windows file name may not (a ':' would name an alternate data stream)")]
    BadChar {
        /// The path.
        path: String,
        /// The character.
        ch: char,
    },
    /// A component ending in `.` or space, which Win32 strips (an alias).
    #[error("{0:?} has a component ending in '.' or a space, which Windows strips so that it names another file: remove it")]
    TrailingDotOrSpace(String),
    /// A device name such as `NUL` or `COM1`.
    #[error("{0:?} names a device (CON, NUL, COM1, …), not a file: rename the component")]
    DeviceName(String),
    /// An 8.3 short name such as `PROGRA~1`, which aliases a long name.
    #[error("{0:?} looks like an 8.3 short name (~ followed by a digit), which can alias another path: name the long path")]
    ShortName(String),
    /// Too long.
    #[error("path of {0} UTF-16 units is longer than the limit of {MAX_WIN_PATH_UNITS}")]
    TooLong(usize),
    /// An `AbsPath` that does not carry a drive path.
    #[error("{0} does not name a Windows path: on Windows a path reaches the run spec as /X:/folder (from X:\\folder)")]
    NotCarried(String),
}

impl WinPath {
    /// Parses `X:\a\b` (or `X:/a/b`), refusing aliases and special names.
    pub fn parse(s: &str) -> Result<Self, WinPathError> {
        if s.encode_utf16().count() > MAX_WIN_PATH_UNITS {
            return Err(WinPathError::TooLong(s.encode_utf16().count()));
        }
        if s.starts_with("\\\\") || s.starts_with("//") || s.starts_with("\\/") {
            return Err(WinPathError::UncOrDevice(s.to_string()));
        }
        let b = s.as_bytes();
        let drive_ok = b.len() >= 3
            && b[0].is_ascii_alphabetic()
            && b[1] == b':'
            && (b[2] == b'\\' || b[2] == b'/');
        if !drive_ok {
            return Err(WinPathError::NotDrivePath(s.to_string()));
        }
        let mut out = String::with_capacity(s.len());
        out.push(char::from(b[0].to_ascii_uppercase()));
        out.push_str(":\\");
        let mut first = true;
        for part in s[3..].split(['\\', '/']).filter(|p| !p.is_empty()) {
            check_component(s, part)?;
            if !first {
                out.push('\\');
            }
            out.push_str(part);
            first = false;
        }
        Ok(WinPath(out))
    }

    /// Recovers a Windows path carried in an [`AbsPath`] as `/X:/a/b`.
    pub fn from_abs(p: &AbsPath) -> Result<Self, WinPathError> {
        let s = p.as_str();
        let rest = s
            .strip_prefix('/')
            .ok_or_else(|| WinPathError::NotCarried(s.to_string()))?;
        let b = rest.as_bytes();
        let carried = b.len() >= 2
            && b[0].is_ascii_alphabetic()
            && b[1] == b':'
            && (b.len() == 2 || b[2] == b'/');
        if !carried {
            return Err(WinPathError::NotCarried(s.to_string()));
        }
        if b.len() == 2 {
            return Self::parse(&format!("{rest}\\"));
        }
        Self::parse(rest)
    }

    /// The form an [`AbsPath`] carries: `/X:/a/b`.
    pub fn to_abs(&self) -> AbsPath {
        let s = format!("/{}", self.0.replace('\\', "/"));
        AbsPath::new(&s).expect("a parsed Windows path is a valid AbsPath")
    }

    /// The path as text (`X:\a\b`).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True for a drive root such as `C:\`.
    pub fn is_drive_root(&self) -> bool {
        self.0.len() == 3
    }

    /// This path with one more plain component.
    pub fn join(&self, name: &str) -> Result<Self, WinPathError> {
        if self.is_drive_root() {
            Self::parse(&format!("{}{name}", self.0))
        } else {
            Self::parse(&format!("{}\\{name}", self.0))
        }
    }

    /// The components after the drive, upper-cased for comparison (NTFS
    /// compares names case-insensitively).
    fn folded(&self) -> Vec<String> {
        self.0
            .split('\\')
            .filter(|p| !p.is_empty())
            .map(|p| p.to_uppercase())
            .collect()
    }

    /// True when `self` is `other` or lies below it, compared as Windows does
    /// (case-insensitively, by component).
    pub fn starts_with_ci(&self, other: &WinPath) -> bool {
        let (a, b) = (self.folded(), other.folded());
        a.len() >= b.len() && a[..b.len()] == b[..]
    }

    /// True when one of the two paths lies within the other (or they are the same).
    pub fn overlaps_ci(&self, other: &WinPath) -> bool {
        self.starts_with_ci(other) || other.starts_with_ci(self)
    }
}

/// Whether `name` can be one folder's entry as Windows names it: not a
/// device (`CON`, `NUL.txt`), no trailing dot or space (Win32 drops
/// them), no short-name alias (`GIT~1`), none of `<>:"|?*`.
pub fn check_name(name: &str) -> Result<(), WinPathError> {
    check_component(name, name)
}

fn check_component(whole: &str, part: &str) -> Result<(), WinPathError> {
    if part == "." || part == ".." {
        return Err(WinPathError::DotComponent(whole.to_string()));
    }
    if let Some(ch) = part
        .chars()
        .find(|c| c.is_control() || matches!(c, '<' | '>' | ':' | '"' | '|' | '?' | '*'))
    {
        return Err(WinPathError::BadChar {
            path: whole.to_string(),
            ch,
        });
    }
    if part.ends_with('.') || part.ends_with(' ') {
        return Err(WinPathError::TrailingDotOrSpace(whole.to_string()));
    }
    let stem = part.split('.').next().unwrap_or(part).trim_end();
    if DEVICE_NAMES.iter().any(|d| d.eq_ignore_ascii_case(stem)) {
        return Err(WinPathError::DeviceName(whole.to_string()));
    }
    let bytes = part.as_bytes();
    if bytes
        .windows(2)
        .any(|w| w[0] == b'~' && w[1].is_ascii_digit())
    {
        return Err(WinPathError::ShortName(whole.to_string()));
    }
    Ok(())
}

impl fmt::Display for WinPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for WinPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl TryFrom<String> for WinPath {
    type Error = WinPathError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}

impl From<WinPath> for String {
    fn from(p: WinPath) -> String {
        p.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_normalises() {
        assert_eq!(
            WinPath::parse("c:/work//job1\\").unwrap().as_str(),
            "C:\\work\\job1"
        );
        assert_eq!(WinPath::parse("D:\\").unwrap().as_str(), "D:\\");
        assert!(WinPath::parse("D:\\").unwrap().is_drive_root());
    }

    #[test]
    fn refuses_aliases_and_specials() {
        let cases: &[(&str, &str)] = &[
            ("work\\job", "not an absolute"),
            ("C:work", "not an absolute"),
            ("\\\\server\\share\\x", "UNC"),
            ("\\\\?\\C:\\x", "UNC"),
            ("//./pipe/x", "UNC"),
            ("C:\\a\\..\\b", "\"..\""),
            ("C:\\a\\file.txt:secret", "alternate data stream"),
            ("C:\\a\\b*", "'*'"),
            ("C:\\a\\b.", "ending in '.'"),
            ("C:\\a\\b \\c", "ending in '.'"),
            ("C:\\a\\nul.txt", "names a device"),
            ("C:\\a\\COM1", "names a device"),
            ("C:\\PROGRA~1\\x", "8.3 short name"),
            ("C:\\a\u{7}b", "contains"),
        ];
        for (input, want) in cases {
            let e = WinPath::parse(input).expect_err(input).to_string();
            assert!(e.contains(want), "{input}: {e}");
        }
    }

    #[test]
    fn names_a_folder_can_hold() {
        for ok in ["report.pdf", "a-b_c.txt", "console.log", "nul_x"] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
        for bad in [
            "CON",
            "nul.txt",
            "Com1.json",
            "a.",
            "a ",
            "DATA~1.TXT",
            "a:b",
            "..",
            "x?",
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn carried_through_abs_path() {
        let w = WinPath::parse("C:\\Users\\me\\work").unwrap();
        let a = w.to_abs();
        assert_eq!(a.as_str(), "/C:/Users/me/work");
        assert_eq!(WinPath::from_abs(&a).unwrap(), w);
        let root = AbsPath::new("/D:").unwrap();
        assert_eq!(WinPath::from_abs(&root).unwrap().as_str(), "D:\\");
        let linux = AbsPath::new("/srv/work").unwrap();
        assert!(matches!(
            WinPath::from_abs(&linux),
            Err(WinPathError::NotCarried(_))
        ));
    }

    #[test]
    fn compares_case_insensitively_by_component() {
        let data = WinPath::parse("C:\\Users\\Me\\AppData\\Local\\oz0").unwrap();
        let inside = WinPath::parse("c:\\users\\me\\appdata\\local\\OZ0\\identity").unwrap();
        assert!(inside.starts_with_ci(&data));
        assert!(data.overlaps_ci(&inside));
        let sibling = WinPath::parse("C:\\Users\\Me\\AppData\\Local\\oz0x").unwrap();
        assert!(!sibling.overlaps_ci(&data));
        let root = WinPath::parse("C:\\").unwrap();
        assert!(data.starts_with_ci(&root));
    }
}
