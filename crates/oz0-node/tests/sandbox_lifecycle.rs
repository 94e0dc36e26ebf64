//! Black-box tests of `oz0-node sandbox run`: the run's life from the
//! host — its whole process tree ends with it (exit, timeout, a killed or
//! stopped node), its statuses and its status document, its stdio, bad
//! requests refused before anything runs, and the placeholders it leaves
//! behind for no one.

// The Linux node's black-box tests (the Windows node's are windows.rs).
#![cfg(target_os = "linux")]

#[macro_use]
mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{marker, processes_with, stderr, stdout, Env};

fn wait_gone(marker: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if processes_with(marker).is_empty() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Writes a bash script into the work dir, so that the marker appears in the
/// sandboxed processes' command lines and not in `oz0-node`'s.
fn script(env: &Env, body: &str) -> [String; 2] {
    let path = env.work.join("script.sh");
    std::fs::write(&path, body).unwrap();
    ["/bin/bash".to_string(), path.display().to_string()]
}

#[test]
fn no_process_outlives_the_run() {
    ready!();
    let env = Env::new("tree");
    let m = marker("bg");
    // The first process exits at once, leaving daemonised grandchildren.
    let cmd = script(
        &env,
        &format!("(setsid bash -c 'exec -a {m}-a sleep 600' &)\n(exec -a {m}-b sleep 600 &)\nsleep 0.2\nexit 7\n"),
    );
    let out = env.cmd(&[], cmd).output().unwrap();
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    // `sandbox run` returned only after every process was gone: none now.
    assert!(
        processes_with(&m).is_empty(),
        "left behind: {:?}",
        processes_with(&m)
    );
}

#[test]
fn timeout_kills_the_whole_tree() {
    ready!();
    let env = Env::new("timeout");
    let m = marker("to");
    let start = Instant::now();
    let cmd = script(
        &env,
        &format!("(exec -a {m}-a sleep 600 &)\nexec -a {m}-b sleep 600\n"),
    );
    let out = env.cmd(&["--timeout", "1"], cmd).output().unwrap();
    assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    assert!(start.elapsed() < Duration::from_secs(30));
    assert!(stderr(&out).contains("--timeout"), "{}", stderr(&out));
    assert!(processes_with(&m).is_empty(), "left behind");
}

/// Starts a run of two long sleeps and waits until both are up.
fn start_two_sleeps(env: &Env, m: &str, extra: &[&str]) -> std::process::Child {
    let cmd = script(
        env,
        &format!("(exec -a {m}-a sleep 600 &)\nexec -a {m}-b sleep 600\n"),
    );
    let child = env
        .cmd(extra, cmd)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while processes_with(m).len() < 2 {
        assert!(Instant::now() < deadline, "the run did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

#[test]
fn killing_the_node_kills_the_run() {
    ready!();
    let env = Env::new("sigkill");
    let m = marker("kill");
    let mut child = start_two_sleeps(&env, &m, &[]);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(
        wait_gone(&m),
        "left behind after SIGKILL of oz0-node: {:?}",
        processes_with(&m)
    );
}

#[test]
fn sigterm_cancels_and_waits_for_the_tree() {
    ready!();
    let env = Env::new("sigterm");
    let m = marker("term");
    let status_file = env.root.join("status.json");
    let mut child = start_two_sleeps(
        &env,
        &m,
        &["--json-status", &status_file.display().to_string()],
    );
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let st = child.wait().unwrap();
    // Returned only once every process was gone.
    assert!(processes_with(&m).is_empty(), "left behind");
    assert_eq!(
        st.code(),
        Some(137),
        "the run was killed with SIGKILL: 128+9"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&status_file).unwrap()).unwrap();
    assert_eq!(doc["outcome"], "cancelled");
}

#[test]
fn exit_statuses() {
    ready!();
    let env = Env::new("exit");
    assert_eq!(env.sh(&[], "exit 0").status.code(), Some(0));
    assert_eq!(env.sh(&[], "exit 42").status.code(), Some(42));
    assert_eq!(env.sh(&[], "kill -SEGV $$").status.code(), Some(128 + 11));
    let out = env.cmd(&[], ["no-such-command-oz0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(
        stderr(&out).contains("no-such-command-oz0"),
        "{}",
        stderr(&out)
    );
    std::fs::write(env.work.join("noexec"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        env.work.join("noexec"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let out = env.cmd(&[], [env.work.join("noexec")]).output().unwrap();
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
}

#[test]
fn bad_requests_are_refused_and_nothing_runs() {
    ready!();
    let env = Env::new("bad");
    let marker_file = env.work.join("ran");
    let touch = format!("touch {}", marker_file.display());
    let w = env.work.display().to_string();
    let data = env.data.display().to_string();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--work".into(), "relative".into()],
            "not an absolute path",
        ),
        (vec!["--work".into(), format!("{w}/../work")], "\"..\""),
        (
            vec!["--work".into(), format!("{w}/missing")],
            "does not exist",
        ),
        (
            vec![
                "--work".into(),
                w.clone(),
                "--read".into(),
                format!("{data}/identity"),
            ],
            "data directory",
        ),
        (
            vec!["--work".into(), w.clone(), "--read".into(), "/".into()],
            "whole system",
        ),
        (
            vec!["--work".into(), w.clone(), "--write".into(), "/etc".into()],
            "system path",
        ),
        (
            vec!["--work".into(), w.clone(), "--timeout".into(), "0".into()],
            "between 1",
        ),
        (
            vec![
                "--work".into(),
                w.clone(),
                "--memory".into(),
                "64".into(),
                "--cgroup-root".into(),
                "/sys/fs/cgroup/pids".into(),
            ],
            "need a job",
        ),
        (
            vec![
                "--work".into(),
                w.clone(),
                "--bwrap".into(),
                "/nonexistent/bwrap".into(),
            ],
            "apt-get install bubblewrap",
        ),
    ];
    for (args, want) in cases {
        let out = Command::new(common::node())
            .args(["sandbox", "run", "--data-dir", &data])
            .args(&args)
            .args(["--", "/bin/sh", "-c", &touch])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(want), "{args:?}: {}", stderr(&out));
        assert_eq!(
            stderr(&out).lines().count(),
            1,
            "one line: {}",
            stderr(&out)
        );
        assert!(!marker_file.exists(), "{args:?}: the command ran");
    }
    // A symlinked work dir is named by its real path instead.
    let link = env.root.join("worklink");
    std::os::unix::fs::symlink(&env.work, &link).unwrap();
    let out = Command::new(common::node())
        .args(["sandbox", "run", "--data-dir", &data, "--work"])
        .arg(&link)
        .args(["--", "/bin/sh", "-c", &touch])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));
    // Non-UTF-8 paths are refused.
    use std::os::unix::ffi::OsStrExt;
    let out = Command::new(common::node())
        .args(["sandbox", "run", "--data-dir", &data, "--work"])
        .arg(std::ffi::OsStr::from_bytes(b"/tmp/\xff"))
        .args(["--", "/bin/sh", "-c", &touch])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("UTF-8"), "{}", stderr(&out));
    assert!(!marker_file.exists());
    // Usage errors are 2.
    let out = Command::new(common::node())
        .args(["sandbox", "run", "--no-such-flag"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn json_status_reports_what_was_enforced() {
    ready!();
    let env = Env::new("status");
    let status_file = env.root.join("s.json");
    let out = env.sh(
        &["--json-status", &status_file.display().to_string()],
        "exit 3",
    );
    assert_eq!(out.status.code(), Some(3));
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&status_file).unwrap()).unwrap();
    assert_eq!(doc["schema"], 1);
    assert_eq!(doc["outcome"], "exited");
    assert_eq!(doc["exit_code"], 3);
    assert_eq!(doc["enforced"]["no_new_privs"], true);
    let ns: Vec<String> = serde_json::from_value(doc["enforced"]["namespaces"].clone()).unwrap();
    for n in ["user", "pid", "net", "ipc", "uts", "cgroup"] {
        assert!(ns.contains(&n.to_string()), "{n}");
    }
    let ll = &doc["enforced"]["landlock"];
    let abi = oz0_sys_landlock_abi();
    if abi > 0 {
        assert_eq!(ll["enforced"], "full", "{doc}");
        assert_eq!(ll["kernel_abi"], abi);
    } else {
        assert_eq!(ll["enforced"], "none", "{doc}");
    }
    // A refused run is recorded too (replacing the status of the last run).
    let out = env.sh(
        &[
            "--json-status",
            &status_file.display().to_string(),
            "--read",
            "relative/path",
        ],
        "true",
    );
    assert_eq!(out.status.code(), Some(125));
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&status_file).unwrap()).unwrap();
    assert_eq!(doc["outcome"], "sandbox_error");
    assert_eq!(doc["exit_code"], 125);
    assert!(
        doc["reason"].as_str().unwrap().contains("relative/path"),
        "{doc}"
    );
}

