//! The edge's log: one line per event on stderr, with its time (UTC, to
//! the millisecond), its level and the client's address when a request
//! caused it; plain text, or one JSON object a line (`--log-format json`).
//! A line never holds a token, a job's payload or a node's own prose.
//!
//! An event that can come in floods (a refused connection, a TLS handshake
//! that timed out, a request from an unknown node) goes through a
//! [`Tally`]: the first of a quiet spell is written at once, the rest as
//! one line per [`REPEAT_INTERVAL_MS`] with their count.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

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

/// How long repeated events of one kind are gathered into one line.
pub const REPEAT_INTERVAL_MS: i64 = 10_000;

/// A line a [`Window`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// The event itself: the first after a quiet spell.
    First,
    /// `events` events (the one at hand among them) since the last line,
    /// `over_ms` ago.
    Count {
        /// Events the line accounts for.
        events: u64,
        /// Time since the previous line.
        over_ms: i64,
    },
}

/// Which events of one kind become lines: the first at once, then at most
/// one line per interval with the count of the others. The clock is the
/// caller's, so this is tested without waiting.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Window {
    /// When the interval in progress ends; `None` while quiet.
    until: Option<i64>,
    /// When the previous line was due.
    since: i64,
    /// Events not yet in a line.
    count: u64,
}

impl Window {
    /// One event at `now`: the line to write now, if any.
    pub fn record(&mut self, now: i64) -> Option<Due> {
        match self.until {
            Some(until) if now < until => {
                self.count += 1;
                None
            }
            // Quiet, or an interval that ended without a [`Window::tick`].
            _ => {
                let due = match std::mem::take(&mut self.count) {
                    0 => Due::First,
                    n => Due::Count {
                        events: n + 1,
                        over_ms: now - self.since,
                    },
                };
                self.since = now;
                self.until = Some(now + REPEAT_INTERVAL_MS);
                Some(due)
            }
        }
    }

    /// The end of an interval, at `now`: the line for the events since the
    /// previous one, if there were any (and another interval begins);
    /// without any, the window is quiet again.
    pub fn tick(&mut self, now: i64) -> Option<Due> {
        match self.until {
            Some(until) if now >= until => match std::mem::take(&mut self.count) {
                0 => {
                    self.until = None;
                    None
                }
                events => {
                    let due = Due::Count {
                        events,
                        over_ms: now - self.since,
                    };
                    self.since = now;
                    self.until = Some(now + REPEAT_INTERVAL_MS);
                    Some(due)
                }
            },
            _ => None,
        }
    }

    /// When [`Window::tick`] is next due; `None` while quiet.
    pub fn until(&self) -> Option<i64> {
        self.until
    }
}

/// Events of one kind, logged through a [`Window`]: a count line names the
/// last event and its client. A timer task (on the tokio runtime, when
/// there is one) writes the count at the end of each interval.
#[derive(Debug)]
pub struct Tally {
    level: Level,
    state: Mutex<TallyState>,
}

#[derive(Debug)]
struct TallyState {
    window: Window,
    last: String,
    client: Option<SocketAddr>,
    timer: bool,
}

