//! What the Linux, Windows and macOS nodes' command lines share: the flags
//! of `sandbox run` that name what a run may touch and its limits, and
//! parsing with clap's exit statuses.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Args, Parser};
use oz0_core::exit::Exit;
use oz0_policy::Limits;

/// Why a flag's value cannot be used: each names the flag, the value and,
/// where one exists, the fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FlagError {
    /// A path a run's spec takes that is not UTF-8.
    #[error("{flag} {path:?} is not valid UTF-8")]
    NotUtf8 {
        /// The flag (or what the path is).
        flag: String,
        /// The path.
        path: PathBuf,
    },
    /// A path that cannot be made absolute.
    #[error("{flag} {}: {source}", path.display())]
    NotAbsolute {
        /// The flag.
        flag: &'static str,
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `--env NAME` of a variable this process does not have.
    #[error("--env {0}: {0} is not set (or not UTF-8) in this environment; give --env {0}=VALUE or export it")]
    EnvUnset(String),
    /// `--env` of what is not a variable a run may be given.
    #[error("--env: {0}")]
    Env(#[from] oz0_policy::env::EnvError),
    /// `--tenant` of what is not a tenant's name.
    #[error("not a tenant name: lower-case letters, digits, - and _ (at most 63)")]
    Tenant,
    /// `--name` of what is not a node's name.
    #[error("not a node name: a name is {}", oz0_edge::sanitize::NODE_NAME_FORM)]
    NodeName,
    /// An enrolment token file that does not hold one token.
    #[error("--enrolment-token-file {} must hold one token (no spaces): the tenant's enrolment token the edge was started with", .0.display())]
    Token(PathBuf),
}

impl From<FlagError> for String {
    fn from(e: FlagError) -> String {
        e.to_string()
    }
}

/// `sandbox run`'s paths, egress and limits, the same on every platform.
#[derive(Debug, Clone, Args)]
pub struct RunFlags {
    /// The work directory: writable, and the command's current directory.
    #[arg(long, value_name = "DIR")]
    pub work: PathBuf,
    /// Also let the command read this path (repeatable).
    #[arg(long = "read", value_name = "PATH")]
    pub read: Vec<PathBuf>,
    /// Also let the command write this path (repeatable).
    #[arg(long = "write", value_name = "PATH")]
    pub write: Vec<PathBuf>,
    /// Let the command reach HOST[:PORT] through the node's egress proxy.
    #[arg(long = "allow", value_name = "HOST[:PORT]")]
    pub allow: Vec<String>,
    /// Let the command reach the node-local 127.0.0.1:PORT through the proxy.
    #[arg(long = "forward", value_name = "PORT")]
    pub forward: Vec<u16>,
    /// Kill the run after S seconds of wall time (exit status 124).
    #[arg(long, value_name = "S")]
    pub timeout: Option<u64>,
    /// Memory of all the run's processes together, in MiB.
    #[arg(long, value_name = "MiB")]
    pub memory: Option<u64>,
    /// Processes of the run at once.
    #[arg(long, value_name = "N")]
    pub processes: Option<u32>,
    /// CPU time of all the run's processes together, in seconds.
    #[arg(long = "cpu-seconds", value_name = "S")]
    pub cpu_seconds: Option<u64>,
}

/// A path as the run's spec takes it: UTF-8, or the error naming the flag.
pub fn utf8(what: &str, p: &Path) -> Result<String, FlagError> {
    p.to_str()
        .map(str::to_string)
        .ok_or_else(|| FlagError::NotUtf8 {
            flag: what.to_string(),
            path: p.to_path_buf(),
        })
}

impl RunFlags {
    /// The work folder, the --read and the --write paths, in UTF-8.
    pub fn paths(&self) -> Result<(String, Vec<String>, Vec<String>), FlagError> {
        let list = |flag: &str, ps: &[PathBuf]| {
            ps.iter()
                .map(|p| utf8(flag, p))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok((
            utf8("--work", &self.work)?,
            list("--read", &self.read)?,
            list("--write", &self.write)?,
        ))
    }

    /// The same flags with the work folder, --read and --write paths made
    /// absolute (against the current folder), as a run's spec takes them.
    // The Linux node's flags are absolute by its own parser.
    #[cfg_attr(target_os = "linux", allow(dead_code))]
    pub fn absolute(&self) -> Result<RunFlags, FlagError> {
        let abs = |p: &Path, flag: &'static str| {
            std::path::absolute(p).map_err(|source| FlagError::NotAbsolute {
                flag,
                path: p.to_path_buf(),
                source,
            })
        };
        let all = |ps: &[PathBuf], flag: &'static str| {
            ps.iter()
                .map(|p| abs(p, flag))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(RunFlags {
            work: abs(&self.work, "--work")?,
            read: all(&self.read, "--read")?,
            write: all(&self.write, "--write")?,
            ..self.clone()
        })
    }

    /// The limits asked for, with the run's memory file systems' size.
    pub fn limits(&self, tmp_mib: Option<u64>) -> Limits {
        Limits {
            memory_mib: self.memory,
            processes: self.processes,
            cpu_seconds: self.cpu_seconds,
            timeout_seconds: self.timeout,
            tmp_mib,
        }
    }
}

/// One `--env NAME=VALUE`, or `--env NAME` with the value of NAME from
/// this process's environment, as a run's variable (every node's).
pub fn env_var(e: &str) -> Result<oz0_policy::EnvVar, FlagError> {
    let v = if e.contains('=') {
        oz0_policy::EnvVar::parse(e)
    } else {
        let value = std::env::var(e).map_err(|_| FlagError::EnvUnset(e.to_string()))?;
        oz0_policy::EnvVar::new(e, &value)
    };
    Ok(v?)
}

/// Parses `args` (the program name first): the command, or the exit status
/// (0 after `--help` or `--version`, 2 for a usage error, said on stderr).
pub fn parse<C: Parser>(args: impl IntoIterator<Item = OsString>) -> Result<C, i32> {
    let mut cmd = C::command();
    let parsed = cmd
        .try_get_matches_from_mut(args)
        .and_then(|mut m| C::from_arg_matches_mut(&mut m))
        .map_err(|e| e.format(&mut cmd));
    // The command tree is built once per process and never freed: freeing
    // clap's whole tree cost 3% of a `sandbox run`'s CPU, for memory the
    // process gives back when it ends.
    std::mem::forget(cmd);
    parsed.map_err(|e| {
        let _ = e.print();
        match e.kind() {
            clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                Exit::Ok.code()
            }
            _ => Exit::Usage.code(),
        }
    })
}

