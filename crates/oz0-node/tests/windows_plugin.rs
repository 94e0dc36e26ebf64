//! Black-box tests of the Windows node's `plugin call`, run under Wine: a
//! command tool's server at tier 0 (no wall) in a job object, only when the
//! caller says `--no-wall`.
//!
//! The server is `examples/mcp_stub.rs` built for Windows
//! (`OZ0_WINDOWS_MCP_STUB`, its `.exe` beside the node's, where the DLL
//! Wine 8.0 lacks is); the rest is `common::wine`'s.

// The tests drive the .exe from a Linux host.
#![cfg(target_os = "linux")]

#[macro_use]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::wine::{win, wine, Wine};
use common::{skip, stderr, stdout, TempDir};
use serde_json::Value;

/// The stub server's Windows path, or a printed reason.
fn stub() -> Option<String> {
    let Some(p) = std::env::var_os("OZ0_WINDOWS_MCP_STUB").map(PathBuf::from) else {
        skip("OZ0_WINDOWS_MCP_STUB is not set: build examples/mcp_stub.rs for x86_64-pc-windows-gnu and name its .exe, beside the node's");
        return None;
    };
    if !p.exists() {
        skip(&format!(
            "OZ0_WINDOWS_MCP_STUB {} does not exist",
            p.display()
        ));
        return None;
    }
    Some(win(&p))
}

/// A plugin folder with `manifest`, and a place for the test's files.
struct Plugin {
    root: TempDir,
}

impl Plugin {
    fn new(manifest: &str) -> Plugin {
        let root = TempDir::new("winplugin");
        std::fs::create_dir(root.0.join("plugin")).unwrap();
        std::fs::write(root.0.join("plugin/oz0-plugin.yaml"), manifest).unwrap();
        Plugin { root }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.0.join(name)
    }

    /// `plugin call PLUGIN ARGS…` under Wine, with `env`.
    fn call(&self, w: &Wine, args: &[&str], env: &[(&str, &str)]) -> Output {
        let dir = win(&self.path("plugin"));
        let mut all = vec!["plugin", "call", dir.as_str()];
        all.extend_from_slice(args);
        w.run(&all, env)
    }

    /// `plugin call PLUGIN stub --no-wall --name MCP --work WORK --file
    /// FILE EXTRA…`, the tool's setting given.
    fn with_file(&self, w: &Wine, mcp: &str, work: &Path, file: &str, extra: &[&str]) -> Output {
        let work = win(work);
        let mut args = vec![
            "stub",
            "--no-wall",
            "--name",
            mcp,
            "--work",
            &work,
            "--file",
            file,
        ];
        args.extend_from_slice(extra);
        self.call(w, &args, &[("OZ0TEST_GREETING", "x")])
    }
}

/// A manifest whose tool `stub` is the stub server, marking `mark` when it
/// starts, with `extra` lines under the tool.
fn manifest(stub: &str, mark: &Path, extra: &str) -> String {
    format!(
        "tools:\n  - id: stub\n    command: ['{stub}', --mark, '{}']\n{extra}",
        win(mark)
    )
}

/// Wine, the stub's Windows path and a folder for its mark, or a printed
/// reason.
fn ready() -> Option<(&'static Wine, String, TempDir)> {
    let (Some(w), Some(stub)) = (wine(), stub()) else {
        return None;
    };
    Some((w, stub, TempDir::new("winplugin-mark")))
}

