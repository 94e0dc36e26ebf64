//! `oz0-node sandbox vm`: the command line and its entry point.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::backend::{self, Backend, TestGuest};
use crate::pin::{self, Selection};
use crate::vm::{self, VmHost, VmIo, VmRequest, EXIT_VM_FAILED};

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
    #[arg(long, value_name = "MiB", default_value_t = vm::DEFAULT_MEMORY_MIB,
          value_parser = clap::value_parser!(u32).range(crate::manifest::MIN_MEMORY_MB as i64..=crate::manifest::MAX_MEMORY_MB as i64))]
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
    /// The node's data directory (VM records go under microvm/vms/).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// bubblewrap to use (default: bwrap on PATH).
    #[arg(long, value_name = "PATH", hide = true)]
    pub bwrap: Option<PathBuf>,
    /// The server's command.
    #[arg(last = true, required = true, value_name = "SERVER_CMD")]
    pub command: Vec<String>,
}

fn fail(msg: impl std::fmt::Display) -> i32 {
    eprintln!("oz0-node: sandbox vm refused: {msg}");
    EXIT_VM_FAILED
}

/// The VMM from the environment: the test backend when
/// `OZ0_MICROVM_TEST_BACKEND=qemu-tcg`, else smolvm per `OZ0_MICROVM`.
pub fn backend_from_env() -> Result<(Backend, Option<String>), String> {
    match std::env::var(backend::TEST_BACKEND_VAR).ok().as_deref() {
        None | Some("") => {}
        Some(backend::TEST_BACKEND_QEMU) => {
            let dir = std::env::var_os(backend::TEST_GUEST_VAR)
                .map(PathBuf::from)
                .ok_or_else(|| {
                    format!(
                        "{}=qemu-tcg needs {} naming the folder scripts/build-test-guest.sh filled",
                        backend::TEST_BACKEND_VAR,
                        backend::TEST_GUEST_VAR
                    )
                })?;
            let qemu = std::env::var_os(backend::TEST_QEMU_VAR)
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/usr/bin/qemu-system-x86_64"));
            let g = TestGuest { qemu, dir };
            for p in [g.kernel(), g.initrd(None), g.qemu.clone()] {
                if !p.is_file() {
                    return Err(format!("{} is missing: install qemu-system-x86 and run scripts/build-test-guest.sh", p.display()));
                }
            }
            return Ok((Backend::QemuTcg(g), Some("the QEMU test backend (software emulation) is not a microVM this node offers; it is for tests only".into())));
        }
        Some(other) => {
            return Err(format!(
                "{}={other:?} is not a test backend: the one there is is qemu-tcg",
                backend::TEST_BACKEND_VAR
            ))
        }
    }
    let sel = Selection::from_value(std::env::var(pin::MICROVM_VAR).ok().as_deref());
    let vmm =
        pin::select(&sel, std::env::var("PATH").ok().as_deref()).map_err(|e| e.to_string())?;
    let warning = vmm.warning.clone();
    Ok((Backend::Smolvm(vmm), warning))
}

/// Runs `sandbox vm`; returns the exit status.
pub fn vm_main(args: VmArgs) -> i32 {
    let data_dir = match oz0_linux::host::data_dir(args.data_dir.as_deref()) {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    let mut env = Vec::new();
    for n in &args.env {
        if let Some(why) = crate::manifest::vm_variable_refusal(n) {
            return fail(format!("--env {why}"));
        }
        match std::env::var(n) {
            Ok(v) => env.push((n.clone(), v)),
            Err(_) => {
                return fail(format!(
                    "--env {n}: {n} is not set (or not UTF-8) in this environment: export it"
                ))
            }
        }
    }
    let (backend, warning) = match backend_from_env() {
        Ok(b) => b,
        Err(e) => return fail(e),
    };
    if let Some(w) = warning {
        eprintln!("oz0-node: warning: {w}");
    }
    let path_var = std::env::var("PATH").ok();
    let bwrap = match oz0_linux::bwrap::find(args.bwrap.as_deref(), path_var.as_deref()) {
        Ok(b) => b,
        Err(e) => return fail(format!("no tier 1, so no VM: {e}")),
    };
    let node_exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => return fail(format!("cannot find this binary's own path: {e}")),
    };
    let proxy = if !args.allow.is_empty() || !args.forward.is_empty() {
        // Decisions go to the node's audit log, never to stderr, which the
        // tool server's output shares.
        let log = match oz0_linux::hostfs::open_log(
            "the egress audit log",
            &data_dir.join(oz0_egress::AUDIT_LOG_NAME),
        ) {
            Ok(f) => f,
            Err(e) => return fail(e),
        };
        match oz0_egress::Proxy::start(oz0_egress::ProxyConfig {
            audit: std::sync::Arc::new(oz0_egress::FileSink::new(log)),
            ..Default::default()
        }) {
            Ok(p) => Some(p),
            Err(e) => return fail(format!("the egress proxy could not start: {e}")),
        }
    } else {
        None
    };
    let req = VmRequest {
        work: args.work,
        memory_mib: args.memory,
        cpus: args.cpus,
        allow: args.allow,
        forward: args.forward,
        env,
        image: args.image,
        command: args.command,
        data_dir,
        boot_timeout: Duration::from_secs(args.boot_timeout.max(1)),
        monitor_limits: Default::default(),
    };
    let host = VmHost {
        bwrap,
        node_exe,
        backend,
        proxy: proxy.as_ref(),
        jobs: None,
        tmp: std::env::temp_dir(),
        handle_signals: true,
    };
    let r = vm::run_vm(&req, host, VmIo::std());
    if let Some(p) = proxy {
        p.shutdown();
    }
    match r {
        Ok(o) => {
            match &o.ended {
                vm::VmEnded::BootTimeout => eprintln!("oz0-node: the VM did not answer within {} s; it was stopped{}", req.boot_timeout.as_secs(), tail(&o.console_tail)),
                vm::VmEnded::GuestFailed { reason } => eprintln!("oz0-node: the VM could not start the server: {reason}"),
                vm::VmEnded::MonitorEnded => eprintln!("oz0-node: the VM monitor ended before the server{}", tail(&o.console_tail)),
                vm::VmEnded::InputEnded => eprintln!("oz0-node: the input ended and the server did not exit within {} s; the VM was stopped", vm::EOF_GRACE.as_secs()),
                _ => {}
            }
            if std::env::var_os("OZ0_MICROVM_TIMING").is_some() {
                eprintln!(
                    "oz0-node: vm {} answered after {:?} ms",
                    o.vm_id, o.answered_ms
                );
            }
            o.exit_code
        }
        Err(e) => fail(e),
    }
}

fn tail(t: &str) -> String {
    if t.trim().is_empty() {
        String::new()
    } else {
        format!("; guest console:\n{t}")
    }
}
