//! Config files for the OZ0 binaries (`/etc/oz0/node.toml`,
//! `/etc/oz0/edge.toml`).
//!
//! A file's keys are the long names of the command's flags
//! (`data-dir = "/var/lib/oz0-node"`, `jobs = 4`, `tool-env = ["A", "B"]`);
//! each value is checked by that flag's own parser, so a value the file
//! may hold is exactly one the flag takes. A flag on the command line (or
//! its environment variable) overrides the file; the file overrides the
//! flag's default. An unknown key, a table, a value of the wrong type or
//! one the flag refuses stops the program before it starts, with the
//! file, the line and the fix.
//!
//! The file decides where a daemon keeps its data and whom it trusts, so
//! it is refused when another user than root or the program's own could
//! write it.
//!
//! How: the command line is parsed once, leniently, to learn which flags
//! it set; every file key whose flag it did not set becomes that flag on
//! the command line (before any `--`), and the result is parsed as usual.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Command};
use serde::Serialize;
use toml::Spanned;

/// Why a config file was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read the config file {}: {err} — {fix}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The system's answer.
        err: std::io::Error,
        /// What fixes it.
        fix: String,
    },
    /// The file could be changed by someone the program does not trust.
    #[error("the config file {} {why} — {fix}", path.display())]
    Unsafe {
        /// The file.
        path: PathBuf,
        /// Who could change it.
        why: String,
        /// What fixes it.
        fix: String,
    },
    /// A line of the file is wrong.
    #[error("{}:{line}: {what} — {fix}", path.display())]
    Bad {
        /// The file.
        path: PathBuf,
        /// The line (from 1).
        line: usize,
        /// What is wrong.
        what: String,
        /// What fixes it.
        fix: String,
    },
    /// `--config` was given to a command that reads no config file.
    #[error("`{command}` reads no config file; {readers} do — drop --config")]
    NotRead {
        /// The command.
        command: String,
        /// The commands that read one.
        readers: String,
    },
}

/// What one binary reads.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// The binary's name, for messages.
    pub program: &'static str,
    /// The file read when it exists and no `--config` names another.
    pub default_path: &'static str,
    /// The variable that names another file.
    pub env: &'static str,
    /// The keys each command reads, by its subcommand path (`["run"]`,
    /// `["sandbox", "check"]`, `[]` for a binary without subcommands);
    /// commands not listed read no file.
    pub commands: &'static [(&'static [&'static str], &'static [&'static str])],
}

/// One key the file set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The key (the flag's long name).
    pub key: String,
    /// The line it is on.
    pub line: usize,
    /// Its values, as the flag takes them.
    pub values: Vec<OsString>,
}

/// A file read and checked against a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileConfig {
    /// The file.
    pub path: PathBuf,
    /// Its keys, in file order.
    pub entries: Vec<Entry>,
}

