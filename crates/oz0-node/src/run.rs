//! `oz0-node sandbox run`.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;

use oz0_linux::hostfs::OutFile;
use oz0_linux::launch::{Ended, LaunchOptions, RunOutcome, SandboxError};
use oz0_policy::{EnvVar, Limits, RunRequest, RunSpec};
use serde_json::json;

use crate::cli::RunArgs;
use crate::exit::Exit;

/// Version of the `--json-status` document.
pub const STATUS_SCHEMA: u32 = 1;

/// Refuses the run: the reason on stderr and, with `--json-status`, in the
/// status file too (a refused run leaves no stale status of an earlier one).
fn refuse(json_status: Option<&OutFile>, msg: impl std::fmt::Display) -> i32 {
    eprintln!("oz0-node: sandbox refused: {msg}");
    if let Some(out) = json_status {
        let doc = json!({
            "schema": STATUS_SCHEMA,
            "outcome": "sandbox_error",
            "exit_code": Exit::Sandbox.code(),
            "reason": msg.to_string(),
        });
        write_status(out, &doc);
    }
    Exit::Sandbox.code()
}

pub use oz0_linux::host::data_dir;

fn utf8(what: &str, p: &Path) -> Result<String, String> {
    p.to_str()
        .map(str::to_string)
        .ok_or_else(|| format!("{what} {:?} is not valid UTF-8", p))
}

fn parse_env(args: &RunArgs) -> Result<Vec<EnvVar>, String> {
    let mut out = Vec::new();
    for f in &args.env_file {
        let raw = oz0_linux::hostfs::read_caller_file("--env-file", f)?;
        let text = String::from_utf8(raw)
            .map_err(|_| format!("--env-file {}: not valid UTF-8", f.display()))?;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim_start();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            out.push(
                EnvVar::parse(line)
                    .map_err(|e| format!("--env-file {} line {}: {e}", f.display(), i + 1))?,
            );
        }
    }
    for e in &args.env {
        let v = if e.contains('=') {
            EnvVar::parse(e)
        } else {
            let value = std::env::var(e).map_err(|_| {
                format!("--env {e}: {e} is not set (or not UTF-8) in this environment; give --env {e}=VALUE or export it")
            })?;
            EnvVar::new(e, &value)
        };
        out.push(v.map_err(|err| format!("--env: {err}"))?);
    }
    Ok(out)
}

