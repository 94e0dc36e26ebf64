//! Starting bubblewrap: its arguments and the stage's configuration in
//! sealed memory files, descriptors passed at fixed numbers, a clean
//! environment, and the run's stdio; and killing the run's tree.

use std::fs::File;
use std::io::{self, Seek, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};

use rustix::process::{pidfd_send_signal, Signal};

use crate::outcome::{prep, SandboxError};
use crate::plan::Plan;

pub(crate) fn sealed_memfd(name: &str, data: &[u8]) -> Result<OwnedFd, SandboxError> {
    use rustix::fs::{fcntl_add_seals, memfd_create, MemfdFlags, SealFlags};
    let fd = memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
        .map_err(prep("memfd_create"))?;
    let mut f = File::from(fd);
    f.write_all(data).map_err(prep("memfd write"))?;
    f.rewind().map_err(prep("memfd seek"))?;
    fcntl_add_seals(
        &f,
        SealFlags::SHRINK | SealFlags::GROW | SealFlags::WRITE | SealFlags::SEAL,
    )
    .map_err(prep("memfd seal"))?;
    Ok(OwnedFd::from(f))
}

pub(crate) fn pipe() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(prep("pipe"))
}

/// bubblewrap, started one way or the other.
pub(crate) enum Bwrap {
    /// By `posix_spawn` (no job to join before it executes).
    Spawned(i32),
    /// By fork, joining the job in between.
    Forked(std::process::Child),
}

impl Bwrap {
    pub(crate) fn id(&self) -> i32 {
        match self {
            Bwrap::Spawned(pid) => *pid,
            Bwrap::Forked(c) => rustix::process::Pid::from_child(c).as_raw_nonzero().get(),
        }
    }

    pub(crate) fn wait(&mut self) -> io::Result<std::process::ExitStatus> {
        use std::os::unix::process::ExitStatusExt;
        match self {
            Bwrap::Forked(c) => c.wait(),
            Bwrap::Spawned(pid) => loop {
                let p = rustix::process::Pid::from_raw(*pid);
                match rustix::process::waitpid(p, rustix::process::WaitOptions::empty()) {
                    Ok(Some((_, st))) => {
                        return Ok(std::process::ExitStatus::from_raw(st.as_raw()))
                    }
                    Ok(None) => continue,
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => return Err(e.into()),
                }
            },
        }
    }
}

/// Starts bubblewrap with a clean environment, its arguments on a
/// descriptor, `stdin` and `stdout` as the command's, stderr into
/// `capture`, and `setup`'s descriptors. Without a job to join, by
/// `posix_spawn`: the C library starts it without copying this process's
/// memory, which a fork does (about a third of a millisecond less per run
/// here).
pub(crate) fn spawn_bwrap(
    bwrap: &Path,
    plan: &Plan,
    (stdin, stdout): (&oz0_core::Stdio, &oz0_core::Stdio),
    capture: OwnedFd,
    setup: &oz0_sys::spawn::ChildSetup,
) -> io::Result<Bwrap> {
    if setup.spawnable() {
        use std::os::unix::ffi::OsStrExt;
        let cstr = |b: &[u8]| {
            std::ffi::CString::new(b).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
        };
        let program = cstr(bwrap.as_os_str().as_bytes())?;
        let mut argv = vec![program.clone()];
        for a in plan.bwrap_command() {
            argv.push(cstr(a.as_bytes())?);
        }
        let raw = |s: &oz0_core::Stdio| match s {
            oz0_core::Stdio::Inherit => oz0_sys::spawn::Stdio::Inherit,
            oz0_core::Stdio::Null => oz0_sys::spawn::Stdio::Null,
            oz0_core::Stdio::File(f) => {
                oz0_sys::spawn::Stdio::Fd(rustix::fd::AsRawFd::as_raw_fd(f))
            }
        };
        let fd = rustix::fd::AsRawFd::as_raw_fd(&capture);
        let pid = setup.spawn(
            &program,
            &argv,
            [raw(stdin), raw(stdout), oz0_sys::spawn::Stdio::Fd(fd)],
        )?;
        return Ok(Bwrap::Spawned(pid));
    }
    let owned = |s: &oz0_core::Stdio| -> io::Result<Stdio> {
        Ok(match s {
            oz0_core::Stdio::Inherit => Stdio::inherit(),
            oz0_core::Stdio::Null => Stdio::null(),
            oz0_core::Stdio::File(f) => Stdio::from(f.try_clone()?),
        })
    };
    let mut cmd = Command::new(bwrap);
    cmd.env_clear()
        .args(plan.bwrap_command())
        .stdin(owned(stdin)?)
        .stdout(owned(stdout)?)
        .stderr(Stdio::from(capture));
    setup.install(&mut cmd);
    cmd.spawn().map(Bwrap::Forked)
}

pub(crate) fn kill_tree(init: Option<&OwnedFd>, outer: &OwnedFd) {
    match init {
        // Killing init makes the kernel kill every process of the namespace.
        Some(fd) => {
            let _ = pidfd_send_signal(fd.as_fd(), Signal::KILL);
        }
        // No init known: bubblewrap's init follows it (PDEATHSIG).
        None => {
            let _ = pidfd_send_signal(outer.as_fd(), Signal::KILL);
        }
    }
}

pub(crate) fn read_child_pid(json: &mut impl io::BufRead) -> Option<i32> {
    let mut line = String::new();
    json.read_line(&mut line).ok()?;
    let v: serde_json::Value = serde_json::from_str(line.trim()).ok()?;
    // A number that is no pid (beyond an int) is not read as one.
    v.get("child-pid")?
        .as_i64()
        .and_then(|p| i32::try_from(p).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_pid_from_bwrap_json() {
        let mut r = io::Cursor::new(b"{ \"child-pid\": 4242, \"cgroup-namespace\": 1 }\n".to_vec());
        assert_eq!(read_child_pid(&mut r), Some(4242));
        let mut r = io::Cursor::new(Vec::new());
        assert_eq!(read_child_pid(&mut r), None);
    }
}
