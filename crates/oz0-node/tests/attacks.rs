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

/// `--json-status` is written without following a link a run left: a run
/// plants links at every name the node might use for its temporary file
/// (for each likely pid) and at the document's own name, pointing at a
/// file of the node's user outside the run; the next run's status lands in
/// its own file and the victim is untouched.
#[test]
fn json_status_never_follows_a_link_a_run_left() {
    ready!();
    let env = Env::new("statuslink");
    let victim = env.root.join("victim");
    std::fs::write(&victim, "the user's file").unwrap();
    let last: u32 = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let plant = format!(
        "import os\nfor p in range({}, {}):\n    os.symlink({v:?}, 'status.tmp-%d' % p)\n    os.symlink({v:?}, '.status.json.%016x.tmp' % p)\nos.symlink({v:?}, 'status.json')\n",
        last + 1,
        last + 3000,
        v = victim.to_str().unwrap()
    );
    let out = env
        .cmd(&[], ["/usr/bin/python3", "-c", &plant])
        .output()
        .unwrap();
    assert!(out.status.success(), "planting: {}", stderr(&out));
    let status = env.work.join("status.json");
    let out = env
        .cmd(&["--json-status", status.to_str().unwrap()], ["/bin/true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        std::fs::read_to_string(&victim).unwrap() == "the user's file",
        "the status document was written through a link the run left"
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&status).unwrap()).unwrap();
    assert_eq!(doc["outcome"], "exited");
    assert!(!std::fs::symlink_metadata(&status)
        .unwrap()
        .file_type()
        .is_symlink());
}

/// `--env-file` never follows a link: a run leaves `.env` as a link to a
/// secret of the node's user; the next run that is given that `.env` is
/// refused, and the secret reaches no run.
#[test]
fn env_file_never_follows_a_link_a_run_left() {
    ready!();
    let env = Env::new("envlink");
    let secret = env.root.join("credentials");
    std::fs::write(&secret, "STOLEN=the-users-secret\n").unwrap();
    let out = env
        .cmd(&[], ["/bin/ln", "-s", secret.to_str().unwrap(), ".env"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let dotenv = env.work.join(".env");
    let out = env
        .cmd(
            &["--env-file", dotenv.to_str().unwrap()],
            ["/bin/sh", "-c", "echo \"[$STOLEN]\""],
        )
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("the-users-secret"),
        "the secret reached the run through the link"
    );
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));
}

/// The run's memory file systems have a size whether or not `--memory` is
/// given: by default 1024 MiB and 131072 files each (its `/tmp` and its
/// `/dev`, which holds `/dev/shm`), and `--tmp-size` sets it; writing past
/// it fails with ENOSPC instead of filling the machine's memory.
#[test]
fn tmp_and_dev_shm_have_a_size_without_memory_limit() {
    ready!();
    let env = Env::new("tmpsize");
    let df = "for d in /tmp /dev/shm; do df -k -P $d | tail -1 | awk '{print $2}'; df -i -P $d | tail -1 | awk '{print $2}'; done";
    let out = env.sh(&[], df);
    assert!(out.status.success(), "{}", stderr(&out));
    let got: Vec<u64> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(
        got,
        vec![1024 * 1024, 131072, 1024 * 1024, 131072],
        "df said {got:?}"
    );
    for dir in ["/tmp", "/dev/shm"] {
        let out = env.sh(
            &["--tmp-size", "8"],
            &format!("head -c 16777216 /dev/zero > {dir}/fill 2>/dev/null; echo $?; du -k {dir}/fill | cut -f1"),
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut lines = text.lines();
        assert_ne!(lines.next(), Some("0"), "{dir}: 16 MiB fitted in 8: {text}");
        let kib: u64 = lines.next().unwrap_or("0").trim().parse().unwrap();
        assert!(kib <= 8 * 1024, "{dir} held {kib} KiB under --tmp-size 8");
    }
}

#[allow(dead_code)]
fn exists(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}
