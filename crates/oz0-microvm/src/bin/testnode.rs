//! A node binary for this crate's end-to-end tests and benchmark.
//!
//! It holds what `oz0-node` holds for a VM — the tier-1 stage,
//! the guest agent, `sandbox vm` — plus `mcp-test-server`, a small MCP
//! server (JSON-RPC 2.0 over stdio, newline-delimited) whose tools let a
//! test look at the guest from inside: `write_file`, `read_file`,
//! `symlink`, `net_interfaces`, `http_get` (through `HTTP_PROXY`).

use std::io::{BufRead, Read, Write};

use serde_json::{json, Value};

fn main() {
    let first = std::env::args().nth(1).unwrap_or_default();
    let code = match first.as_str() {
        a if a == oz0_linux::plan::STAGE_ARG => oz0_linux::stage::main(),
        a if a == oz0_microvm::guest::GUEST_ARG => oz0_microvm::guest::main(),
        a if a == oz0_microvm::smolguest::EGRESS_ARG => {
            oz0_microvm::smolguest::egress_main(std::env::args_os().skip(2).collect())
        }
        "mcp-test-server" => mcp_server(),
        "sandbox" => sandbox_vm(std::env::args().skip(2).collect()),
        _ => {
            eprintln!("oz0-vm-testnode: sandbox vm FLAGS -- CMD, or mcp-test-server");
            2
        }
    };
    std::process::exit(code);
}

/// `sandbox vm --FLAG VALUE ... -- CMD`, as the tests call it (the real
/// command line is `oz0-node`'s): the same library call behind it.
fn sandbox_vm(args: Vec<String>) -> i32 {
    let usage = |m: &str| {
        eprintln!("oz0-vm-testnode: {m}");
        2
    };
    let Some(("vm", rest)) = args.split_first().map(|(a, r)| (a.as_str(), r)) else {
        return usage("only `sandbox vm` is here");
    };
    let split = rest.iter().position(|a| a == "--").unwrap_or(rest.len());
    let (flags, command) = (&rest[..split], rest.get(split + 1..).unwrap_or_default());
    let mut cmd = oz0_microvm::command::VmCommand {
        work: std::path::PathBuf::new(),
        memory_mib: oz0_microvm::vm::DEFAULT_MEMORY_MIB,
        cpus: 1,
        allow: Vec::new(),
        forward: Vec::new(),
        env_names: Vec::new(),
        image: None,
        boot_timeout_s: 60,
        command: command.to_vec(),
    };
    let mut host = oz0_linux::HostConfig::default();
    for pair in flags.chunks(2) {
        let [flag, value] = pair else {
            return usage("every flag takes a value");
        };
        let number = |v: &str| v.parse::<u64>().ok();
        match flag.as_str() {
            "--work" => cmd.work = value.into(),
            "--data-dir" => host.data_dir = Some(value.into()),
            "--bwrap" => host.bwrap = Some(value.into()),
            "--image" => cmd.image = Some(value.clone()),
            "--allow" => cmd.allow.push(value.clone()),
            "--env" => cmd.env_names.push(value.clone()),
            "--memory" => match number(value).and_then(|n| u32::try_from(n).ok()) {
                Some(n) => cmd.memory_mib = n,
                None => return usage("--memory takes MiB"),
            },
            "--cpus" => match number(value).and_then(|n| u32::try_from(n).ok()) {
                Some(n) => cmd.cpus = n,
                None => return usage("--cpus takes a number"),
            },
            "--forward" => match number(value).and_then(|n| u16::try_from(n).ok()) {
                Some(n) => cmd.forward.push(n),
                None => return usage("--forward takes a port"),
            },
            "--boot-timeout" => match number(value) {
                Some(n) => cmd.boot_timeout_s = n,
                None => return usage("--boot-timeout takes seconds"),
            },
            other => return usage(&format!("unknown flag {other}")),
        }
    }
    let host = match oz0_linux::Tier1::open(host) {
        Ok(h) => h,
        Err(e) => return usage(&e.to_string()),
    };
    let audit = host.data_dir().join(oz0_egress::AUDIT_LOG_NAME);
    let log = audit.clone();
    let proxy = oz0_egress::LazyProxy::with_audit_file(
        move || Ok(oz0_linux::hostfs::open_log("the egress audit log", &log)?),
        oz0_linux::hostfs::MAX_LOG,
    );
    let host = host.with_egress(std::sync::Arc::new(proxy), audit);
    oz0_microvm::command::run(cmd, &host)
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
        {"name": "write_file", "description": "Write a file in the working folder (/work)",
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
        let n = u32::from(c[0]) << 16
            | u32::from(*c.get(1).unwrap_or(&0)) << 8
            | u32::from(*c.get(2).unwrap_or(&0));
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
            // In the server's working folder: /work in a guest, or the
            // work folder itself under the smolvm stand-in (no VM there).
            let here = std::env::current_dir().unwrap_or_else(|_| "/work".into());
            let p = here.join(arg("path").trim_start_matches('/'));
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
