//! `sandbox vm` as a library call: one tool server in one VM with this
//! process's stdin, stdout and signals. The command line itself is
//! `oz0-node`'s; this is what it runs once its arguments are parsed.

use std::path::PathBuf;
use std::time::Duration;

use oz0_linux::Tier1;

use crate::backend::backend_from_env;
use crate::vm::{self, VmEnded, VmHost, VmIo, VmRequest, EXIT_VM_FAILED};

/// What `sandbox vm` was asked for.
#[derive(Debug, Clone)]
pub struct VmCommand {
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
    /// The server's variables, by name: their values are read from this
    /// process's environment.
    pub env_names: Vec<String>,
    /// The image.
    pub image: Option<String>,
    /// Seconds the VM has to boot and answer.
    pub boot_timeout_s: u64,
    /// The server's command.
    pub command: Vec<String>,
}

fn fail(msg: impl std::fmt::Display) -> i32 {
    eprintln!("oz0-node: sandbox vm refused: {msg}");
    EXIT_VM_FAILED
}

fn tail(t: &str) -> String {
    if t.trim().is_empty() {
        String::new()
    } else {
        format!("; guest console:\n{t}")
    }
}

/// Runs `cmd` on `host` (whose egress service serves the VM, if it asks
/// for egress); returns the exit status: the server's, or 125 when the VM
/// could not run it, with the reason on stderr.
pub fn run(cmd: VmCommand, host: &Tier1) -> i32 {
    let mut env = Vec::new();
    for n in &cmd.env_names {
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
    if let Err(e) = host.bwrap() {
        return fail(format!("no tier 1, so no VM: {e}"));
    }
    let req = VmRequest {
        work: cmd.work,
        memory_mib: cmd.memory_mib,
        cpus: cmd.cpus,
        allow: cmd.allow,
        forward: cmd.forward,
        env,
        image: cmd.image,
        command: cmd.command,
        data_dir: host.data_dir().to_path_buf(),
        boot_timeout: Duration::from_secs(cmd.boot_timeout_s.max(1)),
        monitor_limits: Default::default(),
    };
    let vm_host = VmHost {
        handle_signals: true,
        ..VmHost::on(host, backend)
    };
    match vm::run_vm(&req, vm_host, VmIo::inherit()) {
        Ok(o) => {
            match &o.ended {
                VmEnded::BootTimeout => eprintln!(
                    "oz0-node: the VM did not answer within {} s; it was stopped{}",
                    req.boot_timeout.as_secs(),
                    tail(&o.console_tail)
                ),
                VmEnded::GuestFailed { reason } => eprintln!(
                    "oz0-node: the VM could not start the server: {}",
                    oz0_linux::gitlook::shown(std::path::Path::new(reason))
                ),
                VmEnded::MonitorEnded => eprintln!(
                    "oz0-node: the VM monitor ended before the server{}",
                    tail(&o.console_tail)
                ),
                VmEnded::InputEnded => eprintln!(
                    "oz0-node: the input ended and the server did not exit within {} s; the VM was stopped",
                    vm::EOF_GRACE.as_secs()
                ),
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
