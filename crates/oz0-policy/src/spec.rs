//! A run's spec: the caller's request, validated.

use serde::{Deserialize, Serialize};

use crate::env::{self, EnvError, EnvVar};
use crate::limits::{LimitError, Limits};
use crate::net::{Egress, NetError};
use crate::path::{AbsPath, PathError};

/// Most `--read` plus `--write` paths a run may name.
pub const MAX_EXTRA_PATHS: usize = 256;
/// Most arguments a command may have.
pub const MAX_ARGS: usize = 4096;
/// Most bytes of all arguments together.
pub const MAX_COMMAND_BYTES: usize = 1024 * 1024;

/// Paths the sandbox builds itself; no caller path may be one of them or
/// lie below `/proc`, `/dev` or `/oz0`.
pub const RESERVED: &[&str] = &["/proc", "/dev", "/oz0"];
/// Paths that would hide the whole system or the run's private TEMP.
pub const RESERVED_EXACT: &[&str] = &["/", "/tmp"];
/// System paths a run reads but never writes. `/sys` among them: its
/// cgroup files of the run's own job belong to the node's user, and a run
/// given them writable could lift its own memory and process limits.
pub const SYSTEM_READ_ONLY: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys",
];

/// What a caller asks for, as it arrived (from flags or an API).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// The work directory (writable, the command's current directory).
    pub work: String,
    /// Extra read-only paths.
    #[serde(default)]
    pub read: Vec<String>,
    /// Extra writable paths.
    #[serde(default)]
    pub write: Vec<String>,
    /// The variables the command gets.
    #[serde(default)]
    pub env: Vec<EnvVar>,
    /// Hosts the run may reach through the egress proxy.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Node-local ports the run may reach through the egress proxy.
    #[serde(default)]
    pub forward: Vec<u16>,
    /// Limits.
    #[serde(default)]
    pub limits: Limits,
    /// The node's data directory, which the run must never see.
    pub data_dir: String,
    /// Let the command create unix sockets (refused by default: they could
    /// reach host services' sockets in the folders the run is given).
    #[serde(default)]
    pub allow_unix_sockets: bool,
    /// The command and its arguments.
    pub command: Vec<String>,
}

/// A validated run. Built only by [`RunSpec::new`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunSpec {
    /// Writable, the command's current directory.
    pub work: AbsPath,
    /// Extra read-only paths.
    pub read: Vec<AbsPath>,
    /// Extra writable paths.
    pub write: Vec<AbsPath>,
    /// Exactly the caller's variables.
    pub env: Vec<EnvVar>,
    /// Egress (empty = no network at all).
    pub egress: Egress,
    /// Limits.
    pub limits: Limits,
    /// The node's data directory (hidden from the run).
    pub data_dir: AbsPath,
    /// Unix sockets allowed to the command.
    pub allow_unix_sockets: bool,
    /// The command (non-empty).
    pub command: Vec<String>,
}

