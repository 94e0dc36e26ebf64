//! What a tier-1 run did and what held it ([`RunOutcome`]), and why a run
//! never ran ([`SandboxError`]).

use std::io;
use std::path::PathBuf;

use oz0_core::{Ended, LimitHit, Outcome};
use serde::Serialize;
use serde_json::json;

use crate::landlock::LandlockReport;
use crate::{bwrap, host, plan};

/// What a run did and what held it.
#[derive(Debug, Clone, Serialize)]
pub struct RunOutcome {
    /// The run's id.
    pub run_id: String,
    /// How it ended.
    pub ended: Ended,
    /// The command's status (128+N for signal N); 124 on timeout.
    pub exit_code: i32,
    /// Wall time, milliseconds.
    pub duration_ms: u64,
    /// What Landlock enforced.
    pub landlock: Option<LandlockReport>,
    /// The namespaces the run had.
    pub namespaces: Vec<&'static str>,
    /// The seccomp profile and how many rules it has.
    pub seccomp: SeccompSummary,
    /// Protected paths and how each was held.
    pub protected: Vec<plan::Protected>,
    /// The job: limits enforced, counters, the limit hit.
    pub job: Option<JobReport>,
    /// The size of the run's `/tmp` and of its `/dev`.
    pub tmp: plan::TmpfsSize,
    /// The look at git after the run.
    pub git: Option<crate::gitlook::GitLook>,
    /// Egress: the proxy's run socket and the bridge.
    pub egress: Option<EgressReport>,
}

/// The run's job, for the status.
#[derive(Debug, Clone, Serialize)]
pub struct JobReport {
    /// `cgroup_v2` or `cgroup_v1`.
    pub mode: &'static str,
    /// What the job said at the end.
    #[serde(flatten)]
    pub outcome: oz0_limits::JobOutcome,
    /// How CPU time and wall time were supervised.
    pub supervisor: String,
}

/// The run's egress, for the status.
#[derive(Debug, Clone, Serialize)]
pub struct EgressReport {
    /// The allowlist, canonical.
    pub allow: Vec<String>,
    /// Forwarded node-local ports.
    pub forward: Vec<u16>,
    /// The bridge's port inside the run.
    pub bridge_port: Option<u16>,
}

/// Seccomp, summarised for the status.
#[derive(Debug, Clone, Serialize)]
pub struct SeccompSummary {
    /// Profile name.
    pub profile: crate::seccomp::Profile,
    /// New unix sockets refused to the command (`--allow-unix-sockets` lifts it).
    pub unix_sockets_refused: bool,
    /// Refused system calls.
    pub refused: Vec<&'static str>,
}

