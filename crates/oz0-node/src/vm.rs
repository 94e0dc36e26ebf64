//! `oz0-node sandbox vm`: the command line of tier 2 (one tool server in a
//! microVM whose monitor runs inside tier 1). The VM itself is
//! `oz0_microvm`'s.

use std::path::PathBuf;

use clap::Args;
use oz0_microvm::command::VmCommand;
use oz0_microvm::manifest::{MAX_MEMORY_MB, MIN_MEMORY_MB};
use oz0_microvm::vm::{DEFAULT_MEMORY_MIB, EXIT_VM_FAILED};

use crate::cli::HostArgs;

/// Run one tool server in a microVM whose monitor runs inside tier 1.
///
/// The server's stdin and stdout are this command's (MCP over stdio). The VM
/// has no network device; with --allow/--forward its only way out is the
/// node's egress proxy, reached through a bridge on the guest's loopback
/// (HTTP_PROXY and friends point at it). The work folder is shared as /work;
/// the guest runs the server as the node's uid/gid with HOME=/tmp. The VM is
/// deleted whatever ends it: the server, the end of input, a signal.
///
/// The VMM is smolvm, checked against the release this node pins (see
/// OZ0_MICROVM). Exit status: the server's; 125 when the VM could not run it.
#[derive(Debug, Clone, Args)]
pub struct VmArgs {
    /// The work folder, shared with the guest as /work.
    #[arg(long, value_name = "DIR")]
    pub work: PathBuf,
    /// The VM's memory, MiB.
    #[arg(long, value_name = "MiB", default_value_t = DEFAULT_MEMORY_MIB,
          value_parser = clap::value_parser!(u32).range(i64::from(MIN_MEMORY_MB)..=i64::from(MAX_MEMORY_MB)))]
    pub memory: u32,
    /// vCPUs (whole; a manifest's fraction is rounded up).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub cpus: u32,
    /// A host the server may reach through the egress proxy (repeatable).
    #[arg(long, value_name = "HOST[:PORT]")]
    pub allow: Vec<String>,
    /// A node-local port the server may reach through the proxy (repeatable).
    #[arg(long, value_name = "PORT")]
    pub forward: Vec<u16>,
    /// A variable for the server, by name: its value is read from this
    /// process's environment and never appears on a command line (repeatable).
    #[arg(long, value_name = "NAME")]
    pub env: Vec<String>,
    /// The server's image (smolvm: an OCI reference, archive or rootfs
    /// folder; the QEMU test backend: a test-guest image such as `python`).
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// Seconds the VM has to boot and answer.
    #[arg(long, value_name = "S", default_value_t = 60)]
    pub boot_timeout: u64,
    /// The node's data directory (VM records go under microvm/vms/), jobs
    /// and bubblewrap, as for `sandbox run`.
    #[command(flatten)]
    pub host: HostArgs,
    /// The server's command.
    #[arg(last = true, required = true, value_name = "SERVER_CMD")]
    pub command: Vec<String>,
}

/// Runs `sandbox vm`; returns the exit status.
pub fn main(args: VmArgs) -> i32 {
    let host = match crate::run::open_host(&args.host, None) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("oz0-node: sandbox vm refused: {e}");
            return EXIT_VM_FAILED;
        }
    };
    let cmd = VmCommand {
        work: args.work,
        memory_mib: args.memory,
        cpus: args.cpus,
        allow: args.allow,
        forward: args.forward,
        env_names: args.env,
        image: args.image,
        boot_timeout_s: args.boot_timeout,
        command: args.command,
    };
    oz0_microvm::command::run(cmd, &host)
}
