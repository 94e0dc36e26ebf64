//! The PSEC plan: a run's spec translated into the PSEC container request,
//! the job's limits, the environment, the command line and the protected
//! entries, as plain data. This translation is the Windows security
//! boundary: what the container may touch is entirely determined by it.
//!
//! The request mirrors the fields of Windows' PSEC schema
//! (`ProcessSecurityEnvironment.fbs`, as vendored by Microsoft's MXC):
//! `version`, `capabilities`, `ui_restrictions`, `fs_read_write`,
//! `fs_read_only`, `fs_deny`, `network_policy { proxy, egress,
//! allowed_appcontainer_peer, ingress }`. The native launcher encodes it.
//!
//! - **Writable**: the work directory, `--write` folders, the run's own TEMP
//!   (and, on the bridge route, the folder of the proxy's socket).
//! - **Read-only**: the system (`SystemRoot`), `--read` paths, the node
//!   binary, and the protected entries of every writable folder
//!   (`oz0_policy::protected`, the one list).
//! - **Denied**: the node's data directory (and so its keys) and other runs'
//!   folders. Deny paths need PSEC's deny feature: without it the run is
//!   refused before launch, never run with a weaker wall.
//! - **Network**: the proxy only, through the bridge or the relay; no egress
//!   at all without `--allow`/`--forward`.
//! - **Job**: memory, processes, CPU time, UI limits, kill on close.

use oz0_policy::protected::{self, Kind};
use oz0_policy::RunSpec;
use serde::Serialize;

use crate::cmdline::{self, CmdLineError};
use crate::env::{self, ProxyToken, WinEnvError, WinVar};
use crate::probe::{Contract, Feature, PsecFacts};
use crate::relay::{RelayPort, RELAY_PROFILE};
use crate::winpath::{WinPath, WinPathError};

/// `JOB_OBJECT_LIMIT_ACTIVE_PROCESS`.
pub const JOB_LIMIT_ACTIVE_PROCESS: u32 = 0x0000_0008;
/// `JOB_OBJECT_LIMIT_JOB_TIME`.
pub const JOB_LIMIT_JOB_TIME: u32 = 0x0000_0004;
/// `JOB_OBJECT_LIMIT_JOB_MEMORY`.
pub const JOB_LIMIT_JOB_MEMORY: u32 = 0x0000_0200;
/// `JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION`.
pub const JOB_LIMIT_DIE_ON_UNHANDLED_EXCEPTION: u32 = 0x0000_0400;
/// `JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE`.
pub const JOB_LIMIT_KILL_ON_JOB_CLOSE: u32 = 0x0000_2000;

/// UI limits every run gets: other processes' USER handles, clipboard read
/// and write, system parameters, display settings, global atoms, desktops,
/// logoff/shutdown, and input injection (`JOB_OBJECT_UILIMIT_*`, 0x1..0x80
/// and 0x200).
pub const UI_RESTRICTIONS: u32 =
    0x0001 | 0x0002 | 0x0004 | 0x0008 | 0x0010 | 0x0020 | 0x0040 | 0x0080 | 0x0200;

/// The capability the relay route needs (as MXC writes the relay's spec).
pub const PRIVATE_NETWORK_CAPABILITY: &str = "privateNetworkClientServer";

/// Facts of this machine and this run the plan needs, gathered by the
/// launcher (no I/O here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowsHost {
    /// `GetSystemWindowsDirectoryW`, e.g. `C:\Windows`.
    pub system_root: WinPath,
    /// The node binary (read-only to the run: the bridge is this binary).
    pub node_binary: WinPath,
    /// A fresh, empty folder for this run's TEMP, removed after it.
    pub run_temp: WinPath,
    /// Other runs' folders, denied to this one.
    pub other_runs: Vec<WinPath>,
}

/// How this run reaches the egress proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EgressSetup {
    /// The bridge listens on `port` of the container's own loopback and
    /// forwards to the proxy's socket in `sockets_dir`.
    Bridge {
        /// The bridge's port inside the container.
        port: u16,
        /// The run's proxy token.
        token: ProxyToken,
        /// The folder holding the proxy's unix socket for this run.
        sockets_dir: WinPath,
    },
    /// The relay listens on `port` of the machine's 127.0.0.1, as the
    /// relay's own profile, and forwards to the proxy.
    Relay {
        /// The relay's port.
        port: RelayPort,
        /// The run's proxy token.
        token: ProxyToken,
    },
}

