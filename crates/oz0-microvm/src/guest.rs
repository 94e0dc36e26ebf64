//! The guest agent: the node binary's part inside a VM.
//!
//! The test guest's init mounts `/work` and `/oz0` and executes
//! `/oz0/oz0-node __oz0-vm-guest`. The agent finds the `oz0.mux`
//! virtio-serial port, reads its configuration (the server's command, its
//! variables, the node's uid/gid, the proxy token), starts the bridge on the
//! guest's loopback when the VM has egress, runs the server as the node's
//! uid/gid with `HOME=/tmp`, and carries its stdin, stdout, stderr and exit
//! status over the port.
//!
//! Everything here runs inside the guest, which the node does not trust: the
//! agent holds nothing the guest could not have anyway.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::mux::{self, Kind};

/// The hidden argument that makes the node binary act as the guest agent.
pub const GUEST_ARG: &str = "__oz0-vm-guest";
/// The virtio-serial port's name.
pub const PORT_NAME: &str = "oz0.mux";
/// Most proxy connections the guest bridge carries at once.
pub const MAX_GUEST_CONNECTIONS: usize = 64;

/// What the node tells the agent (the first frame).
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuestConfig {
    /// The server's command.
    pub argv: Vec<String>,
    /// The server's own variables (settings and secrets, by name).
    pub env: Vec<(String, String)>,
    /// The node's uid.
    pub uid: u32,
    /// The node's gid.
    pub gid: u32,
    /// The proxy token, when the VM has egress.
    pub egress_token: Option<String>,
}

impl std::fmt::Debug for GuestConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuestConfig")
            .field("argv", &self.argv)
            .field(
                "env_names",
                &self.env.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("uid", &self.uid)
            .field("gid", &self.gid)
            .field("egress", &self.egress_token.is_some())
            .finish()
    }
}

fn find_port() -> Option<PathBuf> {
    let entries = std::fs::read_dir("/sys/class/virtio-ports").ok()?;
    for e in entries.flatten() {
        let name = std::fs::read_to_string(e.path().join("name")).unwrap_or_default();
        if name.trim() == PORT_NAME {
            return Some(PathBuf::from("/dev").join(e.file_name()));
        }
    }
    None
}

type Writer = Arc<Mutex<File>>;

fn send(w: &Writer, kind: Kind, chan: u32, data: &[u8]) -> std::io::Result<()> {
    let mut f = w.lock().unwrap_or_else(|e| e.into_inner());
    mux::write_frame(&mut *f, kind, chan, data)
}

fn pump(mut from: impl Read, w: Writer, kind: Kind, chan: u32) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if send(&w, kind, chan, &buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
}

/// Runs the agent; returns only on failure (the exit code).
pub fn main() -> i32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    let path = loop {
        if let Some(p) = find_port() {
            break p;
        }
        if Instant::now() > deadline {
            eprintln!("oz0 guest: no virtio-serial port named {PORT_NAME}");
            return 1;
        }
        thread::sleep(Duration::from_millis(20));
    };
    let port = match OpenOptions::new().read(true).write(true).open(&path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("oz0 guest: {}: {e}", path.display());
            return 1;
        }
    };
    let mut reader = match port.try_clone() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("oz0 guest: {e}");
            return 1;
        }
    };
    let writer: Writer = Arc::new(Mutex::new(port));
    let code = match serve(&mut reader, &writer) {
        Ok(code) => code,
        Err(why) => {
            eprintln!("oz0 guest: {why}");
            let _ = send(&writer, Kind::Failed, 0, why.as_bytes());
            1
        }
    };
    // The node stops the VM once it has the status; if it does not, the
    // kernel's panic on init's exit ends it (panic=-1, -no-reboot).
    thread::sleep(Duration::from_secs(5));
    code
}

