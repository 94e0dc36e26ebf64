//! Leases end to end: a job whose lease lapses is handed again but never
//! run twice at once, and two edge replicas on one store hand each job out
//! once.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{job, linux_facts, node, start_on, store_urls, ACME};
use oz0_edge::client::{ClientError, NodeClient};
use oz0_edge::routing::{Isolation, Origin};
use oz0_edge::Store;

#[tokio::test]
async fn a_job_whose_lease_lapses_is_handed_again_never_concurrently() {
    for (kind, url) in store_urls().await {
        let lease_ms = 1_500;
        let e = start_on(Store::open(&url).await.unwrap(), lease_ms).await;
        let a = node(&e, "acme", ACME, "node-a", &linux_facts(false, false)).await;
        let b = node(&e, "acme", ACME, "node-b", &linux_facts(false, false)).await;
        let j =
            e.op.submit_job("acme", &job(Origin::Webhook, Isolation::None))
                .await
                .unwrap();

        let mut la = a.poll_job(1).await.unwrap().expect("a takes the job");
        a.renew_lease(&mut la).await.unwrap();
        // `a` stops renewing (it died). Until its lease lapses nobody else gets the job.
        let mut taken_by_b = None;
        while taken_by_b.is_none() {
            let before = Instant::now();
            if let Some(lb) = b.poll_job(1).await.unwrap() {
                taken_by_b = Some((before, lb));
            } else {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        let (asked_at, lb) = taken_by_b.unwrap();
        assert_eq!(lb.job.job_id, j.job_id);
        assert_eq!(lb.job.attempt, 2);
        assert!(
            asked_at + Duration::from_millis(50) >= la.deadline(),
            "{kind}: b got the job before a's deadline"
        );
        // `a`, back from the dead, may neither renew nor complete.
        assert!(
            matches!(
                a.renew_lease(&mut la).await,
                Err(ClientError::LeaseLost { .. })
            ),
            "{kind}"
        );
        assert!(matches!(
            a.complete_job(&la, true, Some(0)).await,
            Err(ClientError::LeaseLost { .. })
        ));
        let s = e.op.job("acme", &j.job_id).await.unwrap();
        assert_eq!(
            (s.state.as_str(), s.node_id.as_deref()),
            ("leased", Some(b.node_id()))
        );

        // `b` runs a job longer than its lease, renewing as it goes.
        let mut lb = lb;
        let out = b.run_leased(&mut lb, async {
            tokio::time::sleep(Duration::from_millis(u64::try_from(lease_ms).unwrap() * 2)).await;
            7
        });
        assert_eq!(out.await.unwrap(), 7);
        assert!(
            a.poll_job(1).await.unwrap().is_none(),
            "{kind}: renewed, so not handed again"
        );
        b.complete_job(&lb, false, Some(7)).await.unwrap();
        let s = e.op.job("acme", &j.job_id).await.unwrap();
        assert_eq!(
            (s.state.as_str(), s.exit_code, s.attempts),
            ("failed", Some(7), 2)
        );
        assert!(matches!(
            b.complete_job(&lb, true, Some(0)).await,
            Err(ClientError::LeaseLost { .. })
        ));
    }
}

/// Replicas share a PostgreSQL store. A SQLite file is one edge's alone:
/// a second store on it is refused, naming PostgreSQL (the replicas' wakes
/// would not reach each other through it).
#[tokio::test]
async fn two_edge_replicas_on_one_store_hand_each_job_out_once() {
    for (kind, url) in store_urls().await {
        let e1 = start_on(Store::open(&url).await.unwrap(), 30_000).await;
        if kind == "sqlite" {
            let err = Store::open(&url).await.unwrap_err().to_string();
            assert!(
                err.contains("is held by another process (another edge?)")
                    && err.contains("edge replicas share a PostgreSQL store"),
                "{err}"
            );
            continue;
        }
        let e2 = start_on(Store::open(&url).await.unwrap(), 30_000).await;
        // Each node registers and reports through one replica and polls through the other.
        let mut nodes = Vec::new();
        for i in 0..6 {
            let (home, other) = if i % 2 == 0 { (&e1, &e2) } else { (&e2, &e1) };
            let n = node(
                home,
                "acme",
                ACME,
                &format!("n{i}"),
                &linux_facts(false, false),
            )
            .await;
            nodes.push(Arc::new(
                NodeClient::new(&other.url, "acme", n.key().clone()).unwrap(),
            ));
        }
        let mut ids = BTreeSet::new();
        for _ in 0..40 {
            ids.insert(
                e1.op
                    .submit_job("acme", &job(Origin::Event, Isolation::None))
                    .await
                    .unwrap()
                    .job_id,
            );
        }
        let mut tasks = Vec::new();
        for n in &nodes {
            let n = n.clone();
            tasks.push(tokio::spawn(async move {
                let mut got = Vec::new();
                while let Some(l) = n.poll_job(1).await.unwrap() {
                    n.complete_job(&l, true, Some(0)).await.unwrap();
                    got.push(l.job.job_id);
                }
                got
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        let unique: BTreeSet<_> = all.iter().cloned().collect();
        assert_eq!(all.len(), 40, "{kind}: each job handed out exactly once");
        assert_eq!(unique, ids);
    }
}

/// A tool job's result travels back whole with its completion; a result
/// over the bound is refused (never stored cut); a cancelled job is never
/// handed out, a leased one loses its lease, an ended one cannot be
/// cancelled.
#[tokio::test]
async fn results_come_back_whole_and_cancelled_jobs_stop() {
    use oz0_edge::client::Completion;
    for (kind, url) in store_urls().await {
        let e = start_on(Store::open(&url).await.unwrap(), 30_000).await;
        let n = node(&e, "acme", ACME, "node-t", &linux_facts(false, false)).await;
        let manifest = "tools:\n  - id: fs\n    command: [mcp-server-filesystem, /work]\n";
        let tool = oz0_edge::routing::RawJobRequest {
            origin: Origin::Internal,
            kind: oz0_edge::routing::JobKind::Tool,
            tier: 0,
            isolation: Isolation::None,
            arch: None,
            payload: serde_json::json!({"manifest": manifest, "tool": "fs", "name": "list_directory", "arguments": {"path": "/work"}}),
            idempotency_key: None,
        };
        let a = e.op.submit_raw_job("acme", &tool).await.unwrap();
        assert_eq!(a.tier, 1, "{kind}: a command tool runs at tier 1");
        let l = n.poll_job(1).await.unwrap().expect("the tool job");
        assert_eq!(l.job.job.kind().as_str(), "tool");
        assert_eq!(l.job.job.payload()["tool"], "fs");
        // Over the bound: refused, nothing stored.
        let big = serde_json::json!({"content": [{"type": "text", "text": "x".repeat(oz0_edge::MAX_RESULT_BYTES)}]});
        let err = n
            .finish_job(
                &l,
                &Completion {
                    succeeded: true,
                    exit_code: Some(0),
                    result: Some(big),
                    error: None,
                    ..Default::default()
                },
            )
            .await
            .unwrap_err();
        assert_eq!(err.refusal_code(), Some("too_large"), "{kind}: {err}");
        assert_eq!(e.op.job("acme", &a.job_id).await.unwrap().state, "leased");
        let result =
            serde_json::json!({"content": [{"type": "text", "text": "a\nb"}], "isError": false});
        n.finish_job(
            &l,
            &Completion {
                succeeded: true,
                exit_code: Some(0),
                result: Some(result.clone()),
                error: None,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let v = e.op.job("acme", &a.job_id).await.unwrap();
        assert_eq!(
            (v.kind.as_str(), v.state.as_str()),
            ("tool", "succeeded"),
            "{kind}"
        );
        assert_eq!(v.result, Some(result), "{kind}");
        assert!(
            v.leased_ms.is_some()
                && v.done_ms >= v.leased_ms
                && v.leased_ms >= Some(v.submitted_ms)
        );
        let ended = e.op.cancel_job("acme", &a.job_id).await.unwrap_err();
        assert_eq!(ended.refusal_code(), Some("job_ended"), "{kind}");

        // A failure's reason is kept as one line.
        let f = e.op.submit_raw_job("acme", &tool).await.unwrap();
        let l = n.poll_job(1).await.unwrap().unwrap();
        n.finish_job(
            &l,
            &Completion {
                succeeded: false,
                exit_code: Some(125),
                result: None,
                error: Some("no\nsuch tool".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let v = e.op.job("acme", &f.job_id).await.unwrap();
        assert_eq!(
            (v.state.as_str(), v.error.as_deref()),
            ("failed", Some("no such tool"))
        );

        // Cancelled while queued: never handed out.
        let q = e.op.submit_raw_job("acme", &tool).await.unwrap();
        let v = e.op.cancel_job("acme", &q.job_id).await.unwrap();
        assert_eq!(v.state, "cancelled");
        assert!(n.poll_job(1).await.unwrap().is_none(), "{kind}");
        // Cancelled while leased: the node's renewal and completion are refused.
        let r = e.op.submit_raw_job("acme", &tool).await.unwrap();
        let mut l = n.poll_job(1).await.unwrap().unwrap();
        e.op.cancel_job("acme", &r.job_id).await.unwrap();
        assert!(
            matches!(
                n.renew_lease(&mut l).await,
                Err(ClientError::LeaseLost { .. })
            ),
            "{kind}"
        );
        assert!(matches!(
            n.complete_job(&l, true, Some(0)).await,
            Err(ClientError::LeaseLost { .. })
        ));
        let v = e.op.job("acme", &r.job_id).await.unwrap();
        assert_eq!(
            (v.state.as_str(), v.error.as_deref()),
            ("cancelled", Some("cancelled by an operator"))
        );
    }
}
