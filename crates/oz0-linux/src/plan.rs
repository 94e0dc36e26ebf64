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

use oz0_policy::{AbsPath, RunSpec};
use serde::Serialize;

use crate::host::{Entry, HostFacts};
use crate::seccomp::Profile;

mod protect;
mod told;
mod types;

use protect::{mount_points, Holder};
pub use told::POLICY_INSIDE;
pub use types::*;

/// Where the node binary is inside every run.
pub const NODE_BIN_INSIDE: &str = "/oz0/oz0-node";
/// Where a dynamically linked node binary's loader and libraries are inside
/// a run in an image's root.
pub const NODE_LIBS_INSIDE: &str = "/oz0/lib";
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
    /// The stage's report to the launcher (close-on-exec in the stage: the
    /// command never holds it).
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
    /// The run's root is this image's, not the host's system.
    pub image: Option<ImageRoot>,
}

/// A run whose root is an unpacked image (see `oz0_core::Role::Image`):
/// the image's names bound read-only at the top of the run's root in place
/// of the host's system folders, and the work folder at [`IMAGE_WORK`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRoot {
    /// The unpacked rootfs on the host.
    pub rootfs: AbsPath,
    /// The command's working folder inside.
    pub cwd: AbsPath,
    /// The user and group inside (the node's user mapped to them).
    pub user: Option<(u32, u32)>,
}

/// Where the work folder is inside a run whose root is an image.
pub const IMAGE_WORK: &str = oz0_core::IMAGE_WORK;

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
            image: None,
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
    /// The same, at their paths inside the run (where the stage mounts
    /// them): other paths only when the work folder is elsewhere inside.
    pub placeholders_inside: Vec<Placeholder>,
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
    /// The run's policy file (see [`oz0_policy::describe`]), which the
    /// stage writes at [`POLICY_INSIDE`].
    pub policy: String,
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
    /// The node binary's loader inside, when the stage is started through
    /// it (a dynamically linked node in an image's root).
    pub loader: Option<AbsPath>,
    /// The ids the node's user has inside (an image's `User`), when not
    /// its own.
    pub ids: Option<(u32, u32)>,
}

/// Why no plan could be made. Each names the path and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
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
    /// A run in an image's root given folders besides its work folder.
    #[error("{0}: a run in an image's root has its work folder at /work and no other host folder (--read and --write are for runs on the host's system)")]
    ImageExtraPath(AbsPath),
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

/// What the steps of [`plan`] add to, in order: the mounts bubblewrap
/// makes, the Landlock rules, and the binds the stage checks.
#[derive(Default)]
struct Layers {
    mounts: Vec<Mount>,
    landlock: LandlockRules,
    expect: Vec<Expect>,
}

/// Makes the plan. Pure: everything about the host comes from `host`.
pub fn plan(spec: &RunSpec, host: &HostFacts, extras: &Extras) -> Result<Plan, PlanError> {
    let mut l = Layers::default();
    // 1. The system, read-only. Merged-/usr links stay links.
    system(host, &mut l)?;
    // 2. Kernel interfaces and the private TEMP.
    let tmp = kernel_and_tmp(spec, host, &mut l)?;
    // 3. The node binary, for the stage, with its libraries in an image.
    let loader = node_binary(host, &mut l)?;
    // 3b. The run's own proxy socket (its only way out), and devices.
    let devices = socket_and_devices(extras, &mut l)?;

    // 4. The caller's paths and the protected paths, parents before children.
    let work_inside = match &extras.image {
        None => spec.work.clone(),
        Some(_) => abs(IMAGE_WORK),
    };
    if let (Some(_), Some(p)) = (&extras.image, spec.read.iter().chain(&spec.write).next()) {
        return Err(PlanError::ImageExtraPath(p.clone()));
    }
    let inside = |p: &AbsPath| relocate(p, &spec.work, &work_inside);
    let mut user = caller_paths(spec, host, &work_inside, &mut l)?;
    let (protected, placeholders, mut holds) = protected_paths(host, extras)?;
    for h in &mut holds {
        h.path = inside(&h.path);
    }
    let placeholders_inside: Vec<Placeholder> = placeholders
        .iter()
        .map(|p| Placeholder {
            path: inside(&p.path),
            kind: p.kind,
        })
        .collect();
    user.extend(fault_mount(extras));
    refuse_protected_writes(spec, &protected)?;
    // A stable sort by depth puts every mount after the mounts of its parents.
    user.sort_by_key(|m| m.dest().depth());
    l.mounts.extend(user);
    // 5. The node user's secrets under its home answer as refused.
    let refused = told::refused_home(host, extras, &l.mounts);
    l.mounts
        .extend(refused.iter().map(|p| Mount::Refused { dest: p.clone() }));
    // The stage binds the protected paths after all of these, then mounts
    // the placeholders (so they are never hidden under a later mount), then
    // makes the root read-only.

    let described = told::describe(spec, extras, &work_inside, &refused);
    let env = told::environment(spec, extras, &described)?;
    let namespaces = namespaces(extras);

    let Layers {
        mounts,
        landlock,
        expect,
    } = l;
    let mount_points = mount_points(
        &mounts,
        &host.mounts,
        &devices,
        &holds,
        &placeholders_inside,
    );
    Ok(Plan {
        namespaces,
        mounts,
        devices,
        tmp,
        protected,
        placeholders,
        placeholders_inside,
        expect,
        holds,
        mount_points,
        env,
        policy: described.policy(),
        cwd: match &extras.image {
            None => spec.work.clone(),
            Some(i) => i.cwd.clone(),
        },
        argv: spec.command.clone(),
        landlock,
        landlock_off: extras.fault == Some(Fault::NoLandlock),
        seccomp: extras.profile,
        seccomp_off: extras.fault == Some(Fault::NoSeccomp),
        deny_unix_sockets: !spec.allow_unix_sockets && extras.profile == Profile::Default,
        loader,
        ids: extras.image.as_ref().and_then(|i| i.user),
    })
}

