//! The audit trail: one structured record per proxy decision.
//!
//! A record names the run, the decision, the canonical target and what
//! happened; it never holds the token, a path, a query string or a header
//! value, so the log can be kept and shipped without leaking what a run sent.

use std::io::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// The node's audit log, in its data directory (where no run can write),
/// unless named otherwise.
pub const AUDIT_LOG_NAME: &str = "egress-audit.jsonl";

/// Longest request target kept in a record.
pub const MAX_AUDIT_TARGET: usize = 256;

/// What the proxy decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Allowed and dialled (status 200 for a tunnel, the upstream's status
    /// for plain HTTP, 502/504 when the dial or upstream failed).
    Allow,
    /// 403: the policy refused the target.
    Deny,
    /// 407: no token, or not this run's token.
    Auth,
    /// 400 (or 414/431 for oversized heads): a malformed request.
    Bad,
}

/// One decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditRecord {
    /// Milliseconds since the Unix epoch.
    pub ts_ms: u64,
    /// The run.
    pub run: String,
    /// The decision.
    pub decision: Decision,
    /// The HTTP status the client got.
    pub status: u16,
    /// The request method (`CONNECT`, `GET`, …), empty when unparsable.
    pub method: String,
    /// The request's target authority as sent (userinfo removed, cut to
    /// [`MAX_AUDIT_TARGET`]), when there was one.
    pub target: Option<String>,
    /// The canonical host, when it parsed.
    pub host: Option<String>,
    /// The port, when it parsed.
    pub port: Option<u16>,
    /// The address dialled.
    pub addr: Option<String>,
    /// Why, for anything but a plain success.
    pub reason: Option<String>,
    /// Bytes from the run to the target (request bodies, tunnel upstream).
    pub bytes_up: u64,
    /// Bytes from the target to the run.
    pub bytes_down: u64,
    /// Milliseconds from the request to the end of the exchange.
    pub duration_ms: u64,
}

// Made by the proxy (feature `proxy`).
#[cfg_attr(not(feature = "proxy"), allow(dead_code))]
impl AuditRecord {
    pub(crate) fn new(run: &str, decision: Decision, status: u16, method: &str) -> Self {
        let ts_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        AuditRecord {
            ts_ms,
            run: run.to_string(),
            decision,
            status,
            method: method.to_string(),
            target: None,
            host: None,
            port: None,
            addr: None,
            reason: None,
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0,
        }
    }

    /// Replaces `secret` wherever the client's own text put it (a token sent
    /// as a host name or in a URL is still the token).
    pub(crate) fn redact(&mut self, secret: &str) {
        for field in [
            &mut self.target,
            &mut self.host,
            &mut self.reason,
            &mut self.addr,
        ]
        .into_iter()
        .flatten()
        {
            if field.contains(secret) {
                *field = field.replace(secret, "<token>");
            }
        }
    }

    /// The record as one JSON line (no trailing newline).
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).expect("audit records always serialise")
    }
}

/// Where records go. Must not block for long: it is called on the proxy's
/// threads.
pub trait AuditSink: Send + Sync + 'static {
    /// Records one decision.
    fn record(&self, record: &AuditRecord);
}

impl<F: Fn(&AuditRecord) + Send + Sync + 'static> AuditSink for F {
    fn record(&self, record: &AuditRecord) {
        self(record)
    }
}

/// One line `oz0-egress {json}` per record on stderr. Only for a proxy
/// whose stderr no run shares (tests, tools): a run's own stderr is the
/// node's, where it could forge or bury such lines; the node writes its
/// trail with [`FileSink`].
#[derive(Debug, Default, Clone, Copy)]
pub struct StderrSink;

impl AuditSink for StderrSink {
    fn record(&self, record: &AuditRecord) {
        let line = format!("oz0-egress {}\n", record.to_json_line());
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
}

/// A sink that appends one JSON line per record to a file the caller opened
/// for appending (the node's audit log, where no run can write). Each line
/// is one `write`, so lines of several processes appending to one file do
/// not interleave.
pub struct FileSink {
    file: std::sync::Mutex<std::fs::File>,
    /// Opens the log again, beginning a new one when it has grown past
    /// `max` (the old one kept as `<name>.1`), with `max`.
    reopen: Option<(Reopen, u64)>,
}

/// Why a [`FileSink`]'s log could not be opened: the opener's own error.
pub type OpenError = Box<dyn std::error::Error + Send + Sync>;

/// How a [`FileSink`] opens its log again.
pub type Reopen = Box<dyn Fn() -> Result<std::fs::File, OpenError> + Send + Sync>;

impl std::fmt::Debug for FileSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSink").finish_non_exhaustive()
    }
}

