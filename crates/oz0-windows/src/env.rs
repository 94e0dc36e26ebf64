//! A PSEC run's environment: exactly the caller's variables, what Windows
//! programs need (`SystemRoot`, a system `PATH` when none is given, `TEMP`
//! and `TMP` in the run's own folder), and the proxy's variables carrying the
//! run's token. Never the node's own environment, never an `OZ0_` variable.
//!
//! Windows compares variable names case-insensitively, so every rule here
//! does too. The native API takes UTF-16; a value that is not Unicode is
//! refused, never converted lossily. An empty list is never handed to
//! `CreateProcessW` as a null block (which would inherit the node's whole
//! environment): [`environment_block`] always writes an explicit block, and
//! the list always holds at least `SystemRoot`.

use std::ffi::OsString;
use std::fmt;

use oz0_policy::env::NODE_PREFIX;
use oz0_policy::EnvVar;
use serde::Serialize;

use crate::winpath::WinPath;

/// Variables the sandbox sets itself on Windows; a caller naming one (in any case) is refused.
pub const SANDBOX_SET: &[&str] = &["SystemRoot", "TEMP", "TMP"];

/// Proxy variables set when the run has egress. Upper case only: on Windows
/// `http_proxy` is the same variable.
pub const PROXY_VARS: &[&str] = &["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"];

/// Names refused from callers because the proxy's set them (any case).
const PROXY_NAMES_ANY_CASE: &[&str] = &["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"];

/// The token the proxy wants from this run. `Debug` never prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct ProxyToken(String);

impl ProxyToken {
    /// A token of 16 to 256 URL-safe characters (`A-Za-z0-9._~-`), so that it
    /// sits in a proxy URL's user-info without escaping.
    pub fn new(s: &str) -> Result<Self, WinEnvError> {
        let ok = (16..=256).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-'));
        if ok {
            Ok(ProxyToken(s.to_string()))
        } else {
            Err(WinEnvError::BadToken(s.len()))
        }
    }

    /// The token.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ProxyToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ProxyToken(<{} chars>)", self.0.len())
    }
}

/// Why an environment was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WinEnvError {
    /// Not Unicode.
    #[error("the environment variable {0:?} has a name or value that is not valid Unicode; Windows' PSEC takes Unicode only, and we never convert lossily: fix or drop it")]
    NotUnicode(String),
    /// Not valid as a variable.
    #[error("--env: {0}")]
    Policy(#[from] oz0_policy::env::EnvError),
    /// Two names that Windows sees as one.
    #[error("{0} and {1} are the same variable on Windows (names ignore case): name it once")]
    SameIgnoringCase(String, String),
    /// A variable the sandbox sets.
    #[error("{0} is set by the sandbox itself on Windows (SystemRoot, TEMP, TMP), so a caller may not set it")]
    SandboxSet(String),
    /// A proxy variable in another case.
    #[error(
        "{0} is set by the sandbox when the run has egress (--allow/--forward): do not set it"
    )]
    ProxyVariable(String),
    /// A node variable (re-checked here, case-insensitively, for values from the OS).
    #[error("{0} is one of the node's own variables (OZ0_*), which never reach a run")]
    NodeVariable(String),
    /// A malformed token.
    #[error("the run's proxy token ({0} characters) must be 16 to 256 characters of A-Z a-z 0-9 . _ ~ -")]
    BadToken(usize),
    /// A value from the system (UTF-16) that is not Unicode.
    #[error("a value Windows returned ({0}) is not valid UTF-16 (an unpaired surrogate): refusing rather than converting it lossily")]
    BadUtf16(&'static str),
}

/// Turns `(name, value)` pairs from the OS into variables, refusing any that
/// are not Unicode (on Windows, an unpaired surrogate) — never converting lossily.
pub fn caller_env_from_os<I>(pairs: I) -> Result<Vec<EnvVar>, WinEnvError>
where
    I: IntoIterator<Item = (OsString, OsString)>,
{
    pairs
        .into_iter()
        .map(|(n, v)| {
            let name = n
                .to_str()
                .ok_or_else(|| WinEnvError::NotUnicode(n.to_string_lossy().into_owned()))?;
            let value = v
                .to_str()
                .ok_or_else(|| WinEnvError::NotUnicode(name.to_string()))?;
            Ok(EnvVar::new(name, value)?)
        })
        .collect()
}

/// Decodes a UTF-16 value Windows returned, strictly.
pub fn from_wide(what: &'static str, units: &[u16]) -> Result<String, WinEnvError> {
    String::from_utf16(units).map_err(|_| WinEnvError::BadUtf16(what))
}

