//! A call's server on Linux: in a microVM of its own (its monitor inside
//! tier 1), in the node's tier-1 sandbox (a command tool), or in its
//! image's root inside tier 1 or gVisor (a container tool).

use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use oz0_core::exit::Exit;
use oz0_core::{Cancel, Role, RunOptions, Sandbox};
use oz0_linux::Tier1;
use oz0_microvm::backend::{backend_from_env, Backend, TestGuest};
use oz0_microvm::vm::{self, VmHost, VmRequest, DEFAULT_MEMORY_MIB};
use oz0_plugin::job::CheckedToolJob;
use oz0_plugin::manifest::{Isolation, Tool};
use oz0_plugin::mcp::{CallResult, Client, Listed, McpError};
use oz0_policy::{EnvVar, Limits, RunRequest, RunSpec};
use serde_json::Value;

use super::end::{end_of, with_run_error};
use super::{
    args_at_work, at_work, call_over, place_files, variables, ToolEnd, ToolError, RUN_GRACE_S,
    WORK_IN_VM,
};

/// What a call needs of the node.
pub struct Ctx<'a> {
    /// The node's host context: every server's run goes through it.
    pub host: &'a Tier1,
    /// The call's work folder: fresh, empty, this node's own.
    pub work: &'a Path,
    /// The node's data directory (VM records).
    pub data_dir: &'a Path,
    /// Whether this node offers microVMs: why not, when not.
    pub microvms: Result<(), String>,
    /// Whether this node runs container tools: where it pulls their images
    /// from, or why not.
    pub images: Result<&'a crate::flags::OciArgs, String>,
    /// A container tool's image runs in gVisor (its tenant asks for it),
    /// not in tier 1.
    pub gvisor: bool,
    /// The variables of this process's environment a tool may be given
    /// (the daemon's `--tool-env`); None: any (a caller's own call).
    pub env_allowed: Option<&'a std::collections::BTreeSet<String>>,
    /// Where the server's stderr goes.
    pub errors: File,
    /// Turns readable, or hangs up, when the call must stop.
    pub cancel: OwnedFd,
}

impl Ctx<'_> {
    /// The work folder's and the data directory's paths, as a run's spec
    /// takes them.
    fn paths(&self) -> Result<(String, String), ToolError> {
        let utf8 = |p: &Path, what| {
            p.to_str()
                .map(str::to_string)
                .ok_or(ToolError::NotUtf8(what))
        };
        Ok((
            utf8(self.work, "the work folder")?,
            utf8(self.data_dir, "the data directory")?,
        ))
    }
}

/// Runs one call to its end (blocking).
pub fn run(ctx: Ctx<'_>, t: &CheckedToolJob) -> Result<ToolEnd, ToolError> {
    let started = Instant::now();
    match t.tool.isolation {
        Isolation::Container => {
            if let Err(why) = &ctx.images {
                return Err(ToolError::NoContainers {
                    tool: t.tool.id.clone(),
                    why: why.clone(),
                });
            }
        }
        Isolation::Microvm => {
            if let Err(why) = &ctx.microvms {
                return Err(ToolError::LeftOut {
                    tool: t.tool.id.clone(),
                    why: why.clone(),
                });
            }
        }
        Isolation::Sandbox => {}
    }
    let call = Call {
        t,
        deadline: started + Duration::from_secs(t.job.timeout_s()),
        limits: Limits {
            timeout_seconds: Some(t.job.timeout_s() + RUN_GRACE_S),
            ..Limits::default()
        },
        env: variables(&t.tool, ctx.env_allowed)?,
    };
    place_files(ctx.work, &t.files)?;
    let served = match t.tool.isolation {
        Isolation::Microvm => in_vm(ctx, call)?,
        Isolation::Sandbox | Isolation::Container => in_sandbox(ctx, call)?,
    };
    let mut end = end_of(served.result, started, served.backend, served.vm_answered);
    if let Some((look, failed)) = served.look {
        if failed {
            // What host git would run is still in the work folder: the call
            // fails, whatever the tool answered.
            end.outcome = "tool_failed";
            end.exit_code = Exit::GitLeftInPlace.code();
            end.reason = Some("the look after the server's run could not rename aside what host git would run; it is left in place".into());
        }
        end.look = Some(look);
    }
    Ok(end)
}

