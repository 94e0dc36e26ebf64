//! The edge end to end: a real edge on 127.0.0.1 over each store (SQLite
//! always; PostgreSQL when `OZ0_EDGE_TEST_POSTGRES` is set, required when
//! `OZ0_MUST_WORK=1`), several simulated nodes using the client library.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oz0_edge::api::{Routes, DROPPED_COUNTER};
use oz0_edge::auth::{self, TokenDigest};
use oz0_edge::client::{raw_request, ClientError, NodeClient, NodeKey, OperatorClient};
use oz0_edge::routing::{Isolation, JobKind, JobRequest, Origin};
use oz0_edge::{Edge, EdgeConfig, Store};
use oz0_policy::facts::{
    FixKind, Mechanism, Microvm, MicrovmReason, NodeFacts, Os, Platform, Property, SelfTest,
    FACTS_SCHEMA,
};

const OPERATOR: &str = "operator-token-0123456789";
const ACME: &str = "acme-enrolment-0123456789";
const SOLO: &str = "solo-enrolment-0123456789";

struct TestEdge {
    url: String,
    op: OperatorClient,
    edge: Arc<Edge>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestEdge {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn start_on(store: Store, lease_ms: i64) -> TestEdge {
    let mut tenants = BTreeMap::new();
    tenants.insert("acme".to_string(), TokenDigest::new(ACME));
    tenants.insert("solo".to_string(), TokenDigest::new(SOLO));
    let mut cfg = EdgeConfig::new(tenants, vec![TokenDigest::new(OPERATOR)]);
    cfg.lease_ms = lease_ms;
    let edge = Edge::new(store, cfg);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let e = edge.clone();
    let task = tokio::spawn(async move {
        oz0_edge::serve(listener, e).await.unwrap();
    });
    TestEdge {
        op: OperatorClient::new(&url, OPERATOR).unwrap(),
        url,
        edge,
        task,
    }
}

/// A fresh store of each kind available.
async fn store_urls() -> Vec<(&'static str, String)> {
    let dir = std::env::temp_dir().join(format!("oz0-edge-test-{}", auth::random_id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut out = vec![(
        "sqlite",
        format!("sqlite:{}", dir.join("edge.db").display()),
    )];
    match std::env::var("OZ0_EDGE_TEST_POSTGRES") {
        Ok(base) => out.push(("postgres", fresh_postgres(&base).await)),
        Err(_) => {
            if std::env::var("OZ0_MUST_WORK").as_deref() == Ok("1") {
                panic!("OZ0_MUST_WORK=1 and OZ0_EDGE_TEST_POSTGRES is unset: run the tests under crates/oz0-edge/scripts/with-postgres.sh");
            }
            eprintln!("SKIPPED PostgreSQL half: OZ0_EDGE_TEST_POSTGRES is unset (run under crates/oz0-edge/scripts/with-postgres.sh)");
        }
    }
    out
}

/// Creates a database of its own for one test; returns its URL.
async fn fresh_postgres(base: &str) -> String {
    let (client, conn) = tokio_postgres::connect(base, tokio_postgres::NoTls)
        .await
        .expect("connect to OZ0_EDGE_TEST_POSTGRES");
    tokio::spawn(conn);
    let name = format!(
        "oz0_test_{}",
        auth::random_id().to_lowercase().replace(['-', '_'], "x")
    );
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    // postgres://USER@HOST/DB?…: swap DB.
    let (head, query) = base
        .split_once('?')
        .map_or((base, None), |(h, q)| (h, Some(q)));
    let slash = head
        .rfind('/')
        .expect("OZ0_EDGE_TEST_POSTGRES is postgres://USER@HOST/DB[?…]");
    let mut url = format!("{}/{name}", &head[..slash]);
    if let Some(q) = query {
        url.push('?');
        url.push_str(q);
    }
    url
}

fn linux_facts(microvm: bool, oci: bool) -> NodeFacts {
    let mut f = NodeFacts {
        schema: FACTS_SCHEMA,
        node_version: "0.1.0".into(),
        platform: Platform {
            os: Os::Linux,
            arch: "x86_64".into(),
            build_raw: "6.1.0-28-amd64".into(),
        },
        tier_proven: 1,
        tier_routed: 1,
        mechanism: Mechanism {
            kind: "bubblewrap".into(),
            bwrap_version: Some("0.8.0".into()),
            landlock_abi: Some(7),
            seccomp: true,
            cgroup_mode: Some("cgroup_v1".into()),
            ..Default::default()
        },
        self_test: SelfTest::Passed,
        fix: None,
        microvm: if microvm {
            Microvm {
                ready: true,
                reason: None,
                pinned: Some(true),
            }
        } else {
            Microvm {
                ready: false,
                reason: Some(MicrovmReason::NoKvmAccess),
                pinned: None,
            }
        },
        labels: BTreeMap::new(),
    };
    f.derive_labels(oci);
    f
}

fn failing_facts() -> NodeFacts {
    let mut f = linux_facts(false, false);
    f.tier_proven = 0;
    f.tier_routed = 0;
    f.self_test = SelfTest::Failed(Property::Files);
    f.fix = Some(FixKind::SelfTestFailed);
    f.microvm = Microvm {
        ready: false,
        reason: Some(MicrovmReason::NoTier1),
        pinned: None,
    };
    f.derive_labels(false);
    f
}

/// A Windows node whose PSEC self-test passed, claiming tier 1 routed.
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
        },
        labels: BTreeMap::new(),
    };
    f.derive_labels(false);
    f
}

async fn node(
    e: &TestEdge,
    tenant: &str,
    token: &str,
    name: &str,
    facts: &NodeFacts,
) -> NodeClient {
    let c = NodeClient::new(&e.url, tenant, NodeKey::generate()).unwrap();
    let r = c.register(token, Some(name)).await.unwrap();
    assert_eq!(r.node_id, c.node_id());
    c.report_facts(facts).await.unwrap();
    c
}

fn job(origin: Origin, isolation: Isolation) -> JobRequest {
    JobRequest {
        origin,
        kind: JobKind::Shell,
        tier: 0,
        isolation,
        arch: None,
        payload: serde_json::json!({"argv": ["true"]}),
    }
}

fn code(e: &ClientError) -> &str {
    e.refusal_code().unwrap_or("not a refusal")
}

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

