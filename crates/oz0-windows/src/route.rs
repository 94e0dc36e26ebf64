//! How a PSEC run reaches the egress proxy: the bridge or the relay.
//!
//! Some builds refuse a container's connection to its own loopback (build
//! 26300.9711 does); there the bridge cannot work and the run goes through the
//! egress relay instead. The node asks the build once per start, by a test (a
//! container listening on its own loopback and dialling itself), and hands the
//! answer on as [`ROUTE_ENV`]. A run started by hand without the variable asks
//! once itself and fails with the reason when the question gets no answer —
//! it never guesses.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The variable that carries the decision from the node to its runs.
pub const ROUTE_ENV: &str = "OZ0_SANDBOX_PSEC_ROUTE";

/// The route to the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// The node's bridge listens on the container's own loopback.
    Bridge,
    /// The egress relay listens outside, on one of [`crate::relay::FIRST_PORT`]..=[`crate::relay::LAST_PORT`].
    Relay,
}

impl Route {
    /// The value of [`ROUTE_ENV`].
    pub const fn as_str(self) -> &'static str {
        match self {
            Route::Bridge => "bridge",
            Route::Relay => "relay",
        }
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the self-dial test saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelfDial {
    /// The container reached its own loopback listener: the bridge works.
    Connected,
    /// Windows refused the connection: the relay is needed.
    Refused,
    /// The test gave no answer (it could not start, timed out, …).
    NoAnswer(String),
}

/// Why no route was decided.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// The variable holds something else.
    #[error("{ROUTE_ENV}={0:?} is neither bridge nor relay: unset it (the run then asks the build) or name one")]
    BadValue(String),
    /// The variable is not Unicode.
    #[error("{ROUTE_ENV} is not valid Unicode: unset it or set it to bridge or relay")]
    NotUnicode,
    /// The test gave no answer.
    #[error("could not find out whether this build lets a PSEC container reach its own loopback ({0}); set {ROUTE_ENV}=bridge or relay to name the route")]
    Undecided(String),
}

/// Parses the variable's value (`None` when unset).
pub fn parse_route_env(value: Option<&std::ffi::OsStr>) -> Result<Option<Route>, RouteError> {
    let Some(v) = value else { return Ok(None) };
    match v.to_str() {
        None => Err(RouteError::NotUnicode),
        Some("bridge") => Ok(Some(Route::Bridge)),
        Some("relay") => Ok(Some(Route::Relay)),
        Some(other) => Err(RouteError::BadValue(other.chars().take(40).collect())),
    }
}

/// Decides the route: the variable when set, else the self-dial test, run
/// exactly once. A test with no answer is an error, never a guess.
pub fn decide_route(
    env_value: Option<&std::ffi::OsStr>,
    self_dial: impl FnOnce() -> SelfDial,
) -> Result<Route, RouteError> {
    if let Some(r) = parse_route_env(env_value)? {
        return Ok(r);
    }
    match self_dial() {
        SelfDial::Connected => Ok(Route::Bridge),
        SelfDial::Refused => Ok(Route::Relay),
        SelfDial::NoAnswer(why) => Err(RouteError::Undecided(why)),
    }
}

/// The report file the self-dial test's probe writes in its work folder.
const SELF_DIAL_REPORT: &str = "self-dial.json";

/// What the probe's report says of its self-dial: reached (`"ok"`), or
/// refused in any way (the bridge cannot work there either); no answer
/// when it wrote none.
pub fn judge_self_dial(report: Option<&serde_json::Value>) -> SelfDial {
    match report
        .and_then(|r| r.get("self_dial"))
        .and_then(|v| v.as_str())
    {
        Some("ok") => SelfDial::Connected,
        Some(_) => SelfDial::Refused,
        None => SelfDial::NoAnswer("the test's probe wrote no answer".into()),
    }
}

