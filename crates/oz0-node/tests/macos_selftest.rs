//! The macOS self-test's eight checks (`oz0_core::selftest`), run on
//! Linux. On a Mac they run through Seatbelt; nothing in them but the wall
//! is macOS's (POSIX `sh`, the node binary's `sandbox probe`, loopback
//! sockets, files), so here they run through walls whose answers are
//! known:
//!
//! - Linux tier 1 (bubblewrap, seccomp, Landlock, cgroups): all eight hold,
//!   so the checks can pass and ask nothing a real wall cannot give;
//! - no wall (`oz0_linux::Plain`, and a runner with the egress proxy but no
//!   wall that also hands the node's environment on): each check fails and
//!   names what it saw, so none can pass without its property.
//!
//! The probe inside is the node binary under test (`OZ0_NODE_BIN`).

#![cfg(target_os = "linux")]

#[macro_use]
mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::TempDir;
use oz0_core::selftest::{self, Config};
use oz0_core::{Ended, Outcome, RunError, RunOptions, Sandbox};
use oz0_policy::facts::Property;
use oz0_policy::RunSpec;

/// A proxy whose decisions are no one's.
fn quiet_proxy() -> Arc<oz0_egress::LazyProxy> {
    Arc::new(oz0_egress::LazyProxy::new(Box::new(|| {
        Ok(oz0_egress::ProxyConfig {
            audit: Arc::new(|_: &oz0_egress::AuditRecord| {}),
            ..Default::default()
        })
    })))
}

// --- Linux tier 1 --------------------------------------------------------------

fn host(
    data: &std::path::Path,
    scratch: &std::path::Path,
    cgroup_root: Option<PathBuf>,
) -> oz0_linux::Tier1 {
    oz0_linux::Tier1::open(oz0_linux::HostConfig {
        data_dir: Some(data.to_path_buf()),
        node_exe: Some(common::node()),
        scratch: Some(scratch.to_path_buf()),
        cgroup_root,
        ..Default::default()
    })
    .expect("the host context opens")
    .with_egress(quiet_proxy(), data.join("egress-audit.jsonl"))
}

#[test]
fn the_eight_checks_hold_on_linux_tier_1() {
    ready!();
    let d = TempDir::new("mst-t1");
    let data = d.join("data");
    std::fs::create_dir_all(data.join("identity")).unwrap();
    std::fs::write(data.join("identity/node.key"), "key").unwrap();
    let scratch = d.join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    // Linux tier 1 makes a run unconfinable (fail_closed) through its
    // job: a root no cgroup can be made under.
    let runs = host(&data, &scratch, None);
    let cfg = Config {
        data_dir: Some(data.clone()),
        ..Config::new(&runs, "/oz0/oz0-node".into(), d.0.clone())
    };
    let t = selftest::run(&cfg, |l| println!("{}", l.text()));
    if t.failed == Some(Property::JobLimits) && t.lines[4].detail.contains("cgroup") {
        common::skip(&format!(
            "this user has no job limits here ({}): run `scripts/test`, which delegates a cgroup to its test user",
            t.lines[4].detail
        ));
        return;
    }
    assert_eq!(t.failed, None, "{:#?}", t.lines);
    assert_eq!(t.lines.len(), 8);
    assert_eq!(t.tier(), 1);
    let files = &t.lines[1].detail;
    assert!(
        files.contains(&format!("the node's data directory {}", data.display())),
        "{files}"
    );
}

// --- no wall -------------------------------------------------------------------

/// The egress proxy but no wall: the command runs as a plain process group
/// with the node's whole environment, the run's variables, a HOME and
/// TMPDIR, and the proxy's variables with the run's token.
struct ProxyNoWall {
    proxy: oz0_egress::ProxyHandle,
    home: PathBuf,
}

impl Sandbox for ProxyNoWall {
    fn tier(&self) -> u8 {
        0
    }

