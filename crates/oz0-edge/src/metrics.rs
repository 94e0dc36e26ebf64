//! `GET /metrics`: the edge in Prometheus' text format, behind the operator
//! token. Nodes by routed tier and state, queue depth per tier, jobs by
//! state (from the store, so every replica says the same), leases handed
//! out and expired (the store's counters), and this replica's request
//! latency per route.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds of the latency buckets, seconds.
const BUCKETS: [f64; 10] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0];

#[derive(Default)]
struct Latency {
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// This replica's request latencies, per route pattern and status class.
#[derive(Default)]
pub struct Requests {
    by: Mutex<BTreeMap<(String, &'static str), Latency>>,
}

impl std::fmt::Debug for Requests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Requests")
    }
}

impl Requests {
    /// Records one request to `route` (its pattern) that took `d`.
    pub fn record(&self, route: &str, status: u16, d: Duration) {
        let class = match status {
            200..=299 => "2xx",
            300..=399 => "3xx",
            400..=499 => "4xx",
            _ => "5xx",
        };
        let s = d.as_secs_f64();
        let mut by = self.by.lock().unwrap_or_else(|p| p.into_inner());
        let l = by.entry((route.to_string(), class)).or_default();
        l.count += 1;
        l.sum += s;
        for (i, b) in BUCKETS.iter().enumerate() {
            if s <= *b {
                l.buckets[i] += 1;
            }
        }
    }

    fn render(&self, out: &mut String) {
        out.push_str("# HELP oz0_edge_request_duration_seconds Time to answer a request, by route and status class (this replica).\n# TYPE oz0_edge_request_duration_seconds histogram\n");
        let by = self.by.lock().unwrap_or_else(|p| p.into_inner());
        for ((route, class), l) in by.iter() {
            let labels = format!("route=\"{}\",status=\"{class}\"", escape(route));
            for (i, b) in BUCKETS.iter().enumerate() {
                out.push_str(&format!(
                    "oz0_edge_request_duration_seconds_bucket{{{labels},le=\"{b}\"}} {}\n",
                    l.buckets[i]
                ));
            }
            out.push_str(&format!(
                "oz0_edge_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}\n",
                l.count
            ));
            out.push_str(&format!(
                "oz0_edge_request_duration_seconds_sum{{{labels}}} {}\n",
                l.sum
            ));
            out.push_str(&format!(
                "oz0_edge_request_duration_seconds_count{{{labels}}} {}\n",
                l.count
            ));
        }
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// What the store says, for one scrape.
#[derive(Debug, Default, Clone)]
pub struct StoreFigures {
    /// (tier taken, state) → nodes.
    pub nodes: BTreeMap<(u8, &'static str), i64>,
    /// tier → queued jobs.
    pub queued: BTreeMap<u8, i64>,
    /// state → jobs.
    pub jobs: BTreeMap<String, i64>,
    /// Leases handed out, all replicas.
    pub leases_granted: i64,
    /// Leases that lapsed, all replicas.
    pub leases_expired: i64,
    /// Windows nodes not removed, and whether each has PSEC.
    pub psec: Vec<PsecNode>,
}

/// A Windows node's PSEC, as its last report said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PsecNode {
    /// The node's id.
    pub node: String,
    /// Its Windows build (empty when its report had none that passed).
    pub build: String,
    /// The PSEC contract its probe found; empty when it found none.
    pub contract: String,
}

/// The exposition text.
pub fn render(f: &StoreFigures, requests: &Requests) -> String {
    let mut out = String::with_capacity(4096);
    out.push_str("# HELP oz0_edge_nodes Nodes not removed, by the tier they take work at and their state.\n# TYPE oz0_edge_nodes gauge\n");
    for ((tier, state), n) in &f.nodes {
        out.push_str(&format!(
            "oz0_edge_nodes{{tier=\"{tier}\",state=\"{state}\"}} {n}\n"
        ));
    }
    out.push_str("# HELP oz0_edge_queue_depth Jobs waiting in a tier's queue.\n# TYPE oz0_edge_queue_depth gauge\n");
    for tier in 0..=crate::sanitize::MAX_TIER {
        out.push_str(&format!(
            "oz0_edge_queue_depth{{tier=\"{tier}\"}} {}\n",
            f.queued.get(&tier).copied().unwrap_or(0)
        ));
    }
    out.push_str(
        "# HELP oz0_edge_jobs Jobs the store holds, by state.\n# TYPE oz0_edge_jobs gauge\n",
    );
    for state in ["queued", "leased", "succeeded", "failed", "cancelled"] {
        out.push_str(&format!(
            "oz0_edge_jobs{{state=\"{state}\"}} {}\n",
            f.jobs.get(state).copied().unwrap_or(0)
        ));
    }
    out.push_str("# HELP oz0_edge_leases_granted_total Leases handed out.\n# TYPE oz0_edge_leases_granted_total counter\n");
    out.push_str(&format!(
        "oz0_edge_leases_granted_total {}\n",
        f.leases_granted
    ));
    out.push_str("# HELP oz0_edge_leases_expired_total Leases that lapsed (their job queued again or failed).\n# TYPE oz0_edge_leases_expired_total counter\n");
    out.push_str(&format!(
        "oz0_edge_leases_expired_total {}\n",
        f.leases_expired
    ));
    out.push_str("# HELP oz0_edge_psec_available Whether a Windows node's probe found PSEC (1) or not (0), whatever the node was started with; the contract it found.\n# TYPE oz0_edge_psec_available gauge\n");
    for p in &f.psec {
        out.push_str(&format!(
            "oz0_edge_psec_available{{node=\"{}\",build=\"{}\",contract=\"{}\"}} {}\n",
            escape(&p.node),
            escape(&p.build),
            escape(&p.contract),
            u8::from(!p.contract.is_empty())
        ));
    }
    requests.render(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_every_family() {
        let r = Requests::default();
        r.record("/v1/node/poll", 200, Duration::from_millis(3));
        r.record("/v1/node/poll", 200, Duration::from_millis(30));
        let mut f = StoreFigures::default();
        f.nodes.insert((1, "up"), 2);
        f.queued.insert(1, 7);
        f.jobs.insert("succeeded".into(), 5);
        let t = render(&f, &r);
        assert!(
            t.contains("oz0_edge_nodes{tier=\"1\",state=\"up\"} 2\n"),
            "{t}"
        );
        assert!(
            t.contains("oz0_edge_queue_depth{tier=\"1\"} 7\n")
                && t.contains("oz0_edge_queue_depth{tier=\"2\"} 0\n")
        );
        assert!(t.contains("oz0_edge_jobs{state=\"succeeded\"} 5\n"));
        assert!(t.contains("oz0_edge_request_duration_seconds_bucket{route=\"/v1/node/poll\",status=\"2xx\",le=\"0.005\"} 1\n"), "{t}");
        assert!(t.contains(
            "oz0_edge_request_duration_seconds_count{route=\"/v1/node/poll\",status=\"2xx\"} 2\n"
        ));
    }
}
