//! The native layer: the only system calls of this crate, and its only `unsafe`.
//!
//! - [`probe`]: reads the edition and build from the registry, asks
//!   `IsApiSetImplemented`, loads `processmodel.dll` from System32 only,
//!   resolves its exports with `GetProcAddress`, asks the contract version
//!   and the feature bits, and creates and closes the minimal spec of
//!   [`crate::psec_wire`]. It needs no administrator and changes nothing.
//! - [`Job`]: a job object with a plan's limits, kill-on-close and UI limits;
//!   a process started suspended is placed in it before it runs a single
//!   instruction ([`Job::place_and_resume`]), and the job's processes end
//!   together ([`Job::terminate`]).
//! - `exclusive_listener` (Windows only): a loopback listener bound with
//!   `SO_EXCLUSIVEADDRUSE`, which no other process can share.
//! - `PsecLauncher` (Windows only): `crate::launch`'s steps as system
//!   calls: a PSEC environment from a run's whole spec
//!   (`crate::psec_wire::encode`), the command created suspended inside it,
//!   placed in its job, resumed.
//! - `wait_for`, `CancelEvent`, `cancel_on_ctrl_c` (Windows only): one
//!   wait on a run's first process and its cancel (an event) together;
//!   `JobRunner`: `crate::tier0`'s operations.
//!
//! On other systems [`probe`] and [`Job::create`] return
//! [`NativeError::NotWindows`]. This module is type-checked for
//! `x86_64-pc-windows-msvc` and `-gnu`; it runs only on Windows.
#![allow(unsafe_code)]

#[cfg(not(windows))]
use crate::plan::JobLimits;
#[cfg(not(windows))]
use crate::probe::PsecProbe;

/// A system call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NativeError {
    /// Not on Windows.
    #[error("not Windows: PSEC exists only on Windows 11")]
    NotWindows,
    /// A call failed with a Win32 error.
    #[error("{call} failed with Windows error {code}")]
    Win32 {
        /// The call.
        call: &'static str,
        /// `GetLastError` or the returned code.
        code: u32,
    },
    /// A value Windows returned is not Unicode.
    #[error(transparent)]
    Env(#[from] crate::env::WinEnvError),
}

#[cfg(not(windows))]
/// Probes PSEC. Not Windows here.
pub fn probe() -> Result<PsecProbe, NativeError> {
    Err(NativeError::NotWindows)
}

#[cfg(not(windows))]
/// A job object (never created off Windows).
#[derive(Debug)]
pub struct Job(());

#[cfg(not(windows))]
impl Job {
    /// Creates a job object. Not Windows here.
    pub fn create(_limits: &JobLimits) -> Result<Job, NativeError> {
        Err(NativeError::NotWindows)
    }

    /// Places a suspended process in the job and resumes it. Not Windows here.
    pub fn place_and_resume(&self, _pid: u32) -> Result<(), NativeError> {
        Err(NativeError::NotWindows)
    }

    /// Ends every process in the job. Not Windows here.
    pub fn terminate(&self) -> Result<(), NativeError> {
        Err(NativeError::NotWindows)
    }

    /// Processes still in the job. Not Windows here.
    pub fn active_processes(&self) -> Result<u32, NativeError> {
        Err(NativeError::NotWindows)
    }
}

/// What removing the relay's AppContainer profile did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileRemoval {
    /// Windows removed it, or there was none (`S_OK`).
    Removed,
    /// There was none (`ERROR_NOT_FOUND`).
    NotFound,
    /// This Windows has no AppContainer profiles: `userenv.dll` exports no
    /// `DeleteAppContainerProfile`, so no profile can exist.
    Unsupported,
}

#[cfg(not(windows))]
/// Removes an AppContainer profile of this user. Not Windows here.
pub fn delete_appcontainer_profile(_name: &str) -> Result<ProfileRemoval, NativeError> {
    Err(NativeError::NotWindows)
}

