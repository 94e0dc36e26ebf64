//! The fleet as an operator runs it, end to end: a real `oz0-edge` over
//! HTTPS (a CA the test makes), real `oz0-node run` processes as the
//! unprivileged user, and the real `oz0` CLI. A tenant that asks for
//! approval gives a new node no work until `oz0 node approve`; a job is
//! submitted, followed and its logs read; two jobs run at once on one
//! node; a cancel stops a running job within one renewal; a drained node
//! takes nothing new (a job for it is refused, naming `oz0 node
//! undrain`); a rotated key works and the old one does not; a killed node
//! stops being eligible within the liveness window; a removed node is
//! refused and stops. On SQLite, and on PostgreSQL when
//! `OZ0_EDGE_TEST_POSTGRES` names one (scripts/test runs it under
//! `with-postgres.sh`).

// The Linux node's black-box tests (the Windows node's are windows.rs).
#![cfg(target_os = "linux")]

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::fleet::{edge_bin, oz0_bin, processes_with, Edge, Node};
use common::{marker, node, sandbox_ready, skip};
use oz0_edge::client::{NodeClient, NodeKey, Trust};
use oz0_edge::routing::{JobKind, Origin};

/// The liveness window the edge is started with, seconds.
const LIVE_SECS: u64 = 4;

fn ready() -> Option<PathBuf> {
    if !sandbox_ready() {
        return None;
    }
    let Some(edge) = edge_bin() else {
        skip("the oz0-edge binary is not found: set OZ0_EDGE_BIN or `cargo build -p oz0-edge`");
        return None;
    };
    if oz0_bin().is_none() {
        skip("the oz0 binary is not found: set OZ0_CLI_BIN or `cargo build -p oz0-edge`");
        return None;
    }
    Some(edge)
}

fn stores() -> Vec<Option<String>> {
    let mut v = vec![None];
    match common::fleet::postgres_store("fleet") {
        Some(pg) => v.push(Some(pg)),
        None if std::env::var("OZ0_MUST_WORK").as_deref() == Ok("1") => {
            panic!("OZ0_MUST_WORK=1 and OZ0_EDGE_TEST_POSTGRES is unset: scripts/test runs this under with-postgres.sh")
        }
        None => eprintln!("SKIPPED the PostgreSQL half: OZ0_EDGE_TEST_POSTGRES is unset"),
    }
    v
}

fn job_id(out: &str) -> String {
    out.split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("no job id in {out:?}"))
        .to_string()
}

