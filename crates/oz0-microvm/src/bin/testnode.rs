//! A node binary for this crate's end-to-end tests and benchmark.
//!
//! It holds what `oz0-node` holds for a VM — the tier-1 stage,
//! the guest agent, `sandbox vm` — plus `mcp-test-server`, a small MCP
//! server (JSON-RPC 2.0 over stdio, newline-delimited) whose tools let a
//! test look at the guest from inside: `write_file`, `read_file`,
//! `symlink`, `net_interfaces`, `http_get` (through `HTTP_PROXY`).

use std::io::{BufRead, Read, Write};

use clap::Parser;
use serde_json::{json, Value};

#[derive(Parser)]
#[command(name = "oz0-vm-testnode")]
enum Top {
    /// `sandbox vm …`
    #[command(subcommand)]
    Sandbox(Sandbox),
}

#[derive(clap::Subcommand)]
enum Sandbox {
    /// Run one tool server in a microVM.
    Vm(oz0_microvm::cli::VmArgs),
}

fn main() {
    let first = std::env::args().nth(1).unwrap_or_default();
    let code = match first.as_str() {
        a if a == oz0_linux::plan::STAGE_ARG => oz0_linux::stage::main(),
        a if a == oz0_microvm::guest::GUEST_ARG => oz0_microvm::guest::main(),
        a if a == oz0_microvm::smolguest::EGRESS_ARG => {
            oz0_microvm::smolguest::egress_main(std::env::args_os().skip(2).collect())
        }
        "mcp-test-server" => mcp_server(),
        _ => match Top::parse() {
            Top::Sandbox(Sandbox::Vm(a)) => oz0_microvm::cli::vm_main(a),
        },
    };
    std::process::exit(code);
}

fn text(s: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": s.into()}]})
}

fn error(s: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": s.into()}], "isError": true})
}

fn tools() -> Value {
    let obj =
        |props: Value, req: Value| json!({"type": "object", "properties": props, "required": req});
    let s = json!({"type": "string"});
    json!({"tools": [
        {"name": "write_file", "description": "Write a file under /work",
         "inputSchema": obj(json!({"path": s, "content": s}), json!(["path", "content"]))},
        {"name": "read_file", "description": "Read a file",
         "inputSchema": obj(json!({"path": s}), json!(["path"]))},
        {"name": "symlink", "description": "Make a symbolic link",
         "inputSchema": obj(json!({"target": s, "link": s}), json!(["target", "link"]))},
        {"name": "net_interfaces", "description": "List network interfaces",
         "inputSchema": obj(json!({}), json!([]))},
        {"name": "http_get", "description": "GET a plain-HTTP URL through HTTP_PROXY",
         "inputSchema": obj(json!({"url": s}), json!(["url"]))},
    ]})
}

fn b64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn http_get(url: &str) -> Result<String, String> {
    let proxy =
        std::env::var("HTTP_PROXY").map_err(|_| "no HTTP_PROXY in the guest".to_string())?;
    // http://oz0:TOKEN@127.0.0.1:PORT
    let rest = proxy
        .strip_prefix("http://")
        .ok_or("HTTP_PROXY is not http://")?;
    let (cred, addr) = rest
        .split_once('@')
        .ok_or("HTTP_PROXY has no credentials")?;
    let host = url
        .strip_prefix("http://")
        .ok_or("only http:// URLs")?
        .split('/')
        .next()
        .unwrap_or("");
    let mut s = std::net::TcpStream::connect(addr.trim_end_matches('/'))
        .map_err(|e| format!("bridge {addr}: {e}"))?;
    write!(
        s,
        "GET {url} HTTP/1.1\r\nHost: {host}\r\nProxy-Authorization: Basic {}\r\nConnection: close\r\n\r\n",
        b64(cred.as_bytes())
    )
    .map_err(|e| e.to_string())?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).map_err(|e| e.to_string())?;
    Ok(resp)
}

fn call(name: &str, a: &Value) -> Value {
    let arg = |k: &str| a.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    match name {
        "write_file" => {
            let p = std::path::Path::new("/work").join(arg("path").trim_start_matches('/'));
            match std::fs::write(&p, arg("content")) {
                Ok(()) => text(format!("wrote {}", p.display())),
                Err(e) => error(format!("{}: {e}", p.display())),
            }
        }
        "read_file" => match std::fs::read_to_string(arg("path")) {
            Ok(s) => text(s),
            Err(e) => error(e.to_string()),
        },
        "symlink" => match std::os::unix::fs::symlink(arg("target"), arg("link")) {
            Ok(()) => text("ok"),
            Err(e) => error(e.to_string()),
        },
        "net_interfaces" => {
            let mut v: Vec<String> = std::fs::read_dir("/sys/class/net")
                .map(|d| {
                    d.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            v.sort();
            text(v.join(","))
        }
        "http_get" => match http_get(&arg("url")) {
            Ok(s) => text(s),
            Err(e) => error(e),
        },
        _ => error(format!("no tool {name}")),
    }
}

fn mcp_server() -> i32 {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let Some(id) = msg.get("id").cloned() else {
            continue;
        };
        let method = msg.get("method").and_then(Value::as_str).unwrap_or("");
        let params = msg.get("params").cloned().unwrap_or(Value::Null);
        let result = match method {
            "initialize" => json!({
                "protocolVersion": params.get("protocolVersion").cloned().unwrap_or(json!("2024-11-05")),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "oz0-vm-test", "version": "0.1.0"},
            }),
            "tools/list" => tools(),
            "tools/call" => call(
                params.get("name").and_then(Value::as_str).unwrap_or(""),
                params.get("arguments").unwrap_or(&Value::Null),
            ),
            "ping" => json!({}),
            _ => {
                let e = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "method not found"}});
                let _ = writeln!(out, "{e}");
                let _ = out.flush();
                continue;
            }
        };
        let _ = writeln!(
            out,
            "{}",
            json!({"jsonrpc": "2.0", "id": id, "result": result})
        );
        let _ = out.flush();
    }
    0
}
