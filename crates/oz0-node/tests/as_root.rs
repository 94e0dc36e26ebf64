//! Root-only: every command that runs or judges sandboxes refuses to run
//! as root, with the fix, and runs nothing; `setup` stays root's.
//! `scripts/test` runs this file as root (the others as the unprivileged
//! user); as anyone else it skips, or fails under `OZ0_MUST_WORK=1`.

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
    let cases: [(&[&str], i32, &str); 7] = [
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
