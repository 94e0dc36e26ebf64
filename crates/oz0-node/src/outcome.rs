//! How a job's run ended, as its node tells the edge: the same mapping
//! from a run's end (`oz0_core::Outcome`) to a job's outcome, status and
//! reason for every platform's node.

use std::path::Path;

use oz0_core::exit::Exit;
use oz0_core::{Ended, Outcome};
use oz0_edge::client::Completion;

use crate::record::tail;

/// Version of `sandbox run`'s `--json-status` document.
#[cfg(any(target_os = "linux", windows))]
pub(crate) const STATUS_SCHEMA: u32 = 1;

/// The status document of a run that ran: how it ended, and the
/// platform's report of what held it.
#[cfg(any(target_os = "linux", windows))]
pub(crate) fn outcome_doc(o: &Outcome) -> serde_json::Value {
    let (outcome, reason) = o.describe();
    let mut doc = serde_json::json!({
        "schema": STATUS_SCHEMA,
        "run_id": o.run_id,
        "outcome": outcome,
        "exit_code": o.exit_code,
        "reason": reason,
        "duration_ms": o.duration_ms,
    });
    for (k, v) in &o.report {
        doc[k] = v.clone();
    }
    doc
}

#[cfg(any(target_os = "linux", windows))]
pub(crate) fn error_doc(e: &dyn std::fmt::Display) -> serde_json::Value {
    serde_json::json!({
        "schema": STATUS_SCHEMA,
        "outcome": "sandbox_error",
        "exit_code": Exit::Sandbox.code(),
        "reason": e.to_string(),
    })
}

/// How a job ended, on this node.
#[derive(Debug)]
pub(crate) struct JobEnd {
    pub(crate) outcome: &'static str,
    pub(crate) exit_code: i32,
    pub(crate) duration_ms: u64,
    pub(crate) reason: Option<String>,
    /// A tool call's result (`tools/call`'s answer).
    pub(crate) result: Option<serde_json::Value>,
    /// A tool call's phases (ms): only the Linux node runs tool calls.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) phases: Option<serde_json::Value>,
    /// What the look after the run found.
    pub(crate) look: Option<oz0_edge::wire::JobLook>,
}

impl JobEnd {
    pub(crate) fn refused(reason: String) -> JobEnd {
        JobEnd {
            outcome: "sandbox_error",
            exit_code: Exit::Sandbox.code(),
            duration_ms: 0,
            reason: Some(reason),
            result: None,
            phases: None,
            look: None,
        }
    }

    pub(crate) fn from_outcome(o: &Outcome) -> JobEnd {
        let mut end = JobEnd::from_ended(&o.ended, o.exit_code);
        end.duration_ms = o.duration_ms;
        end.look = o
            .report
            .get("git")
            .and_then(oz0_edge::wire::JobLook::from_status);
        if end.look.as_ref().is_some_and(|l| l.left_in_place > 0) && o.exit_code != 0 {
            end.reason.get_or_insert_with(|| {
                "the look after the run could not rename aside what host git would run; it is left in place".into()
            });
        }
        end
    }

    pub(crate) fn from_ended(ended: &Ended, exit_code: i32) -> JobEnd {
        let (outcome, reason) = match ended {
            Ended::Exited => ("exited", None),
            Ended::Timeout => ("timeout", Some("the job's timeout was reached".into())),
            Ended::CpuTime => (
                "cpu_time",
                Some("the job's cpu_seconds were used up".into()),
            ),
            Ended::Cancelled => ("cancelled", Some("the job was cancelled".into())),
            Ended::NotExecuted { reason } => ("not_executed", Some(reason.clone())),
        };
        JobEnd {
            outcome,
            exit_code,
            duration_ms: 0,
            reason,
            result: None,
            phases: None,
            look: None,
        }
    }

    pub(crate) fn succeeded(&self) -> bool {
        self.outcome == "exited" && self.exit_code == 0
    }

    #[cfg(any(target_os = "linux", target_os = "macos"))]
    pub(crate) fn from_tool(t: crate::tool::ToolEnd) -> JobEnd {
        JobEnd {
            outcome: t.outcome,
            exit_code: t.exit_code,
            duration_ms: t.duration_ms,
            reason: t.reason,
            result: t.result,
            phases: Some(t.phases),
            look: t
                .look
                .as_ref()
                .and_then(oz0_edge::wire::JobLook::from_status),
        }
    }
}

impl JobEnd {
    /// What the edge is told of this end: the outcome, and the last
    /// [`oz0_edge::MAX_TAIL_BYTES`] of each stream kept in the job's
    /// `record` folder.
    pub(crate) fn completion(&self, record: &Path) -> Completion {
        let (stdout_tail, stdout_bytes) = tail(&record.join("stdout"));
        let (stderr_tail, stderr_bytes) = tail(&record.join("stderr"));
        Completion {
            succeeded: self.succeeded(),
            exit_code: Some(self.exit_code),
            result: self.result.clone(),
            error: self.reason.clone(),
            stdout_tail,
            stderr_tail,
            stdout_bytes,
            stderr_bytes,
            look: self.look.clone(),
        }
    }
}
