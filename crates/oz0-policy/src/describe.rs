//! What a run is told of its wall, the same way on every platform and tier:
//! the variable [`SANDBOX_VAR`] in its environment
//! (`tier=1;wall=bubblewrap;policy=/tmp/.oz0-sandbox.json`) and, where the
//! wall gives it a private folder, a small policy file there saying what is
//! readable, writable and reachable.
//!
//! A refusal reads differently on each platform (a path absent, `Operation
//! not permitted`, `Access is denied`), and a run without a wall gets no
//! sign at all; this description lets a program, or a model planning its
//! next step, know which it is before it tries.
//!
//! The description is the node's, made from the run's spec; the run may
//! change its own copy of the file and fool only itself. It is no secret:
//! it names paths the run was given and nothing of the node.

use serde::Serialize;

use crate::RunSpec;

/// The variable every run is given. The only `OZ0_` variable a run ever
/// sees: a caller cannot name it (every `OZ0_` name is refused).
pub const SANDBOX_VAR: &str = "OZ0_SANDBOX";

/// The policy file's name, in the run's private temporary folder.
pub const POLICY_NAME: &str = ".oz0-sandbox.json";

/// [`SANDBOX_VAR`]'s value in a run without a wall (tier 0): it has no
/// private folder for a policy file, and may do all the node's user may.
pub const NO_WALL_VALUE: &str = "tier=0;wall=none";

/// [`SANDBOX_VAR`]'s value in a microVM: the guest's kernel is the wall,
/// and the guest's own `/tmp` holds no policy file.
pub const MICROVM_VALUE: &str = "tier=2;wall=microvm";

/// Where the node user's secrets live under its home. A wall that hides
/// the home makes each of these answer `Permission denied` (not "no such
/// file"), so that a run reading one learns it was refused.
pub const HOME_SECRETS: &[&str] = &[
    ".aws",
    ".azure",
    ".cargo",
    ".config",
    ".docker",
    ".git-credentials",
    ".gnupg",
    ".kube",
    ".local",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".ssh",
];

/// A run's wall, as the run is told.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Description {
    /// The tier: 0 no wall, 1 an OS sandbox, 2 a microVM.
    pub tier: u8,
    /// The wall: `bubblewrap`, `bubblewrap-image`, `gvisor`, `microvm`,
    /// `seatbelt`, `psec`, or `none`.
    pub wall: &'static str,
    /// What the run sees of the host's system: `read-only`, or an image's
    /// root instead (`the image's, read-only`, and behind gVisor's kernel).
    pub system: &'static str,
    /// Its `HOME`.
    pub home: String,
    /// Folders it may read beyond the system (its work folder first).
    pub read: Vec<String>,
    /// Folders it may write (its work folder first, then its temporary
    /// folder).
    pub write: Vec<String>,
    /// Where it may connect: `host:port` patterns through the node's proxy
    /// (the proxy variables are set), or `none`.
    pub network: Vec<String>,
    /// Paths that answer `Permission denied`, so that a refusal is not
    /// read as absence (the node user's secrets under its home).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<String>,
}

impl Description {
    /// A run behind a wall, from its spec: `work` is where it sees its work
    /// folder, `tmp` its private temporary folder (also its `HOME`).
    pub fn walled(tier: u8, wall: &'static str, spec: &RunSpec, work: &str, tmp: &str) -> Self {
        let mut read = vec![work.to_string()];
        read.extend(spec.read.iter().map(|p| p.as_str().to_string()));
        let mut write = vec![work.to_string()];
        write.extend(spec.write.iter().map(|p| p.as_str().to_string()));
        write.push(tmp.to_string());
        let mut network: Vec<String> = spec.egress.allow.iter().map(|a| a.to_string()).collect();
        network.extend(
            spec.egress
                .forward
                .iter()
                .map(|p| format!("localhost:{p} (the node's)")),
        );
        if network.is_empty() {
            network.push("none".into());
        }
        Description {
            tier,
            wall,
            system: "read-only",
            home: tmp.to_string(),
            read,
            write,
            network,
            refused: Vec::new(),
        }
    }

    /// The value of [`SANDBOX_VAR`]: `tier=…;wall=…`, and `;policy=PATH`
    /// when the run has the policy file at `policy`.
    pub fn var(&self, policy: Option<&str>) -> String {
        let mut v = format!("tier={};wall={}", self.tier, self.wall);
        if let Some(p) = policy {
            v.push_str(";policy=");
            v.push_str(p);
        }
        v
    }

    /// The policy file's text: this description as one JSON document.
    pub fn policy(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("a description serialises");
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Limits, RunRequest};

    fn spec(allow: Vec<String>) -> RunSpec {
        RunSpec::new(RunRequest {
            work: "/w".into(),
            read: vec!["/r".into()],
            write: vec![],
            env: vec![],
            allow,
            forward: vec![],
            limits: Limits::default(),
            data_dir: "/d".into(),
            allow_unix_sockets: false,
            command: vec!["true".into()],
        })
        .unwrap()
    }

    #[test]
    fn a_run_is_told_its_tier_wall_and_what_it_may_touch() {
        let d = Description::walled(1, "bubblewrap", &spec(vec![]), "/w", "/tmp");
        assert_eq!(
            d.var(Some("/tmp/.oz0-sandbox.json")),
            "tier=1;wall=bubblewrap;policy=/tmp/.oz0-sandbox.json"
        );
        let p: serde_json::Value = serde_json::from_str(&d.policy()).unwrap();
        assert_eq!(p["tier"], 1);
        assert_eq!(p["read"], serde_json::json!(["/w", "/r"]));
        assert_eq!(p["write"], serde_json::json!(["/w", "/tmp"]));
        assert_eq!(p["network"], serde_json::json!(["none"]));
        let d = Description::walled(
            1,
            "bubblewrap",
            &spec(vec!["api.example.com".into()]),
            "/w",
            "/tmp",
        );
        assert_eq!(d.network, ["api.example.com"]);
        assert_eq!(NO_WALL_VALUE, "tier=0;wall=none");
    }
}
