//! The stage protocol: what the launcher tells the stage (one sealed
//! memory file, [`StageConfig`], at `fds::CONFIG`) and what the stage tells
//! the launcher (one [`StageMessage`] per line, JSON, on the pipe at
//! `fds::STATUS`). Both ends use these types; nothing else crosses.
//!
//! The stage writes, in order: `started` as its first step; then either
//! `failed` (the sandbox could not be completed, the command never ran) or
//! `landlock` (what Landlock enforced), `bridge` when the run has egress,
//! and `not_executed` if the command could not be executed. Once the
//! command has ended, and only when no other process of the run is left,
//! it writes `alone` as its last line, and exits.

use std::io::Write;

use serde::{Deserialize, Serialize};

use crate::landlock::LandlockReport;
use crate::plan::LandlockRules;
use crate::seccomp::Profile;

/// What the launcher tells the stage.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageConfig {
    /// The command.
    pub argv: Vec<String>,
    /// Exactly its environment.
    pub env: Vec<(String, String)>,
    /// The run's policy file, written at `plan::POLICY_INSIDE`.
    pub policy: String,
    /// Landlock rules.
    pub landlock: LandlockRules,
    /// Landlock is not applied (a self-test fault only).
    pub landlock_off: bool,
    /// Seccomp profile.
    pub seccomp: Profile,
    /// No seccomp filter (a self-test fault only).
    pub seccomp_off: bool,
    /// The egress bridge, when the run has egress.
    pub bridge: Option<BridgeConfig>,
    /// Refuse new unix sockets to the command (and to the bridge, which
    /// needs none).
    pub deny_unix_sockets: bool,
    /// Placeholders (made by the node) to mount read-only before anything
    /// else.
    pub placeholders: Vec<crate::plan::Placeholder>,
    /// What bubblewrap must have mounted where (checked before anything
    /// else).
    pub expect: Vec<crate::plan::Expect>,
    /// Protected paths that exist, to bind onto themselves.
    pub holds: Vec<crate::plan::Hold>,
    /// Every mount point the run must have once the stage is done.
    pub mount_points: Vec<String>,
    /// The device nodes of the run's `/dev` (names under `/dev`).
    pub devices: Vec<String>,
    /// The size of the run's `/tmp` and `/dev`.
    pub tmp: crate::plan::TmpfsSize,
}

/// The in-sandbox bridge to the run's proxy socket.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BridgeConfig {
    /// The run's token, for the proxy variables.
    pub token: String,
}

impl std::fmt::Debug for BridgeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BridgeConfig { token: <redacted> }")
    }
}

/// One line the stage writes to the launcher.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum StageMessage {
    /// The stage started (bubblewrap built the sandbox and executed it).
    Started,
    /// What Landlock enforced.
    Landlock {
        /// The report.
        report: LandlockReport,
    },
    /// The egress bridge listens on this port of the run's loopback.
    Bridge {
        /// The port.
        port: u16,
    },
    /// The sandbox could not be completed: the command never ran.
    Failed {
        /// Why.
        reason: String,
    },
    /// The command could not be executed (127: not found, else 126).
    NotExecuted {
        /// The status.
        code: i32,
        /// Why.
        reason: String,
    },
    /// The command has ended and the stage, the init of the run's own pid
    /// namespace, has no child left: no process of the run is left but the
    /// stage, which exits next and starts nothing. The last line it writes.
    Alone,
}

impl StageMessage {
    /// Writes the message as one line.
    pub fn send(&self, to: &mut impl Write) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        line.push(b'\n');
        to.write_all(&line)
    }
}

/// Everything the stage said, gathered by the launcher.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct StageReport {
    /// The stage started.
    pub started: bool,
    /// The bridge's port.
    pub bridge_port: Option<u16>,
    /// What Landlock enforced.
    pub landlock: Option<LandlockReport>,
    /// Why the sandbox could not be completed.
    pub error: Option<String>,
    /// The command could not be executed: its status and why.
    pub not_executed: Option<(i32, String)>,
}

