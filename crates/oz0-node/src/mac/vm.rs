//! `sandbox vm` on macOS: one tool server in a microVM of Apple's
//! `container` (macOS 26, Apple silicon, container 1.5.0 or later), through
//! the node core's door (`oz0_macos::vm::AppleContainer`, a `Sandbox`, by
//! `oz0_macos::vm::run_tool`); this module reads the flags and the
//! variables named.
//!
//! The argument list is `oz0_macos::container::run_argv` (`--rm --network
//! none --read-only --cap-drop ALL`, this user's uid:gid, whole CPUs, the
//! memory, `--ulimit nproc`, the work folder at `/work`), tested on Linux.
//! The tool's variables are named here and read from this process's
//! environment; they reach the VM only through an env file (0600, created
//! new in a folder of its own, removed when the tool stops), never a
//! command line, and a value with a line break is refused. The CLI starts
//! with a clean environment (a fixed `PATH` and this user's `HOME`). The
//! VM has a name of its own, and whatever ends the tool (the server, the
//! end of its input, a signal) it is stopped and deleted by that name.
//!
//! Apple's VMs are started by Apple's own services, so they are not inside
//! tier 1: the guest's kernel is the boundary. Egress needs the Linux node
//! binary inside the guest for its bridge, which the node's daemon fetches
//! from its edge and checks against the release key (an edge job's tool
//! with egress gets it, `crate::tool::mac`). By hand, `--allow`/`--forward`
//! need `--guest-bin` naming one, which runs unchecked because it is named
//! (said on stderr); the server then reaches only those hosts, through a
//! run of the node's proxy of its own (`oz0_macos::vm::ToolEgress`).
//! Type-checked in CI; it has not run on a Mac.

use std::path::PathBuf;

use clap::Args;
use oz0_core::exit::Exit;
use oz0_macos::container::{availability, VmTool};
use oz0_policy::AbsPath;

/// `sandbox vm` flags.
#[derive(Debug, Args)]
pub struct VmArgs {
    /// Say whether this Mac offers microVMs and why not; run nothing.
    #[arg(long, conflicts_with_all = ["work", "command", "image"])]
    pub probe: bool,
    /// The work folder, shared with the guest as /work.
    #[arg(long, value_name = "DIR", required_unless_present = "probe")]
    pub work: Option<PathBuf>,
    /// The server's image, pinned by digest (name@sha256:<64 hex>).
    #[arg(long, value_name = "IMAGE", required_unless_present = "probe")]
    pub image: Option<String>,
    /// The VM's memory, MiB.
    #[arg(long, value_name = "MiB", default_value_t = 512)]
    pub memory: u64,
    /// CPUs (a fraction is rounded up to whole CPUs).
    #[arg(long, value_name = "N", default_value_t = 1.0)]
    pub cpus: f64,
    /// Most processes in the VM (Apple's runtime has no limit of its own).
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub nproc: u32,
    /// A variable for the server, by name: its value is read from this
    /// process's environment and reaches the VM only through a private env
    /// file, never a command line (repeatable).
    #[arg(long, value_name = "NAME")]
    pub env: Vec<String>,
    /// Let the server reach HOST[:PORT] through the node's egress proxy
    /// (repeatable; needs --guest-bin and a SERVER_CMD). The VM still has no
    /// network device: its bridge reaches the proxy over a socket the VM
    /// publishes to the node.
    #[arg(long, value_name = "HOST[:PORT]", requires = "guest_bin")]
    pub allow: Vec<String>,
    /// Let the server reach this Mac's 127.0.0.1:PORT (repeatable; needs
    /// --guest-bin).
    #[arg(long, value_name = "PORT", requires = "guest_bin")]
    pub forward: Vec<u16>,
    /// The Linux node binary of this release for arm64, which the guest's
    /// bridge runs for --allow/--forward. Named here it is not checked
    /// against a release key (the node's daemon fetches and checks its own
    /// from its edge): it runs because you name it.
    #[arg(long = "guest-bin", value_name = "FILE")]
    pub guest_bin: Option<PathBuf>,
    #[command(flatten)]
    pub data: crate::flags::DataDirArg,
    /// The server's command inside the image [default: the image's own].
    #[arg(last = true, value_name = "SERVER_CMD")]
    pub command: Vec<String>,
}

fn refuse(msg: impl std::fmt::Display) -> i32 {
    eprintln!("oz0-node: sandbox vm refused: {msg}");
    Exit::Sandbox.code()
}

