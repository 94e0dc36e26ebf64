//! Apple's container as a wall (macOS only): one tool server in a microVM
//! of its own, as `sandbox vm` runs it, through the node core's door
//! ([`AppleContainer`] implements `oz0_core::Sandbox`, in the role of a
//! VM's monitor, as Linux's VMM runs).
//!
//! The argument list is [`crate::container::run_argv`], tested on Linux.
//! The tool's variables reach the VM only through an env file
//! ([`crate::container::EnvFile`]: 0600, created new in a folder of its
//! own only this user can enter, removed when the tool stops), never a
//! command line. The CLI starts with a clean environment (a fixed `PATH`
//! and this user's `HOME`). The VM has a name of its own, and whatever ends
//! the tool (the server, the end of its input, the cancel) it is stopped
//! and deleted by that name.
//!
//! With egress ([`ToolEgress`]) the VM still has no network device: the
//! guest's bridge (the Linux node binary the node fetched, shared
//! read-only) listens on a socket the VM publishes to a file in the tool's
//! private folder, and the node keeps connections open to it and carries
//! each the server uses to the run's proxy on loopback TCP
//! (`oz0_egress::reverse`); the run's token reaches the guest only in the
//! env file.
//!
//! Apple's VMs are started by Apple's own services, so they are not inside
//! tier 1: the guest's kernel is the boundary. Type-checked in CI; it has
//! not run on a Mac.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use oz0_core::{Cancel, Ended, Outcome, Role, RunError, RunIo, RunOptions};
use oz0_policy::{AbsPath, RunRequest, RunSpec};
use rustix::event::{poll, PollFd, PollFlags, Timespec};

use crate::container::{run_argv, stop_argvs, vm_name, ContainerError, EnvFile, VmTool, CONTAINER};
use crate::runs::{new_run_id, RunTemp, RunsError};
use crate::runs::{stdio, temp_root, SetupError};

/// What a tool with egress needs of the node.
#[derive(Debug, Clone)]
pub struct ToolEgress {
    /// The run's proxy, on loopback TCP (its allowlist the tool's).
    pub proxy: std::net::SocketAddr,
    /// The run's token, which reaches the guest's bridge only in the env
    /// file (the server sees the proxy variables that carry it).
    pub token: String,
    /// The Linux node binary the guest's bridge runs.
    pub guest_bin: AbsPath,
}

impl ToolEgress {
    /// Opens the tool's own run of the node's proxy `service` on loopback
    /// TCP (`run_id` in its audit lines, `policy` its allowlist, a new
    /// token), for a VM whose bridge runs `guest_bin`. The run lasts as
    /// long as the returned lease.
    pub fn open(
        service: &dyn oz0_egress::EgressService,
        run_id: String,
        policy: oz0_policy::net::Egress,
        guest_bin: AbsPath,
    ) -> Result<(ToolEgress, oz0_egress::Lease), oz0_egress::EgressError> {
        let token = oz0_egress::Token::generate()?;
        let (lease, proxy) = service.open_tcp(
            run_id,
            token.clone(),
            policy,
            (std::net::Ipv4Addr::LOCALHOST, 0).into(),
        )?;
        Ok((
            ToolEgress {
                proxy,
                token: token.expose().to_string(),
                guest_bin,
            },
            lease,
        ))
    }
}

