//! A tool job: one `tools/call` of one plugin tool, as it travels from the
//! operator through the edge to a node.
//!
//! The payload carries the plugin's manifest text, so the edge routes by
//! the manifest (never by what the submitter says about isolation) and the
//! node runs exactly the tool the edge routed:
//!
//! ```json
//! {"manifest": "tools:\n  - id: fetch\n    package: oci:…@sha256:…\n    isolation: microvm\n",
//!  "tool": "fetch", "name": "fetch_url", "arguments": {"url": "https://example.com"},
//!  "files": [{"name": "input.csv", "base64": "YSxiCg=="}], "timeout": 120}
//! ```
//!
//! `tool` is the manifest's tool id (the server); `name` is the MCP tool the
//! call names (default: the tool id); `files` are placed under
//! `/work/.oz0-files/` and named in the call's `_meta["oz0/files"]`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::manifest::{Manifest, ManifestError, Tool};

/// The manifest's file name in a plugin folder.
pub const MANIFEST_FILE: &str = "oz0-plugin.yaml";
/// Most files one call may be given.
pub const MAX_FILES: usize = 32;
/// Longest file name.
pub const MAX_FILE_NAME_BYTES: usize = 128;
/// Longest MCP tool name.
pub const MAX_TOOL_NAME_BYTES: usize = 128;
/// The folder, inside the work folder, a call's files are placed in.
pub const FILES_DIR: &str = ".oz0-files";
/// The `_meta` key that names the call's files.
pub const FILES_META: &str = "oz0/files";
/// Longest time a call may be given, seconds.
pub const MAX_TIMEOUT_S: u64 = 24 * 3600;
/// Default time for a call, seconds (boot, handshake and call).
pub const DEFAULT_TIMEOUT_S: u64 = 300;
/// Largest tool job payload, as JSON text (the manifest, the arguments and
/// the files, base64): what the edge accepts and a node takes.
pub const MAX_TOOL_JOB_BYTES: usize = 1024 * 1024;

/// One file a call is given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolFile {
    /// Its name under `/work/.oz0-files/` (no folders).
    pub name: String,
    /// Its bytes, standard base64.
    pub base64: String,
}

/// A tool job's payload, as submitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolJob {
    /// The plugin's `oz0-plugin.yaml`, as text.
    pub manifest: String,
    /// The manifest's tool id: the server to start.
    pub tool: String,
    /// The MCP tool to call (default: the tool id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The call's arguments (a JSON object).
    #[serde(default)]
    pub arguments: serde_json::Map<String, serde_json::Value>,
    /// Files the call is given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<ToolFile>,
    /// Seconds for the whole call: boot, handshake and call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
}

/// Why a tool job is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolJobError {
    /// The manifest does not hold.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The payload is not a tool job.
    #[error("the payload is not a tool job: {0} (give {{\"manifest\": \"…oz0-plugin.yaml text…\", \"tool\": ID, \"name\": MCP_TOOL, \"arguments\": {{…}}}})")]
    Shape(String),
    /// The manifest has no such tool.
    #[error("the plugin's oz0-plugin.yaml has no tool {tool:?} (it has: {have})")]
    NoSuchTool {
        /// The id asked for.
        tool: String,
        /// The ids it has.
        have: String,
    },
    /// A bad MCP tool name.
    #[error(
        "the MCP tool name {0:?} must be 1-{MAX_TOOL_NAME_BYTES} of A-Z, a-z, 0-9, _, - and ."
    )]
    Name(String),
    /// A bad file.
    #[error("file {name:?}: {what}")]
    File {
        /// The file's name.
        name: String,
        /// What is wrong.
        what: String,
    },
    /// Too many files.
    #[error("a call is given at most {MAX_FILES} files, not {0}")]
    TooManyFiles(usize),
    /// A bad timeout.
    #[error("timeout {0} s is out of range: give 1 to {MAX_TIMEOUT_S}")]
    Timeout(u64),
    /// Over [`MAX_TOOL_JOB_BYTES`].
    #[error("the tool job is {0} bytes of JSON, over the limit of {MAX_TOOL_JOB_BYTES}: give the call smaller files")]
    TooLarge(usize),
}

