//! The launch contract of `crate::launch` on Windows: a PSEC environment
//! made from the plan's request (`CreateProcessSecurityEnvironment`, from
//! System32's `processmodel.dll` only, looked up at run time), the command
//! created suspended inside it (`super::spawn`: the environment attached
//! as the thread attribute `PROC_THREAD_ATTRIBUTE_SECURITY_ENVIRONMENT`,
//! the plan's environment block, current folder and command line, and the
//! run's three standard streams, the only handles it inherits), placed in
//! the job, then resumed.

use std::os::windows::io::IntoRawHandle;

use windows_sys::Win32::Foundation::{CloseHandle, HANDLE, WAIT_OBJECT_0, WAIT_TIMEOUT};
use windows_sys::Win32::System::JobObjects::AssignProcessToJobObject;
use windows_sys::Win32::System::Threading::{
    GetExitCodeProcess, ResumeThread, TerminateProcess, WaitForSingleObject,
};

use super::spawn::{create_suspended, Spawn, StdHandles};
use super::{last_error, resolve, system32, Job, PfnClose, PfnCreate, RawProc};
use crate::launch::{LaunchOps, SysError};
use crate::plan::{JobLimits, PsecPlan, PsecRequest};
use crate::probe;

fn sys(call: &str, code: u32) -> SysError {
    SysError {
        code,
        message: format!("{call} failed"),
    }
}

/// The PSEC exports this launcher calls, and the standard streams its next
/// command gets (none: it inherits no handle).
pub struct PsecLauncher {
    create: PfnCreate,
    close: PfnClose,
    stdio: Option<StdHandles>,
    console: Option<windows_sys::Win32::System::Console::HPCON>,
}

/// A PSEC environment; closed when dropped.
pub struct PsecEnv {
    handle: HANDLE,
    close: PfnClose,
}

impl Drop for PsecEnv {
    fn drop(&mut self) {
        // SAFETY: the handle came from a successful create and is closed once.
        unsafe { (self.close)(self.handle) };
    }
}

/// A process started in an environment; its handles are closed when dropped.
pub struct PsecChild {
    process: HANDLE,
    thread: HANDLE,
    /// Its process id.
    pub pid: u32,
}

impl Drop for PsecChild {
    fn drop(&mut self) {
        // SAFETY: both handles are ours, closed once.
        unsafe {
            CloseHandle(self.thread);
            CloseHandle(self.process);
        }
    }
}

// SAFETY: the handles may be used and closed from any thread; each value
// owns its handles alone.
unsafe impl Send for PsecChild {}
// SAFETY: as for PsecChild.
unsafe impl Send for PsecEnv {}

impl std::os::windows::io::AsHandle for PsecChild {
    fn as_handle(&self) -> std::os::windows::io::BorrowedHandle<'_> {
        // SAFETY: the process handle is ours and open as long as `self`.
        unsafe { std::os::windows::io::BorrowedHandle::borrow_raw(self.process) }
    }
}

impl PsecChild {
    /// Waits up to `ms` milliseconds: its exit code once it has exited.
    pub fn wait_ms(&self, ms: u32) -> Result<Option<u32>, SysError> {
        // SAFETY: a live process handle of ours.
        match unsafe { WaitForSingleObject(self.process, ms) } {
            WAIT_OBJECT_0 => {
                let mut code = 0u32;
                // SAFETY: as above; `code` is a valid out-pointer.
                if unsafe { GetExitCodeProcess(self.process, &mut code) } == 0 {
                    return Err(sys("GetExitCodeProcess", last_error()));
                }
                Ok(Some(code))
            }
            WAIT_TIMEOUT => Ok(None),
            _ => Err(sys("WaitForSingleObject", last_error())),
        }
    }
}

impl PsecLauncher {
    /// The exports, where Windows has them (the probe found them first).
    pub fn load() -> Result<PsecLauncher, SysError> {
        let module = system32(probe::DLL)
            .ok_or_else(|| sys("LoadLibraryExW(processmodel.dll)", last_error()))?;
        let (Some(create), Some(close)) = (
            resolve(module, c"CreateProcessSecurityEnvironment"),
            resolve(module, c"CloseProcessSecurityEnvironment"),
        ) else {
            return Err(sys(
                "GetProcAddress(CreateProcessSecurityEnvironment)",
                last_error(),
            ));
        };
        // SAFETY: the exports have these signatures
        // (HRESULT(LPCVOID, DWORD, FLAGS, HANDLE*) and void(HANDLE)).
        let (create, close) = unsafe {
            (
                std::mem::transmute::<RawProc, PfnCreate>(create),
                std::mem::transmute::<RawProc, PfnClose>(close),
            )
        };
        Ok(PsecLauncher {
            create,
            close,
            stdio: None,
            console: None,
        })
    }

