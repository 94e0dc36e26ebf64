//! Policy in, plan out: the security boundary of tier 1 on Linux.
//!
//! [`plan`] is a pure function of the validated spec and the host facts. It
//! decides every mount, every protected path, the environment, the Landlock
//! rules and the seccomp profile; [`Plan::bwrap_args`] renders the mounts and
//! namespace flags as bubblewrap arguments. bubblewrap's protection is
//! entirely determined by those arguments, so this file is reviewed and
//! table-tested like the boundary it is.
//!
//! What the plan guarantees:
//! - Reads are deny-by-default: only the system paths, the node binary, the
//!   work directory and the caller's `--read`/`--write` paths are mounted.
//!   The node's data directory and home directories are never mounted (the
//!   spec already refuses any root that overlaps the data directory).
//! - No caller path is reached through a symbolic link: the bound source is
//!   exactly the path the caller named and checked on the host.
//! - Protected paths are mounted read-only over the writable folders, with
//!   empty read-only placeholders for the ones that do not exist yet; a
//!   protected path that is a symbolic link refuses the run. bubblewrap
//!   mounts the existing ones; the stage mounts the placeholders (see
//!   [`Plan::placeholders`]) before it gives up every capability.
//! - The run's `/dev` holds only [`DEV_NODES`] and the devices the launcher
//!   adds; the stage builds it from the host's, bound at
//!   [`HOST_DEV_INSIDE`] for it alone (see `devfs`).
//! - The root of the sandbox is read-only; TEMP is a private tmpfs of a
//!   bounded size and number of files, as is the run's `/dev`.

use oz0_policy::env::DEFAULT_PATH;
use oz0_policy::protected::{self, Kind};
use oz0_policy::{AbsPath, RunSpec};
use serde::{Deserialize, Serialize};

use crate::host::{Entry, FileId, HostFacts, ProtectedFacts};
use crate::seccomp::Profile;

/// Where the node binary is inside every run.
pub const NODE_BIN_INSIDE: &str = "/oz0/oz0-node";
/// The hidden argument that makes the node binary act as the in-sandbox stage.
pub const STAGE_ARG: &str = "__oz0-stage";
/// The run's private TEMP inside (and its `HOME`).
pub const TMP_INSIDE: &str = "/tmp";

/// Descriptor numbers bubblewrap and the stage are started with.
pub mod fds {
    /// bubblewrap reads its arguments from here (`--args`), so its command
    /// line — visible inside as `/proc/1/cmdline` — names no path or value.
    pub const ARGS: i32 = 3;
    /// bubblewrap's JSON status (`--json-status-fd`): the sandbox's pid.
    pub const JSON_STATUS: i32 = 4;
    /// The stage's configuration (a sealed memory file).
    pub const CONFIG: i32 = 5;
    /// The stage's report to the launcher (close-on-exec in the stage: EOF
    /// means the command was executed).
    pub const STATUS: i32 = 6;
    /// The caller's real stderr; bubblewrap's own stderr is captured.
    pub const STDERR: i32 = 7;
    /// The node's word that the run is recorded and its placeholders are in
    /// place, or why not (see `hold`); every stage waits for it.
    pub const READY: i32 = 8;
    /// With egress, the run's channel to the egress proxy (one end of a
    /// connected unix socket pair), which the stage hands to the bridge.
    pub const EGRESS: i32 = 9;
}

/// A namespace of the run's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Namespace {
    /// User (and, inside, one more of the stage's own: see `hold`).
    User,
    /// IPC.
    Ipc,
    /// Process ids: the stage is the run's init.
    Pid,
    /// Network: only the run's own loopback.
    Net,
    /// Host name.
    Uts,
    /// cgroup.
    Cgroup,
}

impl Namespace {
    /// Its name (`pid`).
    pub fn name(self) -> &'static str {
        match self {
            Namespace::User => "user",
            Namespace::Ipc => "ipc",
            Namespace::Pid => "pid",
            Namespace::Net => "net",
            Namespace::Uts => "uts",
            Namespace::Cgroup => "cgroup",
        }
    }

    /// bubblewrap's flag for it (`--unshare-pid`).
    pub fn bwrap_flag(self) -> &'static str {
        match self {
            Namespace::User => "--unshare-user",
            Namespace::Ipc => "--unshare-ipc",
            Namespace::Pid => "--unshare-pid",
            Namespace::Net => "--unshare-net",
            Namespace::Uts => "--unshare-uts",
            Namespace::Cgroup => "--unshare-cgroup",
        }
    }
}

/// The namespaces every run gets.
pub const NAMESPACES: &[Namespace] = &[
    Namespace::User,
    Namespace::Ipc,
    Namespace::Pid,
    Namespace::Net,
    Namespace::Uts,
    Namespace::Cgroup,
];

/// One mount operation, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "op")]
pub enum Mount {
    /// Read-only bind of host `src` at `dest`.
    RoBind {
        /// Host path.
        src: AbsPath,
        /// Path inside.
        dest: AbsPath,
    },
    /// Writable bind.
    Bind {
        /// Host path.
        src: AbsPath,
        /// Path inside.
        dest: AbsPath,
    },
    /// A symbolic link inside.
    Symlink {
        /// Link text.
        target: String,
        /// Path inside.
        dest: AbsPath,
    },
    /// A fresh procfs for the run's pid namespace.
    Proc {
        /// Path inside.
        dest: AbsPath,
    },
    /// A private tmpfs of a bounded size (bubblewrap mounts it; the stage
    /// sets its size and number of files, which bubblewrap cannot bound,
    /// before anything of the caller runs).
    Tmpfs {
        /// Path inside.
        dest: AbsPath,
        /// Its size.
        #[serde(flatten)]
        size: TmpfsSize,
    },
    /// A host folder bound with device access: the host's `/dev`, aside,
    /// for the stage to build the run's from.
    DevBind {
        /// Host path.
        src: AbsPath,
        /// Path inside.
        dest: AbsPath,
    },
}

impl Mount {
    fn dest(&self) -> &AbsPath {
        match self {
            Mount::RoBind { dest, .. }
            | Mount::Bind { dest, .. }
            | Mount::DevBind { dest, .. }
            | Mount::Symlink { dest, .. }
            | Mount::Proc { dest }
            | Mount::Tmpfs { dest, .. } => dest,
        }
    }
}

/// How a protected path is held for the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Protection {
    /// Exists; mounted read-only over itself.
    ReadOnly,
    /// Did not exist; an empty read-only placeholder holds its place (and is
    /// removed after the run if still empty).
    Placeholder,
    /// `.git` folder: mounted over itself, so it cannot be renamed or
    /// replaced; its contents other than hooks and config stay writable.
    Unmovable,
    /// `.git` did not exist: a repository the run creates is its own, and
    /// its hooks are the run's writing.
    AbsentGit,
}

/// One protected path and how it is held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Protected {
    /// The path (same inside and outside).
    pub path: AbsPath,
    /// How.
    pub how: Protection,
}

