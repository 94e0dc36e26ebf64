//! Watching a run (Windows only): one wait on the run's first process and
//! the caller's cancel together (`WaitForMultipleObjects`), the cancel as
//! an event ([`CancelEvent`], and the one Ctrl-C sets:
//! [`cancel_on_ctrl_c`]), and the tier-0 job object's runs
//! ([`JobRunner`]: `crate::tier0`'s operations).

use std::os::windows::io::{AsHandle, AsRawHandle, BorrowedHandle, FromRawHandle, OwnedHandle};
use std::os::windows::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use oz0_core::Cancel;
use windows_sys::Win32::Foundation::{HANDLE, WAIT_FAILED, WAIT_OBJECT_0, WAIT_TIMEOUT};
use windows_sys::Win32::System::Console::{
    SetConsoleCtrlHandler, CTRL_BREAK_EVENT, CTRL_CLOSE_EVENT, CTRL_C_EVENT,
};
use windows_sys::Win32::System::Threading::{
    CreateEventW, SetEvent, WaitForMultipleObjects, CREATE_NO_WINDOW, CREATE_SUSPENDED, INFINITE,
};

use super::{last_error, Job};
use crate::launch::SysError;
use crate::native::NativeError;
use crate::plan::{JobLimits, JOB_LIMIT_KILL_ON_JOB_CLOSE};
use crate::supervise::{Watch, Woke};
use crate::tier0::{JobOps, Launch, StartError};

fn sys(call: &str, code: u32) -> SysError {
    SysError {
        code,
        message: format!("{call} failed"),
    }
}

/// Waits until `process` or `cancel` is signalled, at most `ms`
/// milliseconds (`None`: without end).
pub fn wait_for(
    process: BorrowedHandle<'_>,
    cancel: Option<&Cancel>,
    ms: Option<u32>,
) -> Result<Woke, SysError> {
    let mut handles: Vec<HANDLE> = vec![process.as_raw_handle()];
    if let Some(c) = cancel {
        handles.push(c.0.as_raw_handle());
    }
    // One or two handles: the count fits a DWORD.
    #[allow(clippy::cast_possible_truncation)]
    let count = handles.len() as u32;
    // SAFETY: `handles` holds `count` live handles, borrowed for the call;
    // bWaitAll FALSE returns at the first signalled one.
    let r = unsafe { WaitForMultipleObjects(count, handles.as_ptr(), 0, ms.unwrap_or(INFINITE)) };
    match r {
        WAIT_OBJECT_0 => Ok(Woke::Exited(0)),
        r if r == WAIT_OBJECT_0 + 1 => Ok(Woke::Cancelled),
        WAIT_TIMEOUT => Ok(Woke::TimedOut),
        WAIT_FAILED => Err(sys("WaitForMultipleObjects", last_error())),
        r => Err(sys("WaitForMultipleObjects (an abandoned handle)", r)),
    }
}

/// A manual-reset event that cancels the runs given its [`Cancel`]s when
/// set; closed when dropped.
#[derive(Debug)]
pub struct CancelEvent(OwnedHandle);

impl CancelEvent {
    /// A new event, not set.
    pub fn new() -> Result<CancelEvent, NativeError> {
        // SAFETY: null attributes and name make an unnamed event this
        // process alone holds; manual reset, not set.
        let h = unsafe { CreateEventW(std::ptr::null(), 1, 0, std::ptr::null()) };
        if h.is_null() {
            return Err(NativeError::Win32 {
                call: "CreateEventW",
                code: last_error(),
            });
        }
        // SAFETY: a new handle of ours, owned from here on alone.
        Ok(CancelEvent(unsafe { OwnedHandle::from_raw_handle(h) }))
    }

    /// A cancel handle that fires when this event is set.
    pub fn cancel(&self) -> Result<Cancel, NativeError> {
        self.0
            .try_clone()
            .map(Cancel)
            .map_err(|e| NativeError::Win32 {
                call: "DuplicateHandle",
                code: e
                    .raw_os_error()
                    .map_or(0, |c| u32::from_ne_bytes(c.to_ne_bytes())),
            })
    }

    /// Sets the event: every run given its cancel is ended.
    pub fn set(&self) {
        // SAFETY: a live event handle of ours.
        unsafe { SetEvent(self.0.as_raw_handle()) };
    }
}

/// A cancel and what fires it, over a new event (the self-test's runs).
pub fn event_cancel() -> std::io::Result<(Cancel, Box<dyn FnOnce() + Send>)> {
    let e = CancelEvent::new().map_err(std::io::Error::other)?;
    let c = e.cancel().map_err(std::io::Error::other)?;
    Ok((c, Box::new(move || e.set())))
}