    /// The next command's standard streams.
    pub fn with_stdio(mut self, stdio: StdHandles) -> PsecLauncher {
        self.stdio = Some(stdio);
        self.console = None;
        self
    }

    /// The next command's pseudo console (`super::conpty`), instead of
    /// streams; the caller keeps it open for the run's length.
    pub fn with_console(mut self, console: &super::conpty::PseudoConsole) -> PsecLauncher {
        self.console = Some(console.handle());
        self.stdio = None;
        self
    }
}

impl LaunchOps for PsecLauncher {
    type Job = Job;
    type Env = PsecEnv;
    type Child = PsecChild;

    fn create_job(&mut self, limits: &JobLimits) -> Result<Job, SysError> {
        Job::create(limits).map_err(|e| SysError {
            code: match e {
                super::super::NativeError::Win32 { code, .. } => code,
                _ => 0,
            },
            message: e.to_string(),
        })
    }

    fn create_environment(&mut self, request: &PsecRequest) -> Result<PsecEnv, SysError> {
        let spec = crate::psec_wire::encode(request);
        let len = u32::try_from(spec.len()).map_err(|_| SysError {
            code: 0,
            message: "the PSEC spec is larger than a DWORD counts".into(),
        })?;
        let mut handle: HANDLE = std::ptr::null_mut();
        // SAFETY: `spec` is a live buffer of `len` bytes; `handle` is a valid
        // out-pointer; flags 0 asks for no special behaviour.
        let hr = unsafe { (self.create)(spec.as_ptr().cast(), len, 0, &mut handle) };
        if hr < 0 || handle.is_null() {
            // The HRESULT's bits as Windows writes them.
            #[allow(clippy::cast_sign_loss)]
            return Err(SysError {
                code: hr as u32,
                message: format!(
                    "CreateProcessSecurityEnvironment refused the run's spec (HRESULT {hr:#010x})"
                ),
            });
        }
        Ok(PsecEnv {
            handle,
            close: self.close,
        })
    }

    fn spawn_suspended(&mut self, env: &PsecEnv, plan: &PsecPlan) -> Result<PsecChild, SysError> {
        let block = crate::env::environment_block(&plan.env);
        let child = create_suspended(&Spawn {
            program: plan.program.as_str(),
            command_line: &plan.command_line,
            cwd: plan.cwd.as_str(),
            env_block: &block,
            std: self.stdio.as_ref(),
            pseudo_console: self.console,
            security_env: Some(env.handle),
        })
        .map_err(|e| SysError {
            message: format!("{} (in the PSEC environment)", e.message),
            ..e
        })?;
        // The streams' duplicates are the child's now: ours go.
        self.stdio = None;
        Ok(PsecChild {
            process: child.process.into_raw_handle(),
            thread: child.thread.into_raw_handle(),
            pid: child.pid,
        })
    }

    fn assign(&mut self, job: &Job, child: &PsecChild) -> Result<(), SysError> {
        // SAFETY: both handles are live and ours.
        if unsafe { AssignProcessToJobObject(job.handle(), child.process) } == 0 {
            return Err(sys("AssignProcessToJobObject", last_error()));
        }
        Ok(())
    }

    fn resume(&mut self, child: &PsecChild) -> Result<(), SysError> {
        // SAFETY: the child's main thread handle, ours.
        if unsafe { ResumeThread(child.thread) } == u32::MAX {
            return Err(sys("ResumeThread", last_error()));
        }
        Ok(())
    }

    fn terminate(&mut self, child: PsecChild) {
        // SAFETY: a live process handle of ours; the child is dropped after.
        unsafe { TerminateProcess(child.process, 1) };
    }

    fn close_environment(&mut self, env: PsecEnv) {
        drop(env);
    }

    fn close_job(&mut self, job: Job) {
        drop(job);
    }
}
