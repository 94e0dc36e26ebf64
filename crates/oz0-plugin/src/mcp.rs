//! A bounded MCP client over a server's stdio: `initialize`, `tools/list`,
//! `tools/call`, nothing else.
//!
//! The server is hostile. Every line it writes is read with a size bound
//! ([`MAX_LINE_BYTES`]): a longer one ends the call with
//! [`McpError::TooLarge`], never a silently cut result. A line that is not
//! JSON-RPC 2.0 ends it with [`McpError::Garbage`]. Each phase has the
//! call's deadline; a server that never answers `initialize` ends it with
//! [`McpError::Timeout`]. Requests the server makes of the client are
//! answered "method not found" (`ping` gets its empty result);
//! notifications are read and dropped.

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The protocol version offered in `initialize`.
pub const PROTOCOL_VERSION: &str = "2025-06-18";
/// Largest line (one JSON-RPC message) read from a server, bytes: the bound
/// on a tool's result.
pub const MAX_LINE_BYTES: usize = 1024 * 1024;
/// Most `tools/list` pages read.
pub const MAX_LIST_PAGES: usize = 16;
/// How long a server may run on after its input ended (the end of a
/// call's input asks it to exit; past this it is stopped), on every
/// platform and wall.
pub const EOF_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// What a call was doing when it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Waiting for the answer to `initialize` (the server starting).
    Initialize,
    /// Listing the tools.
    List,
    /// The call itself.
    Call,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Phase::Initialize => "initialize",
            Phase::List => "tools/list",
            Phase::Call => "tools/call",
        })
    }
}

/// Why a call did not return a result.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// No answer in time.
    #[error("the server did not answer {phase} in time (the call's timeout)")]
    Timeout {
        /// Where.
        phase: Phase,
    },
    /// The server's output ended.
    #[error("the server's output ended during {phase} (it exited or closed its stdout)")]
    Closed {
        /// Where.
        phase: Phase,
    },
    /// Not JSON-RPC.
    #[error("the server wrote something that is not JSON-RPC 2.0 during {phase}: {start:?}")]
    Garbage {
        /// Where.
        phase: Phase,
        /// The line's start.
        start: String,
    },
    /// A message over the bound.
    #[error("the server's message during {phase} is over {MAX_LINE_BYTES} bytes: refused whole, not cut (the result limit)")]
    TooLarge {
        /// Where.
        phase: Phase,
    },
    /// The server answered with a JSON-RPC error.
    #[error("the server answered {phase} with error {code}: {message}")]
    Server {
        /// Where.
        phase: Phase,
        /// JSON-RPC code.
        code: i64,
        /// Its message (at most 500 characters).
        message: String,
    },
    /// The tool is not listed.
    #[error("the server does not list tool {name:?} (it lists: {listed})")]
    NoSuchTool {
        /// The name asked for.
        name: String,
        /// What it lists (at most 20 names).
        listed: String,
    },
    /// Writing to the server failed.
    #[error("cannot write to the server during {phase}: {source}")]
    Write {
        /// Where.
        phase: Phase,
        /// What the system said.
        source: std::io::Error,
    },
    /// The caller gave up (the job was cancelled).
    #[error("cancelled during {phase}")]
    Cancelled {
        /// Where.
        phase: Phase,
    },
}

/// A call's result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CallResult {
    /// The protocol version the server chose.
    pub protocol: String,
    /// The server's `serverInfo`.
    pub server: Value,
    /// The `tools/call` result, as the server sent it.
    pub result: Value,
    /// The result's `isError`.
    pub is_error: bool,
    /// Time until the server answered `initialize`, ms.
    pub initialize_ms: u64,
    /// Time `tools/list` took, ms.
    pub list_ms: u64,
    /// Time the call took, ms.
    pub call_ms: u64,
}

/// What a server answered to `initialize` and `tools/list`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Listed {
    /// The protocol version the server chose.
    pub protocol: String,
    /// The names of the tools it lists, in its order.
    pub tools: Vec<String>,
    /// Time until the server answered `initialize`, ms.
    pub initialize_ms: u64,
}

enum Line {
    Msg(Vec<u8>),
    TooLong,
    Eof,
}

