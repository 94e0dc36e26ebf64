//! The in-sandbox stage: the node binary, executed by bubblewrap as the
//! run's first process and init (pid 1 of the run's pid namespace,
//! bubblewrap's `--as-pid-1`). It builds the run's `/dev`
//! ([`crate::devfs`]), mounts the run's placeholders and makes the root
//! read-only, then moves into a user namespace of its own and gives up every
//! capability ([`crate::hold`]), applies what bubblewrap cannot — Landlock
//! and the seccomp filter — to itself, then starts the command as its child
//! and reaps every process of the run until the command exits, with whose
//! status it exits (128+N for signal N); the kernel then ends every other
//! process of the run. When the command left no process behind, the stage
//! says so to the launcher before it exits ([`StageMessage::Alone`]): the
//! launcher can then remove the run's placeholders while the kernel still
//! takes the sandbox's namespaces down.
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
//! run) and reports to the launcher over the pipe at [`fds::STATUS`]
//! (close-on-exec: the command never holds it). Both are typed, in
//! [`crate::protocol`].

use std::fs::File;
use std::io::{Read, Write};
use std::process::Command;

use oz0_core::exit::{self, Exit};

use crate::hold::{os, StageError};
use crate::landlock;
use crate::plan::fds;
use crate::protocol::{BridgeConfig, StageConfig, StageMessage};
use crate::seccomp;

/// Exit status of the stage when the sandbox could not be completed.
const STAGE_FAILED: i32 = Exit::Sandbox as i32;

/// Starts the bridge: binds its listener on the run's own loopback and
/// forks it from the stage with that listener and the run's channel to the
/// proxy (see `oz0_egress::bridge::serve_channel`). A fork, never a program
/// executed: the bridge is as undumpable as the stage, so the command, which
/// runs as the same user, can neither trace it nor write its memory through
/// `/proc`; and it is already under the run's Landlock rules and seccomp
/// filter, unix sockets refused included, for it needs none. Returns the
/// proxy variables for the command.
fn start_bridge(b: &BridgeConfig) -> Result<(u16, Vec<(String, String)>), StageError> {
    use std::os::fd::AsFd;
    let channel = oz0_sys::spawn::inherited_fd(fds::EGRESS)
        .map_err(os("egress bridge: no channel to the proxy"))?;
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
        .map_err(os("egress bridge: cannot listen on the run's loopback"))?;
    let port = listener.local_addr().map_err(os("egress bridge"))?.port();
    oz0_sys::ns::fork_keeping(&[listener.as_fd(), channel.as_fd()], bridge)
        .map_err(os("egress bridge: cannot start"))?;
    let token = oz0_egress::Token::from_secret(&b.token)
        .map_err(|e| StageError::Refused(format!("egress bridge: {e}")))?;
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
    let _ = StageMessage::Started.send(&mut status);
    match prepare() {
        Ok((cfg, report, bridge_port)) => {
            let _ = StageMessage::Landlock { report }.send(&mut status);
            if let Some(port) = bridge_port {
                let _ = StageMessage::Bridge { port }.send(&mut status);
            }
            let child = Command::new(&cfg.argv[0])
                .args(&cfg.argv[1..])
                .env_clear()
                .envs(cfg.env.iter().map(|(k, v)| (k, v)))
                .spawn();
            match child {
                Ok(child) => init(rustix::process::Pid::from_child(&child), status),
                Err(err) => {
                    let code = exit::exec_failure_code(&err);
                    let reason = format!("cannot execute {:?}: {err}", cfg.argv[0]);
                    let _ = StageMessage::NotExecuted { code, reason }.send(&mut status);
                    code
                }
            }
        }
        Err(e) => {
            let reason = e.to_string();
            let _ = StageMessage::Failed { reason }.send(&mut status);
            STAGE_FAILED
        }
    }
}

/// The rest of the stage's life as the run's init, once the command runs:
/// it holds no standard stream (so a reader of the command's output sees
/// end-of-file when the command's side closes), is undumpable, and reaps
/// every process that ends until `command` does. Then, if it is the last
/// process of the run, it says so on `status`. Returns the command's status
/// (128+N for signal N).
fn init(command: rustix::process::Pid, mut status: File) -> i32 {
    use rustix::process::{wait, WaitOptions};
    if let Ok(null) = File::options().read(true).write(true).open("/dev/null") {
        let _ = rustix::stdio::dup2_stdin(&null);
        let _ = rustix::stdio::dup2_stdout(&null);
        let _ = rustix::stdio::dup2_stderr(&null);
    }
    // Any child, whatever its process group or session: a command that
    // calls setsid() (`setsid`, `timeout`) is still the one whose end ends
    // the run.
    loop {
        match wait(WaitOptions::empty()) {
            Ok(Some((pid, st))) if pid == command => {
                use std::os::unix::process::ExitStatusExt;
                let st = std::process::ExitStatus::from_raw(st.as_raw());
                if alone() {
                    let _ = StageMessage::Alone.send(&mut status);
                }
                return exit::status_code(st);
            }
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => {}
            // No child left, yet the command's end was not seen: cannot be.
            Err(_) => return STAGE_FAILED,
        }
    }
}

