//! The node's log: one line at a time on its stderr (a job's output goes
//! to the job's files, never there), on every platform in one form.

/// Writes one line to the node's log, with its time as the edge's log
/// lines carry it. What the edge or a job said in it (a tenant, a tier
/// line, a refusal, a job's kind) is escaped for a terminal.
pub fn log(msg: &str) {
    eprintln!("{}", line(oz0_edge::time::now_ms(), msg));
}

/// A log line at `now_ms`: `2026-05-01T12:34:56.789Z oz0-node: MSG`
/// (UTC, RFC 3339 to the millisecond).
fn line(now_ms: i64, msg: &str) -> String {
    let utc = oz0_edge::time::format_utc(now_ms);
    format!(
        "{}T{}.{:03}Z oz0-node: {}",
        &utc[..10],
        &utc[11..19],
        now_ms.rem_euclid(1000),
        oz0_edge::term::escape(msg.as_bytes())
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn log_lines_carry_their_time() {
        assert_eq!(
            super::line(1_777_638_896_789, "job j1 \x1b[31m"),
            "2026-05-01T12:34:56.789Z oz0-node: job j1 \\x1b[31m"
        );
    }
}
