//! Unit tests of the PSEC plan, and the fixtures other modules' tests share
//! (`minimal_plan`, `req`, `host`, `golden`): golden requests per route, the
//! request's structure, refusals before launch, egress routes, job limits.

use super::*;
use crate::probe::PsecFacts;
use oz0_policy::{EnvVar, Limits, RunRequest};

/// Compares `actual` with `golden/<name>`; `OZ0_BLESS=1` rewrites it.
pub(crate) fn golden(name: &str, actual: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("golden")
        .join(name);
    if std::env::var_os("OZ0_BLESS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (OZ0_BLESS=1 writes it)", path.display()));
    assert_eq!(
        actual, want,
        "golden/{name} differs (OZ0_BLESS=1 rewrites it)"
    );
}

fn p(s: &str) -> String {
    WinPath::parse(s).unwrap().to_abs().as_str().to_string()
}

pub(crate) fn w(s: &str) -> WinPath {
    WinPath::parse(s).unwrap()
}

pub(crate) fn req() -> RunRequest {
    RunRequest {
        work: p("C:\\jobs\\j1"),
        data_dir: p("C:\\Users\\me\\AppData\\Local\\orchestrator-zero-node"),
        command: vec![
            "C:\\Windows\\System32\\cmd.exe".into(),
            "/c".into(),
            "echo hi".into(),
        ],
        ..Default::default()
    }
}

pub(crate) fn host() -> WindowsHost {
    WindowsHost {
        system_root: w("C:\\Windows"),
        node_binary: w("C:\\Program Files\\Orchestrator Zero\\orchestrator-zero-node.exe"),
        run_temp: w("C:\\Users\\me\\AppData\\Local\\Temp\\oz0-run-j1"),
        other_runs: vec![w("C:\\jobs\\j2")],
    }
}

pub(crate) const V1_0_DENY: PsecFacts = PsecFacts {
    contract: Contract::V1_0,
    bits: 0x3,
};
pub(crate) const V1_1_ALL: PsecFacts = PsecFacts {
    contract: Contract::V1_1,
    bits: 0xd,
};

pub(crate) fn token() -> ProxyToken {
    ProxyToken::new("run-token-0123456789abcdef").unwrap()
}

pub(crate) fn minimal_plan() -> PsecPlan {
    plan(&RunSpec::new(req()).unwrap(), &host(), &V1_0_DENY, None).unwrap()
}

pub(crate) fn egress_req() -> RunRequest {
    RunRequest {
        read: vec![p("C:\\tools\\python313")],
        write: vec![p("D:\\cache\\pip")],
        env: vec![EnvVar::new("LANG", "C.UTF-8").unwrap()],
        allow: vec!["api.github.com".into(), "*.pypi.org".into()],
        forward: vec![8080],
        limits: Limits {
            memory_mib: Some(256),
            processes: Some(8),
            cpu_seconds: Some(60),
            timeout_seconds: Some(30),
            tmp_mib: None,
        },
        ..req()
    }
}

fn json(plan: &PsecPlan) -> String {
    serde_json::to_string_pretty(plan).unwrap() + "\n"
}

#[test]
fn golden_minimal_no_egress() {
    golden("plan_minimal.json", &json(&minimal_plan()));
}

#[test]
fn golden_relay_route_with_limits_and_protected_paths() {
    let spec = RunSpec::new(egress_req()).unwrap();
    let relay = EgressSetup::Relay {
        port: RelayPort::new(47331).unwrap(),
        token: token(),
    };
    let plan = plan(&spec, &host(), &V1_0_DENY, Some(&relay)).unwrap();
    golden("plan_relay.json", &json(&plan));
    // The token is in the environment only, never in the container spec.
    assert!(!serde_json::to_string(&plan.request)
        .unwrap()
        .contains("run-token"));
}

#[test]
fn golden_bridge_route_on_contract_1_1() {
    let spec = RunSpec::new(egress_req()).unwrap();
    let bridge = EgressSetup::Bridge {
        port: 8119,
        token: token(),
        sockets_dir: w("C:\\Users\\me\\AppData\\Local\\Temp\\oz0-run-j1-sock"),
    };
    let plan = plan(&spec, &host(), &V1_1_ALL, Some(&bridge)).unwrap();
    golden("plan_bridge.json", &json(&plan));
}

