//! `oz0-node plugin check` and `plugin call`, black-box, as the
//! unprivileged user: an installed plugin's manifest read and held to its
//! rules, a real MCP server (`@modelcontextprotocol/server-filesystem`,
//! from npm) called in the tier-1 sandbox and in the node's real smolvm
//! path (with the smolvm stand-in of oz0-microvm's tests, which runs the
//! "VM" in the monitor's own tier-1 sandbox), and every way a call can end
//! badly, each leaving no process, work folder or VM folder behind.
//!
//! Needs bubblewrap, python3 (the stand-in and the misbehaving server are
//! Python scripts) and `mcp-server-filesystem` on PATH (`npm install -g
//! @modelcontextprotocol/server-filesystem`); skips with the reason when one
//! is missing, fails under `OZ0_MUST_WORK=1`.

// The Linux node's black-box tests (the Windows node's are windows.rs).
#![cfg(target_os = "linux")]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{
    alias_bomb, marker, node, prlimit, processes_with, sandbox_ready, skip, stderr, stdout,
    TempDir, BOMB_AS_LIMIT,
};

const STUB: &str = include_str!("fixtures/mcp_stub.py");
const STANDIN: &str = include_str!("../../oz0-microvm/tests/fixtures/smolvm-standin/smolvm");
const FS_SERVER: &str = "/usr/bin/mcp-server-filesystem";
const DIGEST: &str = "0000000000000000000000000000000000000000000000000000000000000000";

fn ready() -> bool {
    if !sandbox_ready() {
        return false;
    }
    if !Path::new("/usr/bin/python3").exists() {
        return skip("python3 is not installed (apt-get install python3)");
    }
    if !Path::new(FS_SERVER).exists() {
        return skip("mcp-server-filesystem is not installed (npm install -g @modelcontextprotocol/server-filesystem)");
    }
    true
}

/// A plugin folder, a data dir and a private TMPDIR for one test.
struct Plugin {
    root: TempDir,
}

