//! How a call ends: its result or reason, and where the time went.

use std::time::Instant;

use oz0_core::exit::Exit;
use oz0_edge::term::escape;
use oz0_plugin::mcp::{CallResult, McpError};
use serde_json::{json, Value};

use super::MAX_REASON_BYTES;

/// How a call ended.
#[derive(Debug, Clone)]
pub struct ToolEnd {
    /// `exited` (a result), `tool_error` (a result with `isError`),
    /// `tool_failed` (no result).
    pub outcome: &'static str,
    /// 0 for a result, 1 for a tool's error, 125 when there is no result.
    pub exit_code: i32,
    /// Why it failed.
    pub reason: Option<String>,
    /// The `tools/call` result, whole.
    pub result: Option<Value>,
    /// Where the time went, ms: `vm_answered_ms` (a VM: its guest agent
    /// answered), `initialize_ms` (the server answered `initialize`, from
    /// the start), `list_ms`, `call_ms`, and `backend`.
    pub phases: Value,
    /// The whole call, ms.
    pub duration_ms: u64,
    /// What the look after the server's run found in the work folder (its
    /// status document's `git`), for a server run in tier 1.
    #[cfg_attr(windows, allow(dead_code))]
    pub look: Option<Value>,
}

impl ToolEnd {
    /// A call that ended with a result the tool did not mark as an error.
    #[cfg_attr(target_os = "macos", allow(dead_code))]
    pub fn succeeded(&self) -> bool {
        self.outcome == "exited" && self.exit_code == 0
    }

    /// Shows the end as `plugin call` does — one JSON document with
    /// `json`, else the result's text on stdout and the reason on stderr —
    /// and returns the call's status: with `cancelled` (what cancelled it,
    /// and its status), that said and that status.
    #[cfg_attr(target_os = "macos", allow(dead_code))]
    pub fn show(&self, json: bool, cancelled: Option<(String, i32)>) -> i32 {
        if json {
            let doc = json!({
                "outcome": self.outcome,
                "exit_code": self.exit_code,
                "reason": self.reason,
                "result": self.result,
                "phases": self.phases,
                "duration_ms": self.duration_ms,
            });
            println!("{}", oz0_edge::term::json(&doc).expect("serialises"));
        } else if let Some(r) = &self.result {
            // The server's words: escaped where a terminal reads them (a
            // pipe or a file gets them as they are, for a program).
            let text = oz0_plugin::mcp::result_text(r);
            if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
                print!("{}", escape(text.as_bytes()));
            } else {
                print!("{text}");
            }
        }
        if let Some((what, code)) = cancelled {
            eprintln!("oz0-node: {what}");
            return code;
        }
        match (&self.result, &self.reason) {
            // The reason may carry the server's own words: escaped.
            (None, Some(why)) if !json => {
                eprintln!("oz0-node: the call failed: {}", escape(why.as_bytes()))
            }
            (Some(_), Some(why)) if !json => eprintln!("oz0-node: {}", escape(why.as_bytes())),
            _ => {}
        }
        if self.succeeded() {
            Exit::Ok.code()
        } else {
            self.exit_code
        }
    }
}

/// A reason, at most [`MAX_REASON_BYTES`] and a few more (said when cut).
pub(super) fn bounded(reason: String) -> String {
    if reason.len() <= MAX_REASON_BYTES {
        return reason;
    }
    let mut end = MAX_REASON_BYTES;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} … (reason cut)", &reason[..end])
}

/// What the server answered, or its error with the run's own failure
/// added.
pub(super) fn with_run_error<T>(
    r: Result<T, McpError>,
    run: Option<String>,
    what: &str,
) -> Result<T, String> {
    match (r, run) {
        (Ok(c), _) => Ok(c),
        (Err(e), None) => Err(e.to_string()),
        (Err(e), Some(run)) => Err(format!("{e}; {what}: {run}")),
    }
}

/// The end of a call.
pub(super) fn end_of(
    r: Result<CallResult, String>,
    started: Instant,
    backend: &str,
    vm_answered_ms: Option<u64>,
) -> ToolEnd {
    let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let too_large = |c: &CallResult| {
        serde_json::to_string(&c.result).map_or(true, |s| s.len() > oz0_plugin::mcp::MAX_LINE_BYTES)
    };
    match r {
        Ok(c) if too_large(&c) => end_of(
            Err(format!("the tool's result is over {} bytes of JSON: refused whole, not cut (the result limit)", oz0_plugin::mcp::MAX_LINE_BYTES)),
            started,
            backend,
            vm_answered_ms,
        ),
        Ok(c) => ToolEnd {
            outcome: if c.is_error { "tool_error" } else { "exited" },
            exit_code: i32::from(c.is_error),
            reason: c
                .is_error
                .then(|| "the tool answered with isError: true".to_string()),
            phases: json!({
                "backend": backend,
                "vm_answered_ms": vm_answered_ms,
                "initialize_ms": c.initialize_ms,
                "list_ms": c.list_ms,
                "call_ms": c.call_ms,
                "protocol": c.protocol,
            }),
            result: Some(c.result),
            duration_ms,
            look: None,
        },
        Err(e) => ToolEnd {
            outcome: "tool_failed",
            exit_code: Exit::Sandbox.code(),
            reason: Some(bounded(e)),
            result: None,
            phases: json!({"backend": backend, "vm_answered_ms": vm_answered_ms}),
            duration_ms,
            look: None,
        },
    }
}
