//! What operators expect of the API behind `oz0`: a drain with a
//! deadline, a job run again, the tenants the edge serves, dead nodes
//! shown down and left out of the default list, and a job's view with its
//! command, its times and its node.

mod common;

use std::time::Duration;

use common::{job, linux_facts, node, start_configured, start_on, store_urls, ACME};
use oz0_edge::client::{ClientError, Trust};
use oz0_edge::routing::{Isolation, JobKind, JobPayload, Origin};
use oz0_edge::Store;

#[tokio::test]
async fn a_drain_past_its_deadline_moves_the_nodes_jobs_without_counting_an_attempt() {
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
        // A drain without a deadline leaves the running job alone.
        e.op.drain_node("node-a", None).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        a.renew_lease(&mut la).await.unwrap();
        let renewing = a.clone();
        let renewal =
            tokio::spawn(async move { renewing.renew_held(&mut la, Duration::from_secs(9)).await });
        let n = e.op.drain_node("node-a", Some(0)).await.unwrap();
        assert_eq!(n.state, "draining", "{kind}");
        // The node learns at once that the job is no longer its own …
        assert!(
            matches!(
                renewal.await.unwrap(),
                Err(ClientError::LeaseLost {
                    cancelled: false,
                    ..
                })
            ),
            "{kind}"
        );
        // … and the job runs elsewhere, its first attempt still.
        let lb = b.poll_job(1).await.unwrap().expect("b takes the job");
        assert_eq!(
            (lb.job.job_id.as_str(), lb.job.attempt),
            (j.job_id.as_str(), 1),
            "{kind}"
        );
    }
}

#[tokio::test]
async fn a_job_runs_again_as_a_new_job_and_a_view_names_its_command_and_node() {
    for (kind, url) in store_urls().await {
        let e = start_on(Store::open(&url).await.unwrap(), 30_000).await;
        let a = node(&e, "acme", ACME, "node-a", &linux_facts(false, false)).await;
        let mut req = job(Origin::Webhook, Isolation::None);
        req.job = JobPayload::read(
            JobKind::Shell,
            &serde_json::json!({"command": ["make", "test"], "env": {"TOKEN": "s3cret"}}),
        )
        .unwrap();
        let j = e.op.submit_job("acme", &req).await.unwrap();
        let l = a.poll_job(1).await.unwrap().unwrap();
        a.complete_job(&l, false, Some(2)).await.unwrap();
        let v = e.op.job("acme", &j.job_id).await.unwrap();
        assert_eq!(
            v.command,
            Some(vec!["make".to_string(), "test".to_string()]),
            "{kind}"
        );
        assert_eq!(v.node_name.as_deref(), Some("node-a"));
        assert!(v.leased_ms.is_some() && v.done_ms.is_some());
        let text = serde_json::to_string(&v).unwrap();
        assert!(
            !text.contains("s3cret"),
            "{kind}: a job's variables are never shown"
        );

        let again = e.op.rerun_job("acme", &j.job_id).await.unwrap();
        assert_ne!(again.job_id, j.job_id);
        let l = a.poll_job(1).await.unwrap().expect("the new job is queued");
        assert_eq!(l.job.job_id, again.job_id, "{kind}");
        assert_eq!(l.job.job.payload()["command"][0], "make");
        assert_eq!(l.job.job.payload()["env"]["TOKEN"], "s3cret");
        assert_eq!(
            e.op.job("acme", &j.job_id).await.unwrap().state,
            "failed",
            "the old one is left as it ended"
        );
        assert_eq!(
            e.op.tenants().await.unwrap(),
            vec!["acme".to_string(), "solo".to_string()]
        );
    }
}

#[tokio::test]
async fn a_dead_node_shows_down_and_leaves_the_default_list() {
    for (kind, url) in store_urls().await {
        let e = start_configured(
            Store::open(&url).await.unwrap(),
            |c| {
                c.node_live_ms = 300;
                c.forget_nodes_ms = 1_000;
            },
            None,
            oz0_edge::serve::Limits::default(),
            Trust::System,
        )
        .await;
        let _a = node(&e, "acme", ACME, "node-a", &linux_facts(false, false)).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let n = e.op.node("node-a").await.unwrap();
        assert_eq!((n.state.as_str(), n.up), ("down", false), "{kind}");
        assert!(
            n.tier_line.starts_with("down: takes no work"),
            "{kind}: {}",
            n.tier_line
        );
        let page = e.op.nodes_page().await.unwrap();
        assert!(
            !page.contains("class=\"t1\""),
            "{kind}: a down node is not shown green"
        );
        assert!(page.contains("1 node(s), 0 up"), "{kind}");
        assert_eq!(e.op.nodes(Some("acme")).await.unwrap().len(), 1);
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(
            e.op.nodes(Some("acme")).await.unwrap().is_empty(),
            "{kind}: aged out"
        );
        assert_eq!(
            e.op.nodes_with(Some("acme"), true).await.unwrap().len(),
            1,
            "{kind}"
        );
    }
}
