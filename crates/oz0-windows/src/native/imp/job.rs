//! Job objects: one with a plan's limits, kill-on-close and UI limits; a
//! suspended process placed in it and resumed; its processes ended and
//! counted.

use windows_sys::Win32::Foundation::{CloseHandle, HANDLE};
use windows_sys::Win32::System::Diagnostics::ToolHelp::{
    CreateToolhelp32Snapshot, Thread32First, Thread32Next, TH32CS_SNAPTHREAD, THREADENTRY32,
};
use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, JobObjectBasicAccountingInformation,
    JobObjectBasicUIRestrictions, JobObjectExtendedLimitInformation, QueryInformationJobObject,
    SetInformationJobObject, TerminateJobObject, JOBOBJECT_BASIC_ACCOUNTING_INFORMATION,
    JOBOBJECT_BASIC_UI_RESTRICTIONS, JOBOBJECT_EXTENDED_LIMIT_INFORMATION,
};
use windows_sys::Win32::System::Threading::{
    OpenProcess, OpenThread, ResumeThread, PROCESS_SET_QUOTA, PROCESS_TERMINATE,
    THREAD_SUSPEND_RESUME,
};

use super::last_error;
use crate::native::NativeError;
use crate::plan::JobLimits;

/// A job object; closing it (drop) ends every process in it.
#[derive(Debug)]
pub struct Job(HANDLE);

impl Job {
    /// Creates an unnamed job with the plan's limits. Any failure closes
    /// it and is returned: no process is ever placed in a job whose
    /// limits did not take.
    pub fn create(limits: &JobLimits) -> Result<Job, NativeError> {
        // SAFETY: null attributes and name create an unnamed job that
        // this process alone holds.
        let h = unsafe { CreateJobObjectW(std::ptr::null(), std::ptr::null()) };
        if h.is_null() {
            return Err(NativeError::Win32 {
                call: "CreateJobObjectW",
                code: last_error(),
            });
        }
        let job = Job(h);
        // SAFETY: an all-zero JOBOBJECT_EXTENDED_LIMIT_INFORMATION is a
        // valid value (plain integers).
        let mut info: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = unsafe { std::mem::zeroed() };
        info.BasicLimitInformation.LimitFlags = limits.limit_flags;
        info.BasicLimitInformation.ActiveProcessLimit = limits.active_processes.unwrap_or(0);
        info.BasicLimitInformation.PerJobUserTimeLimit = limits.job_user_time_100ns.unwrap_or(0);
        info.JobMemoryLimit = limits
            .job_memory_bytes
            .map_or(0, |b| usize::try_from(b).unwrap_or(usize::MAX));
        // A struct of a few hundred bytes: its size fits a DWORD.
        #[allow(clippy::cast_possible_truncation)]
        let size = std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32;
        // SAFETY: `info` is a valid struct of the size passed, for the
        // class that expects it; the handle is ours.
        let ok = unsafe {
            SetInformationJobObject(
                job.0,
                JobObjectExtendedLimitInformation,
                (&info as *const JOBOBJECT_EXTENDED_LIMIT_INFORMATION).cast(),
                size,
            )
        };
        if ok == 0 {
            return Err(NativeError::Win32 {
                call: "SetInformationJobObject(ExtendedLimitInformation)",
                code: last_error(),
            });
        }
        let ui = JOBOBJECT_BASIC_UI_RESTRICTIONS {
            UIRestrictionsClass: limits.ui_restrictions,
        };
        // A struct of one DWORD: its size fits a DWORD.
        #[allow(clippy::cast_possible_truncation)]
        let size = std::mem::size_of::<JOBOBJECT_BASIC_UI_RESTRICTIONS>() as u32;
        // SAFETY: as above, for the UI restrictions class.
        let ok = unsafe {
            SetInformationJobObject(
                job.0,
                JobObjectBasicUIRestrictions,
                (&ui as *const JOBOBJECT_BASIC_UI_RESTRICTIONS).cast(),
                size,
            )
        };
        if ok == 0 {
            return Err(NativeError::Win32 {
                call: "SetInformationJobObject(BasicUIRestrictions)",
                code: last_error(),
            });
        }
        Ok(job)
    }

    /// The raw handle, for assigning a suspended child.
    pub fn handle(&self) -> HANDLE {
        self.0
    }

