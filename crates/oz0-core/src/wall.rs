//! What a platform says about its wall: the check and the self-test.

use oz0_policy::facts::{FixKind, Mechanism, Platform, Property};
use serde::Serialize;

/// What the system has, the tier it allows, and the fix.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// The tier this machine can have (1 only when every required
    /// mechanism is there); the self-test proves it.
    pub tier: u8,
    /// `Sandbox: tier N: …`.
    pub headline: String,
    /// The platform facts line.
    pub facts_line: String,
    /// The kind of fix, when something is missing.
    pub fix_kind: Option<FixKind>,
    /// `Fix: …`, when something is missing.
    pub fix: Option<String>,
    /// The OS, architecture and build, for the facts.
    #[serde(skip)]
    pub platform: Platform,
    /// The mechanism found, for the facts (its `kind` is what a passing
    /// self-test proves; the facts say `none` otherwise).
    #[serde(skip)]
    pub mechanism: Mechanism,
    /// The mechanism's name and version for the self-test's closing line
    /// (`bubblewrap 0.8.0`).
    #[serde(skip)]
    pub wall_name: String,
    /// Everything the probes found, for `--json`.
    #[serde(skip)]
    pub probe: serde_json::Value,
}

/// One self-test check's result.
#[derive(Debug, Clone, Serialize)]
pub struct Line {
    /// Which property.
    pub property: Property,
    /// Held or not.
    pub ok: bool,
    /// How long the check took.
    pub ms: u64,
    /// What it showed, or how it failed.
    pub detail: String,
}

impl Line {
    /// `Self-test PROPERTY: ok (MSms); detail` or `… failed (MSms): detail`.
    pub fn text(&self) -> String {
        let (word, sep) = if self.ok {
            ("ok", ';')
        } else {
            ("failed", ':')
        };
        format!(
            "Self-test {}: {word} ({}ms){sep} {}",
            self.property.as_str(),
            self.ms,
            self.detail
        )
    }
}

/// The whole self-test.
#[derive(Debug, Clone, Serialize)]
pub struct SelfTest {
    /// The checks run, in order.
    pub lines: Vec<Line>,
    /// The property that failed, if any.
    pub failed: Option<Property>,
    /// A fault was injected: the tier is 0 whatever the checks said.
    pub fault_injected: bool,
    /// Total time.
    pub total_ms: u64,
}

impl SelfTest {
    /// The tier the self-test proves.
    pub fn tier(&self) -> u8 {
        if self.failed.is_none() && !self.fault_injected && self.lines.len() == Property::ALL.len()
        {
            1
        } else {
            0
        }
    }

    /// The closing line; `wall` names the mechanism (`bubblewrap 0.8.0`).
    pub fn closing(&self, wall: &str) -> String {
        match (self.failed, self.fault_injected) {
            (_, true) => format!(
                "Sandbox: tier 0: a fault was injected into the self-test{}",
                self.failed
                    .map(|p| format!("; it failed at {}", p.as_str()))
                    .unwrap_or_default()
            ),
            (None, false) => format!(
                "Sandbox: tier 1: {wall} passed the node's self-test ({} checks, {}ms)",
                self.lines.len(),
                self.total_ms
            ),
            (Some(p), false) => format!(
                "Sandbox: tier 0: the self-test failed at {}: `oz0-node sandbox check --self-test` on this node says how",
                p.as_str()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_closing_words() {
        let ok = Line {
            property: Property::Launch,
            ok: true,
            ms: 12,
            detail: "pid 1".into(),
        };
        assert_eq!(ok.text(), "Self-test launch: ok (12ms); pid 1");
        let bad = Line {
            ok: false,
            ..ok.clone()
        };
        assert_eq!(bad.text(), "Self-test launch: failed (12ms): pid 1");
        let mut t = SelfTest {
            lines: vec![bad],
            failed: Some(Property::Launch),
            fault_injected: false,
            total_ms: 12,
        };
        assert_eq!(t.tier(), 0);
        assert!(t.closing("bwrap").contains("failed at launch"));
        t.failed = None;
        assert_eq!(t.tier(), 0, "one line of eight proves nothing");
        t.lines = Property::ALL
            .iter()
            .map(|p| Line {
                property: *p,
                ..ok.clone()
            })
            .collect();
        assert_eq!(t.tier(), 1);
        assert!(t
            .closing("bubblewrap 0.8.0")
            .starts_with("Sandbox: tier 1: bubblewrap 0.8.0 passed"));
        t.fault_injected = true;
        assert_eq!(t.tier(), 0, "a fault injected is never tier 1");
    }
}