/// Whether the stage is the last process of the run: the init of the
/// run's own pid namespace, with no child left, not even one that has
/// ended and is not reaped yet. Every other process of a pid namespace
/// descends from its init (an orphan is handed to the init, or to a
/// subreaper that itself descends from it), so an init without children is
/// alone in it, and only the init itself could start another process.
/// Nothing is reaped or waited for here: a process still running (a
/// command's background job) makes the answer no, and the kernel ends it
/// when the stage exits.
fn alone() -> bool {
    use rustix::process::{waitid, WaitId, WaitIdOptions};
    rustix::process::getpid().is_init()
        && matches!(
            waitid(
                WaitId::All,
                WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT
            ),
            Err(rustix::io::Errno::CHILD)
        )
}

/// Makes the stage undumpable and checks that it is.
fn undumpable() -> Result<(), StageError> {
    use rustix::process::{dumpable_behavior, set_dumpable_behavior, DumpableBehavior};
    set_dumpable_behavior(DumpableBehavior::NotDumpable)
        .map_err(os("cannot make the stage undumpable"))?;
    match dumpable_behavior() {
        Ok(DumpableBehavior::NotDumpable) => Ok(()),
        other => Err(StageError::Refused(format!(
            "the stage is still dumpable ({other:?})"
        ))),
    }
}

type Prepared = (StageConfig, landlock::LandlockReport, Option<u16>);

fn prepare() -> Result<Prepared, StageError> {
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

/// Writes the run's policy file (what its `OZ0_SANDBOX` names) in its
/// private `/tmp`, new and read-only: the run's own copy of what the node
/// told it.
fn write_policy(cfg: &StageConfig) -> Result<(), StageError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        // create_new: O_EXCL, so no link left there is followed.
        .mode(0o444)
        .open(crate::plan::POLICY_INSIDE)
        .and_then(|mut f| f.write_all(cfg.policy.as_bytes()))
        .map_err(os("writing the run's policy file"))
}

/// Enters the working folder bubblewrap entered again, by its path in the
/// run's file tree as it now is. bubblewrap enters it before the stage
/// takes the host's `/dev` away (it is bound at `/oz0/dev` only to build
/// the run's own): a working folder reached there (an image's
/// `WorkingDir`, or a link in the image, leading to `/oz0/dev/pts`) would
/// leave the command in the host's devices, its terminals and shared
/// memory included, through a mount no longer in the run's tree. Such a
/// folder has no path in the run's tree, and the run is refused; any other
/// is entered again, on what is mounted there now.
fn working_folder_again() -> Result<(), StageError> {
    let cwd = rustix::process::getcwd(Vec::new()).map_err(os("the working folder"))?;
    if !cwd.to_bytes().starts_with(b"/") {
        return Err(StageError::Refused(format!(
            "the working folder ({}) is not in the run's file tree: it was reached through a mount the stage takes away (the host's /dev under /oz0); the run is refused",
            String::from_utf8_lossy(cwd.to_bytes()).escape_debug()
        )));
    }
    rustix::process::chdir(cwd.as_c_str()).map_err(os("entering the working folder again"))
}

fn restrict() -> Result<(StageConfig, landlock::LandlockReport), StageError> {
    let mut raw = Vec::new();
    File::from(oz0_sys::spawn::inherited_fd(fds::CONFIG).map_err(os("no configuration"))?)
        .read_to_end(&mut raw)
        .map_err(os("reading the configuration"))?;
    let cfg: StageConfig = serde_json::from_slice(&raw).map_err(os("bad configuration"))?;
    if cfg.argv.is_empty() {
        return Err(StageError::Refused("empty command".into()));
    }
    let stderr = oz0_sys::spawn::inherited_fd(fds::STDERR).map_err(os("no stderr descriptor"))?;
    rustix::stdio::dup2_stderr(&stderr).map_err(os("dup2 stderr"))?;
    drop(stderr);
    // The command inherits stdin, stdout and stderr, and nothing else.
    oz0_sys::spawn::cloexec_from(3).map_err(os("close_range"))?;
    crate::hold::verify_binds(&cfg.expect)?;
    crate::hold::prepare_mounts(&cfg.devices, cfg.tmp, &cfg.holds, &cfg.placeholders)?;
    crate::hold::verify_mount_table(&cfg.mount_points)?;
    working_folder_again()?;
    hide_placeholders_from_git(&cfg);
    write_policy(&cfg)?;
    crate::hold::enter_own_user_namespace()?;
    crate::hold::drop_capabilities()?;
    let programs = seccomp::compile(cfg.seccomp, cfg.deny_unix_sockets)?;
    let report = if cfg.landlock_off {
        landlock::LandlockReport {
            kernel_abi: oz0_sys::kernel::landlock_abi(),
            enforced: "off".into(),
        }
    } else {
        landlock::restrict(&cfg.landlock)?
    };
    if !cfg.seccomp_off {
        seccomp::install(&programs)?;
    }
    Ok((cfg, report))
}
