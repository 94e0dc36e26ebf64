//! One run: its stdio, its cancel handle, how it ended.

use std::fs::File;

use serde::Serialize;

/// Why a run never ran: the sandbox's own error, naming the value and the
/// fix (each platform has its typed error; callers print it).
pub type RunError = Box<dyn std::error::Error + Send + Sync>;

/// Where one of the command's standard streams goes.
#[derive(Debug, Default)]
pub enum Stdio {
    /// The caller's own (MCP over stdio, interactive use).
    #[default]
    Inherit,
    /// The null device.
    Null,
    /// A file or pipe the caller opened (a job's output file): the command
    /// gets it; the caller's own stream is never rewired.
    File(File),
}

/// The command's stdin, stdout and stderr.
#[derive(Debug, Default)]
pub struct RunIo {
    /// stdin.
    pub stdin: Stdio,
    /// stdout.
    pub stdout: Stdio,
    /// stderr (also where the sandbox's own messages about the run go).
    pub stderr: Stdio,
}

impl RunIo {
    /// The caller's stdin, stdout and stderr.
    pub fn inherit() -> RunIo {
        RunIo::default()
    }

    /// No input, output discarded, errors on the caller's stderr (the
    /// self-test's runs, a VM monitor whose server talks over its own
    /// stream).
    pub fn quiet() -> RunIo {
        RunIo {
            stdin: Stdio::Null,
            stdout: Stdio::Null,
            stderr: Stdio::Inherit,
        }
    }

    /// No input; output and errors into the caller's files.
    pub fn files(stdout: File, stderr: File) -> RunIo {
        RunIo {
            stdin: Stdio::Null,
            stdout: Stdio::File(stdout),
            stderr: Stdio::File(stderr),
        }
    }
}

/// Everything a caller sets for one run besides its spec.
#[derive(Debug, Default)]
pub struct RunOptions {
    /// The command's stdio.
    pub io: RunIo,
    /// Fires when the run must be cancelled.
    pub cancel: Option<Cancel>,
    /// What the run is: a command (the default), or a VM monitor.
    pub role: Role,
    /// A deliberate weakness, for the self-test's own runs only (see
    /// [`Fault`]).
    pub fault: Option<Fault>,
}

impl RunOptions {
    /// A command's run with `io`, cancelled by `cancel`.
    pub fn new(io: RunIo, cancel: Option<Cancel>) -> RunOptions {
        RunOptions {
            io,
            cancel,
            ..RunOptions::default()
        }
    }
}

/// What a run is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Role {
    /// A command (a shell job, a tool's server, `sandbox run`).
    #[default]
    Command,
    /// A microVM's monitor (tier 2): the same wall, and what a VMM needs
    /// beyond a command. A wall that cannot hold a monitor refuses it.
    Monitor(Monitor),
    /// A command whose whole root is an unpacked OCI image (read-only),
    /// with the spec's work folder at [`IMAGE_WORK`] and nothing of the
    /// host's system. A wall that cannot give a run another root refuses it.
    Image(ImageRoot),
}

/// Where the work folder is inside a run whose root is an image.
pub const IMAGE_WORK: &str = "/work";

/// An image's root for a run ([`Role::Image`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRoot {
    /// The unpacked rootfs on the host, by absolute path: a folder no run
    /// can write (the node's image cache).
    pub rootfs: String,
    /// The command's working folder inside (the image's `WorkingDir`);
    /// `None` is [`IMAGE_WORK`].
    pub cwd: Option<String>,
    /// The user and group the command runs as inside (the image's
    /// `User`), mapped from the node's own user; `None` is the node's own
    /// ids. Never a privilege: the run has no capability whatever its ids.
    pub user: Option<(u32, u32)>,
}

impl Role {
    /// What the run is, for a wall's refusal ("a VM's monitor").
    pub fn what(&self) -> &'static str {
        match self {
            Role::Command => "a command",
            Role::Monitor(_) => "a VM's monitor",
            Role::Image(_) => "a run in an image's root",
        }
    }
}

/// What a VM monitor's run needs beyond a command's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Monitor {
    /// Host devices it may use (`/dev/kvm`), by absolute path.
    pub devices: Vec<String>,
    /// The system calls a VMM needs beyond a command's (`userfaultfd`).
    pub vmm_syscalls: bool,
    /// Variables it reads by name (a microVM tool's settings and secrets,
    /// so no value is on its command line), each name under the
    /// platform's prefix for them.
    pub secrets: Vec<(String, String)>,
    /// A unix socket on the host (the VM's egress proxy) it reaches at a
    /// fixed place inside.
    pub egress_socket: Option<String>,
}

