//! `oz0-node sandbox run`.

use oz0_core::exit::Exit;
use oz0_core::{Cancel, Ended, LimitHit, Role, RunIo, RunOptions, Sandbox};
use oz0_linux::hostfs::OutFile;
use oz0_oci::cache::Image;
use oz0_policy::{EnvVar, RunRequest, RunSpec};
use serde_json::json;

use clap::Args;

use crate::flags::HostArgs;
use crate::outcome::{error_doc, outcome_doc};

/// Refuses the run: the reason on stderr and, with `--json-status`, in the
/// status file too (a refused run leaves no stale status of an earlier one).
fn refuse(json_status: Option<&OutFile>, msg: impl std::fmt::Display) -> i32 {
    eprintln!("oz0-node: sandbox refused: {msg}");
    if let Some(out) = json_status {
        let _ = write_status(out, &error_doc(&msg));
    }
    Exit::Sandbox.code()
}

use crate::flags::utf8;

/// `sandbox run` flags.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub wall: crate::flags::RunFlags,
    /// Give the command NAME=VALUE, or NAME with the value of NAME from this
    /// process's environment (keeps secrets off command lines). Nothing else
    /// from this environment reaches the command.
    #[arg(long = "env", value_name = "NAME[=VALUE]")]
    pub env: Vec<String>,
    /// Read NAME=VALUE lines from FILE (blank lines and # comments ignored):
    /// a regular file of at most 1 MiB, reached without any symbolic link
    /// (a run may have left one in a folder it could write), or a descriptor
    /// of yours such as `<(vault read ...)`.
    #[arg(long = "env-file", value_name = "FILE")]
    pub env_file: Vec<std::path::PathBuf>,
    /// Size of each of the run's memory file systems, its /tmp (also HOME)
    /// and its /dev (with /dev/shm), in MiB; each holds at most 128 files
    /// per MiB. Their files are memory, and count towards --memory too.
    #[arg(long = "tmp-size", value_name = "MiB", default_value_t = oz0_policy::limits::DEFAULT_TMP_MIB)]
    pub tmp_size: u64,
    /// Let the command create unix sockets. By default it cannot (socket
    /// pairs still work), so that it cannot reach a host service's socket in
    /// a folder it was given.
    #[arg(long = "allow-unix-sockets")]
    pub allow_unix_sockets: bool,
    /// Write the run's status (how it ended, what was enforced) as JSON to
    /// FILE. Its folder is opened before the run, without following any
    /// symbolic link, and the document is renamed into place there.
    #[arg(long = "json-status", value_name = "FILE")]
    pub json_status: Option<std::path::PathBuf>,
    /// Append a JSON line for every egress decision (allowed, 403, 407) to
    /// FILE, never to stderr, which the run shares
    /// [default: <data-dir>/egress-audit.jsonl, 0600].
    #[arg(long = "audit-log", value_name = "FILE")]
    pub audit_log: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub host: HostArgs,
    /// After the run, what it left in its writable folders that host git
    /// would run or follow (hooks, a config that runs programs, commondir,
    /// alternates, a .git file, in any repository there) is renamed aside
    /// to NAME.oz0-quarantine-<run id> ("neutralise"), or only reported
    /// ("report"); each is a warning and is listed in --json-status.
    #[arg(
        long = "git-findings",
        value_name = "neutralise|report",
        default_value = "neutralise"
    )]
    pub git_findings: oz0_linux::gitlook::Policy,
    /// Print the plan (mounts, protected paths, environment names) as JSON and run nothing.
    #[arg(long = "dry-run")]
    pub dry_run: bool,
    /// Run in this image's root instead of the host's system:
    /// oci:REGISTRY/NAME@sha256:<64 hex digits>, pulled by digest into the
    /// node's image cache (see `oci pull`) when it is not there. The run
    /// sees the image's files, read-only, and none of the host's; the
    /// --work folder is at /work, and no --read or --write folder is given.
    /// The command is the image's entrypoint, then the arguments after --
    /// or, when there are none, the image's cmd; the image's variables come
    /// first (--env wins), and its working folder is the run's; its user is
    /// the node's user's ids inside (the node's user owns every file of the
    /// image; no capability whatever the ids). Every other wall of the run
    /// is the same as without an image.
    #[arg(long = "image", value_name = "IMAGE")]
    pub image: Option<String>,
    /// What runs the image: tier1 (its root inside this node's tier-1
    /// sandbox) or gvisor (runsc, rootless, with no network at all and a
    /// kernel of its own between the command and this machine's; egress
    /// and --cpu-seconds are refused there).
    #[arg(long = "oci-runtime", value_name = "tier1|gvisor", default_value = "tier1",
          value_parser = ["tier1", "gvisor"], requires = "image")]
    pub oci_runtime: String,
    #[command(flatten)]
    pub oci: crate::oci::OciArgs,
    /// The command and its arguments (with --image, the arguments after
    /// the image's entrypoint).
    #[arg(last = true, required_unless_present = "image", value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,
}