/// A PSEC filter action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FilterAction {
    /// Deny.
    Deny,
}

/// `EndpointPolicy`: default action, no rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EndpointPolicy {
    /// Default action.
    pub default_action: FilterAction,
}

/// `IngressPolicy`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IngressPolicy {
    /// Default action for inbound connections.
    pub default_action: FilterAction,
    /// Connections from the host's loopback.
    pub host_loopback: FilterAction,
}

/// `NetworkPolicy`. `proxy` and `egress` are exclusive forms, as in PSEC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetworkPolicy {
    /// The proxy's URL, without credentials (the token travels in the environment only).
    pub proxy_url: Option<String>,
    /// Direct egress (only when there is no proxy: deny everything).
    pub egress: Option<EndpointPolicy>,
    /// The one AppContainer the container may talk to (the relay's profile).
    pub allowed_appcontainer_peer: Option<String>,
    /// The ingress table, when used.
    pub ingress: Option<IngressPolicy>,
}

/// The PSEC container request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PsecRequest {
    /// The contract the spec is written for.
    pub version: Contract,
    /// AppContainer capabilities (none unless the route needs one).
    pub capabilities: Vec<String>,
    /// Win32k stays available (console programs and PowerShell need it).
    pub disallow_win32k_system_calls: bool,
    /// [`UI_RESTRICTIONS`].
    pub ui_restrictions: u32,
    /// Read and write.
    pub fs_read_write: Vec<WinPath>,
    /// Read only.
    pub fs_read_only: Vec<WinPath>,
    /// Denied.
    pub fs_deny: Vec<WinPath>,
    /// Network.
    pub network_policy: NetworkPolicy,
}

/// The job object's limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobLimits {
    /// `LimitFlags` (always kill-on-close and die-on-unhandled-exception).
    pub limit_flags: u32,
    /// `JobMemoryLimit`, bytes.
    pub job_memory_bytes: Option<u64>,
    /// `ActiveProcessLimit`.
    pub active_processes: Option<u32>,
    /// `PerJobUserTimeLimit`, in 100 ns units.
    pub job_user_time_100ns: Option<i64>,
    /// `JOBOBJECT_BASIC_UI_RESTRICTIONS`.
    pub ui_restrictions: u32,
}

/// When a protected entry is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum When {
    /// Always: made as an empty read-only placeholder when missing.
    Always,
    /// Only when the writable folder has a `.git` folder (a `.git` file is read-only as a whole).
    IfGitDir,
}

/// An entry of a writable folder that the run may not change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Protected {
    /// The path.
    pub path: WinPath,
    /// Folder or file (for a placeholder).
    pub kind: &'static str,
    /// When it applies.
    pub when: When,
}

/// Everything the launcher needs, decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PsecPlan {
    /// The container request.
    pub request: PsecRequest,
    /// The job.
    pub job: JobLimits,
    /// Wall time, enforced by the launcher, seconds.
    pub timeout_seconds: Option<u64>,
    /// The environment, sorted, never empty.
    pub env: Vec<WinVar>,
    /// The current directory.
    pub cwd: WinPath,
    /// The program (full path).
    pub program: WinPath,
    /// The quoted command line.
    pub command_line: String,
    /// Protected entries (also in `fs_read_only`).
    pub protected: Vec<Protected>,
    /// Folders the launcher holds open without delete sharing for the run's
    /// duration, so that they cannot be renamed aside: each writable folder,
    /// its `.git` and its protected folders.
    pub hold_open: Vec<WinPath>,
}

