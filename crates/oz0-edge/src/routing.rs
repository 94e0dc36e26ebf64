//! What work needs, and which nodes may take it.
//!
//! Work carries the tier it needs. Every job an outside event starts
//! (a webhook, an event, a chat message) needs tier 1; a microVM tool needs
//! tier 2 (a microVM inside tier 1) and the `isolation.microvm=ready` label
//! of the image's architecture; a container tool needs `runtime.oci=ready`.
//! Nodes poll one queue per tier and may poll only queues at or below the
//! tier the edge routes them at.

use serde::{Deserialize, Serialize};

/// Where a job came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// Started from inside (an operator, a schedule, another job).
    Internal,
    /// A webhook.
    Webhook,
    /// An outside event.
    Event,
    /// A chat message.
    Chat,
}

impl Origin {
    /// Outside events must be assumed hostile and need tier 1.
    pub fn is_outside(self) -> bool {
        !matches!(self, Origin::Internal)
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Internal => "internal",
            Origin::Webhook => "webhook",
            Origin::Event => "event",
            Origin::Chat => "chat",
        }
    }
}

/// What a job runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    /// A shell command an agent decided to run.
    Shell,
    /// A harness session.
    Harness,
    /// A plugin tool server.
    Tool,
}

impl JobKind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Shell => "shell",
            JobKind::Harness => "harness",
            JobKind::Tool => "tool",
        }
    }
}

/// How a tool is isolated (from its plugin manifest).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// The run's own tier.
    #[default]
    None,
    /// An OCI container: needs `runtime.oci=ready`.
    Container,
    /// A microVM: needs `isolation.microvm=ready` and the image's architecture.
    Microvm,
}

/// A job as submitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRequest {
    /// Where it came from.
    pub origin: Origin,
    /// What it runs.
    pub kind: JobKind,
    /// The tier asked for (raised to what the origin and isolation need).
    #[serde(default)]
    pub tier: u8,
    /// How the tool is isolated.
    #[serde(default)]
    pub isolation: Isolation,
    /// The image's architecture (microVM tools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    /// What the node gets; opaque to the edge.
    #[serde(default)]
    pub payload: serde_json::Value,
}

/// What a job needs of a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Needs {
    /// The tier (the queue it goes to).
    pub tier: u8,
    /// `isolation.microvm=ready`.
    pub microvm: bool,
    /// `runtime.oci=ready`.
    pub oci: bool,
    /// `arch=…`.
    pub arch: Option<String>,
}

/// A job the edge will not take.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NeedsError {
    /// Tier out of range.
    #[error("tier {0} does not exist: ask for tier 0, 1 or 2")]
    Tier(u8),
    /// Bad architecture.
    #[error("architecture {0:?} is not one the edge knows: use x86_64, aarch64, riscv64, armv7, i686, ppc64le or s390x")]
    Arch(String),
    /// Architecture without a microVM.
    #[error(
        "an architecture is asked for only with isolation: microvm (the image's architecture)"
    )]
    ArchWithoutMicrovm,
}

impl JobRequest {
    /// What the job needs: the asked tier, raised to 1 for outside events
    /// and to 2 for microVM tools.
    pub fn needs(&self) -> Result<Needs, NeedsError> {
        if self.tier > crate::sanitize::MAX_TIER {
            return Err(NeedsError::Tier(self.tier));
        }
        let mut tier = self.tier;
        if self.origin.is_outside() {
            tier = tier.max(1);
        }
        let microvm = self.isolation == Isolation::Microvm;
        if microvm {
            tier = 2;
        }
        if let Some(a) = &self.arch {
            if !microvm {
                return Err(NeedsError::ArchWithoutMicrovm);
            }
            if !crate::sanitize::is_arch(a) {
                return Err(NeedsError::Arch(a.chars().take(32).collect()));
            }
        }
        Ok(Needs {
            tier,
            microvm,
            oci: self.isolation == Isolation::Container,
            arch: self.arch.clone(),
        })
    }
}

impl Needs {
    /// Why no node of `tenant` can take this, in the edge's words, given
    /// what the tenant's live nodes offer (`(routed tier, microvm, oci, arch)`).
    pub fn refusal(
        &self,
        tenant: &str,
        origin: Origin,
        nodes: &[(u8, bool, bool, Option<String>)],
    ) -> String {
        let at_tier = nodes.iter().filter(|n| n.0 >= self.tier).count();
        if at_tier == 0 {
            let why = if origin.is_outside() && self.tier == 1 {
                format!(
                    "a {} starts work that needs tier 1, and tenant {tenant} has no node routed at tier 1 ({} live node(s), all routed at tier 0); add a Linux or macOS node whose self-test passed (Windows nodes are routed at tier 0)",
                    match origin {
                        Origin::Webhook => "webhook",
                        Origin::Event => "event",
                        Origin::Chat => "chat message",
                        Origin::Internal => "job",
                    },
                    nodes.len()
                )
            } else {
                format!("this job needs tier {}, and tenant {tenant} has no live node routed at tier {} or higher", self.tier, self.tier)
            };
            return why;
        }
        if self.microvm {
            let arch = self
                .arch
                .as_deref()
                .map(|a| format!(" for {a}"))
                .unwrap_or_default();
            return format!("this microVM tool needs a node labelled isolation.microvm=ready{arch}, and tenant {tenant} has none live");
        }
        if self.oci {
            return format!("this container tool needs a node labelled runtime.oci=ready at tier {} or higher, and tenant {tenant} has none live", self.tier);
        }
        format!("no live node of tenant {tenant} can take this job")
    }
}

/// `^[a-z0-9][a-z0-9_-]{0,62}$`: a tenant's name.
pub fn is_tenant(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=63).contains(&b.len())
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(origin: Origin, isolation: Isolation) -> JobRequest {
        JobRequest {
            origin,
            kind: JobKind::Tool,
            tier: 0,
            isolation,
            arch: None,
            payload: serde_json::Value::Null,
        }
    }

    #[test]
    fn outside_events_need_tier_one() {
        for o in [Origin::Webhook, Origin::Event, Origin::Chat] {
            assert_eq!(req(o, Isolation::None).needs().unwrap().tier, 1);
        }
        assert_eq!(
            req(Origin::Internal, Isolation::None).needs().unwrap().tier,
            0
        );
        let n = req(Origin::Internal, Isolation::Microvm).needs().unwrap();
        assert!(n.microvm && n.tier == 2);
        assert!(
            req(Origin::Internal, Isolation::Container)
                .needs()
                .unwrap()
                .oci
        );
    }

    #[test]
    fn bad_requests_are_refused() {
        let mut r = req(Origin::Internal, Isolation::None);
        r.tier = 3;
        assert_eq!(r.needs(), Err(NeedsError::Tier(3)));
        r.tier = 0;
        r.arch = Some("x86_64".into());
        assert_eq!(r.needs(), Err(NeedsError::ArchWithoutMicrovm));
        r.isolation = Isolation::Microvm;
        r.arch = Some("<x>".into());
        assert!(matches!(r.needs(), Err(NeedsError::Arch(_))));
    }

    #[test]
    fn refusal_names_tier_one_for_outside_events() {
        let n = req(Origin::Webhook, Isolation::None).needs().unwrap();
        let why = n.refusal("acme", Origin::Webhook, &[(0, false, false, None)]);
        assert!(why.contains("no node routed at tier 1"), "{why}");
        assert!(is_tenant("acme") && !is_tenant("Acme") && !is_tenant("a/b"));
    }
}