        let mut req = job(Origin::Webhook, Isolation::Microvm);
        req.arch = Some("x86_64".into());
        let a = e.op.submit_job("acme", &req).await.unwrap();
        assert_eq!((a.tier, a.eligible_nodes), (2, 1), "{kind}");
        req.arch = Some("aarch64".into());
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
        assert!(
            vm.poll_job(0).await.unwrap().is_none(),
            "{kind}: the node without OCI does not get it"
        );
        assert_eq!(
            plain.poll_job(0).await.unwrap().unwrap().job.job_id,
            c.job_id
        );
    }
}

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

#[tokio::test]
async fn two_edge_replicas_on_one_store_hand_each_job_out_once() {
    for (kind, url) in store_urls().await {
        let e1 = start_on(Store::open(&url).await.unwrap(), 30_000).await;
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

async fn post_signed(url: &str, key: &NodeKey, path: &str, body: &[u8]) -> (u16, String) {
    let h = key.sign("POST", path, body);
    let (s, b) = raw_request(url, "POST", path, &h, body.to_vec())
        .await
        .unwrap();
    (s, String::from_utf8_lossy(&b).into_owned())
}

#[tokio::test]
async fn hostile_facts_are_dropped_or_refused_and_the_page_escapes_everything() {
    for (kind, url) in store_urls().await {
        let e = start_on(Store::open(&url).await.unwrap(), 30_000).await;
        let key_dir = std::env::temp_dir().join(format!("oz0-edge-hostile-{}", auth::random_id()));
        let key = NodeKey::load_or_create(&key_dir.join("identity/node.key")).unwrap();
        let n = NodeClient::new(&e.url, "acme", key).unwrap();
        // A name that is not a host name is dropped.
        n.register(ACME, Some("<img src=x onerror=alert(1)>"))
            .await
            .unwrap();
        let key = NodeKey::load_or_create(&key_dir.join("identity/node.key")).unwrap();

        let mut f = windows_facts();
        f.platform.build_raw = "26200.9457; rm -rf /".into();
        f.node_version = "<script>alert('node')</script>".into();
        f.mechanism.psec_contract = Some("1.0<b>".into());
        f.mechanism.psec_features = vec![
            "deny_paths".into(),
            "<svg/onload=alert(1)>".into(),
            "x".repeat(5_000),
        ];
        f.labels.insert("evil\"><script>".into(), "1".into());
        f.fix = Some(FixKind::PsecStartWithFlag);
        let view = n.report_facts(&f).await.unwrap();
        assert!(view.dropped_last >= 6, "{kind}: {}", view.dropped_last);
        assert_eq!(view.tier_routed, 0);
        let json = serde_json::to_string(&view).unwrap();
        for bad in ["<", "rm -rf", "alert", "xxxxx"] {
            assert!(!json.contains(bad), "{kind}: {bad} in {json}");
        }
        assert_eq!(view.fix.as_deref(), Some("PSEC is here, and the node does not run work in it: start it with --sandbox psec; meanwhile run tier-1 work on Linux or macOS nodes."));
        assert!(e.edge.store().counter(DROPPED_COUNTER).await.unwrap() >= 7);

        // An unknown property name, an unknown field: refused, without echoing them.
        let mut v = serde_json::to_value(failing_facts()).unwrap();
        v["self_test"]["property"] = serde_json::json!("<script>x</script>");
        let (s, b) = post_signed(
            &e.url,
            &key,
            "/v1/node/facts",
            &serde_json::to_vec(&v).unwrap(),
        )
        .await;
        assert_eq!(s, 400, "{b}");
        assert!(!b.contains("script"), "{b}");
        let mut v = serde_json::to_value(failing_facts()).unwrap();
        v["prose"] = serde_json::json!("Everything is fine, route webhooks here");
        assert_eq!(
            post_signed(
                &e.url,
                &key,
                "/v1/node/facts",
                &serde_json::to_vec(&v).unwrap()
            )
            .await
            .0,
            400
        );
        // Oversized: refused before parsing.
        let mut big = failing_facts();
        big.node_version = "9".repeat(20_000);
        assert_eq!(
            post_signed(
                &e.url,
                &key,
                "/v1/node/facts",
                &serde_json::to_vec(&big).unwrap()
            )
            .await
            .0,
            413
        );
        let huge = vec![b' '; 200_000];
        assert_eq!(
            post_signed(&e.url, &key, "/v1/node/facts", &huge).await.0,
            413
        );

        // A forged signature: another key claiming this node's id.
        let body = serde_json::to_vec(&linux_facts(true, true)).unwrap();
        let forger = NodeKey::generate();
        let mut h = forger.sign("POST", "/v1/node/facts", &body);
        h[0].1 = key.id().to_string();
        let (s, b) = raw_request(&e.url, "POST", "/v1/node/facts", &h, body.clone())
            .await
            .unwrap();
        assert_eq!(s, 401, "{}", String::from_utf8_lossy(&b));
        // The body changed after signing.
        let h = key.sign("POST", "/v1/node/facts", &body);
        let mut tampered = body.clone();
        let pos = tampered.windows(6).position(|w| w == b"x86_64").unwrap();
        tampered[pos..pos + 6].copy_from_slice(b"riscv6");
        assert_eq!(
            raw_request(&e.url, "POST", "/v1/node/facts", &h, tampered)
                .await
                .unwrap()
                .0,
            401
        );
        // Signed for one path, sent to another.
        let h = key.sign("POST", "/v1/node/facts", br#"{"tier":1}"#);
        assert_eq!(
            raw_request(
                &e.url,
                "POST",
                "/v1/node/poll",
                &h,
                br#"{"tier":1}"#.to_vec()
            )
            .await
            .unwrap()
            .0,
            401
        );
        // A replay: the first is taken, the same bytes again are refused.
        let h = key.sign("POST", "/v1/node/facts", &body);
        assert_eq!(
            raw_request(&e.url, "POST", "/v1/node/facts", &h, body.clone())
                .await
                .unwrap()
                .0,
            200
        );
        let (s, b) = raw_request(&e.url, "POST", "/v1/node/facts", &h, body.clone())
            .await
            .unwrap();
        assert_eq!(s, 401);
        assert!(String::from_utf8_lossy(&b).contains("replayed"));
        // An old timestamp, correctly signed.
        let mut h = key.sign("POST", "/v1/node/facts", &body);
        h[1].1 = (oz0_edge::time::now_ms() - 10 * 60_000).to_string();
        let (s, b) = raw_request(&e.url, "POST", "/v1/node/facts", &h, body.clone())
            .await
            .unwrap();
        assert_eq!(s, 401);
        assert!(String::from_utf8_lossy(&b).contains("clock"));
        // No signature at all; an unregistered key; a wrong enrolment token.
        assert_eq!(
            raw_request(&e.url, "POST", "/v1/node/facts", &[], body.clone())
                .await
                .unwrap()
                .0,
            401
        );
        let stranger = NodeClient::new(&e.url, "acme", NodeKey::generate()).unwrap();
        assert_eq!(
            stranger
                .report_facts(&linux_facts(true, true))
                .await
                .unwrap_err()
                .refusal_code(),
            Some("unauthenticated")
        );
        assert_eq!(
            stranger
                .register("wrong-token-0123456789", None)
                .await
                .unwrap_err()
                .refusal_code(),
            Some("unauthenticated")
        );
        assert_eq!(
            stranger
                .register(SOLO, None)
                .await
                .unwrap_err()
                .refusal_code(),
            Some("unauthenticated")
        );
        // The operator API wants its token.
        let nobody = OperatorClient::new(&e.url, "not-the-operator-token").unwrap();
        assert_eq!(
            nobody.nodes(None).await.unwrap_err().refusal_code(),
            Some("unauthenticated")
        );

        // The page: the hostile report was sanitized; escape anyway.
        let page = e.op.nodes_page().await.unwrap();
        for bad in ["<script", "<img", "<svg", "onerror", "rm -rf", "<b>"] {
            assert!(!page.contains(bad), "{kind}: {bad} on the page");
        }
        assert!(page.contains("MicroVMs: "));
        assert!(page.contains("tier 1 (psec 1.0, routed as tier 0)") || page.contains("routed at"));
        std::fs::remove_dir_all(&key_dir).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oz0_node_show_and_list() {
    let (_, url) = store_urls().await.remove(0);
    let e = start_on(Store::open(&url).await.unwrap(), 30_000).await;
    let vm = node(&e, "acme", ACME, "linux-kvm", &linux_facts(true, true)).await;
    let _w = node(&e, "acme", ACME, "win-psec", &windows_facts()).await;
    // The CLI blocks this worker; the edge runs on the other.
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_oz0"))
            .args(args)
            .env("OZ0_EDGE", &e.url)
            .env("OZ0_OPERATOR_TOKEN", OPERATOR)
            .env_remove("OZ0_OPERATOR_TOKEN_FILE")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (st, out, err) = run(&["node", "show", "linux-kvm"]);
    assert_eq!(st, Some(0), "{err}");
    assert!(out.contains("Tier: tier 2 proven, routed at 2"), "{out}");
    assert!(
        out.contains("Mechanism: bubblewrap 0.8.0, Landlock ABI 7, seccomp, cgroup v1"),
        "{out}"
    );
    assert!(out.contains("MicroVMs: ready"), "{out}");
    assert!(out.contains("Fix: none"), "{out}");
    let (st, out, _) = run(&["node", "show", vm.node_id(), "--json"]);
    assert_eq!(st, Some(0));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["tier_routed"], 2);
    assert_eq!(v["facts"]["labels"]["isolation.microvm"], "ready");
    let (st, out, _) = run(&["node", "list"]);
    assert_eq!(st, Some(0));
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(out.contains("tier 1 (psec 1.0, routed as tier 0)"), "{out}");
    let (st, _, err) = run(&["node", "show", "nope"]);
    assert_eq!(st, Some(1));
    assert!(err.contains("no node has that id or name"), "{err}");
}

#[test]
fn openapi_describes_exactly_the_routes() {
    let doc: serde_json::Value = serde_json::from_str(include_str!("../openapi.json")).unwrap();
    let mut described = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if ["get", "post", "put", "delete", "patch"].contains(&method.as_str()) {
                described.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    let routed: BTreeSet<(String, String)> = Routes::build()
        .specs()
        .iter()
        .map(|r| (r.method.to_string(), r.path.to_string()))
        .collect();
    assert_eq!(described, routed, "openapi.json and the router disagree");
}

/// Writes `docs/nodes-page.png` with Debian's chromium:
/// `cargo test -p oz0-edge --test edge -- --ignored nodes_page_screenshot`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium; run by hand to refresh docs/nodes-page.png"]
async fn nodes_page_screenshot() {
    let (_, url) = store_urls().await.remove(0);
    let e = start_on(Store::open(&url).await.unwrap(), 30_000).await;
    node(&e, "acme", ACME, "build-01", &linux_facts(true, true)).await;
    node(&e, "acme", ACME, "build-02", &linux_facts(false, true)).await;
    node(&e, "acme", ACME, "ci-files", &failing_facts()).await;
    node(&e, "acme", ACME, "win-psec", &windows_facts()).await;
    let mut nopsec = windows_facts();
    nopsec.platform.build_raw = "26100.4061".into();
    nopsec.tier_proven = 0;
    nopsec.self_test = SelfTest::NotRun;
    nopsec.mechanism = Mechanism {
        kind: "none".into(),
        ..Default::default()
    };
    nopsec.fix = Some(FixKind::PsecMissing);
    node(&e, "acme", ACME, "win-old", &nopsec).await;
    let mut hostile = windows_facts();
    hostile.platform.build_raw = "26200.9457; rm -rf /".into();
    hostile.node_version = "<script>alert(1)</script>".into();
    hostile.fix = Some(FixKind::PsecStartWithFlag);
    hostile.tier_proven = 0;
    hostile.self_test = SelfTest::NotRun;
    node(&e, "acme", ACME, "hostile", &hostile).await;
    let out = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/nodes-page.png");
    let profile = std::env::temp_dir().join(format!("oz0-chromium-{}", auth::random_id()));
    let page = format!(
        "{}/nodes",
        e.url.replace("http://", &format!("http://oz0:{OPERATOR}@"))
    );
    let status = std::process::Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1400,700",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={out}"))
        .arg(page)
        .status()
        .unwrap();
    assert!(status.success());
    let _ = std::fs::remove_dir_all(profile);
}
