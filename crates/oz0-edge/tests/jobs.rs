//! Jobs operators can follow, on each store: a shell payload is checked at
//! submit (a NUL byte in its command or a variable refused); an
//! idempotency key gives back the job it named; a job whose lease lapses
//! is handed out again until its attempts are used up, then fails with the
//! reason; a stopping node gives its job back at once; a completion's
//! output tails are kept (bounded) and listed; finished jobs go once past
//! their retention; lists come a page at a time.

mod common;

use std::time::Duration;

use common::{code, job, linux_facts, node, start_configured, store_urls, ACME};
use oz0_edge::client::{Completion, Trust};
use oz0_edge::routing::{Isolation, JobKind, Origin, RawJobRequest};
use oz0_edge::serve::Limits;
use oz0_edge::Store;

fn shell(payload: serde_json::Value, key: Option<&str>) -> RawJobRequest {
    RawJobRequest {
        origin: Origin::Internal,
        kind: JobKind::Shell,
        tier: 0,
        isolation: Isolation::None,
        arch: None,
        payload,
        idempotency_key: key.map(str::to_string),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_checked_kept_bounded_and_handed_out_a_bounded_number_of_times() {
    for (kind, url) in store_urls().await {
        let e = start_configured(
            Store::open(&url).await.unwrap(),
            |c| {
                c.lease_ms = 600;
                c.max_attempts = 2;
            },
            None,
            Limits::default(),
            Trust::System,
        )
        .await;
        let n = node(&e, "acme", ACME, "worker", &linux_facts(false, false)).await;

        // The payload is the node's type, checked here.
        for (bad, says) in [
            (serde_json::json!({"argv": ["true"]}), "unknown field"),
            (serde_json::json!({"command": []}), "command is empty"),
            (
                serde_json::json!({"command": ["x"], "env": {"OZ0_SECRET": "1"}}),
                "OZ0_",
            ),
            (
                serde_json::json!({"command": ["x"], "memory": 0}),
                "between 1 and",
            ),
            (
                serde_json::json!({"command": ["echo", "a\u{0}b"]}),
                "argument 1 of the command contains a NUL byte",
            ),
            (
                serde_json::json!({"command": ["tr\u{0}ue"]}),
                "argument 0 of the command contains a NUL byte",
            ),
            (
                serde_json::json!({"command": ["x"], "env": {"A": "a\u{0}b"}}),
                "NUL",
            ),
        ] {
            let err =
                e.op.submit_raw_job("acme", &shell(bad.clone(), None))
                    .await
                    .unwrap_err();
            assert_eq!(code(&err), "bad_job", "{kind}: {bad}: {err}");
            assert!(err.to_string().contains(says), "{bad}: {err}");
        }
        let harness = RawJobRequest {
            kind: JobKind::Harness,
            ..shell(serde_json::json!({}), None)
        };
        let err = e.op.submit_raw_job("acme", &harness).await.unwrap_err();
        assert!(
            err.to_string()
                .contains("no node runs harness sessions yet"),
            "{err}"
        );

        // The same key: the same job; another request with it: refused.
        let a =
            e.op.submit_raw_job(
                "acme",
                &shell(serde_json::json!({"command": ["true"]}), Some("deploy-42")),
            )
            .await
            .unwrap();
        assert!(!a.existing);
        let again =
            e.op.submit_raw_job(
                "acme",
                &shell(serde_json::json!({"command": ["true"]}), Some("deploy-42")),
            )
            .await
            .unwrap();
        assert_eq!(
            (again.job_id.as_str(), again.existing),
            (a.job_id.as_str(), true),
            "{kind}"
        );
        let err =
            e.op.submit_raw_job(
                "acme",
                &shell(serde_json::json!({"command": ["false"]}), Some("deploy-42")),
            )
            .await
            .unwrap_err();
        assert_eq!(code(&err), "idempotency_conflict", "{kind}");

        // Handed out, lapsed, handed out again, lapsed: failed, with the reason.
        // Lapsed leases are swept at most once a second (by a poll or the
        // edge's own timer), so each wait is the lease (600 ms) and a
        // whole sweep period past it.
        let lapse = Duration::from_millis(600 + 1_000 + 300);
        assert_eq!(n.poll_job(0).await.unwrap().unwrap().job.attempt, 1);
        tokio::time::sleep(lapse).await;
        let l = n.poll_job(0).await.unwrap().expect("handed out again");
        assert_eq!(
            (l.job.job_id.as_str(), l.job.attempt),
            (a.job_id.as_str(), 2),
            "{kind}"
        );
        tokio::time::sleep(lapse).await;
        assert!(
            n.poll_job(0).await.unwrap().is_none(),
            "{kind}: not a third time"
        );
        let v = e.op.job("acme", &a.job_id).await.unwrap();
        assert_eq!(
            (v.state.as_str(), v.attempts, v.max_attempts),
            ("failed", 2, 2),
            "{kind}: {v:?}"
        );
        assert!(
            v.error
                .as_deref()
                .unwrap()
                .contains("handed out 2 time(s), the most it may be"),
            "{v:?}"
        );

        // A stopping node gives its job back at once.
        let b =
            e.op.submit_job("acme", &job(Origin::Internal, Isolation::None))
                .await
                .unwrap();
        let l = n.poll_job(0).await.unwrap().unwrap();
        n.release_job(&l).await.unwrap();
        let l2 = n.poll_job(0).await.unwrap().expect("queued again at once");
        assert_eq!(l2.job.job_id, b.job_id);

        // Output tails travel with the completion; a tail over the bound is refused.
        let big = "x".repeat(oz0_edge::MAX_TAIL_BYTES + 1);
        let err = n
            .finish_job(
                &l2,
                &Completion {
                    succeeded: true,
                    stdout_tail: Some(big),
                    ..Default::default()
                },
            )
            .await
            .unwrap_err();
        assert_eq!(err.refusal_code(), Some("too_large"), "{kind}");
        n.finish_job(
            &l2,
            &Completion {
                succeeded: true,
                exit_code: Some(0),
                stdout_tail: Some("the end of stdout\n".into()),
                stderr_tail: Some("warning\n".into()),
                stdout_bytes: Some(2_000_000),
                stderr_bytes: Some(8),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let logs = e.op.job_logs("acme", &b.job_id).await.unwrap();
        assert_eq!(logs.stdout_tail.as_deref(), Some("the end of stdout\n"));
        assert_eq!(
            (logs.stdout_bytes, logs.stderr_bytes, logs.bound_bytes),
            (Some(2_000_000), Some(8), 65_536)
        );

        // Lists, a page at a time, newest first.
        for _ in 0..5 {
            e.op.submit_job("acme", &job(Origin::Internal, Isolation::None))
                .await
                .unwrap();
        }
        let p1 = e.op.jobs("acme", None, None, Some(3)).await.unwrap();
        assert_eq!(p1.jobs.len(), 3, "{kind}");
        let p2 =
            e.op.jobs("acme", None, p1.next.as_deref(), Some(3))
                .await
                .unwrap();
        let p3 =
            e.op.jobs("acme", None, p2.next.as_deref(), Some(3))
                .await
                .unwrap();
        let all: Vec<String> = p1
            .jobs
            .iter()
            .chain(&p2.jobs)
            .chain(&p3.jobs)
            .map(|j| j.job_id.clone())
            .collect();
        assert_eq!(all.len(), 7, "{kind}: {all:?}");
        assert_eq!(
            all.iter().collect::<std::collections::BTreeSet<_>>().len(),
            7,
            "no job twice"
        );
        assert!(p1
            .jobs
            .windows(2)
            .all(|w| w[0].submitted_ms >= w[1].submitted_ms));
        let failed = e.op.jobs("acme", Some("failed"), None, None).await.unwrap();
        assert_eq!(failed.jobs.len(), 1);

        // Finished jobs past their retention go; the rest stay.
        let removed = e
            .edge
            .store()
            .sweep_finished(oz0_edge::time::now_ms() + 1, 1_000_000, 100)
            .await
            .unwrap();
        assert_eq!(removed, 2, "{kind}: the failed and the succeeded job");
        assert_eq!(
            e.op.jobs("acme", None, None, None)
                .await
                .unwrap()
                .jobs
                .len(),
            5
        );
        let err = e.op.job("acme", &a.job_id).await.unwrap_err();
        assert_eq!(code(&err), "no_job");
    }
}

/// Nodes list a page at a time too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_come_a_page_at_a_time() {
    let stores = store_urls().await;
    let url = stores.first();
    let e = start_configured(
        Store::open(&url).await.unwrap(),
        |_| {},
        None,
        Limits::default(),
        Trust::System,
    )
    .await;
    for i in 0..7 {
        node(
            &e,
            "acme",
            ACME,
            &format!("n{i}"),
            &linux_facts(false, false),
        )
        .await;
    }
    let p1 = e.op.node_page(Some("acme"), None, Some(4)).await.unwrap();
    assert_eq!(p1.nodes.len(), 4);
    let p2 =
        e.op.node_page(Some("acme"), p1.next.as_deref(), Some(4))
            .await
            .unwrap();
    assert_eq!(p2.nodes.len(), 3);
    assert_eq!(e.op.nodes(None).await.unwrap().len(), 7);
}

/// Jobs queued one after the other are handed out in that order, however
/// many share a millisecond (job ids are random: they cannot order them).
#[tokio::test]
async fn jobs_queued_one_after_another_are_handed_out_in_that_order() {
    for (kind, url) in store_urls().await {
        let e = common::start_on(Store::open(&url).await.unwrap(), 30_000).await;
        let a = node(&e, "acme", ACME, "node-a", &linux_facts(false, false)).await;
        let mut queued = Vec::new();
        for _ in 0..40 {
            let j =
                e.op.submit_job("acme", &job(Origin::Webhook, Isolation::None))
                    .await
                    .unwrap();
            queued.push(j.job_id);
        }
        let mut handed = Vec::new();
        while let Some(l) = a.poll_job(1).await.unwrap() {
            handed.push(l.job.job_id);
        }
        assert_eq!(handed, queued, "{kind}");
    }
}
