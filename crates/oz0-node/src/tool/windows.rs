//! A call's server on Windows: tier 0, no wall.
//!
//! A Windows node runs no tool job of the edge's (it routes a tool only to
//! a node with tier 1), and its operator's own `plugin call` runs a
//! command tool's server as the seed says a Windows node's plugin servers
//! run: at tier 0, with the operator's own permissions, through the node
//! core's door for it (`oz0_windows::tier0::JobObject`). What that gives,
//! as a Linux tool job's run has it: a kill-on-close job object holding
//! every process the server starts, ended with the call (the end of its
//! input, then after [`EOF_GRACE`], or at once when the call failed, the
//! whole job); the call's timeout, with the run's own a little longer;
//! exactly the tool's variables (and what Windows needs); the bounded MCP
//! client. What it does not give is any wall: the server reads and writes
//! what the operator can, and reaches the network. So the caller must say
//! so (`--no-wall`), and what only a wall enforces is refused, never run
//! without it: a tool with egress (its allowlist needs the egress
//! proxy's wall), a container tool (its image's root needs tier 1) and a
//! microVM tool (a Windows node has none).

use std::fs::File;
use std::io::Write;
use std::os::windows::io::AsHandle;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use oz0_core::{Cancel, Ended, Outcome, RunIo, RunOptions, Sandbox, Stdio};
use oz0_plugin::job::{CheckedToolJob, FILES_DIR};
use oz0_plugin::manifest::Isolation;
use oz0_plugin::mcp::{Client, Listed, McpError, EOF_GRACE};
use oz0_policy::{EnvVar, Limits, RunRequest, RunSpec};
use oz0_windows::native::{pipe, wait_for, CancelEvent};
use oz0_windows::supervise::Woke;
use oz0_windows::tier0::{carry, JobObject};

use super::end::{end_of, with_run_error};
use super::{args_at_work, at_work, variables, ToolEnd, ToolError, RUN_GRACE_S, WORK_IN_VM};

/// The wall a call's phases name.
pub const BACKEND: &str =
    "tier 0: no wall (a kill-on-close job object, with the caller's permissions)";

/// What a call needs of the node.
pub struct Ctx<'a> {
    /// The call's work folder (its real path, on a drive letter).
    pub work: &'a Path,
    /// The node's data directory (the run's spec names it).
    pub data_dir: &'a Path,
    /// Where the server's stderr goes.
    pub errors: File,
    /// Fires when the call must stop (Ctrl-C's).
    pub cancel: Option<Cancel>,
    /// Set when `cancel` fired.
    pub cancelled: Arc<AtomicBool>,
}

/// Why `tool` cannot run at tier 0, if it cannot.
pub fn refusal(tool: &oz0_plugin::manifest::Tool) -> Option<ToolError> {
    let not = |why: &str| {
        Some(ToolError::NotAtTier0 {
            tool: tool.id.clone(),
            why: why.to_string(),
        })
    };
    match tool.isolation {
        Isolation::Microvm => Some(ToolError::LeftOut {
            tool: tool.id.clone(),
            why: "a Windows node has none".into(),
        }),
        Isolation::Container => not("a container tool's image runs only in its own root inside tier 1 or gVisor, which a Windows node has not: call it on a Linux node"),
        Isolation::Sandbox if !tool.egress.is_empty() => not("it lists egress hosts, and only a wall's egress proxy holds a server to them: call it on a Linux node"),
        Isolation::Sandbox => None,
    }
}

/// Runs one call to its end (blocking).
pub fn run(ctx: Ctx<'_>, t: &CheckedToolJob) -> Result<ToolEnd, ToolError> {
    let started = Instant::now();
    if let Some(e) = refusal(&t.tool) {
        return Err(e);
    }
    let (spec, work) = server_spec(&ctx, &t.tool, t.job.timeout_s())?;
    place_files(ctx.work, &t.files)?;
    let mut params = t.call_params(WORK_IN_VM);
    args_at_work(&mut params, &work, '\\');
    let deadline = started + Duration::from_secs(t.job.timeout_s());
    let (r, run) = serve(ctx, &spec, deadline, |c| c.call(params))?;
    Ok(end_of(
        with_run_error(r, run_failure(run), "the server's run"),
        started,
        BACKEND,
        None,
    ))
}

/// What `plugin check --no-wall` asks of a command tool: its server,
/// started as a call starts it (in the empty work folder of `ctx`, with
/// the tool's variables), answers `initialize` and `tools/list` within
/// `timeout`; it is then ended. What it lists, or why it did not answer.
pub fn try_server(
    ctx: Ctx<'_>,
    tool: &oz0_plugin::manifest::Tool,
    timeout: Duration,
) -> Result<Listed, ToolError> {
    if let Some(e) = refusal(tool) {
        return Err(e);
    }
    let (spec, _) = server_spec(&ctx, tool, timeout.as_secs())?;
    let (r, run) = serve(ctx, &spec, Instant::now() + timeout, |c| c.list())?;
    with_run_error(r, run_failure(run), "the server's run").map_err(ToolError::NoAnswer)
}