fn serve(reader: &mut File, writer: &Writer) -> Result<i32, String> {
    let first = mux::read_frame(reader)
        .map_err(|e| format!("reading the configuration: {e}"))?
        .ok_or("the node closed the port before configuring")?;
    if first.kind != Kind::Config {
        return Err("the first frame is not the configuration".into());
    }
    let cfg: GuestConfig =
        serde_json::from_slice(&first.payload).map_err(|e| format!("bad configuration: {e}"))?;
    if cfg.argv.is_empty() {
        return Err("empty command".into());
    }
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), oz0_policy::env::DEFAULT_PATH.into()),
        ("HOME".into(), "/tmp".into()),
        ("TMPDIR".into(), "/tmp".into()),
        (
            oz0_policy::describe::SANDBOX_VAR.into(),
            oz0_policy::describe::MICROVM_VALUE.into(),
        ),
    ];
    env.extend(cfg.env.iter().cloned());
    let conns: Arc<Mutex<HashMap<u32, TcpStream>>> = Arc::new(Mutex::new(HashMap::new()));
    let mut bridge_port = None;
    if let Some(t) = &cfg.egress_token {
        let token = oz0_egress::Token::from_secret(t).map_err(|e| e.to_string())?;
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .map_err(|e| format!("bridge: cannot listen on the guest's loopback: {e}"))?;
        let p = listener.local_addr().map_err(|e| e.to_string())?.port();
        env.extend(token.proxy_env(p));
        bridge_port = Some(p);
        let (w, c) = (writer.clone(), conns.clone());
        thread::spawn(move || accept_loop(listener, w, c));
    }
    let mut child = Command::new(&cfg.argv[0])
        .args(&cfg.argv[1..])
        .env_clear()
        .envs(env)
        .current_dir("/work")
        .uid(cfg.uid)
        .gid(cfg.gid)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {:?}: {e}", cfg.argv[0]))?;
    let ready = bridge_port
        .map(|p| p.to_be_bytes().to_vec())
        .unwrap_or_default();
    send(writer, Kind::Ready, 0, &ready).map_err(|e| e.to_string())?;
    let stdin = Arc::new(Mutex::new(child.stdin.take()));
    let out = child.stdout.take().map(|o| {
        let w = writer.clone();
        thread::spawn(move || pump(o, w, Kind::Stdout, 0))
    });
    let err = child.stderr.take().map(|o| {
        let w = writer.clone();
        thread::spawn(move || pump(o, w, Kind::Stderr, 0))
    });
    {
        let mut r = reader.try_clone().map_err(|e| e.to_string())?;
        let (stdin, conns) = (stdin.clone(), conns.clone());
        thread::spawn(move || dispatch(&mut r, stdin, conns));
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    for t in [out, err].into_iter().flatten() {
        let _ = t.join();
    }
    let code = oz0_core::exit::status_code(status);
    send(writer, Kind::Exit, 0, &code.to_be_bytes()).map_err(|e| e.to_string())?;
    Ok(code)
}

fn dispatch(
    r: &mut File,
    stdin: Arc<Mutex<Option<std::process::ChildStdin>>>,
    conns: Arc<Mutex<HashMap<u32, TcpStream>>>,
) {
    while let Ok(Some(f)) = mux::read_frame(r) {
        match f.kind {
            Kind::Stdin => {
                let mut s = stdin.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(i) = s.as_mut() {
                    if i.write_all(&f.payload).and_then(|_| i.flush()).is_err() {
                        *s = None;
                    }
                }
            }
            Kind::StdinEof => {
                stdin.lock().unwrap_or_else(|e| e.into_inner()).take();
            }
            Kind::Data => {
                let c = conns.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(mut s) = c.get(&f.chan) {
                    let _ = s.write_all(&f.payload);
                }
            }
            Kind::Close => {
                if let Some(s) = conns
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&f.chan)
                {
                    let _ = s.shutdown(Shutdown::Write);
                }
            }
            _ => {}
        }
    }
}

fn accept_loop(listener: TcpListener, w: Writer, conns: Arc<Mutex<HashMap<u32, TcpStream>>>) {
    let mut next: u32 = 1;
    for s in listener.incoming() {
        let Ok(s) = s else { continue };
        let chan = next;
        next = next.wrapping_add(1).max(1);
        {
            let mut c = conns.lock().unwrap_or_else(|e| e.into_inner());
            if c.len() >= MAX_GUEST_CONNECTIONS {
                continue;
            }
            let Ok(clone) = s.try_clone() else { continue };
            c.insert(chan, clone);
        }
        if send(&w, Kind::Open, chan, &[]).is_err() {
            return;
        }
        let w = w.clone();
        thread::spawn(move || {
            pump(&s, w.clone(), Kind::Data, chan);
            let _ = send(&w, Kind::Close, chan, &[]);
        });
    }
}
