//! Black-box tests of `oz0-node sandbox run` under attack: a command inside
//! the run (or a second run beside it) goes after the edges between what
//! the node does on the host and what the run controls — its work folder,
//! `/proc` of the run's own helpers, its stderr, concurrent runs, the host's
//! git. Each test fails on a node that breaks the promise it names; a race
//! is run hundreds of times and its count printed.

// The Linux node's black-box tests (the Windows node's are windows.rs).
#![cfg(target_os = "linux")]

#[macro_use]
mod common;

use std::path::Path;
use std::process::Stdio;

use common::{marker, processes_with, stderr, Env};

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

/// A run that writes a status document of its own where `--json-status`
/// points and makes the folder unwritable does not pass it off as the
/// node's: the node cannot write its own, and says so with status 123,
/// never the command's 0.
#[test]
fn a_status_document_the_run_forged_is_never_the_runs_word() {
    ready!();
    let env = Env::new("statusforge");
    let folder = env.work.join("out");
    std::fs::create_dir(&folder).unwrap();
    let status = folder.join("status.json");
    let out = env
        .cmd(
            &["--json-status", status.to_str().unwrap()],
            [
                "/bin/sh",
                "-c",
                r#"echo '{"outcome":"exited","exit_code":0,"git":{}}' > out/status.json && chmod 555 out"#,
            ],
        )
        .output()
        .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    assert_eq!(out.status.code(), Some(123), "{}", stderr(&out));
    assert!(stderr(&out).contains("not this run's"), "{}", stderr(&out));
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

/// Two runs never share a writable folder at once: the second run in a
/// work folder (or with it as a `--write` folder) that a live run holds is
/// refused before anything runs, instead of sharing — and then losing — the
/// first run's read-only placeholders; once the first has ended, the folder
/// is free again.
#[test]
fn a_writable_folder_is_held_by_one_run_at_a_time() {
    ready!();
    let env = Env::new("shared");
    let mut first = env
        .cmd(&[], ["/bin/sh", "-c", "echo started; exec sleep 30"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(first_line(&mut first), "started\n");
    let other = common::TempDir::new("other");
    for extra in [vec![], vec!["--write", env.work.to_str().unwrap()]] {
        let mut c = if extra.is_empty() {
            env.cmd(&[], ["/bin/sh", "-c", "echo x > .bashrc; echo ran"])
        } else {
            let mut c = std::process::Command::new(common::node());
            c.args(["sandbox", "run", "--work"])
                .arg(&other.0)
                .arg("--data-dir")
                .arg(&env.data)
                .args(&extra)
                .args(["--", "/bin/sh", "-c", "echo ran"]);
            c
        };
        let out = c.output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(125),
            "a second run shared a live run's folder ({extra:?}): {}",
            stderr(&out)
        );
        assert!(
            stderr(&out).contains("another run is using"),
            "{}",
            stderr(&out)
        );
        assert!(!String::from_utf8_lossy(&out.stdout).contains("ran"));
    }
    let _ = first.kill();
    let _ = first.wait();
    // The node's end let the folder go.
    let out = env.sh(&[], "echo ran");
    assert!(out.status.success(), "{}", stderr(&out));
    // No placeholder was left holding a name, and nothing was planted.
    assert!(!exists(&env.work.join(".bashrc")));
}

/// A run cannot get a host folder bound into another run by swapping a
/// link in while the other starts: run A loops `renameat2(RENAME_EXCHANGE)`
/// on a folder that run B is given (`--read`, `--write`, `--work`), with a
/// link to a secret folder of the node's user (a stand-in for `~/.ssh`).
/// B either runs with its own folder or is refused; it never sees the
/// secret. Raced hundreds of times per flag, and counted.
#[test]
fn a_link_swapped_in_during_start_never_binds_another_folder() {
    ready!();
    let env = Env::new("swap");
    let secret = env.root.join("dot-ssh");
    std::fs::create_dir(&secret).unwrap();
    std::fs::write(secret.join("id_ed25519"), "PRIVATE-KEY").unwrap();
    let arena = env.work.join("arena");
    std::fs::create_dir(&arena).unwrap();
    let target = arena.join("target");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("id_ed25519"), "decoy").unwrap();
    // Run A: exchanges arena/target (a folder) and arena/link (a link to the
    // secret) as fast as it can.
    let swap = format!(
        "import ctypes, os\nos.symlink({s:?}, 'arena/link')\nlibc = ctypes.CDLL(None, use_errno=True)\nprint('swapping', flush=True)\nwhile True:\n    libc.syscall(316, -100, b'arena/target', -100, b'arena/link', 2)\n",
        s = secret.to_str().unwrap()
    );
    let mut attacker = env
        .cmd(&["--timeout", "600"], ["/usr/bin/python3", "-c", &swap])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(
        first_line(&mut attacker),
        "swapping\n",
        "the attacking run did not start"
    );
    let t = target.to_str().unwrap();
    let victim_data = common::TempDir::new("victim-data");
    let victim_work = common::TempDir::new("victim-work");
    let cases: [(&str, usize); 3] = [("--read", 300), ("--write", 200), ("--work", 200)];
    let mut leaked = Vec::new();
    for (flag, runs) in cases {
        let (mut ran, mut refused) = (0, 0);
        for _ in 0..runs {
            let mut c = std::process::Command::new(common::node());
            c.args(["sandbox", "run", "--data-dir"]).arg(&victim_data.0);
            let read = format!("cat {t}/id_ed25519");
            if flag == "--work" {
                c.args(["--work", t, "--", "/bin/sh", "-c", "cat id_ed25519"]);
            } else {
                c.arg("--work")
                    .arg(&victim_work.0)
                    .args([flag, t, "--", "/bin/sh", "-c", &read]);
            }
            let out = c.stdin(Stdio::null()).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            if text.contains("PRIVATE-KEY") {
                leaked.push(flag);
            } else if out.status.success() {
                ran += 1;
            } else {
                assert_eq!(out.status.code(), Some(125), "{flag}: {}", stderr(&out));
                refused += 1;
            }
        }
        eprintln!(
            "race {flag}: {runs} runs against the swapping run: {ran} ran with their own folder, {refused} refused, {} saw the secret",
            leaked.iter().filter(|f| **f == flag).count()
        );
    }
    let _ = attacker.kill();
    let _ = attacker.wait();
    assert!(
        leaked.is_empty(),
        "the secret folder was bound into runs: {leaked:?}"
    );
}

/// Reads one line from a child's stdout.
fn first_line(child: &mut std::process::Child) -> String {
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    line
}

/// A placeholder folder is never handed to another run once a run could
/// reach it: run A, whose `--work` holds run B's work folder, keeps
/// descriptors of B's placeholder folders and writes agents' settings into
/// them after B ended; a later run C in an unrelated folder gets no planted
/// file — during its run or after — however the node reuses folders.
#[test]
fn a_placeholder_folder_another_run_kept_open_is_never_reused() {
    ready!();
    let env = Env::new("poolplant");
    let b_work = env.work.join("b");
    std::fs::create_dir(&b_work).unwrap();
    let data = env.data.to_str().unwrap().to_string();
    let run = |work: &Path, cmd: &[&str]| {
        let mut c = std::process::Command::new(common::node());
        c.args(["sandbox", "run", "--data-dir", &data, "--work"])
            .arg(work)
            .arg("--")
            .args(cmd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        c
    };
    // Warm the pool the way a node that ran before does.
    let warm = common::TempDir::new("warm");
    assert!(run(&warm.0, &["/bin/true"]).status().unwrap().success());
    let mut b = run(&b_work, &["/bin/sh", "-c", "echo up; exec sleep 2"])
        .spawn()
        .unwrap();
    assert_eq!(first_line(&mut b), "up\n");
    let names = [
        ".codex", ".claude", ".vscode", ".cursor", ".gemini", ".agents", ".idea", ".oz0",
    ];
    let plant = format!(
        "import os, time\nnames = {names:?}\nfds = [os.open('b/' + n, os.O_RDONLY | os.O_DIRECTORY) for n in names]\nprint('held', flush=True)\nwhile os.path.exists('b/.codex'):\n    time.sleep(0.01)\ntime.sleep(0.2)\nfor fd in fds:\n    f = os.open('settings.json', os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd)\n    os.write(f, b'{{\"planted\": true}}')\n    os.close(f)\nprint('planted', flush=True)\n"
    );
    let mut a = env
        .cmd(&[], ["/usr/bin/python3", "-c", &plant])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(first_line(&mut a), "held\n");
    assert!(b.wait().unwrap().success());
    let out = a.wait_with_output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("planted"),
        "the keeping run could not write: {}",
        stderr(&out)
    );
    // Run C, elsewhere: its placeholders, seen from the host while it runs,
    // are empty, and after it nothing is left in its folder.
    let c_work = common::TempDir::new("unrelated");
    let mut c = run(&c_work.0, &["/bin/sh", "-c", "echo up; exec sleep 1"])
        .spawn()
        .unwrap();
    assert_eq!(first_line(&mut c), "up\n");
    let mut planted = Vec::new();
    for n in names {
        let d = c_work.join(n);
        if std::fs::read_dir(&d).map(|e| e.count()).unwrap_or(0) > 0 {
            planted.push(d.display().to_string());
        }
    }
    assert!(c.wait().unwrap().success());
    let left: Vec<_> = std::fs::read_dir(&c_work.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        planted.is_empty(),
        "another run's planted folders were handed to run C: {planted:?}"
    );
    assert!(left.is_empty(), "left in run C's folder: {left:?}");
}

/// Node processes of one user that share a data directory (many runs at
/// once) never hand each other a placeholder folder, and never warn of a
/// write into one that no one made. 200 runs, 8 at a time, each in folders
/// of its own (a work folder and four `--write` folders: 40 folder
/// placeholders a run, moved in from and out to the shared pool while the
/// other runs tend it). While each runs, its placeholder folders, seen from
/// the host, are folders no other run had (inode and birth time); after
/// it, nothing is left in its folders.
#[test]
fn runs_sharing_the_placeholder_pool_share_no_folder_and_warn_of_no_write() {
    use std::collections::HashMap;
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    ready!();
    const RUNS: usize = 200;
    const AT_ONCE: usize = 8;
    const FOLDERS: usize = 5;
    const NAMES: [&str; 8] = [
        ".oz0", ".codex", ".claude", ".agents", ".vscode", ".idea", ".cursor", ".gemini",
    ];
    let env = Env::new("poolrace");
    // The pool moves folders only within one mount.
    assert_eq!(
        std::fs::metadata(&env.data).unwrap().dev(),
        std::fs::metadata(&env.root.0).unwrap().dev()
    );
    let next = AtomicUsize::new(0);
    // (inode, birth time) of each placeholder folder seen, and its run.
    let seen = Mutex::new(HashMap::new());
    let problems = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..AT_ONCE {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= RUNS {
                    break;
                }
                let dirs: Vec<_> = (0..FOLDERS)
                    .map(|k| env.root.join(&format!("run{i}-{k}")))
                    .collect();
                let mut c = std::process::Command::new(common::node());
                c.args(["sandbox", "run", "--data-dir"]).arg(&env.data);
                for (k, d) in dirs.iter().enumerate() {
                    std::fs::create_dir(d).unwrap();
                    c.arg(if k == 0 { "--work" } else { "--write" }).arg(d);
                }
                let mut child = c
                    .args(["--", "/bin/sh", "-c", "echo up; read _"])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                let up = first_line(&mut child) == "up\n";
                let mut found = 0;
                for n in dirs.iter().flat_map(|d| NAMES.map(|n| d.join(n))) {
                    let Ok(m) = std::fs::symlink_metadata(&n) else {
                        continue;
                    };
                    found += 1;
                    let born = m.created().expect("the file system tells birth times");
                    if let Some(j) = seen.lock().unwrap().insert((m.ino(), born), i) {
                        problems.lock().unwrap().push(format!(
                            "{}: run {i} got the folder run {j} had",
                            n.display()
                        ));
                    }
                }
                let _ = child.stdin.take().unwrap().write_all(b"\n");
                let out = child.wait_with_output().unwrap();
                let mut p = problems.lock().unwrap();
                if !up || !out.status.success() || found != FOLDERS * NAMES.len() {
                    p.push(format!(
                        "run {i}: started {up}, {found} placeholder folders, {}: {}",
                        out.status,
                        stderr(&out)
                    ));
                }
                p.extend(
                    stderr(&out)
                        .lines()
                        .filter(|l| l.contains("placeholder"))
                        .map(|l| format!("run {i}: {l}")),
                );
                for d in &dirs {
                    let left = std::fs::read_dir(d).unwrap().count();
                    if left > 0 {
                        p.push(format!("{}: {left} entries left", d.display()));
                    }
                }
            });
        }
    });
    let problems = problems.into_inner().unwrap();
    eprintln!(
        "race: {RUNS} runs, {AT_ONCE} at once, {} placeholder folders: {} problems",
        seen.into_inner().unwrap().len(),
        problems.len()
    );
    assert!(problems.is_empty(), "{problems:#?}");
}

