//! `sandbox run` on macOS: one command through `sandbox-exec` with the
//! node's generated Seatbelt profile (`oz0_macos::seatbelt::plan`).
//!
//! The run gets the profile's files (the system read-only, its work folder,
//! `--write` folders and a TEMP of its own writable, `--read` paths and the
//! node binary readable, the protected names and their parents unmovable,
//! the data directory never), exactly the variables named (plus `PATH`,
//! `HOME` and `TMPDIR`, and with egress the proxy's with the run's token),
//! and with `--allow`/`--forward` the node's egress proxy on a loopback TCP
//! port, the profile's one network peer. It starts in a process group of
//! its own; when its first process ends or its timeout passes, the whole
//! group is killed. Limits Seatbelt cannot hold for a whole run (memory,
//! processes, CPU time) are refused.
//!
//! Before each run the Seatbelt probe of `sandbox check` must show a
//! profile refusing a read; this build has no self-test of Seatbelt, so the
//! run's confinement is not proven on the Mac, and the command says so.
//! Type-checked in CI; it has not run on a Mac.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Args;
use oz0_core::exit::Exit;
use oz0_macos::check::SeatbeltAnswer;
use oz0_macos::seatbelt::{plan, MacHost, ProxyPort};
use oz0_policy::{AbsPath, EnvVar, RunRequest, RunSpec};

/// `sandbox run` flags.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// --work names a real path: /tmp, /var and /etc are links on macOS
    /// (name /private/…); --memory, --processes and --cpu-seconds are
    /// refused (Seatbelt has no limits for a whole run).
    #[command(flatten)]
    pub wall: crate::flags::RunFlags,
    /// Give the command NAME=VALUE, or NAME with the value of NAME from this
    /// process's environment. Nothing else from this environment reaches it.
    #[arg(long = "env", value_name = "NAME[=VALUE]")]
    pub env: Vec<String>,
    /// The node's data directory, which no run may see
    /// [default: ~/Library/Application Support/oz0-node].
    #[arg(long = "data-dir", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

fn refuse(msg: impl std::fmt::Display) -> i32 {
    eprintln!("oz0-node: sandbox refused: {msg}");
    Exit::Sandbox.code()
}

fn env_vars(names: &[String]) -> Result<Vec<EnvVar>, String> {
    names
        .iter()
        .map(|e| {
            let (n, v) = match e.split_once('=') {
                Some((n, v)) => (n.to_string(), v.to_string()),
                None => (
                    e.clone(),
                    std::env::var(e)
                        .map_err(|_| format!("--env {e}: not set in this environment"))?,
                ),
            };
            EnvVar::new(&n, &v).map_err(|err| format!("--env {n}: {err}"))
        })
        .collect()
}

/// The spec, checked by the same code as every platform's.
fn spec(a: &RunArgs, data_dir: &Path) -> Result<RunSpec, String> {
    let abs = |p: &Path, flag: &str| {
        std::path::absolute(p).map_err(|e| format!("{flag} {}: {e}", p.display()))
    };
    let flags = crate::flags::RunFlags {
        work: abs(&a.wall.work, "--work")?,
        read: a
            .wall
            .read
            .iter()
            .map(|p| abs(p, "--read"))
            .collect::<Result<_, _>>()?,
        write: a
            .wall
            .write
            .iter()
            .map(|p| abs(p, "--write"))
            .collect::<Result<_, _>>()?,
        allow: a.wall.allow.clone(),
        forward: a.wall.forward.clone(),
        ..a.wall.clone()
    };
    let (work, read, write) = flags.paths()?;
    let req = RunRequest {
        work,
        read,
        write,
        env: env_vars(&a.env)?,
        allow: flags.allow,
        forward: flags.forward,
        limits: a.wall.limits(None),
        data_dir: crate::flags::utf8("--data-dir", &abs(data_dir, "--data-dir")?)?,
        allow_unix_sockets: false,
        command: a.command.clone(),
    };
    RunSpec::new(req).map_err(|e| e.to_string())
}

/// A run's TEMP: a new folder only this user can enter, removed on drop.
struct RunTemp(PathBuf);

