//! The edge's limit of open files: each connection is one, so at start the
//! soft limit is raised to the hard one (the edge uses epoll, never
//! `select`, so a high limit costs nothing), and when even that cannot hold
//! the connection cap and [`MARGIN`], the cap is lowered to what fits and
//! the log says so once, with the fix. A cap the process cannot reach
//! would make the accept loop fail on every connection past the limit
//! instead.

use crate::log::Level;

/// Descriptors the edge keeps besides its connections: the standard
/// streams, the listener, the runtime's epoll and wakers, the store
/// (SQLite's database, journal and shared memory, or
/// [`crate::store::POSTGRES_CONNECTIONS`]), a certificate read again on
/// SIGHUP, and a connection accepted only to be closed.
pub const MARGIN: u64 = 64;

/// The hard limit the soft one is raised to when there is none: Linux's
/// default `fs.nr_open`.
const UNLIMITED: u64 = 1 << 20;

/// What the start found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenFiles {
    /// The soft limit found at start.
    pub was: u64,
    /// The soft limit now.
    pub soft: u64,
    /// The hard limit.
    pub hard: u64,
    /// Why raising the soft limit failed, when it did.
    pub failed: Option<String>,
}

/// Raises the soft limit of open files to the hard limit.
#[cfg(unix)]
pub fn raise() -> OpenFiles {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let l = getrlimit(Resource::Nofile);
    let hard = l.maximum.unwrap_or(UNLIMITED);
    let was = l.current.unwrap_or(hard);
    if was >= hard {
        return OpenFiles {
            was,
            soft: was,
            hard,
            failed: None,
        };
    }
    let wanted = Rlimit {
        current: Some(hard),
        maximum: l.maximum,
    };
    match setrlimit(Resource::Nofile, wanted) {
        Ok(()) => OpenFiles {
            was,
            soft: hard,
            hard,
            failed: None,
        },
        Err(e) => OpenFiles {
            was,
            soft: was,
            hard,
            failed: Some(e.to_string()),
        },
    }
}

/// The connection cap to serve with, for `wanted` (`--max-connections`),
/// and the line to log about it, if any.
pub fn plan(wanted: usize, f: &OpenFiles) -> (usize, Option<(Level, String)>) {
    let wanted_u = u64::try_from(wanted).unwrap_or(u64::MAX);
    let needed = wanted_u.saturating_add(MARGIN);
    let failed = f
        .failed
        .as_deref()
        .map(|e| format!(" (raising it to the hard limit {} failed: {e})", f.hard))
        .unwrap_or_default();
    if f.soft >= needed {
        let line = if f.failed.is_some() {
            Some((
                Level::Warn,
                format!("open files: the soft limit stays at {}{failed}; it holds --max-connections {wanted} and {MARGIN} more", f.soft),
            ))
        } else if f.soft > f.was {
            Some((
                Level::Info,
                format!("open files: raised the soft limit from {} to {} (the hard limit); it holds --max-connections {wanted} and {MARGIN} more", f.was, f.soft),
            ))
        } else {
            None
        };
        return (wanted, line);
    }
    let fits = usize::try_from(f.soft.saturating_sub(MARGIN).max(1)).unwrap_or(wanted);
    let limit = if f.soft > f.was {
        format!("raised from {} to the hard limit {}", f.was, f.soft)
    } else {
        format!("{} (hard limit {}){failed}", f.soft, f.hard)
    };
    (
        fits,
        Some((
            Level::Warn,
            format!(
                "open files: the limit is {limit}, and --max-connections {wanted} needs {needed} ({MARGIN} for the store, the log and the listener): serving at most {fits} connections at once. To serve {wanted}, raise the hard limit: LimitNOFILE=65536 in the unit (systemctl edit oz0-edge), or ulimit -Hn 65536 as root in the shell that starts the edge; or lower --max-connections"
            ),
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(was: u64, soft: u64, hard: u64, failed: Option<&str>) -> OpenFiles {
        OpenFiles {
            was,
            soft,
            hard,
            failed: failed.map(str::to_string),
        }
    }

    #[test]
    fn the_cap_fits_the_limit_and_the_log_says_what_was_done() {
        // Raised, and it fits: said once, as information.
        let (cap, line) = plan(4096, &f(1024, 524_288, 524_288, None));
        assert_eq!(cap, 4096);
        let (level, text) = line.unwrap();
        assert_eq!(level, Level::Info);
        assert!(text.contains("from 1024 to 524288"), "{text}");
        // Nothing to raise, and it fits: nothing to say.
        assert_eq!(plan(4096, &f(65536, 65536, 65536, None)), (4096, None));
        // The hard limit is too low: the cap is lowered, and the fix named.
        let (cap, line) = plan(4096, &f(256, 256, 256, None));
        assert_eq!(cap, 192);
        let (level, text) = line.unwrap();
        assert_eq!(level, Level::Warn);
        for want in [
            "the limit is 256 (hard limit 256)",
            "--max-connections 4096 needs 4160",
            "at most 192",
            "LimitNOFILE=65536",
            "ulimit -Hn",
        ] {
            assert!(text.contains(want), "no {want:?} in {text}");
        }
        let (cap, line) = plan(4096, &f(256, 1024, 1024, None));
        assert_eq!(cap, 960);
        assert!(line
            .unwrap()
            .1
            .contains("raised from 256 to the hard limit 1024"));
        // Raising failed: said, with why, whether or not the cap fits.
        let (cap, line) = plan(100, &f(256, 256, 4096, Some("Operation not permitted")));
        assert_eq!(cap, 100);
        assert!(line.unwrap().1.contains("failed: Operation not permitted"));
        let (cap, line) = plan(4096, &f(256, 256, 4096, Some("Operation not permitted")));
        assert_eq!(cap, 192);
        assert!(line.unwrap().1.contains("failed: Operation not permitted"));
        // A limit below the margin still serves one connection.
        assert_eq!(plan(4096, &f(20, 20, 20, None)).0, 1);
    }

    #[test]
    fn the_unit_holds_the_default_cap() {
        let unit = include_str!("../../debian/oz0-edge.service");
        let n: u64 = unit
            .lines()
            .find_map(|l| l.strip_prefix("LimitNOFILE="))
            .expect("LimitNOFILE= in debian/oz0-edge.service")
            .parse()
            .unwrap();
        let cap = crate::serve::Limits::default().max_connections;
        assert!(n >= u64::try_from(cap).unwrap() + MARGIN, "LimitNOFILE={n}");
    }
}