fn parse_env(args: &RunArgs) -> Result<Vec<EnvVar>, String> {
    let mut out = Vec::new();
    for f in &args.env_file {
        let raw =
            oz0_linux::hostfs::read_caller_file("--env-file", f).map_err(|e| e.to_string())?;
        let text = String::from_utf8(raw)
            .map_err(|_| format!("--env-file {}: not valid UTF-8", f.display()))?;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim_start();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            // A line that is no NAME=VALUE is not shown: it may be part of
            // a secret (a PEM's second line), and the reason goes to
            // stderr and the status document.
            out.push(EnvVar::parse(line).map_err(|e| {
                let why = match e {
                    oz0_policy::env::EnvError::NoEquals(_) | oz0_policy::env::EnvError::BadName(_) => {
                        "not NAME=VALUE with a name of letters, digits and _ (the line is not shown: it may hold a secret)".to_string()
                    }
                    e => e.to_string(),
                };
                format!("--env-file {} line {}: {why}", f.display(), i + 1)
            })?);
        }
    }
    for e in &args.env {
        out.push(crate::flags::env_var(e)?);
    }
    Ok(out)
}

fn request(args: &RunArgs, image: Option<&Image>) -> Result<RunRequest, String> {
    let data_dir = args.host.data.resolve().map_err(|e| e.to_string())?;
    let mut command = args
        .command
        .iter()
        .enumerate()
        .map(|(i, a)| {
            a.to_str()
                .map(str::to_string)
                .ok_or_else(|| format!("argument {i} of the command is not valid UTF-8"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut env = parse_env(args)?;
    if let Some(i) = image {
        let c = &i.record.config;
        command = crate::oci::command(c, command, "give the command after --")?;
        let notes;
        (env, notes) = crate::oci::env(c, env)?;
        for n in notes {
            eprintln!("oz0-node: {n}");
        }
    }
    let (work, read, write) = args.wall.paths()?;
    Ok(RunRequest {
        work,
        read,
        write,
        env,
        allow: args.wall.allow.clone(),
        forward: args.wall.forward.clone(),
        limits: args.wall.limits(Some(args.tmp_size)),
        data_dir: utf8("--data-dir", &data_dir)?,
        allow_unix_sockets: args.allow_unix_sockets,
        command,
    })
}

/// Writes the `--json-status` document (see [`OutFile`]: no link is
/// followed, in the folder opened before the run); whether it was written.
fn write_status(out: &OutFile, doc: &serde_json::Value) -> bool {
    let text = serde_json::to_string_pretty(doc).expect("a status document serialises") + "\n";
    match out.write(text.as_bytes()) {
        Ok(()) => true,
        Err(e) => {
            eprintln!(
                "oz0-node: cannot write --json-status {}: {e}; a document there is not this run's (status 123)",
                out.path().display()
            );
            false
        }
    }
}

/// The `--image` (pulled when not in the cache; held while the value
/// lives) and what the run is.
fn image_and_role(args: &RunArgs) -> Result<(Option<Image>, Role), String> {
    let Some(name) = &args.image else {
        return Ok((None, Role::Command));
    };
    let data_dir = args.host.data.resolve().map_err(|e| e.to_string())?;
    let (_, i) =
        crate::oci::fetch(name, &args.oci, &data_dir).map_err(|e| format!("--image {}", e.msg))?;
    let role = Role::Image(crate::oci::root(&i)?);
    Ok((Some(i), role))
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
    let (image, role) = match image_and_role(&args) {
        Ok(x) => x,
        Err(e) => return refuse(e),
    };
    let req = match request(&args, image.as_ref()) {
        Ok(r) => r,
        Err(e) => return refuse(e.to_string()),
    };
    let spec = match RunSpec::new(req) {
        Ok(s) => s,
        Err(e) => return refuse(e.to_string()),
    };
    let host = match crate::platform::platform(crate::platform::Settings {
        audit_log: args.audit_log.clone(),
        ..crate::platform::Settings::of(&args.host)
    })
    .tier1()
    {
        Ok(h) => h.with_git(args.git_findings),
        Err(e) => return refuse(e.to_string()),
    };
    if args.dry_run {
        if args.oci_runtime == "gvisor" {
            return refuse("--dry-run prints tier 1's plan, and --oci-runtime gvisor has none: leave one of them out".into());
        }
        let extras = match oz0_linux::extras_for(role) {
            Ok(x) => x,
            Err(e) => return refuse(e.to_string()),
        };
        return match host.plan(&spec, &extras) {
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
    let gvisor = match args.oci_runtime.as_str() {
        "gvisor" => match oz0_linux::gvisor::Gvisor::find(host.data_dir(), host.job_mode().ok()) {
            Ok(g) => Some(g.with_git(args.git_findings)),
            Err(e) => return refuse(e.to_string()),
        },
        _ => None,
    };
    let sandbox: &dyn Sandbox = match &gvisor {
        Some(g) => g,
        None => &host,
    };
    let mut opts = RunOptions::new(RunIo::inherit(), crate::signals::cancel_pipe().map(Cancel));
    opts.role = role;
    let result = sandbox.run(&spec, opts);
    // The image stays held (never evicted from the cache) to the run's end.
    drop(image);
    // The proxy (if a run started it) stops with the host.
    drop(host);
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
            for w in &o.warnings {
                eprintln!("oz0-node: warning: {w}");
            }
            if o.limit_hit == Some(LimitHit::Memory) {
                eprintln!("oz0-node: the run reached its --memory limit; the kernel killed processes of the run");
            }
            (o.exit_code, outcome_doc(o))
        }
        Err(e) => {
            eprintln!("oz0-node: sandbox refused: {e}");
            (Exit::Sandbox.code(), error_doc(e))
        }
    };
    // A document the node could not write leaves whatever is there (one
    // the run wrote, say, before making the folder unwritable): the
    // command's own status must not stand beside it.
    match &status_out {
        Some(out) if !write_status(out, &doc) => Exit::StatusUnwritten.code(),
        _ => code,
    }
}