impl Plugin {
    fn new(tag: &str, manifest: &str) -> Plugin {
        let root = TempDir::new(tag);
        for d in ["plugin", "data", "tmp"] {
            std::fs::create_dir(root.join(d)).unwrap();
        }
        std::fs::set_permissions(root.join("tmp"), std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::write(root.join("plugin/oz0-plugin.yaml"), manifest).unwrap();
        std::fs::write(root.join("stub.py"), STUB).unwrap();
        Plugin { root }
    }

    fn dir(&self) -> PathBuf {
        self.root.join("plugin")
    }

    fn command(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut c = Command::new(node());
        c.arg("plugin")
            .args(args.iter().take(1))
            .arg(self.dir())
            .args(args.iter().skip(1))
            .arg("--data-dir")
            .arg(self.root.join("data"))
            .env("TMPDIR", self.root.join("tmp"))
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        self.command(args, env).output().unwrap()
    }

    fn stub(&self) -> String {
        format!("stub.py={}", self.root.join("stub.py").display())
    }

    /// What a call left under its TMPDIR (work folders, VM folders) and in
    /// the data dir's VM records.
    fn leftovers(&self) -> Vec<String> {
        let mut left: Vec<String> = std::fs::read_dir(self.root.join("tmp"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        if let Ok(d) = std::fs::read_dir(self.root.join("data/microvm/vms")) {
            left.extend(d.flatten().map(|e| format!("record {:?}", e.file_name())));
        }
        left
    }

    fn assert_clean(&self, marker: &str) {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let procs = processes_with(marker);
            let left = self.leftovers();
            if procs.is_empty() && left.is_empty() {
                return;
            }
            assert!(
                Instant::now() < until,
                "left behind: processes {procs:?}, files {left:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn code(o: &Output) -> Option<i32> {
    o.status.code()
}

fn microvm_manifest(command: &str) -> String {
    format!("name: vm\ntools:\n  - id: t\n    package: oci:example.invalid/t@sha256:{DIGEST}\n    isolation: microvm\n    container: {{memory_mb: 256, cpus: 1}}\n    command: {command}\n")
}

#[test]
fn plugin_check_names_each_tool_offered_or_left_out() {
    if !ready() {
        return;
    }
    let p = Plugin::new(
        "pcheck",
        &format!("name: acme\ntools:\n  - id: fs\n    command: [mcp-server-filesystem, /work]\n  - id: acme_fetch\n    package: oci:ghcr.io/acme/fetch-mcp@sha256:{DIGEST}\n    isolation: microvm\n    container: {{memory_mb: 512, cpus: 1}}\n    command: [/app/server]\n  - id: boxed\n    package: oci:ghcr.io/acme/boxed@sha256:{DIGEST}\n"),
    );
    let o = p.run(&["check"], &[("OZ0_MICROVM", "off")]);
    let out = stdout(&o);
    assert_eq!(code(&o), Some(1), "{out}{}", stderr(&o));
    assert!(
        out.starts_with(
            "Plugin acme: 3 tool(s); tier 1: proven; MicroVMs: microVMs are turned off"
        ),
        "{out}"
    );
    assert!(
        out.contains("fs: command (tier-1 sandbox): offered"),
        "{out}"
    );
    assert!(
        out.contains("acme_fetch: microvm: tool \"acme_fetch\" is left out: it runs only in a microVM, which this node does not offer (microVMs are turned off (OZ0_MICROVM=off))"),
        "{out}"
    );
    assert!(
        out.contains("boxed: container: tool \"boxed\" is left out: it is a container tool")
            && out.contains("is not among --oci-registry"),
        "{out}"
    );
    let o = p.run(&["check", "--json"], &[("OZ0_MICROVM", "off")]);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["tier1"], true, "{doc}");
    assert_eq!(doc["tools"][0]["offered"], true);
    assert_eq!(doc["tools"][1]["offered"], false);
    assert_eq!(doc["microvm"]["reason"], "off", "{doc}");

    // The smolvm stand-in runs on this node's own kernel: no microVMs,
    // whatever it answers, and it is named unpinned.
    let standin = standin(&p);
    let o = p.run(&["check", "--json"], &[("OZ0_MICROVM", &standin)]);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["microvm"]["ready"], false, "{doc}");
    assert_eq!(doc["microvm"]["pinned"], false, "{doc}");
    assert!(
        doc["tools"][1]["reason"]
            .as_str()
            .unwrap()
            .contains("this node's own kernel"),
        "{doc}"
    );

    // Only command tools, on a node with tier 1: all offered.
    std::fs::write(
        p.dir().join("oz0-plugin.yaml"),
        "tools:\n  - id: fs\n    command: [mcp-server-filesystem, /work]\n",
    )
    .unwrap();
    let o = p.run(&["check"], &[("OZ0_MICROVM", "off")]);
    assert_eq!(code(&o), Some(0), "{}{}", stdout(&o), stderr(&o));

    // A manifest's name reaches the terminal escaped (an OSC 52 here
    // would set the clipboard), and the JSON carries no raw C1 either.
    std::fs::write(
        p.dir().join("oz0-plugin.yaml"),
        "name: \"acme\\e]52;c;aGk=\\a\\u009b2J\"\ntools:\n  - id: fs\n    command: [mcp-server-filesystem, /work]\n",
    )
    .unwrap();
    for args in [&["check"][..], &["check", "--json"][..]] {
        let o = p.run(args, &[("OZ0_MICROVM", "off")]);
        let out = stdout(&o);
        assert_eq!(code(&o), Some(0), "{out}{}", stderr(&o));
        assert!(out.contains("acme"), "{out}");
        assert!(
            !out.contains('\x1b') && !out.contains('\x07') && !out.contains('\u{9b}'),
            "{args:?}: {out:?}"
        );
    }
}

/// `plugin check` tries what `plugin call` needs of a command tool: its
/// server, started in tier 1, must answer. A server the sandbox cannot
/// read (here a script in the caller's folder, which tier 1 does not show)
/// is left out with what the server said, not offered and then failed.
#[test]
fn plugin_check_starts_command_servers_as_a_call_would() {
    if !ready() {
        return;
    }
    let p = Plugin::new("pstart", "tools: []\n");
    let script = p.root.join("stub.py").display().to_string();
    std::fs::write(
        p.dir().join("oz0-plugin.yaml"),
        format!("name: mixed\ntools:\n  - id: fs\n    command: [mcp-server-filesystem, /work]\n  - id: hidden\n    command: [python3, {script}]\n"),
    )
    .unwrap();
    let o = p.run(&["check"], &[("OZ0_MICROVM", "off")]);
    let out = stdout(&o);
    assert_eq!(code(&o), Some(1), "{out}{}", stderr(&o));
    assert!(
        out.contains("fs: command (tier-1 sandbox): offered (its server answered in tier 1 in ")
            && out.contains("lists ")
            && out.contains("read_text_file"),
        "{out}"
    );
    assert!(
        out.contains("hidden: command (tier-1 sandbox): tool \"hidden\" is left out: its server did not answer in the node's tier-1 sandbox: ")
            && out.contains("its stderr ended with: ")
            && out.contains("can't open file"),
        "{out}"
    );
    // The call fails the same way: what check said is what a call meets.
    let o = p.run(&["call", "hidden"], &[]);
    assert_eq!(code(&o), Some(125), "{}", stderr(&o));
    let o = p.run(&["check", "--json"], &[("OZ0_MICROVM", "off")]);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["tools"][0]["offered"], true, "{doc}");
    assert!(
        doc["tools"][0]["server"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty()),
        "{doc}"
    );
    assert_eq!(doc["tools"][1]["offered"], false, "{doc}");
    // --no-start says only what the node has, and says that it did not try.
    let o = p.run(&["check", "--no-start"], &[("OZ0_MICROVM", "off")]);
    let out = stdout(&o);
    assert_eq!(code(&o), Some(0), "{out}{}", stderr(&o));
    assert!(
        out.contains(
            "hidden: command (tier-1 sandbox): offered (its server was not started: --no-start)"
        ),
        "{out}"
    );
    p.assert_clean("stub.py");
}

#[test]
fn bad_manifests_are_refused_with_the_line_and_the_fix() {
    if !ready() {
        return;
    }
    for (manifest, says) in [
        (
            "tools:\n  - id: a\n    command: [x]\n    isolaton: microvm\n",
            "line 4",
        ),
        (
            &microvm_manifest("[/s]").replace("cpus: 1}", "cpus: 1}\n    secrets: [LD_PRELOAD]"),
            "LD_PRELOAD starts with LD_",
        ),
        (
            "tools:\n  - id: a\n    package: oci:ghcr.io/acme/x:latest\n    isolation: microvm\n",
            "has no digest",
        ),
        (
            &microvm_manifest("[/s]").replace("memory_mb: 256", "memory_mb: 64"),
            "memory_mb 64 is out of range",
        ),
        (
            "tools:\n  - id: a\n    command: [x]\n    isolation: microvm\n",
            "needs an image",
        ),
    ] {
        let p = Plugin::new("pbad", manifest);
        let o = p.run(&["check"], &[("OZ0_MICROVM", "off")]);
        assert_eq!(code(&o), Some(1), "{manifest}");
        assert!(stderr(&o).contains(says), "{manifest}: {}", stderr(&o));
        let o = p.run(&["call", "a"], &[("OZ0_MICROVM", "off")]);
        assert_eq!(code(&o), Some(125), "{manifest}");
        assert!(
            stderr(&o).contains("plugin call refused") && stderr(&o).contains(says),
            "{}",
            stderr(&o)
        );
        p.assert_clean("never-started");
    }
    // A manifest that is a symbolic link is not followed.
    let p = Plugin::new("plink", "tools: []\n");
    std::fs::write(
        p.root.join("elsewhere.yaml"),
        "tools:\n  - id: a\n    command: [x]\n",
    )
    .unwrap();
    std::fs::remove_file(p.dir().join("oz0-plugin.yaml")).unwrap();
    std::os::unix::fs::symlink(
        p.root.join("elsewhere.yaml"),
        p.dir().join("oz0-plugin.yaml"),
    )
    .unwrap();
    let o = p.run(&["call", "a"], &[]);
    assert_eq!(code(&o), Some(125));
    assert!(stderr(&o).contains("is not a plain file"), "{}", stderr(&o));
}

/// A manifest whose aliases would expand to 100 GB is refused at its first
/// anchor, by `plugin check` and `plugin call` alike, under a 1 GiB
/// address-space limit that building it would break.
#[test]
fn an_alias_bomb_manifest_is_refused_before_it_is_built() {
    if !sandbox_ready() {
        return;
    }
    let Some(prlimit) = prlimit() else {
        skip("prlimit is not installed (apt-get install util-linux)");
        return;
    };
    let p = Plugin::new("pbomb", &alias_bomb());
    for (args, status, says) in [
        (&["check"][..], 1, ""),
        (&["call", "t"][..], 125, "plugin call refused"),
    ] {
        let o = Command::new(prlimit)
            .args([BOMB_AS_LIMIT, "--"])
            .arg(node())
            .arg("plugin")
            .arg(args[0])
            .arg(p.dir())
            .args(&args[1..])
            .arg("--data-dir")
            .arg(p.root.join("data"))
            .env("TMPDIR", p.root.join("tmp"))
            .env("OZ0_MICROVM", "off")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(code(&o), Some(status), "{args:?}: {err}");
        assert!(
            err.contains(says)
                && err.contains("oz0-plugin.yaml line 2 column")
                && err.contains("an anchor (&name): a manifest takes no anchors or aliases"),
            "{args:?}: {err}"
        );
    }
    p.assert_clean("never-started");
}

#[test]
fn a_command_tool_runs_a_real_mcp_server_in_tier_1() {
    if !ready() {
        return;
    }
    let p = Plugin::new(
        "pfs",
        "name: fs\ntools:\n  - id: fs\n    command: [mcp-server-filesystem, /work]\n  - id: stub\n    command: [python3, /work/.oz0-files/stub.py]\n",
    );
    std::fs::write(p.root.join("hello.txt"), "hello from the caller\n").unwrap();
    let hello = p.root.join("hello.txt").display().to_string();
    // A file of the call, listed and read where _meta names it, by /work.
    let o = p.run(
        &[
            "call",
            "fs",
            "--name",
            "list_directory",
            "--arguments",
            r#"{"path": "/work/.oz0-files"}"#,
            "--file",
            &hello,
        ],
        &[],
    );
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "[FILE] hello.txt\n");
    let o = p.run(
        &[
            "call",
            "fs",
            "--name",
            "read_text_file",
            "--arguments",
            r#"{"path": "/work/.oz0-files/in.txt"}"#,
            "--file",
            &format!("in.txt={hello}"),
            "--json",
        ],
        &[],
    );
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        doc["result"]["content"][0]["text"], "hello from the caller\n",
        "{doc}"
    );
    assert_eq!(doc["outcome"], "exited");
    assert!(doc["phases"]["initialize_ms"].as_u64().is_some(), "{doc}");
    assert!(
        doc["phases"]["backend"]
            .as_str()
            .unwrap()
            .contains("tier-1 sandbox"),
        "{doc}"
    );
    let stub = p.stub();
    let o = p.run(
        &[
            "call",
            "stub",
            "--name",
            "echo",
            "--arguments",
            r#"{"text": "hi"}"#,
            "--file",
            &stub,
            "--file",
            &hello,
            "--json",
        ],
        &[],
    );
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let files = doc["result"]["structuredContent"]["meta"]["oz0/files"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(files.len(), 2, "{doc}");
    assert!(
        files[1]
            .as_str()
            .unwrap()
            .ends_with("/.oz0-files/hello.txt"),
        "{doc}"
    );
    p.assert_clean("mcp-server-filesystem");

    // With --work, the server works in the caller's folder (and only there).
    let work = p.root.join("work");
    std::fs::create_dir(&work).unwrap();
    let write_in = |work: &std::path::Path, name: &str, content: &str| {
        let arguments = serde_json::json!({"path": format!("/work/{name}"), "content": content});
        p.run(
            &[
                "call",
                "fs",
                "--name",
                "write_file",
                "--arguments",
                &arguments.to_string(),
                "--work",
                &work.display().to_string(),
            ],
            &[],
        )
    };
    let o = write_in(&work, "out.txt", "written by the tool");
    assert_eq!(code(&o), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(
        std::fs::read_to_string(work.join("out.txt")).unwrap(),
        "written by the tool"
    );
    // A --work that is, or passes through, a link is refused, as for
    // `sandbox run` (another run may have made a folder on the way a
    // link to the home folder): the server never starts.
    std::os::unix::fs::symlink(&work, p.root.join("via")).unwrap();
    std::fs::create_dir(work.join("sub")).unwrap();
    for linked in [p.root.join("via"), p.root.join("via/sub")] {
        let o = write_in(&linked, "linked.txt", "x");
        assert_ne!(code(&o), Some(0), "{}{}", stdout(&o), stderr(&o));
        assert!(
            stderr(&o).contains("link"),
            "names the link: {}",
            stderr(&o)
        );
        assert!(!work.join("linked.txt").exists() && !work.join("sub/linked.txt").exists());
    }
    let o = p.run(
        &[
            "call",
            "fs",
            "--name",
            "read_text_file",
            "--arguments",
            r#"{"path": "/etc/passwd"}"#,
            "--work",
            &work.display().to_string(),
        ],
        &[],
    );
    assert_eq!(
        code(&o),
        Some(1),
        "the tool's own error: {}{}",
        stdout(&o),
        stderr(&o)
    );
    assert!(
        stdout(&o).contains("outside allowed directories"),
        "{}",
        stdout(&o)
    );
    // A result over the bound is refused whole, never cut.
    std::fs::write(work.join("big.txt"), "x".repeat(1_300_000)).unwrap();
    let o = p.run(
        &[
            "call",
            "fs",
            "--name",
            "read_text_file",
            "--arguments",
            r#"{"path": "/work/big.txt"}"#,
            "--work",
            &work.display().to_string(),
        ],
        &[],
    );
    assert_eq!(code(&o), Some(125), "{}", stderr(&o));
    assert!(stdout(&o).is_empty(), "nothing of a cut result is printed");
    assert!(
        stderr(&o).contains("refused whole, not cut"),
        "{}",
        stderr(&o)
    );
    p.assert_clean("mcp-server-filesystem");
}

/// Starts `plugin call` and waits until a process with `marker` runs.
fn start_call(p: &Plugin, args: &[&str], env: &[(&str, &str)], marker: &str) -> Child {
    let mut child = p.command(args, env).spawn().unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    while processes_with(marker).is_empty() {
        if let Some(st) = child.try_wait().unwrap() {
            let o = child.wait_with_output().unwrap();
            panic!(
                "the call ended ({st}) before its server started: {}",
                stderr(&o)
            );
        }
        assert!(Instant::now() < until, "the server never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The server answered initialize and tools/list, and hangs in the call.
    std::thread::sleep(Duration::from_millis(1500));
    child
}

fn signal(child: &Child, sig: &str) {
    let st = Command::new("kill")
        .args(["-s", sig, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
}

#[test]
fn every_bad_end_of_a_call_is_said_and_leaves_nothing() {
    if !ready() {
        return;
    }
    let m = marker("bad");
    let p = Plugin::new(
        "pends",
        &format!("tools:\n  - id: silent\n    command: [sh, -c, 'sleep 600; :', {m}]\n  - id: garbage\n    command: [sh, -c, 'echo this is not json-rpc; sleep 600; :', {m}]\n  - id: exits\n    command: [sh, -c, 'exit 3']\n  - id: stub\n    command: [python3, /work/.oz0-files/stub.py, {m}]\n  - id: needs\n    command: [x]\n    secrets: [OZ0TEST_NOT_SET]\n"),
    );
    let stub = p.stub();
    for (args, says) in [
        (vec!["call", "silent", "--timeout", "3"], "did not answer initialize in time"),
        (vec!["call", "garbage"], "not JSON-RPC 2.0 during initialize: \"this is not json-rpc\""),
        (vec!["call", "exits"], "output ended during initialize"),
        (vec!["call", "stub", "--name", "nope", "--file", &stub], "does not list tool \"nope\" (it lists: echo, env, eat, hang)"),
        (vec!["call", "needs"], "names the variable OZ0TEST_NOT_SET, and this node's environment has no OZ0TEST_NOT_SET"),
    ] {
        let t = Instant::now();
        let o = p.run(&args, &[]);
        assert_eq!(code(&o), Some(125), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
        assert!(t.elapsed() < Duration::from_secs(20), "{args:?} took {:?}", t.elapsed());
        p.assert_clean(&m);
    }
    // A call cancelled while the tool works: the server is stopped, the
    // status is the signal's.
    for sig in ["TERM", "INT"] {
        let child = start_call(
            &p,
            &["call", "stub", "--name", "hang", "--file", &stub],
            &[],
            &m,
        );
        signal(&child, sig);
        let o = child.wait_with_output().unwrap();
        assert_eq!(
            code(&o),
            Some(if sig == "TERM" { 143 } else { 130 }),
            "{}",
            stderr(&o)
        );
        assert!(stderr(&o).contains("cancelled by signal"), "{}", stderr(&o));
        p.assert_clean(&m);
    }
}

/// The smolvm stand-in in a folder of its own, as a release folder would be.
fn standin(p: &Plugin) -> String {
    let dir = p.root.join("smolvm");
    let _ = std::fs::create_dir(&dir);
    std::fs::write(dir.join("smolvm"), STANDIN).unwrap();
    std::fs::set_permissions(dir.join("smolvm"), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir.display().to_string()
}

/// A microVM tool through the node's real smolvm path: the call works, the
/// node says the VMM is not one it pins, and the VM goes whatever ends it —
/// the end of its input after the call, the tool exiting, a cancelled call,
/// and a node killed mid-call (the next call removes what it left).
#[test]
fn a_microvm_tool_runs_through_the_smolvm_path_and_its_vm_always_goes() {
    if !ready() {
        return;
    }
    let m = marker("vm");
    let p = Plugin::new("psmol", &microvm_manifest("[mcp-server-filesystem, /work]"));
    let smolvm = standin(&p);
    let env = [("OZ0_MICROVM", smolvm.as_str())];
    std::fs::write(p.root.join("hello.txt"), "into the VM\n").unwrap();
    let hello = format!("hello.txt={}", p.root.join("hello.txt").display());
    // The stand-in's "guest" sees the work folder at its host path, so the
    // path is relative to the server's working folder, /work.
    let o = p.run(
        &[
            "call",
            "t",
            "--name",
            "read_text_file",
            "--arguments",
            r#"{"path": ".oz0-files/hello.txt"}"#,
            "--file",
            &hello,
        ],
        &env,
    );
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "into the VM\n");
    assert!(
        stderr(&o).contains("not a release this node pins"),
        "{}",
        stderr(&o)
    );
    p.assert_clean("mcp-server-filesystem");

    // The tool exits before it answers.
    std::fs::write(
        p.dir().join("oz0-plugin.yaml"),
        microvm_manifest("[sh, -c, 'exit 3']"),
    )
    .unwrap();
    let o = p.run(&["call", "t"], &env);
    assert_eq!(code(&o), Some(125), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("output ended during initialize"),
        "{}",
        stderr(&o)
    );
    p.assert_clean(&m);

    // A command holding the monitor script's own separators (which would
    // add a smolvm command line of its own, or drop the VM's removal) is
    // refused before any VM is made; so is a --work through a link.
    std::fs::write(
        p.dir().join("oz0-plugin.yaml"),
        microvm_manifest("[sh, --oz0--, machine, create, --name, x, --net]"),
    )
    .unwrap();
    let o = p.run(&["call", "t"], &env);
    assert_eq!(code(&o), Some(125), "{}", stderr(&o));
    assert!(stderr(&o).contains("is refused"), "{}", stderr(&o));
    std::fs::write(
        p.dir().join("oz0-plugin.yaml"),
        microvm_manifest("[mcp-server-filesystem, /work]"),
    )
    .unwrap();
    let real = p.root.join("vm-work");
    std::fs::create_dir_all(&real).unwrap();
    std::os::unix::fs::symlink(&real, p.root.join("vm-link")).unwrap();
    let linked = p.root.join("vm-link").display().to_string();
    let o = p.run(&["call", "t", "--work", &linked], &env);
    assert_ne!(code(&o), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("link"), "{}", stderr(&o));
    p.assert_clean(&m);

    // A cancelled call stops the VM.
    std::fs::write(
        p.dir().join("oz0-plugin.yaml"),
        microvm_manifest(&format!("[python3, /work/.oz0-files/stub.py, {m}]")),
    )
    .unwrap();
    let stub = p.stub();
    let child = start_call(
        &p,
        &["call", "t", "--name", "hang", "--file", &stub],
        &env,
        &m,
    );
    assert!(
        !p.leftovers().is_empty(),
        "the VM's folder and record while it runs"
    );
    signal(&child, "TERM");
    let o = child.wait_with_output().unwrap();
    assert_eq!(code(&o), Some(143), "{}", stderr(&o));
    p.assert_clean(&m);

    // A node killed mid-call leaves its VM's folder; the next call removes it.
    let mut child = start_call(
        &p,
        &["call", "t", "--name", "hang", "--file", &stub],
        &env,
        &m,
    );
    signal(&child, "KILL");
    let _ = child.wait();
    let until = Instant::now() + Duration::from_secs(20);
    while !processes_with(&m).is_empty() {
        assert!(
            Instant::now() < until,
            "the killed node's server lived on: {:?}",
            processes_with(&m)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let left = p.leftovers();
    assert!(left.iter().any(|l| l.starts_with("oz0-vm-")), "{left:?}");
    let o = p.run(
        &[
            "call",
            "t",
            "--name",
            "echo",
            "--arguments",
            r#"{"text": "again"}"#,
            "--file",
            &stub,
        ],
        &env,
    );
    assert_eq!(
        (code(&o), stdout(&o).as_str()),
        (Some(0), "again\n"),
        "{}",
        stderr(&o)
    );
    // The killed call's own work folder is its caller's to remove; its VM
    // folder and record are gone.
    let left: Vec<String> = p
        .leftovers()
        .into_iter()
        .filter(|l| !l.starts_with("oz0-call-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A microVM tool's secrets reach its server by name only (never on a
/// command line), with its egress the proxy variables are set, and its
/// monitor is held to the tier-1 memory limit of the VM's memory plus the
/// monitor's share: the stand-in's "guest" runs inside the monitor's job.
#[test]
fn a_microvm_tools_secrets_go_by_name_and_its_monitor_has_tier_1_limits() {
    if !ready() {
        return;
    }
    let m = marker("lim");
    let manifest = microvm_manifest(&format!("[python3, /work/.oz0-files/stub.py, {m}]")).replace(
        "cpus: 1}",
        "cpus: 1}\n    secrets: [OZ0TEST_SECRET]\n    egress: [api.example.com]",
    );
    let p = Plugin::new("plim", &manifest);
    let smolvm = standin(&p);
    let secret = format!("s3cret-{m}-value");
    let env = [
        ("OZ0_MICROVM", smolvm.as_str()),
        ("OZ0TEST_SECRET", secret.as_str()),
    ];
    let stub = p.stub();
    let o = p.run(
        &[
            "call",
            "t",
            "--name",
            "env",
            "--arguments",
            r#"{"name": "OZ0TEST_SECRET"}"#,
            "--file",
            &stub,
        ],
        &env,
    );
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    let seen: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(seen["value"], secret.as_str(), "{seen}");
    assert_eq!(seen["proxy"], true, "{seen}");
    // While the server runs, no process has the secret on its command line.
    let child = start_call(
        &p,
        &["call", "t", "--name", "hang", "--file", &stub],
        &env,
        &m,
    );
    assert!(
        processes_with(&secret).is_empty(),
        "the secret is on a command line"
    );
    signal(&child, "TERM");
    let _ = child.wait_with_output().unwrap();
    p.assert_clean(&m);

    // 256 MiB of guest memory: the monitor's job has 256 + 384 MiB.
    let o = p.run(
        &[
            "call",
            "t",
            "--name",
            "eat",
            "--arguments",
            r#"{"mib": 300}"#,
            "--file",
            &stub,
        ],
        &env,
    );
    assert_eq!(
        (code(&o), stdout(&o).as_str()),
        (Some(0), "ate 300 MiB\n"),
        "{}",
        stderr(&o)
    );
    let o = p.run(
        &[
            "call",
            "t",
            "--name",
            "eat",
            "--arguments",
            r#"{"mib": 800}"#,
            "--file",
            &stub,
        ],
        &env,
    );
    assert_eq!(
        code(&o),
        Some(125),
        "over the monitor's memory: {}{}",
        stdout(&o),
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("output ended during tools/call"),
        "{}",
        stderr(&o)
    );
    p.assert_clean(&m);
}
