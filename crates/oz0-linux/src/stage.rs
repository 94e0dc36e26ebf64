//! The in-sandbox stage: the node binary, executed by bubblewrap as the
//! run's first process and init (pid 1 of the run's pid namespace,
//! bubblewrap's `--as-pid-1`). It builds the run's `/dev`
//! ([`crate::devfs`]), mounts the run's placeholders and makes the root
//! read-only, then moves into a user namespace of its own and gives up every
//! capability ([`crate::hold`]), applies what bubblewrap cannot — Landlock
//! and the seccomp filter — to itself, then starts the command as its child
//! and reaps every process of the run until the command exits, with whose
//! status it exits (128+N for signal N); the kernel then ends every other
//! process of the run.
//!
//! Why the stage is the init and not bubblewrap's own: a run needs an init
//! to reap its processes, and bubblewrap's would be a process of the run
//! that the stage did not make (and that kept bubblewrap's command line).
//! The stage makes itself undumpable as its first step, and checks again
//! that it is just before the command starts, so `/proc/1` gives nothing of
//! it to the command at any time.
//!
//! It reads its configuration from a memory file at [`fds::CONFIG`] (never
//! from its command line or environment, both of which are visible to the
//! run) and reports to the launcher over the pipe at [`fds::STATUS`], which it
//! closes once the command was executed: the launcher sees end-of-file
//! exactly then. Lines on that pipe:
//! - `S` — the stage started;
//! - `L <json>` — what Landlock enforced;
//! - `E <reason>` — the sandbox could not be completed (the command never ran);
//! - `X <code> <reason>` — the command could not be executed (126/127).

use std::fs::File;
use std::io::{Read, Write};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::landlock;
use crate::plan::{fds, LandlockRules};
use crate::seccomp::{self, Profile};

/// What the launcher tells the stage.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageConfig {
    /// The command.
    pub argv: Vec<String>,
    /// Exactly its environment.
    pub env: Vec<(String, String)>,
    /// Landlock rules.
    pub landlock: LandlockRules,
    /// Landlock is not applied (a self-test fault only).
    pub landlock_off: bool,
    /// Seccomp profile.
    pub seccomp: Profile,
    /// No seccomp filter (a self-test fault only).
    pub seccomp_off: bool,
    /// The egress bridge, when the run has egress.
    pub bridge: Option<BridgeConfig>,
    /// Refuse new unix sockets to the command (and to the bridge, which
    /// needs none).
    pub deny_unix_sockets: bool,
    /// Placeholders (made by the node) to mount read-only before anything
    /// else.
    pub placeholders: Vec<crate::plan::Placeholder>,
    /// What bubblewrap must have mounted where (checked before anything
    /// else).
    pub expect: Vec<crate::plan::Expect>,
    /// Protected paths that exist, to bind onto themselves.
    pub holds: Vec<crate::plan::Hold>,
    /// Every mount point the run must have once the stage is done.
    pub mount_points: Vec<String>,
    /// The device nodes of the run's `/dev` (names under `/dev`).
    pub devices: Vec<String>,
    /// The size of the run's `/tmp` and `/dev`.
    pub tmp: crate::plan::TmpfsSize,
}

/// The in-sandbox bridge to the run's proxy socket.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BridgeConfig {
    /// The run's token, for the proxy variables.
    pub token: String,
}

impl std::fmt::Debug for BridgeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BridgeConfig { token: <redacted> }")
    }
}

/// Starts the bridge: binds its listener on the run's own loopback and
/// forks it from the stage with that listener and the run's channel to the
/// proxy (see `oz0_egress::bridge::serve_channel`). A fork, never a program
/// executed: the bridge is as undumpable as the stage, so the command, which
/// runs as the same user, can neither trace it nor write its memory through
/// `/proc`; and it is already under the run's Landlock rules and seccomp
/// filter, unix sockets refused included, for it needs none. Returns the
/// proxy variables for the command.
fn start_bridge(b: &BridgeConfig) -> Result<(u16, Vec<(String, String)>), String> {
    use std::os::fd::AsFd;
    let channel = oz0_sys::spawn::inherited_fd(fds::EGRESS)
        .map_err(|e| format!("egress bridge: no channel to the proxy: {e}"))?;
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
        .map_err(|e| format!("egress bridge: cannot listen on the run's loopback: {e}"))?;
    let port = listener
        .local_addr()
        .map_err(|e| format!("egress bridge: {e}"))?
        .port();
    oz0_sys::ns::fork_keeping(&[listener.as_fd(), channel.as_fd()], bridge)
        .map_err(|e| format!("egress bridge: cannot start: {e}"))?;
    let token =
        oz0_egress::Token::from_secret(&b.token).map_err(|e| format!("egress bridge: {e}"))?;
    Ok((port, token.proxy_env(port)))
}