#[cfg(not(windows))]
/// This process's user SID. Not Windows here.
pub fn current_user_sid() -> Result<String, NativeError> {
    Err(NativeError::NotWindows)
}

#[cfg(not(windows))]
/// The access list of a file or folder. Not Windows here.
pub fn access_list(_path: &std::path::Path) -> Result<Option<Vec<crate::acl::Ace>>, NativeError> {
    Err(NativeError::NotWindows)
}

#[cfg(not(windows))]
/// Replaces a file's or folder's access list. Not Windows here.
pub fn set_access_list(_path: &std::path::Path, _sddl: &str) -> Result<(), NativeError> {
    Err(NativeError::NotWindows)
}

#[cfg(windows)]
mod listener;
#[cfg(windows)]
pub use listener::exclusive_listener;

#[cfg(windows)]
pub use imp::{
    access_list, current_user_sid, delete_appcontainer_profile, probe, set_access_list, Job,
};

#[cfg(windows)]
pub use imp::psec::{PsecChild, PsecEnv, PsecLauncher};

#[cfg(windows)]
pub use imp::run::{cancel_on_ctrl_c, wait_for, CancelEvent, JobRun, JobRunner};

#[cfg(windows)]
mod imp {
    use std::ffi::c_void;

    pub mod psec;
    pub mod run;

    use windows_sys::Win32::Foundation::{
        CloseHandle, GetLastError, ERROR_SUCCESS, HANDLE, HMODULE,
    };
    use windows_sys::Win32::System::Diagnostics::ToolHelp::{
        CreateToolhelp32Snapshot, Thread32First, Thread32Next, TH32CS_SNAPTHREAD, THREADENTRY32,
    };
    use windows_sys::Win32::System::JobObjects::{
        AssignProcessToJobObject, CreateJobObjectW, JobObjectBasicAccountingInformation,
        JobObjectBasicUIRestrictions, JobObjectExtendedLimitInformation, QueryInformationJobObject,
        SetInformationJobObject, TerminateJobObject, JOBOBJECT_BASIC_ACCOUNTING_INFORMATION,
        JOBOBJECT_BASIC_UI_RESTRICTIONS, JOBOBJECT_EXTENDED_LIMIT_INFORMATION,
    };
    use windows_sys::Win32::System::LibraryLoader::{
        GetProcAddress, LoadLibraryExW, LOAD_LIBRARY_SEARCH_SYSTEM32,
    };
    use windows_sys::Win32::System::Registry::{
        RegGetValueW, HKEY_LOCAL_MACHINE, RRF_RT_REG_DWORD, RRF_RT_REG_SZ,
    };
    use windows_sys::Win32::System::Threading::{
        OpenProcess, OpenThread, ResumeThread, PROCESS_SET_QUOTA, PROCESS_TERMINATE,
        THREAD_SUSPEND_RESUME,
    };
    use windows_sys::Win32::System::WindowsProgramming::IsApiSetImplemented;

    use super::NativeError;
    use crate::plan::{self, JobLimits};
    use crate::probe::{
        self, Contract, CreateClose, Edition, Exports, PsecProbe, SupportAnswer, VersionAnswer,
        WindowsBuild,
    };

