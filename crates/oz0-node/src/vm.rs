//! `oz0-node sandbox vm`: the command line of tier 2 (one tool server in a
//! microVM whose monitor runs inside tier 1). The VM itself is
//! `oz0_microvm`'s.

use std::path::PathBuf;

use clap::Args;
use oz0_microvm::command::VmCommand;
use oz0_microvm::manifest::{MAX_MEMORY_MB, MIN_MEMORY_MB};
use oz0_microvm::vm::{DEFAULT_MEMORY_MIB, EXIT_VM_FAILED};

use crate::flags::HostArgs;

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
///
/// With --probe, runs nothing of yours: it asks what `oz0-node run` asks at
/// its start (tier 1 proven by the self-test, then one test VM booted inside
/// it, answering from a kernel of its own) and says whether this node offers
/// microVMs, and why not (exit 0 only when it does).
#[derive(Debug, Clone, Args)]
pub struct VmArgs {
    /// Probe microVMs as the node does at its start, run nothing else.
    #[arg(long, conflicts_with_all = ["work", "command"])]
    pub probe: bool,
    /// With --probe: the node binary the test VM's monitor and guest use
    /// [default: this binary].
    #[arg(long, value_name = "PATH", requires = "probe")]
    pub guest: Option<PathBuf>,
    /// With --probe: print the answer as one JSON document.
    #[arg(long, requires = "probe")]
    pub json: bool,
    /// The work folder, shared with the guest as /work.
    #[arg(long, value_name = "DIR", required_unless_present = "probe")]
    pub work: Option<PathBuf>,
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
    #[arg(
        last = true,
        required_unless_present = "probe",
        value_name = "SERVER_CMD"
    )]
    pub command: Vec<String>,
}

/// Runs `sandbox vm`; returns the exit status.
pub fn main(args: VmArgs) -> i32 {
    if args.probe {
        return probe(&args);
    }
    let host = match crate::platform::platform(crate::platform::Settings::of(&args.host)).tier1() {
        Ok(h) => h,
        Err(e) => {
            eprintln!("oz0-node: sandbox vm refused: {e}");
            return EXIT_VM_FAILED;
        }
    };
    let cmd = VmCommand {
        work: args.work.unwrap_or_default(),
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

/// `sandbox vm --probe`: the self-test, then the microVM probe inside the
/// tier 1 it proved, as `oz0-node run` does at its start.
fn probe(args: &VmArgs) -> i32 {
    use oz0_core::exit::Exit;
    use oz0_core::Wall;
    let data_dir = match args.host.data.resolve() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("oz0-node: {e}");
            return Exit::Usage.code();
        }
    };
    if let Some(g) = &args.guest {
        if !g.is_file() {
            eprintln!(
                "oz0-node: --guest {}: not a file: name the node binary the test VM is to use",
                g.display()
            );
            return Exit::Usage.code();
        }
    }
    let mut config = args.host.config();
    config.node_exe = args.guest.clone();
    let wall = crate::platform::platform(crate::platform::Settings::of(&args.host)).into_wall();
    let check = wall.check();
    let self_test = wall.self_test(&check, &mut |_| {});
    let tier1 = self_test.as_ref().is_some_and(|t| t.tier() == 1);
    let r = oz0_microvm::bootcheck::probe(&oz0_microvm::bootcheck::ProbeOptions::from_env(
        tier1, config, data_dir,
    ));
    if args.json {
        let doc = serde_json::json!({
            "tier1": tier1,
            "self_test": self_test,
            "microvm": r.microvm,
            "detail": r.detail,
            "warning": r.warning,
            "boot_ms": r.boot_ms,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("serialises")
        );
    } else {
        match self_test
            .as_ref()
            .and_then(|t| t.lines.iter().find(|l| !l.ok))
        {
            Some(l) => println!("{}", l.text()),
            None if !tier1 => println!("{}", check.headline),
            None => {}
        }
        println!("MicroVMs: {}", r.detail);
        if let Some(w) = &r.warning {
            println!("Warning: {w}");
        }
    }
    if r.microvm.ready {
        Exit::Ok.code()
    } else {
        Exit::CheckFailed.code()
    }
}