/// A deliberate weakness of one run. **It weakens the wall.** Only the
/// self-test injects one, into its own runs, to prove that each of its
/// checks can fail; a self-test with a fault injected never reports a tier
/// above 0. A wall that cannot weaken itself that way refuses the run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// Processes of the run may outlive it (the host's process space).
    SharePid,
    /// The run shares the host's network.
    ShareNet,
    /// This host folder (e.g. the data directory) is visible in the run.
    Expose(String),
    /// This host folder is visible, writable, at another place outside
    /// every other rule (Linux: the proof that Landlock alone refuses).
    ExposeAt {
        /// Host folder.
        src: String,
        /// Where inside.
        dest: String,
    },
    /// Protected paths are not held.
    NoProtectedPaths,
    /// This node variable reaches the command.
    LeakEnv(String, String),
    /// The wall's confinement of the run cannot be applied (its job, its
    /// profile): a wall that fails closed never runs the command.
    Unconfinable,
    /// Linux: Landlock is not applied.
    NoLandlock,
    /// Linux: no seccomp filter.
    NoSeccomp,
}

/// Fires when the run must be stopped: every process of the run is killed.
/// On Unix a descriptor that becomes readable (or hung up): a signal's
/// self-pipe, or a socket whose other end the caller writes or closes. On
/// Windows a handle that becomes signalled: an event the caller sets (its
/// Ctrl-C handler's, or one it sets when it drops the run), which the
/// sandbox waits on together with the run's processes.
#[derive(Debug)]
pub struct Cancel(
    #[cfg(unix)] pub std::os::fd::OwnedFd,
    #[cfg(windows)] pub std::os::windows::io::OwnedHandle,
);

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "how")]
pub enum Ended {
    /// The command exited (its status is the exit code; death by signal N
    /// is 128+N).
    Exited,
    /// `--timeout` was reached and the run was killed.
    Timeout,
    /// `--cpu-seconds` was used up and the run was killed.
    CpuTime,
    /// The run was cancelled.
    Cancelled,
    /// The command could not be executed (not found: 127, otherwise 126).
    NotExecuted {
        /// Why.
        reason: String,
    },
}

/// Which limit ended or constrained the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitHit {
    /// CPU time: the run was killed.
    CpuTime,
    /// Memory: the kernel killed processes of the run.
    Memory,
    /// Processes: at least one new process was refused.
    Processes,
}

/// What a run did and what held it.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The run's id.
    pub run_id: String,
    /// How it ended.
    pub ended: Ended,
    /// The command's status (128+N for signal N); 124 on timeout.
    pub exit_code: i32,
    /// Wall time, milliseconds.
    pub duration_ms: u64,
    /// A limit the run met.
    pub limit_hit: Option<LimitHit>,
    /// What the caller is warned of (one line each, e.g. what the run left
    /// that host git would run).
    pub warnings: Vec<String>,
    /// The platform's fields of the run's status document: what was
    /// enforced (`enforced`), what was found after the run.
    pub report: serde_json::Map<String, serde_json::Value>,
}

impl Outcome {
    /// Why the run ended as it did, in words, when it did not simply exit:
    /// (the status document's `outcome`, its `reason`).
    pub fn describe(&self) -> (&'static str, Option<String>) {
        match &self.ended {
            Ended::NotExecuted { reason } => ("not_executed", Some(reason.clone())),
            Ended::Timeout => ("timeout", Some("the wall-time limit (--timeout) was reached; every process of the run was killed".into())),
            Ended::CpuTime => ("cpu_time", Some("the CPU-time limit (--cpu-seconds) was used up; every process of the run was killed".into())),
            Ended::Cancelled => ("cancelled", Some("the node was told to stop (signal); every process of the run was killed".into())),
            Ended::Exited if self.limit_hit == Some(LimitHit::Memory) => ("out_of_memory", Some("the memory limit (--memory) was reached and the kernel killed processes of the run".into())),
            Ended::Exited if self.limit_hit == Some(LimitHit::Processes) => ("exited", Some("the process limit (--processes) refused at least one new process".into())),
            Ended::Exited => ("exited", None),
        }
    }
}