fn read_lines(out: impl Read, tx: mpsc::SyncSender<Line>) {
    let mut r = BufReader::with_capacity(64 * 1024, out);
    loop {
        let mut line = Vec::new();
        let mut over = false;
        loop {
            let buf = match r.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => &[],
            };
            if buf.is_empty() {
                let _ = tx.send(if line.is_empty() && !over {
                    Line::Eof
                } else if over {
                    Line::TooLong
                } else {
                    Line::Msg(line)
                });
                if !over {
                    let _ = tx.send(Line::Eof);
                }
                return;
            }
            let (chunk, done) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (&buf[..i], Some(i + 1)),
                None => (buf, None),
            };
            if !over {
                if line.len() + chunk.len() > MAX_LINE_BYTES {
                    over = true;
                    line = Vec::new();
                } else {
                    line.extend_from_slice(chunk);
                }
            }
            let used = done.unwrap_or(buf.len());
            r.consume(used);
            if done.is_some() {
                break;
            }
        }
        let msg = if over { Line::TooLong } else { Line::Msg(line) };
        let stop = matches!(msg, Line::TooLong);
        if tx.send(msg).is_err() || stop {
            return;
        }
    }
}

/// A client session with one server.
pub struct Client<'a, W: Write> {
    input: W,
    lines: mpsc::Receiver<Line>,
    deadline: Instant,
    cancel: &'a AtomicBool,
    next_id: i64,
}

impl<'a, W: Write> Client<'a, W> {
    /// Starts reading `output` (the server's stdout) on a thread of its own;
    /// writes go to `input` (the server's stdin). Every wait ends at
    /// `deadline`, or when `cancel` is set.
    pub fn new(
        input: W,
        output: impl Read + Send + 'static,
        deadline: Instant,
        cancel: &'a AtomicBool,
    ) -> Self {
        let (tx, rx) = mpsc::sync_channel(16);
        std::thread::spawn(move || read_lines(output, tx));
        Client {
            input,
            lines: rx,
            deadline,
            cancel,
            next_id: 1,
        }
    }

    fn send(&mut self, phase: Phase, msg: &Value) -> Result<(), McpError> {
        let mut line = msg.to_string();
        line.push('\n');
        self.input
            .write_all(line.as_bytes())
            .and_then(|_| self.input.flush())
            .map_err(|source| McpError::Write { phase, source })
    }