/// Why a node that runs no OCI containers leaves a container tool out.
pub fn container_refusal(tool: &str, why: &str) -> String {
    format!("tool {tool:?} is left out: it is a container tool (an image without isolation: microvm), which runs in its image's root where a node offers runtime.oci, and this node does not ({why})")
}

/// A tool job that holds: its manifest parsed, its tool found.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedToolJob {
    /// The payload.
    pub job: ToolJob,
    /// The tool to run.
    pub tool: Tool,
    /// The MCP tool to call.
    pub name: String,
    /// The files, decoded, in order.
    pub files: Vec<(String, Vec<u8>)>,
}

fn file_name_ok(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= MAX_FILE_NAME_BYTES
        && !n.starts_with('.')
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

fn tool_name_ok(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= MAX_TOOL_NAME_BYTES
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
}

impl ToolJob {
    /// Reads a payload (as the edge stores it).
    pub fn from_value(v: &serde_json::Value) -> Result<ToolJob, ToolJobError> {
        serde_json::from_value(v.clone()).map_err(|e| ToolJobError::Shape(e.to_string()))
    }

    /// Checks every rule: the size, the manifest, the tool, the name, the
    /// files, the timeout. Where the tool runs (its isolation) is the
    /// caller's to decide: the edge routes by it, a node refuses what it
    /// does not run.
    pub fn check(&self) -> Result<CheckedToolJob, ToolJobError> {
        let size = serde_json::to_string(self).map_or(usize::MAX, |s| s.len());
        if size > MAX_TOOL_JOB_BYTES {
            return Err(ToolJobError::TooLarge(size));
        }
        let manifest = Manifest::parse(&self.manifest)?;
        let Some(tool) = manifest.tools.iter().find(|t| t.id == self.tool) else {
            return Err(ToolJobError::NoSuchTool {
                tool: self.tool.chars().take(64).collect(),
                have: manifest
                    .tools
                    .iter()
                    .map(|t| t.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        let name = self.name.clone().unwrap_or_else(|| tool.id.clone());
        if !tool_name_ok(&name) {
            return Err(ToolJobError::Name(name.chars().take(64).collect()));
        }
        if self.files.len() > MAX_FILES {
            return Err(ToolJobError::TooManyFiles(self.files.len()));
        }
        let mut seen = BTreeSet::new();
        let mut files = Vec::new();
        for f in &self.files {
            let shown: String = f.name.chars().take(64).collect();
            if !file_name_ok(&f.name) {
                return Err(ToolJobError::File {
                    name: shown,
                    what: format!("a name is 1-{MAX_FILE_NAME_BYTES} of A-Z, a-z, 0-9, '.', '_' and '-', not starting with '.'"),
                });
            }
            if !seen.insert(f.name.clone()) {
                return Err(ToolJobError::File {
                    name: shown,
                    what: "given twice".into(),
                });
            }
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(&f.base64)
                .map_err(|e| ToolJobError::File {
                    name: shown,
                    what: format!("not standard base64: {e}"),
                })?;
            files.push((f.name.clone(), bytes));
        }
        if let Some(t) = self.timeout {
            if !(1..=MAX_TIMEOUT_S).contains(&t) {
                return Err(ToolJobError::Timeout(t));
            }
        }
        Ok(CheckedToolJob {
            tool: tool.clone(),
            job: self.clone(),
            name,
            files,
        })
    }

    /// The call's time limit.
    pub fn timeout_s(&self) -> u64 {
        self.timeout.unwrap_or(DEFAULT_TIMEOUT_S)
    }
}

impl CheckedToolJob {
    /// The `tools/call` params: the arguments, and with files
    /// `_meta["oz0/files"]` naming where each is inside the server's
    /// `/work` (`work` is how the server sees the work folder).
    pub fn call_params(&self, work: &str) -> serde_json::Value {
        let mut p = serde_json::json!({
            "name": self.name,
            "arguments": serde_json::Value::Object(self.job.arguments.clone()),
        });
        if !self.files.is_empty() {
            let paths: Vec<String> = self
                .files
                .iter()
                .map(|(n, _)| format!("{}/{FILES_DIR}/{n}", work.trim_end_matches('/')))
                .collect();
            p["_meta"] = serde_json::json!({ FILES_META: paths });
        }
        p
    }
}

/// Why a plugin folder cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PluginDirError {
    /// No manifest, or it cannot be read.
    #[error("{path}: {source} (a plugin folder holds its {MANIFEST_FILE})")]
    Read {
        /// The manifest's path.
        path: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// The manifest is a symbolic link or not a file.
    #[error("{0} is not a plain file (a symbolic link or a folder): the plugin's {MANIFEST_FILE} must be a file of the plugin folder")]
    NotAFile(String),
    /// Over the size limit.
    #[error("{0} is over {max} bytes: split the plugin", max = crate::manifest::MAX_MANIFEST_BYTES)]
    TooLarge(String),
    /// It does not hold.
    #[error("{path}: {source}")]
    Invalid {
        /// The manifest's path.
        path: String,
        /// Why.
        source: ManifestError,
    },
}

/// Reads and validates an installed plugin's manifest: the file
/// `oz0-plugin.yaml` in `dir`, never through a symbolic link. Returns its
/// text (what a tool job carries) and the parsed manifest.
pub fn read_plugin_dir(dir: &Path) -> Result<(String, Manifest), PluginDirError> {
    use std::io::Read;
    let path = dir.join(MANIFEST_FILE);
    let shown = path.display().to_string();
    let read = |source| PluginDirError::Read {
        path: shown.clone(),
        source,
    };
    let meta = std::fs::symlink_metadata(&path).map_err(read)?;
    if !meta.is_file() {
        return Err(PluginDirError::NotAFile(shown));
    }
    let f = std::fs::File::open(&path).map_err(read)?;
    // The file opened must be the one checked (no swap in between).
    if !f.metadata().map_err(read)?.is_file() {
        return Err(PluginDirError::NotAFile(shown));
    }
    let limit = crate::manifest::MAX_MANIFEST_BYTES as u64;
    let mut text = String::new();
    f.take(limit + 1).read_to_string(&mut text).map_err(read)?;
    if text.len() as u64 > limit {
        return Err(PluginDirError::TooLarge(shown));
    }
    let m = Manifest::parse(&text).map_err(|source| PluginDirError::Invalid {
        path: shown,
        source,
    })?;
    Ok((text, m))
}

/// Why a file named on a command line cannot go with a call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolFileError {
    /// A path whose last part is no name (`/`, `..`, not UTF-8).
    #[error("--file {spec}: the file has no name to place it by: give NAME=PATH")]
    NoName {
        /// The `[NAME=]PATH` given.
        spec: String,
    },
    /// The file cannot be read.
    #[error("--file {}: {err}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the system said.
        err: std::io::Error,
    },
    /// Over [`MAX_TOOL_JOB_BYTES`].
    #[error("--file {}: over {MAX_TOOL_JOB_BYTES} bytes, the most a tool job carries", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
}

impl ToolFile {
    /// Reads a file for a call, as a command line names it: `[NAME=]PATH`
    /// (NAME: the file's own name unless given), at most
    /// [`MAX_TOOL_JOB_BYTES`].
    pub fn read(spec: &str) -> Result<ToolFile, ToolFileError> {
        use std::io::Read;
        let (name, path) = match spec.split_once('=') {
            Some((n, p)) if !n.contains('/') => (n.to_string(), Path::new(p)),
            _ => {
                let p = Path::new(spec);
                let n = p.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
                    ToolFileError::NoName {
                        spec: spec.to_string(),
                    }
                })?;
                (n.to_string(), p)
            }
        };
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| {
                f.take(MAX_TOOL_JOB_BYTES as u64 + 1)
                    .read_to_end(&mut bytes)
            })
            .map_err(|err| ToolFileError::Read {
                path: path.to_path_buf(),
                err,
            })?;
        if bytes.len() > MAX_TOOL_JOB_BYTES {
            return Err(ToolFileError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        Ok(ToolFile {
            name,
            base64: base64::engine::general_purpose::STANDARD.encode(bytes),
        })
    }
}

/// A tool call as a command line asks for it, from an installed plugin's
/// folder.
#[derive(Debug, Clone, Default)]
pub struct CallArgs {
    /// The manifest's tool id.
    pub tool: String,
    /// The MCP tool to call (default: the tool id).
    pub name: Option<String>,
    /// The call's arguments, JSON text of an object.
    pub arguments: String,
    /// `[NAME=]PATH` of each file.
    pub files: Vec<String>,
    /// Seconds for the whole call.
    pub timeout: Option<u64>,
}

/// Why a tool call asked for on a command line is refused before it
/// leaves.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The plugin's folder cannot be read.
    #[error(transparent)]
    Plugin(#[from] PluginDirError),
    /// `--arguments` is not JSON.
    #[error("--arguments: not JSON ({0}): give an object, e.g. '{{\"path\": \"/work\"}}'")]
    NotJson(serde_json::Error),
    /// `--arguments` is JSON but not an object.
    #[error("--arguments: give a JSON object, e.g. '{{\"path\": \"/work\"}}'")]
    NotObject,
    /// A `--file` cannot go with the call.
    #[error(transparent)]
    File(#[from] ToolFileError),
    /// The job does not hold.
    #[error(transparent)]
    Job(#[from] ToolJobError),
}

impl ToolJob {
    /// The tool job for `args`, with the manifest of the plugin in `dir`
    /// (read without following a link), checked.
    pub fn from_plugin(
        dir: &Path,
        args: &CallArgs,
    ) -> Result<(ToolJob, CheckedToolJob), CallError> {
        let (manifest, _) = read_plugin_dir(dir)?;
        let arguments: serde_json::Value =
            serde_json::from_str(&args.arguments).map_err(CallError::NotJson)?;
        let serde_json::Value::Object(arguments) = arguments else {
            return Err(CallError::NotObject);
        };
        let job = ToolJob {
            manifest,
            tool: args.tool.clone(),
            name: args.name.clone(),
            arguments,
            files: args
                .files
                .iter()
                .map(|f| ToolFile::read(f))
                .collect::<Result<_, _>>()?,
            timeout: args.timeout,
        };
        let checked = job.check()?;
        Ok((job, checked))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Isolation;

    const VM: &str = "name: demo\ntools:\n  - id: echo\n    package: oci:example.invalid/echo@sha256:0000000000000000000000000000000000000000000000000000000000000000\n    isolation: microvm\n    command: [python3, /srv/server.py]\n  - id: fs\n    command: [npx, -y, '@modelcontextprotocol/server-filesystem', /work]\n  - id: box\n    package: oci:example.invalid/box@sha256:0000000000000000000000000000000000000000000000000000000000000000\n";

    fn job(v: serde_json::Value) -> Result<CheckedToolJob, ToolJobError> {
        let mut v = v;
        v["manifest"] = VM.into();
        ToolJob::from_value(&v)?.check()
    }

    #[test]
    fn a_tool_job_names_a_tool_of_its_manifest() {
        let c =
            job(serde_json::json!({"tool": "echo", "name": "add", "arguments": {"a": 1}})).unwrap();
        assert_eq!(c.tool.isolation, Isolation::Microvm);
        assert_eq!(
            c.call_params("/work"),
            serde_json::json!({"name": "add", "arguments": {"a": 1}})
        );
        let c = job(serde_json::json!({"tool": "fs"})).unwrap();
        assert_eq!(c.name, "fs");
        assert_eq!(c.tool.isolation, Isolation::Sandbox);
        let e = job(serde_json::json!({"tool": "nope"}))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("has no tool \"nope\" (it has: echo, fs, box)"),
            "{e}"
        );
        let c = job(serde_json::json!({"tool": "box"})).unwrap();
        assert_eq!(c.tool.isolation, Isolation::Container);
        assert!(container_refusal("box", "no registry").contains("where a node offers runtime.oci"));
        let mut big =
            serde_json::json!({"tool": "echo", "arguments": {"x": "y".repeat(MAX_TOOL_JOB_BYTES)}});
        big["manifest"] = VM.into();
        let e = ToolJob::from_value(&big).unwrap().check().unwrap_err();
        assert!(matches!(e, ToolJobError::TooLarge(_)), "{e:?}");
        let e = job(serde_json::json!({"tool": "echo", "argv": []}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field"), "{e}");
        let e = job(serde_json::json!({"tool": "echo", "name": "a b"})).unwrap_err();
        assert!(matches!(e, ToolJobError::Name(_)), "{e:?}");
        let e = job(serde_json::json!({"tool": "echo", "timeout": 0})).unwrap_err();
        assert_eq!(e, ToolJobError::Timeout(0));
    }

    #[test]
    fn files_are_named_in_meta_and_checked() {
        let c = job(serde_json::json!({"tool": "echo", "files": [
            {"name": "in.csv", "base64": "YSxiCg=="}, {"name": "b.bin", "base64": ""}]}))
        .unwrap();
        assert_eq!(c.files[0], ("in.csv".to_string(), b"a,b\n".to_vec()));
        assert_eq!(
            c.call_params("/work")["_meta"]["oz0/files"],
            serde_json::json!(["/work/.oz0-files/in.csv", "/work/.oz0-files/b.bin"])
        );
        for bad in ["../x", ".hidden", "a/b", "", "a b"] {
            let e =
                job(serde_json::json!({"tool": "echo", "files": [{"name": bad, "base64": ""}]}))
                    .unwrap_err();
            assert!(matches!(e, ToolJobError::File { .. }), "{bad}: {e:?}");
        }
        let e = job(serde_json::json!({"tool": "echo", "files": [{"name": "a", "base64": "!!"}]}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("base64"), "{e}");
        let e = job(serde_json::json!({"tool": "echo", "files": [
            {"name": "a", "base64": ""}, {"name": "a", "base64": ""}]}))
        .unwrap_err()
        .to_string();
        assert!(e.contains("given twice"), "{e}");
    }

    #[test]
    fn a_plugin_folder_is_read_without_following_links() {
        let d = std::env::temp_dir().join(format!("oz0-plugin-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let e = read_plugin_dir(&d).unwrap_err().to_string();
        assert!(e.contains("oz0-plugin.yaml"), "{e}");
        std::fs::write(d.join("real.yaml"), VM).unwrap();
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(d.join("real.yaml"), d.join(MANIFEST_FILE)).unwrap();
            let e = read_plugin_dir(&d).unwrap_err();
            assert!(matches!(e, PluginDirError::NotAFile(_)), "{e:?}");
            std::fs::remove_file(d.join(MANIFEST_FILE)).unwrap();
        }
        std::fs::write(d.join(MANIFEST_FILE), VM).unwrap();
        let (text, m) = read_plugin_dir(&d).unwrap();
        assert_eq!(text, VM);
        assert_eq!(m.tools.len(), 3);
        std::fs::write(
            d.join(MANIFEST_FILE),
            "tools:\n  - id: a\n    isolaton: microvm\n",
        )
        .unwrap();
        let e = read_plugin_dir(&d).unwrap_err().to_string();
        assert!(e.contains("line 3") && e.contains("isolaton"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
