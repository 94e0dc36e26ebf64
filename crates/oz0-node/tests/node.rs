//! Black-box tests of `sandbox check`, the self-test, `run` and `facts`.

// The Linux node's black-box tests (the Windows node's are windows.rs).
#![cfg(target_os = "linux")]

#[macro_use]
mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{node, stderr, stdout, TempDir};

fn oz0(args: &[&str]) -> std::process::Output {
    Command::new(node())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

const ORDER: [&str; 8] = [
    "launch",
    "files",
    "egress",
    "ingress",
    "job_limits",
    "fail_closed",
    "protected_paths",
    "environment",
];

#[test]
fn check_reports_tier_1_and_its_facts() {
    ready!();
    let o = oz0(&["sandbox", "check"]);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
    assert!(lines[0].starts_with("Sandbox: tier 1: bubblewrap"), "{out}");
    assert!(
        lines[1].starts_with("Linux ") && lines[1].contains("user namespaces: yes"),
        "{out}"
    );
    assert!(!out.contains("Fix:"), "{out}");
    let o = oz0(&["sandbox", "check", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["tier"], 1);
    assert_eq!(v["proven"], false, "a probe alone proves nothing");
    assert!(v["probe"]["landlock_abi"].is_u64());
}

#[test]
fn self_test_passes_all_eight_in_order() {
    ready!();
    let data = TempDir::new("st-data");
    let o = oz0(&["sandbox", "check", "--self-test", "--data-dir", &data.s()]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
    let st: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("Self-test "))
        .collect();
    assert_eq!(st.len(), 8, "{out}");
    for (l, p) in st.iter().zip(ORDER) {
        assert!(l.starts_with(&format!("Self-test {p}: ok (")), "{l}");
    }
    assert!(
        out.lines().last().unwrap().starts_with("MicroVMs: "),
        "{out}"
    );
    let last = out.lines().rfind(|l| l.starts_with("Sandbox: ")).unwrap();
    assert!(
        last.starts_with("Sandbox: tier 1: ")
            && last.contains("passed the node's self-test (8 checks"),
        "{last}"
    );
    // The data directory existed: its listing and key were checked, not only a stand-in.
    assert!(
        out.contains(&format!("the node's data directory {}", data.s())),
        "{out}"
    );
}

#[test]
fn self_test_json() {
    ready!();
    let o = oz0(&["sandbox", "check", "--self-test", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["tier"], 1);
    assert_eq!(v["proven"], true);
    let lines = v["self_test"]["lines"].as_array().unwrap();
    let names: Vec<&str> = lines
        .iter()
        .map(|l| l["property"].as_str().unwrap())
        .collect();
    assert_eq!(names, ORDER);
    assert!(lines.iter().all(|l| l["ok"] == true && l["ms"].is_u64()));
}

#[test]
fn each_property_can_fail_and_then_the_tier_is_0() {
    ready!();
    for p in ORDER {
        let o = oz0(&["sandbox", "check", "--self-test", "--inject-fault", p]);
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(1), "{p}: {out}");
        let failed: Vec<&str> = out.lines().filter(|l| l.contains(": failed (")).collect();
        assert_eq!(failed.len(), 1, "{p}: {out}");
        assert!(
            failed[0].starts_with(&format!("Self-test {p}: failed (")),
            "{p}: {out}"
        );
        // Every property before it held; nothing after it ran.
        let idx = ORDER.iter().position(|x| *x == p).unwrap();
        for before in &ORDER[..idx] {
            assert!(
                out.contains(&format!("Self-test {before}: ok (")),
                "{p}: {out}"
            );
        }
        for after in &ORDER[idx + 1..] {
            assert!(!out.contains(&format!("Self-test {after}:")), "{p}: {out}");
        }
        assert!(
            out.contains("Sandbox: tier 0: a fault was injected into the self-test; it failed at"),
            "{p}: {out}"
        );
    }
    let o = oz0(&[
        "sandbox",
        "check",
        "--self-test",
        "--inject-fault",
        "nonsense",
    ]);
    assert_eq!(o.status.code(), Some(2));
}

/// The self-test proves each layer of tier 1 on its own: with the mounts
/// letting the data directory in, with Landlock off, or without the seccomp
/// filter — the other layers still holding — the self-test fails and names
/// the layer that went, and the tier is 0.
#[test]
fn each_layer_is_proven_on_its_own_and_named_when_it_fails() {
    ready!();
    for (layer, property, named) in [
        ("mounts", "files", "mount layer"),
        ("landlock", "files", "landlock layer"),
        ("seccomp", "launch", "seccomp layer"),
    ] {
        let o = oz0(&["sandbox", "check", "--self-test", "--inject-fault", layer]);
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(1), "{layer}: {out}");
        let failed: Vec<&str> = out.lines().filter(|l| l.contains(": failed (")).collect();
        assert_eq!(failed.len(), 1, "{layer}: {out}");
        assert!(
            failed[0].starts_with(&format!("Self-test {property}: failed ("))
                && failed[0].contains(named),
            "{layer}: {out}"
        );
        assert!(
            out.contains("Sandbox: tier 0: a fault was injected"),
            "{layer}: {out}"
        );
    }
    // And what each layer shows when it holds.
    let o = oz0(&["sandbox", "check", "--self-test"]);
    let out = stdout(&o);
    assert!(out.contains("seccomp alone refuses"), "{out}");
    assert!(
        out.contains("with Landlock off the mounts still hide"),
        "{out}"
    );
    assert!(
        out.contains("Landlock (ABI") && out.contains("alone refuses listing, reading and writing"),
        "{out}"
    );
}

/// A bubblewrap (named with --bwrap) that quietly mounts more than the node
/// asked for — a host folder read-only, or a writable one — is caught by
/// the stage's look at the run's mount table, whatever Landlock would
/// still refuse: `sandbox run` is refused with the reason, and the
/// self-test reports tier 0.
#[test]
fn a_bubblewrap_that_mounts_more_than_planned_is_refused() {
    ready!();
    let dir = TempDir::new("evil-bwrap");
    let host = dir.join("host-folder");
    std::fs::create_dir(&host).unwrap();
    let wrappers = [
        // (At /mnt: at /home, bubblewrap would fail earlier, making the
        // refused folders of the node user's home in a read-only bind.)
        ("home", "--ro-bind /home /mnt".to_string()),
        (
            "writable",
            format!("--bind {} /oz0/host-folder", host.display()),
        ),
    ];
    for (name, extra) in wrappers {
        let w = dir.join(name);
        std::fs::write(
            &w,
            format!("#!/bin/sh\nexec /usr/bin/bwrap {extra} \"$@\"\n"),
        )
        .unwrap();
        std::fs::set_permissions(&w, std::fs::Permissions::from_mode(0o755)).unwrap();
        let w = w.to_str().unwrap();
        let work = dir.join(&format!("work-{name}"));
        std::fs::create_dir(&work).unwrap();
        let o = oz0(&[
            "sandbox",
            "run",
            "--bwrap",
            w,
            "--work",
            work.to_str().unwrap(),
            "--",
            "/bin/true",
        ]);
        assert_eq!(o.status.code(), Some(125), "{name}: {}", stderr(&o));
        assert!(stderr(&o).contains("mount table"), "{name}: {}", stderr(&o));
        let o = oz0(&["sandbox", "check", "--self-test", "--bwrap", w]);
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(1), "{name}: {out}");
        assert!(
            out.contains("Self-test launch: failed") && out.contains("mount table"),
            "{name}: {out}"
        );
        assert!(
            out.contains("Sandbox: tier 0: the self-test failed at launch"),
            "{name}: {out}"
        );
    }
}