/// The self-dial test through `sandbox` (PSEC on a Windows node): the
/// node binary's probe (`probe`, as a run names it) run quietly in the
/// empty folder `work` (`spec_work` as the run's spec spells it; the
/// node's data directory `spec_data_dir` likewise), bounded to 30 s,
/// listening on its own loopback and dialling itself.
pub fn self_dial_through(
    sandbox: &dyn oz0_core::Sandbox,
    probe: &str,
    work: &std::path::Path,
    spec_work: String,
    spec_data_dir: String,
) -> SelfDial {
    let req = oz0_policy::RunRequest {
        work: spec_work,
        data_dir: spec_data_dir,
        command: [
            probe,
            "sandbox",
            "probe",
            "--no-syscalls",
            "--self-dial",
            "--out",
            SELF_DIAL_REPORT,
        ]
        .map(String::from)
        .to_vec(),
        limits: oz0_policy::Limits {
            timeout_seconds: Some(30),
            ..Default::default()
        },
        ..Default::default()
    };
    let spec = match oz0_policy::RunSpec::new(req) {
        Ok(s) => s,
        Err(e) => return SelfDial::NoAnswer(format!("the test's run was refused: {e}")),
    };
    // Only this run's answer counts: none is there before it.
    let out = work.join(SELF_DIAL_REPORT);
    match std::fs::remove_file(&out) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return SelfDial::NoAnswer(format!("cannot clear {}: {e}", out.display())),
    }
    let opts = oz0_core::RunOptions::new(oz0_core::RunIo::quiet(), None);
    if let Err(e) = sandbox.run(&spec, opts) {
        return SelfDial::NoAnswer(format!("the test's run did not start: {e}"));
    }
    let report = std::fs::read_to_string(&out)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
    judge_self_dial(report.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn the_probes_answer_decides_the_route() {
        use serde_json::json;
        assert_eq!(
            judge_self_dial(Some(&json!({"self_dial": "ok"}))),
            SelfDial::Connected
        );
        for refused in ["WSAEACCES", "WSAECONNREFUSED", "WSAETIMEDOUT"] {
            assert_eq!(
                judge_self_dial(Some(&json!({ "self_dial": refused }))),
                SelfDial::Refused
            );
        }
        for none in [None, Some(json!({})), Some(json!({"self_dial": 1}))] {
            assert!(matches!(
                judge_self_dial(none.as_ref()),
                SelfDial::NoAnswer(_)
            ));
        }
    }
    use std::ffi::OsStr;

    #[test]
    fn the_variable_wins_and_the_test_is_not_run() {
        let calls = Cell::new(0);
        let dial = || {
            calls.set(calls.get() + 1);
            SelfDial::Refused
        };
        assert_eq!(
            decide_route(Some(OsStr::new("bridge")), dial),
            Ok(Route::Bridge)
        );
        assert_eq!(calls.get(), 0);
    }

    #[test]
    fn without_it_the_test_runs_once() {
        for (dial, want) in [
            (SelfDial::Connected, Ok(Route::Bridge)),
            (SelfDial::Refused, Ok(Route::Relay)),
            (
                SelfDial::NoAnswer("the test container did not start".into()),
                Err(RouteError::Undecided(
                    "the test container did not start".into(),
                )),
            ),
        ] {
            let calls = Cell::new(0);
            let got = decide_route(None, || {
                calls.set(calls.get() + 1);
                dial
            });
            assert_eq!(got, want);
            assert_eq!(calls.get(), 1);
        }
    }

    #[test]
    fn bad_values_are_refused_not_guessed() {
        let e = decide_route(Some(OsStr::new("Relay")), || SelfDial::Connected).unwrap_err();
        assert_eq!(e, RouteError::BadValue("Relay".into()));
        assert!(e.to_string().contains("neither bridge nor relay"));
        assert_eq!(
            parse_route_env(Some(OsStr::new(""))).unwrap_err(),
            RouteError::BadValue(String::new())
        );
        assert_eq!(Route::Relay.to_string(), "relay");
    }

    #[cfg(unix)]
    #[test]
    fn non_unicode_is_refused() {
        use std::os::unix::ffi::OsStrExt;
        let v = OsStr::from_bytes(b"rel\xffay");
        assert_eq!(parse_route_env(Some(v)), Err(RouteError::NotUnicode));
    }
}
