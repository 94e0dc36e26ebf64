//! What `oz0` prints as text: nodes, jobs, their output and the look
//! after a run (escaped for a terminal by the caller).

use oz0_edge::wire::{JobLogs, JobLook, JobView, NodeView};

/// Rows under a header, each column as wide as its widest cell (the
/// last one unpadded).
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut l = String::new();
        let last = cells.len().saturating_sub(1);
        for (i, c) in cells.into_iter().enumerate() {
            l.push_str(c);
            if i < last {
                let pad = width[i] - c.chars().count() + 2;
                l.extend(std::iter::repeat_n(' ', pad));
            }
        }
        l.push('\n');
        l
    };
    let mut text = line(header.to_vec());
    for r in rows {
        text.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    text
}

/// A table of nodes (`wide`: with the platform, the mechanism and
/// MicroVMs).
pub(super) fn nodes(nodes: &[NodeView], wide: bool) -> String {
    let mut header = vec!["NAME", "ID", "TENANT", "STATE", "TIER", "LAST SEEN"];
    if wide {
        header.extend(["PLATFORM", "MECHANISM", "MICROVMS"]);
    }
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|n| {
            let mut r = vec![
                n.name.clone().unwrap_or_else(|| "-".into()),
                n.id.clone(),
                n.tenant.clone(),
                n.state.clone(),
                n.tier_line.clone(),
                n.last_seen.clone(),
            ];
            if wide {
                r.extend([
                    n.platform_line.clone(),
                    n.mechanism_line.clone(),
                    n.microvm_line.clone(),
                ]);
            }
            r
        })
        .collect();
    table(&header, &rows)
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
    s.push_str(&format!("Containers: {}\n", n.containers_line));
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

/// A job, in lines: what it runs, where, when, and how it ended.
pub(super) fn job(j: &JobView) -> String {
    let mut s = format!(
        "Job {} ({}, tier {}): {}\n",
        j.job_id, j.kind, j.tier, j.state
    );
    if let Some(c) = &j.command {
        s.push_str(&format!("Command: {}\n", quoted(c)));
    }
    if let Some(t) = &j.tool {
        s.push_str(&format!("Tool: {t}\n"));
    }
    s.push_str(&format!("Origin: {}\n", j.origin));
    if let Some(n) = &j.node_id {
        let name = j
            .node_name
            .as_deref()
            .map(|x| format!("{x} "))
            .unwrap_or_default();
        s.push_str(&format!(
            "Node: {name}{n} (attempts: {} of at most {})\n",
            j.attempts, j.max_attempts
        ));
    }
    let at = oz0_edge::time::format_utc;
    s.push_str(&format!("Submitted: {}\n", at(j.submitted_ms)));
    if let Some(l) = j.leased_ms {
        s.push_str(&format!(
            "Started: {} (waited {})\n",
            at(l),
            took(l - j.submitted_ms)
        ));
    }
    if let Some(d) = j.done_ms {
        let ran = j
            .leased_ms
            .map(|l| format!(" (ran {})", took(d - l)))
            .unwrap_or_default();
        s.push_str(&format!("Ended: {}{ran}\n", at(d)));
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

/// A table of jobs (`wide`: with the origin, the node and the times).
pub(super) fn jobs(jobs: &[JobView], wide: bool) -> String {
    let mut header = vec![
        "JOB",
        "KIND",
        "STATE",
        "TIER",
        "ATTEMPTS",
        "EXIT",
        "SUBMITTED",
    ];
    if wide {
        header.extend(["ORIGIN", "NODE", "STARTED", "ENDED"]);
    }
    let time = |ms: Option<i64>| ms.map_or_else(|| "-".into(), oz0_edge::time::format_utc);
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            let mut r = vec![
                j.job_id.clone(),
                j.kind.clone(),
                j.state.clone(),
                j.tier.to_string(),
                format!("{}/{}", j.attempts, j.max_attempts),
                j.exit_code.map_or_else(|| "-".into(), |c| c.to_string()),
                time(Some(j.submitted_ms)),
            ];
            if wide {
                r.extend([
                    j.origin.clone(),
                    j.node_id.clone().unwrap_or_else(|| "-".into()),
                    time(j.leased_ms),
                    time(j.done_ms),
                ]);
            }
            r
        })
        .collect();
    table(&header, &rows)
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

/// A command as a shell would take it back: words with spaces or quotes
/// in single quotes.
fn quoted(words: &[String]) -> String {
    words
        .iter()
        .map(|w| {
            if !w.is_empty()
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
            {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A span of milliseconds: `40 ms`, `1.2 s`, `3 min 4 s`.
fn took(ms: i64) -> String {
    let ms = ms.max(0);
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000)
    }
}