/// One call as its server is started: the job, its deadline, the limits of
/// the server's run, and the tool's variables with their values.
struct Call<'t> {
    t: &'t CheckedToolJob,
    deadline: Instant,
    limits: Limits,
    env: Vec<(String, String)>,
}

/// What serving a call gave: its result (or why none), the wall it ran
/// behind, when a VM's guest answered, and the look after a tier-1 run
/// (with whether it left a finding in place).
struct Served {
    result: Result<CallResult, String>,
    backend: &'static str,
    vm_answered: Option<u64>,
    look: Option<(Value, bool)>,
}

/// Serves the call from a microVM of its own.
fn in_vm(ctx: Ctx<'_>, call: Call<'_>) -> Result<Served, ToolError> {
    let t = call.t;
    let command = if t.tool.command.is_empty() {
        image_command(&ctx, &t.tool)?
    } else {
        t.tool.command.clone()
    };
    let (backend, warning) = backend_from_env().map_err(|e| ToolError::LeftOut {
        tool: t.tool.id.clone(),
        why: e.to_string(),
    })?;
    if let Some(w) = warning {
        crate::log::log(&format!("warning: {w}"));
    }
    let package = t.tool.package.clone().unwrap_or_default();
    let image = match &backend {
        Backend::Smolvm(_) => package,
        Backend::QemuTcg(_) => TestGuest::image_for(&package),
    };
    let described = backend.describe();
    let req = VmRequest {
        work: ctx.work.to_path_buf(),
        memory_mib: t.tool.vm_memory_mib(DEFAULT_MEMORY_MIB),
        cpus: t.tool.resources.vcpus().unwrap_or(1),
        allow: t.tool.egress.iter().map(ToString::to_string).collect(),
        forward: Vec::new(),
        env: call.env,
        image: Some(image),
        command,
        data_dir: ctx.data_dir.to_path_buf(),
        boot_timeout: call.deadline.saturating_duration_since(Instant::now()),
        monitor_limits: call.limits,
    };
    let Ctx {
        host,
        cancel,
        errors,
        ..
    } = ctx;
    let params = t.call_params(WORK_IN_VM);
    let (r, vm) = call_over(
        move |c| c.call(params),
        call.deadline,
        &cancel,
        errors,
        move |io, stop| {
            vm::run_vm(
                &req,
                VmHost {
                    cancel: Some(stop),
                    ..VmHost::on(host, backend)
                },
                io,
            )
            .map_err(|e| e.to_string())
        },
    )?;
    let answered = vm.as_ref().ok().and_then(|o| o.answered_ms);
    Ok(Served {
        result: with_run_error(r, vm.err(), "the VM"),
        backend: described,
        vm_answered: answered,
        look: None,
    })
}

/// How a tool whose image names no command is given one.
const NO_COMMAND_FIX: &str = "give the server's command: in oz0-plugin.yaml";

/// What the VM of a microVM tool without `command:` runs: its image's
/// entrypoint and cmd, from the config its registry holds (the VM pulls
/// the image itself; the node fetches no layer).
fn image_command(ctx: &Ctx<'_>, tool: &Tool) -> Result<Vec<String>, ToolError> {
    let package = tool.package.clone().unwrap_or_default();
    let oci = ctx.images.as_ref().map_err(|why| ToolError::NoCommand {
        tool: tool.id.clone(),
        why: why.clone(),
    })?;
    let refuse = |why: String| ToolError::Image {
        tool: tool.id.clone(),
        image: package.clone(),
        why,
    };
    let c = crate::oci::run_config(&package, oci).map_err(|e| refuse(e.msg))?;
    crate::oci::command(&c, Vec::new(), NO_COMMAND_FIX).map_err(refuse)
}