    fn next_line(&mut self, phase: Phase) -> Result<Vec<u8>, McpError> {
        loop {
            if self.cancel.load(Ordering::SeqCst) {
                return Err(McpError::Cancelled { phase });
            }
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(McpError::Timeout { phase });
            }
            match self
                .lines
                .recv_timeout(left.min(Duration::from_millis(100)))
            {
                Ok(Line::Msg(l)) => return Ok(l),
                Ok(Line::TooLong) => return Err(McpError::TooLarge { phase }),
                Ok(Line::Eof) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(McpError::Closed { phase })
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
    }

    /// Sends a request and waits for its answer's `result`.
    fn request(&mut self, phase: Phase, method: &str, params: Value) -> Result<Value, McpError> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(
            phase,
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )?;
        loop {
            let line = self.next_line(phase)?;
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let garbage = || McpError::Garbage {
                phase,
                start: String::from_utf8_lossy(&line[..line.len().min(80)]).into_owned(),
            };
            let v: Value = serde_json::from_slice(&line).map_err(|_| garbage())?;
            if v.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
                return Err(garbage());
            }
            match (v.get("id"), v.get("method")) {
                // A request of the server's own: answer it, read on.
                (Some(rid), Some(m)) => {
                    let answer = if m.as_str() == Some("ping") {
                        json!({"jsonrpc": "2.0", "id": rid, "result": {}})
                    } else {
                        json!({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "the oz0 node's client offers no methods"}})
                    };
                    self.send(phase, &answer)?;
                }
                // A notification (logging, progress): dropped.
                (None, Some(_)) => {}
                (Some(rid), None) if rid.as_i64() == Some(id) => {
                    if let Some(e) = v.get("error") {
                        return Err(McpError::Server {
                            phase,
                            code: e.get("code").and_then(Value::as_i64).unwrap_or(0),
                            message: e
                                .get("message")
                                .and_then(Value::as_str)
                                .unwrap_or("")
                                .chars()
                                .take(500)
                                .collect(),
                        });
                    }
                    return v.get("result").cloned().ok_or_else(garbage);
                }
                // An answer to nothing this client asked.
                _ => return Err(garbage()),
            }
        }
    }

    /// `initialize` and `notifications/initialized`: the answer, and the
    /// time it took.
    fn initialize(&mut self) -> Result<(Value, u64), McpError> {
        let started = Instant::now();
        let init = self.request(
            Phase::Initialize,
            "initialize",
            json!({
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "oz0-node", "version": env!("CARGO_PKG_VERSION")},
            }),
        )?;
        let initialize_ms = ms(started.elapsed());
        self.send(
            Phase::Initialize,
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        )?;
        Ok((init, initialize_ms))
    }

    /// `tools/list`, page after page (at most [`MAX_LIST_PAGES`]) until
    /// `name` is listed (when given) or the pages end: every name listed,
    /// and whether `name` was.
    fn list_tools(&mut self, name: Option<&str>) -> Result<(Vec<String>, bool), McpError> {
        let mut listed = Vec::new();
        let mut cursor: Option<String> = None;
        let mut found = false;
        for _ in 0..MAX_LIST_PAGES {
            let p = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let page = self.request(Phase::List, "tools/list", p)?;
            for t in page
                .get("tools")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(n) = t.get("name").and_then(Value::as_str) {
                    found |= Some(n) == name;
                    listed.push(n.to_string());
                }
            }
            cursor = page
                .get("nextCursor")
                .and_then(Value::as_str)
                .map(String::from);
            if found || cursor.is_none() {
                break;
            }
        }
        Ok((listed, found))
    }

    /// `initialize`, `notifications/initialized` and `tools/list`, without a
    /// call: what a server that starts and speaks MCP answers (`plugin
    /// check` asks this of a server before it offers its tool).
    pub fn list(mut self) -> Result<Listed, McpError> {
        let (init, initialize_ms) = self.initialize()?;
        let (tools, _) = self.list_tools(None)?;
        Ok(Listed {
            protocol: protocol_of(&init),
            tools,
            initialize_ms,
        })
    }

    /// `initialize`, `notifications/initialized`, `tools/list` (the tool
    /// must be listed), then `tools/call` with `params` (`name`,
    /// `arguments`, `_meta`).
    pub fn call(mut self, params: Value) -> Result<CallResult, McpError> {
        let (init, initialize_ms) = self.initialize()?;
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let listing = Instant::now();
        let (listed, found) = self.list_tools(Some(&name))?;
        if !found {
            return Err(McpError::NoSuchTool {
                name,
                listed: shown(&listed),
            });
        }
        let list_ms = ms(listing.elapsed());
        let t = Instant::now();
        let result = self.request(Phase::Call, "tools/call", params)?;
        Ok(CallResult {
            protocol: protocol_of(&init),
            server: init.get("serverInfo").cloned().unwrap_or(Value::Null),
            is_error: result
                .get("isError")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            result,
            initialize_ms,
            list_ms,
            call_ms: ms(t.elapsed()),
        })
    }
}