/// `p` inside a run whose work folder `work` is at `work_inside`.
fn relocate(p: &AbsPath, work: &AbsPath, work_inside: &AbsPath) -> AbsPath {
    match p.as_str().strip_prefix(work.as_str()) {
        Some("") => work_inside.clone(),
        Some(rest) if rest.starts_with('/') => join_all(work_inside, &rest[1..]),
        _ => p.clone(),
    }
}

/// Step 1: the system's folders bound read-only, its links kept as links
/// (the host's, or an image's: see [`HostFacts::system_root`]).
fn system(host: &HostFacts, l: &mut Layers) -> Result<(), PlanError> {
    for (path, entry) in &host.system {
        match entry {
            Entry::Dir => {
                let src = match &host.system_root {
                    None => path.clone(),
                    Some(root) => join_all(root, path.as_str().trim_start_matches('/')),
                };
                l.mounts.push(Mount::RoBind {
                    src: src.clone(),
                    dest: path.clone(),
                });
                l.landlock.read.push(path.to_string());
                l.expect.push(Expect::at(host, &src, path.clone(), true)?);
            }
            Entry::Symlink(target) => l.mounts.push(Mount::Symlink {
                target: target.clone(),
                dest: path.clone(),
            }),
            Entry::Missing | Entry::File | Entry::Other => {}
        }
    }
    Ok(())
}

/// Step 2: `/proc`, the host's `/dev` for the stage alone, and the private
/// TEMP with its size.
fn kernel_and_tmp(
    spec: &RunSpec,
    host: &HostFacts,
    l: &mut Layers,
) -> Result<TmpfsSize, PlanError> {
    l.mounts.push(Mount::Proc { dest: abs("/proc") });
    l.mounts.push(Mount::DevBind {
        src: abs("/dev"),
        dest: abs(HOST_DEV_INSIDE),
    });
    l.expect
        .push(Expect::at(host, &abs("/dev"), abs(HOST_DEV_INSIDE), false)?);
    let tmp = TmpfsSize {
        size_mib: spec.limits.tmp_size_mib(),
        inodes: spec.limits.tmp_inodes(),
    };
    l.mounts.push(Mount::Tmpfs {
        dest: abs(TMP_INSIDE),
        size: tmp,
    });
    l.landlock
        .write
        .extend(["/proc", "/dev", TMP_INSIDE].map(String::from));
    Ok(tmp)
}

/// Step 3: the node binary, read-only at [`NODE_BIN_INSIDE`], for the
/// stage, and its loader and libraries at [`NODE_LIBS_INSIDE`] when it
/// needs them (in an image's root); the loader inside, then.
fn node_binary(host: &HostFacts, l: &mut Layers) -> Result<Option<AbsPath>, PlanError> {
    l.mounts.push(Mount::RoBind {
        src: host.node_exe.clone(),
        dest: abs(NODE_BIN_INSIDE),
    });
    l.landlock.read.push(NODE_BIN_INSIDE.to_string());
    l.expect.push(Expect::at(
        host,
        &host.node_exe,
        abs(NODE_BIN_INSIDE),
        true,
    )?);
    let mut loader = None;
    for lib in &host.node_libs {
        let name = lib.as_str().rsplit('/').next().unwrap_or_default();
        let dest = abs(NODE_LIBS_INSIDE)
            .join(name)
            .map_err(|_| PlanError::NoFacts(lib.clone()))?;
        l.mounts.push(Mount::RoBind {
            src: lib.clone(),
            dest: dest.clone(),
        });
        l.expect.push(Expect::at(host, lib, dest.clone(), true)?);
        loader.get_or_insert(dest);
    }
    if loader.is_some() {
        l.landlock.read.push(NODE_LIBS_INSIDE.to_string());
    }
    Ok(loader)
}

