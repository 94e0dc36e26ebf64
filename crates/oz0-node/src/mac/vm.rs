//! `sandbox vm` on macOS: one tool server in a microVM of Apple's
//! `container` (macOS 26, Apple silicon, container 1.5.0 or later).
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
//! tier 1: the guest's kernel is the boundary. Egress would need the Linux
//! node binary inside the guest for its bridge, which this build does not
//! carry: `--allow`/`--forward` are refused. Type-checked in CI; it has
//! not run on a Mac.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use clap::Args;
use oz0_core::exit::Exit;
use oz0_macos::container::{availability, run_argv, stop_argvs, EnvFile, VmTool, CONTAINER};
use oz0_policy::AbsPath;
use rustix::event::{poll, PollFd, PollFlags, Timespec};

use super::host;
use super::seatbelt::{new_run_id, RunTemp};

/// Where the container CLI is looked up (its installer puts it in
/// /usr/local/bin).
const PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";

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
    /// The server's command inside the image [default: the image's own].
    #[arg(last = true, value_name = "SERVER_CMD")]
    pub command: Vec<String>,
}

fn refuse(msg: impl std::fmt::Display) -> i32 {
    eprintln!("oz0-node: sandbox vm refused: {msg}");
    Exit::Sandbox.code()
}

/// A `container` command with a clean environment.
fn container(args: &[String]) -> Command {
    let mut c = Command::new(&args[0]);
    c.args(&args[1..]).env_clear().env("PATH", PATH);
    if let Some(h) = std::env::var_os("HOME") {
        c.env("HOME", h);
    }
    c
}

/// Stops and deletes the VM `name` (quietly: it may be gone already).
fn stop(name: &str) {
    for argv in stop_argvs(name) {
        let _ = container(&argv)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Runs `sandbox vm`.
pub fn main(a: VmArgs) -> i32 {
    let probe = super::probe::probe();
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
        return refuse("egress for a microVM tool is not in this build on macOS (the guest's bridge is the Linux node binary, which it does not carry): run the tool without --allow/--forward, or on a Linux node");
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
    // The env file lives in a folder only this user can enter, removed
    // with it.
    let folder = match host::temp_root().and_then(|r| RunTemp::new(&r)) {
        Ok(f) => f,
        Err(e) => return refuse(e),
    };
    let env_path = folder.0.join("env");
    let env_file = match EnvFile::create(&env_path, &vars) {
        Ok(f) => f,
        Err(e) => return refuse(e),
    };
    let Some(env_abs) = env_file.path().to_str().and_then(|s| AbsPath::new(s).ok()) else {
        return refuse("the env file's path is not plain UTF-8");
    };
    let name = format!(
        "oz0-{}",
        new_run_id()
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect::<String>()
            .to_ascii_lowercase()
    );
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
        name: name.clone(),
    };
    let argv = match run_argv(&tool, &env_abs) {
        Ok(v) => v,
        Err(e) => return refuse(e),
    };
    debug_assert_eq!(argv[0], CONTAINER);
    // The server's stdin and stdout are this command's (MCP over stdio).
    let mut child = match container(&argv).spawn() {
        Ok(c) => c,
        Err(e) => return refuse(format!("cannot start {CONTAINER}: {e}")),
    };
    let cancel = crate::signals::cancel_pipe();
    let code =
        loop {
            match child.try_wait() {
                Ok(Some(st)) => break oz0_core::exit::status_code(st),
                Ok(None) => {}
                Err(e) => {
                    stop(&name);
                    let _ = child.kill();
                    let _ = child.wait();
                    drop(env_file);
                    return refuse(format!("cannot wait for {CONTAINER}: {e}"));
                }
            }
            let t = Timespec {
                tv_sec: 0,
                tv_nsec: Duration::from_millis(50).as_nanos().try_into().unwrap_or(0),
            };
            let fired = cancel.as_ref().is_some_and(|c| {
                let mut fds = [PollFd::new(c, PollFlags::IN)];
                poll(&mut fds, Some(&t)).unwrap_or(0) > 0 && !fds[0].revents().is_empty()
            });
            if cancel.is_none() {
                std::thread::sleep(Duration::from_millis(50));
            }
            if fired {
                stop(&name);
                let _ = child.kill();
                break oz0_core::exit::status_code(child.wait().unwrap_or_else(|_| {
                    std::os::unix::process::ExitStatusExt::from_raw(128 + 15)
                }));
            }
        };
    // Whatever ended the server, its VM goes with it, then its env file.
    stop(&name);
    drop(env_file);
    drop(folder);
    code
}