/// A process the command leaves behind never sees a protected name free:
/// the placeholders go before the run's end only when the stage, its init,
/// says no other process of the run is left, and otherwise once the
/// kernel has ended them all. Here the command ends at once and leaves a
/// loop of the shell's builtins writing `.bashrc` and `.mcp.json` as fast
/// as it can; had a placeholder gone while the loop lived, the write would
/// land in the host's work folder.
#[test]
fn a_process_left_behind_never_sees_a_placeholder_go() {
    ready!();
    const RUNS: usize = 40;
    let env = Env::new("leftbehind");
    let script =
        "(while :; do echo planted > .bashrc; echo planted > .mcp.json; done) 2>/dev/null & \
                  sleep 0.05; exit 0";
    for round in 0..RUNS {
        let out = env.sh(&[], script);
        assert!(out.status.success(), "round {round}: {}", stderr(&out));
        for name in [".bashrc", ".mcp.json"] {
            assert!(
                !exists(&env.work.join(name)),
                "round {round}: {name} was written in the host's work folder after its placeholder went: {:?}",
                std::fs::read_to_string(env.work.join(name))
            );
        }
    }
    eprintln!(
        "race: {RUNS} runs, each leaving a writer behind: no placeholder went while it lived"
    );
}

/// The egress bridge is out of the command's reach: it runs as the same
/// user in the same run, but the command can neither open its memory
/// through `/proc` (to write code into it), nor read its environment, nor
/// list its descriptors.
#[test]
fn the_egress_bridge_is_out_of_the_commands_reach() {
    ready!();
    let env = Env::new("bridge");
    let out = env
        .cmd(
            &["--allow", "example.com"],
            [
                "/bin/sh",
                "-c",
                "cat /proc/2/comm; exec /oz0/oz0-node sandbox probe --no-syscalls --open-rw /proc/2/mem --read /proc/2/environ --list /proc/2/fd",
            ],
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (comm, report) = text.split_once('\n').unwrap();
    assert_eq!(comm, "oz0-node", "pid 2 is not the bridge");
    let r: serde_json::Value = serde_json::from_str(report).unwrap();
    for (what, v) in [
        ("its memory", &r["open_rw"]["/proc/2/mem"]),
        ("its environment", &r["read"]["/proc/2/environ"]),
        ("its descriptors", &r["list"]["/proc/2/fd"]),
    ] {
        assert!(
            v.as_str().is_some_and(|e| e.starts_with('E')),
            "the command reached the bridge's {what}: {r}"
        );
    }
}

/// The egress audit trail is written where the run cannot write: a command
/// that prints a forged `oz0-egress` record on its stderr adds nothing to
/// the trail, which holds exactly the proxy's decisions for the run; and
/// nothing in the run names the run's id or a host folder of the node.
#[test]
fn audit_records_cannot_be_forged_and_the_run_id_is_not_inside() {
    ready!();
    let env = Env::new("audit");
    let (doc, out) = run_with_status(
        &env,
        &["--allow", "example.com"],
        &[
            "/bin/sh",
            "-c",
            "echo 'oz0-egress {\"ts_ms\":1,\"run\":\"forged\",\"decision\":\"allow\",\"status\":200}' >&2; \
             /oz0/oz0-node sandbox probe --no-syscalls --proxy-get http://blocked.invalid/ > probe.json; \
             cat /proc/self/mountinfo > mountinfo; env > environ",
        ],
    );
    assert_eq!(doc["outcome"], "exited", "{doc}\n{}", stderr(&out));
    let run_id = doc["run_id"].as_str().unwrap().to_string();
    let log = env.data.join("egress-audit.jsonl");
    let trail = std::fs::read_to_string(&log)
        .unwrap_or_else(|e| panic!("no audit log at {}: {e}", log.display()));
    let recs: Vec<serde_json::Value> = trail
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(recs.len(), 1, "{trail}");
    assert_eq!(recs[0]["run"], run_id.as_str(), "{trail}");
    assert_eq!(recs[0]["status"], 403, "{trail}");
    assert_eq!(
        doc["enforced"]["egress"]["audit_log"],
        log.to_str().unwrap()
    );
    for f in ["mountinfo", "environ"] {
        let inside = std::fs::read_to_string(env.work.join(f)).unwrap();
        for secret in [run_id.as_str(), "oz0-run-", env.data.to_str().unwrap()] {
            assert!(
                !inside.contains(secret),
                "{secret:?} is visible inside, in {f}:\n{inside}"
            );
        }
    }
}

/// The host's git, for the tests that look at a repository from outside.
/// A `bwrap` a run left in a folder on PATH (a project's `.venv/bin`) is
/// never the one the node runs: the node runs bubblewrap outside any
/// sandbox, and that one would start the next run with no wall. Only the
/// system's (root's, writable by no one else) is taken from PATH; the run
/// goes on behind it.
#[test]
fn a_bwrap_a_run_left_on_path_is_never_run() {
    ready!();
    let env = Env::new("path-bwrap");
    let bin = env.work.join(".venv/bin");
    let ran = env.root.join("planted-bwrap-ran");
    let out = env.sh(
        &[],
        &format!(
            "mkdir -p .venv/bin && printf '#!/bin/sh\\necho ran > {}\\nexec /usr/bin/bwrap \"$@\"\\n' > .venv/bin/bwrap && chmod 755 .venv/bin/bwrap",
            ran.display()
        ),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(bin.join("bwrap").exists());
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display());
    for args in [&["sandbox", "check"][..], &[][..]] {
        let out = if args.is_empty() {
            env.cmd(&[], ["/bin/true"])
                .env("PATH", &path)
                .output()
                .unwrap()
        } else {
            std::process::Command::new(common::node())
                .args(args)
                .env("PATH", &path)
                .output()
                .unwrap()
        };
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert!(!ran.exists(), "{args:?}: the planted bwrap ran");
    }
}

fn host_git() -> Option<&'static str> {
    ["/usr/bin/git", "/usr/local/bin/git"]
        .into_iter()
        .find(|g| Path::new(g).exists())
}