/// Why a tool server was not started, or could not be waited for.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VmError {
    /// The temporary folder.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The tool's folder.
    #[error(transparent)]
    Runs(#[from] RunsError),
    /// The env file or the argument list.
    #[error(transparent)]
    Container(#[from] ContainerError),
    /// The env file's path.
    #[error("the env file's path is not plain UTF-8")]
    EnvFilePath,
    /// The container CLI could not be started.
    #[error("cannot start {CONTAINER}: {0}")]
    Start(std::io::Error),
    /// The container CLI could not be waited for (its VM was stopped).
    #[error("cannot wait for {CONTAINER}: {0}")]
    Wait(std::io::Error),
    /// The run was refused or could not be started.
    #[error("{0}")]
    Run(String),
    /// The node's side of the tool's egress could not be started.
    #[error("cannot start the egress route into the VM: {0}")]
    Egress(std::io::Error),
    /// The tool's folder is not plain UTF-8.
    #[error("the tool's folder is not plain UTF-8, which the published socket's path must be")]
    SocketPath,
}

/// Where the container CLI is looked up (its installer puts it in
/// /usr/local/bin).
const PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";

/// A `container` command (`args[0]` names it; `cli` is the program run)
/// with a clean environment.
fn container(cli: &Path, args: &[String]) -> Command {
    let mut c = Command::new(cli);
    c.args(&args[1..]).env_clear().env("PATH", PATH);
    if let Some(h) = std::env::var_os("HOME") {
        c.env("HOME", h);
    }
    c
}

/// Stops and deletes the VM `name` (quietly: it may be gone already).
fn stop(cli: &Path, name: &str) {
    for argv in stop_argvs(name) {
        let _ = container(cli, &argv)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Apple's `container` as the node core's door on a Mac (tier 2): a run
/// in the role of a VM's monitor whose command is `container run …`
/// ([`run_argv`]) with the VM's `--name`. The CLI starts with a clean
/// environment and the run's stdio (the server's, MCP over stdio), and is
/// waited for with the run's cancel and `--timeout`; whatever ends it, its
/// VM is stopped and deleted by that name. Any other run, and any fault,
/// is refused: the guest's kernel is the boundary, and nothing of the
/// host runs here.
pub struct AppleContainer {
    /// The program spoken to: Apple's `container`, or a stand-in.
    cli: PathBuf,
}

impl AppleContainer {
    /// Apple's CLI as its installer puts it: `container`, found on a fixed
    /// `PATH` (`/usr/local/bin` first).
    pub fn installed() -> AppleContainer {
        AppleContainer {
            cli: PathBuf::from(CONTAINER),
        }
    }

    /// Another program in the CLI's place, given the same arguments (`run
    /// …`, `stop NAME`, `delete --force NAME`): a stand-in for Apple's
    /// runtime where it cannot run, so that everything of the node around
    /// it runs for real (the tests on Linux).
    pub fn stand_in(cli: PathBuf) -> AppleContainer {
        AppleContainer { cli }
    }
}

impl oz0_core::Sandbox for AppleContainer {
    fn tier(&self) -> u8 {
        2
    }

    fn run(&self, spec: &RunSpec, opts: RunOptions) -> Result<Outcome, RunError> {
        let RunOptions {
            io,
            cancel,
            role,
            fault,
        } = opts;
        if let Some(f) = fault {
            return Err(format!("Apple's container cannot inject {f:?}").into());
        }
        let Role::Monitor(_) = role else {
            return Err(format!(
                "{} does not run in Apple's container: it runs a tool server's VM alone",
                role.what()
            )
            .into());
        };
        let name = vm_name(&spec.command)
            .ok_or("Apple's container runs only `container run … --name oz0-…` (a VM it can stop by name)")?
            .to_string();
        let started = Instant::now();
        let mut child = container(&self.cli, &spec.command)
            .stdin(stdio(io.stdin))
            .stdout(stdio(io.stdout))
            .stderr(stdio(io.stderr))
            .spawn()
            .map_err(|e| VmError::Start(e).to_string())?;
        let deadline = spec
            .limits
            .timeout_seconds
            .map(|s| started + Duration::from_secs(s));
        let waited = wait(&mut child, cancel.as_ref(), deadline);
        // Whatever ended the server, its VM goes with it.
        stop(&self.cli, &name);
        let (ended, code) = match waited {
            Ok(w) => w,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(VmError::Wait(e).to_string().into());
            }
        };
        Ok(Outcome {
            run_id: name,
            ended,
            exit_code: code,
            duration_ms: started.elapsed().as_millis().try_into().unwrap_or(u64::MAX),
            limit_hit: None,
            warnings: vec![],
            report: serde_json::Map::new(),
        })
    }
}

/// Waits for the CLI to end, its cancel to fire or its deadline to pass
/// (then it is killed): how it ended, and its status.
fn wait(
    child: &mut std::process::Child,
    cancel: Option<&Cancel>,
    deadline: Option<Instant>,
) -> std::io::Result<(Ended, i32)> {
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok((Ended::Exited, oz0_core::exit::status_code(st)));
        }
        let t = Timespec {
            tv_sec: 0,
            tv_nsec: Duration::from_millis(50).as_nanos().try_into().unwrap_or(0),
        };
        let fired = match cancel {
            Some(c) => {
                let mut fds = [PollFd::new(&c.0, PollFlags::IN)];
                poll(&mut fds, Some(&t)).unwrap_or(0) > 0 && !fds[0].revents().is_empty()
            }
            None => {
                std::thread::sleep(Duration::from_millis(50));
                false
            }
        };
        let late = deadline.is_some_and(|d| Instant::now() >= d);
        if fired || late {
            let _ = child.kill();
            let st = child.wait()?;
            let ended = if fired {
                Ended::Cancelled
            } else {
                Ended::Timeout
            };
            return Ok((ended, oz0_core::exit::status_code(st)));
        }
    }
}