/// How a node joins an edge: the same flags on every platform.
#[derive(Debug, Clone, Args)]
pub struct EdgeFlags {
    /// The edge to register with and take work from: https://HOST:PORT (or
    /// http:// on loopback). Repeatable, for replicas of one edge on one
    /// PostgreSQL: the node talks to one at a time and fails over to the
    /// next when it cannot reach it.
    #[arg(long, value_name = "URL", requires_all = ["tenant", "enrolment_token_file"])]
    pub edge: Vec<String>,
    /// The tenant this node works for (with --edge).
    #[arg(long, value_name = "TENANT", requires = "edge", value_parser = tenant_name)]
    pub tenant: Option<String>,
    /// The CA certificate(s) the edge's HTTPS certificate must be signed by
    /// (PEM) [default: the system's CAs].
    #[arg(long = "edge-ca", value_name = "FILE", requires = "edge")]
    pub edge_ca: Option<PathBuf>,
    /// A file only the node's user can read (mode 0600 on Linux) holding
    /// the tenant's enrolment token (with --edge).
    #[arg(long = "enrolment-token-file", value_name = "FILE", requires = "edge")]
    pub enrolment_token_file: Option<PathBuf>,
}

/// `--tenant`: a tenant's name as the edge spells it.
fn tenant_name(s: &str) -> Result<String, FlagError> {
    if oz0_edge::routing::is_tenant(s) {
        Ok(s.to_string())
    } else {
        Err(FlagError::Tenant)
    }
}

/// `--name`: a node's name as the edge takes it (a host name), or the
/// error naming the form and an example.
pub fn node_name(s: &str) -> Result<String, FlagError> {
    if oz0_edge::sanitize::is_usable_node_name(s) {
        Ok(s.to_string())
    } else {
        Err(FlagError::NodeName)
    }
}

/// The enrolment token in a token file's `text`: one word, or the error.
pub fn enrolment_token(text: &str, file: &Path) -> Result<String, FlagError> {
    let token = text.trim().to_string();
    if token.is_empty() || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(FlagError::Token(file.to_path_buf()));
    }
    Ok(token)
}

