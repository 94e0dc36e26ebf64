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
//! with egress gets it, `crate::tool::mac`); a hand-started `sandbox vm`
//! has none, so `--allow`/`--forward` are refused. Type-checked in CI; it
//! has not run on a Mac.

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
    /// Egress for the server: refused on macOS in this build (the guest's
    /// bridge is the Linux node binary, which it does not carry).
    #[arg(long, value_name = "HOST[:PORT]", hide = true)]
    pub allow: Vec<String>,
    /// See --allow.
    #[arg(long, value_name = "PORT", hide = true)]
    pub forward: Vec<u16>,
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
    if !a.allow.is_empty() || !a.forward.is_empty() {
        return refuse("egress for a microVM tool started by hand is not in this build on macOS: the guest's bridge is the Linux node binary, which only the node's daemon fetches from its edge (an edge job's tool with egress runs with it); run the tool without --allow/--forward, as an edge job, or on a Linux node");
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
    // The server's stdin and stdout are this command's (MCP over stdio).
    let cancel = crate::signals::cancel_pipe().map(oz0_core::Cancel);
    let sandbox = oz0_macos::vm::AppleContainer::installed();
    match oz0_macos::vm::run_tool(
        &sandbox,
        tool,
        &vars,
        None,
        &data_dir,
        oz0_core::RunIo::inherit(),
        cancel,
    ) {
        Ok(code) => code,
        Err(e) => refuse(e),
    }
}