    // Our portable constants are the system's: checked when this module is
    // type-checked for Windows.
    const _: () = {
        use windows_sys::Win32::System::JobObjects as J;
        assert!(plan::JOB_LIMIT_ACTIVE_PROCESS == J::JOB_OBJECT_LIMIT_ACTIVE_PROCESS);
        assert!(plan::JOB_LIMIT_JOB_TIME == J::JOB_OBJECT_LIMIT_JOB_TIME);
        assert!(plan::JOB_LIMIT_JOB_MEMORY == J::JOB_OBJECT_LIMIT_JOB_MEMORY);
        assert!(
            plan::JOB_LIMIT_DIE_ON_UNHANDLED_EXCEPTION
                == J::JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION
        );
        assert!(plan::JOB_LIMIT_KILL_ON_JOB_CLOSE == J::JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE);
        let ui = J::JOB_OBJECT_UILIMIT_HANDLES
            | J::JOB_OBJECT_UILIMIT_READCLIPBOARD
            | J::JOB_OBJECT_UILIMIT_WRITECLIPBOARD
            | J::JOB_OBJECT_UILIMIT_SYSTEMPARAMETERS
            | J::JOB_OBJECT_UILIMIT_DISPLAYSETTINGS
            | J::JOB_OBJECT_UILIMIT_GLOBALATOMS
            | J::JOB_OBJECT_UILIMIT_DESKTOP
            | J::JOB_OBJECT_UILIMIT_EXITWINDOWS;
        // 0x200 (input injection) is newer than these bindings.
        assert!(plan::UI_RESTRICTIONS == ui | 0x200);
    };

    type PfnCreate = unsafe extern "system" fn(*const c_void, u32, u32, *mut HANDLE) -> i32;
    type PfnQuerySupport = unsafe extern "system" fn(*mut u64) -> i32;
    type PfnVersion = unsafe extern "system" fn(u32, *mut u8, *mut u32) -> i32;
    type PfnClose = unsafe extern "system" fn(HANDLE);
    type RawProc = unsafe extern "system" fn() -> isize;

    fn wide(s: &str) -> Vec<u16> {
        s.encode_utf16().chain(std::iter::once(0)).collect()
    }

    fn last_error() -> u32 {
        // SAFETY: reads the calling thread's last-error value; no preconditions.
        unsafe { GetLastError() }
    }

    const CURRENT_VERSION: &str = "SOFTWARE\\Microsoft\\Windows NT\\CurrentVersion";

    /// Where `ProductType` is (`WinNT`, `ServerNT`, `LanmanNT`).
    const PRODUCT_OPTIONS: &str = "SYSTEM\\CurrentControlSet\\Control\\ProductOptions";

    fn reg_string(value: &str) -> Option<String> {
        reg_string_in(CURRENT_VERSION, value)
    }

    fn reg_string_in(key: &str, value: &str) -> Option<String> {
        let (key, name) = (wide(key), wide(value));
        let mut buf = [0u16; 128];
        let mut bytes = u32::try_from(std::mem::size_of_val(&buf)).ok()?;
        // SAFETY: key and name are NUL-terminated and outlive the call; buf
        // is writable for `bytes` bytes, and RegGetValueW writes at most that
        // many (it NUL-terminates REG_SZ with RRF_RT_REG_SZ).
        let rc = unsafe {
            RegGetValueW(
                HKEY_LOCAL_MACHINE,
                key.as_ptr(),
                name.as_ptr(),
                RRF_RT_REG_SZ,
                std::ptr::null_mut(),
                buf.as_mut_ptr().cast(),
                &mut bytes,
            )
        };
        if rc != ERROR_SUCCESS {
            return None;
        }
        let units = (bytes as usize / 2).saturating_sub(1).min(buf.len());
        String::from_utf16(&buf[..units]).ok()
    }

    fn reg_dword(value: &str) -> Option<u32> {
        let (key, name) = (wide(CURRENT_VERSION), wide(value));
        let mut v = 0u32;
        let mut bytes = 4u32;
        // SAFETY: as in reg_string; `v` is writable for 4 bytes.
        let rc = unsafe {
            RegGetValueW(
                HKEY_LOCAL_MACHINE,
                key.as_ptr(),
                name.as_ptr(),
                RRF_RT_REG_DWORD,
                std::ptr::null_mut(),
                (&mut v as *mut u32).cast(),
                &mut bytes,
            )
        };
        (rc == ERROR_SUCCESS).then_some(v)
    }

