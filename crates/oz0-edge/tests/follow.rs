//! Following work as it happens, through the client library a node uses:
//! a running job's output reaches the edge while it runs, a long poll is
//! answered the moment a job is queued, a cancel answers a held renewal
//! and a held poll at once, a node whose held request broke is taken for
//! dead and its job goes to another node, a job given back never counts
//! past its cap, a client keeps one connection, and two replicas on one
//! PostgreSQL wake each other's waiting nodes.

mod common;

use std::time::Duration;

use common::{job, linux_facts, node, start_on, store_urls, ACME};
use oz0_edge::client::ClientError;
use oz0_edge::routing::{Isolation, Origin};
use oz0_edge::wire::PollRequest;
use oz0_edge::Store;

fn held(tier: u8, wait_ms: u64, holding: Vec<String>) -> PollRequest {
    PollRequest {
        wait_ms,
        below: true,
        holding,
        ..PollRequest::tier(tier)
    }
}

#[tokio::test]
async fn output_reaches_the_edge_while_the_job_runs_and_a_follow_sees_it() {
    for (kind, url) in store_urls().await {
        let e = start_on(Store::open(&url).await.unwrap(), 30_000).await;
        let a = node(&e, "acme", ACME, "node-a", &linux_facts(false, false)).await;
        let j =
            e.op.submit_job("acme", &job(Origin::Webhook, Isolation::None))
                .await
                .unwrap();
        let lease = a.poll_job(1).await.unwrap().expect("a takes the job");

        // Nothing yet: a follow from byte 0 waits, and is answered by the
        // first piece.
        let op = e.op.clone();
        let id = j.job_id.clone();
        let follow = tokio::spawn(async move {
            op.job_logs_after("acme", &id, Some(0), Some(0), 10_000)
                .await
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            a.append_output(&lease, "stdout", 0, "line 1\n")
                .await
                .unwrap(),
            7
        );
        let l = follow.await.unwrap().unwrap();
        assert_eq!(l.stdout_tail.as_deref(), Some("line 1\n"), "{kind}");
        assert_eq!(
            (l.stdout_bytes, l.state.as_deref()),
            (Some(7), Some("leased"))
        );

        // A piece sent again is kept once; stderr is its own stream.
        assert_eq!(
            a.append_output(&lease, "stdout", 0, "line 1\nline 2\n")
                .await
                .unwrap(),
            14
        );
        a.append_output(&lease, "stderr", 0, "warn\n")
            .await
            .unwrap();
        let l = e.op.job_logs("acme", &j.job_id).await.unwrap();
        assert_eq!(l.stdout_tail.as_deref(), Some("line 1\nline 2\n"), "{kind}");
        assert_eq!(l.stderr_tail.as_deref(), Some("warn\n"));
        // Only what came after byte 7.
        let l =
            e.op.job_logs_after("acme", &j.job_id, Some(7), Some(5), 0)
                .await
                .unwrap();
        assert_eq!(
            (l.stdout_tail.as_deref(), l.stdout_from),
            (Some("line 2\n"), 7)
        );
        assert_eq!(l.stderr_tail.as_deref(), Some(""));

        // The edge keeps the last 64 KiB, and counts all.
        let big = "x".repeat(40 * 1024);
        a.append_output(&lease, "stdout", 14, &big).await.unwrap();
        a.append_output(&lease, "stdout", 14 + 40 * 1024, &big)
            .await
            .unwrap();
        let l = e.op.job_logs("acme", &j.job_id).await.unwrap();
        assert_eq!(l.stdout_bytes, Some(14 + 80 * 1024), "{kind}");
        assert_eq!(
            l.stdout_tail.as_ref().unwrap().len(),
            oz0_edge::MAX_TAIL_BYTES
        );
        assert_eq!(l.stdout_from, 14 + 80 * 1024 - 64 * 1024);
        // A follower behind the kept tail learns where it resumes.
        let l =
            e.op.job_logs_after("acme", &j.job_id, Some(7), None, 0)
                .await
                .unwrap();
        assert!(l.stdout_from > 7, "{kind}: {}", l.stdout_from);

        // A completion without tails keeps what was streamed; a follow
        // learns the end and the exit status.
        let op = e.op.clone();
        let id = j.job_id.clone();
        let end = 14 + 80 * 1024;
        let follow = tokio::spawn(async move {
            op.job_logs_after("acme", &id, Some(end), Some(5), 10_000)
                .await
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        a.complete_job(&lease, false, Some(3)).await.unwrap();
        let l = follow.await.unwrap().unwrap();
        assert_eq!(
            (l.state.as_deref(), l.exit_code),
            (Some("failed"), Some(3)),
            "{kind}"
        );
        let l = e.op.job_logs("acme", &j.job_id).await.unwrap();
        assert_eq!(l.stderr_tail.as_deref(), Some("warn\n"), "{kind}");
        assert_eq!(l.stdout_bytes, Some(end));

        // The lease is gone: no more output.
        assert!(matches!(
            a.append_output(&lease, "stdout", u64::try_from(end).unwrap(), "late")
                .await,
            Err(ClientError::LeaseLost {
                cancelled: false,
                ..
            })
        ));
        assert_eq!(
            common::code(&a.append_output(&lease, "other", 0, "x").await.unwrap_err()),
            "bad_output"
        );
    }
}

#[tokio::test]
async fn a_long_poll_is_answered_the_moment_a_job_is_queued() {
    for (kind, url) in store_urls().await {
        let e = start_on(Store::open(&url).await.unwrap(), 30_000).await;
        let a =
            std::sync::Arc::new(node(&e, "acme", ACME, "node-a", &linux_facts(false, false)).await);
        // Nothing queued: the poll is held the whole wait, and answers empty.
        let p = a.poll_with(&held(1, 300, vec![])).await.unwrap();
        assert!(p.lease.is_none() && p.stop.is_empty(), "{kind}");

        let waiting = a.clone();
        let sent = std::time::Instant::now();
        let poll = tokio::spawn(async move { waiting.poll_with(&held(1, 15_000, vec![])).await });
        while e.edge.held_requests() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // A tier-0 job is found by a node waiting at tier 1 with `below`.
        let j =
            e.op.submit_job("acme", &job(Origin::Internal, Isolation::None))
                .await
                .unwrap();
        let p = poll.await.unwrap().unwrap();
        let lease = p.lease.expect("the held poll hands out the job");
        assert_eq!(lease.job.job_id, j.job_id, "{kind}");
        // Answered when the job came, not when the 15 s wait ran out (the
        // lease runs from the answer: 27 s of it are the node's).
        assert!(
            lease.deadline() < sent + Duration::from_secs(27 + 5),
            "{kind}"
        );
    }
}

#[tokio::test]
async fn a_cancel_answers_a_held_renewal_and_a_held_poll_at_once() {
    for (kind, url) in store_urls().await {
        let e = start_on(Store::open(&url).await.unwrap(), 30_000).await;
        let a =
            std::sync::Arc::new(node(&e, "acme", ACME, "node-a", &linux_facts(false, false)).await);
        let j1 =
            e.op.submit_job("acme", &job(Origin::Webhook, Isolation::None))
                .await
                .unwrap();
        let j2 =
            e.op.submit_job("acme", &job(Origin::Webhook, Isolation::None))
                .await
                .unwrap();
        let mut l1 = a.poll_job(1).await.unwrap().unwrap();
        let l2 = a.poll_job(1).await.unwrap().unwrap();
        assert_eq!(
            (l1.job.job_id.as_str(), l2.job.job_id.as_str()),
            (j1.job_id.as_str(), j2.job_id.as_str())
        );

        // A held renewal of job 1 …
        let renewing = a.clone();
        let renewal =
            tokio::spawn(async move { renewing.renew_held(&mut l1, Duration::from_secs(9)).await });
        // … and a held poll saying the node runs job 2.
        let polling = a.clone();
        let id2 = j2.job_id.clone();
        let poll = tokio::spawn(async move {
            polling
                .poll_with(&PollRequest {
                    take: false,
                    ..held(1, 15_000, vec![id2])
                })
                .await
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !renewal.is_finished() && !poll.is_finished(),
            "{kind}: both are held"
        );

        e.op.cancel_job("acme", &j1.job_id).await.unwrap();
        match renewal.await.unwrap() {
            Err(ClientError::LeaseLost {
                cancelled: true,
                job,
            }) => assert_eq!(job, j1.job_id),
            other => panic!("{kind}: {other:?}"),
        }
        e.op.cancel_job("acme", &j2.job_id).await.unwrap();
        let p = poll.await.unwrap().unwrap();
        assert_eq!(p.stop.len(), 1, "{kind}");
        assert_eq!(
            (p.stop[0].job_id.as_str(), p.stop[0].reason.as_str()),
            (j2.job_id.as_str(), "cancelled")
        );
        assert!(p.lease.is_none());
        // Its completion is refused as a cancel, not as a lapse.
        assert!(matches!(
            a.complete_job(&l2, true, Some(0)).await,
            Err(ClientError::LeaseLost {
                cancelled: true,
                ..
            })
        ));
    }
}

#[tokio::test]
async fn a_node_whose_held_request_broke_is_taken_for_dead_and_its_job_runs_elsewhere() {
    for (kind, url) in store_urls().await {
        let e = start_on(Store::open(&url).await.unwrap(), 30_000).await;
        let a =
            std::sync::Arc::new(node(&e, "acme", ACME, "node-a", &linux_facts(false, false)).await);
        let b = node(&e, "acme", ACME, "node-b", &linux_facts(false, false)).await;
        let j =
            e.op.submit_job("acme", &job(Origin::Webhook, Isolation::None))
                .await
                .unwrap();
        let mut la = a.poll_job(1).await.unwrap().unwrap();
        let renewing = a.clone();
        let mut copy = la.clone();
        let renewal =
            tokio::spawn(
                async move { renewing.renew_held(&mut copy, Duration::from_secs(9)).await },
            );
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Node a dies: its connection closes with its held renewal.
        renewal.abort();
        // b waits for work; the job comes back to it once a is taken for
        // dead (2 s), long before a's 30 s lease would lapse.
        let p = b.poll_with(&held(1, 10_000, vec![])).await.unwrap();
        let lb = p.lease.unwrap_or_else(|| panic!("{kind}: b got nothing"));
        assert_eq!(
            (lb.job.job_id.as_str(), lb.job.attempt),
            (j.job_id.as_str(), 2),
            "{kind}"
        );
        let n = e.op.node("node-a").await.unwrap();
        assert_eq!((n.state.as_str(), n.up), ("down", false), "{kind}");
        // a, back, may not renew; it is up again once it speaks.
        assert!(matches!(
            a.renew_lease(&mut la).await,
            Err(ClientError::LeaseLost { .. })
        ));
        assert!(e.op.node("node-a").await.unwrap().up, "{kind}");
    }
}

#[tokio::test]
async fn a_job_given_back_does_not_count_past_its_cap() {
    for (kind, url) in store_urls().await {
        let e = start_on(Store::open(&url).await.unwrap(), 30_000).await;
        let a = node(&e, "acme", ACME, "node-a", &linux_facts(false, false)).await;
        let j =
            e.op.submit_job("acme", &job(Origin::Webhook, Isolation::None))
                .await
                .unwrap();
        // The node is stopped five times while it runs the job.
        for _ in 0..5 {
            let l = a
                .poll_job(1)
                .await
                .unwrap()
                .expect("the job is handed out again");
            a.release_job(&l).await.unwrap();
        }
        let s = e.op.job("acme", &j.job_id).await.unwrap();
        assert_eq!(
            (s.state.as_str(), s.attempts, s.max_attempts),
            ("queued", 0, 3),
            "{kind}"
        );
        let l = a.poll_job(1).await.unwrap().unwrap();
        assert_eq!(l.job.attempt, 1, "{kind}");
    }
}

#[tokio::test]
async fn a_client_keeps_one_connection() {
    let stores = store_urls().await;
    let url = stores.first();
    let e = start_on(Store::open(&url).await.unwrap(), 30_000).await;
    let a = node(&e, "acme", ACME, "node-a", &linux_facts(false, false)).await;
    let before = a.connections_opened();
    for _ in 0..20 {
        assert!(a.poll_job(1).await.unwrap().is_none());
    }
    assert_eq!(
        a.connections_opened(),
        before,
        "20 polls on the kept connection"
    );
    assert_eq!(before, 1, "registration and the report on one connection");
}

#[tokio::test]
async fn a_job_queued_through_one_replica_wakes_a_node_waiting_on_another() {
    for (kind, url) in store_urls().await {
        if kind != "postgres" {
            continue;
        }
        let r1 = start_on(Store::open(&url).await.unwrap(), 30_000).await;
        let r2 = start_on(Store::open(&url).await.unwrap(), 30_000).await;
        let a = std::sync::Arc::new(
            node(&r2, "acme", ACME, "node-a", &linux_facts(false, false)).await,
        );
        let waiting = a.clone();
        let sent = std::time::Instant::now();
        let poll = tokio::spawn(async move { waiting.poll_with(&held(1, 15_000, vec![])).await });
        while r2.edge.held_requests() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The LISTEN connection is up once a first wake went through.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let j = r1
            .op
            .submit_job("acme", &job(Origin::Webhook, Isolation::None))
            .await
            .unwrap();
        let p = poll.await.unwrap().unwrap();
        let lease = p.lease.expect("woken through the other replica");
        assert_eq!(lease.job.job_id, j.job_id);
        assert!(
            lease.deadline() < sent + Duration::from_secs(27 + 5),
            "answered when the job came, not at the wait's end"
        );
    }
}
