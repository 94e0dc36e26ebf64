//! No nested user namespaces, by the kernel itself and apart from seccomp:
//! what the stage of every run sets up ([`enter_own_user_namespace`], in
//! place of bubblewrap's `--disable-userns`) leaves no user namespace to
//! make, even to a process that still has every capability.
//!
//! A child process of its own plays the run's first user namespace (it
//! makes one and is root there, as bubblewrap's sandbox process is), then
//! takes the stage's steps. As a control, the same child without those
//! steps can make a nested namespace: the refusal comes from them, not from
//! the machine. Needs unprivileged user namespaces: skipped with the reason
//! where there are none, failed instead under `OZ0_MUST_WORK=1`.

use oz0_linux::hold::enter_own_user_namespace;
use oz0_sys::ns::{in_child, unshare_user_namespace};

/// Exit statuses of the children.
const OK: i32 = 0;
const NO_USER_NAMESPACES: i32 = 2;
const SETUP_FAILED: i32 = 3;
const NESTED_MADE: i32 = 4;
const OTHER_ERROR: i32 = 5;

/// Writes to the real stderr (the child's `eprintln!` would go to the test
/// harness's capture, which the child's end throws away).
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Makes a user namespace and maps this process's uid and gid to root in
/// it, as bubblewrap makes the run's first one.
fn first_namespace() -> Result<(), String> {
    let (uid, gid) = (
        rustix::process::getuid().as_raw(),
        rustix::process::getgid().as_raw(),
    );
    unshare_user_namespace().map_err(|e| e.to_string())?;
    for (file, text) in [
        ("setgroups", "deny".to_string()),
        ("uid_map", format!("0 {uid} 1\n")),
        ("gid_map", format!("0 {gid} 1\n")),
    ] {
        std::fs::write(format!("/proc/self/{file}"), text)
            .map_err(|e| format!("/proc/self/{file}: {e}"))?;
    }
    Ok(())
}

fn with_the_stage_steps() -> i32 {
    if first_namespace().is_err() {
        return NO_USER_NAMESPACES;
    }
    if let Err(e) = enter_own_user_namespace() {
        say(&format!("the stage's steps failed: {e}"));
        return SETUP_FAILED;
    }
    match unshare_user_namespace() {
        Ok(()) => NESTED_MADE,
        Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => OK,
        Err(e) => {
            say(&format!("unshare(CLONE_NEWUSER): {e} (expected ENOSPC)"));
            OTHER_ERROR
        }
    }
}

fn without_them() -> i32 {
    if first_namespace().is_err() {
        return NO_USER_NAMESPACES;
    }
    match unshare_user_namespace() {
        Ok(()) => OK,
        Err(e) => {
            say(&format!(
                "nested unshare(CLONE_NEWUSER) without the stage's steps: {e}"
            ));
            OTHER_ERROR
        }
    }
}

#[test]
fn after_the_stage_steps_no_user_namespace_can_be_made() {
    let control = in_child(without_them).unwrap();
    if control == NO_USER_NAMESPACES {
        assert!(
            std::env::var("OZ0_MUST_WORK").as_deref() != Ok("1"),
            "OZ0_MUST_WORK=1 and this machine lets no unprivileged process make a user namespace"
        );
        eprintln!("skipped: no unprivileged user namespaces here");
        return;
    }
    assert_eq!(
        control, OK,
        "without the stage's steps, nesting must work here"
    );
    assert_eq!(in_child(with_the_stage_steps).unwrap(), OK);
}