#[test]
fn check_names_the_fix_when_bubblewrap_is_missing() {
    ready!();
    let o = oz0(&["sandbox", "check", "--bwrap", "/nonexistent/bwrap"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        out.lines()
            .next()
            .unwrap()
            .starts_with("Sandbox: tier 0: bubblewrap is missing"),
        "{out}"
    );
    assert!(
        out.contains("Fix: ") && out.contains("apt-get install bubblewrap"),
        "{out}"
    );
    let o = oz0(&[
        "sandbox",
        "check",
        "--self-test",
        "--bwrap",
        "/nonexistent/bwrap",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("Sandbox: tier 0"));
}

#[test]
fn check_names_the_fix_when_no_cgroup_can_be_used() {
    ready!();
    // A cgroup folder this user does not own: job limits cannot be enforced.
    let root = [
        "/sys/fs/cgroup/pids",
        "/sys/fs/cgroup/unified",
        "/sys/fs/cgroup",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).join("cgroup.procs").exists())
    .unwrap();
    let o = oz0(&["sandbox", "check", "--cgroup-root", root]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.starts_with("Sandbox: tier 0: no cgroup this user can drive"),
        "{out}"
    );
    assert!(out.contains("Fix: "), "{out}");
}

#[test]
fn psec_is_windows_only() {
    let o = oz0(&["sandbox", "check", "--psec"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("Windows"));
    let d = TempDir::new("psec");
    let o = oz0(&["run", "--sandbox", "psec", "--data-dir", &d.s(), "--once"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("Windows-only"), "{}", stderr(&o));
}

#[test]
fn run_once_creates_data_dir_key_and_facts() {
    ready!();
    let base = TempDir::new("run");
    let data = base.join("node-data");
    let d = data.display().to_string();
    let o = oz0(&["run", "--once", "--data-dir", &d]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join("identity/node.key")), 0o600);
    assert!(std::fs::read_to_string(data.join("identity/node.key"))
        .unwrap()
        .starts_with("oz0-node-key-v1 ed25519 "));
    for p in ORDER {
        assert!(err.contains(&format!("Self-test {p}: ok")), "{p}: {err}");
    }
    let facts: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("facts.json")).unwrap()).unwrap();
    assert_eq!(facts["tier_proven"], 1);
    assert_eq!(facts["tier_routed"], 1);
    assert_eq!(facts["self_test"]["status"], "passed");
    assert_eq!(facts["mechanism"]["kind"], "bubblewrap");
    assert_eq!(facts["labels"]["sandbox.tier"], "1");
    assert_eq!(facts["microvm"]["ready"], false);
    // The key survives a restart.
    let key = std::fs::read(data.join("identity/node.key")).unwrap();
    let o = oz0(&["run", "--once", "--data-dir", &d]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(std::fs::read(data.join("identity/node.key")).unwrap(), key);
    let o = oz0(&["facts", "--format", "nfd", "--data-dir", &d]);
    let nfd = stdout(&o);
    assert!(nfd.lines().any(|l| l == "oz0.dev/sandbox.tier=1"), "{nfd}");
    assert!(
        nfd.lines()
            .all(|l| l.starts_with("oz0.dev/") && l.contains('=')),
        "{nfd}"
    );
    let o = oz0(&["facts", "--format", "kv", "--data-dir", &d]);
    assert!(stdout(&o).lines().any(|l| l == "sandbox.tier=1"));
}

#[test]
fn run_with_sandbox_none_reports_tier_0() {
    let base = TempDir::new("none");
    let d = base.join("data").display().to_string();
    let o = oz0(&["run", "--once", "--sandbox", "none", "--data-dir", &d]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let facts: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(base.join("data/facts.json")).unwrap())
            .unwrap();
    assert_eq!(facts["tier_proven"], 0);
    assert_eq!(facts["self_test"]["status"], "not_run");
    assert_eq!(facts["fix"], "sandbox_disabled");
}

#[test]
fn failed_self_test_reports_tier_0_with_the_property() {
    ready!();
    let base = TempDir::new("fail");
    let d = base.join("data").display().to_string();
    // A cgroup root the user cannot use: probing finds tier 1's other parts,
    // yet job limits are unavailable, so the node cannot be tier 1.
    let o = oz0(&[
        "run",
        "--once",
        "--data-dir",
        &d,
        "--cgroup-root",
        "/sys/fs/cgroup/pids",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let facts: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(base.join("data/facts.json")).unwrap())
            .unwrap();
    assert_eq!(facts["tier_proven"], 0, "{facts}");
    assert_eq!(facts["fix"], "delegate_cgroups", "{facts}");
}

#[test]
fn bad_data_dirs() {
    let base = TempDir::new("baddata");
    let file = base.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let o = oz0(&[
        "run",
        "--once",
        "--sandbox",
        "none",
        "--data-dir",
        &file.display().to_string(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("is not a folder"), "{}", stderr(&o));
    // Readable by others: made private, with a warning.
    let open = base.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = oz0(&[
        "run",
        "--once",
        "--sandbox",
        "none",
        "--data-dir",
        &open.display().to_string(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("was readable by others"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        std::fs::metadata(&open).unwrap().permissions().mode() & 0o777,
        0o700
    );
    // Unwritable.
    let ro = base.join("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o500)).unwrap();
    let o = oz0(&[
        "run",
        "--once",
        "--sandbox",
        "none",
        "--data-dir",
        &ro.join("sub").display().to_string(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("cannot create the data directory"),
        "{}",
        stderr(&o)
    );
    let o = oz0(&["run", "--no-such-flag"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn run_stays_up_until_sigterm() {
    let base = TempDir::new("daemon");
    let d = base.join("data").display().to_string();
    let mut child = Command::new(node())
        .args(["run", "--sandbox", "none", "--data-dir", &d])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !base.join("data/facts.json").exists() {
        assert!(Instant::now() < deadline, "no facts written");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the node did not stay up"
    );
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("stopping"), "{}", stderr(&out));
}

/// The binary starts at its own entry, not std's: it still fills closed
/// standard descriptors with /dev/null (so nothing it opens takes their
/// place), and what it runs gets SIGPIPE at its default, not ignored.
#[test]
fn closed_standard_descriptors_are_filled_and_sigpipe_is_not_passed_on() {
    ready!();
    let work = TempDir::new("stdfds");
    let script = "readlink /proc/self/fd/0; grep SigIgn /proc/self/status";
    let o = Command::new("/bin/sh")
        .arg("-c")
        .arg("exec 0<&- \"$0\" sandbox run --work \"$1\" -- /bin/sh -c \"$2\"")
        .arg(node())
        .arg(&work.0)
        .arg(script)
        .output()
        .unwrap();
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("/dev/null"), "{out}");
    let ign = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap();
    let mask = u64::from_str_radix(ign, 16).unwrap();
    assert_eq!(
        mask & (1 << (libc::SIGPIPE - 1)),
        0,
        "SIGPIPE ignored: {out}"
    );
}

/// `sandbox vm --probe` asks what the node asks at its start and says why
/// not: microVMs turned off, no smolvm on `PATH`, and a VMM named
/// explicitly that is no release the node pins (the microVM tests' smolvm
/// stand-in, which runs commands on this node's own kernel): never ready,
/// named unpinned, with a warning.
#[test]
fn vm_probe_says_whether_this_node_offers_microvms_and_why_not() {
    ready!();
    let data = TempDir::new("vmprobe");
    let probe = |env: &[(&str, String)]| {
        let o = Command::new(node())
            .args([
                "sandbox",
                "vm",
                "--probe",
                "--json",
                "--data-dir",
                &data.s(),
            ])
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
        (o.status.code(), v)
    };
    let (code, v) = probe(&[("OZ0_MICROVM", "off".into())]);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["tier1"], true, "{v}");
    assert_eq!(v["microvm"]["ready"], false);
    assert_eq!(v["microvm"]["reason"], "off", "{v}");
    let (code, v) = probe(&[]);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["microvm"]["reason"], "no_vmm", "{v}");

    let standin = TempDir::new("vmprobe-standin");
    let cli = standin.join("smolvm");
    std::fs::write(
        &cli,
        include_str!("../../oz0-microvm/tests/fixtures/smolvm-standin/smolvm"),
    )
    .unwrap();
    std::fs::set_permissions(&cli, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, v) = probe(&[("OZ0_MICROVM", standin.s())]);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["microvm"]["ready"], false, "{v}");
    assert_eq!(v["microvm"]["pinned"], false, "{v}");
    assert!(
        v["warning"]
            .as_str()
            .is_some_and(|w| w.contains("not a release this node pins")),
        "{v}"
    );
    // This user may not open /dev/kvm (then the probe stops there), or it
    // may: then the stand-in "boots" on this node's own kernel.
    let reason = v["microvm"]["reason"].as_str().unwrap_or("");
    assert!(
        [
            "no_kvm_access",
            "no_hardware_virtualisation",
            "test_vm_did_not_boot"
        ]
        .contains(&reason),
        "{v}"
    );
}