/// A repository in `env`'s work folder, made on the host, with one commit.
fn host_repo(env: &Env, git: &str) {
    let st = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(format!(
            "cd '{}' && {git} init -q . && echo a > a && {git} add a && \
             {git} -c user.name=h -c user.email=h@example.invalid commit -qm host",
            env.work.display()
        ))
        .status()
        .unwrap();
    assert!(st.success());
}

/// Nothing a run writes in `.git` makes the host's git run its code or read
/// its files: `commondir` naming a folder of the run's (with a `config`
/// whose `core.fsmonitor` runs a command, and hooks), `config.worktree`,
/// `info/`, alternates, a linked worktree's or a submodule's repository,
/// `objects` moved aside for a new one — each is refused inside the run,
/// while commits still work; the host's `git status` afterwards runs
/// nothing of the run's.
#[test]
fn nothing_a_run_writes_in_git_makes_host_git_run_its_code() {
    ready!();
    let Some(git) = host_git() else {
        common::skip("git is not installed");
        return;
    };
    let env = Env::new("gitrule");
    host_repo(&env, git);
    let pwned = env.root.join("pwned");
    let script = r#"
mkdir -p evil/hooks
printf '[core]\n\tfsmonitor = "touch @P@-fsmonitor; false"\n' > evil/config
printf '#!/bin/sh\ntouch @P@-hook\n' > evil/hooks/post-index-change
chmod +x evil/hooks/post-index-change
cp -r .git/objects .git/refs .git/HEAD evil/ 2>/dev/null
try() { if (eval "$2") 2>/dev/null; then echo "$1=done"; else echo "$1=refused"; fi; }
try commondir 'echo "$PWD/evil" > .git/commondir'
try config.worktree 'printf "[core]\n\tfsmonitor = x\n" > .git/config.worktree'
try attributes 'echo "* filter=evil" > .git/info/attributes'
try alternates 'echo "$PWD/evil/objects" > .git/objects/info/alternates'
try worktrees 'mkdir .git/worktrees/x'
try modules 'mkdir .git/modules/x'
try objects-aside 'mv .git/objects .git/objects-aside'
try info-aside 'mv .git/objects/info .git/objects/info-aside'
try hooks-aside 'mv .git/hooks .git/hooks-aside'
echo b > b && git add b && git -c user.name=r -c user.email=r@example.invalid commit -qm run && echo commit=ok
"#
    .replace("@P@", pwned.to_str().unwrap());
    let out = env.sh(&[], &script);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("commit=ok"),
        "commits must work: {text}\n{}",
        stderr(&out)
    );
    for what in [
        "commondir",
        "config.worktree",
        "attributes",
        "alternates",
        "worktrees",
        "modules",
        "objects-aside",
        "info-aside",
        "hooks-aside",
    ] {
        assert!(text.contains(&format!("{what}=refused")), "{what}: {text}");
    }
    // On the host, afterwards: git works, sees the run's commit, and runs
    // nothing of the run's.
    let st = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(format!(
            "cd '{}' && {git} status --porcelain >/dev/null && {git} log --oneline | wc -l",
            env.work.display()
        ))
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&st.stdout).trim(), "2");
    for suffix in ["-fsmonitor", "-hook"] {
        let f = env.root.join(&format!("pwned{suffix}"));
        assert!(!exists(&f), "the host's git ran the run's code ({suffix})");
    }
    assert!(
        !exists(&env.work.join(".git/commondir")),
        "a commondir was left in .git"
    );
}

