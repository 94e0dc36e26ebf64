//! What `oz0` prints as text: nodes, jobs, their output and the look
//! after a run (escaped for a terminal by the caller).

use oz0_edge::wire::{JobLogs, JobLook, JobView, NodeView};

/// Nodes, one line each.
pub(super) fn nodes(nodes: &[NodeView]) -> String {
    let mut text = String::new();
    for n in nodes {
        text.push_str(&format!(
            "{}  {:<20} {:<10} {:<16} {:<32} MicroVMs: {}  last seen: {}\n",
            n.id,
            n.name.as_deref().unwrap_or("-"),
            n.tenant,
            n.state,
            n.tier_line,
            n.microvm_line,
            n.last_seen
        ));
    }
    text
}

/// A node, in lines.
pub(super) fn node(n: &NodeView) -> String {
    let mut s = String::new();
    let name = n
        .name
        .as_deref()
        .map(|x| format!(" ({x})"))
        .unwrap_or_default();
    s.push_str(&format!("Node {}{name}, tenant {}\n", n.id, n.tenant));
    s.push_str(&format!("State: {} (last seen {})\n", n.state, n.last_seen));
    s.push_str(&format!("Platform: {}\n", n.platform_line));
    s.push_str(&format!("Tier: {}\n", n.tier_line));
    if let Some(note) = &n.routed_note {
        s.push_str(&format!("Routing: {note}\n"));
    }
    s.push_str(&format!("Mechanism: {}\n", n.mechanism_line));
    s.push_str(&format!("Fix: {}\n", n.fix.as_deref().unwrap_or("none")));
    s.push_str(&format!("MicroVMs: {}\n", n.microvm_line));
    if let Some(f) = &n.facts {
        let labels: Vec<String> = f.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        s.push_str(&format!("Labels: {}\n", labels.join(" ")));
    }
    s.push_str(&format!(
        "Last report: {}{}\n",
        n.last_report.as_deref().unwrap_or("never"),
        if n.dropped_last > 0 {
            format!(" ({} field(s) dropped)", n.dropped_last)
        } else {
            String::new()
        }
    ));
    s
}

/// A job, in lines.
pub(super) fn job(j: &JobView) -> String {
    let mut s = format!(
        "Job {} ({}, tier {}): {}\n",
        j.job_id, j.kind, j.tier, j.state
    );
    if let Some(n) = &j.node_id {
        s.push_str(&format!("Node: {n} (attempts: {})\n", j.attempts));
    }
    if let Some(c) = j.exit_code {
        s.push_str(&format!("Exit code: {c}\n"));
    }
    if let Some(e) = &j.error {
        s.push_str(&format!("Error: {e}\n"));
    }
    if let Some(l) = &j.look {
        s.push_str(&look(l));
    }
    if let Some(r) = &j.result {
        if r["isError"] == true {
            s.push_str("The tool reported an error.\n");
        }
        s.push_str("Result:\n");
        s.push_str(&oz0_plugin::mcp::result_text(r));
    }
    s
}

/// What the node's look after the run found, for `job show`.
fn look(l: &JobLook) -> String {
    let mut s = String::new();
    let total = l.findings.len() as u64 + l.findings_more;
    if total > 0 || !l.complete {
        s.push_str(&format!(
            "Look after the run: {total} finding(s){}{}\n",
            if l.complete {
                ""
            } else {
                "; NOT every entry was examined"
            },
            if l.left_in_place > 0 {
                format!("; {} LEFT IN PLACE", l.left_in_place)
            } else {
                String::new()
            }
        ));
    }
    for f in &l.findings {
        let done = match (&f.aside, &f.left) {
            (Some(a), _) => format!("renamed aside to {a}"),
            (None, Some(why)) => format!("LEFT IN PLACE: {why}"),
            (None, None) => "left in place (report only)".into(),
        };
        s.push_str(&format!("  {} at {}: {done}\n", f.what, f.path));
    }
    if l.findings_more > 0 {
        s.push_str(&format!("  and {} more\n", l.findings_more));
    }
    if !l.changed_host_exec.is_empty() {
        s.push_str(
            "Changed files that tools on the host execute (review them before running them):\n",
        );
        for p in &l.changed_host_exec {
            s.push_str(&format!("  {p}\n"));
        }
        if l.changed_host_exec_more > 0 {
            s.push_str(&format!("  and {} more\n", l.changed_host_exec_more));
        }
    }
    s
}

/// A page of jobs, one line each.
pub(super) fn jobs(jobs: &[JobView]) -> String {
    let mut text = String::new();
    for j in jobs {
        text.push_str(&format!(
            "{}  {:<6} {:<9} tier {}  {:<10} attempts {}/{}  submitted {}{}\n",
            j.job_id,
            j.kind,
            j.origin,
            j.tier,
            j.state,
            j.attempts,
            j.max_attempts,
            oz0_edge::time::format_utc(j.submitted_ms),
            j.exit_code
                .map(|c| format!("  exit {c}"))
                .unwrap_or_default()
        ));
    }
    text
}

/// A job's output tails, each under a line with its size.
pub(super) fn logs(l: &JobLogs) -> String {
    let mut text = String::new();
    for (name, tail, total) in [
        ("stdout", &l.stdout_tail, l.stdout_bytes),
        ("stderr", &l.stderr_tail, l.stderr_bytes),
    ] {
        let total = total.unwrap_or(0);
        let kept = tail.as_ref().map_or(0, |t| t.len());
        text.push_str(&format!(
            "== {name}: {total} byte(s){}\n",
            if usize::try_from(total).unwrap_or(usize::MAX) > kept {
                format!(", the last {kept} kept")
            } else {
                String::new()
            }
        ));
        if let Some(t) = tail {
            text.push_str(t);
            if !t.is_empty() && !t.ends_with('\n') {
                text.push('\n');
            }
        }
    }
    text
}