fn oz0_sys_landlock_abi() -> u64 {
    // Ask the binary itself, outside any sandbox.
    let out = Command::new(common::node())
        .args(["sandbox", "probe", "--no-syscalls"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["landlock_abi"].as_u64().unwrap()
}

#[test]
fn stdin_and_stdout_are_the_callers() {
    ready!();
    let env = Env::new("stdio");
    let mut child = env
        .cmd(&[], ["/bin/cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"hello through the sandbox\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(stdout(&out), "hello through the sandbox\n");
}

/// Folder placeholders move in from the node's fresh folders (in its data
/// directory, on the same mount as the work folder here) and out to its
/// used ones after the run, never back; file placeholders move in from its
/// fresh files and are removed in place after the run: the work folder is
/// left as it was, a run sees each one as an empty read-only folder, and
/// nothing that was a placeholder is a fresh one again.
#[test]
fn placeholders_come_from_the_pool_and_go_back() {
    ready!();
    let env = Env::new("pool");
    let pool = env.data.join("placeholder-pool");
    let names = |sub: &str| -> Vec<String> {
        std::fs::read_dir(pool.join(sub))
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let folders = 8; // the folder kinds among the protected names
    let files = 11; // and the file kinds
    let mut used_before: Vec<String> = Vec::new();
    let mut files_before = names("fresh-files");
    for round in 0..3 {
        let out = env.sh(
            &[],
            "test -d .claude && ! ls -A .claude | grep -q . && echo claude=empty-folder; \
             touch .claude/x 2>/dev/null && echo claude=written; true",
        );
        let text = stdout(&out);
        assert!(
            text.contains("claude=empty-folder"),
            "round {round}: {text} {}",
            stderr(&out)
        );
        assert!(!text.contains("claude=written"), "round {round}: {text}");
        assert_eq!(
            std::fs::read_dir(&env.work).unwrap().count(),
            0,
            "round {round}: the work folder is not as it was"
        );
        let (fresh, used) = (names("fresh"), names("used"));
        assert!(
            used.iter().all(|n| pool.join("used").join(n).is_dir()),
            "round {round}: a file put aside: {used:?}"
        );
        assert_eq!(used.len(), folders, "round {round}: folders put aside");
        // File placeholders: fresh files taken (after the first run, whose
        // pool was empty), none given back, the pool tended back up.
        let fresh_files = names("fresh-files");
        let taken = files_before
            .iter()
            .filter(|n| !fresh_files.contains(n))
            .count();
        assert_eq!(
            taken,
            if round == 0 { 0 } else { files },
            "round {round}: fresh files taken"
        );
        assert!(fresh_files.len() >= files, "round {round}: fresh files");
        for f in &fresh_files {
            let m = std::fs::symlink_metadata(pool.join("fresh-files").join(f)).unwrap();
            assert!(m.is_file() && m.len() == 0, "round {round}: fresh file {f}");
        }
        assert!(
            fresh.len() >= folders,
            "round {round}: {} fresh folders",
            fresh.len()
        );
        // A folder once put aside is gone by the next run (removed with
        // what was written into it), never fresh again.
        for n in &used_before {
            assert!(
                !fresh.contains(n) && !fresh_files.contains(n) && !used.contains(n),
                "round {round}: {n} came back"
            );
        }
        for f in &fresh {
            assert_eq!(
                std::fs::read_dir(pool.join("fresh").join(f))
                    .unwrap()
                    .count(),
                0
            );
        }
        // Written into after its run, as a run that kept it open could.
        for n in &used {
            std::fs::write(pool.join("used").join(n).join("planted"), "x").unwrap();
        }
        used_before = used;
        files_before = fresh_files;
    }
}

#[test]
fn placeholders_of_a_killed_node_are_swept_at_the_next_run() {
    ready!();
    let env = Env::new("sweep");
    let m = marker("sweep");
    let mut child = start_two_sleeps(&env, &m, &[]);
    // While the run lasts, the missing protected names are held.
    assert!(env.work.join(".claude").is_dir());
    assert!(env.work.join(".mcp.json").is_file());
    child.kill().unwrap(); // SIGKILL: no clean-up by this node
    child.wait().unwrap();
    assert!(wait_gone(&m));
    assert!(
        env.work.join(".mcp.json").exists(),
        "left behind by the killed node"
    );
    // The next run, in any work dir, sweeps what the dead node left.
    let other = Env::new("sweep2");
    let out = other.sh(&[], "true");
    assert!(out.status.success(), "{}", stderr(&out));
    for n in [".claude", ".mcp.json", ".bashrc", ".vscode"] {
        assert!(!env.work.join(n).exists(), "{n} was not swept");
    }
}