/// The run of a tool's server in tier 1, and the image it runs in (held
/// while the value lives).
struct ServerRun {
    spec: RunSpec,
    role: Role,
    /// gVisor, when the tool's image runs there (its tenant asks for it).
    gvisor: Option<oz0_linux::gvisor::Gvisor>,
    /// Where the server sees the work folder.
    work_inside: String,
    _image: Option<oz0_oci::cache::Image>,
}

/// The run of a tool's server in tier 1, with its variables and egress:
/// a command tool's command with `/work` standing for the work folder; a
/// container tool's image (pulled when not in the node's cache), its
/// `command:` or else the image's entrypoint and cmd, the image's
/// variables under the tool's, and the work folder at `/work`.
fn server_run(
    ctx: &Ctx<'_>,
    tool: &Tool,
    env: &[(String, String)],
    mut limits: Limits,
) -> Result<ServerRun, ToolError> {
    let (work, data_dir) = ctx.paths()?;
    let mut env: Vec<EnvVar> = env
        .iter()
        .map(|(k, v)| {
            EnvVar::new(k, v).map_err(|source| ToolError::Variable {
                name: k.clone(),
                source,
            })
        })
        .collect::<Result<_, _>>()?;
    let mut command: Vec<String> = tool
        .command
        .iter()
        .map(|a| at_work(a, &work, '/'))
        .collect();
    let (mut role, mut work_inside, mut image, mut gvisor) =
        (Role::Command, work.clone(), None, None);
    if tool.isolation == Isolation::Container {
        let package = tool.package.clone().unwrap_or_default();
        let refuse = |why: String| ToolError::Image {
            tool: tool.id.clone(),
            image: package.clone(),
            why,
        };
        let oci = ctx.images.as_ref().map_err(|why| ToolError::NoContainers {
            tool: tool.id.clone(),
            why: why.clone(),
        })?;
        let (_, i) = crate::oci::fetch(&package, oci, ctx.data_dir).map_err(|e| refuse(e.msg))?;
        let c = &i.record.config;
        command = tool.command.clone();
        if command.is_empty() {
            command = crate::oci::command(c, Vec::new(), NO_COMMAND_FIX).map_err(&refuse)?;
        }
        let notes;
        (env, notes) = crate::oci::env(c, env).map_err(&refuse)?;
        for n in notes {
            crate::log::log(&format!("tool {:?}: {n}", tool.id));
        }
        role = Role::Image(crate::oci::root(&i).map_err(&refuse)?);
        // The manifest's `container: {memory_mb}`, as the run's cgroup
        // limit (CPUs are a VM's vCPUs: tier 1 has no CPU share to give).
        limits.memory_mib = tool.resources.memory_mb.map(u64::from);
        work_inside = WORK_IN_VM.to_string();
        image = Some(i);
        if ctx.gvisor {
            let g = oz0_linux::gvisor::Gvisor::find(ctx.data_dir, ctx.host.job_mode().ok())
                .map_err(|e| ToolError::NoContainers {
                    tool: tool.id.clone(),
                    why: format!("its tenant asks for gVisor, and {e}"),
                })?;
            gvisor = Some(g);
        }
    }
    let spec = RunSpec::new(RunRequest {
        work,
        read: vec![],
        write: vec![],
        env,
        allow: tool.egress.iter().map(ToString::to_string).collect(),
        forward: vec![],
        limits,
        data_dir,
        allow_unix_sockets: false,
        command,
    })?;
    Ok(ServerRun {
        spec,
        role,
        gvisor,
        work_inside,
        _image: image,
    })
}

/// What a server answered over MCP, and its run's end (or why it failed).
type Talked<T> = (Result<T, McpError>, Result<oz0_core::Outcome, String>);

