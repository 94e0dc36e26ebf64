//! Which nodes take work: a tenant that asks for approval keeps a new node
//! at tier 0 until an operator approves it; names are a tenant's own; a
//! removed node's key is refused for good; a rotated key works and the old
//! one does not, the node keeping its id; a drained node takes nothing
//! new; a node not heard from within the liveness window is down and not
//! eligible — on each store.

mod common;

use std::time::Duration;

use common::{code, job, linux_facts, start_configured, store_urls, ACME};
use oz0_edge::client::{ClientError, NodeClient, NodeKey, Trust};
use oz0_edge::routing::{Isolation, Origin};
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

        // A new node waits for approval: routed at 0, refused above it,
        // not eligible for tier-1 work.
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
        assert!(a.poll_job(0).await.unwrap().is_none());
        let err = e.op.submit_job("acme", &webhook()).await.unwrap_err();
        assert_eq!(code(&err), "no_eligible_node", "{kind}");
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