/// The bridge, in its forked child: its listener at 3 and the channel at
/// 4 (see [`start_bridge`]); no standard input or output.
fn bridge() -> i32 {
    if let Ok(null) = File::options().read(true).write(true).open("/dev/null") {
        let _ = rustix::stdio::dup2_stdin(&null);
        let _ = rustix::stdio::dup2_stdout(&null);
    }
    let (Ok(listener), Ok(channel)) = (
        oz0_sys::spawn::inherited_fd(3),
        oz0_sys::spawn::inherited_fd(4),
    ) else {
        return STAGE_FAILED;
    };
    let channel = std::os::unix::net::UnixStream::from(channel);
    match oz0_egress::bridge::serve_channel(std::net::TcpListener::from(listener), &channel) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("oz0-node: egress bridge: {e}");
            1
        }
    }
}

/// Exit status of the stage when the sandbox could not be completed.
pub const STAGE_FAILED: i32 = 125;

/// Runs the stage. Returns only on failure, with the process exit code.
pub fn main() -> i32 {
    // First of all: no process of the run may read or write the stage's
    // memory through `/proc/1/mem`, trace it or take its descriptors, and
    // the command runs as the same uid. A process that is not dumpable can
    // be reached that way only with CAP_SYS_PTRACE in its user namespace,
    // which nothing of the run ever has. The bridge is a fork of the stage
    // and inherits this (see `start_bridge`).
    if let Err(e) = undumpable() {
        eprintln!("oz0-node: the sandbox could not be completed: {e}");
        return STAGE_FAILED;
    }
    let mut status = match oz0_sys::spawn::inherited_fd(fds::STATUS) {
        Ok(fd) => File::from(fd),
        Err(e) => {
            eprintln!("oz0-node: {} is started only by `oz0-node sandbox run` (no status descriptor: {e})", crate::plan::STAGE_ARG);
            return STAGE_FAILED;
        }
    };
    let _ = rustix::io::fcntl_setfd(&status, rustix::io::FdFlags::CLOEXEC);
    let _ = status.write_all(b"S\n");
    match prepare() {
        Ok((cfg, report, bridge_port)) => {
            let _ = writeln!(
                status,
                "L {}",
                serde_json::to_string(&report).unwrap_or_default()
            );
            if let Some(port) = bridge_port {
                let _ = writeln!(status, "B {port}");
            }
            let child = Command::new(&cfg.argv[0])
                .args(&cfg.argv[1..])
                .env_clear()
                .envs(cfg.env.iter().map(|(k, v)| (k, v)))
                .spawn();
            match child {
                Ok(child) => {
                    drop(status);
                    init(child.id())
                }
                Err(err) => {
                    let code = crate::launch::exec_failure_code(&err);
                    let _ = writeln!(status, "X {code} cannot execute {:?}: {err}", cfg.argv[0]);
                    code
                }
            }
        }
        Err(reason) => {
            let _ = writeln!(status, "E {}", reason.replace('\n', " "));
            STAGE_FAILED
        }
    }
}

/// The rest of the stage's life as the run's init, once the command runs:
/// it holds no standard stream (so a reader of the command's output sees
/// end-of-file when the command's side closes), is undumpable, and reaps
/// every process that ends until `command` does. Returns the command's
/// status (128+N for signal N).
fn init(command: u32) -> i32 {
    use rustix::process::{wait, Pid, WaitOptions};
    if let Ok(null) = File::options().read(true).write(true).open("/dev/null") {
        let _ = rustix::stdio::dup2_stdin(&null);
        let _ = rustix::stdio::dup2_stdout(&null);
        let _ = rustix::stdio::dup2_stderr(&null);
    }
    let command = Pid::from_raw(command as i32);
    // Any child, whatever its process group or session: a command that
    // calls setsid() (`setsid`, `timeout`) is still the one whose end ends
    // the run.
    loop {
        match wait(WaitOptions::empty()) {
            Ok(Some((pid, st))) if Some(pid) == command => {
                use std::os::unix::process::ExitStatusExt;
                let st = std::process::ExitStatus::from_raw(st.as_raw());
                return crate::launch::status_code(st);
            }
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => {}
            // No child left, yet the command's end was not seen: cannot be.
            Err(_) => return STAGE_FAILED,
        }
    }
}

/// Makes the stage undumpable and checks that it is.
fn undumpable() -> Result<(), String> {
    use rustix::process::{dumpable_behavior, set_dumpable_behavior, DumpableBehavior};
    set_dumpable_behavior(DumpableBehavior::NotDumpable)
        .map_err(|e| format!("cannot make the stage undumpable: {e}"))?;
    match dumpable_behavior() {
        Ok(DumpableBehavior::NotDumpable) => Ok(()),
        other => Err(format!("the stage is still dumpable ({other:?})")),
    }
}