/// The event Ctrl-C, Ctrl-Break and closing the console set.
static CTRL_C: OnceLock<CancelEvent> = OnceLock::new();

unsafe extern "system" fn on_ctrl(kind: u32) -> i32 {
    match (kind, CTRL_C.get()) {
        (CTRL_C_EVENT | CTRL_BREAK_EVENT | CTRL_CLOSE_EVENT, Some(e)) => {
            e.set();
            // Handled: the process is not ended by Windows' default; the
            // run is ended by its supervisor, which then returns.
            1
        }
        _ => 0,
    }
}

/// A cancel that fires on Ctrl-C, Ctrl-Break or the console's closing.
pub fn cancel_on_ctrl_c() -> Result<Cancel, NativeError> {
    let event = match CTRL_C.get() {
        Some(e) => e,
        None => {
            let e = CancelEvent::new()?;
            let e = CTRL_C.get_or_init(|| e);
            // SAFETY: `on_ctrl` is a valid handler for the process's life
            // and reads only the event set above.
            if unsafe { SetConsoleCtrlHandler(Some(on_ctrl), 1) } == 0 {
                return Err(NativeError::Win32 {
                    call: "SetConsoleCtrlHandler",
                    code: last_error(),
                });
            }
            e
        }
    };
    event.cancel()
}

/// `crate::tier0`'s operations: std's spawn with `CREATE_SUSPENDED` (and
/// `CREATE_NO_WINDOW`), a kill-on-close job, placed, resumed.
pub struct JobRunner;

/// A tier-0 run: its first process and its job.
pub struct JobRun {
    child: std::process::Child,
    job: Job,
    cancel: Option<Cancel>,
}

fn stdio(s: oz0_core::Stdio) -> Stdio {
    match s {
        oz0_core::Stdio::Inherit => Stdio::inherit(),
        oz0_core::Stdio::Null => Stdio::null(),
        oz0_core::Stdio::File(f) => Stdio::from(f),
    }
}

impl JobOps for JobRunner {
    type Run = JobRun;

    fn start(
        &self,
        l: &Launch,
        io: oz0_core::RunIo,
        cancel: Option<Cancel>,
    ) -> Result<JobRun, StartError> {
        let job = Job::create(&JobLimits {
            limit_flags: JOB_LIMIT_KILL_ON_JOB_CLOSE,
            job_memory_bytes: None,
            active_processes: None,
            job_user_time_100ns: None,
            ui_restrictions: 0,
        })
        .map_err(|e| StartError::Refused(format!("cannot make the run's job object: {e}")))?;
        let mut cmd = Command::new(&l.program);
        cmd.args(&l.args)
            .current_dir(&l.cwd)
            .env_clear()
            .envs(l.env.iter().map(|(k, v)| (k, v)))
            .stdin(stdio(io.stdin))
            .stdout(stdio(io.stdout))
            .stderr(stdio(io.stderr))
            // A console program gets a hidden console of its own, never
            // the node's: it neither takes the operator's keys nor types
            // into them.
            .creation_flags(CREATE_SUSPENDED | CREATE_NO_WINDOW);
        let mut child = cmd.spawn().map_err(|e| StartError::NotExecuted {
            reason: format!("cannot start {:?}: {e}", l.program),
            code: oz0_core::exit::exec_failure_code(&e),
        })?;
        if let Err(e) = job.place_and_resume(child.id()) {
            // Not placed: it never runs.
            let _ = child.kill();
            let _ = child.wait();
            return Err(StartError::Refused(format!(
                "the run's process could not be placed in its job object ({e}); it never ran"
            )));
        }
        Ok(JobRun { child, job, cancel })
    }
}

impl Watch for JobRun {
    fn wait(&mut self, ms: Option<u32>) -> Result<Woke, SysError> {
        match wait_for(self.child.as_handle(), self.cancel.as_ref(), ms)? {
            Woke::Exited(_) => {
                let st = self.child.wait().map_err(|e| {
                    sys(
                        "GetExitCodeProcess",
                        e.raw_os_error().unwrap_or(0).unsigned_abs(),
                    )
                })?;
                Ok(Woke::Exited(
                    st.code().map_or(1, |c| u32::from_ne_bytes(c.to_ne_bytes())),
                ))
            }
            w => Ok(w),
        }
    }

    fn end_all(&mut self) {
        let _ = self.job.terminate();
        // Reaped: the first process is in the job.
        let _ = self.child.wait();
    }

    fn active(&mut self) -> Option<u32> {
        self.job.active_processes().ok()
    }
}
