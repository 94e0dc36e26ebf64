//! The edge's log: one line per event on stderr, with its time (UTC, to
//! the millisecond), its level and the client's address when a request
//! caused it; plain text, or one JSON object a line (`--log-format json`).
//! A line never holds a token, a job's payload or a node's own prose.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};

static JSON: AtomicBool = AtomicBool::new(false);

/// Lines as JSON objects from now on.
pub fn set_json(on: bool) {
    JSON.store(on, Ordering::Relaxed);
}

/// How bad it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Something happened.
    Info,
    /// Something went wrong that the edge got past.
    Warn,
    /// Something failed.
    Error,
}

impl Level {
    fn as_str(self) -> &'static str {
        match self {
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }
}

/// The line for an event (without its newline).
pub fn line(level: Level, msg: &str, client: Option<SocketAddr>, now_ms: i64) -> String {
    let ms = now_ms.rem_euclid(1000);
    let utc = crate::time::format_utc(now_ms);
    // `2026-05-01 12:34:56 UTC` → `2026-05-01T12:34:56.789Z`
    let time = format!("{}T{}.{ms:03}Z", &utc[..10], &utc[11..19]);
    if JSON.load(Ordering::Relaxed) {
        let mut v = serde_json::json!({"time": time, "level": level.as_str(), "msg": msg});
        if let Some(c) = client {
            v["client"] = c.to_string().into();
        }
        v.to_string()
    } else {
        let client = client.map(|c| format!(" client={c}")).unwrap_or_default();
        format!("{time} {}{client} oz0-edge: {msg}", level.as_str())
    }
}

fn emit(level: Level, msg: &str, client: Option<SocketAddr>) {
    eprintln!("{}", line(level, msg, client, crate::time::now_ms()));
}

/// An event.
pub fn info(msg: &str, client: Option<SocketAddr>) {
    emit(Level::Info, msg, client);
}

/// Something the edge got past.
pub fn warn(msg: &str, client: Option<SocketAddr>) {
    emit(Level::Warn, msg, client);
}

/// A failure.
pub fn error(msg: &str, client: Option<SocketAddr>) {
    emit(Level::Error, msg, client);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_have_time_level_and_client() {
        let c: SocketAddr = "127.0.0.1:4242".parse().unwrap();
        let l = line(Level::Warn, "x", Some(c), 1_777_777_777_123);
        assert_eq!(
            l,
            "2026-05-03T03:09:37.123Z warn client=127.0.0.1:4242 oz0-edge: x"
        );
        set_json(true);
        let j: serde_json::Value =
            serde_json::from_str(&line(Level::Info, "y \"q\"", None, 0)).unwrap();
        set_json(false);
        assert_eq!(
            j,
            serde_json::json!({"time": "1970-01-01T00:00:00.000Z", "level": "info", "msg": "y \"q\""})
        );
    }
}
