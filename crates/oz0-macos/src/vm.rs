//! Apple's container launcher (macOS only): one tool server in a microVM
//! of its own, as `sandbox vm` runs it.
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
//! Apple's VMs are started by Apple's own services, so they are not inside
//! tier 1: the guest's kernel is the boundary. Type-checked in CI; it has
//! not run on a Mac.

use std::process::{Command, Stdio};
use std::time::Duration;

use oz0_core::Cancel;
use oz0_policy::AbsPath;
use rustix::event::{poll, PollFd, PollFlags, Timespec};

use crate::container::{run_argv, stop_argvs, ContainerError, EnvFile, VmTool, CONTAINER};
use crate::runs::{new_run_id, RunTemp, RunsError};
use crate::sandbox::SetupError;

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
}

/// Where the container CLI is looked up (its installer puts it in
/// /usr/local/bin).
const PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";

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

/// Runs `tool` (its `name` is given here) with the variables `vars`, its
/// stdin and stdout this process's (MCP over stdio), until the server ends
/// or `cancel` fires; then its VM is stopped and deleted, then its env
/// file. The server's status, or why nothing was started (`Err`).
pub fn run_tool(
    mut tool: VmTool,
    vars: &[(String, String)],
    cancel: Option<Cancel>,
) -> Result<i32, VmError> {
    let folder = RunTemp::new(&crate::sandbox::temp_root()?)?;
    let env_file = EnvFile::create(&folder.0.join("env"), vars)?;
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
    let mut child = container(&argv).spawn().map_err(VmError::Start)?;
    let code =
        loop {
            match child.try_wait() {
                Ok(Some(st)) => break oz0_core::exit::status_code(st),
                Ok(None) => {}
                Err(e) => {
                    stop(&name);
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(VmError::Wait(e));
                }
            }
            let t = Timespec {
                tv_sec: 0,
                tv_nsec: Duration::from_millis(50).as_nanos().try_into().unwrap_or(0),
            };
            let fired = cancel.as_ref().is_some_and(|c| {
                let mut fds = [PollFd::new(&c.0, PollFlags::IN)];
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
    Ok(code)
}
