//! A Mac's microVM tool with egress (`oz0_macos::vm::run_tool` with
//! `ToolEgress`), run on Linux against a stand-in of Apple's `container`
//! CLI that plays what its runtime does with the argument list the node
//! writes: it makes the published socket's host end and relays each
//! connection made there to the guest's listener (dropping those made
//! before the guest listens, as the runtime does), reads the env file,
//! shares the guest binary's folder at `/oz0`, and runs the VM's command
//! on this host. The guest binary is this crate's test node, whose
//! `__oz0-vm-egress --accept` is the bridge a Mac's VM runs. What is shown:
//! the server reaches an allowed listener through the node's proxy, is
//! refused one off the allowlist, never sees the token variable; the token
//! travels only in the env file; the socket's host end sits in the tool's
//! private folder, gone after. Not shown: Apple's runtime itself, which
//! `scripts/test-macos.sh` exercises on a Mac.

use std::fs::File;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use oz0_core::{RunIo, Stdio};
use oz0_macos::container::VmTool;
use oz0_macos::vm::{run_tool, AppleContainer, ToolEgress};
use oz0_policy::AbsPath;
use serde_json::Value;

mod stage;
use stage::{egress_script, http_listener, quiet_proxy};

/// The stand-in `container`: `run` logs its arguments and the env file,
/// then plays the runtime; `stop` and `delete` are logged.
const STAND_IN: &str = r#"#!/usr/bin/env python3
import json, os, socket, stat, subprocess, sys, threading
here = os.path.dirname(os.path.abspath(__file__))
args = sys.argv[1:]
entry = {"argv": args}
def log(e):
    with open(os.path.join(here, "calls.jsonl"), "a") as f:
        f.write(json.dumps(e) + "\n")
if not args or args[0] != "run":
    log(entry)
    sys.exit(0)
value = lambda flag: args[args.index(flag) + 1] if flag in args else None
env_file = value("--env-file")
entry["env_file_mode"] = stat.S_IMODE(os.stat(env_file).st_mode)
entry["env_file_text"] = open(env_file).read()
host, guest = value("--publish-socket").split(":")
entry["host_folder_mode"] = stat.S_IMODE(os.stat(os.path.dirname(host)).st_mode)
log(entry)
source = [m for m in args if m.startswith("type=bind,")][0].split(",")[1].split("=", 1)[1]
image = [a for a in args if "@sha256:" in a][0]
command = args[args.index(image) + 1:]
guest_here = os.path.join(here, "guest.sock")
def place(a):
    if a == guest:
        return guest_here
    if a.startswith("/oz0/"):
        return os.path.join(source, a[len("/oz0/"):])
    return a
command = [place(a) for a in command]
env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp"}
for line in open(env_file).read().splitlines():
    k, v = line.split("=", 1)
    env[k] = v