    /// A fault changes nothing: with no wall, its weakness is there
    /// already.
    fn run(&self, spec: &RunSpec, opts: RunOptions) -> Result<Outcome, RunError> {
        let cancel = opts.cancel;
        let token = oz0_egress::Token::generate()?;
        let guard = self.proxy.add_run_tcp(
            "t".into(),
            token.clone(),
            spec.egress.clone(),
            "127.0.0.1:0".parse().unwrap(),
        )?;
        let port = guard.tcp_addr().expect("a TCP run").port();
        let mut c = Command::new(&spec.command[0]);
        c.args(&spec.command[1..])
            .current_dir(spec.work.as_str())
            .env("HOME", &self.home)
            .env("TMPDIR", &self.home)
            .envs(token.proxy_env(port))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for v in &spec.env {
            c.env(v.name.as_str(), &v.value);
        }
        std::os::unix::process::CommandExt::process_group(&mut c, 0);
        let mut child = c.spawn()?;
        let started = Instant::now();
        let ended = loop {
            if let Some(st) = child.try_wait()? {
                break (Ended::Exited, oz0_core::exit::status_code(st));
            }
            if let Some(c) = &cancel {
                let mut fds = [rustix::event::PollFd::new(
                    &c.0,
                    rustix::event::PollFlags::IN,
                )];
                let t = rustix::event::Timespec {
                    tv_sec: 0,
                    tv_nsec: 20_000_000,
                };
                if rustix::event::poll(&mut fds, Some(&t))? > 0 {
                    let _ = child.kill();
                    break (Ended::Cancelled, oz0_core::exit::status_code(child.wait()?));
                }
            } else {
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        drop(guard);
        Ok(Outcome {
            run_id: "t".into(),
            ended: ended.0,
            exit_code: ended.1,
            duration_ms: started.elapsed().as_millis().try_into().unwrap_or(0),
            limit_hit: None,
            warnings: vec![],
            report: serde_json::Map::new(),
        })
    }
}

fn config<'a>(runs: &'a dyn Sandbox, d: &TempDir) -> Config<'a> {
    Config::new(runs, common::node().display().to_string(), d.0.clone())
}

#[test]
fn each_check_fails_without_a_wall_and_says_what_it_saw() {
    let d = TempDir::new("mst-nowall");
    // No wall at all: Linux's tier 0 (refuses egress and limits).
    let plain = oz0_linux::plain::Plain;
    let home = d.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let leaky = ProxyNoWall {
        proxy: oz0_egress::Proxy::start(oz0_egress::ProxyConfig {
            audit: Arc::new(|_: &oz0_egress::AuditRecord| {}),
            ..Default::default()
        })
        .unwrap(),
        home,
    };
    // The node's own variable the environment check looks for.
    std::env::set_var(selftest::CANARY, "node-only");
    let cases: [(&dyn Sandbox, Property, &str); 8] = [
        (
            &plain,
            Property::Launch,
            "outlived it (the one in a process group of its own)",
        ),
        (
            &plain,
            Property::Files,
            "a write outside the work directory",
        ),
        (
            &leaky,
            Property::Egress,
            "a direct connection to the host's 127.0.0.1:",
        ),
        (
            &plain,
            Property::Ingress,
            "the host reached a listener inside the sandbox",
        ),
        (
            &plain,
            Property::JobLimits,
            "closing the run left its processes running",
        ),
        (
            &plain,
            Property::FailClosed,
            "could not be applied ran anyway",
        ),
        (
            &plain,
            Property::ProtectedPaths,
            ".git/hooks/pre-commit was modified",
        ),
        (&leaky, Property::Environment, "reached the run"),
    ];
    for (runs, p, want) in cases {
        let cfg = config(runs, &d);
        let t = Instant::now();
        let r = selftest::check_one(&cfg, p);
        println!("{p}: {r:?} ({} ms)", t.elapsed().as_millis());
        let e = r.expect_err(p.as_str());
        assert!(e.as_str().contains(want), "{p}: {e}");
    }
    // Through the leaky runner, egress's proxy parts still work: it is the
    // direct connection alone that fails it; and what leaks is the node's.
    let cfg = config(&leaky, &d);
    let e = selftest::check_one(&cfg, Property::Environment).unwrap_err();
    let e = e.as_str();
    assert!(
        e.contains(selftest::CANARY) || e.contains("OZ0_"),
        "the node's variable is named: {e}"
    );
    // The whole self-test stops at its first failure, at tier 0.
    let cfg = config(&plain, &d);
    let mut seen = Vec::new();
    let t = selftest::run(&cfg, |l| seen.push(l.property));
    assert_eq!(t.failed, Some(Property::Launch));
    assert_eq!(seen, [Property::Launch]);
    assert_eq!(t.tier(), 0);
}