/// Step 3b: the run's own proxy socket (its only way out), and the names
/// of its devices: [`DEV_NODES`] and the launcher's, each under `/dev`.
fn socket_and_devices(extras: &Extras, l: &mut Layers) -> Result<Vec<String>, PlanError> {
    if let Some(sock) = &extras.egress_socket {
        l.mounts.push(Mount::RoBind {
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
    Ok(devices)
}

/// Step 4: the work folder and the `--read`/`--write` paths, each checked
/// against what the node found on the host; their mounts, unsorted.
fn caller_paths(
    spec: &RunSpec,
    host: &HostFacts,
    work_inside: &AbsPath,
    l: &mut Layers,
) -> Result<Vec<Mount>, PlanError> {
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
        let dest = relocate(path, &spec.work, work_inside);
        if writable {
            user.push(Mount::Bind {
                src: path.clone(),
                dest: dest.clone(),
            });
            l.landlock.write.push(dest.to_string());
            if host.node_exe.starts_with(path) {
                return Err(PlanError::NodeInWritable {
                    node: host.node_exe.clone(),
                    folder: path.clone(),
                });
            }
        } else {
            user.push(Mount::RoBind {
                src: path.clone(),
                dest: dest.clone(),
            });
            l.landlock.read.push(dest.to_string());
        }
        l.expect.push(Expect::at(host, path, dest, !writable)?);
    }
    Ok(user)
}

/// How each protected path is held, the placeholders to make, the holds.
type ProtectedPlan = (Vec<Protected>, Vec<Placeholder>, Vec<Hold>);

/// The protected paths of every root, unless a fault says not to, with the
/// holds parents first.
fn protected_paths(host: &HostFacts, extras: &Extras) -> Result<ProtectedPlan, PlanError> {
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
    Ok((protected, placeholders, holds))
}

/// The self-test's exposure of a host folder, when that is its fault.
fn fault_mount(extras: &Extras) -> Option<Mount> {
    match &extras.fault {
        Some(Fault::Expose(p)) => Some(Mount::RoBind {
            src: p.clone(),
            dest: p.clone(),
        }),
        Some(Fault::ExposeAt { src, dest }) => Some(Mount::Bind {
            src: src.clone(),
            dest: dest.clone(),
        }),
        _ => None,
    }
}

/// Refuses a `--write` path inside a protected path that is held read-only.
fn refuse_protected_writes(spec: &RunSpec, protected: &[Protected]) -> Result<(), PlanError> {
    for w in &spec.write {
        if protected
            .iter()
            .any(|p| p.how != Protection::Unmovable && w.starts_with(&p.path))
        {
            return Err(PlanError::ProtectedWritable(w.clone()));
        }
    }
    Ok(())
}

/// [`NAMESPACES`], less the one a self-test fault shares with the host.
fn namespaces(extras: &Extras) -> Vec<Namespace> {
    NAMESPACES
        .iter()
        .copied()
        .filter(|n| match extras.fault {
            Some(Fault::SharePid) => *n != Namespace::Pid,
            Some(Fault::ShareNet) => *n != Namespace::Net,
            _ => true,
        })
        .collect()
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
        if let Some((uid, gid)) = self.ids {
            a.extend([
                "--uid".into(),
                uid.to_string(),
                "--gid".into(),
                gid.to_string(),
            ]);
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
                Mount::Refused { dest } => a.extend([
                    "--perms".into(),
                    "0000".into(),
                    "--dir".into(),
                    dest.to_string(),
                ]),
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
    /// the args descriptor and the stage (through its loader, when the
    /// plan has one), nothing of the run.
    pub fn bwrap_command(&self) -> Vec<String> {
        let mut c = vec!["--args".into(), fds::ARGS.to_string(), "--".into()];
        if let Some(loader) = &self.loader {
            c.extend([
                loader.to_string(),
                "--library-path".into(),
                NODE_LIBS_INSIDE.into(),
            ]);
        }
        c.extend([NODE_BIN_INSIDE.into(), STAGE_ARG.into()]);
        c
    }
}

#[cfg(test)]
mod tests;
