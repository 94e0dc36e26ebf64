//! Which nodes take work: in a tenant that asks for approval a new node
//! takes no work at all until an operator approves it, and a job whose only
//! nodes wait for approval or are drained is refused with that fix; no
//! path hands a job to a node waiting, drained or removed, even one whose
//! state changed since its request was read; names are a tenant's own and
//! one that is not a host name is refused; a
//! removed node's key is refused for good; a rotated key works and the old
//! one does not, the node keeping its id; a drained node takes nothing
//! new; a node not heard from within the liveness window is down and not
//! eligible — on each store.

mod common;

use std::time::Duration;

use common::{code, job, linux_facts, node, start_configured, store_urls, windows_facts, ACME};
use oz0_edge::client::{ClientError, NodeClient, NodeKey, Trust};
use oz0_edge::routing::{Isolation, JobKind, JobPayload, JobRequest, Origin};
use oz0_edge::serve::Limits;
use oz0_edge::Store;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_names_removal_rotation_drain_and_liveness() {
    for (kind, url) in store_urls().await {
        let e = start_configured(
            Store::open(&url).await.unwrap(),
            |c| {
                c.approval_tenants.insert("acme".into());
                c.node_live_ms = 1_500;
            },
            None,
            Limits::default(),
            Trust::System,
        )
        .await;
        let webhook = || job(Origin::Webhook, Isolation::None);

        // A new node waits for approval: routed at 0, takes no work at
        // any tier, not eligible, and a job for it says how to approve it.
        let a = NodeClient::new(&e.url, "acme", NodeKey::generate()).unwrap();
        a.register(ACME, Some("build-01")).await.unwrap();
        let v = a.report_facts(&linux_facts(false, false)).await.unwrap();
        assert_eq!(
            (v.tier_routed, v.state.as_str(), v.approved),
            (0, "pending approval", false),
            "{kind}: {v:?}"
        );
        assert!(
            v.routed_note
                .as_deref()
                .unwrap()
                .contains("oz0 node approve"),
            "{v:?}"
        );
        assert_eq!(
            code(&a.poll_job(1).await.unwrap_err()),
            "pending_approval",
            "{kind}"
        );
        let err = a.poll_job(0).await.unwrap_err();
        assert_eq!(code(&err), "pending_approval", "{kind}: {err}");
        assert!(err.to_string().contains("takes no work"), "{err}");
        let err = e.op.submit_job("acme", &webhook()).await.unwrap_err();
        assert_eq!(code(&err), "no_eligible_node", "{kind}");
        assert!(
            err.to_string()
                .contains("build-01 waits for an operator's approval")
                && err.to_string().contains("oz0 node approve build-01"),
            "{kind}: {err}"
        );
        let v = e.op.node_action("build-01", "approve").await.unwrap();
        assert_eq!(
            (v.tier_routed, v.state.as_str()),
            (1, "up"),
            "{kind}: {v:?}"
        );
        let j = e.op.submit_job("acme", &webhook()).await.unwrap();
        assert_eq!(a.poll_job(1).await.unwrap().unwrap().job.job_id, j.job_id);

        // A name is its holder's: a second node may not take it.
        let b = NodeClient::new(&e.url, "acme", NodeKey::generate()).unwrap();
        let err = b.register(ACME, Some("build-01")).await.unwrap_err();
        assert_eq!(code(&err), "name_taken", "{kind}: {err}");
        assert!(err.to_string().contains(a.node_id()), "{err}");
        assert_eq!(
            e.op.node("build-01").await.unwrap().id,
            a.node_id(),
            "the name still finds its holder"
        );

        // A name that is not a host name, or looks like a node id, is
        // refused (never registered without it), and not echoed.
        for bad in ["Build_01", "<b>x</b>", b.node_id()] {
            let err = b.register(ACME, Some(bad)).await.unwrap_err();
            assert_eq!(code(&err), "bad_name", "{kind}: {bad}: {err}");
            let said = err.to_string();
            assert!(
                said.contains("lower-case letters") && said.contains("build-01"),
                "{said}"
            );
            assert!(
                !said.contains("Build_01") && !said.contains("<b>"),
                "{said}"
            );
        }
        assert!(
            e.op.node(b.node_id()).await.is_err(),
            "{kind}: a refused name registered the node"
        );

        // A rotated key works; the old one is refused; the id stays.
        let next = a.key().successor();
        let r = a.rotate_key(&next).await.unwrap();
        assert_eq!(r.node_id, a.node_id());
        let err = a.whoami().await.unwrap_err();
        assert_eq!(code(&err), "unauthenticated", "{kind}: the old key: {err}");
        let a2 = NodeClient::new(&e.url, "acme", next).unwrap();
        assert_eq!(a2.whoami().await.unwrap().node_id, a.node_id());
        assert_eq!(
            a2.register(ACME, Some("build-01")).await.unwrap().node_id,
            a.node_id(),
            "{kind}: registering again with the new key is idempotent"
        );
        let err = a.register(ACME, Some("build-01")).await.unwrap_err();
        assert!(
            matches!(err, ClientError::Refused { .. }),
            "{kind}: the old key cannot register back: {err}"
        );

        // Drained: no new work, not eligible; undrained: work again.
        e.op.node_action(a.node_id(), "drain").await.unwrap();
        assert_eq!(e.op.node(a.node_id()).await.unwrap().state, "draining");
        let err = e.op.submit_job("acme", &webhook()).await.unwrap_err();
        assert_eq!(code(&err), "no_eligible_node", "{kind}");
        assert!(
            err.to_string().contains("build-01 is drained")
                && err.to_string().contains("oz0 node undrain build-01"),
            "{kind}: {err}"
        );
        e.op.node_action(a.node_id(), "undrain").await.unwrap();
        let j = e.op.submit_job("acme", &webhook()).await.unwrap();
        assert_eq!(a2.poll_job(1).await.unwrap().unwrap().job.job_id, j.job_id);

        // Not heard from within the window: down, and not eligible.
        tokio::time::sleep(Duration::from_millis(1_700)).await;
        let v = e.op.node(a.node_id()).await.unwrap();
        assert_eq!((v.state.as_str(), v.up), ("down", false), "{kind}");
        let err = e.op.submit_job("acme", &webhook()).await.unwrap_err();
        assert_eq!(code(&err), "no_eligible_node", "{kind}");
        assert!(a2.poll_job(0).await.unwrap().is_none());
        assert_eq!(
            e.op.node(a.node_id()).await.unwrap().state,
            "up",
            "a poll is a heartbeat"
        );

        // Removed: every request refused, hidden from the list; its name
        // free; the machine comes back only with a new key (and approval).
        e.op.node_action(a.node_id(), "remove").await.unwrap();
        let err = a2.poll_job(0).await.unwrap_err();
        assert_eq!(code(&err), "node_removed", "{kind}: {err}");
        assert!(err.to_string().contains("move its key aside"), "{err}");
        let err = a2.register(ACME, Some("build-01")).await.unwrap_err();
        assert_eq!(code(&err), "node_removed", "{kind}: {err}");
        assert!(e
            .op
            .nodes(Some("acme"))
            .await
            .unwrap()
            .iter()
            .all(|n| n.id != a.node_id()));
        assert_eq!(e.op.node(a.node_id()).await.unwrap().state, "removed");
        let c = NodeClient::new(&e.url, "acme", NodeKey::generate()).unwrap();
        c.register(ACME, Some("build-01")).await.unwrap();
        let v = c.report_facts(&linux_facts(false, false)).await.unwrap();
        assert_eq!(v.state, "pending approval", "{kind}");
        let err = e.op.node_action(a.node_id(), "approve").await.unwrap_err();
        assert_eq!(code(&err), "node_removed", "{kind}");
    }
}