/// Why a request was refused. Every variant names the value and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// A path is malformed.
    #[error("{flag}: {source}")]
    Path {
        /// The flag that named it.
        flag: &'static str,
        /// What is wrong.
        source: PathError,
    },
    /// A path is reserved.
    #[error("{flag} {path}: {why}")]
    Reserved {
        /// The flag.
        flag: &'static str,
        /// The path.
        path: AbsPath,
        /// Why and what to do.
        why: &'static str,
    },
    /// A path overlaps the node's data directory.
    #[error("{flag} {path} overlaps the node's data directory {data_dir}, which no run may see: name a folder outside it")]
    DataDir {
        /// The flag.
        flag: &'static str,
        /// The path.
        path: AbsPath,
        /// The data directory.
        data_dir: AbsPath,
    },
    /// The same path twice.
    #[error("{0} is named twice (as --work, --read or --write): name each path once")]
    Duplicate(AbsPath),
    /// Too many paths.
    #[error("{0} extra paths given, over the limit of {MAX_EXTRA_PATHS}")]
    TooManyPaths(usize),
    /// Environment.
    #[error("--env: {0}")]
    Env(#[from] EnvError),
    /// Limits.
    #[error("{0}")]
    Limit(#[from] LimitError),
    /// Egress.
    #[error("{0}")]
    Net(#[from] NetError),
    /// No command.
    #[error("no command given: put it after --, e.g. `-- /bin/sh -c 'echo hi'`")]
    NoCommand,
    /// Command too large.
    #[error("the command has {args} arguments and {bytes} bytes, over the limit of {MAX_ARGS} arguments or {MAX_COMMAND_BYTES} bytes")]
    CommandTooLarge {
        /// Count.
        args: usize,
        /// Bytes.
        bytes: usize,
    },
    /// An argument contains NUL.
    #[error("argument {0} of the command contains a NUL byte, which no program's arguments can carry: remove it (pass binary data in a file)")]
    CommandNul(usize),
}

/// Checks a command as every run takes it: not empty, within
/// [`MAX_ARGS`] and [`MAX_COMMAND_BYTES`], and no NUL byte in any argument
/// (no argument list can carry one). The edge checks a job's command with
/// it at submit, and the node again in [`RunSpec::new`].
pub fn check_command(command: &[String]) -> Result<(), SpecError> {
    if command.is_empty() {
        return Err(SpecError::NoCommand);
    }
    let bytes: usize = command.iter().map(|a| a.len() + 1).sum();
    if command.len() > MAX_ARGS || bytes > MAX_COMMAND_BYTES {
        return Err(SpecError::CommandTooLarge {
            args: command.len(),
            bytes,
        });
    }
    if let Some(i) = command.iter().position(|a| a.contains('\0')) {
        return Err(SpecError::CommandNul(i));
    }
    Ok(())
}

impl RunSpec {
    /// The caller's variables as `NAME, VALUE` pairs, with `PATH` set to
    /// `default_path` when the caller named none: what every platform's
    /// run starts from before adding its own (`HOME`, `TMPDIR`, the proxy's).
    pub fn env_with_path(&self, default_path: &str) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = self
            .env
            .iter()
            .map(|v| (v.name.as_str().to_string(), v.value.clone()))
            .collect();
        if !env.iter().any(|(n, _)| n == "PATH") {
            env.push(("PATH".into(), default_path.into()));
        }
        env
    }

    /// Validates a request. Nothing about the host is consulted.
    pub fn new(req: RunRequest) -> Result<Self, SpecError> {
        let parse = |flag: &'static str, s: &str| {
            AbsPath::new(s).map_err(|source| SpecError::Path { flag, source })
        };
        let data_dir = parse("--data-dir", &req.data_dir)?;
        let work = parse("--work", &req.work)?;
        let read = req
            .read
            .iter()
            .map(|p| parse("--read", p))
            .collect::<Result<Vec<_>, _>>()?;
        let write = req
            .write
            .iter()
            .map(|p| parse("--write", p))
            .collect::<Result<Vec<_>, _>>()?;
        if read.len() + write.len() > MAX_EXTRA_PATHS {
            return Err(SpecError::TooManyPaths(read.len() + write.len()));
        }

        let all = std::iter::once(("--work", &work, true))
            .chain(read.iter().map(|p| ("--read", p, false)))
            .chain(write.iter().map(|p| ("--write", p, true)));
        let mut seen = std::collections::BTreeSet::new();
        for (flag, path, writable) in all {
            if !seen.insert(path.clone()) {
                return Err(SpecError::Duplicate(path.clone()));
            }
            check_root(flag, path, writable, &data_dir)?;
        }

        env::check_list(&req.env)?;
        req.limits.validate()?;
        let egress = Egress::parse(&req.allow, &req.forward)?;

        check_command(&req.command)?;

        Ok(RunSpec {
            work,
            read,
            write,
            env: req.env,
            egress,
            limits: req.limits,
            data_dir,
            allow_unix_sockets: req.allow_unix_sockets,
            command: req.command,
        })
    }

    /// The writable roots: the work directory first, then `--write` paths.
    pub fn writable(&self) -> impl Iterator<Item = &AbsPath> {
        std::iter::once(&self.work).chain(self.write.iter())
    }
}