/// A placeholder bubblewrap creates on the host as a mount point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placeholder {
    /// Host path.
    pub path: AbsPath,
    /// File or folder.
    pub kind: PlaceholderKind,
}

/// A bind of a caller's path or a protected path as the stage must find it
/// inside the run: at `path`, a mount of its own whose object is the one the
/// node opened without links (`id`), read-only when `readonly`. bubblewrap
/// binds by path, and another run able to write a parent folder could swap
/// a link in between the node's look and the bind; the stage refuses the run
/// when what is mounted is not what was looked at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// The path (the same inside and on the host).
    pub path: AbsPath,
    /// The object the node opened there.
    pub id: FileId,
    /// Mounted read-only.
    pub readonly: bool,
}

impl Expect {
    /// `path` bound onto itself.
    fn of(host: &HostFacts, path: &AbsPath, readonly: bool) -> Result<Expect, PlanError> {
        Expect::at(host, path, path.clone(), readonly)
    }

    /// Host `src` bound at `dest`.
    fn at(
        host: &HostFacts,
        src: &AbsPath,
        dest: AbsPath,
        readonly: bool,
    ) -> Result<Expect, PlanError> {
        let id = host
            .id(src)
            .ok_or_else(|| PlanError::NoFacts(src.clone()))?;
        Ok(Expect {
            path: dest,
            id,
            readonly,
        })
    }
}

/// A protected path that exists, bound onto itself by the stage: `id` is
/// the object the node looked at there (the stage refuses the run if it
/// finds another), `readonly` or only unmovable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hold {
    /// The path (the same inside and on the host).
    pub path: AbsPath,
    /// The object the node opened there.
    pub id: FileId,
    /// Read-only, or only unmovable.
    pub readonly: bool,
}

/// The kind of a placeholder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlaceholderKind {
    /// An empty folder.
    Dir,
    /// An empty file.
    File,
    /// A file holding `.` and a line break: `commondir` naming `.git`
    /// itself, which git takes as no common directory (an empty one would
    /// stop git).
    SelfRef,
}

/// Landlock rules, with paths as seen inside the sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockRules {
    /// Read and execute.
    pub read: Vec<String>,
    /// Everything.
    pub write: Vec<String>,
}

/// The size of a memory file system of the run: its `/tmp` and its `/dev`
/// (with `/dev/shm`), each of which the stage mounts with this size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TmpfsSize {
    /// Bytes, in MiB.
    pub size_mib: u64,
    /// Files (inodes).
    pub inodes: u64,
}

impl TmpfsSize {
    /// The tmpfs mount options that bound it: `size=…,nr_inodes=…`.
    pub fn options(&self) -> String {
        format!("size={}m,nr_inodes={}", self.size_mib, self.inodes)
    }
}

/// The empty file placeholders of files are bound from.
pub const PLACEHOLDER_FILE: &str = "empty";
/// The empty folder placeholders of folders are bound from.
pub const PLACEHOLDER_DIR: &str = "empty.d";
/// The file `SelfRef` placeholders are bound from (see [`SELF_REF`]).
pub const PLACEHOLDER_SELF: &str = "self";
/// What a [`PlaceholderKind::SelfRef`] placeholder holds.
pub const SELF_REF: &[u8] = b".\n";
/// Where the stage makes the placeholders' sources ([`PLACEHOLDER_FILE`],
/// [`PLACEHOLDER_DIR`]) inside the run, on the run's own root, as a
/// read-only mount of their own.
pub const PLACEHOLDERS_INSIDE: &str = "/oz0/ph";

impl PlaceholderKind {
    /// The name of the source of a placeholder of this kind, in
    /// [`PLACEHOLDERS_INSIDE`].
    pub fn source_name(self) -> &'static str {
        match self {
            PlaceholderKind::File => PLACEHOLDER_FILE,
            PlaceholderKind::Dir => PLACEHOLDER_DIR,
            PlaceholderKind::SelfRef => PLACEHOLDER_SELF,
        }
    }
}

/// Where bubblewrap binds the host's `/dev` for the stage, which builds the
/// run's `/dev` from it and detaches it before anything of the caller runs
/// (see `devfs`).
pub const HOST_DEV_INSIDE: &str = "/oz0/dev";
/// The device nodes of every run's `/dev`, as bubblewrap's `--dev` has them.
pub const DEV_NODES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// The capabilities bubblewrap leaves to the stage, in the run's first user
/// namespace only: to build `/dev`, mount the placeholders and make the
/// run's root read-only (`CAP_SYS_ADMIN`), to forbid nested user namespaces
/// there (`CAP_SYS_RESOURCE`, for `user.max_user_namespaces`), and, for a
/// node running as root, to map uid 0 in the user namespace it then makes
/// (`CAP_SETFCAP`: the kernel asks it of whoever makes a namespace that
/// maps uid 0). The stage moves into that namespace and gives up every
/// capability before anything of the caller runs (see `hold`).
pub const STAGE_CAPS: &[&str] = &["CAP_SYS_ADMIN", "CAP_SYS_RESOURCE", "CAP_SETFCAP"];

/// What the launcher adds to a run beyond the caller's spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extras {
    /// The seccomp profile (a VM monitor gets [`Profile::Vmm`]).
    pub profile: Profile,
    /// Host devices the run may use (e.g. `/dev/kvm` for a VM monitor).
    pub devices: Vec<AbsPath>,
    /// The run's egress proxy socket on the host, mounted at [`EGRESS_SOCKET_INSIDE`].
    pub egress_socket: Option<AbsPath>,
    /// A deliberate weakness, for the self-test's own failure tests only.
    pub fault: Option<Fault>,
    /// A VM monitor's secret variables: a microVM tool's settings and
    /// secrets, each under [`VM_SECRET_PREFIX`]`<name>`, which the VMM reads
    /// from its own environment by name (smolvm's `--secret-env`), so no
    /// value is on a command line. Set by the node itself, never from a
    /// caller's `--env`; any other name refuses the plan.
    pub vm_secrets: Vec<(String, String)>,
}

/// The prefix of every [`Extras::vm_secrets`] name.
pub const VM_SECRET_PREFIX: &str = "OZ0_VMENV_";

/// A deliberate weakness of one run. **It weakens the sandbox.** Only the
/// self-test injects one, into its own runs, to prove that its checks can
/// fail; a self-test with a fault injected never reports a tier above 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Share the host's pid namespace (background processes survive).
    SharePid,
    /// Share the host's network namespace.
    ShareNet,
    /// Bind this host folder (e.g. the data directory) into the run.
    Expose(AbsPath),
    /// Do not hold protected paths.
    NoProtectedPaths,
    /// Pass this node variable to the command.
    LeakEnv(String, String),
    /// Bind this host folder, writable, at another path outside every
    /// Landlock rule (the self-test's proof that Landlock alone refuses
    /// what the mounts would allow).
    ExposeAt {
        /// Host folder.
        src: AbsPath,
        /// Where inside.
        dest: AbsPath,
    },
    /// Do not apply Landlock (the proof that the mounts alone hide what
    /// they must).
    NoLandlock,
    /// Do not install the seccomp filter (the control run that shows which
    /// calls this kernel itself allows).
    NoSeccomp,
}