#[test]
fn structure_of_the_request() {
    let plan = minimal_plan();
    let r = &plan.request;
    assert_eq!(r.fs_read_write, [w("C:\\jobs\\j1"), host().run_temp]);
    assert_eq!(
        r.fs_deny,
        [
            w("C:\\Users\\me\\AppData\\Local\\orchestrator-zero-node"),
            w("C:\\jobs\\j2")
        ]
    );
    assert!(r.fs_read_only.contains(&w("C:\\jobs\\j1\\.git\\hooks")));
    assert!(r.fs_read_only.contains(&w("C:\\jobs\\j1\\.git\\config")));
    assert!(r.fs_read_only.contains(&w("C:\\jobs\\j1\\.claude")));
    assert!(r.fs_read_only.contains(&host().node_binary));
    assert!(plan.hold_open.contains(&w("C:\\jobs\\j1\\.git")));
    assert_eq!(
        plan.protected.len(),
        protected::READ_ONLY_NAMES.len() + protected::git_held().len()
    );
    assert!(r.capabilities.is_empty());
    assert_eq!(r.network_policy.proxy_url, None);
    assert_eq!(
        plan.job.limit_flags,
        JOB_LIMIT_KILL_ON_JOB_CLOSE | JOB_LIMIT_DIE_ON_UNHANDLED_EXCEPTION
    );
    // Sorted: the run is told its wall, then its PATH.
    let names: Vec<&str> = plan.env.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names[..2], ["OZ0_SANDBOX", "PATH"]);
    assert_eq!(plan.env[0].value, "tier=0;wall=psec");
}

#[test]
fn refused_before_launch() {
    let spec = RunSpec::new(req()).unwrap();
    let no_deny = PsecFacts {
        contract: Contract::V1_0,
        bits: 0x2,
    };
    let e = plan(&spec, &host(), &no_deny, None).unwrap_err();
    assert!(matches!(e, PlanError::DenyUnsupported(..)), "{e}");
    assert!(e.to_string().contains("refused rather than run without it"));

    type Edit = fn(&mut RunRequest, &mut WindowsHost);
    let cases: &[(&str, Edit, &str)] = &[
        (
            "data dir in another case",
            |r, _| {
                r.read = vec![p(
                    "c:\\users\\ME\\appdata\\local\\ORCHESTRATOR-ZERO-NODE\\identity",
                )]
            },
            "overlaps the node's data directory",
        ),
        (
            "holds data dir",
            |r, _| r.work = p("C:\\users\\me\\appdata"),
            "overlaps the node's data directory",
        ),
        ("drive root", |r, _| r.read = vec![p("D:\\")], "whole drive"),
        (
            "windows writable",
            |r, _| r.write = vec![p("C:\\WINDOWS\\Temp")],
            "Windows folder",
        ),
        (
            "other run",
            |r, _| r.read = vec![p("C:\\Jobs\\J2\\out")],
            "another run's folder",
        ),
        (
            "same path in two cases",
            |r, _| r.read = vec![p("c:\\JOBS\\j1")],
            "same folder on Windows",
        ),
        (
            "linux path",
            |r, _| r.read = vec!["/usr/share".into()],
            "does not name a Windows path",
        ),
        (
            "bare program",
            |r, _| r.command = vec!["cmd.exe".into()],
            "search the work directory",
        ),
        (
            "env case clash",
            |r, _| {
                r.env = vec![
                    EnvVar::new("Foo", "1").unwrap(),
                    EnvVar::new("FOO", "2").unwrap(),
                ]
            },
            "same variable on Windows",
        ),
        (
            "caller sets SystemRoot",
            |r, _| r.env = vec![EnvVar::new("SYSTEMROOT", "D:\\x").unwrap()],
            "set by the sandbox itself",
        ),
    ];
    for (name, edit, want) in cases {
        let (mut r, mut h) = (req(), host());
        edit(&mut r, &mut h);
        let spec = RunSpec::new(r).expect(name);
        let e = plan(&spec, &h, &V1_0_DENY, None)
            .expect_err(name)
            .to_string();
        assert!(e.contains(want), "{name}: {e}");
    }
}

#[test]
fn egress_must_match_its_route() {
    let with = RunSpec::new(egress_req()).unwrap();
    let without = RunSpec::new(req()).unwrap();
    let relay = EgressSetup::Relay {
        port: RelayPort::new(47330).unwrap(),
        token: token(),
    };
    assert!(matches!(
        plan(&with, &host(), &V1_0_DENY, None),
        Err(PlanError::EgressMismatch(_))
    ));
    assert!(matches!(
        plan(&without, &host(), &V1_0_DENY, Some(&relay)),
        Err(PlanError::EgressMismatch(_))
    ));
}

#[test]
fn job_limits_in_windows_units() {
    let spec = RunSpec::new(egress_req()).unwrap();
    let relay = EgressSetup::Relay {
        port: RelayPort::new(47330).unwrap(),
        token: token(),
    };
    let j = plan(&spec, &host(), &V1_0_DENY, Some(&relay)).unwrap().job;
    assert_eq!(j.job_memory_bytes, Some(256 * 1024 * 1024));
    assert_eq!(j.active_processes, Some(8));
    assert_eq!(j.job_user_time_100ns, Some(600_000_000));
    assert_eq!(j.limit_flags, 0x2000 | 0x400 | 0x200 | 0x8 | 0x4);
    assert_eq!(j.ui_restrictions, 0x2ff);
}