#[test]
fn an_operator_approves_follows_cancels_drains_rotates_and_removes() {
    let Some(bin) = ready() else { return };
    for store in stores() {
        let kind = if store.is_some() {
            "postgres"
        } else {
            "sqlite"
        };
        eprintln!("== store: {kind}");
        let mut flags = vec!["--require-approval", "acme", "--node-live-secs", "4"];
        if let Some(s) = &store {
            flags.extend(["--store", s.as_str()]);
        }
        let edge = Edge::start_with(&bin, 6, &flags);
        let mut a = Node::start(&edge, "alpha", &["--jobs", "2"]);
        a.wait_log("facts reported", 120);

        // Waiting for approval: no work at all; a job is refused with the fix.
        let (st, out, _) = edge.oz0(&["node", "show", "alpha"]);
        assert_eq!(st, Some(0));
        assert!(out.contains("State: pending approval"), "{kind}: {out}");
        for origin in ["webhook", "internal"] {
            let (st, _, err) = edge.oz0(&[
                "job", "submit", "--tenant", "acme", "--origin", origin, "--", "true",
            ]);
            assert_eq!(st, Some(1));
            assert!(
                err.contains("alpha waits for an operator's approval (oz0 node approve alpha)"),
                "{kind}: {origin}: {err}"
            );
        }
        let (st, out, err) = edge.oz0(&["node", "approve", "alpha"]);
        assert_eq!(st, Some(0), "{err}");
        assert!(
            out.contains("State: up") && out.contains("routed at 1"),
            "{kind}: {out}"
        );
        a.wait_log("the edge routes this node at tier 1 now", 30);

        // Submit, follow, read its logs.
        let (st, out, err) = edge.oz0(&[
            "job",
            "submit",
            "--tenant",
            "acme",
            "--origin",
            "webhook",
            "--wait",
            "60",
            "--",
            "sh",
            "-c",
            "echo hello from the job; echo a warning >&2",
        ]);
        assert_eq!(st, Some(0), "{kind}: {out}{err}\n{}", a.log());
        assert!(
            out.contains("(shell, tier 1): succeeded") && out.contains("hello from the job"),
            "{out}"
        );
        let id = job_id(&out);
        let (st, logs, _) = edge.oz0(&["job", "logs", "--tenant", "acme", &id]);
        assert_eq!(st, Some(0));
        assert!(
            logs.contains("== stdout: 19 byte(s)\nhello from the job\n"),
            "{kind}: {logs}"
        );
        assert!(
            logs.contains("== stderr: 10 byte(s)\na warning\n"),
            "{logs}"
        );
        let (_, list, _) = edge.oz0(&["job", "list", "--tenant", "acme", "--state", "succeeded"]);
        assert!(list.contains(&id), "{list}");

        // Two jobs at once on the one node (--jobs 2).
        let two: Vec<String> = (0..2)
            .map(|_| {
                edge.submit(
                    Origin::Webhook,
                    serde_json::json!({"command": ["sh", "-c", "sleep 3; echo done"]}),
                )
                .unwrap()
            })
            .collect();
        let views: Vec<_> = two.iter().map(|j| edge.wait_job(j, 60)).collect();
        assert!(views.iter().all(|v| v.state == "succeeded"), "{views:?}");
        let (l0, d0) = (views[0].leased_ms.unwrap(), views[0].done_ms.unwrap());
        let (l1, d1) = (views[1].leased_ms.unwrap(), views[1].done_ms.unwrap());
        assert!(
            l0 < d1 && l1 < d0,
            "{kind}: the two ran one after the other: {views:?}"
        );

        // A cancel stops a running job within one renewal (a third of the 6 s lease).
        let m = marker("cancel");
        let long = edge
            .submit(
                Origin::Webhook,
                serde_json::json!({"command": ["sh", "-c", "sleep 600; :", m]}),
            )
            .unwrap();
        let until = Instant::now() + Duration::from_secs(30);
        while processes_with(&m).is_empty() {
            assert!(
                Instant::now() < until,
                "the long job never started:\n{}",
                a.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let t = Instant::now();
        let (st, out, _) = edge.oz0(&["job", "cancel", "--tenant", "acme", &long]);
        assert_eq!(st, Some(0));
        assert!(out.contains(": cancelled"), "{out}");
        common::fleet::wait_gone(&m, 10);
        eprintln!("{kind}: a cancelled job stopped after {:?}", t.elapsed());
        assert!(t.elapsed() < Duration::from_secs(6), "{:?}", t.elapsed());

        // Drained: nothing new.
        let (st, _, _) = edge.oz0(&["node", "drain", "alpha"]);
        assert_eq!(st, Some(0));
        let refused = edge
            .submit(Origin::Webhook, serde_json::json!({"command": ["true"]}))
            .unwrap_err();
        assert!(
            refused.contains("alpha is drained (oz0 node undrain alpha)"),
            "{kind}: {refused}"
        );
        edge.oz0(&["node", "undrain", "alpha"]);

        // A rotated key: the node keeps its id and works; the old key does not.
        let key_file = a.dir.join("data/identity/node.key");
        let old = NodeKey::load_or_create(&key_file).unwrap();
        a.signal("TERM");
        assert_eq!(a.wait_exit(30), Some(0), "{}", a.log());
        let o = Command::new(node())
            .args(["key", "rotate", "--edge", &edge.url, "--edge-ca"])
            .arg(&edge.ca)
            .arg("--data-dir")
            .arg(a.dir.join("data"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains(&format!("node {}: key rotated", old.id()))
        );
        a.restart(
            &node(),
            &edge,
            "alpha",
            &["--jobs", "2"],
            &[("OZ0_MICROVM", "off")],
        );
        a.wait_log("facts reported", 120);
        let j = edge
            .submit(Origin::Webhook, serde_json::json!({"command": ["true"]}))
            .unwrap();
        let v = edge.wait_job(&j, 60);
        assert_eq!(
            (v.state.as_str(), v.node_id.as_deref()),
            ("succeeded", Some(old.id())),
            "{kind}: {v:?}"
        );
        let rt = tokio::runtime::Runtime::new().unwrap();
        let stale = NodeClient::with_trust(&edge.url, "acme", old, &Trust::CaFile(edge.ca.clone()))
            .unwrap();
        assert!(
            rt.block_on(stale.whoami()).is_err(),
            "{kind}: the old key still works"
        );

        // Killed: not eligible once the liveness window has passed.
        a.signal("KILL");
        let _ = a.wait_exit(10);
        let t = Instant::now();
        loop {
            match edge.submit_kind(
                Origin::Webhook,
                JobKind::Shell,
                serde_json::json!({"command": ["true"]}),
            ) {
                Err(e) if e.contains("no node routed at tier 1") || e.contains("none live") => {
                    break
                }
                Err(e) => panic!("{e}"),
                Ok(j) => {
                    edge.cancel(&j);
                }
            }
            assert!(
                t.elapsed() < Duration::from_secs(LIVE_SECS + 6),
                "still eligible after {:?}",
                t.elapsed()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        eprintln!(
            "{kind}: a killed node was no longer eligible after {:?} (window {LIVE_SECS} s)",
            t.elapsed()
        );
        let (_, out, _) = edge.oz0(&["node", "show", "alpha"]);
        assert!(out.contains("State: down"), "{out}");

        // Removed: refused, and the node stops.
        a.restart(
            &node(),
            &edge,
            "alpha",
            &["--jobs", "2"],
            &[("OZ0_MICROVM", "off")],
        );
        a.wait_log("facts reported", 120);
        let (st, _, _) = edge.oz0(&["node", "remove", "alpha"]);
        assert_eq!(st, Some(0));
        assert_eq!(a.wait_exit(30), Some(1), "{}", a.log());
        assert!(
            a.log().contains("was removed by an operator"),
            "{}",
            a.log()
        );
        let (_, out, _) = edge.oz0(&["node", "list"]);
        assert!(!out.contains("alpha"), "{out}");
    }
}
