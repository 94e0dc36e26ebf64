//! Apple's container as a wall (`oz0_macos::vm`), run for real on Linux
//! against a stand-in of its CLI: everything of the node around Apple's
//! runtime — the `container run` arguments, the private env file, the
//! server's stdio, the cancel, and the VM stopped and deleted by its name
//! however the tool ends — without a Mac. The stand-in (a Python script)
//! logs each call, checks the env file as Apple's CLI would read it, and
//! serves the tool's stdio by echoing lines, as a server over MCP's stdio
//! does; it is not Apple's runtime, and the VM's own isolation is not
//! shown here (`scripts/test-macos-microvm.sh` checks it on a Mac).
#![cfg(unix)]

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use oz0_core::{Cancel, RunIo, Stdio};
use oz0_macos::container::VmTool;
use oz0_macos::vm::{run_tool, AppleContainer};
use oz0_policy::AbsPath;
use serde_json::Value;

/// The stand-in: `run` logs its arguments and the env file's mode and
/// text, then echoes stdin to stdout until stdin ends (`hang` in the
/// tool's command: until killed); `stop` and `delete` are logged.
const STAND_IN: &str = r#"#!/usr/bin/env python3
import json, os, stat, sys, time
here = os.path.dirname(os.path.abspath(__file__))
args = sys.argv[1:]
entry = {"argv": args, "env_keys": sorted(os.environ)}
if args and args[0] == "run":
    f = args[args.index("--env-file") + 1]
    st = os.stat(f)
    entry["env_file"] = f
    entry["env_file_mode"] = stat.S_IMODE(st.st_mode)
    entry["env_file_text"] = open(f).read()
with open(os.path.join(here, "calls.jsonl"), "a") as log:
    log.write(json.dumps(entry) + "\n")
if args and args[0] == "run":
    if "hang" in args:
        time.sleep(600)
    for line in sys.stdin:
        sys.stdout.write("echo " + line)
        sys.stdout.flush()
"#;

struct Fixture {
    dir: PathBuf,
    cli: PathBuf,
    work: PathBuf,
}