    /// Loads `dll` from System32 only (LOAD_LIBRARY_SEARCH_SYSTEM32), so no
    /// planted copy elsewhere is loaded; it stays loaded for the process's
    /// life (never freed). None when it is not there.
    fn system32(dll: &str) -> Option<HMODULE> {
        let dll = wide(dll);
        // SAFETY: `dll` is NUL-terminated and outlives the call.
        let module = unsafe {
            LoadLibraryExW(
                dll.as_ptr(),
                std::ptr::null_mut(),
                LOAD_LIBRARY_SEARCH_SYSTEM32,
            )
        };
        (!module.is_null()).then_some(module)
    }

    fn resolve(module: HMODULE, name: &std::ffi::CStr) -> Option<RawProc> {
        // SAFETY: `module` is a loaded module handle that is never freed;
        // `name` is NUL-terminated.
        unsafe { GetProcAddress(module, name.as_ptr().cast()) }
    }

    /// Probes PSEC the way MXC does; see the module documentation.
    pub fn probe() -> Result<PsecProbe, NativeError> {
        let edition = Edition::from_registry(
            reg_string("InstallationType").as_deref(),
            reg_string_in(PRODUCT_OPTIONS, "ProductType").as_deref(),
        );
        let build = reg_string("CurrentBuildNumber")
            .and_then(|b| WindowsBuild::from_registry(&b, reg_dword("UBR")));
        let mut p = PsecProbe {
            edition,
            build,
            api_set_implemented: false,
            exports: Exports::default(),
            version: None,
            support: None,
            create_close: CreateClose::NotRun,
        };
        let api_set = c"api-win-appmodel-processmodel~securityenvironment";
        debug_assert_eq!(api_set.to_str(), Ok(probe::API_SET));
        // SAFETY: `api_set` is a NUL-terminated ANSI string.
        p.api_set_implemented = unsafe { IsApiSetImplemented(api_set.as_ptr().cast()) } != 0;
        if !p.api_set_implemented {
            return Ok(p);
        }
        let Some(module) = system32(probe::DLL) else {
            return Ok(p);
        };
        let create = resolve(module, c"CreateProcessSecurityEnvironment");
        let query = resolve(module, c"QueryProcessSecurityEnvironmentSupport");
        let close = resolve(module, c"CloseProcessSecurityEnvironment");
        let version = resolve(module, c"IsProcessSecurityEnvironmentVersionSupported");
        p.exports = Exports {
            create: create.is_some(),
            query_support: query.is_some(),
            close: close.is_some(),
            version: version.is_some(),
        };
        let (Some(create), Some(query), Some(close)) = (create, query, close) else {
            return Ok(p);
        };
        let mut contract = Contract::V1_0;
        if let Some(version) = version {
            // SAFETY: the export has this signature (HRESULT(DWORD, BOOLEAN*, DWORD*)).
            let version: PfnVersion =
                unsafe { std::mem::transmute::<RawProc, PfnVersion>(version) };
            let (mut available, mut minor) = (0u8, 0u32);
            // SAFETY: both out-pointers are valid for the call.
            let hr = unsafe { version(1, &mut available, &mut minor) };
            p.version = Some(if hr < 0 {
                VersionAnswer::Failed { hresult: hr }
            } else if available == 0 {
                VersionAnswer::Unavailable
            } else {
                let minor = u16::try_from(minor).unwrap_or(u16::MAX);
                contract = Contract { major: 1, minor };
                VersionAnswer::Available { minor }
            });
            if !matches!(p.version, Some(VersionAnswer::Available { .. })) {
                return Ok(p);
            }
        }
        // SAFETY: the export has this signature (HRESULT(UINT64*)).
        let query: PfnQuerySupport =
            unsafe { std::mem::transmute::<RawProc, PfnQuerySupport>(query) };
        let mut bits = 0u64;
        // SAFETY: `bits` is a valid out-pointer.
        let hr = unsafe { query(&mut bits) };
        p.support = Some(if hr < 0 {
            SupportAnswer::Failed { hresult: hr }
        } else {
            SupportAnswer::Flags { bits }
        });
        if hr < 0 {
            return Ok(p);
        }
        // SAFETY: the exports have these signatures
        // (HRESULT(LPCVOID, DWORD, FLAGS, HANDLE*) and void(HANDLE)).
        let (create, close): (PfnCreate, PfnClose) = unsafe {
            (
                std::mem::transmute::<RawProc, PfnCreate>(create),
                std::mem::transmute::<RawProc, PfnClose>(close),
            )
        };
        let spec = crate::psec_wire::minimal_spec(Contract::V1_0.min(contract));
        // A minimal spec is a few dozen bytes (24): its length fits a DWORD.
        #[allow(clippy::cast_possible_truncation)]
        let spec_len = spec.len() as u32;
        let mut env: HANDLE = std::ptr::null_mut();
        // SAFETY: `spec` is a live buffer of the given length; `env` is a
        // valid out-pointer; flags 0 asks for no special behaviour.
        let hr = unsafe { create(spec.as_ptr().cast(), spec_len, 0, &mut env) };
        p.create_close = if hr < 0 || env.is_null() {
            CreateClose::Failed { hresult: hr }
        } else {
            // SAFETY: `env` came from a successful create and is closed once.
            unsafe { close(env) };
            CreateClose::Passed
        };
        Ok(p)
    }

