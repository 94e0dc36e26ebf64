//! The smolvm path of `sandbox vm`, end to end, without KVM.
//!
//! `tests/fixtures/smolvm-standin/smolvm` stands in for the `smolvm`
//! command: it takes exactly the subcommands and flags the node calls and
//! runs the server in the monitor's own tier-1 sandbox instead of a VM.
//! Everything else is the node's real smolvm path: the pin check (the
//! stand-in is never pinned: the node says so), the monitor's tier-1 run
//! with the `vmm` profile, the server's stdio, secrets by name, the egress
//! socket and the guest's bridge, and the VM's folder and record, removed
//! whatever ends the VM. Run as root, the node runs as `oz0test`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

mod stage;
use stage::{records_pid, vm_folders, Client, Stage};

fn skip(why: &str) -> bool {
    if std::env::var("OZ0_MUST_WORK").as_deref() == Ok("1") {
        panic!("OZ0_MUST_WORK=1 and {why}");
    }
    eprintln!("SKIP: {why}");
    false
}

fn ready() -> bool {
    for (tool, why) in [
        ("bwrap", "bubblewrap is not installed"),
        (
            "python3",
            "python3 is not installed (the stand-in is a Python script)",
        ),
    ] {
        if Command::new(tool).arg("--version").output().is_err() {
            return skip(why);
        }
    }
    true
}

/// Stages the node and the stand-in (in a folder of its own, as smolvm's
/// release folder would be).
fn stage_with_standin(tag: &str) -> (Stage, PathBuf) {
    let st = stage::stage(tag, env!("CARGO_BIN_EXE_oz0-vm-testnode"));
    let dir = st.dir.join("smolvm");
    std::fs::create_dir(&dir).unwrap();
    let cli = dir.join("smolvm");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/smolvm-standin/smolvm"
        ),
        &cli,
    )
    .unwrap();
    for (p, mode) in [(&dir, 0o755), (&cli, 0o755)] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    (st, dir)
}

/// `sandbox vm` with the stand-in named by `OZ0_MICROVM`.
fn vm_command(st: &Stage, extra: &[String], server: &[&str]) -> Vec<String> {
    let mut args = st.vm_args();
    args.extend(extra.iter().cloned());
    args.push("--".into());
    args.extend(server.iter().map(|s| s.to_string()));
    args
}

fn start(st: &Stage, standin: &Path, extra: &[String], server: &[&str]) -> Child {
    let args = vm_command(st, extra, server);
    stage::start_node(st, &args, &[("OZ0_MICROVM", standin.display().to_string())])
}

/// The MCP test server of the test node, as the guest runs it.
const SERVER: &[&str] = &["/oz0/oz0-node", "mcp-test-server"];

fn wait_exit(child: &mut Child, limit: Duration, what: &str) -> Option<i32> {
    let t = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s.code();
        }
        assert!(t.elapsed() < limit, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The monitor's processes (the stand-in's, where smolvm's would run),
/// read from `/proc` while the VM runs: no capability, no new privileges,
/// tier 1's seccomp filter (smolvm would stack its own: the stand-in does
/// not), and in `/dev` tier 1's device nodes and `/dev/kvm`, the one
/// device the monitor is given.
fn monitor_is_walled(standin: &Path) {
    let cli = standin.join("smolvm").display().to_string();
    let mut seen = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(c) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        if !String::from_utf8_lossy(&c).contains(&cli) {
            continue;
        }
        let Ok(o) = oz0_microvm::monitor::observe(pid) else {
            continue; // it ended meanwhile
        };
        assert!(o.no_capabilities() && o.no_new_privs, "{o:?}");
        assert_eq!((o.seccomp, o.seccomp_filters), (2, 1), "{o:?}");
        let mut want = vec!["full", "null", "random", "tty", "urandom", "zero"];
        if Path::new("/dev/kvm").exists() {
            want.push("kvm");
            want.sort_unstable();
        }
        assert_eq!(o.devices, want, "{o:?}");
        seen += 1;
    }
    assert!(
        seen > 0,
        "no process of the monitor ({cli}) was found running"
    );
}

/// A session as a client has it: the handshake, the tools, a write in the
/// work folder, then the end of its input ends the server and the VM; the
/// VM's folder and record are gone.
#[test]
fn a_session_writes_its_work_folder_and_ends_with_its_input() {
    if !ready() {
        return;
    }
    let (st, standin) = stage_with_standin("smolsession");
    let mut c = Client::new(start(&st, &standin, &[], SERVER));
    c.initialize();
    let tools = c.request("tools/list", json!({}));
    assert!(tools.to_string().contains("write_file"), "{tools}");
    let (_, dir) = records_pid(&st).expect("a record while the VM runs");
    assert!(dir.is_dir());
    monitor_is_walled(&standin);
    let (t, err) = c.call(
        "write_file",
        json!({"path": "hello.txt", "content": "through the smolvm path"}),
    );
    assert!(!err, "{t}");
    assert_eq!(
        std::fs::read_to_string(st.dir.join("work/hello.txt")).unwrap(),
        "through the smolvm path"
    );
    assert_eq!(c.wait(Duration::from_secs(30)), 0);
    assert!(!dir.exists(), "{} left", dir.display());
    assert!(vm_folders(&st).is_empty(), "{:?}", vm_folders(&st));
}

