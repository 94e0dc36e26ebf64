//! What the edge's integration tests share: a real edge on 127.0.0.1 over
//! each store (SQLite always; PostgreSQL when `OZ0_EDGE_TEST_POSTGRES` is
//! set, required when `OZ0_MUST_WORK=1`), the facts of simulated nodes, and
//! nodes registered through the client library.

// Each test binary uses some of these helpers, none uses them all.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use oz0_edge::auth::{self, TokenDigest};
use oz0_edge::client::{ClientError, NodeClient, NodeKey, OperatorClient};
use oz0_edge::routing::{Isolation, JobKind, JobPayload, JobRequest, Origin};
use oz0_edge::wire::ShellJob;
use oz0_edge::{Edge, EdgeConfig, Store};
use oz0_policy::facts::{
    FixKind, Mechanism, Microvm, MicrovmReason, NodeFacts, Os, Platform, Property, SelfTest,
    FACTS_SCHEMA,
};

pub mod certs;
pub mod net;

pub const OPERATOR: &str = "operator-token-0123456789";
pub const ACME: &str = "acme-enrolment-0123456789";
pub const SOLO: &str = "solo-enrolment-0123456789";

pub struct TestEdge {
    pub url: String,
    pub op: OperatorClient,
    pub edge: Arc<Edge>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestEdge {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn start_on(store: Store, lease_ms: i64) -> TestEdge {
    start_with(
        store,
        lease_ms,
        None,
        oz0_edge::serve::Limits::default(),
        oz0_edge::client::Trust::System,
    )
    .await
}

/// An edge serving TLS with `tls` (its URL then https://), with `limits`;
/// its operator client trusts `trust`.
pub async fn start_with(
    store: Store,
    lease_ms: i64,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: oz0_edge::serve::Limits,
    trust: oz0_edge::client::Trust,
) -> TestEdge {
    start_configured(store, |c| c.lease_ms = lease_ms, tls, limits, trust).await
}

/// An edge whose configuration `f` changes first.
pub async fn start_configured(
    store: Store,
    f: impl FnOnce(&mut EdgeConfig),
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: oz0_edge::serve::Limits,
    trust: oz0_edge::client::Trust,
) -> TestEdge {
    let mut tenants = BTreeMap::new();
    tenants.insert("acme".to_string(), TokenDigest::new(ACME));
    tenants.insert("solo".to_string(), TokenDigest::new(SOLO));
    let mut cfg = EdgeConfig::new(tenants, vec![TokenDigest::new(OPERATOR)]);
    f(&mut cfg);
    let edge = Edge::new(store, cfg);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{}", listener.local_addr().unwrap());
    let e = edge.clone();
    let task = tokio::spawn(async move {
        oz0_edge::serve_with(listener, e, tls, limits)
            .await
            .unwrap();
    });
    TestEdge {
        op: OperatorClient::with_trust(&url, OPERATOR, &trust).unwrap(),
        url,
        edge,
        task,
    }
}

/// The stores of one test: iterated as `(kind, url)`; the SQLite store's
/// folder is removed when the iteration (the test's `for` loop) is over.
pub struct Stores {
    dir: std::path::PathBuf,
    urls: Vec<(&'static str, String)>,
}

impl IntoIterator for Stores {
    type Item = (&'static str, String);
    type IntoIter = StoresIter;
    fn into_iter(mut self) -> StoresIter {
        StoresIter {
            urls: std::mem::take(&mut self.urls).into_iter(),
            _stores: self,
        }
    }
}

/// [`Stores`] being iterated; holds the folder until dropped.
pub struct StoresIter {
    urls: std::vec::IntoIter<(&'static str, String)>,
    _stores: Stores,
}

impl Iterator for StoresIter {
    type Item = (&'static str, String);
    fn next(&mut self) -> Option<Self::Item> {
        self.urls.next()
    }
}

impl Stores {
    /// The first store's URL (SQLite's); the folder lives as long as `self`.
    pub fn first(&self) -> String {
        self.urls[0].1.clone()
    }
}

impl Drop for Stores {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A fresh store of each kind available.
pub async fn store_urls() -> Stores {
    let dir = std::env::temp_dir().join(format!("oz0-edge-test-{}", auth::random_id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut urls = vec![(
        "sqlite",
        format!("sqlite:{}", dir.join("edge.db").display()),
    )];
    match std::env::var("OZ0_EDGE_TEST_POSTGRES") {
        Ok(base) => urls.push(("postgres", fresh_postgres(&base).await)),
        Err(_) => {
            if std::env::var("OZ0_MUST_WORK").as_deref() == Ok("1") {
                panic!("OZ0_MUST_WORK=1 and OZ0_EDGE_TEST_POSTGRES is unset: run the tests under crates/oz0-edge/scripts/with-postgres.sh");
            }
            eprintln!("SKIPPED PostgreSQL half: OZ0_EDGE_TEST_POSTGRES is unset (run under crates/oz0-edge/scripts/with-postgres.sh)");
        }
    }
    Stores { dir, urls }
}

/// Creates a database of its own for one test; returns its URL.
pub async fn fresh_postgres(base: &str) -> String {
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

pub fn linux_facts(microvm: bool, oci: bool) -> NodeFacts {
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
                backend: None,
            }
        } else {
            Microvm {
                ready: false,
                reason: Some(MicrovmReason::NoKvmAccess),
                pinned: None,
                backend: None,
            }
        },
        oci: Default::default(),
        labels: BTreeMap::new(),
    };
    f.oci = oz0_policy::facts::Oci {
        ready: oci,
        runtimes: if oci {
            vec![oz0_policy::facts::OciRuntime::Tier1]
        } else {
            Vec::new()
        },
        reason: None,
    };
    f.derive_labels();
    f
}

pub fn failing_facts() -> NodeFacts {
    let mut f = linux_facts(false, false);
    f.tier_proven = 0;
    f.tier_routed = 0;
    f.self_test = SelfTest::Failed(Property::Files);
    f.fix = Some(FixKind::SelfTestFailed);
    f.microvm = Microvm {
        ready: false,
        reason: Some(MicrovmReason::NoTier1),
        pinned: None,
        backend: None,
    };
    f.derive_labels();
    f
}

/// A Mac on Apple silicon whose self-test failed (as every Mac's does, at
/// job_limits) with Apple's container offered: its microVMs are not inside
/// tier 1, so the node keeps them at tier 0.
pub fn mac_facts() -> NodeFacts {
    let mut f = failing_facts();
    f.platform = Platform {
        os: Os::Macos,
        arch: "aarch64".into(),
        build_raw: "25B78".into(),
    };
    f.mechanism = Mechanism {
        kind: "none".into(),
        ..Default::default()
    };
    f.self_test = SelfTest::Failed(Property::JobLimits);
    f.microvm = Microvm {
        ready: true,
        reason: None,
        pinned: None,
        backend: Some(oz0_policy::facts::MicrovmBackend::AppleContainer),
    };
    f.oci = oz0_policy::facts::Oci::unavailable(oz0_policy::facts::OciReason::Unsupported);
    f.derive_labels();
    f
}

/// A Windows node whose PSEC self-test passed, claiming tier 1 routed.
pub fn windows_facts() -> NodeFacts {
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
            backend: None,
        },
        oci: Default::default(),
        labels: BTreeMap::new(),
    };
    f.derive_labels();
    f
}

pub async fn node(
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

/// A job: a shell command for `Isolation::None`, else a tool job whose
/// manifest declares that isolation (routed by it).
pub fn job(origin: Origin, isolation: Isolation) -> JobRequest {
    match isolation {
        Isolation::None => JobRequest::new(
            origin,
            JobPayload::Shell(ShellJob {
                command: vec!["true".into()],
                ..ShellJob::default()
            }),
        ),
        _ => tool_job(origin, isolation == Isolation::Microvm, None),
    }
}

/// A tool job: a microVM tool (of `arch`, when given) or a container tool.
pub fn tool_job(origin: Origin, microvm: bool, arch: Option<&str>) -> JobRequest {
    tool_job_with(origin, microvm, arch, "")
}

/// [`tool_job`] whose tool's manifest has `extra` lines too.
pub fn tool_job_with(origin: Origin, microvm: bool, arch: Option<&str>, extra: &str) -> JobRequest {
    let mut tool = format!(
        "tools:\n  - id: t\n    package: oci:example.invalid/t@sha256:{}\n{extra}",
        "0".repeat(64)
    );
    if microvm {
        tool.push_str("    isolation: microvm\n    command: [/srv/t]\n");
    }
    if let Some(a) = arch {
        tool.push_str(&format!("    arch: {a}\n"));
    }
    tool_request(origin, &tool)
}

/// A webhook's tool job calling tool `t` of the plugin `manifest`.
pub fn tool_request_with_manifest(manifest: &str) -> JobRequest {
    tool_request(Origin::Webhook, manifest)
}

/// A tool job calling tool `t` of the plugin whose manifest is `manifest`.
fn tool_request(origin: Origin, manifest: &str) -> JobRequest {
    JobRequest::new(
        origin,
        JobPayload::read(
            JobKind::Tool,
            &serde_json::json!({"manifest": manifest, "tool": "t"}),
        )
        .unwrap(),
    )
}

/// A microVM tool job whose manifest is the seed's example: no
/// `command:` (its VM runs the image's entrypoint and cmd), for `arch`.
pub fn image_tool_job(origin: Origin, arch: &str) -> JobRequest {
    let tool = format!(
        "tools:\n  - id: t\n    package: oci:example.invalid/t@sha256:{}\n    isolation: microvm\n    arch: {arch}\n    container: {{memory_mb: 512, cpus: 1}}\n",
        "0".repeat(64)
    );
    tool_request(origin, &tool)
}

pub fn code(e: &ClientError) -> &str {
    e.refusal_code().unwrap_or("not a refusal")
}