def pipe(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
        b.shutdown(socket.SHUT_WR)
    except OSError:
        pass
def relay(c):
    g = socket.socket(socket.AF_UNIX)
    try:
        g.connect(guest_here)
    except OSError:
        c.close()
        return
    threading.Thread(target=pipe, args=(c, g), daemon=True).start()
    pipe(g, c)
lst = socket.socket(socket.AF_UNIX)
lst.bind(host)
lst.listen(64)
def serve():
    while True:
        c, _ = lst.accept()
        threading.Thread(target=relay, args=(c,), daemon=True).start()
threading.Thread(target=serve, daemon=True).start()
sys.exit(subprocess.call(command, env=env))
"#;

fn abs(p: &Path) -> AbsPath {
    AbsPath::new(p.to_str().unwrap()).unwrap()
}

fn have_tools() -> bool {
    let ok = ["curl", "python3"].iter().all(|t| {
        std::process::Command::new(t)
            .arg("--version")
            .output()
            .is_ok()
    });
    if !ok {
        if std::env::var("OZ0_MUST_WORK").as_deref() == Ok("1") {
            panic!("OZ0_MUST_WORK=1 and curl or python3 is missing (apt-get install curl python3)");
        }
        eprintln!("SKIP: curl or python3 is missing");
    }
    ok
}

#[test]
fn a_macs_tool_reaches_its_allowlist_through_the_published_socket() {
    if !have_tools() {
        return;
    }
    let dir: PathBuf =
        std::env::temp_dir().join(format!("oz0-apple-egress-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("work")).unwrap();
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let cli = dir.join("container");
    std::fs::write(&cli, STAND_IN).unwrap();
    std::fs::set_permissions(&cli, std::fs::Permissions::from_mode(0o755)).unwrap();

    let allowed = http_listener("hello from the allowlist");
    let unlisted = http_listener("must never be seen");
    let proxy = quiet_proxy();
    // The tool's own run of the proxy, opened as a Mac's node opens it.
    let (egress, _lease) = ToolEgress::open(
        &proxy,
        "mac-tool".into(),
        oz0_policy::net::Egress::parse(&[format!("127.0.0.1:{allowed}")], &[]).unwrap(),
        abs(Path::new(env!("CARGO_BIN_EXE_oz0-vm-testnode"))),
    )
    .unwrap();
    let token = egress.token.clone();
    let script = egress_script(allowed, unlisted);
    let tool = VmTool {
        image: format!("ghcr.io/acme/fetch-mcp@sha256:{}", "4f6c".repeat(16)),
        memory_mib: 512,
        cpus: 1.0,
        nproc: 256,
        uid: 501,
        gid: 20,
        work: abs(&dir.join("work")),
        egress: None,
        command: vec!["/bin/sh".into(), "-c".into(), script],
        name: String::new(),
    };
    let (out_w, mut out_r) = UnixStream::pair().unwrap();
    let io = RunIo {
        stdin: Stdio::Null,
        stdout: Stdio::File(File::from(OwnedFd::from(out_w))),
        stderr: Stdio::Inherit,
    };
    let data_dir = abs(&dir.join("data"));
    let vars = vec![("ACME_MODE".to_string(), "fast".to_string())];
    let server = std::thread::spawn(move || {
        run_tool(
            &AppleContainer::stand_in(cli),
            tool,
            &vars,
            Some(egress),
            &data_dir,
            io,
            None,
        )
    });
    let mut text = String::new();
    out_r.read_to_string(&mut text).unwrap();
    let code = server.join().unwrap().unwrap();
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("token=none"), "{text}");
    assert!(!text.contains(token.as_str()), "{text}");
    assert!(text.contains("proxy=http://oz0:T@127.0.0.1:"), "{text}");
    assert!(text.contains("hello from the allowlist"), "{text}");
    assert!(text.contains("unlisted=403"), "{text}");

    let calls: Vec<Value> = std::fs::read_to_string(dir.join("calls.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let run_call = &calls[0];
    let argv: Vec<&str> = run_call["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        argv.windows(2).any(|w| w == ["--network", "none"]),
        "{argv:?}"
    );
    assert!(!argv.iter().any(|a| a.contains(token.as_str())), "{argv:?}");
    let spec = argv[argv.iter().position(|a| *a == "--publish-socket").unwrap() + 1];
    let (host, guest) = spec.split_once(':').unwrap();
    assert_eq!(guest, oz0_egress::reverse::GUEST_SOCKET);
    assert_eq!(run_call["host_folder_mode"], 0o700);
    assert!(!Path::new(host).exists(), "the tool's folder is removed");
    assert_eq!(run_call["env_file_mode"], 0o600);
    let env = run_call["env_file_text"].as_str().unwrap();
    assert!(env.contains("ACME_MODE=fast\n"), "{env}");
    assert!(
        env.contains(&format!("OZ0_EGRESS_TOKEN={}\n", token.as_str())),
        "the token travels in the env file"
    );
    // The VM is stopped and deleted by name after.
    let names: Vec<&str> = calls[1..]
        .iter()
        .map(|c| c["argv"][0].as_str().unwrap())
        .collect();
    assert_eq!(names, ["stop", "delete"]);
    proxy.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