/// The server's own status is the command's; its stdout is the caller's;
/// the stand-in is used only because OZ0_MICROVM names it, and the node
/// says it is not a release it pins.
#[test]
fn the_servers_status_is_the_vms_and_the_standin_is_not_pinned() {
    if !ready() {
        return;
    }
    let (st, standin) = stage_with_standin("smolstatus");
    let mut child = start(
        &st,
        &standin,
        &[],
        &["/bin/sh", "-c", "echo out-of-the-vm; exit 3"],
    );
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out-of-the-vm\n");
    assert!(vm_folders(&st).is_empty());

    let args = vm_command(&st, &[], &["/bin/true"]);
    let out = stage::node_command(
        &st,
        &args,
        &[("OZ0_MICROVM", standin.display().to_string())],
    )
    .stdin(Stdio::null())
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is not a release this node pins") && err.contains("OZ0_MICROVM names it"),
        "{err}"
    );

    // A server that is not there: 127, and nothing left.
    let mut child = start(&st, &standin, &[], &["/nonexistent/server"]);
    drop(child.stdin.take());
    let code = wait_exit(
        &mut child,
        Duration::from_secs(30),
        "the VM outlived its failure",
    );
    assert_eq!(code, Some(127));
    assert!(vm_folders(&st).is_empty());
}

/// SIGTERM to the node ends the server and the VM (143); SIGKILL leaves
/// the VM's folder, which the next start removes.
#[test]
fn sigterm_ends_the_vm_and_sigkill_leaves_what_the_next_start_removes() {
    if !ready() {
        return;
    }
    let (st, standin) = stage_with_standin("smolsignals");
    let mut c = Client::new(start(&st, &standin, &[], SERVER));
    c.initialize();
    let (pid, dir) = records_pid(&st).expect("a record while the VM runs");
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let code = wait_exit(
        &mut c.child,
        Duration::from_secs(30),
        "the VM outlived SIGTERM",
    );
    assert_eq!(code, Some(143));
    assert!(!dir.exists(), "{} left after SIGTERM", dir.display());
    assert!(vm_folders(&st).is_empty());

    let mut c = Client::new(start(&st, &standin, &[], SERVER));
    c.initialize();
    let (pid, dir) = records_pid(&st).expect("a record while the VM runs");
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    wait_exit(
        &mut c.child,
        Duration::from_secs(30),
        "the node outlived SIGKILL",
    );
    assert!(dir.exists(), "the killed node's VM folder is gone already");
    assert_eq!(vm_folders(&st).len(), 1);
    // The server went with its monitor (bubblewrap dies with the node).
    let t = Instant::now();
    while std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&st.dir.display().to_string()))
    }) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "a process of the killed node's VM is still running"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut next = start(&st, &standin, &[], &["/bin/true"]);
    drop(next.stdin.take());
    assert_eq!(
        wait_exit(
            &mut next,
            Duration::from_secs(30),
            "the next VM did not end"
        ),
        Some(0)
    );
    assert!(
        !dir.exists(),
        "{} was not removed by the next start",
        dir.display()
    );
    assert!(vm_folders(&st).is_empty());
}

/// With `--allow`, the server reaches the allowed host through the node's
/// proxy (the socket carried into the "guest" and its bridge), and nothing
/// else: an unlisted host gets 403.
#[test]
fn egress_goes_through_the_proxy_and_only_where_allowed() {
    if !ready() {
        return;
    }
    let (st, standin) = stage_with_standin("smolegress");
    let allowed = stage::http_listener("hello through the smolvm path");
    let mut c = Client::new(start(
        &st,
        &standin,
        &["--allow".into(), format!("127.0.0.1:{allowed}")],
        SERVER,
    ));
    c.initialize();
    let (t, err) = c.call(
        "http_get",
        json!({"url": format!("http://127.0.0.1:{allowed}/")}),
    );
    assert!(
        !err && t.starts_with("HTTP/1.1 200") && t.ends_with("hello through the smolvm path"),
        "{t}"
    );
    let (t, err) = c.call("http_get", json!({"url": "http://other.invalid/"}));
    assert!(!err && t.starts_with("HTTP/1.1 403"), "{t}");
    assert_eq!(c.wait(Duration::from_secs(30)), 0);
    assert!(vm_folders(&st).is_empty());
}

/// The microVM probe with the stand-in named explicitly: it "boots" and
/// answers, but on this node's own kernel, so the node offers no microVMs
/// (and the stand-in is never pinned).
#[test]
fn the_probe_never_counts_the_standin_as_a_vm() {
    if !ready() {
        return;
    }
    if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_err()
    {
        skip("/dev/kvm is not usable by this user, so the probe stops before its boot");
        return;
    }
    let (st, standin) = stage_with_standin("smolprobe");
    let data = st.dir.join("data");
    let mut o = oz0_microvm::bootcheck::ProbeOptions::from_env(
        true,
        oz0_linux::HostConfig {
            node_exe: Some(PathBuf::from(env!("CARGO_BIN_EXE_oz0-vm-testnode"))),
            ..Default::default()
        },
        data,
    );
    o.selection = oz0_microvm::pin::Selection::Named(standin);
    let r = oz0_microvm::bootcheck::probe(&o);
    assert!(!r.microvm.ready, "{r:?}");
    assert_eq!(r.microvm.pinned, Some(false), "{r:?}");
    assert_eq!(
        r.microvm.reason,
        Some(oz0_policy::facts::MicrovmReason::TestVmDidNotBoot),
        "{r:?}"
    );
    assert!(r.detail.contains("own kernel"), "{}", r.detail);
    assert!(
        r.warning.is_some(),
        "an unpinned VMM named explicitly warns"
    );
}
