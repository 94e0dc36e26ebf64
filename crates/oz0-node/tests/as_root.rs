//! Root-only: every command that runs or judges sandboxes refuses to run
//! as root, with the fix, and runs nothing; `setup` stays root's.
//! `scripts/test` runs this file as root (the others as the unprivileged
//! user); as anyone else it skips, or fails under `OZ0_MUST_WORK=1`.

// The Linux node's black-box tests (the Windows node's are windows.rs).
#![cfg(target_os = "linux")]

mod common;

use std::process::{Command, Stdio};

use common::{node, skip, stderr, TempDir};

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
}

#[test]
fn nodes_never_run_as_root() {
    if !is_root() {
        skip("this test is root's (scripts/test runs it as root)");
        return;
    }
    let d = TempDir::new("asroot");
    let work = d.join("work");
    std::fs::create_dir(&work).unwrap();
    let ran = d.join("ran");
    let w = work.display().to_string();
    let sh = format!("echo yes > {}", ran.display());
    std::fs::create_dir(d.join("plugin")).unwrap();
    std::fs::write(
        d.join("plugin/oz0-plugin.yaml"),
        format!("tools:\n  - id: t\n    command: [sh, -c, '{sh}']\n"),
    )
    .unwrap();
    let p = d.join("plugin").display().to_string();
    let image = format!("oci:127.0.0.1:5000/acme/tool@sha256:{}", "a".repeat(64));
    let cases: [(&[&str], i32, &str); 8] = [
        (
            &["sandbox", "run", "--work", &w, "--", "sh", "-c", &sh],
            125,
            "oz0-node: sandbox refused:",
        ),
        (
            &["sandbox", "vm", "--work", &w, "--", "sh", "-c", &sh],
            125,
            "oz0-node: sandbox refused:",
        ),
        (
            &["sandbox", "vm", "--probe"],
            125,
            "oz0-node: sandbox refused:",
        ),
        (
            &["sandbox", "check", "--self-test"],
            1,
            "oz0-node: refusing to run as root:",
        ),
        (&["run", "--once"], 1, "oz0-node: refusing to run as root:"),
        (
            &["plugin", "check", &p],
            1,
            "oz0-node: refusing to run as root:",
        ),
        (
            &["plugin", "call", &p, "t"],
            125,
            "oz0-node: sandbox refused:",
        ),
        // An image unpacked as root would be root's.
        (
            &["oci", "pull", "--oci-registry", "127.0.0.1:5000", &image],
            1,
            "oz0-node: refusing to run as root:",
        ),
    ];
    for (args, code, says) in cases {
        let o = Command::new(node())
            .args(args)
            .arg("--data-dir")
            .arg(d.join("data"))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.starts_with(says), "{args:?}: {err}");
        assert!(
            err.contains("runuser -u oz0node") && err.contains("setup cgroups --user oz0node"),
            "{err}"
        );
        assert!(!ran.exists(), "{args:?} ran something as root");
        assert!(
            !d.join("data").exists(),
            "{args:?} made a data directory as root"
        );
    }
    // setup is root's: it still runs (and says what it did or why not).
    let o = Command::new(node())
        .args(["setup", "cgroups", "--help"])
        .output()
        .unwrap();
    assert!(o.status.success());
}

/// Runs a fork-heavy command as `user` under `--processes 8`; returns the
/// job's mechanism line and what limit it hit.
fn limited_run_as(user: &str, d: &TempDir) -> (String, String) {
    let root = d.join(user);
    std::fs::create_dir(&root).unwrap();
    std::fs::create_dir(root.join("work")).unwrap();
    let chown = Command::new("chown")
        .args(["-R", user])
        .arg(&root)
        .status()
        .unwrap();
    assert!(chown.success());
    let o = Command::new("/usr/sbin/runuser")
        .args([
            "-u",
            user,
            "--",
            "env",
            "-i",
            "PATH=/usr/bin:/bin",
            "HOME=/",
        ])
        .arg(node())
        .args(["sandbox", "run", "--processes", "8", "--work"])
        .arg(root.join("work"))
        .arg("--data-dir")
        .arg(root.join("data"))
        .arg("--json-status")
        .arg(root.join("status.json"))
        .args([
            "--",
            "sh",
            "-c",
            "for i in $(seq 20); do sleep 1 & done; wait",
        ])
        .current_dir("/")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = std::fs::read_to_string(root.join("status.json"))
        .unwrap_or_else(|e| panic!("{user}: no status ({e}): {}", stderr(&o)));
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let job = &doc["enforced"]["limits"]["job"];
    (
        job["enforced"][0]["mechanism"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        job["limit_hit"].as_str().unwrap_or_default().to_string(),
    )
}

fn user_exists(u: &str) -> bool {
    Command::new("id")
        .arg(u)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `setup cgroups --user` for a second user leaves the first user's
/// folder alone; each user's runs get their limits in their own folder;
/// `--remove` takes one user's away and leaves the other's working.
#[test]
fn setup_cgroups_per_user_coexist_and_remove() {
    if !is_root() {
        skip("this test is root's (scripts/test runs it as root)");
        return;
    }
    let (first, second) = ("oz0test", "oz0test2");
    if !user_exists(first) || !user_exists(second) {
        skip("needs the users oz0test and oz0test2 (scripts/test makes them)");
        return;
    }
    let setup = |args: &[&str]| {
        let o = Command::new(node())
            .args(["setup", "cgroups"])
            .args(args)
            .arg("--json")
            .output()
            .unwrap();
        assert!(o.status.success(), "setup {args:?}: {}", stderr(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let a = setup(&["--user", first]);
    let b = setup(&["--user", second]);
    let dirs = |r: &serde_json::Value| -> Vec<String> {
        r["delegated"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap().to_string())
            .collect()
    };
    for (r, u) in [(&a, first), (&b, second)] {
        for p in dirs(r) {
            assert!(p.ends_with(&format!("/oz0/{u}")), "{p}");
            assert!(std::path::Path::new(&p).is_dir(), "{p} missing");
        }
    }
    let d = TempDir::new("percg");
    for u in [first, second] {
        let (mechanism, hit) = limited_run_as(u, &d);
        assert!(
            mechanism.contains(&format!("/oz0/{u}/oz0-job-")),
            "{u}'s job is not in its folder: {mechanism:?}"
        );
        assert_eq!(hit, "processes", "{u}: {mechanism}");
    }
    // The second user's setup undone: theirs is gone, the first's works.
    let gone = setup(&["--user", second, "--remove"]);
    for p in dirs(&b) {
        assert!(!std::path::Path::new(&p).exists(), "{p} left");
        assert!(gone["removed"].as_array().unwrap().iter().any(|x| x == &p));
    }
    let (mechanism, hit) = limited_run_as(first, &TempDir::new("percg2"));
    assert!(mechanism.contains(&format!("/oz0/{first}/")), "{mechanism}");
    assert_eq!(hit, "processes");
    // Nothing of theirs is left to remove, and saying so is not an error.
    let again = setup(&["--user", second, "--remove"]);
    assert_eq!(again["removed"], serde_json::json!([]));
}