fn request(args: &RunArgs) -> Result<RunRequest, String> {
    let data_dir = data_dir(args.data_dir.as_deref())?;
    let command = args
        .command
        .iter()
        .enumerate()
        .map(|(i, a)| {
            a.to_str()
                .map(str::to_string)
                .ok_or_else(|| format!("argument {i} of the command is not valid UTF-8"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RunRequest {
        work: utf8("--work", &args.work)?,
        read: args
            .read
            .iter()
            .map(|p| utf8("--read", p))
            .collect::<Result<_, _>>()?,
        write: args
            .write
            .iter()
            .map(|p| utf8("--write", p))
            .collect::<Result<_, _>>()?,
        env: parse_env(args)?,
        allow: args.allow.clone(),
        forward: args.forward.clone(),
        limits: Limits {
            memory_mib: args.memory,
            processes: args.processes,
            cpu_seconds: args.cpu_seconds,
            timeout_seconds: args.timeout,
            tmp_mib: Some(args.tmp_size),
        },
        data_dir: utf8("--data-dir", &data_dir)?,
        allow_unix_sockets: args.allow_unix_sockets,
        command,
    })
}

/// Where the run's job goes, when its limits need one: probed (or
/// `cgroup_root`), refused with the reason and the fix when no cgroup this
/// user can drive is found. `what` names the limits for the message. Job
/// folders of runs whose node died are removed before a new one is made.
pub fn job_mode(
    spec: &RunSpec,
    cgroup_root: Option<std::path::PathBuf>,
    what: &str,
) -> Result<Option<oz0_jobs::JobMode>, String> {
    if !spec.limits.needs_job() {
        return Ok(None);
    }
    let probed = oz0_jobs::probe_mode(&oz0_jobs::ProbeOptions {
        cgroup_root,
        version: None,
    });
    if let oz0_jobs::JobMode::Unavailable { reason, fix } = &probed.mode {
        return Err(format!(
            "{what} need a job (cgroup) this user can make: {reason} — {fix}"
        ));
    }
    let _ = oz0_jobs::cleanup_stale(&probed.mode);
    Ok(Some(probed.mode))
}

/// Where a run's egress decisions are recorded: `flag`, else
/// `<data-dir>/egress-audit.jsonl`. Never the node's stderr, which the run
/// shares and could forge records in or bury them under.
pub fn audit_log(spec: &RunSpec, flag: Option<&Path>) -> std::path::PathBuf {
    flag.map(Path::to_path_buf)
        .unwrap_or_else(|| spec.data_dir.as_path().join(oz0_egress::AUDIT_LOG_NAME))
}

/// The egress proxy for a run with egress, recording each decision in
/// `audit_log`; none without egress.
pub fn start_proxy(
    spec: &RunSpec,
    audit_log: &Path,
) -> Result<Option<oz0_egress::ProxyHandle>, String> {
    if !spec.egress.is_enabled() {
        return Ok(None);
    }
    let log = oz0_linux::hostfs::open_log("the egress audit log", audit_log)?;
    oz0_egress::Proxy::start(oz0_egress::ProxyConfig {
        audit: std::sync::Arc::new(oz0_egress::FileSink::new(log)),
        ..Default::default()
    })
    .map(Some)
    .map_err(|e| format!("the egress proxy could not start: {e}"))
}

/// A pipe that becomes readable on SIGINT, SIGTERM or SIGHUP.
fn cancel_pipe() -> Option<OwnedFd> {
    let (r, w) = UnixStream::pair().ok()?;
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::low_level::pipe::register(sig, w.try_clone().ok()?).ok()?;
    }
    Some(OwnedFd::from(r))
}

/// Writes the `--json-status` document (see [`OutFile`]: no link is
/// followed, in the folder opened before the run).
fn write_status(out: &OutFile, doc: &serde_json::Value) {
    let text = serde_json::to_string_pretty(doc).expect("a status document serialises") + "\n";
    if let Err(e) = out.write(text.as_bytes()) {
        eprintln!(
            "oz0-node: cannot write --json-status {}: {e}",
            out.path().display()
        );
    }
}

/// One warning line per thing the run left that host git would run or
/// follow, with what was done with it (a path is shown escaped: the run
/// chose it).
pub fn warn_git(look: &oz0_linux::gitlook::GitLook) {
    use oz0_linux::gitlook::What;
    for f in &look.findings {
        let what = match &f.what {
            What::Config { settings } => {
                format!("a git config that sets {}", settings.join(", "))
            }
            What::UnreadableConfig { reason } => {
                format!("a git config the node cannot read ({reason})")
            }
            What::Hook => "a git hook".into(),
            What::Commondir => "a git commondir (config and hooks read from elsewhere)".into(),
            What::Alternates => "git alternates (objects read from elsewhere)".into(),
            What::RebaseExec => "a rebase in progress that would run commands".into(),
            What::LegacyRemote => "a legacy git remote".into(),
            What::GitFile => "a .git file naming another repository".into(),
            What::Link => "a symbolic link where git reads".into(),
        };
        let done = match (&f.aside, &f.left) {
            (Some(a), _) => format!("renamed aside to {:?}", a.display().to_string()),
            (None, Some(why)) => format!("left in place: {why}"),
            (None, None) => "left in place (--git-findings report)".into(),
        };
        eprintln!(
            "oz0-node: warning: the run left {what} at {:?}: {done}",
            f.path.display().to_string()
        );
    }
    if !look.complete {
        eprintln!(
            "oz0-node: warning: the look at git after the run stopped after {} entries of the writable folders; what lies beyond was not looked at",
            look.entries
        );
    }
}

/// The status document of a run that ran; `audit_log` is where its egress
/// decisions went.
fn outcome_doc(o: &RunOutcome, audit_log: &Path) -> serde_json::Value {
    let limit_hit = o.job.as_ref().and_then(|j| j.outcome.limit_hit);
    let (outcome, reason): (&str, Option<&str>) = match &o.ended {
        Ended::NotExecuted { reason } => ("not_executed", Some(reason.as_str())),
        Ended::Timeout => ("timeout", Some("the wall-time limit (--timeout) was reached; every process of the run was killed")),
        Ended::CpuTime => ("cpu_time", Some("the CPU-time limit (--cpu-seconds) was used up; every process of the run was killed")),
        Ended::Cancelled => ("cancelled", Some("the node was told to stop (signal); every process of the run was killed")),
        Ended::Exited if limit_hit == Some(oz0_jobs::LimitHit::Memory) => ("out_of_memory", Some("the memory limit (--memory) was reached and the kernel killed processes of the run")),
        Ended::Exited if limit_hit == Some(oz0_jobs::LimitHit::Processes) => ("exited", Some("the process limit (--processes) refused at least one new process")),
        Ended::Exited => ("exited", None),
    };
    json!({
        "schema": STATUS_SCHEMA,
        "run_id": o.run_id,
        "outcome": outcome,
        "exit_code": o.exit_code,
        "reason": reason,
        "duration_ms": o.duration_ms,
        "git": o.git,
        "enforced": {
            "mechanism": "bubblewrap",
            "namespaces": o.namespaces,
            "nested_user_namespaces": false,
            "capabilities": "none",
            "no_new_privs": true,
            "seccomp": o.seccomp,
            "landlock": o.landlock,
            "protected": o.protected,
            "limits": {
                "timeout": "supervisor: SIGKILL of the run's pid namespace (and its job)",
                "job": o.job,
                "tmp": o.tmp,
            },
            "egress": o.egress.as_ref().map(|e| {
                let mut v = json!(e);
                v["audit_log"] = json!(audit_log);
                v
            }),
        },
    })
}

fn error_doc(e: &SandboxError) -> serde_json::Value {
    json!({
        "schema": STATUS_SCHEMA,
        "outcome": "sandbox_error",
        "exit_code": Exit::Sandbox.code(),
        "reason": e.to_string(),
    })
}

/// Runs `sandbox run`; returns the exit status.
pub fn run(args: RunArgs) -> i32 {
    // The status document's folder is opened now, without following links,
    // so that nothing the run does to it meanwhile redirects the document.
    let status_out = match args
        .json_status
        .as_deref()
        .map(|p| OutFile::open("--json-status", p))
    {
        None => None,
        Some(Ok(out)) => Some(out),
        Some(Err(e)) => return refuse(None, e),
    };
    let refuse = |e: String| refuse(status_out.as_ref(), e);
    let req = match request(&args) {
        Ok(r) => r,
        Err(e) => return refuse(e.to_string()),
    };
    let spec = match RunSpec::new(req) {
        Ok(s) => s,
        Err(e) => return refuse(e.to_string()),
    };
    let node_exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => return refuse(format!("cannot find this binary's own path: {e}")),
    };
    if args.dry_run {
        return match oz0_linux::launch::plan_only(&spec, &node_exe, &Default::default()) {
            Ok(plan) => {
                let env_names: Vec<&str> = plan.env.iter().map(|(n, _)| n.as_str()).collect();
                let doc = json!({
                    "mounts": plan.mounts,
                    "protected": plan.protected,
                    "placeholders": plan.placeholders,
                    "env_names": env_names,
                    "cwd": plan.cwd,
                    "landlock": plan.landlock,
                    "seccomp": plan.seccomp,
                    "bwrap_args": plan.bwrap_args(),
                });
                println!(
                    "{}",
                    serde_json::to_string_pretty(&doc).expect("plan serialises")
                );
                Exit::Ok.code()
            }
            Err(e) => refuse(e.to_string()),
        };
    }
    let path_var = std::env::var("PATH").ok();
    let bwrap = match oz0_linux::bwrap::find(args.bwrap.as_deref(), path_var.as_deref()) {
        Ok(b) => b,
        Err(e) => return refuse(e.to_string()),
    };
    let job_mode = match job_mode(
        &spec,
        args.cgroup_root.clone(),
        "--memory/--processes/--cpu-seconds",
    ) {
        Ok(m) => m,
        Err(e) => return refuse(e.to_string()),
    };
    let audit = audit_log(&spec, args.audit_log.as_deref());
    let proxy = match start_proxy(&spec, &audit) {
        Ok(p) => p,
        Err(e) => return refuse(e.to_string()),
    };
    let opts = LaunchOptions {
        bwrap,
        node_exe,
        cancel: cancel_pipe(),
        scratch: None,
        proxy: proxy.as_ref(),
        jobs: job_mode.as_ref(),
        extras: Default::default(),
        stdio: oz0_linux::StdioMode::Inherit,
        git: args.git_findings,
    };
    let result = oz0_linux::launch::run(&spec, opts);
    if let Some(p) = proxy {
        p.shutdown();
    }
    let (code, doc) = match &result {
        Ok(o) => {
            if let Ended::NotExecuted { reason } = &o.ended {
                eprintln!("oz0-node: {reason}");
            }
            match o.ended {
                Ended::Timeout => eprintln!(
                    "oz0-node: the run reached its --timeout of {}s and was killed",
                    spec.limits.timeout_seconds.unwrap_or(0)
                ),
                Ended::CpuTime => eprintln!(
                    "oz0-node: the run used up its --cpu-seconds of {}s and was killed",
                    spec.limits.cpu_seconds.unwrap_or(0)
                ),
                _ => {}
            }
            if let Some(look) = &o.git {
                warn_git(look);
            }
            if o.job.as_ref().and_then(|j| j.outcome.limit_hit) == Some(oz0_jobs::LimitHit::Memory)
            {
                eprintln!("oz0-node: the run reached its --memory limit; the kernel killed processes of the run");
            }
            (o.exit_code, outcome_doc(o, &audit))
        }
        Err(e) => {
            eprintln!("oz0-node: sandbox refused: {e}");
            (Exit::Sandbox.code(), error_doc(e))
        }
    };
    if let Some(out) = &status_out {
        write_status(out, &doc);
    }
    code
}