/// The server's run as tier 0 takes it, and the work folder's path: the
/// tool's command with `/work` standing for that folder, its variables,
/// and a timeout [`RUN_GRACE_S`] past the call's `timeout_s`.
fn server_spec(
    ctx: &Ctx<'_>,
    tool: &oz0_plugin::manifest::Tool,
    timeout_s: u64,
) -> Result<(RunSpec, String), ToolError> {
    let work = ctx
        .work
        .to_str()
        .ok_or(ToolError::NotUtf8("the work folder"))?
        .to_string();
    let carried = |p: &Path| carry(p).map_err(|e| ToolError::Tier0Path(e.to_string()));
    let env = variables(tool, None)?
        .into_iter()
        .map(|(k, v)| EnvVar::new(&k, &v).map_err(|source| ToolError::Variable { name: k, source }))
        .collect::<Result<Vec<_>, _>>()?;
    let spec = RunSpec::new(RunRequest {
        work: carried(ctx.work)?,
        data_dir: carried(ctx.data_dir)?,
        env,
        command: tool
            .command
            .iter()
            .map(|a| at_work(a, &work, '\\'))
            .collect(),
        limits: Limits {
            timeout_seconds: Some(timeout_s + RUN_GRACE_S),
            ..Limits::default()
        },
        ..RunRequest::default()
    })?;
    Ok((spec, work))
}

/// Why the server's run failed, if it did (a program that could not be
/// started is said as Windows said it).
fn run_failure(run: Result<Outcome, String>) -> Option<String> {
    match run {
        Ok(Outcome {
            ended: Ended::NotExecuted { reason },
            ..
        }) => Some(reason),
        Ok(_) => None,
        Err(e) => Some(e),
    }
}

/// What the server answered, and its run's end (or why it failed).
type Talked<T> = (Result<T, McpError>, Result<Outcome, String>);

/// Starts the server through tier 0's door on a thread of its own, its
/// stdio over pipes, makes the call, then ends it: the end of its input,
/// and its whole job after [`EOF_GRACE`] (at once when the call failed
/// or was cancelled).
fn serve<T>(
    ctx: Ctx<'_>,
    spec: &RunSpec,
    deadline: Instant,
    talk: impl FnOnce(Client<'_, File>) -> Result<T, McpError>,
) -> Result<Talked<T>, ToolError> {
    let channel = |what: &'static str| {
        move |e: oz0_windows::launch::SysError| ToolError::Channel {
            what,
            source: std::io::Error::other(e.to_string()),
        }
    };
    let (server_in, to_server) = pipe().map_err(channel("the server's input"))?;
    let (from_server, server_out) = pipe().map_err(channel("the server's output"))?;
    let event = |what: &'static str| {
        move |e: oz0_windows::native::NativeError| ToolError::Channel {
            what,
            source: std::io::Error::other(e),
        }
    };
    let stop = Arc::new(CancelEvent::new().map_err(event("the server's stop"))?);
    let run_stop = stop.cancel().map_err(event("the server's stop"))?;
    let finished = CancelEvent::new().map_err(event("the call's end"))?;
    let io = RunIo {
        stdin: Stdio::File(File::from(server_in)),
        stdout: Stdio::File(File::from(server_out)),
        stderr: Stdio::File(ctx.errors),
    };
    // The caller's cancel stops the server and ends the client's waits.
    let stopped = ctx.cancelled;
    let watcher = match ctx.cancel {
        Some(c) => {
            let done = finished.cancel().map_err(event("the call's end"))?;
            let (stop, stopped) = (stop.clone(), stopped.clone());
            Some(std::thread::spawn(move || {
                // One wait on both: the caller's cancel set reads as the
                // first handle's end, the call's end as the second's.
                if matches!(
                    wait_for(c.0.as_handle(), Some(&done), None),
                    Ok(Woke::Exited(_))
                ) {
                    stopped.store(true, Ordering::SeqCst);
                    stop.set();
                }
            }))
        }
        None => None,
    };
    let talked = std::thread::scope(|s| {
        let (ended_tx, ended_rx) = mpsc::channel();
        let server = s.spawn(move || {
            let r = JobObject::new()
                .run(spec, RunOptions::new(io, Some(run_stop)))
                .map_err(|e| e.to_string());
            let _ = ended_tx.send(());
            r
        });
        // The client's end of the server's input goes when the call returns.
        let r = talk(Client::new(
            File::from(to_server),
            File::from(from_server),
            deadline,
            &stopped,
        ));
        // A server that ended well exits at the end of its input; one that
        // did not, or any other end of the call, is stopped.
        let stop_now = match &r {
            Ok(_) => ended_rx.recv_timeout(EOF_GRACE).is_err(),
            Err(_) => true,
        };
        if stop_now {
            stop.set();
        }
        let run = server.join().map_err(|_| ToolError::ServerThread)?;
        Ok((r, run))
    });
    finished.set();
    if let Some(w) = watcher {
        let _ = w.join();
    }
    talked
}

/// Places the call's files in `work\.oz0-files\`: the folder made new (a
/// link or anything else already there refuses the call), each file
/// created new, never through a link, each name one Windows cannot read
/// as a device or another name.
///
/// Nothing of the call runs yet, so only the caller's own processes could
/// race it, and at tier 0 they hold what the server will hold anyway.
fn place_files(work: &Path, files: &[(String, Vec<u8>)]) -> Result<(), ToolError> {
    use oz0_windows::hold::FILE_FLAG_OPEN_REPARSE_POINT;
    use std::os::windows::fs::OpenOptionsExt;
    if files.is_empty() {
        return Ok(());
    }
    for (name, _) in files {
        oz0_windows::winpath::check_name(name).map_err(|e| ToolError::File {
            name: name.clone(),
            source: std::io::Error::other(e.to_string()),
        })?;
    }
    let dir = work.join(FILES_DIR);
    std::fs::create_dir(&dir).map_err(|source| ToolError::Files {
        what: FILES_DIR.to_string(),
        source,
    })?;
    for (name, bytes) in files {
        let fail = |source| ToolError::File {
            name: name.clone(),
            source,
        };
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT)
            .open(dir.join(name))
            .map_err(fail)?
            .write_all(bytes)
            .map_err(fail)?;
    }
    Ok(())
}