/// Why a run cannot be planned. Every variant names the value and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// A path is not a Windows path.
    #[error("{flag}: {source}")]
    Path {
        /// The flag.
        flag: &'static str,
        /// What is wrong.
        source: WinPathError,
    },
    /// A drive root or the system folder named writable.
    #[error("{flag} {path}: {why}")]
    Reserved {
        /// The flag.
        flag: &'static str,
        /// The path.
        path: WinPath,
        /// Why and what to do.
        why: &'static str,
    },
    /// A path overlaps the data directory (compared as Windows compares: ignoring case).
    #[error("{flag} {path} overlaps the node's data directory {data_dir} (Windows ignores case in paths), which no run may see: name a folder outside it")]
    DataDir {
        /// The flag.
        flag: &'static str,
        /// The path.
        path: WinPath,
        /// The data directory.
        data_dir: WinPath,
    },
    /// A path overlaps another run's folder.
    #[error(
        "{flag} {path} overlaps another run's folder {other}: name a folder of this run's own"
    )]
    OtherRun {
        /// The flag.
        flag: &'static str,
        /// The path.
        path: WinPath,
        /// The other run's folder.
        other: WinPath,
    },
    /// Two paths Windows sees as one.
    #[error("{0} and {1} are the same folder on Windows (paths ignore case): name it once")]
    SameIgnoringCase(WinPath, WinPath),
    /// Deny paths without the feature.
    #[error("this run needs PSEC deny paths (to hide {0}), and this build's PSEC (contract {1}) does not report that feature: the run is refused rather than run without it")]
    DenyUnsupported(WinPath, Contract),
    /// Egress asked for but not set up, or set up but not asked for.
    #[error("{0}")]
    EgressMismatch(&'static str),
    /// Environment.
    #[error(transparent)]
    Env(#[from] WinEnvError),
    /// Command line.
    #[error(transparent)]
    CmdLine(#[from] CmdLineError),
}

fn win(flag: &'static str, p: &oz0_policy::AbsPath) -> Result<WinPath, PlanError> {
    WinPath::from_abs(p).map_err(|source| PlanError::Path { flag, source })
}

/// Translates a run into its PSEC plan. Pure: no file is looked at.
pub fn plan(
    spec: &RunSpec,
    host: &WindowsHost,
    psec: &PsecFacts,
    egress: Option<&EgressSetup>,
) -> Result<PsecPlan, PlanError> {
    let NamedPaths {
        data_dir,
        work,
        read,
        write,
    } = named_paths(spec)?;
    check_named(&data_dir, &work, &read, &write, host)?;

    // Deny list first: it decides whether this build can run it at all.
    let mut fs_deny = vec![data_dir.clone()];
    fs_deny.extend(host.other_runs.iter().cloned());
    if !psec.supports(Feature::DenyPaths) {
        return Err(PlanError::DenyUnsupported(data_dir, psec.contract));
    }

    let mut fs_read_write = vec![work.clone()];
    fs_read_write.extend(write.iter().cloned());
    fs_read_write.push(host.run_temp.clone());

    let (protected, hold_open) = protected_entries(std::iter::once(&work).chain(write.iter()))?;

    let mut fs_read_only = vec![host.system_root.clone()];
    fs_read_only.extend(read.iter().cloned());
    fs_read_only.push(host.node_binary.clone());
    fs_read_only.extend(protected.iter().map(|p| p.path.clone()));

    let Network {
        policy: network_policy,
        capabilities,
        proxy,
        sockets_dir,
    } = network(spec.egress.is_enabled(), psec, egress)?;
    fs_read_write.extend(sockets_dir);

    let version = if network_policy.ingress.is_some() {
        Contract::V1_1
    } else {
        Contract::V1_0
    };

    let mut env = env::windows_env(&spec.env, &host.system_root, &host.run_temp, proxy)?;
    // The run is told its wall: a PSEC container, at tier 0, for no
    // self-test has proven PSEC's wall yet (a preview).
    env::tell_wall(&mut env, "tier=0;wall=psec");
    let command_line = cmdline::command_line(&spec.command)?;
    let program = WinPath::parse(&spec.command[0]).expect("checked by command_line");

    Ok(PsecPlan {
        request: PsecRequest {
            version,
            capabilities,
            disallow_win32k_system_calls: false,
            ui_restrictions: UI_RESTRICTIONS,
            fs_read_write,
            fs_read_only,
            fs_deny,
            network_policy,
        },
        job: job_limits(&spec.limits),
        timeout_seconds: spec.limits.timeout_seconds,
        env,
        cwd: work,
        program,
        command_line,
        protected,
        hold_open,
    })
}

/// The run's folders as Windows paths.
struct NamedPaths {
    data_dir: WinPath,
    work: WinPath,
    read: Vec<WinPath>,
    write: Vec<WinPath>,
}

/// Each folder of the spec as a Windows path, named by its flag when it is
/// not one.
fn named_paths(spec: &RunSpec) -> Result<NamedPaths, PlanError> {
    let data_dir = win("--data-dir", &spec.data_dir)?;
    let work = win("--work", &spec.work)?;
    let read = spec
        .read
        .iter()
        .map(|p| win("--read", p))
        .collect::<Result<Vec<_>, _>>()?;
    let write = spec
        .write
        .iter()
        .map(|p| win("--write", p))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(NamedPaths {
        data_dir,
        work,
        read,
        write,
    })
}

/// Refuses a folder named twice (ignoring case), a whole drive, the
/// Windows folder made writable, and one overlapping the data directory or
/// another run's folder.
fn check_named(
    data_dir: &WinPath,
    work: &WinPath,
    read: &[WinPath],
    write: &[WinPath],
    host: &WindowsHost,
) -> Result<(), PlanError> {
    let named = std::iter::once(("--work", work, true))
        .chain(read.iter().map(|p| ("--read", p, false)))
        .chain(write.iter().map(|p| ("--write", p, true)));
    let mut seen: Vec<&WinPath> = vec![];
    for (flag, path, writable) in named {
        if let Some(prev) = seen
            .iter()
            .find(|s| s.starts_with_ci(path) && path.starts_with_ci(s))
        {
            return Err(PlanError::SameIgnoringCase((*prev).clone(), path.clone()));
        }
        seen.push(path);
        if path.is_drive_root() {
            return Err(PlanError::Reserved {
                flag,
                path: path.clone(),
                why: "is a whole drive: name a folder on it",
            });
        }
        if writable && path.overlaps_ci(&host.system_root) {
            return Err(PlanError::Reserved {
                flag,
                path: path.clone(),
                why: "is or holds the Windows folder, which runs read but never write: use a folder of its own",
            });
        }
        if path.overlaps_ci(data_dir) {
            return Err(PlanError::DataDir {
                flag,
                path: path.clone(),
                data_dir: data_dir.clone(),
            });
        }
        if let Some(other) = host.other_runs.iter().find(|o| path.overlaps_ci(o)) {
            return Err(PlanError::OtherRun {
                flag,
                path: path.clone(),
                other: other.clone(),
            });
        }
    }
    Ok(())
}

/// A run's network: the container's policy, its capabilities, the proxy
/// its environment names, and the bridge's sockets folder it writes.
struct Network<'a> {
    policy: NetworkPolicy,
    capabilities: Vec<String>,
    proxy: Option<(u16, &'a ProxyToken)>,
    sockets_dir: Option<WinPath>,
}

/// The network of a run that asks for egress (`wants`) or not, over the
/// route set up for it; Err when the two do not go together.
fn network<'a>(
    wants: bool,
    psec: &PsecFacts,
    egress: Option<&'a EgressSetup>,
) -> Result<Network<'a>, PlanError> {
    Ok(match (wants, egress) {
        (false, None) => Network {
            policy: NetworkPolicy {
                proxy_url: None,
                egress: Some(EndpointPolicy {
                    default_action: FilterAction::Deny,
                }),
                allowed_appcontainer_peer: None,
                ingress: ingress_table(psec),
            },
            capabilities: vec![],
            proxy: None,
            sockets_dir: None,
        },
        (true, Some(EgressSetup::Bridge { port, token, sockets_dir })) => Network {
            policy: NetworkPolicy {
                proxy_url: Some(format!("http://127.0.0.1:{port}")),
                egress: None,
                allowed_appcontainer_peer: None,
                ingress: ingress_table(psec),
            },
            capabilities: vec![],
            proxy: Some((*port, token)),
            sockets_dir: Some(sockets_dir.clone()),
        },
        // Windows takes the relay's spec only as MXC writes it: the
        // private-network capability, the relay's profile as the one peer,
        // and no ingress table (with one the container does not start).
        (true, Some(EgressSetup::Relay { port, token })) => Network {
            policy: NetworkPolicy {
                proxy_url: Some(format!("http://127.0.0.1:{}", port.get())),
                egress: None,
                allowed_appcontainer_peer: Some(RELAY_PROFILE.to_string()),
                ingress: None,
            },
            capabilities: vec![PRIVATE_NETWORK_CAPABILITY.to_string()],
            proxy: Some((port.get(), token)),
            sockets_dir: None,
        },
        (true, None) => {
            return Err(PlanError::EgressMismatch(
                "the run asks for egress (--allow/--forward) but no route to the proxy was set up: start the bridge or relay first",
            ))
        }
        (false, Some(_)) => {
            return Err(PlanError::EgressMismatch(
                "a route to the proxy was set up for a run without egress: a run without --allow/--forward gets no network",
            ))
        }
    })
}

