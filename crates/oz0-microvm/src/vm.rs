//! One VM per tool server: create, start, exec with MCP over the caller's
//! stdin/stdout, delete — whatever ended it.
//!
//! The monitor is always a tier-1 run through the node's one door to a
//! run ([`oz0_core::Sandbox`], with the role of a monitor: seccomp profile
//! `vmm`, `/dev/kvm`) that sees the system
//! read-only, `/work`, the VM's own `vmm/` folder and the VMM's files,
//! nothing else; it has no egress of its own. The run ends when the server exits (the guest reports its status),
//! when the caller's input ends and the server does not exit within
//! [`EOF_GRACE`], on SIGTERM/SIGINT/SIGHUP, or when the monitor dies; in
//! every case the tier-1 run is killed, which takes the VM with it, and the
//! VM's folder and record are removed.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use oz0_core::exit::Exit;
use oz0_core::{Cancel, Ended, Monitor, Outcome, Role, RunIo, RunOptions, Sandbox, Stdio};
use oz0_linux::Tier1;
use oz0_policy::{AbsPath, EnvVar, Limits, RunRequest, RunSpec};

use crate::backend::{self, Backend, MonitorInput};
use crate::guest::GuestConfig;
use crate::mux::{self, Kind};
use crate::vmdir::VmDir;

mod prepare;
mod session;

use session::{drive, Session, SessionCtx};

/// How long a server may run on after its input ended (every wall's).
pub use oz0_plugin::mcp::EOF_GRACE;
/// Default memory of a VM, MiB.
pub const DEFAULT_MEMORY_MIB: u32 = oz0_plugin::manifest::DEFAULT_VM_MEMORY_MIB;
/// The device a KVM monitor is given (its only one).
pub const KVM_DEVICE: &str = "/dev/kvm";
/// Memory the monitor's tier-1 job may use beyond the guest's, MiB: the
/// VMM itself (QEMU's translation cache under emulation, libkrun's
/// devices), smolvm's CLI processes, and the monitor's `/tmp`.
pub const MONITOR_OVERHEAD_MIB: u64 = 384;
/// Tasks the monitor's tier-1 job may have at once: the VMM's threads (one
/// per vCPU and its I/O workers), smolvm's CLI and the stage's own.
pub const MONITOR_PROCESSES: u32 = 256;