/// Runs `tool` (its `name` is given here) through `sandbox` (Apple's
/// container, [`AppleContainer`]) with the variables `vars`, its stdio the
/// run's `io` (MCP over stdio), until the server ends or `cancel` fires;
/// its VM is then stopped and deleted, then its env file. `data_dir` is
/// the node's, which the VM never sees. The server's status, or why
/// nothing was started (`Err`).
pub fn run_tool(
    sandbox: &dyn oz0_core::Sandbox,
    mut tool: VmTool,
    vars: &[(String, String)],
    egress: Option<ToolEgress>,
    data_dir: &AbsPath,
    io: RunIo,
    cancel: Option<Cancel>,
) -> Result<i32, VmError> {
    let folder = RunTemp::new(&temp_root()?)?;
    let own: Vec<(String, String)> = egress
        .iter()
        .map(|e| (oz0_egress::reverse::TOKEN_VAR.to_string(), e.token.clone()))
        .collect();
    let env_file = EnvFile::create_with(&folder.0.join("env"), vars, &own)?;
    // The published socket's host end: made by the runtime in the tool's
    // folder, which only this user can enter.
    let mut dialing = None;
    if let Some(e) = &egress {
        let host = folder.0.join("e.sock");
        tool.egress = Some(crate::container::VmEgress {
            host_socket: host
                .to_str()
                .and_then(|s| AbsPath::new(s).ok())
                .ok_or(VmError::SocketPath)?,
            guest_bin: e.guest_bin.clone(),
        });
        dialing =
            Some(oz0_egress::reverse::serve_dialing(&host, e.proxy).map_err(VmError::Egress)?);
    }
    let env_abs = env_file
        .path()
        .to_str()
        .and_then(|s| AbsPath::new(s).ok())
        .ok_or(VmError::EnvFilePath)?;
    let name = format!(
        "oz0-{}",
        new_run_id()
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect::<String>()
            .to_ascii_lowercase()
    );
    tool.name.clone_from(&name);
    let argv = run_argv(&tool, &env_abs)?;
    debug_assert_eq!(argv[0], CONTAINER);
    let spec = RunSpec::new(RunRequest {
        work: tool.work.as_str().to_string(),
        data_dir: data_dir.as_str().to_string(),
        command: argv,
        ..Default::default()
    })
    .map_err(|e| VmError::Run(e.to_string()))?;
    let mut opts = RunOptions::new(io, cancel);
    opts.role = Role::Monitor(oz0_core::Monitor::default());
    let o = sandbox
        .run(&spec, opts)
        .map_err(|e| VmError::Run(e.to_string()))?;
    // Its VM is gone; then the node's connections to it, its env file.
    drop(dialing);
    drop(env_file);
    drop(folder);
    Ok(o.exit_code)
}
