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
//!    none can be renamed aside (`crate::hold`); then looks at what is in
//!    its writable folders, taking a fingerprint of each finding
//!    (`crate::look::before`);
//! 3. starts the command through `crate::launch::start`: a job with the
//!    run's limits (kill-on-close), a PSEC environment from the whole
//!    request, the command created suspended inside it, placed in the job,
//!    resumed; any failure leaves nothing running;
//! 4. waits on its first process and its cancel together, bounded by
//!    `--timeout` (`crate::supervise`), then ends every process of the job;
//! 5. looks at what the run left in its writable folders that git, an
//!    agent or an editor would run or follow (`crate::look`), and reports
//!    among the run's warnings and in its report (`look`) what is new or
//!    changed since step 2 (the rest counted as `unchanged`): reported,
//!    never moved.
//!
//! Its command gets the run's three standard streams (the node's own,
//! `NUL`, or a file or pipe) and inherits no other handle
//! (`crate::native::create_suspended`). Started from a terminal, it gets a
//! pseudo console of its own instead ([`on_its_own_console`]); no run is
//! given the node's console. What it refuses ([`refusal`],
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

/// The look after a run (`crate::look`) in the run's report: what it
/// examined, whether whole, and each finding.
pub fn look_report(l: &crate::look::Look) -> serde_json::Value {
    use crate::look::What;
    serde_json::json!({
        "entries": l.entries,
        "complete": l.complete,
        "moved": false,
        "unchanged": l.unchanged,
        "findings": l.findings.iter().map(|f| serde_json::json!({
            "path": f.path.to_string_lossy(),
            "what": match &f.what {
                What::Link => "link",
                What::Repository => "repository",
                What::AgentSettings => "agent_settings",
                What::TodoRunsCommands => "todo_runs_commands",
                What::Unexamined(_) => "unexamined",
            },
            "why": match &f.what { What::Unexamined(w) => Some(w.as_str()), _ => None },
        })).collect::<Vec<_>>(),
    })
}

/// Whether a run gets a pseudo console of its own, carried to and from the
/// node's terminal: when its three streams are the node's own and the
/// node's input and output are a terminal (an interactive run). Otherwise
/// its streams are handles, and one that is the node's console reaches it
/// as a pipe the node carries: no run is given the node's console, which
/// it could read or type into.
pub fn on_its_own_console(io: &oz0_core::RunIo, node_on_a_terminal: bool) -> bool {
    use oz0_core::Stdio::Inherit;
    node_on_a_terminal
        && matches!(
            (&io.stdin, &io.stdout, &io.stderr),
            (Inherit, Inherit, Inherit)
        )
}

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
    use crate::look;
    use crate::native::{on_a_terminal, wait_for, PsecLauncher, PseudoConsole, StdHandles};
    use crate::plan::{plan, WindowsHost};
    use crate::probe::PsecFacts;
    use crate::supervise::{supervise, Watch, Woke};
    use crate::tier0::{new_run_id, uncarry};
    use crate::winpath::WinPath;

    /// The longest wait, after a run, for its output to reach the node's
    /// console.
    const CARRY_MAX: std::time::Duration = std::time::Duration::from_secs(2);

    /// Findings of the look told one per line, at most.
    const LOOK_LINES: usize = 20;

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
            // The run's streams, the only handles its process inherits; or,
            // started from a terminal, a pseudo console of its own.
            let (console, mut stdio) = if super::on_its_own_console(&io, on_a_terminal()) {
                let c = PseudoConsole::for_this_terminal()
                    .map_err(|e| format!("cannot give the run a console of its own: {e}"))?;
                (Some(c), None)
            } else {
                let s = StdHandles::new(io)
                    .map_err(|e| format!("cannot hand the run its standard streams: {e}"))?;
                (None, Some(s))
            };
            let carriers = stdio.as_mut().map(StdHandles::take_carriers);
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
            // The run's writable folders: claimed for its length, and
            // looked at after it.
            let writable: Vec<PathBuf> = std::iter::once(&spec.work)
                .chain(spec.write.iter())
                .map(uncarry)
                .collect();
            let mut mine = writable.clone();
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
            // What is there before the run, so that the look after it
            // tells only what the run made or changed.
            let before = look::before(&writable, look::Bounds::default());
            let launcher = PsecLauncher::load().map_err(|e| e.to_string())?;
            let mut launcher = match (&console, stdio) {
                (Some(c), _) => launcher.with_console(c),
                (None, Some(s)) => launcher.with_stdio(s),
                (None, None) => launcher,
            };
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
            // What the run wrote reaches the terminal before the run's end
            // is told.
            drop(console);
            if let Some(c) = carriers {
                c.finish(CARRY_MAX);
            }
            drop(made);
            let mut report = serde_json::Map::new();
            let warnings = if end.left > 0 {
                vec![
                    format!(
                        "{} processes of the run were still in its job after it was ended",
                        end.left
                    ),
                    "the look after the run did not run: the run's processes were not all gone; \
                     look at its writable folders before running git there"
                        .into(),
                ]
            } else {
                // Its writable folders are still its claims.
                let l = look::look(&writable, look::Bounds::default())
                    .since(&before, look::Bounds::default());
                report.insert("look".into(), super::look_report(&l));
                l.lines(LOOK_LINES)
            };
            Ok(Outcome {
                run_id,
                ended: end.ended,
                exit_code: end.exit_code,
                duration_ms: started.elapsed().as_millis().try_into().unwrap_or(u64::MAX),
                limit_hit: None,
                warnings,
                report,
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
    fn only_a_run_of_the_nodes_own_terminal_gets_a_console_of_its_own() {
        use oz0_core::{RunIo, Stdio};
        assert!(on_its_own_console(&RunIo::inherit(), true));
        assert!(!on_its_own_console(&RunIo::inherit(), false));
        let piped_in = RunIo {
            stdin: Stdio::Null,
            ..RunIo::inherit()
        };
        assert!(!on_its_own_console(&piped_in, true));
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
