//! Environment variables a run is given.
//!
//! A run sees exactly what its caller names, plus what programs need and what
//! the sandbox sets itself (see [`SANDBOX_SET`]); never the node's own
//! environment, never an `OZ0_` variable.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Longest name we accept, in bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Longest value we accept, in bytes (Linux refuses longer single strings to `execve`).
pub const MAX_VALUE_BYTES: usize = 128 * 1024;
/// Most variables a caller may pass.
pub const MAX_VARS: usize = 1024;

/// The prefix of the node's own variables, which never reach a run.
pub const NODE_PREFIX: &str = "OZ0_";

/// Variables the sandbox sets itself; a caller naming one is refused so that
/// nobody believes their value was used.
pub const SANDBOX_SET: &[&str] = &["HOME", "TMPDIR"];

/// Proxy variables: set by the sandbox when the run has egress, refused from callers.
pub const PROXY_VARS: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
];

/// The `PATH` a run gets when its caller names none.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";

/// A variable name: `[A-Za-z_][A-Za-z0-9_]*`, not the node's own.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct EnvName(String);

/// Why a variable was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvError {
    /// Not of the form `[A-Za-z_][A-Za-z0-9_]*`.
    #[error("{0:?} is not a variable name: use letters, digits and _, not starting with a digit")]
    BadName(String),
    /// An `OZ0_` variable.
    #[error("{0} is one of the node's own variables (OZ0_*), which never reach a run: rename it")]
    NodeVariable(String),
    /// One the sandbox sets.
    #[error("{0} is set by the sandbox itself (inside the run), so a caller may not set it")]
    SandboxSet(String),
    /// A proxy variable.
    #[error(
        "{0} is set by the sandbox when the run has egress (--allow/--forward): do not set it"
    )]
    ProxyVariable(String),
    /// Missing `=`.
    #[error("{0:?} is not NAME=VALUE")]
    NoEquals(String),
    /// Value has a NUL byte.
    #[error("the value of {0} contains a NUL byte, which no environment can carry")]
    Nul(String),
    /// Value is not UTF-8.
    #[error("the value of {0} is not valid UTF-8")]
    NotUtf8(String),
    /// Value too long.
    #[error("the value of {0} is {1} bytes, over the limit of {MAX_VALUE_BYTES}")]
    ValueTooLong(String, usize),
    /// Too many.
    #[error("{0} variables given, over the limit of {MAX_VARS}")]
    TooMany(usize),
    /// Same name twice.
    #[error("{0} is given twice: name each variable once")]
    Duplicate(String),
}

impl EnvName {
    /// Parses a name, refusing the node's own and the sandbox's.
    pub fn new(s: &str) -> Result<Self, EnvError> {
        let ok_shape = !s.is_empty()
            && s.len() <= MAX_NAME_BYTES
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !s.as_bytes()[0].is_ascii_digit();
        if !ok_shape {
            return Err(EnvError::BadName(s.escape_debug().to_string()));
        }
        if s.to_ascii_uppercase().starts_with(NODE_PREFIX) {
            return Err(EnvError::NodeVariable(s.to_string()));
        }
        if SANDBOX_SET.contains(&s) {
            return Err(EnvError::SandboxSet(s.to_string()));
        }
        if PROXY_VARS.contains(&s) {
            return Err(EnvError::ProxyVariable(s.to_string()));
        }
        Ok(EnvName(s.to_string()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for EnvName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for EnvName {
    type Error = EnvError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::new(&s)
    }
}

impl From<EnvName> for String {
    fn from(n: EnvName) -> String {
        n.0
    }
}

/// One variable. Its `Debug` never prints the value: values may be secrets.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvVar {
    /// The name.
    pub name: EnvName,
    /// The value (UTF-8, no NUL, bounded).
    pub value: String,
}

impl EnvVar {
    /// Builds a variable from a name and a value, checking the value.
    pub fn new(name: &str, value: &str) -> Result<Self, EnvError> {
        let name = EnvName::new(name)?;
        if value.contains('\0') {
            return Err(EnvError::Nul(name.0));
        }
        if value.len() > MAX_VALUE_BYTES {
            return Err(EnvError::ValueTooLong(name.0, value.len()));
        }
        Ok(EnvVar {
            name,
            value: value.to_string(),
        })
    }

    /// Parses `NAME=VALUE`.
    pub fn parse(s: &str) -> Result<Self, EnvError> {
        let (n, v) = s
            .split_once('=')
            .ok_or_else(|| EnvError::NoEquals(s.chars().take(64).collect()))?;
        Self::new(n, v)
    }
}

impl fmt::Debug for EnvVar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}=<{} bytes>", self.name.0, self.value.len())
    }
}

/// Checks a whole list: count and duplicates.
pub fn check_list(vars: &[EnvVar]) -> Result<(), EnvError> {
    if vars.len() > MAX_VARS {
        return Err(EnvError::TooMany(vars.len()));
    }
    let mut seen = std::collections::BTreeSet::new();
    for v in vars {
        if !seen.insert(v.name.as_str()) {
            return Err(EnvError::Duplicate(v.name.0.clone()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(EnvName::new("FOO_1").is_ok());
        assert!(EnvName::new("_x").is_ok());
        assert!(matches!(EnvName::new("1X"), Err(EnvError::BadName(_))));
        assert!(matches!(EnvName::new("A-B"), Err(EnvError::BadName(_))));
        assert!(matches!(EnvName::new(""), Err(EnvError::BadName(_))));
        assert!(matches!(
            EnvName::new("OZ0_TOKEN"),
            Err(EnvError::NodeVariable(_))
        ));
        assert!(matches!(
            EnvName::new("oz0_token"),
            Err(EnvError::NodeVariable(_))
        ));
        assert!(matches!(EnvName::new("HOME"), Err(EnvError::SandboxSet(_))));
        assert!(matches!(
            EnvName::new("https_proxy"),
            Err(EnvError::ProxyVariable(_))
        ));
        assert!(EnvName::new(&"A".repeat(MAX_NAME_BYTES + 1)).is_err());
    }

    #[test]
    fn values() {
        let v = EnvVar::parse("A=b=c").unwrap();
        assert_eq!(v.value, "b=c");
        assert!(matches!(EnvVar::parse("A"), Err(EnvError::NoEquals(_))));
        assert!(matches!(EnvVar::new("A", "x\0y"), Err(EnvError::Nul(_))));
        let big = "x".repeat(MAX_VALUE_BYTES + 1);
        assert!(matches!(
            EnvVar::new("A", &big),
            Err(EnvError::ValueTooLong(_, _))
        ));
    }

    #[test]
    fn debug_hides_values() {
        let v = EnvVar::new("TOKEN", "hunter2").unwrap();
        assert!(!format!("{v:?}").contains("hunter2"));
    }

    #[test]
    fn list_rules() {
        let a = EnvVar::new("A", "1").unwrap();
        assert!(matches!(
            check_list(&[a.clone(), a]),
            Err(EnvError::Duplicate(_))
        ));
    }
}