/// No path hands a job to a node that waits for approval, is drained or
/// was removed: the poll refuses or answers none, and the lease itself
/// checks the node as the store holds it, so a request read before an
/// operator's decision is handed nothing either. A job with its secrets
/// stays queued until an approved node takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_job_goes_to_a_node_waiting_drained_or_removed() {
    for (kind, url) in store_urls().await {
        let e = start_configured(
            Store::open(&url).await.unwrap(),
            |c| {
                c.approval_tenants.insert("acme".into());
            },
            None,
            Limits::default(),
            Trust::System,
        )
        .await;
        let store = e.edge.store();
        let lease = |row: oz0_edge::store::NodeRow, id: &'static str| async move {
            let now = oz0_edge::time::now_ms();
            store.lease(&row, 0, id, now + 30_000, now).await.unwrap()
        };
        // An approved node that never polls: a tier-0 job is taken.
        node(&e, "acme", ACME, "idle", &windows_facts()).await;
        e.op.node_action("idle", "approve").await.unwrap();
        let waiting = node(&e, "acme", ACME, "waiting", &linux_facts(false, false)).await;
        let secret = JobRequest {
            job: JobPayload::read(
                JobKind::Shell,
                &serde_json::json!({
                    "command": ["sh", "-c", "echo \"$JOB_SECRET\""],
                    "env": {"JOB_SECRET": "s3cret-0123"},
                }),
            )
            .unwrap(),
            ..job(Origin::Internal, Isolation::None)
        };
        let j = e.op.submit_job("acme", &secret).await.unwrap();
        assert_eq!(j.tier, 0, "{kind}");

        // Waiting for approval: refused at tier 0 too, and handed nothing
        // even by a row that says approved.
        let err = waiting.poll_job(0).await.unwrap_err();
        assert_eq!(code(&err), "pending_approval", "{kind}: {err}");
        assert!(err.to_string().contains("oz0 node approve"), "{err}");
        let mut row = store.node_by_id(waiting.node_id()).await.unwrap().unwrap();
        assert!(!row.approved);
        row.approved = true;
        assert_eq!(lease(row, "lease-pending").await, None, "{kind}");
        let v = e.op.job("acme", &j.job_id).await.unwrap();
        assert_eq!((v.state.as_str(), v.attempts), ("queued", 0), "{kind}");

        // Approved: it takes the job, with its variables.
        e.op.node_action("waiting", "approve").await.unwrap();
        let l = waiting
            .poll_job(0)
            .await
            .unwrap()
            .expect("approved, it takes the job");
        assert_eq!(l.job.job_id, j.job_id, "{kind}");
        assert_eq!(l.job.job.payload()["env"]["JOB_SECRET"], "s3cret-0123");
        waiting.complete_job(&l, true, Some(0)).await.unwrap();

        // Drained or removed after its request was read: handed nothing.
        let j =
            e.op.submit_job("acme", &job(Origin::Internal, Isolation::None))
                .await
                .unwrap();
        let row = store.node_by_id(waiting.node_id()).await.unwrap().unwrap();
        e.op.node_action("waiting", "drain").await.unwrap();
        assert_eq!(lease(row.clone(), "lease-drained").await, None, "{kind}");
        assert!(waiting.poll_job(0).await.unwrap().is_none(), "{kind}");
        e.op.node_action("waiting", "undrain").await.unwrap();
        e.op.node_action("waiting", "remove").await.unwrap();
        assert_eq!(lease(row, "lease-removed").await, None, "{kind}");
        assert_eq!(
            code(&waiting.poll_job(0).await.unwrap_err()),
            "node_removed"
        );
        let v = e.op.job("acme", &j.job_id).await.unwrap();
        assert_eq!((v.state.as_str(), v.attempts), ("queued", 0), "{kind}");
    }
}