impl RunTemp {
    fn new() -> Result<RunTemp, String> {
        use std::os::unix::fs::DirBuilderExt;
        let p = PathBuf::from(format!(
            "/private/tmp/oz0-run-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&p)
            .map_err(|e| format!("cannot make the run's TEMP {}: {e}", p.display()))?;
        Ok(RunTemp(p))
    }
}

impl Drop for RunTemp {
    fn drop(&mut self) {
        // std's removal opens each folder without following links.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Kills the process group `pgid`, the run's whole tree.
#[allow(unsafe_code)]
fn kill_group(pgid: u32) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return;
    };
    // SAFETY: killpg takes plain integers; a group that is gone is ESRCH.
    unsafe { libc::killpg(pgid, libc::SIGKILL) };
}

/// Runs `sandbox run`.
pub fn main(a: RunArgs) -> i32 {
    let data_dir = match &a.data_dir {
        Some(d) => d.clone(),
        None => match std::env::var_os("HOME") {
            Some(h) => Path::new(&h).join("Library/Application Support/oz0-node"),
            None => return refuse("HOME is not set: name the data directory with --data-dir"),
        },
    };
    let spec = match spec(&a, &data_dir) {
        Ok(s) => s,
        Err(e) => return refuse(e),
    };
    match super::probe::probe().seatbelt {
        SeatbeltAnswer::Denies => {}
        other => {
            let l = oz0_macos::check::seatbelt_lines(&other);
            return refuse(format!(
                "{}; nothing was started. {}",
                l.tier_line,
                l.fix_line.unwrap_or_default()
            ));
        }
    }
    let temp = match RunTemp::new() {
        Ok(t) => t,
        Err(e) => return refuse(e),
    };
    let node_binary = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|e| e.to_string())
        .and_then(|p| {
            p.to_str()
                .and_then(|s| AbsPath::new(s).ok())
                .ok_or_else(|| "the node binary's path is not UTF-8".to_string())
        });
    let host = match (
        node_binary,
        temp.0.to_str().and_then(|s| AbsPath::new(s).ok()),
    ) {
        (Ok(node_binary), Some(run_temp)) => MacHost {
            node_binary,
            run_temp,
        },
        (Err(e), _) => return refuse(format!("cannot name the node binary: {e}")),
        (_, None) => return refuse("the run's TEMP has no plain path"),
    };
    // With egress: the node's proxy for this run on a loopback port.
    let mut proxy = None;
    let port = if spec.egress.is_enabled() {
        let started = oz0_egress::Token::generate()
            .map_err(|e| e.to_string())
            .and_then(|token| {
                let p = oz0_egress::Proxy::start(oz0_egress::ProxyConfig::default())
                    .map_err(|e| e.to_string())?;
                let guard = p
                    .add_run_tcp(
                        "run".into(),
                        token.clone(),
                        spec.egress.clone(),
                        (std::net::Ipv4Addr::LOCALHOST, 0).into(),
                    )
                    .map_err(|e| e.to_string())?;
                let port = guard.tcp_addr().map_or(0, |a| a.port());
                Ok((
                    p,
                    guard,
                    ProxyPort {
                        port,
                        token: token.expose().to_string(),
                    },
                ))
            });
        match started {
            Ok((p, guard, port)) => {
                proxy = Some((p, guard));
                Some(port)
            }
            Err(e) => return refuse(format!("the egress proxy did not start: {e}")),
        }
    } else {
        None
    };
    let plan = match plan(&spec, &host, port.as_ref()) {
        Ok(p) => p,
        Err(e) => return refuse(e),
    };
    eprintln!("oz0-node: warning: Seatbelt refused the probe's read on this Mac, but no self-test of this profile has run (not in this build on macOS): the run's confinement is not proven");
    let mut cmd = Command::new(&plan.argv[0]);
    cmd.args(&plan.argv[1..])
        .env_clear()
        .envs(plan.env.iter().map(|(k, v)| (k, v)))
        .current_dir(spec.work.as_str());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return refuse(format!("cannot start {}: {e}", plan.argv[0])),
    };
    let pgid = child.id();
    let deadline = plan
        .timeout_seconds
        .map(|s| Instant::now() + Duration::from_secs(s));
    let code = loop {
        match child.try_wait() {
            Ok(Some(st)) => {
                use std::os::unix::process::ExitStatusExt;
                break st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0));
            }
            Ok(None) => {}
            Err(e) => {
                kill_group(pgid);
                let _ = child.wait();
                return refuse(format!("cannot wait for the run: {e}"));
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            kill_group(pgid);
            let _ = child.wait();
            eprintln!("oz0-node: the run's --timeout was reached: killed");
            break Exit::Timeout.code();
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    // The first process ended: everything it started goes with it.
    kill_group(pgid);
    drop(proxy);
    drop(temp);
    code
}