impl Default for Extras {
    fn default() -> Self {
        Extras {
            profile: Profile::Default,
            devices: Vec::new(),
            egress_socket: None,
            fault: None,
            vm_secrets: Vec::new(),
        }
    }
}

/// Where the run's egress proxy socket is inside.
pub const EGRESS_SOCKET_INSIDE: &str = "/oz0/egress.sock";

/// The whole plan for one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// Namespace flags (always [`NAMESPACES`] unless a self-test fault).
    pub namespaces: Vec<Namespace>,
    /// Mount operations, in order.
    pub mounts: Vec<Mount>,
    /// The device nodes of the run's `/dev` (names under `/dev`), which the
    /// stage builds from the host's (see `devfs`).
    pub devices: Vec<String>,
    /// The size of the run's `/tmp` and of its `/dev`.
    pub tmp: TmpfsSize,
    /// Protected paths and how each is held.
    pub protected: Vec<Protected>,
    /// Placeholders the node makes on the host (while bubblewrap builds the
    /// sandbox) and the stage mounts read-only; removed after the run.
    pub placeholders: Vec<Placeholder>,
    /// What bubblewrap must have mounted where, of the caller's paths: the
    /// stage checks each before anything of the caller runs (see
    /// `hold::verify_binds`).
    pub expect: Vec<Expect>,
    /// Protected paths that exist, each bound onto itself by the stage (by
    /// descriptor, checked to be the object the node looked at), parents
    /// first: read-only, or unmovable (`.git`, `.git/objects`...).
    pub holds: Vec<Hold>,
    /// Every mount point the run must have, and no other (see
    /// `mount_points` in this module).
    pub mount_points: Vec<String>,
    /// Exactly the command's environment.
    pub env: Vec<(String, String)>,
    /// The command's working directory.
    pub cwd: AbsPath,
    /// The command.
    pub argv: Vec<String>,
    /// Landlock rules (second layer).
    pub landlock: LandlockRules,
    /// Landlock is not applied (a self-test fault only).
    pub landlock_off: bool,
    /// The seccomp profile.
    pub seccomp: Profile,
    /// No seccomp filter is installed (a self-test fault only).
    pub seccomp_off: bool,
    /// New unix sockets refused to the command.
    pub deny_unix_sockets: bool,
}

/// Why no plan could be made. Each names the path and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// A caller path does not exist.
    #[error("{0} does not exist: create it first, or name another path")]
    Missing(AbsPath),
    /// A caller path is, or passes through, a symbolic link.
    #[error("{path} is reached through a symbolic link (it resolves to {resolved}): name {resolved} itself")]
    Symlinked {
        /// The path named.
        path: AbsPath,
        /// Where it leads.
        resolved: String,
    },
    /// The work directory is not a directory.
    #[error("--work {0} is not a directory")]
    WorkNotDir(AbsPath),
    /// A socket, device or fifo.
    #[error(
        "{0} is not a file or directory (a socket, device or fifo cannot be shared with a run)"
    )]
    Special(AbsPath),
    /// A protected path is a symbolic link.
    #[error("{0} is a protected path and a symbolic link, which a run could use to reach elsewhere: remove the link (it was not made by the node)")]
    ProtectedSymlink(AbsPath),
    /// A protected path is also named writable.
    #[error("--write {0} names a protected path (agents' settings, shell start-up files, .git/hooks, .git/config), which runs never write")]
    ProtectedWritable(AbsPath),
    /// The node binary lies in a writable folder of the run.
    #[error("the node binary {node} is inside {folder}, which the run may write: the run could replace the binary that starts every later run (and this one's stage); install oz0-node outside the folders you give runs")]
    NodeInWritable {
        /// The node binary.
        node: AbsPath,
        /// The writable folder.
        folder: AbsPath,
    },
    /// A device outside /dev.
    #[error("{0} is not under /dev: only devices are bound with device access")]
    NotADevice(AbsPath),
    /// A VM secret variable not named `OZ0_VMENV_<NAME>`.
    #[error("{0:?} is not a VM secret variable (OZ0_VMENV_ followed by letters, digits and _)")]
    BadVmSecret(String),
    /// The host facts do not match the spec (a bug).
    #[error("host facts do not cover {0}")]
    NoFacts(AbsPath),
}

/// `base` joined with the relative path `rel` (names separated by `/`).
pub(crate) fn join_all(base: &AbsPath, rel: &str) -> AbsPath {
    rel.split('/').fold(base.clone(), |p, name| {
        p.join(name).expect("a constant name")
    })
}

fn abs(s: &str) -> AbsPath {
    AbsPath::new(s).expect("constant or checked path is valid")
}

