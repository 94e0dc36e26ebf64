//! A tiny MCP server over stdio, for the tests of a Windows node's
//! `plugin call`, which run it under Wine (where the tests' Python stub
//! has no interpreter). Not shipped.
//!
//! `mcp_stub [--mark FILE]` answers `initialize` and `tools/list`, then by
//! the tool called: `echo` its `text` argument back (and the call's
//! `_meta`); `read` the file at its `path` argument; `env` the value of
//! the variable `name`, and this environment's names that start with
//! `OZ0_`; `linger` starts a copy of itself that appends a byte to
//! the file `path` every 50 ms and answers once it has, leaving it
//! running;
//! `hang` never answers. With `--mark`, it first creates FILE, so a test
//! can tell whether it was started at all.
//!
//! `mcp_stub tick FILE` is the copy `linger` starts; `mute` as the last
//! argument answers nothing at all.

use std::io::{BufRead, Write};
use std::time::Duration;

use serde_json::{json, Value};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("tick") {
        tick(&args[2]);
    }
    if args.get(1).map(String::as_str) == Some("--mark") {
        std::fs::write(&args[2], b"started").expect("the mark is written");
    }
    if args.last().map(String::as_str) == Some("mute") {
        loop {
            std::thread::sleep(Duration::from_secs(60));
        }
    }
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let Ok(req) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let Some(id) = req.get("id").cloned() else {
            continue;
        };
        let result = answer(&req);
        let msg = json!({"jsonrpc": "2.0", "id": id, "result": result});
        writeln!(out, "{msg}").expect("stdout");
        out.flush().expect("stdout");
    }
}

fn text(t: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": t.into()}]})
}

fn answer(req: &Value) -> Value {
    let params = &req["params"];
    match req["method"].as_str().unwrap_or("") {
        "initialize" => json!({
            "protocolVersion": params["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "oz0-mcp-stub", "version": "1"},
        }),
        "tools/list" => {
            let tools: Vec<Value> = ["echo", "read", "env", "linger", "hang"]
                .iter()
                .map(|n| json!({"name": n, "inputSchema": {"type": "object"}}))
                .collect();
            json!({ "tools": tools })
        }
        "tools/call" => {
            let a = &params["arguments"];
            let arg = |k: &str| a[k].as_str().unwrap_or("").to_string();
            match params["name"].as_str().unwrap_or("") {
                "hang" => loop {
                    std::thread::sleep(Duration::from_secs(60));
                },
                "read" => match std::fs::read_to_string(arg("path")) {
                    Ok(s) => text(s),
                    Err(e) => {
                        json!({"content": [{"type": "text", "text": e.to_string()}], "isError": true})
                    }
                },
                "env" => text(
                    json!({
                        "value": std::env::var(arg("name")).ok(),
                        "oz0": std::env::vars()
                            .map(|(k, _)| k)
                            .filter(|k| k.to_ascii_uppercase().starts_with("OZ0_"))
                            .collect::<Vec<_>>(),
                    })
                    .to_string(),
                ),
                // Left running on purpose: the call must end it.
                #[allow(clippy::zombie_processes)]
                "linger" => {
                    let me = std::env::current_exe().expect("its own path");
                    std::process::Command::new(me)
                        .args(["tick", &arg("path")])
                        .stdin(std::process::Stdio::null())
                        .stdout(std::process::Stdio::null())
                        .spawn()
                        .expect("the copy starts");
                    // Answered once the copy runs.
                    let path = arg("path");
                    while std::fs::metadata(&path).map_or(0, |m| m.len()) == 0 {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    text("left one running")
                }
                _ => {
                    let mut r = text(arg("text"));
                    r["structuredContent"] = json!({"meta": params["_meta"]});
                    r
                }
            }
        }
        _ => json!({}),
    }
}

/// Appends a byte to `path` every 50 ms, until it is ended.
fn tick(path: &str) -> ! {
    loop {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = f.write_all(b".");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