    /// Places process `pid`, started suspended (`CREATE_SUSPENDED`), in
    /// this job, then resumes its threads: it runs nothing outside the
    /// job, so every process it starts is in the job too. On any
    /// failure the process is left suspended and the caller kills it:
    /// not placed ⇒ never runs.
    pub fn place_and_resume(&self, pid: u32) -> Result<(), NativeError> {
        // SAFETY: plain call; a null handle is checked below.
        let process = unsafe { OpenProcess(PROCESS_SET_QUOTA | PROCESS_TERMINATE, 0, pid) };
        if process.is_null() {
            return Err(NativeError::Win32 {
                call: "OpenProcess",
                code: last_error(),
            });
        }
        // SAFETY: both handles are live; the process handle is closed once.
        let placed = unsafe { AssignProcessToJobObject(self.0, process) };
        let code = last_error();
        // SAFETY: ours, closed once.
        unsafe { CloseHandle(process) };
        if placed == 0 {
            return Err(NativeError::Win32 {
                call: "AssignProcessToJobObject",
                code,
            });
        }
        // SAFETY: plain call; the snapshot handle is checked and closed once.
        let snap = unsafe { CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0) };
        if snap.is_null() || snap == windows_sys::Win32::Foundation::INVALID_HANDLE_VALUE {
            return Err(NativeError::Win32 {
                call: "CreateToolhelp32Snapshot",
                code: last_error(),
            });
        }
        let mut entry = THREADENTRY32 {
            // A struct of 28 bytes: its size fits a DWORD.
            #[allow(clippy::cast_possible_truncation)]
            dwSize: std::mem::size_of::<THREADENTRY32>() as u32,
            ..Default::default()
        };
        let mut resumed = 0u32;
        let mut failed = None;
        // SAFETY: `entry` is a valid THREADENTRY32 with its size set.
        let mut more = unsafe { Thread32First(snap, &mut entry) } != 0;
        while more {
            if entry.th32OwnerProcessID == pid {
                // SAFETY: plain call; a null handle is checked.
                let t = unsafe { OpenThread(THREAD_SUSPEND_RESUME, 0, entry.th32ThreadID) };
                if t.is_null() {
                    failed = Some(("OpenThread", last_error()));
                } else {
                    // SAFETY: a live thread handle, closed once after.
                    if unsafe { ResumeThread(t) } == u32::MAX {
                        failed = Some(("ResumeThread", last_error()));
                    } else {
                        resumed += 1;
                    }
                    // SAFETY: ours, closed once.
                    unsafe { CloseHandle(t) };
                }
            }
            // SAFETY: as for Thread32First.
            more = unsafe { Thread32Next(snap, &mut entry) } != 0;
        }
        // SAFETY: ours, closed once.
        unsafe { CloseHandle(snap) };
        match (failed, resumed) {
            (Some((call, code)), _) => Err(NativeError::Win32 { call, code }),
            (None, 0) => Err(NativeError::Win32 {
                call: "Thread32First (no thread of the process found)",
                code: 0,
            }),
            (None, _) => Ok(()),
        }
    }

    /// Ends every process in the job.
    pub fn terminate(&self) -> Result<(), NativeError> {
        // SAFETY: the handle is ours.
        if unsafe { TerminateJobObject(self.0, 1) } == 0 {
            return Err(NativeError::Win32 {
                call: "TerminateJobObject",
                code: last_error(),
            });
        }
        Ok(())
    }

    /// How many processes are in the job now.
    pub fn active_processes(&self) -> Result<u32, NativeError> {
        // SAFETY: all-zero is a valid value of this plain struct.
        let mut info: JOBOBJECT_BASIC_ACCOUNTING_INFORMATION = unsafe { std::mem::zeroed() };
        // A struct of a few dozen bytes: its size fits a DWORD.
        #[allow(clippy::cast_possible_truncation)]
        let size = std::mem::size_of::<JOBOBJECT_BASIC_ACCOUNTING_INFORMATION>() as u32;
        // SAFETY: `info` is writable for `size` bytes, of the class's type.
        let ok = unsafe {
            QueryInformationJobObject(
                self.0,
                JobObjectBasicAccountingInformation,
                (&mut info as *mut JOBOBJECT_BASIC_ACCOUNTING_INFORMATION).cast(),
                size,
                std::ptr::null_mut(),
            )
        };
        if ok == 0 {
            return Err(NativeError::Win32 {
                call: "QueryInformationJobObject(BasicAccountingInformation)",
                code: last_error(),
            });
        }
        Ok(info.ActiveProcesses)
    }
}

// SAFETY: a job object's handle may be used and closed from any
// thread; `Job` owns it alone and closes it once.
unsafe impl Send for Job {}
// SAFETY: every method takes `&self` and makes one system call on the
// handle, which Windows serialises.
unsafe impl Sync for Job {}

impl Drop for Job {
    fn drop(&mut self) {
        // SAFETY: the handle is ours and closed once; with
        // kill-on-close this ends every process in the job.
        unsafe { CloseHandle(self.0) };
    }
}
