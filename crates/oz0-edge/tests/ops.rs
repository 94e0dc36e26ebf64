//! Operating the edge: `/metrics` in Prometheus' format (nodes by tier and
//! state, queue depth, jobs by state, leases, request latency) behind the
//! operator token; `/v1/health` says the store failed when it does.

mod common;

use common::{job, linux_facts, node, start_on, store_urls, windows_facts, ACME, OPERATOR};
use oz0_edge::client::raw_request;
use oz0_edge::routing::{Isolation, Origin};
use oz0_edge::Store;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_say_what_the_store_holds() {
    let stores = store_urls().await;
    let url = stores.first();
    let e = start_on(Store::open(&url).await.unwrap(), 30_000).await;
    let n = node(&e, "acme", ACME, "m1", &linux_facts(false, false)).await;
    // Two Windows nodes: one whose probe found PSEC, one whose did not.
    let w1 = node(&e, "acme", ACME, "w1", &windows_facts()).await;
    let mut none = windows_facts();
    none.tier_proven = 0;
    none.tier_routed = 0;
    none.self_test = oz0_policy::facts::SelfTest::NotRun;
    none.mechanism = Default::default();
    none.mechanism.kind = "none".into();
    let w2 = node(&e, "acme", ACME, "w2", &none).await;
    for _ in 0..3 {
        e.op.submit_job("acme", &job(Origin::Webhook, Isolation::None))
            .await
            .unwrap();
    }
    let l = n.poll_job(1).await.unwrap().unwrap();
    n.complete_job(&l, true, Some(0)).await.unwrap();
    let (s, _) = raw_request(&e.url, "GET", "/metrics", &[], vec![])
        .await
        .unwrap();
    assert_eq!(s, 401, "metrics need the operator token");
    let (s, b) = raw_request(
        &e.url,
        "GET",
        "/metrics",
        &[("authorization", format!("Bearer {OPERATOR}"))],
        vec![],
    )
    .await
    .unwrap();
    let t = String::from_utf8(b).unwrap();
    assert_eq!(s, 200, "{t}");
    for want in [
        "oz0_edge_nodes{tier=\"1\",state=\"up\"} 1\n",
        "oz0_edge_queue_depth{tier=\"1\"} 2\n",
        "oz0_edge_jobs{state=\"queued\"} 2\n",
        "oz0_edge_jobs{state=\"succeeded\"} 1\n",
        "oz0_edge_leases_granted_total 1\n",
        "oz0_edge_request_duration_seconds_count{route=\"/v1/node/poll\",status=\"2xx\"} 1\n",
        "oz0_edge_request_duration_seconds_count{route=\"/v1/tenants/{tenant}/jobs\",status=\"2xx\"} 3\n",
    ] {
        assert!(t.contains(want), "no {want:?} in:\n{t}");
    }
    for (n, want) in [(&w1, "contract=\"1.0\"} 1\n"), (&w2, "contract=\"\"} 0\n")] {
        let line = format!(
            "oz0_edge_psec_available{{node=\"{}\",build=\"26200.9457\",{want}",
            n.node_id()
        );
        assert!(t.contains(&line), "no {line:?} in:\n{t}");
    }
    // A Linux node has no such line.
    assert_eq!(t.matches("oz0_edge_psec_available{").count(), 2, "{t}");
}

/// With PostgreSQL gone, the health check says so (503), and requests that
/// need the store get 503 too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_the_store() {
    let Ok(base) = std::env::var("OZ0_EDGE_TEST_POSTGRES") else {
        if std::env::var("OZ0_MUST_WORK").as_deref() == Ok("1") {
            panic!("OZ0_MUST_WORK=1 and OZ0_EDGE_TEST_POSTGRES is unset");
        }
        eprintln!("SKIPPED: OZ0_EDGE_TEST_POSTGRES is unset");
        return;
    };
    let url = common::fresh_postgres(&base).await;
    let e = start_on(Store::open(&url).await.unwrap(), 30_000).await;
    let (s, b) = raw_request(&e.url, "GET", "/v1/health", &[], vec![])
        .await
        .unwrap();
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&b));
    let name = url
        .split('?')
        .next()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();
    let (client, conn) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .await
        .unwrap();
    let (s, b) = raw_request(&e.url, "GET", "/v1/health", &[], vec![])
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
    assert_eq!((s, &v["ok"]), (503, &serde_json::json!(false)), "{v}");
    assert_eq!(v["store"], "postgres");
    let err = e.op.nodes(None).await.unwrap_err();
    assert_eq!(err.refusal_code(), Some("store"), "{err}");
}
