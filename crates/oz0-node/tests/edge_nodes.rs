//! A real `oz0-edge` and real `oz0-node run --edge` processes on this
//! machine: one whose self-test passes, one forced to fail a property, one
//! waiting for an operator's approval, and a Windows PSEC node simulated
//! with the edge's client library.
//!
//! The edge binary: see `common/fleet.rs`.

// The Linux node's black-box tests (the Windows node's are windows.rs).
#![cfg(target_os = "linux")]

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::fleet::{edge_bin, oz0_bin, processes_with, wait_gone, Edge, Node, TOKEN};
use common::{marker, node, sandbox_ready, skip, TempDir};
use oz0_edge::client::{NodeClient, NodeKey, Trust};
use oz0_edge::routing::Origin;
use oz0_policy::facts::{
    Mechanism, Microvm, MicrovmReason, NodeFacts, Os, Platform, SelfTest, FACTS_SCHEMA,
};

/// A Windows node whose PSEC self-test passed, claiming tier 1.
fn windows_facts() -> NodeFacts {
    let mut f = NodeFacts {
        schema: FACTS_SCHEMA,
        node_version: "0.1.0".into(),
        platform: Platform {
            os: Os::Windows,
            arch: "x86_64".into(),
            build_raw: "26200.9457".into(),
        },
        tier_proven: 1,
        tier_routed: 1,
        mechanism: Mechanism {
            kind: "psec".into(),
            psec_contract: Some("1.0".into()),
            psec_features: vec!["deny_paths".into()],
            ..Default::default()
        },
        self_test: SelfTest::Passed,
        fix: None,
        microvm: Microvm {
            ready: false,
            reason: Some(MicrovmReason::Unsupported),
            pinned: None,
            backend: None,
        },
        oci: Default::default(),
        labels: BTreeMap::new(),
    };
    f.derive_labels();
    f
}

fn ready() -> Option<PathBuf> {
    if !sandbox_ready() {
        return None;
    }
    match edge_bin() {
        Some(b) => Some(b),
        None => {
            skip("the oz0-edge binary is not found: set OZ0_EDGE_BIN or `cargo build -p oz0-edge`");
            None
        }
    }
}

/// Tiers the edge routes the tenant's nodes at, by name.
fn routed(edge: &Edge) -> BTreeMap<String, u8> {
    edge.rt
        .block_on(edge.op.nodes(Some("acme")))
        .unwrap()
        .into_iter()
        .map(|n| (n.name.unwrap_or(n.id), n.tier_routed))
        .collect()
}

fn node_id(edge: &Edge, name: &str) -> String {
    edge.rt.block_on(edge.op.node(name)).unwrap().id
}