impl Fixture {
    fn new(name: &str) -> Fixture {
        let dir = std::env::temp_dir().join(format!("oz0-apple-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("work")).unwrap();
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let cli = dir.join("container");
        std::fs::write(&cli, STAND_IN).unwrap();
        std::fs::set_permissions(&cli, std::fs::Permissions::from_mode(0o755)).unwrap();
        Fixture {
            work: dir.join("work"),
            cli,
            dir,
        }
    }

    fn tool(&self, command: &[&str]) -> VmTool {
        VmTool {
            image: format!("ghcr.io/acme/fetch-mcp@sha256:{}", "4f6c".repeat(16)),
            memory_mib: 512,
            cpus: 1.5,
            nproc: 256,
            uid: 501,
            gid: 20,
            work: abs(&self.work),
            egress: None,
            command: command.iter().map(|s| s.to_string()).collect(),
            name: String::new(),
        }
    }

    fn calls(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.join("calls.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn abs(p: &Path) -> AbsPath {
    AbsPath::new(p.to_str().unwrap()).unwrap()
}

fn argv(call: &Value) -> Vec<String> {
    call["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

/// The value after `flag` in `a`.
fn after<'a>(a: &'a [String], flag: &str) -> &'a str {
    &a[a.iter()
        .position(|x| x == flag)
        .unwrap_or_else(|| panic!("{flag} in {a:?}"))
        + 1]
}

#[test]
fn a_tool_runs_speaks_over_its_stdio_and_its_vm_is_deleted_by_name() {
    let f = Fixture::new("serve");
    let (mut to_server, server_in) = UnixStream::pair().unwrap();
    let (server_out, from_server) = UnixStream::pair().unwrap();
    let io = RunIo {
        stdin: Stdio::File(File::from(OwnedFd::from(server_in))),
        stdout: Stdio::File(File::from(OwnedFd::from(server_out))),
        stderr: Stdio::Null,
    };
    let vars = vec![("ACME_TOKEN".to_string(), "s3cret-value".to_string())];
    let tool = f.tool(&["/srv/fetch", "--stdio"]);
    let data_dir = abs(&f.dir.join("data"));
    let cli = f.cli.clone();
    let server = std::thread::spawn(move || {
        run_tool(
            &AppleContainer::stand_in(cli),
            tool,
            &vars,
            None,
            &data_dir,
            io,
            None,
        )
    });
    to_server.write_all(b"{\"jsonrpc\":\"2.0\"}\n").unwrap();
    let mut line = String::new();
    BufReader::new(&from_server).read_line(&mut line).unwrap();
    assert_eq!(line, "echo {\"jsonrpc\":\"2.0\"}\n");
    // The end of its input ends the server; its VM is then stopped and
    // deleted by the name it was run with.
    drop(to_server);
    let status = server.join().unwrap().expect("the tool ran");
    assert_eq!(status, 0);

    let calls = f.calls();
    assert_eq!(calls.len(), 3, "{calls:#?}");
    let run = argv(&calls[0]);
    let name = after(&run, "--name").to_string();
    assert!(name.starts_with("oz0-"), "{name}");
    for (i, a) in [
        "run",
        "--rm",
        "--interactive",
        "--network",
        "none",
        "--read-only",
        "--cap-drop",
        "ALL",
    ]
    .iter()
    .enumerate()
    {
        assert_eq!(&run[i], a, "{run:?}");
    }
    assert_eq!(after(&run, "--user"), "501:20");
    assert_eq!(after(&run, "--cpus"), "2", "whole CPUs, rounded up");
    assert_eq!(after(&run, "--memory"), "512M");
    assert_eq!(after(&run, "--ulimit"), "nproc=256:256");
    assert_eq!(
        after(&run, "--volume"),
        format!("{}:/work", f.work.display())
    );
    assert_eq!(
        &run[run.len() - 3..],
        &[
            format!("ghcr.io/acme/fetch-mcp@sha256:{}", "4f6c".repeat(16)),
            "/srv/fetch".into(),
            "--stdio".into()
        ]
    );
    // The secret is in the env file only: 0600, and gone after.
    assert!(!run.iter().any(|a| a.contains("s3cret")), "{run:?}");
    assert_eq!(calls[0]["env_file_mode"], 0o600);
    assert!(calls[0]["env_file_text"]
        .as_str()
        .unwrap()
        .contains("ACME_TOKEN=s3cret-value"));
    assert!(!Path::new(calls[0]["env_file"].as_str().unwrap()).exists());
    // The CLI starts with a clean environment: no variable of this process
    // (nor the secret) reaches it by name.
    let keys: Vec<&str> = calls[0]["env_keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .filter(|k| !["PATH", "HOME", "PWD", "SHLVL", "_", "LC_CTYPE"].contains(k))
        .collect();
    assert!(keys.is_empty(), "{keys:?}");
    assert_eq!(argv(&calls[1]), ["stop", name.as_str()]);
    assert_eq!(argv(&calls[2]), ["delete", "--force", name.as_str()]);
}

#[test]
fn a_cancelled_tool_ends_and_its_vm_is_deleted_by_name() {
    let f = Fixture::new("cancel");
    let (cancel_r, cancel_w) = UnixStream::pair().unwrap();
    let (_keep_input, server_in) = UnixStream::pair().unwrap();
    let io = RunIo {
        stdin: Stdio::File(File::from(OwnedFd::from(server_in))),
        stdout: Stdio::Null,
        stderr: Stdio::Null,
    };
    let tool = f.tool(&["hang"]);
    let data_dir = abs(&f.dir.join("data"));
    let cli = f.cli.clone();
    let started = Instant::now();
    let server = std::thread::spawn(move || {
        run_tool(
            &AppleContainer::stand_in(cli),
            tool,
            &[],
            None,
            &data_dir,
            io,
            Some(Cancel(OwnedFd::from(cancel_r))),
        )
    });
    // Once it runs, the cancel fires.
    while f.calls().is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the stand-in never ran"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (&cancel_w).write_all(b"x").unwrap();
    let status = server.join().unwrap().expect("the tool ran");
    assert_ne!(status, 0, "a killed CLI is not a success");
    assert!(started.elapsed() < Duration::from_secs(60));
    let calls = f.calls();
    let name = after(&argv(&calls[0]), "--name").to_string();
    assert_eq!(calls.len(), 3, "{calls:#?}");
    assert_eq!(argv(&calls[1]), ["stop", name.as_str()]);
    assert_eq!(argv(&calls[2]), ["delete", "--force", name.as_str()]);
}

#[test]
fn a_run_that_is_not_a_named_vm_is_refused_before_anything_starts() {
    use oz0_core::{Role, RunOptions, Sandbox};
    let f = Fixture::new("refuse");
    let c = AppleContainer::stand_in(f.cli.clone());
    let spec = oz0_policy::RunSpec::new(oz0_policy::RunRequest {
        work: f.work.to_str().unwrap().to_string(),
        data_dir: f.dir.join("data").to_str().unwrap().to_string(),
        command: vec![
            "container".into(),
            "run".into(),
            "ghcr.io/x@sha256:00".into(),
        ],
        ..Default::default()
    })
    .unwrap();
    let mut opts = RunOptions::new(RunIo::default(), None);
    opts.role = Role::Monitor(oz0_core::Monitor::default());
    assert!(
        c.run(&spec, opts).is_err(),
        "no --name oz0-…: it could not be stopped by name"
    );
    let opts = RunOptions::new(RunIo::default(), None);
    assert!(
        c.run(&spec, opts).is_err(),
        "a command's run is not Apple's container's"
    );
    assert!(f.calls().is_empty(), "nothing started");
}
