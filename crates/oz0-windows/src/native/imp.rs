//! The system calls behind `crate::native` (Windows only), by what they
//! do: `probe` (the registry and `processmodel.dll`'s exports), `acl`
//! (this user's SID, access lists, AppContainer profiles), `job` (job
//! objects), `path` (what an open folder resolves to), `psec` (the PSEC launcher), `spawn` (a process created with
//! exactly its streams), `conpty` (a run's own pseudo console) and `run`
//! (one wait on a run and its cancel, tier 0's runner). What they share is here: UTF-16 strings,
//! the last error, System32-only loading and our constants checked
//! against the system's.

use std::ffi::c_void;

mod acl;
pub mod conpty;
mod firewall;
mod job;
mod path;
mod probe;
pub mod psec;
pub mod run;
pub mod spawn;

pub use acl::{
    access_list, appcontainer_sid, current_user_sid, delete_appcontainer_profile, set_access_list,
};
pub use firewall::firewall_profiles;
pub use job::Job;
pub use path::final_path;
pub use probe::probe;

use windows_sys::Win32::Foundation::{GetLastError, HANDLE, HMODULE};
use windows_sys::Win32::System::LibraryLoader::{
    GetProcAddress, LoadLibraryExW, LOAD_LIBRARY_SEARCH_SYSTEM32,
};

use crate::plan;

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