/// What [`apply`] returns.
#[derive(Debug)]
pub struct Applied {
    /// The command line to parse: the original, with the file's settings
    /// for the flags it did not set.
    pub argv: Vec<OsString>,
    /// The file read, if any.
    pub file: Option<FileConfig>,
    /// The flags the original command line (or environment) set, by id.
    pub given: Vec<(String, &'static str)>,
}

/// Whether any config file could apply to `argv`: one named by `--config`
/// before a `--`, by the spec's variable, or at its default path. When
/// none could, [`apply`] returns `argv` as it is, and a caller may skip it
/// (and the lenient parse it makes) altogether.
pub fn may_apply(argv: &[OsString], spec: &Spec) -> bool {
    let named = argv
        .iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .any(|a| a == "--config" || a.to_str().is_some_and(|s| s.starts_with("--config=")));
    named || std::env::var_os(spec.env).is_some() || Path::new(spec.default_path).exists()
}

/// Reads the config file that applies to `argv` (if any) and returns the
/// command line to parse. `cmd` is the binary's whole command, with the
/// global `--config FILE` (id `config`) and `--no-config` (id `no_config`)
/// flags.
pub fn apply(cmd: &Command, argv: Vec<OsString>, spec: &Spec) -> Result<Applied, ConfigError> {
    let unchanged = |argv| Applied {
        argv,
        file: None,
        given: Vec::new(),
    };
    // No file could apply: nothing to read, nothing to refuse.
    if !may_apply(&argv, spec) {
        return Ok(unchanged(argv));
    }
    // Help, version and parse errors are the strict parse's to report.
    let Ok(top) = cmd.clone().ignore_errors(true).try_get_matches_from(&argv) else {
        return Ok(unchanged(argv));
    };
    let (path, leaf_m, leaf_c) = leaf(cmd, &top);
    let explicit = top
        .try_get_one::<PathBuf>("config")
        .ok()
        .flatten()
        .cloned()
        .or_else(|| std::env::var_os(spec.env).map(PathBuf::from));
    let off = top.try_get_one::<bool>("no_config").ok().flatten() == Some(&true);
    let keys = spec
        .commands
        .iter()
        .find(|(p, _)| p.iter().copied().eq(path.iter().map(String::as_str)))
        .map(|(_, k)| *k);
    let Some(keys) = keys else {
        if explicit.is_some() && top.value_source("config") == Some(ValueSource::CommandLine) {
            return Err(ConfigError::NotRead {
                command: std::iter::once(spec.program)
                    .chain(path.iter().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join(" "),
                readers: readers(spec),
            });
        }
        return Ok(unchanged(argv));
    };
    if off {
        return Ok(unchanged(argv));
    }
    let file_path = match explicit {
        Some(p) => p,
        None if Path::new(spec.default_path).exists() => PathBuf::from(spec.default_path),
        None => return Ok(unchanged(argv)),
    };
    let named = std::iter::once(spec.program)
        .chain(path.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ");
    let file = load(&file_path, leaf_c, keys, spec, &named)?;
    let given: Vec<(String, &'static str)> = leaf_c
        .get_arguments()
        .filter_map(|a| {
            let id = a.get_id().as_str();
            match leaf_m.value_source(id) {
                Some(ValueSource::CommandLine) => Some((id.to_string(), "flag")),
                Some(ValueSource::EnvVariable) => Some((id.to_string(), "environment")),
                _ => None,
            }
        })
        .collect();
    let mut extra: Vec<OsString> = Vec::new();
    for e in &file.entries {
        let arg = leaf_c
            .get_arguments()
            .find(|a| a.get_long() == Some(e.key.as_str()))
            .expect("checked by load");
        if given.iter().any(|(id, _)| id == arg.get_id().as_str()) {
            continue;
        }
        if matches!(arg.get_action(), ArgAction::SetTrue) {
            if e.values.first().map(OsString::as_os_str) == Some(OsStr::new("true")) {
                extra.push(format!("--{}", e.key).into());
            }
            continue;
        }
        for v in &e.values {
            let mut flag = OsString::from(format!("--{}=", e.key));
            flag.push(v);
            extra.push(flag);
        }
    }
    let at = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
    let mut out: Vec<OsString> = argv[..at].to_vec();
    out.extend(extra);
    out.extend_from_slice(&argv[at..]);
    Ok(Applied {
        argv: out,
        file: Some(file),
        given,
    })
}

fn readers(spec: &Spec) -> String {
    spec.commands
        .iter()
        .map(|(p, _)| {
            format!(
                "`{}`",
                std::iter::once(spec.program)
                    .chain(p.iter().copied())
                    .collect::<Vec<_>>()
                    .join(" ")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The subcommand path of `m`, its matches and its command.
fn leaf<'a>(cmd: &'a Command, m: &'a ArgMatches) -> (Vec<String>, &'a ArgMatches, &'a Command) {
    let (mut c, mut m, mut path) = (cmd, m, Vec::new());
    while let Some((name, sub)) = m.subcommand() {
        let Some(sc) = c.find_subcommand(name) else {
            break;
        };
        path.push(name.to_string());
        c = sc;
        m = sub;
    }
    (path, m, c)
}

/// The line (from 1) of byte `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

/// Refuses a file another user (not root, not this program's) could write.
#[cfg(unix)]
fn check_owner(path: &Path, meta: &std::fs::Metadata) -> Result<(), ConfigError> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    let mode = meta.mode() & 0o7777;
    if meta.uid() != 0 && meta.uid() != me {
        return Err(ConfigError::Unsafe {
            path: path.to_path_buf(),
            why: format!("belongs to uid {}, neither root nor this user", meta.uid()),
            fix: format!("chown root {}", path.display()),
        });
    }
    if mode & 0o022 != 0 {
        return Err(ConfigError::Unsafe {
            path: path.to_path_buf(),
            why: format!("has mode {mode:o}: others may change it"),
            fix: format!("chmod go-w {}", path.display()),
        });
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_owner(_: &Path, _: &std::fs::Metadata) -> Result<(), ConfigError> {
    Ok(())
}

/// Refuses a file in a folder another user could replace it in: each
/// folder on its real path must be root's or this user's, and not
/// writable by others unless sticky (as `/tmp` is, where only a file's
/// owner may rename or remove it).
#[cfg(unix)]
fn check_folders(path: &Path) -> Result<(), ConfigError> {
    use std::os::unix::fs::MetadataExt;
    let Ok(real) = std::fs::canonicalize(path) else {
        return Ok(());
    };
    let me = rustix::process::geteuid().as_raw();
    for dir in real.ancestors().skip(1) {
        let Ok(m) = std::fs::metadata(dir) else {
            continue;
        };
        let mode = m.mode() & 0o7777;
        let others_write = mode & 0o022 != 0 && mode & 0o1000 == 0;
        if (m.uid() != 0 && m.uid() != me) || others_write {
            return Err(ConfigError::Unsafe {
                path: path.to_path_buf(),
                why: format!(
                    "lies in {}, which {}",
                    dir.display(),
                    if others_write {
                        format!("others may change (mode {mode:o})")
                    } else {
                        format!("belongs to uid {}, neither root nor this user", m.uid())
                    }
                ),
                fix: format!(
                    "keep it in a folder only root or this user may write, or chmod go-w {}",
                    dir.display()
                ),
            });
        }
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_folders(_: &Path) -> Result<(), ConfigError> {
    Ok(())
}

/// Reads `path` and checks every key against `cmd`'s flags named in `keys`
/// and every value with its flag's parser. A key another command of
/// `spec` reads is left to that command.
/// `named` is the command as a user types it (`oz0-node run`), for the fix.
pub fn load(
    path: &Path,
    cmd: &Command,
    keys: &[&str],
    spec: &Spec,
    named: &str,
) -> Result<FileConfig, ConfigError> {
    let read = |err| ConfigError::Read {
        path: path.to_path_buf(),
        err,
        fix: format!(
            "name a readable file with --config or {} (or --no-config)",
            spec.env
        ),
    };
    // Checked and read through one descriptor: the file looked at is the
    // file read, whatever is renamed over its name meanwhile.
    let mut file = std::fs::File::open(path).map_err(read)?;
    let meta = file.metadata().map_err(read)?;
    check_owner(path, &meta)?;
    check_folders(path)?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut file, &mut text).map_err(read)?;
    parse(path, &text, cmd, keys, &all_keys(spec), named)
}

/// Every key some command of `spec` reads.
pub fn all_keys(spec: &Spec) -> Vec<&'static str> {
    let mut all: Vec<&'static str> = spec
        .commands
        .iter()
        .flat_map(|(_, k)| k.iter().copied())
        .collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// [`load`] on text already read: `keys` are this command's, `all` every
/// command's, `named` the command as a user types it.
pub fn parse(
    path: &Path,
    text: &str,
    cmd: &Command,
    keys: &[&str],
    all: &[&str],
    named: &str,
) -> Result<FileConfig, ConfigError> {
    let file = FileText {
        path,
        text,
        cmd,
        keys,
        all,
        named,
    };
    let mut entries = Vec::new();
    for (k, v) in file.table()? {
        if let Some(entry) = file.entry(k, v)? {
            entries.push(entry);
        }
    }
    entries.sort_by_key(|(at, _)| *at);
    Ok(FileConfig {
        path: path.to_path_buf(),
        entries: entries.into_iter().map(|(_, e)| e).collect(),
    })
}

/// A config file's text and what it is checked against, for [`parse`].
struct FileText<'a> {
    path: &'a Path,
    text: &'a str,
    cmd: &'a Command,
    keys: &'a [&'a str],
    all: &'a [&'a str],
    named: &'a str,
}

type Table = Vec<(Spanned<String>, Spanned<toml::Value>)>;

impl FileText<'_> {
    /// The error for byte `at` of the file.
    fn bad(&self, at: usize, what: String, fix: String) -> ConfigError {
        ConfigError::Bad {
            path: self.path.to_path_buf(),
            line: line_of(self.text, at),
            what,
            fix,
        }
    }

    /// The file's top-level keys with their values and places.
    fn table(&self) -> Result<Table, ConfigError> {
        Ok(
            toml::from_str::<std::collections::BTreeMap<Spanned<String>, Spanned<toml::Value>>>(
                self.text,
            )
            .map_err(|e| {
                self.bad(
                    e.span().map_or(0, |s| s.start),
                    format!("not TOML: {}", e.message()),
                    "write `key = value` lines (strings in quotes)".into(),
                )
            })?
            .into_iter()
            .collect(),
        )
    }

    /// One key checked against its flag, with its byte offset (`None`: a
    /// key another command reads).
    fn entry(
        &self,
        k: Spanned<String>,
        v: Spanned<toml::Value>,
    ) -> Result<Option<(usize, Entry)>, ConfigError> {
        let key = k.get_ref().clone();
        let at = k.span().start;
        if matches!(v.get_ref(), toml::Value::Table(_)) {
            return Err(self.bad(
                at,
                format!("`[{key}]` is a table; the file has no tables"),
                "write every key at the top of the file".into(),
            ));
        }
        if self.all.contains(&key.as_str()) && !self.keys.contains(&key.as_str()) {
            // Another command's key (the daemon's, read by `run`).
            return Ok(None);
        }
        let arg = self
            .keys
            .contains(&key.as_str())
            .then(|| {
                self.cmd
                    .get_arguments()
                    .find(|a| a.get_long() == Some(key.as_str()))
            })
            .flatten()
            .ok_or_else(|| {
                self.bad(
                    at,
                    format!("unknown key `{key}`"),
                    format!("the keys are {}", self.all.join(", ")),
                )
            })?;
        let values = self.values(&key, &v, arg.get_action())?;
        Ok(Some((
            at,
            Entry {
                key,
                line: line_of(self.text, at),
                values: values.into_iter().map(OsString::from).collect(),
            },
        )))
    }

    /// The values of `key`, of the shape its flag takes (a list only for a
    /// flag given many times, a boolean for a switch), each accepted by the
    /// flag's own parser.
    fn values(
        &self,
        key: &str,
        v: &Spanned<toml::Value>,
        action: &ArgAction,
    ) -> Result<Vec<String>, ConfigError> {
        let many = matches!(action, ArgAction::Append);
        let flag = matches!(action, ArgAction::SetTrue);
        let scalar = |x: &toml::Value| -> Option<String> {
            match x {
                toml::Value::String(s) => Some(s.clone()),
                toml::Value::Integer(i) => Some(i.to_string()),
                toml::Value::Boolean(b) => Some(b.to_string()),
                toml::Value::Float(f) => Some(f.to_string()),
                _ => None,
            }
        };
        let type_fix = if many {
            format!("give `{key} = [\"…\", \"…\"]` (or one value)")
        } else if flag {
            format!("give `{key} = true` or `false`")
        } else {
            format!("give one value, e.g. `{key} = \"…\"`")
        };
        let values: Vec<String> = match v.get_ref() {
            toml::Value::Array(a) if many => a
                .iter()
                .map(|x| scalar(x).ok_or(()))
                .collect::<Result<_, _>>()
                .map_err(|()| {
                    self.bad(
                        v.span().start,
                        format!("`{key}` holds a list of plain values"),
                        type_fix.clone(),
                    )
                })?,
            other => vec![scalar(other).ok_or_else(|| {
                self.bad(
                    v.span().start,
                    format!("`{key}` takes one value, not a list"),
                    type_fix.clone(),
                )
            })?],
        };
        if flag {
            if !matches!(v.get_ref(), toml::Value::Boolean(_)) {
                return Err(self.bad(
                    v.span().start,
                    format!("`{key}` is true or false"),
                    type_fix,
                ));
            }
        } else {
            for val in &values {
                self.check_value(key, val, v.span().start)?;
            }
        }
        Ok(values)
    }

    /// Checks `val` with the flag's own parser, through the command itself:
    /// a value is checked as it is parsed, before any rule between flags.
    fn check_value(&self, key: &str, val: &str, at: usize) -> Result<(), ConfigError> {
        let probe = self
            .cmd
            .clone()
            .try_get_matches_from([OsString::from("x"), format!("--{key}={val}").into()]);
        let Err(e) = probe else {
            return Ok(());
        };
        if !matches!(
            e.kind(),
            ErrorKind::InvalidValue | ErrorKind::ValueValidation | ErrorKind::InvalidUtf8
        ) {
            return Ok(());
        }
        let msg = e.to_string();
        let first = msg
            .lines()
            .next()
            .unwrap_or_default()
            .trim_start_matches("error: ")
            .to_string();
        Err(self.bad(
            at,
            format!("`{key} = {val:?}`: {first}"),
            format!("give a value `--{key}` takes (see `{} --help`)", self.named),
        ))
    }
}

/// One effective setting, for `config show`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Setting {
    /// The key (the flag's long name).
    pub key: String,
    /// Its values (empty: unset).
    pub values: Vec<String>,
    /// Where they come from: `flag`, `environment`, `FILE:LINE`,
    /// `default` or `unset`.
    pub source: String,
}

/// The effective settings of the `keys` of `leaf` (the command as parsed
/// from [`Applied::argv`]), with where each came from. `redact` may hide a
/// value (a password in a URL).
pub fn effective(
    leaf: &ArgMatches,
    applied: &Applied,
    keys: &[&str],
    cmd: &Command,
    redact: &dyn Fn(&str, &str) -> String,
) -> Vec<Setting> {
    keys.iter()
        .filter_map(|k| {
            let arg = cmd.get_arguments().find(|a| a.get_long() == Some(*k))?;
            let id = arg.get_id().as_str();
            let values: Vec<String> = leaf
                .get_raw(id)
                .map(|v| v.map(|x| redact(k, &x.to_string_lossy())).collect())
                .unwrap_or_default();
            let from_file = applied
                .file
                .as_ref()
                .and_then(|f| f.entries.iter().find(|e| e.key == *k).map(|e| (f, e)));
            let source = if let Some((_, s)) = applied.given.iter().find(|(g, _)| g == id) {
                (*s).to_string()
            } else if let Some((f, e)) = from_file {
                format!("{}:{}", f.path.display(), e.line)
            } else if leaf.value_source(id) == Some(ValueSource::DefaultValue) {
                "default".into()
            } else if values.is_empty() || leaf.value_source(id).is_none() {
                "unset".into()
            } else {
                "flag".into()
            };
            let values = if source == "unset" {
                Vec::new()
            } else {
                values
            };
            Some(Setting {
                key: (*k).to_string(),
                values,
                source,
            })
        })
        .collect()
}

/// `config show` as text, a TOML document the node reads back as its
/// config file: one `key = value    # source` line each, an unset key as
/// a comment (`# key = (unset)`). A value that reads as an integer or a
/// boolean is written as one (the file takes either spelling), any other
/// as a TOML string, escaped as TOML escapes.
pub fn render(settings: &[Setting]) -> String {
    fn value(v: &str) -> toml::Value {
        match v {
            "true" => toml::Value::Boolean(true),
            "false" => toml::Value::Boolean(false),
            _ => match v.parse::<i64>() {
                Ok(i) if i.to_string() == v => toml::Value::Integer(i),
                _ => toml::Value::String(v.to_string()),
            },
        }
    }
    let mut out = String::new();
    for s in settings {
        let line = match s.values.as_slice() {
            [] => format!("# {} = (unset)\n", s.key),
            [one] => format!("{} = {}    # {}\n", s.key, value(one), s.source),
            many => format!(
                "{} = {}    # {}\n",
                s.key,
                toml::Value::Array(many.iter().map(|v| value(v)).collect()),
                s.source
            ),
        };
        out.push_str(&line);
    }
    out
}

#[cfg(test)]
mod tests;