impl FileSink {
    /// A sink writing to `file` (opened with `O_APPEND`).
    pub fn new(file: std::fs::File) -> FileSink {
        FileSink {
            file: std::sync::Mutex::new(file),
            reopen: None,
        }
    }

    /// A sink writing to what `open()` opens, opened again each time the
    /// file grows past `max`: `open()` must then begin a new log (as
    /// `hostfs::open_log` does past the same size). A node process runs for
    /// months, and every request a run sends is a record (a run that sends
    /// requests without the token as fast as it can writes gigabytes an
    /// hour): opened once, the log grew without bound.
    pub fn reopening(open: Reopen, max: u64) -> Result<FileSink, OpenError> {
        Ok(FileSink {
            file: std::sync::Mutex::new(open()?),
            reopen: Some((open, max)),
        })
    }
}

impl AuditSink for FileSink {
    fn record(&self, record: &AuditRecord) {
        let line = format!("{}\n", record.to_json_line());
        let mut f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if f.write_all(line.as_bytes()).is_err() {
            // The trail must not go missing silently: say so where the
            // node's own messages go (never a record, never the token).
            let _ = writeln!(
                std::io::stderr(),
                "oz0-node: warning: the egress audit log could not be written; a decision for run {} is missing from it",
                record.run
            );
        }
        let Some((open, max)) = &self.reopen else {
            return;
        };
        // Another process appending to the same log may have begun the
        // new one already: opening the name again then finds it.
        if f.metadata().is_ok_and(|m| m.len() > *max) {
            match open() {
                Ok(new) => *f = new,
                Err(e) => {
                    let _ = writeln!(
                        std::io::stderr(),
                        "oz0-node: warning: the egress audit log could not be begun again: {e}; records go on to the one open"
                    );
                }
            }
        }
    }
}

/// Keeps the authority of a request target for the record: drops any
/// userinfo (a client may put the token there), path and query, and cuts it.
#[cfg_attr(not(feature = "proxy"), allow(dead_code))]
pub(crate) fn audit_target(raw: &str) -> String {
    let rest = raw.split_once("://").map_or(raw, |(_, r)| r);
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let auth = &rest[..end];
    let auth = auth.rsplit_once('@').map_or(auth, |(_, h)| h);
    let mut cut = auth.len().min(MAX_AUDIT_TARGET);
    while !auth.is_char_boundary(cut) {
        cut -= 1;
    }
    auth[..cut].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log that grows past its bound is begun again (the old one kept
    /// once, as `.1`), so however many records a run causes, the log and
    /// the one before stay within the bound and a record.
    #[cfg(unix)]
    #[test]
    fn a_reopening_sink_keeps_its_log_bounded() {
        let dir = std::env::temp_dir().join(format!("oz0-audit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("egress.jsonl");
        const MAX: u64 = 4096;
        let path = log.clone();
        let open: Reopen = Box::new(move || {
            let open = || {
                std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(&path)
            };
            let f = open()?;
            if f.metadata()?.len() > MAX {
                std::fs::rename(&path, path.with_extension("jsonl.1"))?;
                return Ok(open()?);
            }
            Ok(f)
        });
        let sink = FileSink::reopening(open, MAX).unwrap();
        let rec = AuditRecord::new("r1", Decision::Deny, 407, "GET");
        let line = rec.to_json_line().len() as u64 + 1;
        for _ in 0..1000 {
            sink.record(&rec);
        }
        let size = |p: &std::path::Path| std::fs::metadata(p).unwrap().len();
        assert!(size(&log) <= MAX + line, "{}", size(&log));
        assert!(size(&log.with_extension("jsonl.1")) <= MAX + line);
        let kept = (size(&log) + size(&log.with_extension("jsonl.1"))) / line;
        assert!(kept > MAX / line, "{kept} records kept");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn targets_lose_userinfo_and_paths() {
        let cases = [
            ("example.com:443", "example.com:443"),
            ("http://oz0:secret@example.com/x?key=1", "example.com"),
            ("http://example.com:8080/p", "example.com:8080"),
            ("user:pw@h:1", "h:1"),
            ("/just/a/path", ""),
        ];
        for (raw, want) in cases {
            assert_eq!(audit_target(raw), want, "{raw}");
        }
        assert_eq!(audit_target(&"a".repeat(1000)).len(), MAX_AUDIT_TARGET);
    }

    #[test]
    fn json_line_shape() {
        let mut r = AuditRecord::new("run-1", Decision::Deny, 403, "CONNECT");
        r.host = Some("x.invalid".into());
        let v: serde_json::Value = serde_json::from_str(&r.to_json_line()).unwrap();
        assert_eq!(v["decision"], "deny");
        assert_eq!(v["run"], "run-1");
        assert_eq!(v["status"], 403);
    }
}
