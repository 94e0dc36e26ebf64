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
//!
//! The Windows side lives in `native/imp/`, a file for each: `probe`, `acl`
//! (the user's SID, access lists, AppContainer profiles), `job`, `psec`
//! and `run`; the listener in `native/listener.rs`.
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
    access_list, appcontainer_sid, current_user_sid, delete_appcontainer_profile, final_path,
    firewall_profiles, probe, set_access_list, Job,
};

#[cfg(windows)]
pub use imp::psec::{PsecChild, PsecEnv, PsecLauncher};

#[cfg(windows)]
pub use imp::conpty::{on_a_terminal, pipe, PseudoConsole};

#[cfg(windows)]
pub use imp::spawn::{create_suspended, Spawn, StdHandles, Suspended};

#[cfg(windows)]
pub use imp::run::{cancel_on_ctrl_c, event_cancel, wait_for, CancelEvent, JobRun, JobRunner};

#[cfg(windows)]
mod imp;

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