/// After every run the node looks at what it left for the host's git: a
/// repository it made with a `core.fsmonitor` command and a hook, a bare
/// repository with `core.sshCommand`, a `.git` file naming it — each is
/// reported (a warning, and in `--json-status`) and renamed aside, so the
/// host's `git status` there runs nothing; a repository made the way `git
/// init` makes it is not a finding. With `--git-findings report` the same
/// are reported and left in place.
#[test]
fn the_look_at_git_after_a_run_finds_and_neutralises() {
    ready!();
    let Some(git) = host_git() else {
        common::skip("git is not installed");
        return;
    };
    let script = r#"
g() { git -c user.name=r -c user.email=r@example.invalid "$@"; }
g init -q . && echo a > a && g add a && g commit -qm clean
g init -q src && g -C src config core.fsmonitor 'touch @P@-fsmonitor; false'
printf '#!/bin/sh
touch @P@-hook
' > src/.git/hooks/post-index-change
chmod +x src/.git/hooks/post-index-change
g init -q --bare deep/evil.git && g -C deep/evil.git config core.sshCommand 'touch @P@-ssh'
mkdir wt && echo 'gitdir: ../deep/evil.git' > wt/.git
"#;
    for policy in ["neutralise", "report"] {
        let env = Env::new("gitlook");
        let pwned = env.root.join("pwned");
        let script = script.replace("@P@", pwned.to_str().unwrap());
        let (doc, out) = run_with_status(
            &env,
            &["--git-findings", policy],
            &["/bin/sh", "-c", &script],
        );
        assert_eq!(doc["exit_code"], 0, "{doc}\n{}", stderr(&out));
        let look = &doc["git"];
        assert_eq!(look["policy"], policy, "{look}");
        assert_eq!(look["complete"], true, "{look}");
        let findings = look["findings"].as_array().unwrap();
        let rel = |f: &serde_json::Value| {
            Path::new(f["path"].as_str().unwrap())
                .strip_prefix(&env.work)
                .unwrap()
                .display()
                .to_string()
        };
        let mut got: Vec<(String, String)> = findings
            .iter()
            .map(|f| (rel(f), f["what"].as_str().unwrap().to_string()))
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                ("deep/evil.git/config".into(), "config".into()),
                ("src/.git/config".into(), "config".into()),
                ("src/.git/hooks/post-index-change".into(), "hook".into()),
                ("wt/.git".into(), "git_file".into()),
            ],
            "{look}"
        );
        let warnings = stderr(&out)
            .matches("oz0-node: warning: the run left")
            .count();
        assert_eq!(warnings, 4, "{}", stderr(&out));
        if policy == "report" {
            assert!(findings.iter().all(|f| f["aside"].is_null()));
            assert!(exists(&env.work.join("src/.git/config")));
            continue;
        }
        for f in findings {
            let aside = f["aside"].as_str().unwrap();
            assert!(aside.contains(".oz0-quarantine-"), "{f}");
            assert!(exists(Path::new(aside)), "{aside}");
            assert!(!exists(Path::new(f["path"].as_str().unwrap())), "{f}");
        }
        // The host's git, in each repository the run left: nothing runs.
        let st = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(format!(
                "cd '{w}' && {git} status >/dev/null; cd src && {git} status >/dev/null; \
                 cd ../deep/evil.git && {git} fetch -q ssh://example.invalid/x 2>/dev/null; true",
                w = env.work.display()
            ))
            .output()
            .unwrap();
        assert!(st.status.success());
        for suffix in ["-fsmonitor", "-hook", "-ssh"] {
            assert!(
                !exists(&env.root.join(&format!("pwned{suffix}"))),
                "the host's git ran the run's code ({suffix})"
            );
        }
    }
}

/// The node's run records (which a later node trusts to sweep a dead run's
/// placeholders) never lie where the run could forge them: a `TMPDIR` in
/// the run's work folder refuses the run, naming the fix.
#[test]
fn run_records_never_lie_in_a_folder_the_run_may_write() {
    ready!();
    let env = Env::new("records");
    let out = env
        .cmd(&[], ["/bin/true"])
        .env("TMPDIR", env.work.join("tmp"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(stderr(&out).contains("set TMPDIR"), "{}", stderr(&out));
    assert!(!exists(&env.work.join("tmp")));
}

fn exists(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}
