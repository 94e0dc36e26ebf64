//! The self-test every platform shares (`oz0_core::selftest`), run on
//! Windows (under Wine in CI) through runners whose answers are known, the
//! Windows node binary's `sandbox probe` the witness inside each run:
//!
//! - no wall at all (a plain process with the node's whole environment,
//!   which ignores what it cannot enforce): every one of the eight checks
//!   runs and fails, naming what it saw;
//! - the tier-0 job object: `launch` holds (every process of a run ends
//!   with its first, the detached one too), so the check can pass on
//!   Windows and the probe's escape attempt is really tried.
//!
//! The node binary is `OZ0_WINDOWS_NODE` (its Unix path under Wine, or a
//! Windows path); without it the tests say why and pass, except where
//! `OZ0_MUST_WORK=1` (CI), where they fail.

#![cfg(windows)]

use std::os::windows::io::AsHandle;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use oz0_core::selftest::{self, Config};
use oz0_core::{Ended, Outcome, RunError, RunOptions, Sandbox};
use oz0_policy::facts::Property;
use oz0_policy::RunSpec;
use oz0_windows::native::wait_for;
use oz0_windows::supervise::Woke;
use oz0_windows::tier0::{carry, uncarry, JobObject};

/// The Windows node binary, as Windows names it; None (the test then says
/// why) when it was not given.
fn node() -> Option<String> {
    let Ok(p) = std::env::var("OZ0_WINDOWS_NODE") else {
        let why =
            "OZ0_WINDOWS_NODE names no Windows node binary (scripts/build-windows-node builds one)";
        assert!(
            std::env::var("OZ0_MUST_WORK").as_deref() != Ok("1"),
            "{why}"
        );
        eprintln!("SKIPPED: {why}");
        return None;
    };
    // Wine maps the Unix root to drive Z:.
    Some(match p.strip_prefix('/') {
        Some(rest) => format!("Z:\\{}", rest.replace('/', "\\")),
        None => p,
    })
}

/// No wall: the command runs as a plain process, with the node's whole
/// environment and the run's variables, in its work folder. What it cannot
/// enforce (egress, limits, faults) it ignores: the weakness is there
/// already. A cancel ends the first process alone.
struct NoWall;

impl Sandbox for NoWall {
    fn tier(&self) -> u8 {
        0
    }

    fn run(&self, spec: &RunSpec, opts: RunOptions) -> Result<Outcome, RunError> {
        let mut c = Command::new(&spec.command[0]);
        c.args(&spec.command[1..])
            .current_dir(uncarry(&spec.work))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for v in &spec.env {
            c.env(v.name.as_str(), &v.value);
        }
        let mut child = c.spawn()?;
        let started = Instant::now();
        let ended = loop {
            match wait_for(child.as_handle(), opts.cancel.as_ref(), Some(20)) {
                Ok(Woke::Exited(_)) => break Ended::Exited,
                Ok(Woke::Cancelled) => {
                    let _ = child.kill();
                    break Ended::Cancelled;
                }
                Ok(Woke::TimedOut) => {}
                Err(e) => return Err(e.to_string().into()),
            }
        };
        let status = child.wait()?;
        Ok(Outcome {
            run_id: "t".into(),
            ended,
            exit_code: status.code().unwrap_or(1),
            duration_ms: started.elapsed().as_millis().try_into().unwrap_or(0),
            limit_hit: None,
            warnings: vec![],
            report: serde_json::Map::new(),
        })
    }
}

/// A folder of the test's own under Windows' TEMP, removed after.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("oz0-wst-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The configuration PSEC's self-test runs with, through `runs`.
fn config<'a>(runs: &'a dyn Sandbox, probe: &str, root: &Path) -> Config<'a> {
    oz0_windows::wall::self_test_config(runs, probe.to_string(), root.to_path_buf())
}