/// The protocol version an `initialize` answer names, bounded.
fn protocol_of(init: &Value) -> String {
    init.get("protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .chars()
        .take(32)
        .collect()
}

/// Listed tool names for a message: at most 20, then how many more.
pub fn shown(listed: &[String]) -> String {
    if listed.is_empty() {
        return "nothing".into();
    }
    let mut shown: Vec<String> = listed.iter().take(20).cloned().collect();
    if listed.len() > 20 {
        shown.push(format!("and {} more", listed.len() - 20));
    }
    shown.join(", ")
}

/// A `tools/call` result's text content, as the tool wrote it (each part
/// on its own lines); a result without text content as JSON.
pub fn result_text(r: &Value) -> String {
    let texts: Vec<&str> = r["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["type"] == "text")
        .filter_map(|c| c["text"].as_str())
        .collect();
    if texts.is_empty() {
        return format!("{r}\n");
    }
    let mut s = String::new();
    for t in texts {
        s.push_str(t);
        if !t.ends_with('\n') {
            s.push('\n');
        }
    }
    s
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// A scripted server: its whole output, given up front.
    fn run(output: &str, params: Value) -> (Result<CallResult, McpError>, String) {
        let cancel = AtomicBool::new(false);
        let mut sent = Vec::new();
        let r = Client::new(
            &mut sent,
            Cursor::new(output.as_bytes().to_vec()),
            Instant::now() + Duration::from_secs(5),
            &cancel,
        )
        .call(params);
        (r, String::from_utf8(sent).unwrap())
    }

    const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","serverInfo":{"name":"s"},"capabilities":{}}}"#;
    const LIST: &str =
        r#"{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"add"},{"name":"echo"}]}}"#;

    #[test]
    fn initialize_list_call() {
        let out = format!(
            "{INIT}\n{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{{}}}}\n{LIST}\n{{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}}\n{{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":\"3\"}}]}}}}\n"
        );
        let (r, sent) = run(&out, json!({"name": "add", "arguments": {"a": 1, "b": 2}}));
        let r = r.unwrap();
        assert_eq!(r.result["content"][0]["text"], "3");
        assert!(!r.is_error);
        assert_eq!(r.protocol, "2025-06-18");
        let sent: Vec<Value> = sent
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let methods: Vec<&str> = sent.iter().filter_map(|m| m["method"].as_str()).collect();
        assert_eq!(
            methods,
            [
                "initialize",
                "notifications/initialized",
                "tools/list",
                "tools/call"
            ]
        );
        assert!(
            sent.iter()
                .any(|m| m["id"] == 7 && m["result"] == json!({})),
            "ping answered"
        );
        let call = sent.iter().find(|m| m["method"] == "tools/call").unwrap();
        assert_eq!(call["params"]["arguments"]["b"], 2);
    }

    #[test]
    fn result_text_is_the_tools_text() {
        let r = json!({"content": [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b\n"}]});
        assert_eq!(result_text(&r), "a\nb\n");
        assert_eq!(result_text(&json!({"x": 1})), "{\"x\":1}\n");
    }

    #[test]
    fn a_tool_the_server_does_not_list() {
        let (r, _) = run(&format!("{INIT}\n{LIST}\n"), json!({"name": "nope"}));
        let e = r.unwrap_err().to_string();
        assert!(
            e.contains("does not list tool \"nope\" (it lists: add, echo)"),
            "{e}"
        );
    }

    #[test]
    fn garbage_closed_and_too_large() {
        let (r, _) = run("Hello, I am not JSON\n", json!({"name": "add"}));
        assert!(
            matches!(
                r,
                Err(McpError::Garbage {
                    phase: Phase::Initialize,
                    ..
                })
            ),
            "{r:?}"
        );
        let (r, _) = run("{\"id\":1,\"result\":{}}\n", json!({"name": "add"}));
        assert!(
            matches!(r, Err(McpError::Garbage { .. })),
            "no jsonrpc: {r:?}"
        );
        let (r, _) = run("", json!({"name": "add"}));
        assert!(
            matches!(
                r,
                Err(McpError::Closed {
                    phase: Phase::Initialize
                })
            ),
            "{r:?}"
        );
        let big = format!(
            "{INIT}\n{LIST}\n{{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{{\"x\":\"{}\"}}}}\n",
            "a".repeat(MAX_LINE_BYTES)
        );
        let (r, _) = run(&big, json!({"name": "add"}));
        assert!(
            matches!(r, Err(McpError::TooLarge { phase: Phase::Call })),
            "{r:?}"
        );
        let (r, _) = run(
            &format!("{INIT}\n{LIST}\n{{\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{{\"code\":-32602,\"message\":\"bad args\"}}}}\n"),
            json!({"name": "add"}),
        );
        let e = r.unwrap_err().to_string();
        assert!(e.contains("tools/call with error -32602: bad args"), "{e}");
    }

    #[cfg(unix)]
    #[test]
    fn a_silent_server_times_out_and_a_cancel_ends_the_wait() {
        let (_keep, out) = std::os::unix::net::UnixStream::pair().unwrap();
        let cancel = AtomicBool::new(false);
        let t = Instant::now();
        let r = Client::new(
            Vec::new(),
            out.try_clone().unwrap(),
            Instant::now() + Duration::from_millis(300),
            &cancel,
        )
        .call(json!({"name": "x"}));
        assert!(
            matches!(
                r,
                Err(McpError::Timeout {
                    phase: Phase::Initialize
                })
            ),
            "{r:?}"
        );
        assert!(t.elapsed() < Duration::from_secs(5));
        cancel.store(true, Ordering::SeqCst);
        let r = Client::new(
            Vec::new(),
            out,
            Instant::now() + Duration::from_secs(60),
            &cancel,
        )
        .call(json!({"name": "x"}));
        assert!(matches!(r, Err(McpError::Cancelled { .. })), "{r:?}");
    }
}