type Prepared = (StageConfig, landlock::LandlockReport, Option<u16>);

fn prepare() -> Result<Prepared, String> {
    let (mut cfg, report) = restrict()?;
    let mut port = None;
    if let Some(b) = cfg.bridge.take() {
        let (p, vars) = start_bridge(&b)?;
        cfg.env.extend(vars);
        port = Some(p);
    }
    // Nothing above may have made the stage dumpable again (a change of
    // credentials can): checked once more before the command exists.
    undumpable()?;
    Ok((cfg, report, port))
}

/// Placeholder files are empty files at the top of a writable folder, and
/// `git add -A` would add them to a repository there. Git reads a user's
/// excludes from `$XDG_CONFIG_HOME/git/ignore`, by default
/// `$HOME/.config/git/ignore`; the run's `HOME` is its private, empty `/tmp`,
/// so the stage writes that file there, one anchored line per placeholder
/// file (placeholder folders are empty, and git shows no empty folder). It
/// writes nothing when `XDG_CONFIG_HOME` points elsewhere or the file exists,
/// and a failure only leaves the placeholders visible to git.
fn hide_placeholders_from_git(cfg: &StageConfig) {
    use std::collections::BTreeSet;
    let var = |n: &str| {
        cfg.env
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.as_str())
    };
    let tmp = crate::plan::TMP_INSIDE;
    let config = match (var("XDG_CONFIG_HOME"), var("HOME")) {
        (Some(x), _) => std::path::PathBuf::from(x),
        (None, Some(h)) => std::path::Path::new(h).join(".config"),
        (None, None) => return,
    };
    if !config.starts_with(tmp) || config.components().any(|c| c.as_os_str() == "..") {
        return;
    }
    let names: BTreeSet<&str> = cfg
        .placeholders
        .iter()
        .filter(|p| p.kind == crate::plan::PlaceholderKind::File)
        .map(|p| p.path.as_path())
        .filter(|p| p.parent().and_then(|d| d.file_name()) != Some(".git".as_ref()))
        .filter_map(|p| p.file_name().and_then(|n| n.to_str()))
        .collect();
    if names.is_empty() {
        return;
    }
    let mut text =
        String::from("# Empty read-only placeholders of this sandbox (oz0), not files of yours.\n");
    for n in names {
        text.push('/');
        text.push_str(n);
        text.push('\n');
    }
    let dir = config.join("git");
    let _ = std::fs::create_dir_all(&dir).and_then(|()| {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dir.join("ignore"))
            .and_then(|mut f| f.write_all(text.as_bytes()))
    });
}

fn restrict() -> Result<(StageConfig, landlock::LandlockReport), String> {
    let mut raw = Vec::new();
    File::from(
        oz0_sys::spawn::inherited_fd(fds::CONFIG).map_err(|e| format!("no configuration: {e}"))?,
    )
    .read_to_end(&mut raw)
    .map_err(|e| format!("reading the configuration: {e}"))?;
    let cfg: StageConfig =
        serde_json::from_slice(&raw).map_err(|e| format!("bad configuration: {e}"))?;
    if cfg.argv.is_empty() {
        return Err("empty command".into());
    }
    let stderr = oz0_sys::spawn::inherited_fd(fds::STDERR)
        .map_err(|e| format!("no stderr descriptor: {e}"))?;
    rustix::stdio::dup2_stderr(&stderr).map_err(|e| format!("dup2 stderr: {e}"))?;
    drop(stderr);
    // The command inherits stdin, stdout and stderr, and nothing else.
    oz0_sys::spawn::cloexec_from(3).map_err(|e| format!("close_range: {e}"))?;
    crate::hold::verify_binds(&cfg.expect)?;
    crate::hold::prepare_mounts(&cfg.devices, cfg.tmp, &cfg.holds, &cfg.placeholders)?;
    crate::hold::verify_mount_table(&cfg.mount_points)?;
    hide_placeholders_from_git(&cfg);
    crate::hold::enter_own_user_namespace()?;
    crate::hold::drop_capabilities()?;
    let programs =
        seccomp::compile(cfg.seccomp, cfg.deny_unix_sockets).map_err(|e| e.to_string())?;
    let report = if cfg.landlock_off {
        landlock::LandlockReport {
            kernel_abi: oz0_sys::probe::landlock_abi(),
            enforced: "off".into(),
        }
    } else {
        landlock::restrict(&cfg.landlock).map_err(|e| e.to_string())?
    };
    if !cfg.seccomp_off {
        seccomp::install(&programs).map_err(|e| e.to_string())?;
    }
    Ok((cfg, report))
}
