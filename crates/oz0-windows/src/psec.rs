//! Windows tier 1 as the node core's door: `Psec` runs one command in a
//! PSEC container (the preview's `sandbox run` where the probes found
//! PSEC).
//!
//! The spec carries Windows paths as `/X:/folder`; `crate::plan` translates
//! it (the Windows security boundary: what the container may touch is
//! entirely its request). The run then:
//!
//! 1. makes its TEMP (`%TEMP%\oz0-run-<id>`), removed after; denies
//!    itself every folder other live runs claim, and claims its own
//!    writable folders and TEMP, which no other run may then write
//!    (`crate::claims`);
//! 2. makes each protected entry that is missing as an empty placeholder
//!    (`.git`'s only where `.git` is a folder), removed after when still
//!    empty, and holds every writable folder, its `.git` and its protected
//!    folders open without delete sharing for the run's length, so that
//!    none can be renamed aside (`crate::hold`);
//! 3. starts the command through `crate::launch::start`: a job with the
//!    run's limits (kill-on-close), a PSEC environment from the whole
//!    request, the command created suspended inside it, placed in the job,
//!    resumed; any failure leaves nothing running;
//! 4. waits on its first process and its cancel together, bounded by
//!    `--timeout` (`crate::supervise`), then ends every process of the job.
//!
//! Its command gets the run's three standard streams (the node's own,
//! `NUL`, or a file or pipe) and inherits no other handle
//! (`crate::native::create_suspended`). What it refuses ([`refusal`],
//! tested on Linux): a VM's monitor, a self-test fault, and egress, which
//! this build does not start for a container yet. Type-checked for Windows in CI; it has not
//! run on a machine with PSEC.

use oz0_core::{Fault, Role};
use oz0_policy::RunSpec;

/// Why a PSEC run with egress is refused in this build.
pub const NO_EGRESS: &str = "egress (--allow/--forward) for a PSEC run is not in this build: the bridge inside a container and the relay in its AppContainer profile are not started yet; run the command without egress, or on a Linux or macOS node";

/// What a PSEC run refuses before anything is made: why, or None.
pub fn refusal(spec: &RunSpec, role: &Role, fault: Option<&Fault>) -> Option<String> {
    match role {
        Role::Command => {}
        Role::Monitor(_) => {
            return Some(format!(
                "a VM's monitor does not run in PSEC: no microVMs: {}",
                oz0_policy::facts::WINDOWS_NO_MICROVMS
            ))
        }
        _ => {
            return Some(format!(
                "{} does not run in PSEC: only Linux tier 1 gives a run an image's root",
                role.what()
            ))
        }
    }
    if let Some(f) = fault {
        return Some(format!("PSEC cannot inject {f:?}"));
    }
    if spec.egress.is_enabled() {
        return Some(NO_EGRESS.into());
    }
    None
}

#[cfg(windows)]
pub use imp::Psec;

/// Why PSEC cannot be set up for this node.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PsecError {
    /// This binary's path cannot be found.
    #[error("cannot name the node binary: {0}")]
    NodeBinary(std::io::Error),
}

impl From<PsecError> for String {
    fn from(e: PsecError) -> String {
        e.to_string()
    }
}

#[cfg(windows)]
mod imp {
    use std::fs;
    use std::os::windows::io::AsHandle;
    use std::path::{Path, PathBuf};
    use std::time::Instant;

    use oz0_core::{Cancel, Outcome, RunError, RunOptions};
    use oz0_policy::RunSpec;

    use crate::claims;
    use crate::hold::{hold, Held};
    use crate::launch::{self, Started, SysError};
    use crate::native::{wait_for, PsecLauncher, StdHandles};
    use crate::plan::{plan, WindowsHost};
    use crate::probe::PsecFacts;
    use crate::supervise::{supervise, Watch, Woke};
    use crate::tier0::{new_run_id, uncarry};
    use crate::winpath::WinPath;

    /// Tier 1 on Windows: a PSEC container, where the probes found PSEC.
    pub struct Psec {
        /// What the probes found.
        pub facts: PsecFacts,
        /// `%SystemRoot%`.
        pub system_root: String,
        /// The node binary (read-only to the run).
        pub node_binary: std::path::PathBuf,
    }

    impl Psec {
        /// PSEC with these facts, this machine's `SystemRoot` and this
        /// binary.
        pub fn new(facts: PsecFacts) -> Result<Psec, super::PsecError> {
            Ok(Psec {
                facts,
                system_root: std::env::var("SystemRoot").unwrap_or_else(|_| "C:\\Windows".into()),
                node_binary: std::env::current_exe().map_err(super::PsecError::NodeBinary)?,
            })
        }
    }

    fn win(flag: &str, p: &Path) -> Result<WinPath, String> {
        let s = p
            .to_str()
            .ok_or_else(|| format!("{flag} {} is not valid Unicode", p.display()))?;
        WinPath::parse(s).map_err(|e| format!("{flag}: {e}"))
    }