    use windows_sys::Win32::Foundation::LocalFree;
    use windows_sys::Win32::Security::Authorization::{
        ConvertSidToStringSidW, ConvertStringSecurityDescriptorToSecurityDescriptorW,
        GetNamedSecurityInfoW, SetNamedSecurityInfoW, SE_FILE_OBJECT,
    };
    use windows_sys::Win32::Security::{
        GetAce, GetSecurityDescriptorDacl, GetTokenInformation, TokenUser, ACCESS_ALLOWED_ACE,
        ACE_HEADER, ACL, DACL_SECURITY_INFORMATION, PROTECTED_DACL_SECURITY_INFORMATION,
        PSECURITY_DESCRIPTOR, PSID, TOKEN_QUERY, TOKEN_USER,
    };
    use windows_sys::Win32::System::Threading::{GetCurrentProcess, OpenProcessToken};

    /// `S-1-…` of a SID Windows gave us.
    fn sid_string(sid: PSID) -> Result<String, NativeError> {
        let mut text: *mut u16 = std::ptr::null_mut();
        // SAFETY: `sid` is a valid SID; `text` receives a LocalAlloc'd string.
        if unsafe { ConvertSidToStringSidW(sid, &mut text) } == 0 || text.is_null() {
            return Err(NativeError::Win32 {
                call: "ConvertSidToStringSidW",
                code: last_error(),
            });
        }
        let mut len = 0;
        // SAFETY: `text` is NUL-terminated; we read up to the NUL.
        while unsafe { *text.add(len) } != 0 {
            len += 1;
        }
        // SAFETY: `len` units before the NUL are initialised.
        let s = String::from_utf16_lossy(unsafe { std::slice::from_raw_parts(text, len) });
        // SAFETY: allocated by the call above, freed once.
        unsafe { LocalFree(text.cast()) };
        Ok(s)
    }