/// Runs `sandbox vm`.
pub fn main(a: VmArgs) -> i32 {
    let probe = oz0_macos::probe::probe();
    if a.probe {
        return match availability(&probe.mac) {
            Ok(()) => {
                println!("MicroVMs: Apple's container {} is here and its services answer (each tool server in a VM of its own; not inside tier 1: the guest's kernel is the boundary)",
                    probe.mac.container_version.map_or_else(String::new, |(x, y, z)| format!("{x}.{y}.{z}")));
                Exit::Ok.code()
            }
            Err(n) => {
                println!("MicroVMs: none: {}", n.reason());
                Exit::CheckFailed.code()
            }
        };
    }
    if let Err(n) = availability(&probe.mac) {
        return refuse(format!("this Mac offers no microVMs: {}", n.reason()));
    }
    let work = match a.work.as_deref().map(std::path::absolute) {
        Some(Ok(w)) => w,
        Some(Err(e)) => return refuse(format!("--work: {e}")),
        None => return refuse("--work is required"),
    };
    let Some(work) = work.to_str().and_then(|s| AbsPath::new(s).ok()) else {
        return refuse(format!("--work {} is not plain UTF-8", work.display()));
    };
    let mut vars = Vec::new();
    for n in &a.env {
        match std::env::var(n) {
            Ok(v) => vars.push((n.clone(), v)),
            Err(_) => {
                return refuse(format!(
                    "--env {n}: {n} is not set (or not UTF-8) in this environment: export it"
                ))
            }
        }
    }
    let tool = VmTool {
        image: a.image.clone().unwrap_or_default(),
        memory_mib: a.memory,
        cpus: a.cpus,
        nproc: a.nproc,
        uid: rustix::process::getuid().as_raw(),
        gid: rustix::process::getgid().as_raw(),
        work,
        egress: None,
        command: a.command.clone(),
        // Named by the launcher.
        name: String::new(),
    };
    let data_dir = match a.data.resolve() {
        Ok(d) => d,
        Err(e) => return refuse(e),
    };
    let Some(data_dir) = data_dir.to_str().and_then(|s| AbsPath::new(s).ok()) else {
        return refuse(format!(
            "--data-dir {} is not plain UTF-8",
            data_dir.display()
        ));
    };
    // With egress: a run of the node's proxy of its own, held until the
    // server ends.
    let (egress, _lease) = match egress(&a, &data_dir) {
        Ok(Some((e, l))) => (Some(e), Some(l)),
        Ok(None) => (None, None),
        Err(e) => return refuse(e),
    };
    // The server's stdin and stdout are this command's (MCP over stdio).
    let cancel = crate::signals::cancel_pipe().map(oz0_core::Cancel);
    let sandbox = oz0_macos::vm::AppleContainer::installed();
    match oz0_macos::vm::run_tool(
        &sandbox,
        tool,
        &vars,
        egress,
        &data_dir,
        oz0_core::RunIo::inherit(),
        cancel,
    ) {
        Ok(code) => code,
        Err(e) => refuse(e),
    }
}

/// The server's egress (`--allow`/`--forward`): its run of the node's
/// proxy on loopback TCP, audited in the data directory, and what the VM
/// needs to reach it; None without either flag.
fn egress(
    a: &VmArgs,
    data_dir: &AbsPath,
) -> Result<Option<(oz0_macos::vm::ToolEgress, Held)>, String> {
    if a.allow.is_empty() && a.forward.is_empty() {
        return Ok(None);
    }
    let Some(bin) = &a.guest_bin else {
        return Err(
            "--allow/--forward need --guest-bin: the guest's bridge is the Linux node binary"
                .into(),
        );
    };
    if a.command.is_empty() {
        return Err("--allow/--forward need the server's command after --: the guest's bridge starts it, and the image's own entrypoint is not known here".into());
    }
    let bin = std::path::absolute(bin).map_err(|e| format!("--guest-bin: {e}"))?;
    if !bin.is_file() {
        return Err(format!("--guest-bin {}: not a file", bin.display()));
    }
    let guest_bin = bin
        .to_str()
        .and_then(|s| AbsPath::new(s).ok())
        .ok_or_else(|| format!("--guest-bin {} is not plain UTF-8", bin.display()))?;
    eprintln!(
        "oz0-node: sandbox vm: the guest's bridge runs {}, named by --guest-bin and not checked against a release key",
        bin.display()
    );
    let policy = oz0_policy::net::Egress::parse(&a.allow, &a.forward).map_err(|e| e.to_string())?;
    let proxy = super::host::egress(
        std::path::Path::new(data_dir.as_str()).join(oz0_egress::AUDIT_LOG_NAME),
    );
    let (egress, lease) =
        oz0_macos::vm::ToolEgress::open(&proxy, "sandbox-vm".into(), policy, guest_bin)
            .map_err(|e| format!("the egress proxy: {e}"))?;
    Ok(Some((
        egress,
        Held {
            _lease: lease,
            _proxy: proxy,
        },
    )))
}

/// The server's run at the proxy, and the proxy, held until it ends (the
/// run first).
struct Held {
    _lease: oz0_egress::Lease,
    _proxy: oz0_egress::LazyProxy,
}