/// Runs `spec` in the node's tier-1 sandbox and speaks MCP to it with
/// `talk`: what it answered, and the run's end.
fn serve_in_sandbox<T>(
    ctx: Ctx<'_>,
    ServerRun {
        spec,
        role,
        gvisor,
        // Held (never evicted from the cache) to the run's end.
        _image: _held,
        ..
    }: ServerRun,
    deadline: Instant,
    talk: impl FnOnce(Client<'_, UnixStream>) -> Result<T, McpError>,
) -> Result<Talked<T>, ToolError> {
    let Ctx {
        host,
        cancel,
        errors,
        ..
    } = ctx;
    call_over(talk, deadline, &cancel, errors, move |io, stop| {
        let sandbox: &dyn Sandbox = match &gvisor {
            Some(g) => g,
            None => host,
        };
        let mut opts = RunOptions::new(io, Some(Cancel(stop)));
        opts.role = role;
        sandbox.run(&spec, opts).map_err(|e| e.to_string())
    })
}

/// Serves the call from the node's tier-1 sandbox (in its image's root for
/// a container tool), with `/work` in its command and arguments standing
/// for the work folder.
fn in_sandbox(ctx: Ctx<'_>, call: Call<'_>) -> Result<Served, ToolError> {
    let t = call.t;
    let s = server_run(&ctx, &t.tool, &call.env, call.limits)?;
    let mut params = t.call_params(&s.work_inside);
    args_at_work(&mut params["arguments"], &s.work_inside, '/');
    let backend = match (&s.role, &s.gvisor) {
        (_, Some(_)) => "gVisor (runsc) in the image's root",
        (Role::Image(_), None) => {
            "tier-1 sandbox in the image's root (bubblewrap, seccomp, Landlock)"
        }
        _ => "tier-1 sandbox (bubblewrap, seccomp, Landlock)",
    };
    let (r, run) = serve_in_sandbox(ctx, s, call.deadline, move |c| c.call(params))?;
    let mut look = None;
    if let Some(g) = run.as_ref().ok().and_then(|o| o.report.get("git")) {
        // A finding left in place fails the run (its own status then
        // kept as `command_exit_code`).
        let failed = run
            .as_ref()
            .is_ok_and(|o| o.report.contains_key("command_exit_code"));
        look = Some((g.clone(), failed));
    }
    Ok(Served {
        result: with_run_error(r, run.err(), "the sandbox"),
        backend,
        vm_answered: None,
        look,
    })
}

/// What `plugin check` asks of a command tool before it offers it: its
/// server started in the node's tier-1 sandbox, as a call starts it (in
/// the empty work folder of `ctx`, with the tool's variables from this
/// process's environment), answers `initialize` and `tools/list` within
/// `timeout`; it is then ended. What it lists, or why it did not answer
/// (with the run's own failure, and the end of its stderr, which goes to
/// `ctx.errors`).
pub fn try_server(ctx: Ctx<'_>, tool: &Tool, timeout: Duration) -> Result<Listed, ToolError> {
    let env = variables(tool, ctx.env_allowed)?;
    let limits = Limits {
        timeout_seconds: Some(timeout.as_secs() + RUN_GRACE_S),
        ..Limits::default()
    };
    let s = server_run(&ctx, tool, &env, limits)?;
    let deadline = Instant::now() + timeout;
    let (r, run) = serve_in_sandbox(ctx, s, deadline, |c| c.list())?;
    let why = match (r, run) {
        (Ok(l), _) => return Ok(l),
        (Err(e), Ok(o)) if o.exit_code != 0 => {
            format!("{e}; its server exited with status {}", o.exit_code)
        }
        (Err(e), Ok(_)) => e.to_string(),
        (Err(e), Err(run)) => format!("{e}; the sandbox: {run}"),
    };
    Err(ToolError::NoAnswer(why))
}