impl Tally {
    /// A tally whose lines have `level`.
    pub const fn new(level: Level) -> Tally {
        Tally {
            level,
            state: Mutex::new(TallyState {
                window: Window {
                    until: None,
                    since: 0,
                    count: 0,
                },
                last: String::new(),
                client: None,
                timer: false,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TallyState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One event: `msg` is what a line about it alone would say.
    pub fn note(&'static self, msg: &str, client: Option<SocketAddr>) {
        let now = crate::time::now_ms();
        let mut s = self.lock();
        let due = s.window.record(now);
        if due.is_none() {
            s.last.clear();
            s.last.push_str(msg);
            s.client = client;
        }
        let runtime = tokio::runtime::Handle::try_current().ok();
        let start_timer = !s.timer && runtime.is_some();
        s.timer |= start_timer;
        drop(s);
        if let Some(d) = due {
            emit(self.level, &worded(d, msg), client);
        }
        if let (true, Some(rt)) = (start_timer, runtime) {
            rt.spawn(self.timer());
        }
    }

    /// Writes the count at the end of each interval, until one passes
    /// without an event.
    async fn timer(&'static self) {
        // A runtime that shuts down drops this task where it waits; the
        // next event then starts a timer again.
        struct Running(&'static Tally);
        impl Drop for Running {
            fn drop(&mut self) {
                self.0.lock().timer = false;
            }
        }
        let running = Running(self);
        loop {
            let until = {
                let mut s = self.lock();
                match s.window.until() {
                    Some(u) => u,
                    None => {
                        // Under the lock, so that an event from now on
                        // starts another timer.
                        s.timer = false;
                        drop(s);
                        std::mem::forget(running);
                        return;
                    }
                }
            };
            let wait = u64::try_from(until - crate::time::now_ms()).unwrap_or(0);
            tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
            let line = {
                let mut s = self.lock();
                s.window
                    .tick(crate::time::now_ms())
                    .map(|d| (worded(d, &s.last), s.client))
            };
            if let Some((text, client)) = line {
                emit(self.level, &text, client);
            }
        }
    }
}

fn worded(d: Due, msg: &str) -> String {
    match d {
        Due::First => msg.to_string(),
        Due::Count { events, over_ms } => {
            let secs = (over_ms + 500) / 1000;
            format!("{events} more in the last {} s: {msg}", secs.max(1))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Events at the given times, the window ticked whenever it asks; the
    /// lines written, with their times.
    fn run(events: impl IntoIterator<Item = i64>, end: i64) -> Vec<(i64, Due)> {
        let mut w = Window::default();
        let mut out = Vec::new();
        let tick = |w: &mut Window, upto: i64, out: &mut Vec<(i64, Due)>| {
            while let Some(u) = w.until().filter(|u| *u <= upto) {
                if let Some(d) = w.tick(u) {
                    out.push((u, d));
                }
            }
        };
        for t in events {
            tick(&mut w, t, &mut out);
            if let Some(d) = w.record(t) {
                out.push((t, d));
            }
        }
        tick(&mut w, end, &mut out);
        out
    }

    fn accounted(lines: &[(i64, Due)]) -> u64 {
        lines
            .iter()
            .map(|(_, d)| match d {
                Due::First => 1,
                Due::Count { events, .. } => *events,
            })
            .sum()
    }

    #[test]
    fn a_flood_is_one_line_per_interval_and_every_event_is_counted() {
        // 34,000 refusals over two minutes: the first, then one line per 10 s.
        let lines = run((0..34_000).map(|i| i * 120_000 / 34_000), 200_000);
        assert_eq!(lines.len(), 13, "{lines:?}");
        assert_eq!(lines[0], (0, Due::First));
        assert_eq!(accounted(&lines), 34_000);
        assert!(lines[1..].iter().all(|(_, d)| matches!(
            d,
            Due::Count {
                over_ms: 10_000,
                ..
            }
        )));
        // After a quiet interval the next event is written at once again.
        let lines = run([0, 1, 50_000, 50_001], 100_000);
        assert_eq!(
            lines,
            vec![
                (0, Due::First),
                (
                    10_000,
                    Due::Count {
                        events: 1,
                        over_ms: 10_000
                    }
                ),
                (50_000, Due::First),
                (
                    60_000,
                    Due::Count {
                        events: 1,
                        over_ms: 10_000
                    }
                ),
            ]
        );
        // A single event is a single line.
        assert_eq!(run([5], 100_000), vec![(5, Due::First)]);
    }

    #[test]
    fn without_a_timer_the_count_comes_with_the_next_event() {
        let mut w = Window::default();
        assert_eq!(w.record(0), Some(Due::First));
        assert_eq!(w.record(1), None);
        assert_eq!(w.record(2), None);
        assert_eq!(
            w.record(30_000),
            Some(Due::Count {
                events: 3,
                over_ms: 30_000
            })
        );
        assert_eq!(
            worded(
                Due::Count {
                    events: 3,
                    over_ms: 30_000
                },
                "TLS handshake timed out"
            ),
            "3 more in the last 30 s: TLS handshake timed out"
        );
    }

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