/// The tier-1 limits of a VM's monitor: the caller's, with the memory of
/// the guest plus [`MONITOR_OVERHEAD_MIB`] and [`MONITOR_PROCESSES`] tasks
/// where the caller sets none. Every VM gets them: a guest that breaks out
/// into its monitor is held to them like any tier-1 run.
pub fn monitor_limits(memory_mib: u32, caller: &Limits) -> Limits {
    Limits {
        memory_mib: Some(
            caller
                .memory_mib
                .unwrap_or(u64::from(memory_mib) + MONITOR_OVERHEAD_MIB),
        ),
        processes: Some(caller.processes.unwrap_or(MONITOR_PROCESSES)),
        ..caller.clone()
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct VmRequest {
    /// The work folder, shared as `/work`.
    pub work: PathBuf,
    /// Memory, MiB.
    pub memory_mib: u32,
    /// Whole vCPUs.
    pub cpus: u32,
    /// Hosts the server may reach through the proxy.
    pub allow: Vec<String>,
    /// Node-local ports it may reach through the proxy.
    pub forward: Vec<u16>,
    /// The server's variables (names already checked by
    /// [`crate::manifest::vm_variable_refusal`]).
    pub env: Vec<(String, String)>,
    /// The image (smolvm).
    pub image: Option<String>,
    /// The server's command.
    pub command: Vec<String>,
    /// The node's data directory (VM records go under `microvm/vms/`).
    pub data_dir: PathBuf,
    /// Time from start until the guest agent must answer.
    pub boot_timeout: Duration,
    /// Tier-1 limits on the monitor beyond the memory and task limits
    /// every monitor gets ([`monitor_limits`]): e.g. a wall time.
    pub monitor_limits: Limits,
}

/// Where and with what the monitor runs.
pub struct VmHost<'a> {
    /// The wall the monitor runs in (tier 1): its run goes through the
    /// one door, [`Sandbox::run`], as every run does.
    pub sandbox: &'a dyn Sandbox,
    /// The node binary: bound at `/oz0/oz0-node` for the guest (the QEMU
    /// test backend's agent, smolvm's egress bridge).
    pub node_exe: &'a Path,
    /// The node's egress proxy, which serves a VM with egress.
    pub egress: Option<&'a dyn oz0_egress::EgressService>,
    /// The VMM.
    pub backend: Backend,
    /// The temp dir for VM folders.
    pub tmp: PathBuf,
    /// Turn SIGTERM/SIGINT/SIGHUP into a stop of this VM.
    pub handle_signals: bool,
    /// The caller's stop: when this descriptor turns readable or its other
    /// end is closed, the VM is stopped (a cancelled job).
    pub cancel: Option<OwnedFd>,
}

impl<'a> VmHost<'a> {
    /// A VM of `backend` whose monitor runs through the node's tier-1
    /// `host`, with its node binary and egress proxy; VM folders in the
    /// temp dir, no signal handling, no caller's stop.
    pub fn on(host: &'a Tier1, backend: Backend) -> VmHost<'a> {
        VmHost {
            sandbox: host,
            node_exe: host.node_exe(),
            egress: host.egress(),
            backend,
            tmp: std::env::temp_dir(),
            handle_signals: false,
            cancel: None,
        }
    }
}

/// The server's stdin, stdout and stderr: this process's own, the null
/// device, or descriptors of the caller's (a tool job's pipes). smolvm's
/// server gets them as the monitor's own stdio; the QEMU test guest's
/// travel over its mux.
pub type VmIo = RunIo;

/// A stream of the caller's, as the QEMU session reads it.
fn reader(s: Stdio) -> Box<dyn Read + Send> {
    match s {
        Stdio::Inherit => Box::new(std::io::stdin()),
        Stdio::Null => Box::new(std::io::empty()),
        Stdio::File(f) => Box::new(f),
    }
}

/// A stream of the caller's, as the QEMU session writes it.
fn writer(s: Stdio, err: bool) -> Box<dyn Write + Send> {
    match s {
        Stdio::Inherit if err => Box::new(std::io::stderr()),
        Stdio::Inherit => Box::new(std::io::stdout()),
        Stdio::Null => Box::new(std::io::sink()),
        Stdio::File(f) => Box::new(f),
    }
}

/// How a VM ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "how")]
pub enum VmEnded {
    /// The server exited with `exit_code`.
    ServerExited,
    /// A signal stopped it.
    Signalled,
    /// The caller's input ended and the server did not exit in time.
    InputEnded,
    /// The guest did not answer in time.
    BootTimeout,
    /// The guest agent could not start the server.
    GuestFailed {
        /// Why.
        reason: String,
    },
    /// The monitor ended before the server did.
    MonitorEnded,
}

/// What a VM did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct VmOutcome {
    /// The VM's id.
    pub vm_id: String,
    /// How it ended.
    pub ended: VmEnded,
    /// The server's status (128+N for signal N); 125 when it never ran.
    pub exit_code: i32,
    /// Milliseconds from start until the guest agent answered.
    pub answered_ms: Option<u64>,
    /// The guest's bridge port, when the VM had egress.
    pub bridge_port: Option<u16>,
    /// The monitor's tier-1 outcome.
    #[serde(skip)]
    pub monitor: Option<Outcome>,
    /// The tail of the guest's console (test backend), for diagnosis.
    pub console_tail: String,
}

/// The status of a VM that could not run its server.
pub const EXIT_VM_FAILED: i32 = Exit::Sandbox as i32;

/// Why a VM could not be run at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VmError {
    /// No server command.
    #[error("no server command given: put it after --, e.g. `-- /app/server --stdio`")]
    NoCommand,
    /// An argument the monitor's script would take for its own.
    #[error("the server command's argument {0:?} is refused: the VM monitor's command lines are split at `--oz0--` and at the byte 0x1f")]
    Argument(String),
    /// A variable the server may not be given.
    #[error("--env: {0}")]
    Variable(String),
    /// A variable that is not one.
    #[error("--env: {0}")]
    Env(#[from] oz0_policy::env::EnvError),
    /// The work folder.
    #[error("--work {}: {source}", path.display())]
    Work {
        /// The folder.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The allowlist or forwarded ports.
    #[error(transparent)]
    Net(#[from] oz0_policy::net::NetError),
    /// The image is not one the backend has.
    #[error(transparent)]
    Image(#[from] crate::backend::ImageError),
    /// A path the VM needs is not UTF-8.
    #[error("{0:?} is not valid UTF-8")]
    NotUtf8(PathBuf),
    /// The KVM device's path.
    #[error(transparent)]
    Path(#[from] oz0_policy::path::PathError),
    /// The VM's folder or record.
    #[error("the VM's folder under {}: {what}: {source}: the temp dir must be writable by the node's user", tmp.display())]
    Folder {
        /// The temp dir.
        tmp: PathBuf,
        /// What was being made.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The egress proxy could not take the VM.
    #[error("the egress proxy could not take the VM: {0}")]
    Egress(#[from] oz0_egress::EgressError),
    /// Egress was asked for and the node serves none.
    #[error(
        "the egress proxy could not take the VM: egress was asked for and the node has no proxy"
    )]
    NoProxy,
    /// Tier 1 refused the monitor: no VM runs outside it.
    #[error("the VM monitor could not run inside tier 1, so no VM runs: {0}")]
    Tier1(oz0_core::RunError),
    /// The wall given is not tier 1.
    #[error("the VM monitor runs only inside tier 1, and this wall is tier {0}: no VM runs")]
    NotTier1(u8),
    /// Tier 1 refused the monitor's spec.
    #[error("the VM monitor could not run inside tier 1, so no VM runs: {0}")]
    Spec(#[from] oz0_policy::spec::SpecError),
    /// The VMM's files changed since they were checked.
    #[error(transparent)]
    Pin(#[from] crate::pin::PinError),
}

fn cancel_pair(tmp: &Path) -> Result<(OwnedFd, UnixStream), VmError> {
    let (r, w) = UnixStream::pair().map_err(|source| VmError::Folder {
        tmp: tmp.to_path_buf(),
        what: "the VM's cancel channel",
        source,
    })?;
    Ok((OwnedFd::from(r), w))
}

fn env_vars(list: &[(String, String)]) -> Result<Vec<EnvVar>, VmError> {
    list.iter()
        .map(|(k, v)| EnvVar::new(k, v).map_err(VmError::from))
        .collect()
}

fn utf8(p: &Path) -> Result<String, VmError> {
    p.to_str()
        .map(str::to_string)
        .ok_or_else(|| VmError::NotUtf8(p.to_path_buf()))
}

/// Most bytes of the guest's console read, from its end.
const CONSOLE_TAIL_BYTES: u64 = 64 * 1024;

/// The last lines of the guest's console, escaped. The monitor can write
/// its folder (and a guest may reach what the monitor sees): the log is
/// read only as a regular file reached without a link, never waited on
/// (a pipe) and never past its last 64 KiB.
fn console_tail(vmm: &Path) -> String {
    use rustix::fs::OFlags;
    use std::io::{Read, Seek, SeekFrom};
    let Ok(fd) = oz0_linux::hostfs::open_no_links(
        &vmm.join("console.log"),
        OFlags::RDONLY | OFlags::NONBLOCK,
    ) else {
        return String::new();
    };
    let mut f = std::fs::File::from(fd);
    let Ok(meta) = f.metadata() else {
        return String::new();
    };
    if !meta.is_file() {
        return "(the console log is not a regular file: not read)".into();
    }
    let from = meta.len().saturating_sub(CONSOLE_TAIL_BYTES);
    let mut bytes = Vec::new();
    if f.seek(SeekFrom::Start(from)).is_err()
        || f.take(CONSOLE_TAIL_BYTES).read_to_end(&mut bytes).is_err()
    {
        return String::new();
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..]
        .iter()
        .map(|l| oz0_linux::gitlook::shown(Path::new(l)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs one server in one VM, to its end.
pub fn run_vm(req: &VmRequest, mut host: VmHost<'_>, io: VmIo) -> Result<VmOutcome, VmError> {
    let started = Instant::now();
    let (work, egress) = prepare::check(req, &host)?;
    crate::vmdir::cleanup_stale(&host.tmp, &req.data_dir);
    let vmdir = VmDir::create(&host.tmp, &req.data_dir).map_err(|source| VmError::Folder {
        tmp: host.tmp.clone(),
        what: "the VM's folder",
        source,
    })?;
    let vmm_dir = vmdir.vmm();
    let net = prepare::open_egress(&host, &vmdir, &egress)?;
    let node_dir = vmdir.dir.join("node");
    let guest_node = prepare::place_node(&host, &node_dir, net.lease.is_some())?;

    // The monitor's tier-1 run.
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    let folders = prepare::Folders {
        work: &work,
        vmm_dir: &vmm_dir,
        node_dir: &node_dir,
        guest_node,
    };
    let name = format!("oz0-{}", vmdir.id);
    let cmd =
        prepare::monitor_command(req, &host, &folders, name, (uid, gid), net.lease.is_some())?;
    let secrets = prepare::vm_secrets(req, &host.backend, net.token.as_ref());
    let (spec, devices) = prepare::monitor_spec(req, &work, &vmm_dir, cmd)?;

    // What stops it: a signal, the caller's stop.
    let (cancel_r, cancel_w) = cancel_pair(&host.tmp)?;
    let signalled = prepare::on_signals(host.handle_signals, &cancel_w);
    let (ended_w, watcher) = prepare::watch_cancel(host.cancel.take(), &cancel_w, &host.tmp)?;

    let listener = match &host.backend {
        Backend::QemuTcg(_) => Some(UnixListener::bind(vmm_dir.join("mux.sock")).map_err(
            |source| VmError::Folder {
                tmp: host.tmp.clone(),
                what: "the mux socket",
                source,
            },
        )?),
        Backend::Smolvm(_) => None,
    };
    let (opts, streams) =
        prepare::monitor_options(&host.backend, cancel_r, (devices, secrets), &net, io)?;
    let guest = match (&listener, streams) {
        (Some(listener), Some(io)) => Some(Guest {
            listener,
            io,
            cfg: GuestConfig {
                argv: req.command.clone(),
                env: req.env.clone(),
                uid,
                gid,
                egress_token: net.token.as_ref().map(|t| t.expose().to_string()),
            },
            started,
            boot_timeout: req.boot_timeout,
            egress_sock: net.lease.as_ref().map(|_| net.socket.clone()),
        }),
        _ => None,
    };
    let (monitor, session) = run_monitor(host.sandbox, (&spec, opts), guest, &cancel_w);

    drop(net);
    drop(ended_w);
    if let Some(t) = watcher {
        let _ = t.join();
    }
    let tail = console_tail(&vmm_dir);
    drop(vmdir);
    let monitor = monitor?;
    let (ended, exit_code) = verdict(
        &host.backend,
        &monitor,
        (session.exit, session.failure),
        signalled.load(Ordering::SeqCst),
    );
    Ok(VmOutcome {
        vm_id: monitor.run_id.clone(),
        ended,
        exit_code,
        answered_ms: session.answered_ms,
        bridge_port: session.bridge_port,
        monitor: Some(monitor),
        console_tail: tail,
    })
}

/// The QEMU test guest's side of a VM: its mux's listener, the server's
/// stdio, the agent's configuration, and its deadlines and egress.
struct Guest<'a> {
    listener: &'a UnixListener,
    io: RunIo,
    cfg: GuestConfig,
    started: Instant,
    boot_timeout: Duration,
    egress_sock: Option<PathBuf>,
}

/// Runs the monitor through `sandbox` on a thread of its own and, with a
/// QEMU guest, the session with it on this one. Whatever ended the session
/// ends the VM. A smolvm VM has no session here (its server's stdio is the
/// monitor's own): it ends with its server, its input, a signal (which
/// writes the cancel byte) or its monitor, so the monitor is only waited
/// for.
fn run_monitor(
    sandbox: &dyn Sandbox,
    (spec, opts): (&RunSpec, RunOptions),
    guest: Option<Guest<'_>>,
    cancel_w: &UnixStream,
) -> (Result<Outcome, VmError>, Session) {
    let done = Arc::new(AtomicBool::new(false));
    let stream_slot: Arc<Mutex<Option<UnixStream>>> = Arc::new(Mutex::new(None));
    thread::scope(|s| {
        let launcher = {
            let (done, slot) = (done.clone(), stream_slot.clone());
            s.spawn(move || {
                let r = sandbox.run(spec, opts).map_err(VmError::Tier1);
                done.store(true, Ordering::SeqCst);
                if let Some(st) = slot.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                    let _ = st.shutdown(Shutdown::Both);
                }
                r
            })
        };
        let session = match guest {
            Some(g) => {
                let (input, mut output, mut errors) = (
                    reader(g.io.stdin),
                    writer(g.io.stdout, false),
                    writer(g.io.stderr, true),
                );
                let ctx = SessionCtx {
                    listener: g.listener,
                    done: &done,
                    slot: &stream_slot,
                    cancel: cancel_w,
                    started: g.started,
                    boot_timeout: g.boot_timeout,
                    egress_sock: g.egress_sock,
                };
                let session = drive(&ctx, &g.cfg, input, &mut *output, &mut *errors);
                let _ = (&*cancel_w).write_all(b"x");
                session
            }
            None => Session::default(),
        };
        let monitor = launcher.join().expect("the launcher thread does not panic");
        (monitor, session)
    })
}

/// How the VM ended and its status: from the monitor's outcome for
/// smolvm, else from the session's (the server's status, or why it has
/// none); a signal's stop is 143.
fn verdict(
    backend: &Backend,
    monitor: &Outcome,
    (exit, failure): (Option<i32>, Option<VmEnded>),
    signalled: bool,
) -> (VmEnded, i32) {
    match (backend, exit) {
        (Backend::Smolvm(_), _) => match monitor.ended {
            _ if signalled => (VmEnded::Signalled, 143),
            Ended::Exited => (VmEnded::ServerExited, monitor.exit_code),
            Ended::Timeout => (VmEnded::BootTimeout, monitor.exit_code),
            _ => (VmEnded::MonitorEnded, monitor.exit_code),
        },
        (_, Some(code)) => (VmEnded::ServerExited, code),
        (_, None) if signalled => (VmEnded::Signalled, 143),
        (_, None) => match failure {
            Some(f) => (f, EXIT_VM_FAILED),
            None => (VmEnded::MonitorEnded, EXIT_VM_FAILED),
        },
    }
}

#[cfg(test)]
mod console_tests {
    use super::*;

    /// The guest's console is read only as a regular file reached without
    /// a link, never waited on, at most its last 64 KiB, escaped.
    #[test]
    fn the_console_tail_follows_no_link_waits_on_no_pipe_and_is_bounded() {
        let d = std::env::temp_dir().join(format!("oz0-console-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let secret = d.join("secret");
        std::fs::write(&secret, "host secret\n").unwrap();
        std::os::unix::fs::symlink(&secret, d.join("console.log")).unwrap();
        assert_eq!(console_tail(&d), "");
        std::fs::remove_file(d.join("console.log")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            d.join("console.log"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(console_tail(&d).contains("not a regular file"));
        std::fs::remove_file(d.join("console.log")).unwrap();
        let mut big = "x".repeat(200 * 1024);
        big.push_str("\nlast \u{1b}]52;c;aGk=\u{7} line\n");
        std::fs::write(d.join("console.log"), big).unwrap();
        let tail = console_tail(&d);
        assert!(tail.len() <= 2 * 64 * 1024, "{}", tail.len());
        assert!(
            tail.ends_with("last \\u{1b}]52;c;aGk=\\u{7} line"),
            "{tail:?}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