/// The node's data directory: one flag for every command that uses it, on
/// every platform.
#[derive(Debug, Clone, Args)]
pub struct DataDirArg {
    #[cfg_attr(
        target_os = "linux",
        doc = "The node's data directory, which no run may see
[default: $XDG_DATA_HOME/oz0-node or ~/.local/share/oz0-node]."
    )]
    #[cfg_attr(
        not(target_os = "linux"),
        doc = "The node's data directory, which no run may see [default:
%LOCALAPPDATA%\\oz0-node on Windows, ~/Library/Application
Support/oz0-node on macOS]."
    )]
    #[arg(long = "data-dir", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

/// Why the node has no data directory.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataDirError {
    /// Linux's default could not be found.
    #[cfg(target_os = "linux")]
    #[error(transparent)]
    Linux(#[from] oz0_linux::host::HostError),
    /// The platform's default needs a variable that is not set.
    #[cfg(not(target_os = "linux"))]
    #[error("{0} is not set, so the node has no default data directory: name one with --data-dir")]
    NoDefault(&'static str),
    /// The path named could not be made absolute.
    #[cfg(not(target_os = "linux"))]
    #[error("--data-dir {path}: {source}")]
    Absolute {
        /// The path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

impl DataDirArg {
    /// The folder named, or Linux's default (under the XDG data home).
    #[cfg(target_os = "linux")]
    pub fn resolve(&self) -> Result<PathBuf, DataDirError> {
        Ok(oz0_linux::host::data_dir(self.data_dir.as_deref())?)
    }

    /// The folder named, or the platform's default; an absolute path.
    #[cfg(not(target_os = "linux"))]
    pub fn resolve(&self) -> Result<PathBuf, DataDirError> {
        #[cfg(windows)]
        let (var, under) = ("LOCALAPPDATA", "oz0-node");
        #[cfg(not(windows))]
        let (var, under) = ("HOME", "Library/Application Support/oz0-node");
        let d = match &self.data_dir {
            Some(d) => d.clone(),
            None => match std::env::var_os(var) {
                Some(base) if !base.is_empty() => Path::new(&base).join(under),
                _ => return Err(DataDirError::NoDefault(var)),
            },
        };
        std::path::absolute(&d).map_err(|source| DataDirError::Absolute {
            path: d.display().to_string(),
            source,
        })
    }
}

/// Where the node's parts are: one set of flags, the same for every
/// command that runs or checks sandboxes.
#[cfg(target_os = "linux")]
#[derive(Debug, Clone, Args)]
pub struct HostArgs {
    #[command(flatten)]
    pub data: DataDirArg,
    /// Where run jobs (cgroups) are made [default: probed: the node's own
    /// delegated cgroup v2, else the `oz0` folder `oz0-node setup cgroups` made].
    #[arg(long = "cgroup-root", value_name = "DIR")]
    pub cgroup_root: Option<PathBuf>,
    /// The bubblewrap binary, used as it is [default: the first bwrap on
    /// PATH, then /usr/bin/bwrap, that root owns and only root may write,
    /// with its folders].
    #[arg(long, value_name = "PATH")]
    pub bwrap: Option<PathBuf>,
}

#[cfg(target_os = "linux")]
impl HostArgs {
    /// The host context's parts.
    pub fn config(&self) -> oz0_linux::HostConfig {
        oz0_linux::HostConfig {
            data_dir: self.data.data_dir.clone(),
            cgroup_root: self.cgroup_root.clone(),
            bwrap: self.bwrap.clone(),
            ..Default::default()
        }
    }
}

/// Default `--keep-jobs-days`: job records older than this go.
pub const DEFAULT_KEEP_DAYS: u64 = 7;
/// Default `--keep-jobs-mib`: the records together stay at or under this.
pub const DEFAULT_KEEP_MIB: u64 = 1024;

/// `run` flags.
#[cfg(target_os = "linux")]
#[derive(Debug, clap::Args)]
pub struct NodeArgs {
    /// auto: the strongest wall this machine proves; none: tier 0, no
    /// sandbox (work runs with the node's own permissions); psec: Windows only.
    #[arg(long, value_enum, default_value_t = Sandbox::Auto)]
    pub sandbox: Sandbox,
    /// The node's data directory, where jobs go, and bubblewrap.
    #[command(flatten)]
    pub host: HostArgs,
    #[command(flatten)]
    pub daemon: DaemonFlags,
    /// Jobs run at once, each under its own lease, work folder and limits
    /// [default: this machine's processors].
    #[arg(long, value_name = "N", requires = "edge", value_parser = at_least_one)]
    pub jobs: Option<usize>,
    #[command(flatten)]
    pub tools: ToolEnvArg,
    /// Container tools (an image without isolation: microvm): the
    /// registries their images may come from. With at least one, and a
    /// proven tier 1, the node offers runtime.oci and runs each container
    /// tool's server in its image's root inside tier 1.
    #[command(flatten)]
    pub oci: OciArgs,
    /// Job records (<data-dir>/jobs/<job>/: output, status, result) older
    /// than this many days are removed, at the node's start and after each
    /// job.
    #[arg(long = "keep-jobs-days", value_name = "DAYS", default_value_t = DEFAULT_KEEP_DAYS, requires = "edge")]
    pub keep_jobs_days: u64,
    /// The job records together stay under this many MiB: beyond it the
    /// oldest go (a running job's record is never removed; a running job whose
    /// output passes it is stopped).
    #[arg(long = "keep-jobs-mib", value_name = "MIB", default_value_t = DEFAULT_KEEP_MIB, requires = "edge")]
    pub keep_jobs_mib: u64,
    /// Weaken the self-test's own sandboxes at PROPERTY, to show that the
    /// check fails (the node is then tier 0).
    #[arg(long = "inject-fault", value_name = "PROPERTY", hide = true)]
    pub inject_fault: Option<String>,
    /// Weaken the self-test of runs in an image's root (its tests only):
    /// a property's fault, or no image's root at all (no-image).
    #[arg(long = "inject-image-fault", value_name = "PROPERTY|no-image", hide = true,
          value_parser = image_fault)]
    pub inject_image_fault: Option<oz0_linux::image_check::ImageFault>,
    /// How often the machine is probed again for changed facts, in seconds.
    #[arg(
        long = "recheck-secs",
        value_name = "S",
        default_value_t = 300,
        hide = true
    )]
    pub recheck_secs: u64,
}