#[test]
fn outside_events_run_only_on_a_proven_node_and_survive_its_death() {
    let Some(bin) = ready() else { return };
    let edge = Edge::start(&bin, 3);

    // The Windows PSEC node: its self-test passed, and it is routed at tier 0.
    let win = NodeClient::with_trust(
        &edge.url,
        "acme",
        NodeKey::generate(),
        &Trust::CaFile(edge.ca.clone()),
    )
    .unwrap();
    edge.rt
        .block_on(win.register(TOKEN, Some("win-psec")))
        .unwrap();
    let view = edge
        .rt
        .block_on(win.report_facts(&windows_facts()))
        .unwrap();
    assert_eq!(view.tier_routed, 0, "{view:?}");

    // The node forced to fail a property: tier 0 on its own word.
    let mut failing = Node::start(&edge, "failing", &["--inject-fault", "egress"]);
    failing.wait_log("facts reported: the edge routes this node at tier 0", 120);
    let log = failing.log();
    assert!(log.contains("Self-test egress: failed"), "{log}");
    assert!(!log.contains("enrolment-token"), "{log}");
    assert!(!log.contains(TOKEN), "the token reached the log: {log}");

    // Only the failing node and the Windows node: outside events are refused, with the reason.
    let refused = edge
        .submit(Origin::Webhook, serde_json::json!({"command": ["true"]}))
        .unwrap_err();
    assert!(
        refused.contains("no_eligible_node") && refused.contains("no node routed at tier 1"),
        "{refused}"
    );

    // A job that asks for limits, from inside: the failing node still
    // builds its sandbox, but proved none of it, and refuses the limits it
    // cannot show it enforces, as a node without a wall does.
    let id = edge
        .submit(
            Origin::Internal,
            serde_json::json!({"command": ["true"], "memory": 64}),
        )
        .unwrap();
    let j = edge.wait_job(&id, 60);
    assert_ne!(j.state, "succeeded", "{j:?}\n{}", failing.log());
    assert!(
        j.error
            .as_deref()
            .unwrap_or("")
            .contains("enforces neither job limits"),
        "{j:?}"
    );

    // The passing node: tier 1.
    let mut passing = Node::start(&edge, "passing", &[]);
    passing.wait_log("facts reported: the edge routes this node at tier 1", 120);
    let tiers = routed(&edge);
    assert_eq!(tiers.get("passing"), Some(&1), "{tiers:?}");
    assert_eq!(tiers.get("failing"), Some(&0), "{tiers:?}");
    assert_eq!(tiers.get("win-psec"), Some(&0), "{tiers:?}");
    let passing_id = node_id(&edge, "passing");

    // A webhook's job runs on the passing node; its status and output come back.
    let id = edge
        .submit(
            Origin::Webhook,
            serde_json::json!({
                "command": ["sh", "-c", "echo \"hello $WHO\"; echo oops >&2; exit 3"],
                "env": {"WHO": "edge"},
                "timeout": 30,
            }),
        )
        .unwrap();
    let j = edge.wait_job(&id, 60);
    assert_eq!(j.state, "failed", "{j:?}");
    assert_eq!(j.exit_code, Some(3), "{j:?}");
    assert_eq!(j.node_id.as_deref(), Some(passing_id.as_str()), "{j:?}");
    assert_eq!(passing.output(&id, "stdout"), "hello edge\n");
    assert!(passing.output(&id, "stderr").contains("oops"));
    let status: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(passing.dir.0.join(format!("data/jobs/{id}/status.json")))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(status["exit_code"], 3);
    assert_eq!(status["outcome"], "exited");
    // The job's output never reaches the node's log.
    assert!(!passing.log().contains("hello edge"), "{}", passing.log());

    let id = edge
        .submit(Origin::Chat, serde_json::json!({"command": ["true"]}))
        .unwrap();
    let j = edge.wait_job(&id, 60);
    assert_eq!((j.state.as_str(), j.exit_code), ("succeeded", Some(0)));

    // Killed mid-job (SIGKILL): the run dies with it, and the job is handed
    // again only once another eligible node appears — never twice at once.
    let marker = format!("{}.4242", 4 + std::process::id() % 3);
    let script = format!("echo started; sleep {marker}; echo done");
    let id = edge
        .submit(
            Origin::Webhook,
            serde_json::json!({"command": ["sh", "-c", script], "timeout": 60}),
        )
        .unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    while !passing.output(&id, "stdout").contains("started") {
        assert!(Instant::now() < until, "{}", passing.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!processes_with(&marker).is_empty());
    passing.signal("KILL");
    passing.wait_exit(10);
    wait_gone(&marker, 10);
    // The lease lapses; only the failing (tier 0) node polls, and it never
    // sees the tier-1 queue: the job waits.
    std::thread::sleep(Duration::from_secs(5));
    let j = edge.job(&id);
    assert!(j.state == "leased" || j.state == "queued", "{j:?}");
    assert_eq!(j.attempts, 1, "{j:?}");
    assert!(
        !failing.log().contains(&format!("took job {id}")),
        "{}",
        failing.log()
    );
    assert!(processes_with(&marker).is_empty());

    let mut second = Node::start(&edge, "second", &[]);
    second.wait_log("facts reported: the edge routes this node at tier 1", 120);
    let j = edge.wait_job(&id, 60);
    assert_eq!(
        (j.state.as_str(), j.exit_code),
        ("succeeded", Some(0)),
        "{j:?}"
    );
    assert_eq!(j.attempts, 2, "{j:?}");
    assert_eq!(j.node_id, Some(node_id(&edge, "second")), "{j:?}");
    assert_eq!(second.output(&id, "stdout"), "started\ndone\n");

    // SIGTERM mid-job: the run's whole tree ends, the node exits 0, and the
    // job is left to its lease (not reported as done).
    let marker = format!("{}.4343", 20 + std::process::id() % 3);
    let script = format!("echo started; sleep {marker} & sleep {marker}; echo done");
    let id = edge
        .submit(
            Origin::Event,
            serde_json::json!({"command": ["sh", "-c", script], "timeout": 60}),
        )
        .unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    while !second.output(&id, "stdout").contains("started") {
        assert!(Instant::now() < until, "{}", second.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    second.signal("TERM");
    assert_eq!(second.wait_exit(20), Some(0), "{}", second.log());
    wait_gone(&marker, 5);
    assert!(second.log().contains("stopping"), "{}", second.log());
    assert_ne!(edge.job(&id).state, "succeeded");

    // An idle node stops cleanly too.
    failing.signal("TERM");
    assert_eq!(failing.wait_exit(20), Some(0), "{}", failing.log());
}

#[test]
fn the_enrolment_token_file_must_be_private() {
    let Some(bin) = ready() else { return };
    let edge = Edge::start(&bin, 30);
    let dir = TempDir::new("token");
    std::fs::write(dir.join("token"), TOKEN).unwrap();
    std::fs::set_permissions(dir.join("token"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = Command::new(node())
        .args(["run", "--edge", &edge.url, "--tenant", "acme"])
        .arg("--enrolment-token-file")
        .arg(dir.join("token"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("chmod 600"), "{err}");
    assert!(!err.contains(TOKEN), "{err}");
}

/// Under `--require-approval` a node waiting for approval takes no work at
/// all: an internal tier-0 job, with the secret in its variables, stays
/// queued while it polls, and the node says why once. A job whose only
/// nodes wait or are drained is refused with both fixes; once approved
/// the node runs the job. A command with a NUL byte is refused at submit.
#[test]
fn a_node_waiting_for_approval_takes_no_work_until_approved() {
    let Some(bin) = ready() else { return };
    if oz0_bin().is_none() {
        skip("the oz0 binary is not found: set OZ0_CLI_BIN or `cargo build -p oz0-edge`");
        return;
    }
    let edge = Edge::start_with(&bin, 30, &["--require-approval", "acme"]);
    let mut waiting = Node::start(&edge, "waiting", &[]);
    waiting.wait_log("facts reported", 120);
    let waiting_id = node_id(&edge, "waiting");

    // An approved node that never polls, so that a tier-0 job is taken.
    let idle = NodeClient::with_trust(
        &edge.url,
        "acme",
        NodeKey::generate(),
        &Trust::CaFile(edge.ca.clone()),
    )
    .unwrap();
    edge.rt
        .block_on(idle.register(TOKEN, Some("idle")))
        .unwrap();
    edge.rt
        .block_on(idle.report_facts(&windows_facts()))
        .unwrap();
    let (st, _, err) = edge.oz0(&["node", "approve", "idle"]);
    assert_eq!(st, Some(0), "{err}");

    let secret = marker("secret");
    let (st, out, err) = edge.oz0(&[
        "job",
        "submit",
        "--tenant",
        "acme",
        "--json",
        "--env",
        &format!("JOB_SECRET={secret}"),
        "--",
        "sh",
        "-c",
        "echo \"$JOB_SECRET\"",
    ]);
    assert_eq!(st, Some(0), "{out}{err}");
    let accepted: serde_json::Value = serde_json::from_str(&out).unwrap();
    let job = accepted["job_id"].as_str().unwrap().to_string();
    assert_eq!(accepted["tier"], 0, "{out}");
    let submitted = edge.job(&job).submitted_ms;

    // The waiting node polls on (the edge hears from it) and gets nothing.
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let v = edge.rt.block_on(edge.op.node("waiting")).unwrap();
        if v.last_seen_ms >= submitted + 1_500 {
            break;
        }
        assert!(
            Instant::now() < until,
            "the waiting node stopped polling: {v:?}\n{}",
            waiting.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let j = edge.job(&job);
    assert_eq!(
        (j.state.as_str(), j.attempts, j.node_id.as_deref()),
        ("queued", 0, None),
        "a node waiting for approval was handed the job: {j:?}\n{}",
        waiting.log()
    );
    assert!(!waiting.dir.join("data/jobs").join(&job).exists());
    let log = waiting.log();
    assert_eq!(
        log.matches("waits for an operator's approval").count(),
        1,
        "said once, not at every poll:\n{log}"
    );
    assert!(
        log.contains(&format!("oz0 node approve {waiting_id}")),
        "{log}"
    );
    assert!(!log.contains(&secret), "{log}");

    // Its only other node drained: refused, with both fixes.
    let (st, _, err) = edge.oz0(&["node", "drain", "idle"]);
    assert_eq!(st, Some(0), "{err}");
    let (st, _, err) = edge.oz0(&["job", "submit", "--tenant", "acme", "--", "true"]);
    assert_eq!(st, Some(1), "{err}");
    for says in [
        "waiting waits for an operator's approval (oz0 node approve waiting)",
        "idle is drained (oz0 node undrain idle)",
    ] {
        assert!(err.contains(says), "{says}: {err}");
    }
    assert!(!err.contains("add a Linux or macOS node"), "{err}");

    // Approved: it runs the queued job, with its variable.
    let (st, _, err) = edge.oz0(&["node", "approve", "waiting"]);
    assert_eq!(st, Some(0), "{err}");
    let j = edge.wait_job(&job, 60);
    assert_eq!(
        (j.state.as_str(), j.node_id.as_deref()),
        ("succeeded", Some(waiting_id.as_str())),
        "{j:?}\n{}",
        waiting.log()
    );
    assert_eq!(waiting.output(&job, "stdout"), format!("{secret}\n"));
    assert!(waiting.log().contains("approved"), "{}", waiting.log());

    // A NUL byte in the command: refused at submit, like one in a variable.
    let refused = edge
        .submit(
            Origin::Internal,
            serde_json::json!({"command": ["echo", "a\u{0}b"]}),
        )
        .unwrap_err();
    assert!(
        refused.contains("400") && refused.contains("bad_job") && refused.contains("NUL"),
        "{refused}"
    );
}

/// A `--name` that is not a host name stops the node before it starts,
/// naming the value, the form and an example.
#[test]
fn a_name_that_is_not_a_host_name_is_refused_at_start() {
    let Some(bin) = ready() else { return };
    let edge = Edge::start(&bin, 30);
    let dir = TempDir::new("badname");
    common::fleet::write_secret(&dir.join("token"), TOKEN);
    for bad in ["Build_01", "-x", "n0123456789abcdef01234567"] {
        let mut child = Command::new(node())
            .args(["run", "--once", "--edge", &edge.url, "--tenant", "acme"])
            .arg("--edge-ca")
            .arg(&edge.ca)
            .arg("--enrolment-token-file")
            .arg(dir.join("token"))
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg(format!("--name={bad}"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let until = Instant::now() + Duration::from_secs(120);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > until {
                let _ = child.kill();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{bad}: {err}");
        for says in [bad, "lower-case letters", "build-01"] {
            assert!(err.contains(says), "{bad}: {says}: {err}");
        }
    }
    let nodes = edge.rt.block_on(edge.op.nodes(Some("acme"))).unwrap();
    assert!(nodes.is_empty(), "{nodes:?}");
}

/// `<data-dir>/jobs/` is kept under `--keep-jobs-mib` after each job (the
/// oldest records go) and under `--keep-jobs-days` at the node's start;
/// what is not a job record stays.
#[test]
fn job_records_are_kept_by_size_after_each_job_and_by_age_at_start() {
    let Some(bin) = ready() else { return };
    let edge = Edge::start(&bin, 30);
    let flags = ["--keep-jobs-mib", "1", "--keep-jobs-days", "7"];
    let mut n = Node::start(&edge, "keep", &flags);
    n.wait_log("facts reported: the edge routes this node at tier 1", 120);
    let jobs = n.dir.join("data/jobs");
    let mut ids = Vec::new();
    // Three records of 700 kB each: never more than 1 MiB together.
    for _ in 0..3 {
        let id = edge
            .submit(
                Origin::Internal,
                serde_json::json!({"command": ["sh", "-c", "head -c 700000 /dev/zero | tr '\\0' x"]}),
            )
            .unwrap();
        let j = edge.wait_job(&id, 60);
        assert_eq!(j.state, "succeeded", "{j:?}");
        ids.push(id);
        // The sweep follows the report of the end.
        let until = Instant::now() + Duration::from_secs(10);
        while ids.len() > 1 && jobs.join(&ids[ids.len() - 2]).exists() {
            assert!(Instant::now() < until, "{}", n.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        let total: u64 = std::fs::read_dir(&jobs)
            .unwrap()
            .flatten()
            .flat_map(|e| std::fs::read_dir(e.path()).into_iter().flatten().flatten())
            .map(|f| f.metadata().unwrap().len())
            .sum();
        assert!(total <= 1 << 20, "{total} bytes of records: {}", n.log());
    }
    assert!(
        jobs.join(&ids[2]).join("stdout").is_file(),
        "the newest went"
    );
    assert_eq!(
        std::fs::metadata(jobs.join(&ids[2]).join("stdout"))
            .unwrap()
            .len(),
        700_000
    );
    assert!(n.log().contains("and 1 beyond 1 MiB in all"), "{}", n.log());

    // A record from 10 days ago and a file of the operator's, then a restart.
    let old = jobs.join("job-from-long-ago");
    std::fs::create_dir(&old).unwrap();
    std::fs::write(old.join("stdout"), "old").unwrap();
    let then = std::time::SystemTime::now() - Duration::from_secs(10 * 86_400);
    for p in [old.join("stdout"), old.clone()] {
        std::fs::File::open(&p).unwrap().set_modified(then).unwrap();
    }
    std::fs::write(jobs.join("NOTES"), "mine").unwrap();
    n.restart(&node(), &edge, "keep", &flags, &[("OZ0_MICROVM", "off")]);
    n.wait_log("removed 1 older than 7 day(s)", 120);
    assert!(!old.exists());
    assert!(jobs.join("NOTES").is_file());
    assert!(jobs.join(&ids[2]).is_dir());
}