/// The system `PATH` a run gets when its caller names none.
pub fn system_path(system_root: &WinPath) -> String {
    let r = system_root.as_str();
    format!("{r}\\system32;{r};{r}\\System32\\Wbem;{r}\\System32\\WindowsPowerShell\\v1.0\\")
}

/// The proxy URL with the run's token, as programs read it from `HTTP_PROXY`.
pub fn proxy_url_with_token(port: u16, token: &ProxyToken) -> String {
    format!("http://oz0:{}@127.0.0.1:{port}", token.expose())
}

/// One variable of the run's environment. `Debug` hides the value.
#[derive(Clone, PartialEq, Eq, Serialize)]
pub struct WinVar {
    /// Name.
    pub name: String,
    /// Value.
    pub value: String,
}

impl fmt::Debug for WinVar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}=<{} bytes>", self.name, self.value.len())
    }
}

/// Builds the run's environment, sorted as `CreateProcessW` wants
/// (case-insensitively by name). Never empty: `SystemRoot` is always there.
pub fn windows_env(
    caller: &[EnvVar],
    system_root: &WinPath,
    temp: &WinPath,
    proxy: Option<(u16, &ProxyToken)>,
) -> Result<Vec<WinVar>, WinEnvError> {
    let mut out: Vec<WinVar> = Vec::with_capacity(caller.len() + 8);
    for v in caller {
        let name = v.name.as_str();
        let upper = name.to_ascii_uppercase();
        if upper.starts_with(NODE_PREFIX) {
            return Err(WinEnvError::NodeVariable(name.to_string()));
        }
        if let Some(s) = SANDBOX_SET.iter().find(|s| s.eq_ignore_ascii_case(name)) {
            let _ = s;
            return Err(WinEnvError::SandboxSet(name.to_string()));
        }
        if PROXY_NAMES_ANY_CASE.contains(&upper.as_str()) {
            return Err(WinEnvError::ProxyVariable(name.to_string()));
        }
        if let Some(prev) = out.iter().find(|w| w.name.eq_ignore_ascii_case(name)) {
            return Err(WinEnvError::SameIgnoringCase(
                prev.name.clone(),
                name.to_string(),
            ));
        }
        out.push(WinVar {
            name: name.to_string(),
            value: v.value.clone(),
        });
    }
    let mut set = |name: &str, value: String| {
        out.push(WinVar {
            name: name.to_string(),
            value,
        })
    };
    set("SystemRoot", system_root.as_str().to_string());
    set("TEMP", temp.as_str().to_string());
    set("TMP", temp.as_str().to_string());
    if !caller
        .iter()
        .any(|v| v.name.as_str().eq_ignore_ascii_case("PATH"))
    {
        set("PATH", system_path(system_root));
    }
    if let Some((port, token)) = proxy {
        let url = proxy_url_with_token(port, token);
        for name in PROXY_VARS {
            set(name, url.clone());
        }
    }
    sort(&mut out);
    Ok(out)
}

/// Adds `OZ0_SANDBOX` (what the run runs behind) to `env`, keeping it
/// sorted as [`windows_env`] sorts it. No caller names it: every `OZ0_`
/// name is refused.
pub fn tell_wall(env: &mut Vec<WinVar>, value: &str) {
    env.push(WinVar {
        name: oz0_policy::describe::SANDBOX_VAR.into(),
        value: value.into(),
    });
    sort(env);
}

/// Sorted as `CreateProcessW` wants: case-insensitively by name.
fn sort(env: &mut [WinVar]) {
    env.sort_by(|a, b| {
        a.name
            .to_uppercase()
            .cmp(&b.name.to_uppercase())
            .then(a.name.cmp(&b.name))
    });
}