/// Makes the plan. Pure: everything about the host comes from `host`.
pub fn plan(spec: &RunSpec, host: &HostFacts, extras: &Extras) -> Result<Plan, PlanError> {
    let mut mounts = Vec::new();
    let mut landlock = LandlockRules::default();
    let mut expect = Vec::new();

    // 1. The system, read-only. Merged-/usr links stay links.
    for (path, entry) in &host.system {
        match entry {
            Entry::Dir => {
                mounts.push(Mount::RoBind {
                    src: path.clone(),
                    dest: path.clone(),
                });
                landlock.read.push(path.to_string());
                expect.push(Expect::of(host, path, true)?);
            }
            Entry::Symlink(target) => mounts.push(Mount::Symlink {
                target: target.clone(),
                dest: path.clone(),
            }),
            Entry::Missing | Entry::File | Entry::Other => {}
        }
    }
    // 2. Kernel interfaces and the private TEMP.
    mounts.push(Mount::Proc { dest: abs("/proc") });
    mounts.push(Mount::DevBind {
        src: abs("/dev"),
        dest: abs(HOST_DEV_INSIDE),
    });
    expect.push(Expect::at(host, &abs("/dev"), abs(HOST_DEV_INSIDE), false)?);
    let tmp = TmpfsSize {
        size_mib: spec.limits.tmp_size_mib(),
        inodes: spec.limits.tmp_inodes(),
    };
    mounts.push(Mount::Tmpfs {
        dest: abs(TMP_INSIDE),
        size: tmp,
    });
    landlock
        .write
        .extend(["/proc", "/dev", TMP_INSIDE].map(String::from));
    // 3. The node binary, for the stage.
    mounts.push(Mount::RoBind {
        src: host.node_exe.clone(),
        dest: abs(NODE_BIN_INSIDE),
    });
    landlock.read.push(NODE_BIN_INSIDE.to_string());
    expect.push(Expect::at(
        host,
        &host.node_exe,
        abs(NODE_BIN_INSIDE),
        true,
    )?);
    // 3b. The run's own proxy socket (its only way out), and devices.
    if let Some(sock) = &extras.egress_socket {
        mounts.push(Mount::RoBind {
            src: sock.clone(),
            dest: abs(EGRESS_SOCKET_INSIDE),
        });
    }
    let mut devices: Vec<String> = DEV_NODES.iter().map(|d| d.to_string()).collect();
    for d in &extras.devices {
        match d.as_str().strip_prefix("/dev/") {
            Some(name) if !devices.iter().any(|n| n == name) => devices.push(name.to_string()),
            Some(_) => {}
            None => return Err(PlanError::NotADevice(d.clone())),
        }
    }

    // 4. The caller's paths and the protected paths, parents before children.
    let mut user = Vec::new();
    let roots = std::iter::once((&spec.work, true))
        .chain(spec.read.iter().map(|p| (p, false)))
        .chain(spec.write.iter().map(|p| (p, true)));
    for (path, writable) in roots {
        let fact = host
            .roots
            .iter()
            .find(|r| &r.path == path)
            .ok_or_else(|| PlanError::NoFacts(path.clone()))?;
        match &fact.entry {
            Entry::Missing => return Err(PlanError::Missing(path.clone())),
            Entry::Other => return Err(PlanError::Special(path.clone())),
            Entry::Symlink(_) => {
                return Err(PlanError::Symlinked {
                    path: path.clone(),
                    resolved: fact.canonical.clone().unwrap_or_default(),
                })
            }
            Entry::Dir | Entry::File => {}
        }
        if path == &spec.work && fact.entry != Entry::Dir {
            return Err(PlanError::WorkNotDir(path.clone()));
        }
        if writable {
            user.push(Mount::Bind {
                src: path.clone(),
                dest: path.clone(),
            });
            landlock.write.push(path.to_string());
            if host.node_exe.starts_with(path) {
                return Err(PlanError::NodeInWritable {
                    node: host.node_exe.clone(),
                    folder: path.clone(),
                });
            }
        } else {
            user.push(Mount::RoBind {
                src: path.clone(),
                dest: path.clone(),
            });
            landlock.read.push(path.to_string());
        }
        expect.push(Expect::of(host, path, !writable)?);
    }

    let mut protected = Vec::new();
    let mut placeholders = Vec::new();
    let mut holds = Vec::new();
    let mut holder = Holder {
        host,
        protected: &mut protected,
        placeholders: &mut placeholders,
        holds: &mut holds,
    };
    if extras.fault != Some(Fault::NoProtectedPaths) {
        for facts in &host.protected {
            holder.root(facts)?;
        }
    }
    // Parents before children (a stable sort keeps the order otherwise).
    holds.sort_by_key(|h| h.path.depth());
    match &extras.fault {
        Some(Fault::Expose(p)) => user.push(Mount::RoBind {
            src: p.clone(),
            dest: p.clone(),
        }),
        Some(Fault::ExposeAt { src, dest }) => user.push(Mount::Bind {
            src: src.clone(),
            dest: dest.clone(),
        }),
        _ => {}
    }
    for w in &spec.write {
        if protected
            .iter()
            .any(|p| p.how != Protection::Unmovable && w.starts_with(&p.path))
        {
            return Err(PlanError::ProtectedWritable(w.clone()));
        }
    }
    // A stable sort by depth puts every mount after the mounts of its parents.
    user.sort_by_key(|m| m.dest().depth());
    mounts.extend(user);
    // The stage binds the protected paths after all of these, then mounts
    // the placeholders (so they are never hidden under a later mount), then
    // makes the root read-only.

    let mut env: Vec<(String, String)> = spec
        .env
        .iter()
        .map(|v| (v.name.as_str().to_string(), v.value.clone()))
        .collect();
    if !env.iter().any(|(n, _)| n == "PATH") {
        env.push(("PATH".into(), DEFAULT_PATH.into()));
    }
    env.push(("HOME".into(), TMP_INSIDE.into()));
    env.push(("TMPDIR".into(), TMP_INSIDE.into()));
    if let Some(Fault::LeakEnv(n, v)) = &extras.fault {
        env.push((n.clone(), v.clone()));
    }
    for (n, v) in &extras.vm_secrets {
        let rest = n.strip_prefix(VM_SECRET_PREFIX).unwrap_or("");
        let ok = !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !ok || env.iter().any(|(e, _)| e == n) {
            return Err(PlanError::BadVmSecret(n.clone()));
        }
        env.push((n.clone(), v.clone()));
    }
    let namespaces = NAMESPACES
        .iter()
        .copied()
        .filter(|n| match extras.fault {
            Some(Fault::SharePid) => *n != Namespace::Pid,
            Some(Fault::ShareNet) => *n != Namespace::Net,
            _ => true,
        })
        .collect();

    let mount_points = mount_points(&mounts, &host.mounts, &devices, &holds, &placeholders);
    Ok(Plan {
        namespaces,
        mounts,
        devices,
        tmp,
        protected,
        placeholders,
        expect,
        holds,
        mount_points,
        env,
        cwd: spec.work.clone(),
        argv: spec.command.clone(),
        landlock,
        landlock_off: extras.fault == Some(Fault::NoLandlock),
        seccomp: extras.profile,
        seccomp_off: extras.fault == Some(Fault::NoSeccomp),
        deny_unix_sockets: !spec.allow_unix_sockets && extras.profile == Profile::Default,
    })
}

/// Every mount point the run has once the stage is done, sorted (a path
/// mounted on twice is there twice): the root; each of `mounts` but the
/// host's `/dev`, which the stage detaches, with the host's mount points
/// (`host_mounts`) under each folder bound (a bind takes them along); the
/// stage's `/dev` and its devices; the placeholders' sources; the holds and
/// the placeholders. The stage finds exactly these, or refuses the run
/// (see `hold::verify_mount_table`).
fn mount_points(
    mounts: &[Mount],
    host_mounts: &[String],
    devices: &[String],
    holds: &[Hold],
    placeholders: &[Placeholder],
) -> Vec<String> {
    let mut points = vec!["/".to_string()];
    for m in mounts {
        match m {
            Mount::RoBind { src, dest } | Mount::Bind { src, dest } => {
                points.push(dest.to_string());
                for h in host_mounts {
                    if let Some(rest) = h.strip_prefix(src.as_str()) {
                        if rest.starts_with('/') && src.as_str() != "/" {
                            points.push(format!("{dest}{rest}"));
                        } else if src.as_str() == "/" && h != "/" {
                            points.push(format!("{}{h}", dest.as_str().trim_end_matches('/')));
                        }
                    }
                }
            }
            Mount::Proc { dest } | Mount::Tmpfs { dest, .. } => points.push(dest.to_string()),
            Mount::DevBind { .. } | Mount::Symlink { .. } => {}
        }
    }
    points.push("/dev".into());
    points.extend(devices.iter().map(|d| format!("/dev/{d}")));
    points.push("/dev/pts".into());
    if !placeholders.is_empty() {
        points.push(PLACEHOLDERS_INSIDE.into());
    }
    points.extend(holds.iter().map(|h| h.path.to_string()));
    points.extend(placeholders.iter().map(|p| p.path.to_string()));
    points.sort();
    points
}