/// The job object's limits for the run's: kill-on-close and no error
/// dialogs always, memory, processes and CPU time when asked for.
fn job_limits(l: &oz0_policy::Limits) -> JobLimits {
    let mut limit_flags = JOB_LIMIT_KILL_ON_JOB_CLOSE | JOB_LIMIT_DIE_ON_UNHANDLED_EXCEPTION;
    if l.memory_mib.is_some() {
        limit_flags |= JOB_LIMIT_JOB_MEMORY;
    }
    if l.processes.is_some() {
        limit_flags |= JOB_LIMIT_ACTIVE_PROCESS;
    }
    if l.cpu_seconds.is_some() {
        limit_flags |= JOB_LIMIT_JOB_TIME;
    }
    JobLimits {
        limit_flags,
        job_memory_bytes: l.memory_mib.map(|m| m * 1024 * 1024),
        active_processes: l.processes,
        // At most MAX_SECONDS once validated; a limit beyond what Windows
        // counts is as long as it counts, never wrapped.
        job_user_time_100ns: l.cpu_seconds.map(|s| {
            i64::try_from(s)
                .ok()
                .and_then(|s| s.checked_mul(10_000_000))
                .unwrap_or(i64::MAX)
        }),
        ui_restrictions: UI_RESTRICTIONS,
    }
}