/// The UTF-16 block for `CreateProcessW` with `CREATE_UNICODE_ENVIRONMENT`:
/// `NAME=VALUE\0` each, then `\0`. An empty list gives the explicit empty block
/// `\0\0`, never a null pointer (which would inherit the node's environment).
pub fn environment_block(vars: &[WinVar]) -> Vec<u16> {
    let mut block: Vec<u16> = Vec::new();
    for v in vars {
        block.extend(v.name.encode_utf16());
        block.push(u16::from(b'='));
        block.extend(v.value.encode_utf16());
        block.push(0);
    }
    if block.is_empty() {
        block.push(0);
    }
    block.push(0);
    block
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> WinPath {
        WinPath::parse("C:\\Windows").unwrap()
    }
    fn temp() -> WinPath {
        WinPath::parse("C:\\oz0-runs\\r1\\temp").unwrap()
    }
    fn var(n: &str, v: &str) -> EnvVar {
        EnvVar::new(n, v).unwrap()
    }
    fn names(vars: &[WinVar]) -> Vec<&str> {
        vars.iter().map(|v| v.name.as_str()).collect()
    }

    #[test]
    fn empty_caller_env_gets_what_windows_needs_and_no_more() {
        let env = windows_env(&[], &root(), &temp(), None).unwrap();
        assert_eq!(names(&env), ["PATH", "SystemRoot", "TEMP", "TMP"]);
        assert_eq!(
            env[0].value,
            "C:\\Windows\\system32;C:\\Windows;C:\\Windows\\System32\\Wbem;C:\\Windows\\System32\\WindowsPowerShell\\v1.0\\"
        );
    }

    #[test]
    fn callers_path_wins_and_proxy_vars_carry_the_token() {
        let token = ProxyToken::new("tok_0123456789abcdef").unwrap();
        let env = windows_env(
            &[var("Path", "C:\\tools"), var("LANG", "C")],
            &root(),
            &temp(),
            Some((47331, &token)),
        )
        .unwrap();
        assert_eq!(
            names(&env),
            [
                "ALL_PROXY",
                "HTTPS_PROXY",
                "HTTP_PROXY",
                "LANG",
                "Path",
                "SystemRoot",
                "TEMP",
                "TMP"
            ]
        );
        assert_eq!(env[4].value, "C:\\tools");
        assert_eq!(
            env[2].value,
            "http://oz0:tok_0123456789abcdef@127.0.0.1:47331"
        );
        assert!(!format!("{env:?}").contains("tok_0123"));
        assert!(!format!("{token:?}").contains("tok_0123"));
    }

    #[test]
    fn refusals_ignore_case() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[("systemroot", "D:\\evil")], "set by the sandbox"),
            (&[("Temp", "C:\\x")], "set by the sandbox"),
            (
                &[("Http_Proxy", "http://x")],
                "set by the sandbox when the run has egress",
            ),
            (
                &[("No_Proxy", "*")],
                "set by the sandbox when the run has egress",
            ),
            (&[("Foo", "1"), ("FOO", "2")], "same variable on Windows"),
        ];
        for (vars, want) in cases {
            let vars: Vec<_> = vars.iter().map(|(n, v)| var(n, v)).collect();
            let e = windows_env(&vars, &root(), &temp(), None)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{vars:?}: {e}");
        }
    }

    #[test]
    fn node_variables_never_arrive_even_from_the_os() {
        let e =
            caller_env_from_os([(OsString::from("Oz0_Token"), OsString::from("x"))]).unwrap_err();
        assert!(e.to_string().contains("OZ0_"), "{e}");
    }

    #[cfg(unix)]
    #[test]
    fn non_unicode_is_refused_not_converted() {
        use std::os::unix::ffi::OsStringExt;
        let bad = OsString::from_vec(b"caf\xe9".to_vec());
        let e = caller_env_from_os([(OsString::from("A"), bad.clone())]).unwrap_err();
        assert_eq!(e, WinEnvError::NotUnicode("A".into()));
        let e = caller_env_from_os([(bad, OsString::from("v"))]).unwrap_err();
        assert!(matches!(e, WinEnvError::NotUnicode(_)));
    }

    #[test]
    fn utf16_from_windows_is_strict() {
        let ok: Vec<u16> = "C:\\Windows".encode_utf16().collect();
        assert_eq!(from_wide("system root", &ok).unwrap(), "C:\\Windows");
        let lone_surrogate = [0x43, 0xD800, 0x44];
        assert_eq!(
            from_wide("system root", &lone_surrogate),
            Err(WinEnvError::BadUtf16("system root"))
        );
    }

    #[test]
    fn blocks_are_explicit_even_when_empty() {
        assert_eq!(environment_block(&[]), vec![0, 0]);
        let b = environment_block(&[WinVar {
            name: "A".into(),
            value: "é".into(),
        }]);
        assert_eq!(b, vec![u16::from(b'A'), u16::from(b'='), 0xE9, 0, 0]);
    }

    #[test]
    fn tokens_are_checked() {
        assert!(ProxyToken::new("short").is_err());
        assert!(ProxyToken::new("has space in it 123456").is_err());
        assert!(ProxyToken::new("with@at0123456789abc").is_err());
    }
}