/// Collects the holds, reports and placeholders of the protected paths.
struct Holder<'a> {
    host: &'a HostFacts,
    protected: &'a mut Vec<Protected>,
    placeholders: &'a mut Vec<Placeholder>,
    holds: &'a mut Vec<Hold>,
}

impl Holder<'_> {
    /// Binds what is at `path` onto itself (the stage does it): read-only,
    /// or (`!readonly`) so that it cannot be renamed or replaced.
    fn bind_in_place(&mut self, path: AbsPath, readonly: bool) -> Result<(), PlanError> {
        let id = self
            .host
            .id(&path)
            .ok_or_else(|| PlanError::NoFacts(path.clone()))?;
        self.holds.push(Hold {
            path: path.clone(),
            id,
            readonly,
        });
        let how = if readonly {
            Protection::ReadOnly
        } else {
            Protection::Unmovable
        };
        self.protected.push(Protected { path, how });
        Ok(())
    }

    /// Holds `path` read-only: over itself if it exists, with an empty
    /// placeholder of `kind` if it does not; a link refuses the run.
    fn hold(&mut self, path: AbsPath, kind: Kind, entry: &Entry) -> Result<(), PlanError> {
        match entry {
            Entry::Symlink(_) => Err(PlanError::ProtectedSymlink(path)),
            Entry::Missing => {
                let kind = match kind {
                    Kind::Dir => PlaceholderKind::Dir,
                    Kind::File => PlaceholderKind::File,
                    Kind::SelfRef => PlaceholderKind::SelfRef,
                };
                self.placeholders.push(Placeholder {
                    path: path.clone(),
                    kind,
                });
                self.protected.push(Protected {
                    path,
                    how: Protection::Placeholder,
                });
                Ok(())
            }
            Entry::Dir | Entry::File | Entry::Other => self.bind_in_place(path, true),
        }
    }

    fn root(&mut self, facts: &ProtectedFacts) -> Result<(), PlanError> {
        let root = &facts.root;
        for (name, kind, entry) in &facts.names {
            self.hold(root.join(name).expect("constant name"), *kind, entry)?;
        }
        let git = root.join(protected::GIT_DIR).expect("constant name");
        match &facts.git {
            Entry::Symlink(_) => Err(PlanError::ProtectedSymlink(git)),
            Entry::Missing => {
                self.protected.push(Protected {
                    path: git,
                    how: Protection::AbsentGit,
                });
                Ok(())
            }
            Entry::File | Entry::Other => self.hold(git, Kind::File, &facts.git),
            Entry::Dir => self.git(&git, facts),
        }
    }

    /// The rule of `.git` (see `oz0_policy::protected`): unmovable, every
    /// entry git does not write in ordinary work read-only (held when
    /// missing), `objects` and `objects/info` unmovable and the alternates
    /// in it held.
    fn git(&mut self, git: &AbsPath, facts: &ProtectedFacts) -> Result<(), PlanError> {
        self.bind_in_place(git.clone(), false)?;
        let at = |name: &str| git.join(name).map_err(|_| PlanError::NoFacts(git.clone()));
        for (name, entry) in &facts.git_entries {
            if name == "objects" {
                match entry {
                    Entry::Dir => self.bind_in_place(at(name)?, false)?,
                    Entry::Symlink(_) => return Err(PlanError::ProtectedSymlink(at(name)?)),
                    _ => {}
                }
            } else if !protected::git_writable(name) {
                let kind = protected::GIT_HELD
                    .iter()
                    .find(|(n, _)| n == name)
                    .map_or(Kind::File, |(_, k)| *k);
                self.hold(at(name)?, kind, entry)?;
            }
        }
        let info = join_all(git, protected::GIT_OBJECTS_INFO);
        match &facts.objects_info {
            Entry::Dir => {
                self.bind_in_place(info.clone(), false)?;
                for (name, kind, entry) in &facts.objects_held {
                    self.hold(info.join(name).expect("constant name"), *kind, entry)?;
                }
            }
            Entry::Symlink(_) => return Err(PlanError::ProtectedSymlink(info)),
            // Without objects/info no alternates can be read; a run that
            // makes it is the look's.
            _ => {}
        }
        Ok(())
    }
}

impl Plan {
    /// The bubblewrap options (without the program name), to be passed
    /// through `--args` so that none of them is on a command line. The
    /// command, which bubblewrap takes only from its real command line, is
    /// [`Plan::bwrap_command`].
    pub fn bwrap_args(&self) -> Vec<String> {
        let mut a: Vec<String> = self
            .namespaces
            .iter()
            .map(|n| n.bwrap_flag().to_string())
            .collect();
        // The stage is the run's init (see `stage`); without a pid
        // namespace of its own (a self-test fault) there is none to be.
        if self.namespaces.contains(&Namespace::Pid) {
            a.push("--as-pid-1".into());
        }
        for s in [
            "--die-with-parent",
            "--new-session",
            "--clearenv",
            "--cap-drop",
            "ALL",
            "--hostname",
            "oz0",
        ] {
            a.push(s.into());
        }
        for c in STAGE_CAPS {
            a.extend(["--cap-add".into(), c.to_string()]);
        }
        for m in &self.mounts {
            match m {
                Mount::RoBind { src, dest } => {
                    a.extend(["--ro-bind".into(), src.to_string(), dest.to_string()])
                }
                Mount::Bind { src, dest } => {
                    a.extend(["--bind".into(), src.to_string(), dest.to_string()])
                }
                Mount::Symlink { target, dest } => {
                    a.extend(["--symlink".into(), target.clone(), dest.to_string()])
                }
                Mount::Proc { dest } => a.extend(["--proc".into(), dest.to_string()]),
                // The stage sizes it (see `hold::prepare_mounts`).
                Mount::Tmpfs { dest, .. } => a.extend(["--tmpfs".into(), dest.to_string()]),
                Mount::DevBind { src, dest } => {
                    a.extend(["--dev-bind".into(), src.to_string(), dest.to_string()])
                }
            }
        }
        a.extend([
            "--chdir".into(),
            self.cwd.to_string(),
            "--json-status-fd".into(),
            fds::JSON_STATUS.to_string(),
        ]);
        a
    }