/// The ingress table (deny inbound, deny the host's loopback) where the
/// contract and feature allow it; elsewhere PSEC's default holds, which the
/// `ingress` self-test property shows.
fn ingress_table(psec: &PsecFacts) -> Option<IngressPolicy> {
    psec.supports(Feature::IngressTable)
        .then_some(IngressPolicy {
            default_action: FilterAction::Deny,
            host_loopback: FilterAction::Deny,
        })
}

fn protected_entries<'a>(
    roots: impl Iterator<Item = &'a WinPath>,
) -> Result<(Vec<Protected>, Vec<WinPath>), PlanError> {
    let kind = |k: Kind| match k {
        Kind::Dir => "dir",
        Kind::File | Kind::SelfRef => "file",
    };
    let join = |root: &WinPath, name: &str| {
        root.join(name).map_err(|source| PlanError::Path {
            flag: "protected",
            source,
        })
    };
    let mut out = vec![];
    let mut hold = vec![];
    for root in roots {
        hold.push(root.clone());
        for (name, k) in protected::READ_ONLY_NAMES {
            let path = join(root, name)?;
            if *k == Kind::Dir {
                hold.push(path.clone());
            }
            out.push(Protected {
                path,
                kind: kind(*k),
                when: When::Always,
            });
        }
        let git = join(root, protected::GIT_DIR)?;
        hold.push(git.clone());
        for (rel, k) in protected::git_held() {
            let path = rel
                .split('/')
                .try_fold(git.clone(), |p, name| join(&p, name))?;
            if k == Kind::Dir {
                hold.push(path.clone());
            }
            out.push(Protected {
                path,
                kind: kind(k),
                when: When::IfGitDir,
            });
        }
    }
    Ok((out, hold))
}

#[cfg(test)]
pub(crate) mod tests;
