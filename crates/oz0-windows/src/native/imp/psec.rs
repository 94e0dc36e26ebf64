//! The launch contract of `crate::launch` on Windows: a PSEC environment
//! made from the plan's request (`CreateProcessSecurityEnvironment`, from
//! System32's `processmodel.dll` only, looked up at run time), the command
//! created suspended inside it (`CreateProcessW` with the environment
//! attached as the thread attribute `PROC_THREAD_ATTRIBUTE_SECURITY_ENVIRONMENT`,
//! the plan's environment block, current folder and command line, no
//! handle inherited), placed in the job, then resumed.

use std::ffi::c_void;

use windows_sys::Win32::Foundation::{CloseHandle, HANDLE, WAIT_OBJECT_0, WAIT_TIMEOUT};
use windows_sys::Win32::System::JobObjects::AssignProcessToJobObject;
use windows_sys::Win32::System::Threading::{
    CreateProcessW, DeleteProcThreadAttributeList, GetExitCodeProcess,
    InitializeProcThreadAttributeList, ResumeThread, TerminateProcess, UpdateProcThreadAttribute,
    WaitForSingleObject, CREATE_SUSPENDED, CREATE_UNICODE_ENVIRONMENT,
    EXTENDED_STARTUPINFO_PRESENT, LPPROC_THREAD_ATTRIBUTE_LIST, PROCESS_INFORMATION,
    STARTUPINFOEXW,
};

use super::{last_error, resolve, system32, wide, Job, PfnClose, PfnCreate, RawProc};
use crate::launch::{LaunchOps, SysError};
use crate::plan::{JobLimits, PsecPlan, PsecRequest};
use crate::probe;

/// `PROC_THREAD_ATTRIBUTE_SECURITY_ENVIRONMENT`: attribute 35, an input
/// (`PROC_THREAD_ATTRIBUTE_INPUT`), whose value is the environment's handle.
const PROC_THREAD_ATTRIBUTE_SECURITY_ENVIRONMENT: usize = 35 | 0x0002_0000;

fn sys(call: &str, code: u32) -> SysError {
    SysError {
        code,
        message: format!("{call} failed"),
    }
}

/// The PSEC exports this launcher calls.
pub struct PsecLauncher {
    create: PfnCreate,
    close: PfnClose,
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
        Ok(PsecLauncher { create, close })
    }
}

/// An attribute list holding the environment's handle; deleted on drop.
struct Attributes {
    buf: Vec<u8>,
}

impl Attributes {
    fn list(&mut self) -> LPPROC_THREAD_ATTRIBUTE_LIST {
        self.buf.as_mut_ptr().cast()
    }
}

impl Drop for Attributes {
    fn drop(&mut self) {
        // SAFETY: initialised by InitializeProcThreadAttributeList, deleted once.
        unsafe { DeleteProcThreadAttributeList(self.list()) };
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
        let mut size = 0usize;
        // SAFETY: the sizing call: a null list and a valid size pointer.
        unsafe { InitializeProcThreadAttributeList(std::ptr::null_mut(), 1, 0, &mut size) };
        let mut attrs = Attributes {
            buf: vec![0u8; size],
        };
        // SAFETY: the buffer has the size the sizing call asked for.
        if unsafe { InitializeProcThreadAttributeList(attrs.list(), 1, 0, &mut size) } == 0 {
            return Err(sys("InitializeProcThreadAttributeList", last_error()));
        }
        let handle = env.handle;
        // SAFETY: the list is initialised; the value points at the handle,
        // which lives on this frame until CreateProcessW has returned.
        let ok = unsafe {
            UpdateProcThreadAttribute(
                attrs.list(),
                0,
                PROC_THREAD_ATTRIBUTE_SECURITY_ENVIRONMENT,
                std::ptr::from_ref(&handle).cast::<c_void>(),
                std::mem::size_of::<HANDLE>(),
                std::ptr::null_mut(),
                std::ptr::null(),
            )
        };
        if ok == 0 {
            return Err(sys(
                "UpdateProcThreadAttribute(SECURITY_ENVIRONMENT)",
                last_error(),
            ));
        }
        // SAFETY: all-zero is a valid STARTUPINFOEXW before its fields are set.
        let mut si: STARTUPINFOEXW = unsafe { std::mem::zeroed() };
        si.StartupInfo.cb = u32::try_from(std::mem::size_of::<STARTUPINFOEXW>()).unwrap_or(0);
        si.lpAttributeList = attrs.list();
        let mut command_line = wide(&plan.command_line);
        let program = wide(plan.program.as_str());
        let cwd = wide(plan.cwd.as_str());
        let block = crate::env::environment_block(&plan.env);
        // SAFETY: all-zero is a valid PROCESS_INFORMATION to be filled in.
        let mut pi: PROCESS_INFORMATION = unsafe { std::mem::zeroed() };
        // SAFETY: every string is NUL-terminated and outlives the call; the
        // command line is writable as CreateProcessW requires; the block is
        // a complete UTF-16 environment block; `si` carries the attribute
        // list; no handle is inherited.
        let ok = unsafe {
            CreateProcessW(
                program.as_ptr(),
                command_line.as_mut_ptr(),
                std::ptr::null(),
                std::ptr::null(),
                0,
                CREATE_SUSPENDED | CREATE_UNICODE_ENVIRONMENT | EXTENDED_STARTUPINFO_PRESENT,
                block.as_ptr().cast(),
                cwd.as_ptr(),
                std::ptr::from_ref(&si.StartupInfo),
                &mut pi,
            )
        };
        if ok == 0 {
            return Err(sys("CreateProcessW(in the PSEC environment)", last_error()));
        }
        Ok(PsecChild {
            process: pi.hProcess,
            thread: pi.hThread,
            pid: pi.dwProcessId,
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
