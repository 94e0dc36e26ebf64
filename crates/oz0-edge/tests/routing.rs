//! Routing end to end: outside events go only to nodes routed at tier 1, a
//! tenant without one refuses them with the reason, and microVM and
//! container work goes only to nodes labelled ready for it.

mod common;

use std::collections::BTreeSet;

use common::{
    code, failing_facts, job, linux_facts, node, start_on, store_urls, tool_job, windows_facts,
    ACME, SOLO,
};
use oz0_edge::client::ClientError;
use oz0_edge::routing::{Isolation, Origin};
use oz0_edge::Store;
use oz0_policy::facts::Microvm;

#[tokio::test]
async fn outside_events_go_only_to_tier_one_nodes() {
    for (kind, url) in store_urls().await {
        eprintln!("store: {kind}");
        let e = start_on(Store::open(&url).await.unwrap(), 30_000).await;
        let tier1 = node(&e, "acme", ACME, "linux-ok", &linux_facts(false, true)).await;
        let failing = node(&e, "acme", ACME, "linux-files", &failing_facts()).await;
        let windows = node(&e, "acme", ACME, "win-psec", &windows_facts()).await;

        let wv = e.op.node(windows.node_id()).await.unwrap();
        assert_eq!(
            (wv.tier_proven, wv.tier_routed),
            (1, 0),
            "{kind}: Windows is routed at 0"
        );
        assert_eq!(wv.tier_line, "tier 1 (psec 1.0, routed as tier 0)");
        let fv = e.op.node("linux-files").await.unwrap();
        assert_eq!(fv.tier_routed, 0);
        assert!(fv.fix.as_deref().unwrap().contains("failed at files"));

        let mut outside = BTreeSet::new();
        for o in [Origin::Webhook, Origin::Event, Origin::Chat] {
            let a =
                e.op.submit_job("acme", &job(o, Isolation::None))
                    .await
                    .unwrap();
            assert_eq!(a.tier, 1);
            assert_eq!(a.eligible_nodes, 1);
            outside.insert(a.job_id);
        }
        let internal =
            e.op.submit_job("acme", &job(Origin::Internal, Isolation::None))
                .await
                .unwrap();
        assert_eq!(internal.tier, 0);

        for n in [&failing, &windows] {
            let err = n.poll_job(1).await.unwrap_err();
            assert_eq!(code(&err), "tier_not_routed", "{kind}: {err}");
        }
        // The tier-0 queue holds only tier-0 work: one of the tier-0 nodes takes it.
        let l = failing
            .poll_job(0)
            .await
            .unwrap()
            .expect("the internal job");
        assert_eq!(l.job.job_id, internal.job_id);
        assert!(windows.poll_job(0).await.unwrap().is_none());
        failing.complete_job(&l, true, Some(0)).await.unwrap();

        let mut got = BTreeSet::new();
        while let Some(l) = tier1.poll_job(1).await.unwrap() {
            assert_eq!(l.job.tier, 1);
            tier1.complete_job(&l, true, Some(0)).await.unwrap();
            got.insert(l.job.job_id);
        }
        assert_eq!(got, outside, "{kind}");
        for id in &outside {
            let j = e.op.job("acme", id).await.unwrap();
            assert_eq!(
                (j.state.as_str(), j.node_id.as_deref()),
                ("succeeded", Some(tier1.node_id()))
            );
        }
    }
}

#[tokio::test]
async fn a_tenant_with_only_tier_zero_nodes_refuses_outside_events() {
    for (kind, url) in store_urls().await {
        let e = start_on(Store::open(&url).await.unwrap(), 30_000).await;
        // Before any node: refused too.
        let err =
            e.op.submit_job("solo", &job(Origin::Webhook, Isolation::None))
                .await
                .unwrap_err();
        assert_eq!(code(&err), "no_eligible_node", "{kind}");
        let _w = node(&e, "solo", SOLO, "win-psec", &windows_facts()).await;
        let _f = node(&e, "solo", SOLO, "linux-files", &failing_facts()).await;
        for (o, word) in [
            (Origin::Webhook, "webhook"),
            (Origin::Event, "event"),
            (Origin::Chat, "chat message"),
        ] {
            let err =
                e.op.submit_job("solo", &job(o, Isolation::None))
                    .await
                    .unwrap_err();
            let ClientError::Refused { status, refusal } = &err else {
                panic!("{err}")
            };
            assert_eq!((*status, refusal.error.as_str()), (409, "no_eligible_node"));
            assert!(
                refusal
                    .reason
                    .contains(&format!("a {word} starts work that needs tier 1")),
                "{}",
                refusal.reason
            );
            assert!(
                refusal
                    .reason
                    .contains("tenant solo has no node routed at tier 1 (2 live node(s)"),
                "{}",
                refusal.reason
            );
        }
        // Work from inside at tier 0 is still taken.
        e.op.submit_job("solo", &job(Origin::Internal, Isolation::None))
            .await
            .unwrap();
        // Another tenant's tier-1 node does not count.
        let _other = node(&e, "acme", ACME, "linux-ok", &linux_facts(false, false)).await;
        assert_eq!(
            code(
                &e.op
                    .submit_job("solo", &job(Origin::Chat, Isolation::None))
                    .await
                    .unwrap_err()
            ),
            "no_eligible_node"
        );
    }
}

#[tokio::test]
async fn microvm_tools_go_only_to_a_node_labelled_ready() {
    for (kind, url) in store_urls().await {
        let e = start_on(Store::open(&url).await.unwrap(), 30_000).await;
        let plain = node(&e, "acme", ACME, "linux-ok", &linux_facts(false, true)).await;
        let vm = node(&e, "acme", ACME, "linux-kvm", &linux_facts(true, false)).await;
        let _win = node(&e, "acme", ACME, "win-psec", &{
            let mut w = windows_facts();
            w.microvm = Microvm {
                ready: true,
                reason: None,
                pinned: Some(true),
                backend: None,
            };
            w
        })
        .await;
        let vv = e.op.node(vm.node_id()).await.unwrap();
        assert_eq!(
            vv.facts.as_ref().unwrap().labels["isolation.microvm"],
            "ready",
            "{kind}"
        );
        assert_eq!(vv.microvm_line, "ready");

        let req = tool_job(Origin::Webhook, true, Some("x86_64"));
        let a = e.op.submit_job("acme", &req).await.unwrap();
        assert_eq!((a.tier, a.eligible_nodes), (2, 1), "{kind}");
        let req = tool_job(Origin::Webhook, true, Some("aarch64"));
        let err = e.op.submit_job("acme", &req).await.unwrap_err();
        assert!(
            err.to_string()
                .contains("isolation.microvm=ready for aarch64"),
            "{err}"
        );

        assert_eq!(
            code(&plain.poll_job(2).await.unwrap_err()),
            "tier_not_routed"
        );
        assert!(plain.poll_job(1).await.unwrap().is_none());
        let l = vm.poll_job(2).await.unwrap().expect("the microVM job");
        assert_eq!(l.job.job_id, a.job_id);

        // Container tools need runtime.oci=ready: only `plain` has it.
        let c =
            e.op.submit_job("acme", &job(Origin::Internal, Isolation::Container))
                .await
                .unwrap();
        // They run in tier 1.
        assert!(plain.poll_job(0).await.unwrap().is_none(), "{kind}");
        assert!(
            vm.poll_job(1).await.unwrap().is_none(),
            "{kind}: the node without OCI does not get it"
        );
        assert_eq!(
            plain.poll_job(1).await.unwrap().unwrap().job.job_id,
            c.job_id
        );
    }
}