#[test]
fn each_check_fails_without_a_wall_and_says_what_it_saw() {
    let Some(probe) = node() else { return };
    let d = Scratch::new("nowall");
    // The node's own variable the environment check looks for.
    std::env::set_var(selftest::CANARY, "node-only");
    let cases: [(Property, &str); 8] = [
        // With no process group of the run's own, its child outlives it too.
        (
            Property::Launch,
            "outlived it (its child and the one in a process group of its own)",
        ),
        (Property::Files, "a write outside the work directory"),
        (
            Property::Egress,
            "a direct connection to the host's 127.0.0.1:",
        ),
        (
            Property::Ingress,
            "the host reached a listener inside the sandbox",
        ),
        (
            Property::JobLimits,
            "closing the run left its processes running",
        ),
        (Property::FailClosed, "could not be applied ran anyway"),
        (
            Property::ProtectedPaths,
            ".git/hooks/pre-commit was modified",
        ),
        // The node's own variables (the canary, or any other OZ0_ one the
        // node's environment holds) reach a run without a wall.
        (Property::Environment, "the node's variable OZ0_"),
    ];
    let cfg = config(&NoWall, &probe, &d.0);
    let mut failed = Vec::new();
    for (p, want) in cases {
        let t = Instant::now();
        let r = selftest::check_one(&cfg, p);
        println!("{p}: {r:?} ({} ms)", t.elapsed().as_millis());
        match r {
            Err(e) if e.as_str().contains(want) => {}
            other => failed.push(format!("{p}: {other:?}, not {want:?}")),
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
    // The whole self-test stops at its first failure, at tier 0.
    let mut seen = Vec::new();
    let t = selftest::run(&cfg, |l| seen.push(l.property));
    assert_eq!(t.failed, Some(Property::Launch));
    assert_eq!(seen, [Property::Launch]);
    assert_eq!(t.tier(), 0);
}

#[test]
fn through_the_job_object_launch_holds() {
    let Some(probe) = node() else { return };
    let d = Scratch::new("job");
    let job = JobObject::new();
    let cfg = config(&job, &probe, &d.0);
    let r = selftest::check_one(&cfg, Property::Launch);
    println!("launch: {r:?}");
    let shown = r.expect("every process of the run ends with its first, the detached one too");
    assert!(
        shown.contains("one that had left for a process group of its own too"),
        "{shown}"
    );
}

/// The real calls of Windows' own proof of `files`: the data directory's
/// access list read back and judged. (Wine keeps no grant to a package on
/// a file, only its owner and Everyone, so the refusal of a grant to ALL
/// APPLICATION PACKAGES is shown by `acl::container_readers`' unit test.)
#[test]
fn the_data_directorys_access_list_is_read_for_the_files_check() {
    use oz0_windows::{acl, native};
    let d = Scratch::new("acl");
    let data = d.0.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let me = native::current_user_sid().unwrap();
    native::set_access_list(&data, &acl::private_sddl(&me)).unwrap();
    let shown = oz0_windows::wall::data_dir_closed(&data);
    assert_eq!(shown.as_deref(), Ok("its access list grants no container"));
    // A folder that is not there cannot be shown closed.
    let e = oz0_windows::wall::data_dir_closed(&d.0.join("missing")).unwrap_err();
    assert!(e.contains("cannot read the access list"), "{e}");
}

/// The egress route's self-dial test, as the node runs it in a PSEC
/// container, here through the tier-0 job object: a run on the machine's
/// own loopback reaches it, so the bridge would serve.
#[test]
fn the_self_dial_test_runs_the_probe_and_reads_its_answer() {
    use oz0_windows::route::{self_dial_through, SelfDial};
    let Some(probe) = node() else { return };
    let d = Scratch::new("dial");
    let (work, data) = (d.0.join("work"), d.0.join("data"));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    let job = JobObject::new();
    let answer = self_dial_through(
        &job,
        &probe,
        &work,
        carry(&work).unwrap(),
        carry(&data).unwrap(),
    );
    assert_eq!(answer, SelfDial::Connected);
    // A probe that cannot start gives no answer, never a route.
    let missing = d.0.join("no-such-node.exe").display().to_string();
    let answer = self_dial_through(
        &job,
        &missing,
        &work,
        carry(&work).unwrap(),
        carry(&data).unwrap(),
    );
    assert!(matches!(answer, SelfDial::NoAnswer(_)), "{answer:?}");
}
