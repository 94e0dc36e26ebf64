//! Hostile nodes end to end: facts that do not fit are dropped or refused
//! without being echoed, forged, tampered, replayed and stale requests are
//! refused, and the Nodes page escapes everything.

mod common;

use common::{failing_facts, linux_facts, start_on, store_urls, windows_facts, ACME, SOLO};
use oz0_edge::api::DROPPED_COUNTER;
use oz0_edge::auth;
use oz0_edge::client::{raw_request, NodeClient, NodeKey, OperatorClient};
use oz0_edge::Store;
use oz0_policy::facts::FixKind;

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
        // A name that is not a host name is refused, without echoing it.
        let err = n
            .register(ACME, Some("<img src=x onerror=alert(1)>"))
            .await
            .unwrap_err();
        assert_eq!(err.refusal_code(), Some("bad_name"), "{kind}: {err}");
        assert!(!err.to_string().contains("<img"), "{err}");
        n.register(ACME, None).await.unwrap();
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
        assert!(e.edge.store().counter(DROPPED_COUNTER).await.unwrap() >= 6);

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
        // Timestamps at either end of what the header may say: refused the
        // same way.
        for ts in [i64::MIN, i64::MAX] {
            let mut h = key.sign("POST", "/v1/node/facts", &body);
            h[1].1 = ts.to_string();
            let (s, b) = raw_request(&e.url, "POST", "/v1/node/facts", &h, body.clone())
                .await
                .unwrap();
            assert_eq!(s, 401, "{kind}: {ts}");
            assert!(String::from_utf8_lossy(&b).contains("clock"), "{ts}");
        }
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

/// A body larger than the small routes' bound (or of no stated length) is
/// read only from a sender it may come from: an anonymous client, or one
/// naming no registered node, is refused on its headers alone, before a
/// byte of the body, so it cannot make the edge hold 2 MiB a connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_body_is_read_only_from_a_known_sender() {
    let stores = store_urls().await;
    let e = start_on(Store::open(&stores.first()).await.unwrap(), 30_000).await;
    let addr: std::net::SocketAddr = e.url.trim_start_matches("http://").parse().unwrap();
    let stranger = format!(
        "{}: n{}\r\n{}: {}\r\n{}: AAAAAAAAAAAAAAAAAAAAAA\r\n{}: {}\r\n",
        auth::H_NODE,
        "0".repeat(24),
        auth::H_TIMESTAMP,
        oz0_edge::time::now_ms(),
        auth::H_NONCE,
        auth::H_SIGNATURE,
        "A".repeat(86)
    );
    let asks = [
        (
            "POST /v1/node/jobs/AAAAAAAAAAAAAAAAAAAAAA/complete",
            String::new(),
        ),
        (
            "POST /v1/node/jobs/AAAAAAAAAAAAAAAAAAAAAA/output",
            stranger.clone(),
        ),
        ("POST /v1/tenants/acme/jobs", String::new()),
        (
            "POST /v1/tenants/acme/jobs",
            "transfer-encoding: chunked\r\n".to_string(),
        ),
    ];
    for (line, headers) in asks {
        let length = if headers.contains("chunked") {
            String::new()
        } else {
            "content-length: 2000000\r\n".to_string()
        };
        let request = format!("{line} HTTP/1.1\r\nhost: x\r\n{headers}{length}\r\n");
        let answer = tokio::task::spawn_blocking(move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            // No body follows: the answer comes from the headers alone.
            common::net::ask(&mut s, &request, std::time::Duration::from_secs(10))
        })
        .await
        .unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 401"),
            "{line} {headers:?}: {answer:?}"
        );
    }
}