/// `--jobs`: one or more.
#[cfg(target_os = "linux")]
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("give at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// `--tool-env`, on the platforms that run tool jobs (Linux, and a Mac's
/// microVM tools).
#[cfg(unix)]
#[derive(Debug, Clone, clap::Args)]
pub struct ToolEnvArg {
    /// A variable of this node's environment that tool jobs may be given,
    /// by the name a plugin's manifest lists under settings or secrets
    /// (repeatable). A tool job naming any other is refused: a job's
    /// manifest never reaches a variable the operator did not list.
    #[arg(long = "tool-env", value_name = "NAME", requires = "edge", value_parser = env_name)]
    pub tool_env: Vec<String>,
}

/// `--tool-env`: a variable's name.
#[cfg(unix)]
fn env_name(s: &str) -> Result<String, String> {
    oz0_policy::env::EnvName::new(s)
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

/// `--sandbox`.
#[cfg(target_os = "linux")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Sandbox {
    /// The strongest wall the machine proves.
    Auto,
    /// No sandbox (tier 0).
    None,
    /// Windows 11's PSEC (Windows only).
    Psec,
}

/// Where images come from and how much of them the node keeps.
#[cfg(target_os = "linux")]
#[derive(Debug, Clone, Args)]
pub struct OciArgs {
    /// A registry the node may pull from, HOST[:PORT] as images name it
    /// (plain HTTP on loopback only, HTTPS elsewhere) (repeatable)
    #[arg(long = "oci-registry", value_name = "HOST[:PORT]")]
    pub registries: Vec<String>,
    /// Registry credentials: an auth.json (containers' format) that only
    /// this user can read
    #[arg(long = "oci-auth", value_name = "FILE")]
    pub auth: Option<PathBuf>,
    /// The CA certificates (PEM) registries' certificates must be signed by
    /// [default: the system's CAs]
    #[arg(long = "oci-ca", value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// The image cache's bound, in MiB of image data; the least recently
    /// used images nothing holds are removed past it
    #[arg(long = "oci-cache-mib", value_name = "MiB", default_value_t = oz0_oci::cache::DEFAULT_MAX_BYTES >> 20)]
    pub cache_mib: u64,
}

/// Reads `--inject-image-fault`.
#[cfg(target_os = "linux")]
fn image_fault(s: &str) -> Result<oz0_linux::image_check::ImageFault, String> {
    use oz0_linux::image_check::ImageFault;
    match s {
        "no-image" => Ok(ImageFault::NoImage),
        _ => oz0_policy::facts::Property::parse(s)
            .map(ImageFault::Property)
            .ok_or_else(|| "one of the eight properties, or no-image".to_string()),
    }
}

/// The daemon's flags every platform's `run` has: how it links to its
/// edge and takes work.
#[derive(Debug, clap::Args)]
pub struct DaemonFlags {
    /// Start, publish the facts, and exit instead of staying up (with
    /// --edge: register and report the facts, then exit).
    #[arg(long)]
    pub once: bool,
    #[command(flatten)]
    pub link: EdgeFlags,
    #[cfg_attr(
        target_os = "linux",
        doc = "Where each job's fresh work directory is made (never under the data
directory) [default: a private 0700 folder under the temp dir]."
    )]
    #[cfg_attr(
        not(target_os = "linux"),
        doc = "Where each job's fresh work folder is made (never under the data
