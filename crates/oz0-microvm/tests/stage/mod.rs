//! Staging shared by the microVM tests and benchmark: a stripped copy of the
//! node binary (the guest loads it over 9p, under emulation), `work/` and
//! `data/`, all reachable by the unprivileged user the node runs as; removed
//! on drop.

// Shared by several test targets and the benchmark; each uses a part.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A staged folder.
pub struct Stage {
    /// The folder.
    pub dir: PathBuf,
    /// The staged node binary.
    pub exe: PathBuf,
}

impl Stage {
    /// `oz0-node sandbox vm` with this stage's folders and a 90 s boot
    /// timeout: the staged binary first, then its arguments, to which the
    /// caller adds its own options, `--` and the server.
    pub fn vm_args(&self) -> Vec<String> {
        vec![
            self.exe.display().to_string(),
            "sandbox".into(),
            "vm".into(),
            "--data-dir".into(),
            self.dir.join("data").display().to_string(),
            "--work".into(),
            self.dir.join("work").display().to_string(),
            "--boot-timeout".into(),
            "90".into(),
        ]
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn chmod(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Stages `node_bin` under `<temp>/oz0-<tag>-<pid>`.
pub fn stage(tag: &str, node_bin: &str) -> Stage {
    let dir = std::env::temp_dir().join(format!("oz0-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("work")).unwrap();
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let exe = dir.join("oz0-vm-testnode");
    let stripped = Command::new("strip")
        .arg("-o")
        .arg(&exe)
        .arg(node_bin)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !stripped {
        std::fs::copy(node_bin, &exe).unwrap();
    }
    for p in [&dir, &dir.join("work"), &dir.join("data")] {
        chmod(p, 0o777);
    }
    chmod(&exe, 0o755);
    Stage { dir, exe }
}

/// An HTTP listener on 127.0.0.1 (the only kind of target the tests use)
/// answering every request with `body`; returns its port.
pub fn http_listener(body: &'static str) -> u16 {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

/// A proxy for the egress tests: its audit dropped, the node's own
/// addresses unchecked (the tests' listeners are on loopback).
pub fn quiet_proxy() -> oz0_egress::ProxyHandle {
    oz0_egress::Proxy::start(oz0_egress::ProxyConfig {
        own_addrs: None,
        audit: std::sync::Arc::new(|_: &oz0_egress::AuditRecord| {}),
        ..oz0_egress::ProxyConfig::default()
    })
    .unwrap()
}

/// A run of `proxy` on loopback TCP that may reach only 127.0.0.1:`allowed`,
/// with a new token: its guard (which tells the address) and the token.
pub fn tcp_run(
    proxy: &oz0_egress::ProxyHandle,
    id: &str,
    allowed: u16,
) -> (oz0_egress::RunGuard, oz0_egress::Token) {
    let token = oz0_egress::Token::generate().unwrap();
    let run = proxy
        .add_run_tcp(
            id.into(),
            token.clone(),
            oz0_policy::net::Egress::parse(&[format!("127.0.0.1:{allowed}")], &[]).unwrap(),
            "127.0.0.1:0".parse().unwrap(),
        )
        .unwrap();
    (run, token)
}

/// A server's shell script behind the guest's bridge: whether it sees the
/// token's variable, its proxy variable with the token masked, the body of
/// `allowed` through the proxy, and the status of `unlisted`.
pub fn egress_script(allowed: u16, unlisted: u16) -> String {
    format!(
        "echo token=${{{var}:-none}}; echo proxy=$HTTP_PROXY | sed 's/oz0:[^@]*@/oz0:T@/'; \
         curl -s http://127.0.0.1:{allowed}/; echo; \
         curl -s -o /dev/null -w 'unlisted=%{{http_code}}' http://127.0.0.1:{unlisted}/; echo",
        var = oz0_egress::reverse::TOKEN_VAR
    )
}

/// The staged node with `args` (the binary first) and `envs` on top of a
/// plain `PATH`: as the unprivileged `oz0test` when root, the way nodes run.
pub fn node_command(st: &Stage, args: &[String], envs: &[(&str, String)]) -> Command {
    let mut cmd = if rustix::process::getuid().is_root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=oz0test", "--regid=oz0test", "--init-groups", "--"]);
        c.args(args);
        c.env_clear().env("HOME", &st.dir);
        c
    } else {
        let mut c = Command::new(&args[0]);
        c.args(&args[1..]);
        c
    };
    cmd.env("PATH", "/usr/local/bin:/usr/bin:/bin");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd
}

/// [`node_command`], started with stdin and stdout piped.
pub fn start_node(st: &Stage, args: &[String], envs: &[(&str, String)]) -> Child {
    node_command(st, args, envs)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the node")
}

/// A JSON-RPC MCP client over `sandbox vm`'s stdin and stdout.
pub struct Client {
    /// `sandbox vm`.
    pub child: Child,
    /// Its stdout.
    pub out: BufReader<std::process::ChildStdout>,
    next: u64,
}

impl Client {
    pub fn new(mut child: Child) -> Client {
        let out = BufReader::new(child.stdout.take().unwrap());
        Client {
            child,
            out,
            next: 1,
        }
    }

    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let stdin = self.child.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        let v: Value =
            serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        assert_eq!(v["id"], json!(id), "{v}");
        v["result"].clone()
    }

    pub fn call(&mut self, name: &str, args: Value) -> (String, bool) {
        let r = self.request("tools/call", json!({"name": name, "arguments": args}));
        (
            r["content"][0]["text"].as_str().unwrap_or("").to_string(),
            r["isError"].as_bool().unwrap_or(false),
        )
    }

    pub fn initialize(&mut self) {
        let r = self.request(
            "initialize",
            json!({"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "oz0-test", "version": "0"}}),
        );
        assert_eq!(r["serverInfo"]["name"], "oz0-vm-test");
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(
            stdin,
            "{}",
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        )
        .unwrap();
    }

    pub fn wait(mut self, limit: Duration) -> i32 {
        drop(self.child.stdin.take());
        let t = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s.code().unwrap_or(-1);
            }
            assert!(
                t.elapsed() < limit,
                "sandbox vm did not end within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The VM records in the stage's data folder.
pub fn vm_folders(st: &Stage) -> Vec<PathBuf> {
    // Every record names a folder; after a VM none may be left.
    let mut v = Vec::new();
    if let Ok(d) = std::fs::read_dir(st.dir.join("data/microvm/vms")) {
        for e in d.flatten() {
            v.push(e.path());
        }
    }
    v
}

/// The node pid and VM folder of the one running VM's record.
pub fn records_pid(st: &Stage) -> Option<(u32, PathBuf)> {
    let r = vm_folders(st).into_iter().next()?;
    let rec: Value = serde_json::from_slice(&std::fs::read(&r).ok()?).ok()?;
    Some((
        u32::try_from(rec["pid"].as_u64()?).ok()?,
        PathBuf::from(rec["dir"].as_str()?),
    ))
}
