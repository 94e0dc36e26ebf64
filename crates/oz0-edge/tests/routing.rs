//! Routing end to end: outside events go only to nodes routed at tier 1, a
//! tenant without one refuses them with the reason, and microVM and
//! container work goes only to nodes labelled ready for it: a Mac's
//! microVMs at any tier, a tool with egress to them only with a command:.

mod common;

use std::collections::BTreeSet;

use common::{
    code, failing_facts, image_tool_job, job, linux_facts, mac_facts, node, start_on, store_urls,
    tool_job, tool_job_with, tool_request_with_manifest, windows_facts, ACME, SOLO,
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

#[tokio::test]
async fn a_macs_microvms_take_microvm_tools_at_tier_zero_and_nothing_else() {
    for (kind, url) in store_urls().await {
        let e = start_on(Store::open(&url).await.unwrap(), 30_000).await;
        let mac = node(&e, "acme", ACME, "mac-studio", &mac_facts()).await;
        let v = e.op.node(mac.node_id()).await.unwrap();
        let f = v.facts.as_ref().unwrap();
        assert_eq!((v.tier_proven, v.tier_routed), (0, 0), "{kind}");
        assert_eq!(f.labels["isolation.microvm"], "ready", "{kind}");
        assert!(
            v.microvm_line.contains("Apple's container")
                && v.microvm_line.contains("not inside tier 1"),
            "{}",
            v.microvm_line
        );

        // A microVM tool of its architecture, without egress, is its.
        let vm =
            e.op.submit_job("acme", &tool_job(Origin::Webhook, true, Some("aarch64")))
                .await
                .unwrap();
        assert_eq!((vm.tier, vm.eligible_nodes), (2, 1), "{kind}");
        // Work of tier 1 (an outside event's shell job) is not, whatever
        // queue it polls.
        let shell =
            e.op.submit_job(
                "acme",
                &job(Origin::Internal, oz0_edge::routing::Isolation::None),
            )
            .await
            .unwrap();
        assert_eq!(
            code(&mac.poll_job(1).await.unwrap_err()),
            "tier_not_routed",
            "{kind}"
        );
        let mut below = oz0_edge::wire::PollRequest::tier(2);
        below.below = true;
        let l = mac
            .poll_with(&below)
            .await
            .unwrap()
            .lease
            .expect("the microVM job");
        assert_eq!(l.job.job_id, vm.job_id, "{kind}");
        // Then the tier-0 shell job (the queue below), and nothing of tier 1.
        let tier1 =
            e.op.submit_job("acme", &{
                let mut r = job(Origin::Internal, oz0_edge::routing::Isolation::None);
                r.tier = 1;
                r
            })
            .await;
        let l = mac
            .poll_with(&below)
            .await
            .unwrap()
            .lease
            .expect("the tier-0 job");
        assert_eq!(l.job.job_id, shell.job_id, "{kind}");
        assert!(
            mac.poll_with(&below).await.unwrap().lease.is_none(),
            "{kind}"
        );
        assert!(
            tier1.is_err(),
            "{kind}: no node of tier 1 takes it: {tier1:?}"
        );

        // The seed's example tool has no command: a Mac's runtime runs its
        // image's own entrypoint, so it needs no runtime.oci there.
        let bare =
            e.op.submit_job("acme", &image_tool_job(Origin::Webhook, "aarch64"))
                .await
                .unwrap();
        assert_eq!((bare.tier, bare.eligible_nodes), (2, 1), "{kind}");
        let l = mac
            .poll_with(&below)
            .await
            .unwrap()
            .lease
            .expect("the image's own tool");
        assert_eq!(l.job.job_id, bare.job_id, "{kind}");

        // A microVM tool with egress and a command: a Mac's bridge starts
        // it, so the Mac takes it.
        let egress = tool_job_with(
            Origin::Webhook,
            true,
            Some("aarch64"),
            "    egress: [api.example.com]\n",
        );
        let a = e.op.submit_job("acme", &egress).await.unwrap();
        assert_eq!((a.tier, a.eligible_nodes), (2, 1), "{kind}");
        assert_eq!(
            mac.poll_job(2).await.unwrap().unwrap().job.job_id,
            a.job_id,
            "{kind}"
        );
        // With egress and no command, the bridge must start the image's
        // own entrypoint, which only a Linux node reads: refused while the
        // tenant has only the Mac, saying so.
        let bare_egress = tool_request_with_manifest(&format!(
            "tools:\n  - id: t\n    package: oci:example.invalid/t@sha256:{}\n    isolation: microvm\n    arch: aarch64\n    egress: [api.example.com]\n",
            "0".repeat(64)
        ));
        let err = e.op.submit_job("acme", &bare_egress).await.unwrap_err();
        assert!(
            err.to_string().contains("has egress and no command:")
                && err
                    .to_string()
                    .contains("are Macs, whose bridge starts only a command:"),
            "{kind}: {err}"
        );
        // With a Linux microVM node of that architecture reading images, it
        // goes there, never to the Mac.
        let linux = node(&e, "acme", ACME, "linux-arm", &{
            let mut f = linux_facts(true, false);
            f.platform.arch = "aarch64".into();
            f
        })
        .await;
        let reader = node(&e, "acme", ACME, "linux-oci", &{
            let mut f = linux_facts(true, true);
            f.platform.arch = "aarch64".into();
            f
        })
        .await;
        let a = e.op.submit_job("acme", &bare_egress).await.unwrap();
        assert_eq!((a.tier, a.eligible_nodes), (2, 1), "{kind}");
        assert!(
            mac.poll_job(2).await.unwrap().is_none(),
            "{kind}: not the Mac's"
        );
        assert!(
            linux.poll_job(2).await.unwrap().is_none(),
            "{kind}: not the Linux node's without runtime.oci"
        );
        assert_eq!(
            reader.poll_job(2).await.unwrap().unwrap().job.job_id,
            a.job_id,
            "{kind}"
        );
        // The Linux node without runtime.oci does not take the tool without
        // a command (it could not read its image's entrypoint); the Mac and
        // the Linux node that reads images do.
        let bare =
            e.op.submit_job("acme", &image_tool_job(Origin::Webhook, "aarch64"))
                .await
                .unwrap();
        assert_eq!(bare.eligible_nodes, 2, "{kind}: the Mac and the reader");
        assert!(linux.poll_job(2).await.unwrap().is_none(), "{kind}");
        assert_eq!(
            mac.poll_job(2).await.unwrap().unwrap().job.job_id,
            bare.job_id,
            "{kind}"
        );
    }
}