fn check_root(
    flag: &'static str,
    path: &AbsPath,
    writable: bool,
    data_dir: &AbsPath,
) -> Result<(), SpecError> {
    let reserved = |why| SpecError::Reserved {
        flag,
        path: path.clone(),
        why,
    };
    if RESERVED_EXACT.contains(&path.as_str()) {
        return Err(reserved(
            "would replace the whole system view or the run's private TEMP: name a folder below it",
        ));
    }
    for r in RESERVED {
        if path.starts_with(&AbsPath::new(r).expect("constant is valid")) {
            return Err(reserved(
                "is built by the sandbox itself (/proc, /dev, /oz0)",
            ));
        }
    }
    if writable {
        for r in SYSTEM_READ_ONLY {
            if path.starts_with(&AbsPath::new(r).expect("constant is valid")) {
                return Err(reserved(
                    "is a system path, which runs read but never write: use a folder of its own",
                ));
            }
        }
    }
    if path.starts_with(data_dir) || data_dir.starts_with(path) {
        return Err(SpecError::DataDir {
            flag,
            path: path.clone(),
            data_dir: data_dir.clone(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> RunRequest {
        RunRequest {
            work: "/srv/work".into(),
            data_dir: "/var/lib/oz0".into(),
            command: vec!["/bin/true".into()],
            ..Default::default()
        }
    }

    #[test]
    fn minimal_is_most_restrictive() {
        let s = RunSpec::new(req()).unwrap();
        assert!(s.read.is_empty() && s.write.is_empty() && s.env.is_empty());
        assert!(!s.egress.is_enabled());
        assert_eq!(s.limits, Limits::default());
    }

    #[test]
    fn table_of_bad_requests() {
        type Edit = fn(&mut RunRequest);
        let cases: &[(&str, Edit, &str)] = &[
            (
                "relative work",
                |r| r.work = "work".into(),
                "not an absolute path",
            ),
            ("dotdot", |r| r.read = vec!["/a/../etc".into()], "\"..\""),
            ("root read", |r| r.read = vec!["/".into()], "whole system"),
            (
                "tmp write",
                |r| r.write = vec!["/tmp".into()],
                "private TEMP",
            ),
            (
                "proc",
                |r| r.read = vec!["/proc/1".into()],
                "built by the sandbox",
            ),
            (
                "write etc",
                |r| r.write = vec!["/etc/x".into()],
                "system path",
            ),
            ("write usr", |r| r.work = "/usr/src".into(), "system path"),
            (
                "write cgroups",
                |r| r.write = vec!["/sys/fs/cgroup/memory/oz0".into()],
                "system path",
            ),
            (
                "in data dir",
                |r| r.work = "/var/lib/oz0/x".into(),
                "data directory",
            ),
            (
                "holds data dir",
                |r| r.read = vec!["/var".into()],
                "data directory",
            ),
            ("dup", |r| r.read = vec!["/srv/work".into()], "named twice"),
            ("no cmd", |r| r.command.clear(), "no command"),
            ("nul arg", |r| r.command = vec!["a\0b".into()], "NUL"),
            (
                "huge cmd",
                |r| r.command = vec!["x".repeat(MAX_COMMAND_BYTES)],
                "over the limit",
            ),
            (
                "many paths",
                |r| r.read = (0..=MAX_EXTRA_PATHS).map(|i| format!("/r/{i}")).collect(),
                "over the limit",
            ),
            ("zero mem", |r| r.limits.memory_mib = Some(0), "between 1"),
        ];
        for (name, edit, want) in cases {
            let mut r = req();
            edit(&mut r);
            let err = RunSpec::new(r).expect_err(name).to_string();
            assert!(err.contains(want), "{name}: {err:?} lacks {want:?}");
        }
    }

    #[test]
    fn read_below_system_is_fine_write_is_not() {
        let mut r = req();
        r.read = vec!["/usr/share/doc".into()];
        assert!(RunSpec::new(r).is_ok());
    }

    #[test]
    fn request_rejects_unknown_fields() {
        let e = serde_json::from_str::<RunRequest>(
            r#"{"work":"/w","data_dir":"/d","command":["x"],"wrok":1}"#,
        );
        assert!(e.is_err());
    }
}