    /// A started PSEC run as its supervisor sees it.
    struct PsecRun {
        started: Started<PsecLauncher>,
        cancel: Option<Cancel>,
    }

    impl Watch for PsecRun {
        fn wait(&mut self, ms: Option<u32>) -> Result<Woke, SysError> {
            match wait_for(self.started.child.as_handle(), self.cancel.as_ref(), ms)? {
                Woke::Exited(_) => Ok(Woke::Exited(self.started.child.wait_ms(0)?.unwrap_or(1))),
                w => Ok(w),
            }
        }

        fn end_all(&mut self) {
            let _ = self.started.job.terminate();
        }

        fn active(&mut self) -> Option<u32> {
            self.started.job.active_processes().ok()
        }
    }

    impl oz0_core::Sandbox for Psec {
        fn tier(&self) -> u8 {
            1
        }

        fn run(&self, spec: &RunSpec, opts: RunOptions) -> Result<Outcome, RunError> {
            let RunOptions {
                io,
                cancel,
                role,
                fault,
            } = opts;
            if let Some(why) = super::refusal(spec, &role, fault.as_ref()) {
                return Err(why.into());
            }
            // The run's streams, the only handles its process inherits.
            let stdio = StdHandles::new(io)
                .map_err(|e| format!("cannot hand the run its standard streams: {e}"))?;
            let run_id = new_run_id();
            let mut made = Held::default();
            let temp = std::env::temp_dir().join(format!("oz0-run-{run_id}"));
            fs::create_dir(&temp)
                .map_err(|e| format!("cannot make the run's TEMP {}: {e}", temp.display()))?;
            made.temp = Some(temp.clone());
            // Every other live run's folders, denied to this one; then this
            // run's own claimed, which no other run may write meanwhile.
            let data_dir = uncarry(&spec.data_dir);
            let other_runs = claims::others(&data_dir)
                .iter()
                .filter_map(|f| WinPath::parse(f).ok())
                .collect();
            let mut mine: Vec<PathBuf> = std::iter::once(&spec.work)
                .chain(spec.write.iter())
                .map(uncarry)
                .collect();
            mine.push(temp.clone());
            let _claims = claims::claim(&data_dir, &run_id, &mine).map_err(|e| e.to_string())?;
            let host = WindowsHost {
                system_root: WinPath::parse(&self.system_root)
                    .map_err(|e| format!("SystemRoot: {e}"))?,
                node_binary: win("the node binary", &self.node_binary)?,
                run_temp: win("the run's TEMP", &temp)?,
                other_runs,
            };
            let plan = plan(spec, &host, &self.facts, None).map_err(|e| e.to_string())?;
            hold(&plan.protected, &plan.hold_open, &mut made)?;
            let mut launcher = PsecLauncher::load()
                .map_err(|e| e.to_string())?
                .with_stdio(stdio);
            let started = Instant::now();
            let run = launch::start(&mut launcher, &plan).map_err(|e| e.to_string())?;
            let mut run = PsecRun {
                started: run,
                cancel,
            };
            let timeout = plan.timeout_seconds.map(std::time::Duration::from_secs);
            let end = supervise(&mut run, timeout, started, &Instant::now).map_err(|e| {
                format!("cannot wait for the run: {e}; every process of its job was ended")
            })?;
            drop(run);
            drop(made);
            let warnings = if end.left > 0 {
                vec![format!(
                    "{} processes of the run were still in its job after it was ended",
                    end.left
                )]
            } else {
                vec![]
            };
            Ok(Outcome {
                run_id,
                ended: end.ended,
                exit_code: end.exit_code,
                duration_ms: started.elapsed().as_millis().try_into().unwrap_or(u64::MAX),
                limit_hit: None,
                warnings,
                report: serde_json::Map::new(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oz0_policy::RunRequest;

    fn spec(allow: &[&str]) -> RunSpec {
        RunSpec::new(RunRequest {
            work: "/C:/work".into(),
            data_dir: "/C:/data".into(),
            allow: allow.iter().map(|s| s.to_string()).collect(),
            command: vec!["C:\\Windows\\System32\\cmd.exe".into()],
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    fn a_command_without_egress_runs() {
        assert_eq!(refusal(&spec(&[]), &Role::Command, None), None);
    }

    #[test]
    fn egress_monitors_and_faults_are_refused_with_the_reason() {
        let e = refusal(&spec(&["example.com"]), &Role::Command, None).unwrap();
        assert_eq!(e, NO_EGRESS);
        let e = refusal(&spec(&[]), &Role::Monitor(Default::default()), None).unwrap();
        assert!(e.contains("monitor"), "{e}");
        let e = refusal(&spec(&[]), &Role::Command, Some(&Fault::ShareNet)).unwrap();
        assert!(e.contains("ShareNet"), "{e}");
    }
}