directory) [default: <temporary folder>/oz0-node-work]."
    )]
    #[arg(long = "work-root", value_name = "DIR", requires = "edge")]
    pub work_root: Option<PathBuf>,
    /// The name shown on the edge's Nodes page: lower-case letters, digits,
    /// '.' and '-', e.g. build-01 [default: this machine's name, when it is one].
    #[arg(long, value_name = "NAME", requires = "edge", value_parser = node_name)]
    pub name: Option<String>,
    /// The edge holds each of the node's polls for work up to 15 s and
    /// answers the moment a job is queued: this is how long the node waits
    /// before asking again when the edge answers at once with nothing (an
    /// edge that does not hold polls, or while this node waits for an
    /// operator's approval), in milliseconds (50 to 60000).
    #[arg(
        long = "poll-ms",
        value_name = "MS",
        default_value_t = 2000,
        requires = "edge"
    )]
    pub poll_ms: u64,
}

impl DaemonFlags {
    /// How long to wait between polls of an empty queue.
    pub fn poll_every(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.poll_ms.clamp(50, 60_000))
    }
}

/// What `plugin call` asks, on every platform that has it.
#[cfg(any(target_os = "linux", windows))]
#[derive(Debug, Args)]
pub struct CallFlags {
    /// The installed plugin's folder (holding oz0-plugin.yaml).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// The manifest's tool id (the server to start).
    #[arg(value_name = "TOOL")]
    pub tool: String,
    /// The MCP tool to call [default: the tool id].
    #[arg(long, value_name = "MCP_TOOL")]
    pub name: Option<String>,
    /// The call's arguments, a JSON object.
    #[arg(long, value_name = "JSON", default_value = "{}")]
    pub arguments: String,
    /// A file for the call, placed at /work/.oz0-files/NAME (NAME: the
    /// file's own name unless given) (repeatable).
    #[arg(long, value_name = "[NAME=]PATH")]
    pub file: Vec<String>,
    /// The folder the server works in (the VM's /work); on Linux one that
    /// is or passes through a symbolic link is refused [default: a new
    /// private folder, removed after the call].
    #[arg(long, value_name = "DIR")]
    pub work: Option<PathBuf>,
    /// Seconds for the server's start, the handshake and the call [default: 300].
    #[arg(long, value_name = "S")]
    pub timeout: Option<u64>,
    /// Print the whole end (result, phases, reason) as one JSON document.
    #[arg(long)]
    pub json: bool,
}

#[cfg(any(target_os = "linux", windows))]
impl CallFlags {
    /// The call, checked as every tool job is (its manifest read from
    /// DIR): why not, as `plugin call` says it.
    pub fn checked(&self) -> Result<oz0_plugin::job::CheckedToolJob, String> {
        let args = oz0_plugin::job::CallArgs {
            tool: self.tool.clone(),
            name: self.name.clone(),
            arguments: self.arguments.clone(),
            files: self.file.clone(),
            timeout: self.timeout,
        };
        oz0_plugin::job::ToolJob::from_plugin(&self.dir, &args)
            .map(|(_, checked)| checked)
            .map_err(|e| e.to_string())
    }
}