/// The sandbox refused or failed: the command never ran.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The host could not be examined.
    #[error(transparent)]
    Host(#[from] host::HostError),
    /// No plan.
    #[error(transparent)]
    Plan(#[from] plan::PlanError),
    /// bubblewrap missing or unusable.
    #[error(transparent)]
    Bwrap(#[from] bwrap::BwrapError),
    /// The run's limits need a job, and no cgroup this user can drive was
    /// found.
    #[error("--memory/--processes/--cpu-seconds need a job (cgroup) this user can make: {reason} — {fix}")]
    NoJob {
        /// What the probe found.
        reason: String,
        /// The fix.
        fix: String,
    },
    /// The job could not be made (fail closed).
    #[error("the run's job could not be made, so nothing runs: {0}")]
    Job(#[from] oz0_limits::JobError),
    /// The job could not be joined.
    #[error("the run's job could not be joined, so nothing runs: {0}")]
    JoinJob(#[source] io::Error),
    /// The egress proxy could not take the run.
    #[error("the egress proxy could not take the run: {0}")]
    Egress(#[from] oz0_egress::EgressError),
    /// A limit that this node cannot enforce was asked for.
    #[error("{0} was asked for, and this node cannot enforce it: the run is refused rather than run without it")]
    Unenforceable(&'static str),
    /// The node's run records would lie where the run may write.
    #[error("the node's folder for its run records, {}, lies in {folder}, which the run may write: set TMPDIR to a folder outside the run's folders", base.display())]
    RecordsInWritable {
        /// The folder for run records.
        base: PathBuf,
        /// The writable folder it lies in.
        folder: String,
    },
    /// Preparing the run failed.
    #[error("preparing the run: {what}: {source}")]
    Prepare {
        /// What was being prepared.
        what: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A placeholder could not be made.
    #[error("preparing the run: {0}")]
    Placeholder(#[from] crate::hold::PlaceError),
    /// bubblewrap could not be executed.
    #[error("bubblewrap could not start the sandbox: cannot execute {}: {source}", bwrap.display())]
    Exec {
        /// The binary.
        bwrap: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The node could not watch or wait for the run.
    #[error("bubblewrap could not start the sandbox: {what}: {source}")]
    Supervise {
        /// What failed.
        what: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The run was cancelled before its sandbox was made.
    #[error("bubblewrap could not start the sandbox: cancelled before the sandbox started")]
    CancelledBeforeStart,
    /// bubblewrap failed before the stage ran (its own words, explained).
    #[error("bubblewrap could not start the sandbox: {0}")]
    Start(String),
    /// The stage could not complete the sandbox (its words, from inside).
    #[error("the sandbox could not be completed: {0}")]
    Stage(String),
}

/// Turns an OS error while preparing `what` into a [`SandboxError`].
pub(crate) fn prep<E: Into<io::Error>>(what: &'static str) -> impl FnOnce(E) -> SandboxError {
    move |e| SandboxError::Prepare {
        what,
        source: e.into(),
    }
}

impl RunOutcome {
    /// The limit the run met, as every platform says it.
    pub fn limit_hit(&self) -> Option<LimitHit> {
        self.job.as_ref().and_then(|j| j.outcome.limit_hit)
    }

    /// What was enforced, for the run's status document; `audit_log` is
    /// where its egress decisions went.
    pub fn enforced(&self, audit_log: Option<&std::path::Path>) -> serde_json::Value {
        json!({
            "mechanism": "bubblewrap",
            "namespaces": self.namespaces,
            "nested_user_namespaces": false,
            "capabilities": "none",
            "no_new_privs": true,
            "seccomp": self.seccomp,
            "landlock": self.landlock,
            "protected": self.protected,
            "limits": {
                "timeout": "supervisor: SIGKILL of the run's pid namespace (and its job)",
                "job": self.job,
                "tmp": self.tmp,
            },
            "egress": self.egress.as_ref().map(|e| {
                let mut v = json!(e);
                v["audit_log"] = json!(audit_log);
                v
            }),
        })
    }

    /// The outcome as the node core has it (see [`oz0_core::Sandbox`]).
    pub fn into_core(self, audit_log: Option<&std::path::Path>) -> Outcome {
        let mut report = serde_json::Map::new();
        let exit_code = git_report(self.git.as_ref(), self.exit_code, &mut report);
        report.insert("enforced".into(), self.enforced(audit_log));
        Outcome {
            limit_hit: self.limit_hit(),
            warnings: self
                .git
                .as_ref()
                .map(crate::gitlook::GitLook::warnings)
                .unwrap_or_default(),
            run_id: self.run_id,
            ended: self.ended,
            exit_code,
            duration_ms: self.duration_ms,
            report,
        }
    }
}

/// The look's part of a run's report (`git`, `changed_host_exec`), and the
/// run's exit status: the command's, or, when something host git would
/// run is still where git looks, [`oz0_core::exit::Exit::GitLeftInPlace`]
/// (the command's kept as `command_exit_code`).
pub(crate) fn git_report(
    git: Option<&crate::gitlook::GitLook>,
    exit_code: i32,
    report: &mut serde_json::Map<String, serde_json::Value>,
) -> i32 {
    report.insert("git".into(), json!(git));
    let Some(g) = git else {
        return exit_code;
    };
    report.insert(
        "changed_host_exec".into(),
        json!(g
            .changed_host_exec
            .iter()
            .map(|p| crate::gitlook::shown(p))
            .collect::<Vec<_>>()),
    );
    if !g.failed() {
        return exit_code;
    }
    // Something host git would run is still where git looks: the run
    // fails, whatever its command said.
    report.insert("command_exit_code".into(), json!(exit_code));
    oz0_core::exit::Exit::GitLeftInPlace.code()
}
