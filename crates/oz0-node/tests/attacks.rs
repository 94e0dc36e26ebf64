//! Black-box tests of `oz0-node sandbox run` under attack: a command inside
//! the run (or a second run beside it) goes after the edges between what
//! the node does on the host and what the run controls — its work folder,
//! `/proc` of the run's own helpers, its stderr, concurrent runs, the host's
//! git. Each test fails on a node that breaks the promise it names; a race
//! is run hundreds of times and its count printed.

mod common;

use std::path::Path;
use std::process::Stdio;

use common::{marker, processes_with, stderr, Env};

macro_rules! ready {
    () => {
        if !common::sandbox_ready() {
            return;
        }
    };
}

/// Runs `cmd` with `--json-status` and returns the status document and the
/// process's output.
fn run_with_status(
    env: &Env,
    extra: &[&str],
    cmd: &[&str],
) -> (serde_json::Value, std::process::Output) {
    let status = env.root.join(&format!("status-{}.json", marker("st")));
    let mut args = vec!["--json-status", status.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = env.cmd(&args, cmd).output().unwrap();
    let doc = std::fs::read(&status)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_else(|| panic!("no status document; stderr: {}", stderr(&out)));
    (doc, out)
}

/// The run ends when its command ends, even when the command left the
/// stage's process group or session (`setsid`, `timeout`): the run's init
/// reaps every child, and a background process the command started is
/// killed with the run, never left reaching forwarded ports.
#[test]
fn the_run_ends_with_its_command_whatever_its_session() {
    ready!();
    let env = Env::new("setsid");
    let m = marker("bg");
    let scripts = [
        "exec setsid true".to_string(),
        "exec timeout 5 true".to_string(),
        format!("setsid /bin/sh -c 'sleep 60; : {m}' & exec setsid true"),
    ];
    for script in &scripts {
        let (doc, out) = run_with_status(&env, &["--timeout", "30"], &["/bin/sh", "-c", script]);
        assert_eq!(
            doc["outcome"],
            "exited",
            "{script}: the run did not end with its command: {doc}\n{}",
            stderr(&out)
        );
        assert_eq!(doc["exit_code"], 0, "{script}: {doc}");
    }
    assert!(
        processes_with(&m).is_empty(),
        "a background process of the run outlived it"
    );
}

/// The run's init (the stage, pid 1) is undumpable from its first step:
/// a command that opens `/proc/1/mem` for writing the moment it starts,
/// again and again, never gets it. Raced over many runs.
#[test]
fn the_stage_is_never_reachable_through_proc_mem() {
    ready!();
    let env = Env::new("pid1mem");
    let runs = 200;
    let mut opened = 0;
    for _ in 0..runs {
        let out = env
            .cmd(
                &[],
                [
                    "/oz0/oz0-node",
                    "sandbox",
                    "probe",
                    "--no-syscalls",
                    "--open-rw",
                    "/proc/1/mem",
                    "--repeat-ms",
                    "5",
                ],
            )
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        if r["open_rw"]["/proc/1/mem"] == "ok" {
            opened += 1;
        }
    }
    eprintln!("race: /proc/1/mem opened for writing in {opened} of {runs} runs");
    assert_eq!(opened, 0, "the stage's memory was writable from the run");
}

#[allow(dead_code)]
fn exists(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}