fn json_of(o: &Output) -> Value {
    serde_json::from_str(&stdout(o)).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

#[test]
fn without_no_wall_or_for_what_needs_a_wall_the_call_is_refused_and_nothing_starts() {
    let Some((w, stub, marks)) = ready() else {
        return;
    };
    let mark = marks.0.join("started");
    let p = Plugin::new(&manifest(&stub, &mark, ""));
    let o = p.call(w, &["stub", "--name", "echo"], &[]);
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(
        stderr(&o)
            .contains("runs tool \"stub\"'s server at tier 0: no wall, with your own permissions")
            && stderr(&o).contains("add --no-wall to run it so, or call it on a Linux node"),
        "{}",
        stderr(&o)
    );
    // What only a wall enforces is refused even with --no-wall.
    let cases = [
        (
            "    egress: [api.example.com]\n",
            "it lists egress hosts, and only a wall's egress proxy holds a server to them",
        ),
        (
            "    package: oci:ghcr.io/acme/x@sha256:0000000000000000000000000000000000000000000000000000000000000000\n    isolation: container\n",
            "a container tool's image runs only in its own root inside tier 1 or gVisor",
        ),
        (
            "    package: oci:ghcr.io/acme/x@sha256:0000000000000000000000000000000000000000000000000000000000000000\n    isolation: microvm\n",
            "it runs only in a microVM, which this node does not offer (a Windows node has none)",
        ),
    ];
    for (extra, want) in cases {
        let p = Plugin::new(&manifest(&stub, &mark, extra));
        let o = p.call(w, &["stub", "--no-wall", "--name", "echo"], &[]);
        assert_eq!(o.status.code(), Some(125), "{extra}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{extra}: {}", stderr(&o));
    }
    assert!(!mark.exists(), "a refused call started its server");
    // Its help says what --no-wall means.
    let o = w.run(&["plugin", "call", "--help"], &[]);
    let h = stdout(&o);
    assert!(
        h.contains("--no-wall") && h.contains("no wall, with your") && h.contains("130 cancelled"),
        "{h}"
    );
}

#[test]
fn a_command_tool_answers_at_tier_0_with_its_files_and_only_its_variables() {
    let Some((w, stub, marks)) = ready() else {
        return;
    };
    let mark = marks.0.join("started");
    let p = Plugin::new(&manifest(
        &stub,
        &mark,
        "    settings: [OZ0TEST_GREETING]\n",
    ));
    let env = [
        ("OZ0TEST_GREETING", "hello from the node"),
        ("OZ0TEST_NOT_LISTED", "kept"),
        ("OZ0_EDGE_TOKEN", "never given"),
    ];

    // echo, as one JSON document: the wall named as none.
    let o = p.call(
        w,
        &[
            "stub",
            "--no-wall",
            "--name",
            "echo",
            "--arguments",
            r#"{"text": "hi there"}"#,
            "--json",
        ],
        &env,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let doc = json_of(&o);
    assert_eq!(doc["outcome"], "exited", "{doc}");
    assert_eq!(doc["result"]["content"][0]["text"], "hi there", "{doc}");
    assert!(
        doc["phases"]["backend"]
            .as_str()
            .is_some_and(|b| b.starts_with("tier 0: no wall")),
        "{doc}"
    );
    assert!(
        stderr(&o).contains("tier 0: no wall: tool \"stub\"'s server runs with your permissions"),
        "{}",
        stderr(&o)
    );
    assert!(mark.exists());

    // Its variables: the tool's setting, nothing else of the node's but
    // the description of its wall.
    let seen = |name: &str| -> Value {
        let args = format!(r#"{{"name": "{name}"}}"#);
        let o = p.call(
            w,
            &["stub", "--no-wall", "--name", "env", "--arguments", &args],
            &env,
        );
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        serde_json::from_str(&stdout(&o)).unwrap()
    };
    let greeting = seen("OZ0TEST_GREETING");
    assert_eq!(greeting["value"], "hello from the node", "{greeting}");
    assert_eq!(
        greeting["oz0"],
        serde_json::json!(["OZ0_SANDBOX"]),
        "{greeting}"
    );
    let other = seen("OZ0TEST_NOT_LISTED");
    assert_eq!(other["value"], Value::Null, "{other}");
    // A setting the environment lacks refuses the call, naming it.
    let o = p.call(w, &["stub", "--no-wall", "--name", "env"], &[]);
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("this node's environment has no OZ0TEST_GREETING"),
        "{}",
        stderr(&o)
    );

    // A file, placed under the work folder's .oz0-files, read back by the
    // server through /work, which stands for the work folder.
    std::fs::write(p.path("data.txt"), "from the caller\n").unwrap();
    let file = format!("data.txt={}", win(&p.path("data.txt")));
    let work = TempDir::new("winplugin-work");
    let o = p.with_file(
        w,
        "read",
        &work.0,
        &file,
        &["--arguments", r#"{"path": "/work/.oz0-files/data.txt"}"#],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "from the caller\n");
    // The call's _meta names it as the server sees it.
    let work2 = TempDir::new("winplugin-work");
    let o = p.with_file(w, "echo", &work2.0, &file, &["--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let doc = json_of(&o);
    assert_eq!(
        doc["result"]["structuredContent"]["meta"]["oz0/files"],
        serde_json::json!([format!("{}\\.oz0-files\\data.txt", win(&work2.0))]),
        "{doc}"
    );
    // A work folder that already has .oz0-files (here a link to elsewhere)
    // refuses the call: nothing is placed through it.
    let elsewhere = TempDir::new("winplugin-elsewhere");
    let work3 = TempDir::new("winplugin-work");
    std::os::unix::fs::symlink(&elsewhere.0, work3.0.join(".oz0-files")).unwrap();
    let o = p.with_file(w, "echo", &work3.0, &file, &[]);
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("cannot place the call's files (.oz0-files)"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_dir(&elsewhere.0).unwrap().count(), 0);
    // A name Windows reads as a device is refused.
    let o = p.call(
        w,
        &[
            "stub",
            "--no-wall",
            "--name",
            "echo",
            "--file",
            &format!("NUL.txt={}", win(&p.path("data.txt"))),
        ],
        &[("OZ0TEST_GREETING", "x")],
    );
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(stderr(&o).contains("names a device"), "{}", stderr(&o));
}

/// `oz0-node.exe ARGS` started, stopped as Ctrl-C does once `mark` (its
/// server's) is there, and waited for (30 s at most).
fn interrupted(w: &Wine, args: &[&str], mark: &Path) -> Output {
    let mut child = w
        .cmd(args, &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    while !mark.exists() {
        assert!(Instant::now() < until, "the server never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    let pid = child.id().to_string();
    let _ = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status();
    let until = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > until {
            let _ = child.kill();
            panic!("Ctrl-C did not end {args:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().unwrap()
}

/// The size of `f`, 0 when it is not there.
fn size(f: &Path) -> u64 {
    std::fs::metadata(f).map_or(0, |m| m.len())
}

#[test]
fn the_call_ends_its_server_and_everything_it_started() {
    let Some((w, stub, marks)) = ready() else {
        return;
    };
    let mark = marks.0.join("started");
    let p = Plugin::new(&manifest(&stub, &mark, ""));

    // A process the server left running is ended with the call's job.
    let work = TempDir::new("winplugin-work");
    let o = p.call(
        w,
        &[
            "stub",
            "--no-wall",
            "--name",
            "linger",
            "--work",
            &win(&work.0),
            "--arguments",
            r#"{"path": "/work/ticks"}"#,
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let ticks = work.0.join("ticks");
    let until = Instant::now() + Duration::from_secs(20);
    while size(&ticks) == 0 {
        assert!(Instant::now() < until, "the lingering process never ticked");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    let before = size(&ticks);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(size(&ticks), before, "the server's child outlived the call");

    // A server that never answers is ended at the call's timeout.
    let started = Instant::now();
    let o = p.call(
        w,
        &["stub", "--no-wall", "--name", "hang", "--timeout", "3"],
        &[],
    );
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the server did not answer tools/call in time (the call's timeout)"),
        "{}",
        stderr(&o)
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );

    // Ctrl-C cancels the call and ends its server.
    std::fs::remove_file(&mark).ok();
    let dir = win(&p.path("plugin"));
    let o = interrupted(
        w,
        &[
            "plugin",
            "call",
            &dir,
            "stub",
            "--no-wall",
            "--name",
            "hang",
        ],
        &mark,
    );
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the call was cancelled (Ctrl-C); its server's job was ended"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn plugin_check_says_which_tools_run_here_and_starts_them_only_with_no_wall() {
    let Some((w, stub, marks)) = ready() else {
        return;
    };
    let mark = marks.0.join("started");
    let digest = "0".repeat(64);
    let p = Plugin::new(&format!(
        "name: mixed\n{}  - id: fetch\n    command: [x.exe]\n    egress: [api.example.com]\n  - id: boxed\n    package: oci:ghcr.io/acme/boxed@sha256:{digest}\n",
        manifest(&stub, &mark, "")
    ));
    let check = |p: &Plugin, extra: &[&str]| {
        let dir = win(&p.path("plugin"));
        let mut args = vec!["plugin", "check", dir.as_str()];
        args.extend_from_slice(extra);
        w.run(&args, &[])
    };
    let o = check(&p, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("Plugin mixed: 3 tool(s); tier 0 (no wall)"),
        "{out}"
    );
    assert_eq!(
        lines[1], "stub: runs here at tier 0 (its server was not started: --no-wall starts it)",
        "{out}"
    );
    assert!(
        lines[2].starts_with("fetch: tool \"fetch\" cannot run on this Windows node")
            && lines[2].contains("egress hosts"),
        "{out}"
    );
    assert!(
        lines[3].starts_with("boxed: tool \"boxed\" cannot run on this Windows node")
            && lines[3].contains("container tool"),
        "{out}"
    );
    assert!(!mark.exists(), "a server was started without --no-wall");

    // With --no-wall each command tool's server is started and asked.
    let broken = format!(
        "{}  - id: gone\n    command: ['C:\\nowhere\\none.exe']\n",
        manifest(&stub, &mark, "")
    );
    let p = Plugin::new(&broken);
    let o = check(&p, &["--no-wall", "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let doc = json_of(&o);
    assert_eq!(doc["tier"], 0, "{doc}");
    assert_eq!(doc["tools"][0]["runs_here"], true, "{doc}");
    assert_eq!(
        doc["tools"][0]["server"]["tools"],
        serde_json::json!(["echo", "read", "env", "linger", "hang"]),
        "{doc}"
    );
    assert!(mark.exists());
    assert_eq!(doc["tools"][1]["runs_here"], false, "{doc}");
    assert!(
        doc["tools"][1]["reason"].as_str().is_some_and(|r| r
            .starts_with("its server did not answer at tier 0")
            && r.contains("none.exe")),
        "{doc}"
    );
    let p = Plugin::new(&manifest(&stub, &mark, ""));
    let o = check(&p, &["--no-wall"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("stub: runs here at tier 0 (its server answered in ")
            && stdout(&o).contains("ms and lists echo, read, env, linger, hang)"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn ctrl_c_ends_a_check_and_the_server_it_waits_for() {
    let Some((w, stub, marks)) = ready() else {
        return;
    };
    let mark = marks.0.join("started");
    let p = Plugin::new(&format!(
        "tools:\n  - id: mute\n    command: ['{stub}', --mark, '{}', mute]\n  - id: never\n    command: ['{stub}', --mark, '{}', mute]\n",
        win(&mark),
        win(&marks.0.join("second"))
    ));
    let dir = win(&p.path("plugin"));
    let o = interrupted(
        w,
        &[
            "plugin",
            "check",
            &dir,
            "--no-wall",
            "--server-timeout",
            "120",
        ],
        &mark,
    );
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the check was cancelled (Ctrl-C)"),
        "{}",
        stderr(&o)
    );
    assert!(
        !marks.0.join("second").exists(),
        "a server was started after Ctrl-C"
    );
}