    /// bubblewrap's real command line after its program name: it names only
    /// the args descriptor and the stage, nothing of the run.
    pub fn bwrap_command() -> Vec<String> {
        vec![
            "--args".into(),
            fds::ARGS.to_string(),
            "--".into(),
            NODE_BIN_INSIDE.into(),
            STAGE_ARG.into(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::RootFact;
    use oz0_policy::RunRequest;

    fn p(s: &str) -> AbsPath {
        AbsPath::new(s).unwrap()
    }

    fn spec(edit: impl FnOnce(&mut RunRequest)) -> RunSpec {
        let mut r = RunRequest {
            work: "/w".into(),
            data_dir: "/home/u/.local/share/oz0-node".into(),
            command: vec!["make".into(), "test".into()],
            ..Default::default()
        };
        edit(&mut r);
        RunSpec::new(r).unwrap()
    }

    fn root(path: &str, entry: Entry) -> RootFact {
        RootFact {
            path: p(path),
            canonical: (entry != Entry::Missing).then(|| path.to_string()),
            entry,
        }
    }

    /// The protected facts of `rootp` with `.git` as `git` and, when it is a
    /// folder, the entries `entries` at its top (as `gather` records them:
    /// the held names that are missing added, `objects/info` a folder when
    /// `objects` is one, with no alternates).
    fn prot(rootp: &str, git: Entry, entries: &[(&str, Entry)]) -> ProtectedFacts {
        let mut git_entries: Vec<(String, Entry)> = entries
            .iter()
            .map(|(n, e)| (n.to_string(), e.clone()))
            .collect();
        if git == Entry::Dir {
            for (n, _) in protected::GIT_HELD {
                if !git_entries.iter().any(|(m, _)| m == n) {
                    git_entries.push((n.to_string(), Entry::Missing));
                }
            }
        }
        git_entries.sort_by(|a, b| a.0.cmp(&b.0));
        let objects = entries.contains(&("objects", Entry::Dir));
        ProtectedFacts {
            root: p(rootp),
            names: protected::READ_ONLY_NAMES
                .iter()
                .map(|(n, k)| (*n, *k, Entry::Missing))
                .collect(),
            git,
            git_entries,
            objects_info: if objects { Entry::Dir } else { Entry::Missing },
            objects_held: if objects {
                protected::GIT_OBJECTS_HELD
                    .iter()
                    .map(|(n, k)| (*n, *k, Entry::Missing))
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    /// Host facts with an identity for every caller path and protected
    /// name that exists (as `gather` records them).
    fn host(roots: Vec<RootFact>, protected: Vec<ProtectedFacts>) -> HostFacts {
        let mut ids = Vec::new();
        let mut id = |path: AbsPath, entry: &Entry| {
            if matches!(entry, Entry::Dir | Entry::File | Entry::Other) {
                let ino = ids.len() as u64 + 100;
                ids.push((
                    path,
                    FileId {
                        major: 8,
                        minor: 1,
                        ino,
                    },
                ));
            }
        };
        for r in &roots {
            id(r.path.clone(), &r.entry);
        }
        for s in ["/usr", "/etc", "/opt/oz0/oz0-node", "/dev"] {
            id(p(s), &Entry::Dir);
        }
        for f in &protected {
            for (n, _, e) in &f.names {
                id(f.root.join(n).unwrap(), e);
            }
            let git = f.root.join(protected::GIT_DIR).unwrap();
            id(git.clone(), &f.git);
            for (n, e) in &f.git_entries {
                id(git.join(n).unwrap(), e);
            }
            let info = join_all(&git, protected::GIT_OBJECTS_INFO);
            id(info.clone(), &f.objects_info);
            for (n, _, e) in &f.objects_held {
                id(info.join(n).unwrap(), e);
            }
        }
        HostFacts {
            system: vec![
                (p("/usr"), Entry::Dir),
                (p("/bin"), Entry::Symlink("usr/bin".into())),
                (p("/lib32"), Entry::Missing),
                (p("/etc"), Entry::Dir),
            ],
            node_exe: p("/opt/oz0/oz0-node"),
            roots,
            protected,
            ids,
            mounts: vec!["/".into()],
        }
    }

    fn basic_host() -> HostFacts {
        host(
            vec![root("/w", Entry::Dir)],
            vec![prot("/w", Entry::Missing, &[])],
        )
    }

    #[test]
    fn golden_minimal_run() {
        let plan = plan(&spec(|_| {}), &basic_host(), &Extras::default()).unwrap();
        let args = plan.bwrap_args().join(" ");
        let expect = "--unshare-user --unshare-ipc --unshare-pid --unshare-net --unshare-uts --unshare-cgroup \
--as-pid-1 --die-with-parent --new-session --clearenv --cap-drop ALL --hostname oz0 \
--cap-add CAP_SYS_ADMIN --cap-add CAP_SYS_RESOURCE --cap-add CAP_SETFCAP \
--ro-bind /usr /usr --symlink usr/bin /bin --ro-bind /etc /etc --proc /proc --dev-bind /dev /oz0/dev --tmpfs /tmp \
--ro-bind /opt/oz0/oz0-node /oz0/oz0-node --bind /w /w \
--chdir /w --json-status-fd 4";
        assert_eq!(args, expect);
        // Every protected name of the empty work folder is a placeholder the
        // stage mounts (from sources it makes at /oz0/ph); the stage, not
        // bubblewrap, then makes the root read-only.
        assert_eq!(
            plan.placeholders.len(),
            protected::READ_ONLY_NAMES.len(),
            "{:?}",
            plan.placeholders
        );
        assert!(plan.placeholders.contains(&Placeholder {
            path: p("/w/.oz0"),
            kind: PlaceholderKind::Dir
        }));
        assert_eq!(PLACEHOLDERS_INSIDE, "/oz0/ph");
        assert_eq!(PlaceholderKind::Dir.source_name(), "empty.d");
        assert_eq!(PlaceholderKind::File.source_name(), "empty");
        // bubblewrap never mounts anything at the sources' place.
        assert!(!args.contains(PLACEHOLDERS_INSIDE), "{args}");
        // Nothing of the caller's is on bubblewrap's real command line.
        assert_eq!(
            Plan::bwrap_command().join(" "),
            "--args 3 -- /oz0/oz0-node __oz0-stage"
        );
        assert_eq!(plan.argv, vec!["make", "test"]);
    }

    /// The stage finds exactly these mount points in the run, or refuses
    /// it: what bubblewrap binds (with the host's mount points under each
    /// folder it binds, which a bind takes along), but not the host's /dev
    /// the stage detaches, and what the stage mounts itself.
    #[test]
    fn the_mount_points_the_stage_expects() {
        let mut h = basic_host();
        h.mounts = vec![
            "/".into(),
            "/usr".into(),
            "/w/cache".into(),
            "/wx".into(),
            "/dev/shm".into(),
            "/home".into(),
        ];
        let plan = plan(&spec(|_| {}), &h, &Extras::default()).unwrap();
        let mut want: Vec<String> = [
            "/",
            "/usr",
            "/etc",
            "/proc",
            "/tmp",
            "/oz0/oz0-node",
            "/w",
            "/w/cache",
            "/dev",
            "/dev/pts",
            "/oz0/ph",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain(DEV_NODES.iter().map(|d| format!("/dev/{d}")))
        .chain(plan.placeholders.iter().map(|p| p.path.to_string()))
        .collect();
        want.sort();
        assert_eq!(plan.mount_points, want);
        // Every bind of bubblewrap's is checked by identity too: the
        // system's, the node binary, the host's /dev aside, the caller's.
        let expect: Vec<&str> = plan.expect.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(expect, ["/usr", "/etc", "/oz0/dev", "/oz0/oz0-node", "/w"]);
    }

    #[test]
    fn the_run_gets_the_usual_devices_and_only_the_devices_named() {
        let p0 = plan(&spec(|_| {}), &basic_host(), &Extras::default()).unwrap();
        assert_eq!(p0.devices, DEV_NODES);
        // The host's /dev is bound only where the stage builds the run's
        // /dev from it (and detaches it): never at /dev itself.
        let host_dev: Vec<_> = p0
            .mounts
            .iter()
            .filter(|m| matches!(m, Mount::DevBind { .. }))
            .collect();
        assert_eq!(
            host_dev,
            [&Mount::DevBind {
                src: p("/dev"),
                dest: p(HOST_DEV_INSIDE)
            }]
        );
        let extras = Extras {
            devices: vec![p("/dev/kvm"), p("/dev/null"), p("/dev/net/tun")],
            ..Extras::default()
        };
        let p1 = plan(&spec(|_| {}), &basic_host(), &extras).unwrap();
        let mut want: Vec<&str> = DEV_NODES.to_vec();
        want.extend(["kvm", "net/tun"]);
        assert_eq!(p1.devices, want);
        assert_eq!(p1.mounts, p0.mounts);
        let outside = Extras {
            devices: vec![p("/home/u/kvm")],
            ..Extras::default()
        };
        assert_eq!(
            plan(&spec(|_| {}), &basic_host(), &outside),
            Err(PlanError::NotADevice(p("/home/u/kvm")))
        );
    }

    #[test]
    fn nothing_but_what_is_named_is_mounted() {
        let plan = plan(&spec(|_| {}), &basic_host(), &Extras::default()).unwrap();
        for m in &plan.mounts {
            if let Mount::RoBind { src, .. } | Mount::Bind { src, .. } = m {
                let ok = ["/usr", "/etc", "/opt/oz0/oz0-node", "/w"].contains(&src.as_str())
                    || src.starts_with(&p("/w"));
                assert!(ok, "unexpected source {src}");
                assert!(!src.starts_with(&p("/home")), "home mounted: {src}");
            }
        }
        // Missing system paths are not mounted; links stay links.
        assert!(!plan.bwrap_args().contains(&"/lib32".to_string()));
    }

    #[test]
    fn vm_secrets_reach_the_monitor_only_under_their_prefix() {
        let with = |names: &[&str]| Extras {
            vm_secrets: names.iter().map(|n| (n.to_string(), "v".into())).collect(),
            ..Extras::default()
        };
        let ok = plan(
            &spec(|_| {}),
            &basic_host(),
            &with(&["OZ0_VMENV_API_KEY", "OZ0_VMENV_api_key"]),
        )
        .unwrap();
        assert!(ok.env.contains(&("OZ0_VMENV_API_KEY".into(), "v".into())));
        assert!(ok.env.contains(&("OZ0_VMENV_api_key".into(), "v".into())));
        for bad in [
            "API_KEY",
            "OZ0_VMENV_",
            "OZ0_VMENV_A-B",
            "OZ0_VMENV_A=B",
            "LD_PRELOAD",
        ] {
            assert_eq!(
                plan(&spec(|_| {}), &basic_host(), &with(&[bad])),
                Err(PlanError::BadVmSecret(bad.into())),
                "{bad}"
            );
        }
        assert!(matches!(
            plan(
                &spec(|_| {}),
                &basic_host(),
                &with(&["OZ0_VMENV_A", "OZ0_VMENV_A"])
            ),
            Err(PlanError::BadVmSecret(_))
        ));
    }

    #[test]
    fn environment_is_exactly_the_callers_plus_needs() {
        let s = spec(|r| r.env = vec![oz0_policy::EnvVar::parse("LANG=C").unwrap()]);
        let plan = plan(&s, &basic_host(), &Extras::default()).unwrap();
        let names: Vec<_> = plan.env.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, vec!["LANG", "PATH", "HOME", "TMPDIR"]);
        let s = spec(|r| r.env = vec![oz0_policy::EnvVar::parse("PATH=/x").unwrap()]);
        let plan = super::plan(&s, &basic_host(), &Extras::default()).unwrap();
        assert_eq!(plan.env.iter().filter(|(n, _)| n == "PATH").count(), 1);
        assert!(plan.env.contains(&("PATH".into(), "/x".into())));
    }

    #[test]
    fn read_and_write_paths_parents_first() {
        let s = spec(|r| {
            r.read = vec!["/w/sub/ro".into(), "/data/ref".into()];
            r.write = vec!["/w/sub".into()];
        });
        let h = host(
            vec![
                root("/w", Entry::Dir),
                root("/w/sub/ro", Entry::Dir),
                root("/data/ref", Entry::File),
                root("/w/sub", Entry::Dir),
            ],
            vec![
                prot("/w", Entry::Missing, &[]),
                prot("/w/sub", Entry::Missing, &[]),
            ],
        );
        let plan = plan(&s, &h, &Extras::default()).unwrap();
        let pos = |needle: &Mount| plan.mounts.iter().position(|m| m == needle).unwrap();
        let w = pos(&Mount::Bind {
            src: p("/w"),
            dest: p("/w"),
        });
        let sub = pos(&Mount::Bind {
            src: p("/w/sub"),
            dest: p("/w/sub"),
        });
        let ro = pos(&Mount::RoBind {
            src: p("/w/sub/ro"),
            dest: p("/w/sub/ro"),
        });
        assert!(w < sub && sub < ro);
        assert!(plan.landlock.read.contains(&"/data/ref".to_string()));
        assert!(plan.landlock.write.contains(&"/w/sub".to_string()));
        // Protected names are held in both writable folders.
        assert!(plan.protected.iter().any(|x| x.path == p("/w/sub/.claude")));
    }

    /// The rule of `.git`: unmovable; what git writes in ordinary work
    /// writable; every other entry read-only, and the names git reads to
    /// decide what to run held even when missing; `objects` and
    /// `objects/info` unmovable with the alternates held. The stage does all
    /// of it by descriptor; bubblewrap binds none of it.
    #[test]
    fn the_git_rule_holds_what_git_reads_and_leaves_what_commits_write() {
        let entries = [
            ("objects", Entry::Dir),
            ("refs", Entry::Dir),
            ("logs", Entry::Dir),
            ("HEAD", Entry::File),
            ("index", Entry::File),
            ("description", Entry::File),
            ("FETCH_HEAD", Entry::File),
            ("hooks", Entry::Dir),
            ("config", Entry::File),
            ("info", Entry::Dir),
            ("branches", Entry::Dir),
            ("something-else", Entry::File),
        ];
        let h = host(
            vec![root("/w", Entry::Dir)],
            vec![prot("/w", Entry::Dir, &entries)],
        );
        let plan = plan(&spec(|_| {}), &h, &Extras::default()).unwrap();
        let holds: Vec<(&str, bool)> = plan
            .holds
            .iter()
            .map(|h| (h.path.as_str(), h.readonly))
            .collect();
        assert_eq!(
            holds,
            vec![
                ("/w/.git", false),
                ("/w/.git/branches", true),
                ("/w/.git/config", true),
                ("/w/.git/hooks", true),
                ("/w/.git/info", true),
                ("/w/.git/objects", false),
                ("/w/.git/something-else", true),
                ("/w/.git/objects/info", false),
            ]
        );
        for x in &plan.holds {
            assert_eq!(Some(x.id), h.id(&x.path), "{}", x.path);
        }
        let git_placeholders: Vec<(&str, PlaceholderKind)> = plan
            .placeholders
            .iter()
            .filter(|x| x.path.as_str().starts_with("/w/.git/"))
            .map(|x| (x.path.as_str(), x.kind))
            .collect();
        assert_eq!(
            git_placeholders,
            vec![
                ("/w/.git/commondir", PlaceholderKind::SelfRef),
                ("/w/.git/config.worktree", PlaceholderKind::File),
                ("/w/.git/modules", PlaceholderKind::Dir),
                ("/w/.git/worktrees", PlaceholderKind::Dir),
                ("/w/.git/objects/info/alternates", PlaceholderKind::File),
                (
                    "/w/.git/objects/info/http-alternates",
                    PlaceholderKind::File
                ),
            ]
        );
        // What commits write is neither held nor a placeholder.
        for n in ["refs", "logs", "HEAD", "index", "description", "FETCH_HEAD"] {
            let path = p(&format!("/w/.git/{n}"));
            assert!(!plan.protected.iter().any(|x| x.path == path), "{n}");
        }
        let how = |s: &str| plan.protected.iter().find(|x| x.path == p(s)).unwrap().how;
        assert_eq!(how("/w/.git"), Protection::Unmovable);
        assert_eq!(how("/w/.git/hooks"), Protection::ReadOnly);
        assert_eq!(how("/w/.git/commondir"), Protection::Placeholder);
        // bubblewrap binds only the caller's folder of these, which the
        // stage checks, as it checks every bind of bubblewrap's.
        assert!(!plan
            .mounts
            .iter()
            .any(|m| m.dest().as_str().starts_with("/w/.git")));
        assert!(plan.expect.iter().any(|e| e.path == p("/w") && !e.readonly));
        for m in &plan.mounts {
            if let Mount::Bind { dest, .. }
            | Mount::RoBind { dest, .. }
            | Mount::DevBind { dest, .. } = m
            {
                assert!(
                    plan.expect.iter().any(|e| &e.path == dest),
                    "{dest} is bound and not checked"
                );
            }
        }
    }

    #[test]
    fn git_file_is_read_only_and_absent_git_is_reported() {
        let h = host(
            vec![root("/w", Entry::Dir)],
            vec![prot("/w", Entry::File, &[])],
        );
        let plan = plan(&spec(|_| {}), &h, &Extras::default()).unwrap();
        assert!(plan
            .holds
            .iter()
            .any(|x| x.path == p("/w/.git") && x.readonly));
        let plan = super::plan(&spec(|_| {}), &basic_host(), &Extras::default()).unwrap();
        assert!(plan.protected.contains(&Protected {
            path: p("/w/.git"),
            how: Protection::AbsentGit
        }));
    }

    #[test]
    fn refusals() {
        type Case = (
            &'static str,
            fn() -> (RunSpec, HostFacts),
            fn(&PlanError) -> bool,
        );
        let cases: &[Case] = &[
            (
                "missing work",
                || (spec(|_| {}), host(vec![root("/w", Entry::Missing)], vec![])),
                |e| matches!(e, PlanError::Missing(_)),
            ),
            (
                "work is a file",
                || (spec(|_| {}), host(vec![root("/w", Entry::File)], vec![])),
                |e| matches!(e, PlanError::WorkNotDir(_)),
            ),
            (
                "work is a link",
                || {
                    (
                        spec(|_| {}),
                        host(
                            vec![RootFact {
                                path: p("/w"),
                                entry: Entry::Symlink("/etc".into()),
                                canonical: Some("/etc".into()),
                            }],
                            vec![],
                        ),
                    )
                },
                |e| matches!(e, PlanError::Symlinked { .. }),
            ),
            (
                "parent is a link",
                || {
                    (
                        spec(|_| {}),
                        host(
                            // What `gather` records when a folder on the way
                            // is a link: the link met, and where it leads.
                            vec![RootFact {
                                path: p("/w"),
                                entry: Entry::Symlink("/".into()),
                                canonical: Some("/real/w".into()),
                            }],
                            vec![],
                        ),
                    )
                },
                |e| matches!(e, PlanError::Symlinked { resolved, .. } if resolved == "/real/w"),
            ),
            (
                "the node binary in a writable folder",
                || {
                    (
                        spec(|r| r.write = vec!["/opt/oz0".into()]),
                        host(
                            vec![root("/w", Entry::Dir), root("/opt/oz0", Entry::Dir)],
                            vec![
                                prot("/w", Entry::Missing, &[]),
                                prot("/opt/oz0", Entry::Missing, &[]),
                            ],
                        ),
                    )
                },
                |e| matches!(e, PlanError::NodeInWritable { .. }),
            ),
            (
                "socket",
                || {
                    (
                        spec(|r| r.read = vec!["/run/x.sock".into()]),
                        host(
                            vec![root("/w", Entry::Dir), root("/run/x.sock", Entry::Other)],
                            vec![],
                        ),
                    )
                },
                |e| matches!(e, PlanError::Special(_)),
            ),
            (
                "protected link",
                || {
                    let mut pf = prot("/w", Entry::Missing, &[]);
                    pf.names[2].2 = Entry::Symlink("/home/u/.ssh".into());
                    (spec(|_| {}), host(vec![root("/w", Entry::Dir)], vec![pf]))
                },
                |e| matches!(e, PlanError::ProtectedSymlink(_)),
            ),
            (
                "git link",
                || {
                    (
                        spec(|_| {}),
                        host(
                            vec![root("/w", Entry::Dir)],
                            vec![prot("/w", Entry::Symlink("/x".into()), &[])],
                        ),
                    )
                },
                |e| matches!(e, PlanError::ProtectedSymlink(_)),
            ),
            (
                "hooks link",
                || {
                    (
                        spec(|_| {}),
                        host(
                            vec![root("/w", Entry::Dir)],
                            vec![prot(
                                "/w",
                                Entry::Dir,
                                &[("hooks", Entry::Symlink("/x".into()))],
                            )],
                        ),
                    )
                },
                |e| matches!(e, PlanError::ProtectedSymlink(_)),
            ),
            (
                "write a protected path",
                || {
                    (
                        spec(|r| r.write = vec!["/w/.claude".into()]),
                        host(
                            vec![root("/w", Entry::Dir), root("/w/.claude", Entry::Dir)],
                            vec![
                                prot("/w", Entry::Missing, &[]),
                                prot("/w/.claude", Entry::Missing, &[]),
                            ],
                        ),
                    )
                },
                |e| matches!(e, PlanError::ProtectedWritable(_)),
            ),
        ];
        for (name, make, want) in cases {
            let (s, h) = make();
            let e = plan(&s, &h, &Extras::default()).expect_err(name);
            assert!(want(&e), "{name}: {e:?}");
            assert!(!e.to_string().is_empty());
        }
    }
}