/// Whether the last line of `bytes` is [`StageMessage::Alone`]: the stage
/// has said that no process of the run is left but itself.
pub fn ends_alone(bytes: &[u8]) -> bool {
    let Some(body) = bytes.strip_suffix(b"\n") else {
        return false;
    };
    let last = body.rsplit(|b| *b == b'\n').next().unwrap_or(body);
    matches!(
        serde_json::from_slice::<StageMessage>(last),
        Ok(StageMessage::Alone)
    )
}

impl StageReport {
    /// Reads the stage's lines. A line that is not a message (the stage
    /// never writes one) is named as an error: the launcher then refuses
    /// to report the run as sandboxed.
    pub fn parse(bytes: &[u8]) -> StageReport {
        let mut r = StageReport::default();
        for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            match serde_json::from_slice::<StageMessage>(line) {
                Ok(StageMessage::Started) => r.started = true,
                Ok(StageMessage::Landlock { report }) => r.landlock = Some(report),
                Ok(StageMessage::Bridge { port }) => r.bridge_port = Some(port),
                Ok(StageMessage::Failed { reason }) => r.error = Some(reason),
                Ok(StageMessage::NotExecuted { code, reason }) => {
                    r.not_executed = Some((code, reason))
                }
                // Acted on as it comes (see [`ends_alone`]).
                Ok(StageMessage::Alone) => {}
                Err(e) => {
                    r.error.get_or_insert_with(|| {
                        format!("the stage wrote a line that is not a message ({e})")
                    });
                }
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(ms: &[StageMessage]) -> Vec<u8> {
        let mut out = Vec::new();
        for m in ms {
            m.send(&mut out).unwrap();
        }
        out
    }

    #[test]
    fn what_the_stage_sends_the_launcher_reads() {
        let landlock = LandlockReport {
            kernel_abi: 7,
            enforced: "full".into(),
        };
        let r = StageReport::parse(&wire(&[
            StageMessage::Started,
            StageMessage::Landlock {
                report: landlock.clone(),
            },
            StageMessage::Bridge { port: 40123 },
        ]));
        assert!(r.started && r.error.is_none() && r.not_executed.is_none());
        assert_eq!(r.landlock, Some(landlock));
        assert_eq!(r.bridge_port, Some(40123));

        let r = StageReport::parse(&wire(&[
            StageMessage::Started,
            StageMessage::Failed {
                reason: "seccomp: nope".into(),
            },
        ]));
        assert_eq!(r.error.as_deref(), Some("seccomp: nope"));

        let r = StageReport::parse(&wire(&[StageMessage::NotExecuted {
            code: 127,
            reason: "cannot execute \"x\": No such file".into(),
        }]));
        assert_eq!(r.not_executed.unwrap().0, 127);
        assert!(!StageReport::parse(b"").started);
    }

    #[test]
    fn the_launcher_sees_alone_only_as_the_last_whole_line() {
        let mut bytes = wire(&[StageMessage::Started, StageMessage::Alone]);
        assert!(ends_alone(&bytes));
        let r = StageReport::parse(&bytes);
        assert!(r.started && r.error.is_none(), "{r:?}");
        assert!(ends_alone(&wire(&[StageMessage::Alone])));
        bytes.pop();
        assert!(!ends_alone(&bytes), "a line not yet whole");
        assert!(!ends_alone(&wire(&[
            StageMessage::Alone,
            StageMessage::Started
        ])));
        assert!(!ends_alone(&wire(&[StageMessage::Started])));
        assert!(!ends_alone(b""));
        assert!(!ends_alone(b"\n"));
    }

    /// A line the stage never writes is not silently dropped.
    #[test]
    fn a_foreign_line_is_an_error() {
        let mut bytes = wire(&[StageMessage::Started]);
        bytes.extend_from_slice(b"S\n");
        let r = StageReport::parse(&bytes);
        assert!(r.error.unwrap().contains("not a message"));
    }
}
