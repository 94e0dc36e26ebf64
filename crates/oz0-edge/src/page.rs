//! The Nodes page: server-rendered HTML, every value escaped, no script.
//!
//! Only edge-worded text and pattern-checked values reach this page (see
//! [`crate::sanitize`]); it escapes them all anyway, and the edge serves it
//! with a Content-Security-Policy that allows no script at all.

use crate::time::format_utc;
use crate::wire::NodePage;

/// Escapes text for HTML element content and quoted attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1b1f24}\
h1{font-size:20px;margin:0 0 4px}p.sub{color:#57606a;margin:0 0 16px}\
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #d0d7de;padding:6px 8px;text-align:left;vertical-align:top}\
th{background:#f6f8fa;font-weight:600}td.t1{color:#116329;font-weight:600}td.t0{color:#9a6700;font-weight:600}\
small{color:#57606a}code{font-family:ui-monospace,monospace;font-size:12px}\
td.t-off{color:#57606a}td.s-up{color:#116329;font-weight:600}td.s-down{color:#cf222e;font-weight:600}td.s-wait{color:#9a6700;font-weight:600}";

/// Renders the page.
pub fn render_nodes(page: &NodePage, tenant: Option<&str>, now_ms: i64) -> String {
    let nodes = &page.nodes;
    let mut h = String::with_capacity(4096 + nodes.len() * 800);
    h.push_str("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Nodes · oz0 edge</title><style>");
    h.push_str(STYLE);
    h.push_str("</style></head><body><h1>Nodes</h1><p class=\"sub\">");
    match tenant {
        Some(t) => h.push_str(&format!("Tenant {} · ", escape(t))),
        None => h.push_str("All tenants · "),
    }
    let routed1 = nodes.iter().filter(|n| n.up && n.tier_routed >= 1).count();
    let up = nodes.iter().filter(|n| n.state == "up").count();
    h.push_str(&format!(
        "{} node(s), {up} up, {} up and routed at tier 1 or higher · {}</p>",
        nodes.len(),
        routed1,
        escape(&format_utc(now_ms))
    ));
    h.push_str("<table><thead><tr><th>Node</th><th>Tenant</th><th>State</th><th>Platform</th><th>Tier</th><th>Mechanism</th><th>Fix</th><th>MicroVMs</th><th>Last report</th></tr></thead><tbody>");
    for n in nodes {
        // A node that is not up takes no work, whatever it proved.
        let class = if !n.up {
            "t-off"
        } else if n.tier_routed >= 1 {
            "t1"
        } else {
            "t0"
        };
        let sclass = match n.state.as_str() {
            "up" => "s-up",
            "down" => "s-down",
            _ => "s-wait",
        };
        let name = n
            .name
            .as_deref()
            .map(|s| format!("{}<br>", escape(s)))
            .unwrap_or_default();
        let note = n
            .routed_note
            .as_deref()
            .map(|s| format!("<br><small>{}</small>", escape(s)))
            .unwrap_or_default();
        let dropped = if n.dropped_last > 0 {
            format!(
                "<br><small>{} field(s) dropped from this report</small>",
                n.dropped_last
            )
        } else {
            String::new()
        };
        h.push_str(&format!(
            "<tr><td>{name}<code>{}</code></td><td>{}</td><td class=\"{sclass}\">{}<br><small>last seen {}</small></td><td>{}</td><td class=\"{class}\">{}{note}</td><td>{}</td><td>{}</td><td>MicroVMs: {}<br>Containers: {}</td><td>{}{dropped}</td></tr>",
            escape(&n.id),
            escape(&n.tenant),
            escape(&n.state),
            escape(&n.last_seen),
            escape(&n.platform_line),
            escape(&n.tier_line),
            escape(&n.mechanism_line),
            escape(n.fix.as_deref().unwrap_or("none")),
            escape(&n.microvm_line),
            escape(&n.containers_line),
            escape(n.last_report.as_deref().unwrap_or("never")),
        ));
    }
    h.push_str("</tbody></table>");
    if let Some(next) = &page.next {
        let t = tenant
            .map(|t| format!("tenant={}&amp;", escape(t)))
            .unwrap_or_default();
        h.push_str(&format!(
            "<p class=\"sub\"><a href=\"/nodes?{t}after={}\">More nodes</a></p>",
            escape(next)
        ));
    }
    h.push_str("</body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_controls() {
        assert_eq!(
            escape("<script>alert('x')</script>&\"\u{7}"),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;\u{fffd}"
        );
    }

    #[test]
    fn a_page_of_hostile_words_has_no_markup_and_no_controls() {
        // The edge's sanitizer keeps such words out; the page stands on its own.
        let hostile =
            "<script>alert(1)</script>\u{1b}]0;owned\u{7}\u{9b}2J\"><img src=x onerror=alert(1)>";
        let mut v = serde_json::json!({
            "id": hostile, "tenant": hostile, "name": hostile,
            "tier_proven": 1, "tier_routed": 1, "tier_line": hostile,
            "platform_line": hostile, "mechanism_line": hostile, "fix": hostile,
            "microvm_line": hostile, "containers_line": hostile, "routed_note": hostile, "state": hostile,
            "last_seen": hostile, "last_report": hostile, "last_report_ms": 0,
            "last_seen_ms": 0, "dropped_last": 0, "dropped_total": 0, "facts": null,
        });
        let n: crate::wire::NodeView = serde_json::from_value(v.take()).unwrap();
        let page = NodePage {
            nodes: vec![n],
            next: Some(hostile.to_string()),
        };
        let html = render_nodes(&page, Some(hostile), 0);
        for bad in ["<script", "<img", "x\">"] {
            assert!(!html.contains(bad), "{bad} in {html}");
        }
        assert!(
            !html.chars().any(|c| c.is_control() && c != '\n'),
            "{html:?}"
        );
        // Every one of the node's 13 fields, the tenant in the heading, and
        // the next page's link (tenant and after): there, escaped.
        assert_eq!(
            html.matches("&lt;script&gt;alert(1)&lt;/script&gt;")
                .count(),
            16,
            "{html}"
        );
    }
}