    /// This process's user SID (`S-1-5-21-…`).
    pub fn current_user_sid() -> Result<String, NativeError> {
        let mut token: HANDLE = std::ptr::null_mut();
        // SAFETY: the pseudo-handle of this process; `token` is an out-pointer.
        if unsafe { OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &mut token) } == 0 {
            return Err(NativeError::Win32 {
                call: "OpenProcessToken",
                code: last_error(),
            });
        }
        // TOKEN_USER and its SID: well under 256 bytes; u64s keep it aligned.
        let mut buf = [0u64; 64];
        let mut len = 0u32;
        // SAFETY: `buf` is writable for its size in bytes; the token is ours.
        let ok = unsafe {
            GetTokenInformation(
                token,
                TokenUser,
                buf.as_mut_ptr().cast(),
                u32::try_from(std::mem::size_of_val(&buf)).unwrap_or(0),
                &mut len,
            )
        };
        let code = last_error();
        // SAFETY: ours, closed once.
        unsafe { CloseHandle(token) };
        if ok == 0 {
            return Err(NativeError::Win32 {
                call: "GetTokenInformation(TokenUser)",
                code,
            });
        }
        // SAFETY: the call filled `buf` with a TOKEN_USER, suitably aligned.
        let user = unsafe { &*buf.as_ptr().cast::<TOKEN_USER>() };
        sid_string(user.User.Sid)
    }

    /// The access list of `path`: its entries, or None for a NULL DACL.
    pub fn access_list(
        path: &std::path::Path,
    ) -> Result<Option<Vec<crate::acl::Ace>>, NativeError> {
        let name = wide(&path.to_string_lossy());
        let mut dacl: *mut ACL = std::ptr::null_mut();
        let mut sd: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
        // SAFETY: `name` is NUL-terminated; the out-pointers are valid; the
        // descriptor is LocalAlloc'd and freed below.
        let rc = unsafe {
            GetNamedSecurityInfoW(
                name.as_ptr(),
                SE_FILE_OBJECT,
                DACL_SECURITY_INFORMATION,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &mut dacl,
                std::ptr::null_mut(),
                &mut sd,
            )
        };
        if rc != ERROR_SUCCESS {
            return Err(NativeError::Win32 {
                call: "GetNamedSecurityInfoW",
                code: rc,
            });
        }
        let result = if dacl.is_null() {
            Ok(None)
        } else {
            // SAFETY: a valid ACL inside the descriptor, which lives until freed.
            let count = unsafe { (*dacl).AceCount };
            let mut aces = Vec::with_capacity(usize::from(count));
            let mut failed = None;
            for i in 0..u32::from(count) {
                let mut ace: *mut c_void = std::ptr::null_mut();
                // SAFETY: `i` is below the ACL's count; `ace` is an out-pointer.
                if unsafe { GetAce(dacl, i, &mut ace) } == 0 {
                    failed = Some(NativeError::Win32 {
                        call: "GetAce",
                        code: last_error(),
                    });
                    break;
                }
                // SAFETY: every ACE starts with an ACE_HEADER.
                let h = unsafe { *ace.cast::<ACE_HEADER>() };
                // ACCESS_ALLOWED_ACE_TYPE 0, ACCESS_DENIED_ACE_TYPE 1: the
                // same layout (header, mask, SID). Others (object, callback,
                // audit) are read as their type says: not an allow of this.
                if h.AceType > 1 {
                    continue;
                }
                // SAFETY: types 0 and 1 are laid out as ACCESS_ALLOWED_ACE.
                let a = unsafe { &*ace.cast::<ACCESS_ALLOWED_ACE>() };
                let sid: PSID = (&a.SidStart as *const u32).cast_mut().cast();
                match sid_string(sid) {
                    Ok(sid) => aces.push(crate::acl::Ace {
                        sid,
                        allow: h.AceType == 0,
                        mask: a.Mask,
                        // INHERIT_ONLY_ACE
                        inherit_only: h.AceFlags & 0x08 != 0,
                    }),
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            match failed {
                Some(e) => Err(e),
                None => Ok(Some(aces)),
            }
        };
        // SAFETY: allocated by GetNamedSecurityInfoW, freed once.
        unsafe { LocalFree(sd.cast()) };
        result
    }

    /// Replaces the access list of `path` with the DACL of `sddl`,
    /// protected from inheritance.
    pub fn set_access_list(path: &std::path::Path, sddl: &str) -> Result<(), NativeError> {
        let text = wide(sddl);
        let mut sd: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
        // SAFETY: `text` is NUL-terminated; `sd` receives a LocalAlloc'd
        // descriptor, freed below.
        if unsafe {
            ConvertStringSecurityDescriptorToSecurityDescriptorW(
                text.as_ptr(),
                1,
                &mut sd,
                std::ptr::null_mut(),
            )
        } == 0
        {
            return Err(NativeError::Win32 {
                call: "ConvertStringSecurityDescriptorToSecurityDescriptorW",
                code: last_error(),
            });
        }
        let (mut present, mut defaulted) = (0, 0);
        let mut dacl: *mut ACL = std::ptr::null_mut();
        // SAFETY: `sd` is the valid descriptor made above.
        let ok = unsafe { GetSecurityDescriptorDacl(sd, &mut present, &mut dacl, &mut defaulted) };
        let result = if ok == 0 || present == 0 || dacl.is_null() {
            Err(NativeError::Win32 {
                call: "GetSecurityDescriptorDacl",
                code: last_error(),
            })
        } else {
            let name = wide(&path.to_string_lossy());
            // SAFETY: `name` is NUL-terminated; `dacl` lives inside `sd`.
            let rc = unsafe {
                SetNamedSecurityInfoW(
                    name.as_ptr(),
                    SE_FILE_OBJECT,
                    DACL_SECURITY_INFORMATION | PROTECTED_DACL_SECURITY_INFORMATION,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    dacl,
                    std::ptr::null(),
                )
            };
            if rc == ERROR_SUCCESS {
                Ok(())
            } else {
                Err(NativeError::Win32 {
                    call: "SetNamedSecurityInfoW",
                    code: rc,
                })
            }
        };
        // SAFETY: allocated by the conversion above, freed once.
        unsafe { LocalFree(sd.cast()) };
        result
    }

    type PfnDeleteProfile = unsafe extern "system" fn(*const u16) -> i32;

    /// `HRESULT_FROM_WIN32(ERROR_NOT_FOUND)`: an HRESULT is these bits.
    #[allow(clippy::cast_possible_wrap)]
    const HR_NOT_FOUND: i32 = 0x8007_0490_u32 as i32;

    /// Removes the AppContainer profile `name` of this user
    /// (`DeleteAppContainerProfile`, from `userenv.dll` in System32 only,
    /// looked up at run time: a Windows without it still runs the node).
    pub fn delete_appcontainer_profile(name: &str) -> Result<super::ProfileRemoval, NativeError> {
        let Some(module) = system32("userenv.dll") else {
            return Ok(super::ProfileRemoval::Unsupported);
        };
        let Some(delete) = resolve(module, c"DeleteAppContainerProfile") else {
            return Ok(super::ProfileRemoval::Unsupported);
        };
        // SAFETY: the export has this signature (HRESULT(PCWSTR)).
        let delete: PfnDeleteProfile =
            unsafe { std::mem::transmute::<RawProc, PfnDeleteProfile>(delete) };
        let name = wide(name);
        // SAFETY: `name` is NUL-terminated and outlives the call.
        let hr = unsafe { delete(name.as_ptr()) };
        match hr {
            0 => Ok(super::ProfileRemoval::Removed),
            HR_NOT_FOUND => Ok(super::ProfileRemoval::NotFound),
            // The HRESULT's bits as Windows writes them.
            #[allow(clippy::cast_sign_loss)]
            _ => Err(NativeError::Win32 {
                call: "DeleteAppContainerProfile",
                code: hr as u32,
            }),
        }
    }

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
            info.BasicLimitInformation.PerJobUserTimeLimit =
                limits.job_user_time_100ns.unwrap_or(0);
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
}

#[cfg(test)]
mod tests {
    #[cfg(not(windows))]
    #[test]
    fn off_windows_the_probe_says_so() {
        assert_eq!(super::probe(), Err(super::NativeError::NotWindows));
        let limits = crate::plan::tests::minimal_plan().job;
        assert!(matches!(
            super::Job::create(&limits),
            Err(super::NativeError::NotWindows)
        ));
    }
}
