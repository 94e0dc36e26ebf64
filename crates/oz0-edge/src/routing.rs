//! What work needs, and which nodes may take it.
//!
//! Work carries the tier it needs. Every job an outside event starts
//! (a webhook, an event, a chat message) needs tier 1. A tool job is routed
//! by its plugin's manifest, which travels in its payload (never by what the
//! submitter says about isolation): a microVM tool needs tier 2 (a microVM
//! inside tier 1) and the `isolation.microvm=ready` label (of the image's
//! architecture, when the manifest names one); a command tool needs tier 1
//! (its server runs in the node's tier-1 sandbox); a container tool needs
//! `runtime.oci=ready`. Only a tool job has an isolation or tier 2. Nodes
//! poll one queue per tier and may poll only queues at or below the tier
//! the edge routes them at.

pub use crate::wire::{JobPayload, JobPayloadError};
use oz0_plugin::job::{ToolJob, ToolJobError};
use oz0_plugin::manifest::Isolation as ManifestIsolation;
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

/// A job as submitted. On the wire it is [`RawJobRequest`]: its kind and
/// payload sit beside the other fields (`"kind": "shell", "payload":
/// {...}`), and reading it reads the payload as its kind's type
/// ([`JobPayload::read`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawJobRequest", into = "RawJobRequest")]
pub struct JobRequest {
    /// Where it came from.
    pub origin: Origin,
    /// What it runs: a shell command, a tool call, a harness session.
    pub job: JobPayload,
    /// The tier asked for (raised to what the origin and isolation need).
    pub tier: u8,
    /// How the tool is isolated.
    pub isolation: Isolation,
    /// The image's architecture (microVM tools).
    pub arch: Option<String>,
    /// The submitter's key for this job: submitting the same request with
    /// the same key again returns the job queued the first time, never a
    /// second one (1-128 printable ASCII characters).
    pub idempotency_key: Option<String>,
}

impl JobRequest {
    /// A request for `job` from `origin`: its tier and isolation the
    /// edge's to decide, no idempotency key.
    pub fn new(origin: Origin, job: JobPayload) -> JobRequest {
        JobRequest {
            origin,
            job,
            tier: 0,
            isolation: Isolation::None,
            arch: None,
            idempotency_key: None,
        }
    }
}

/// A job request as it arrives, before its payload is read as its kind's
/// type: the edge refuses a payload that does not read with `bad_job`
/// (naming the field and the fix), and hashes this form (an idempotent
/// retry is the same request as sent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJobRequest {
    /// Where it came from.
    pub origin: Origin,
    /// What it runs.
    pub kind: JobKind,
    /// The tier asked for.
    #[serde(default)]
    pub tier: u8,
    /// How the tool is isolated.
    #[serde(default)]
    pub isolation: Isolation,
    /// The image's architecture.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    /// The kind's payload, as sent.
    #[serde(default)]
    pub payload: serde_json::Value,
    /// The submitter's key for this job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

impl TryFrom<RawJobRequest> for JobRequest {
    type Error = JobPayloadError;

    fn try_from(r: RawJobRequest) -> Result<JobRequest, JobPayloadError> {
        Ok(JobRequest {
            origin: r.origin,
            job: JobPayload::read(r.kind, &r.payload)?,
            tier: r.tier,
            isolation: r.isolation,
            arch: r.arch,
            idempotency_key: r.idempotency_key,
        })
    }
}

impl From<JobRequest> for RawJobRequest {
    fn from(r: JobRequest) -> RawJobRequest {
        RawJobRequest {
            origin: r.origin,
            kind: r.job.kind(),
            tier: r.tier,
            isolation: r.isolation,
            arch: r.arch,
            payload: r.job.payload(),
            idempotency_key: r.idempotency_key,
        }
    }
}

/// What a job needs of a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Needs {
    /// The tier (the queue it goes to).
    pub tier: u8,
    /// `isolation.microvm=ready`.
    pub microvm: bool,
    /// A Linux node's microVMs: a microVM tool with egress and no
    /// `command:`. The guest's bridge that carries its egress starts its
    /// server, so its node must know the image's entrypoint, which a Linux
    /// node reads from the registry (`runtime.oci`); a Mac's runtime runs
    /// the image's own only without a bridge.
    #[serde(default)]
    pub microvm_linux: bool,
    /// `runtime.oci=ready`.
    pub oci: bool,
    /// `runtime.oci` with gVisor: a container tool of a tenant that asks
    /// for it (`oz0-edge --oci-gvisor TENANT`).
    #[serde(default)]
    pub oci_gvisor: bool,
    /// `arch=…`.
    pub arch: Option<String>,
}

impl Needs {
    /// The microVM level a node must offer, as the store keeps it: 0 none,
    /// 1 a microVM, 2 a Linux node's (see `Sanitized::microvm_level`).
    pub fn microvm_level(&self) -> i64 {
        level(self.microvm, self.microvm_linux)
    }

    /// The needs of microVM level `level` (see [`Needs::microvm_level`]).
    pub fn with_microvm_level(mut self, level: i64) -> Needs {
        self.microvm = level >= 1;
        self.microvm_linux = level >= 2;
        self
    }

    /// The OCI level a node must offer, as the store keeps it: 0 none,
    /// 1 any runtime, 2 gVisor.
    pub fn oci_level(&self) -> i64 {
        level(self.oci, self.oci_gvisor)
    }

    /// The needs of level `level` (see [`Needs::oci_level`]).
    pub fn with_oci_level(mut self, level: i64) -> Needs {
        self.oci = level >= 1;
        self.oci_gvisor = level >= 2;
        self
    }
}

/// A need or an offer as the store keeps it, a level: 0 none, 1 `on`, 2
/// `on` and `more` (`more` counts only with `on`).
pub(crate) fn level(on: bool, more: bool) -> i64 {
    match (on, more) {
        (false, _) => 0,
        (true, false) => 1,
        (true, true) => 2,
    }
}

/// A job the edge will not take.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Isolation, an architecture or tier 2 on a job that is not a tool's.
    #[error("only a tool job has an isolation, an architecture or tier 2 (a microVM per tool server), and it takes them from its plugin's manifest: drop them from this {0} job")]
    NotATool(&'static str),
    /// The request says otherwise than the manifest.
    #[error("the request asks for {asked}, and the plugin's manifest says {manifest}: a tool job is routed by its manifest; drop the field or make it match")]
    NotTheManifests {
        /// What the request said.
        asked: String,
        /// What the manifest says.
        manifest: String,
    },
    /// Tier 2 for a tool that is not a microVM tool.
    #[error("tier 2 is a microVM per tool server: tool {0:?} does not declare isolation: microvm")]
    Tier2WithoutMicrovm(String),
    /// The tool job does not hold.
    #[error(transparent)]
    Tool(#[from] ToolJobError),
}

impl Isolation {
    fn name(self) -> &'static str {
        match self {
            Isolation::None => "no isolation of its own",
            Isolation::Container => "isolation: container",
            Isolation::Microvm => "isolation: microvm",
        }
    }
}

impl JobRequest {
    /// What the job needs: the asked tier, raised to 1 for outside events;
    /// for a tool job, what its manifest says (tier 2 and a microVM node
    /// for a microVM tool, tier 1 for a command tool, `runtime.oci` for a
    /// container tool).
    pub fn needs(&self) -> Result<Needs, NeedsError> {
        if self.tier > crate::sanitize::MAX_TIER {
            return Err(NeedsError::Tier(self.tier));
        }
        let mut tier = self.tier;
        if self.origin.is_outside() {
            tier = tier.max(1);
        }
        if let JobPayload::Tool(t) = &self.job {
            return self.tool_needs(t, tier);
        }
        if self.isolation != Isolation::None || self.arch.is_some() || self.tier == 2 {
            return Err(NeedsError::NotATool(self.job.kind().as_str()));
        }
        Ok(Needs {
            tier,
            microvm: false,
            microvm_linux: false,
            oci: false,
            oci_gvisor: false,
            arch: None,
        })
    }

    /// A tool job's needs, from the manifest in its payload.
    fn tool_needs(&self, t: &ToolJob, tier: u8) -> Result<Needs, NeedsError> {
        let job = t.check()?;
        let (isolation, arch) = match job.tool.isolation {
            ManifestIsolation::Microvm => (Isolation::Microvm, job.tool.arch.clone()),
            ManifestIsolation::Container => (Isolation::Container, None),
            ManifestIsolation::Sandbox => (Isolation::None, None),
        };
        if self.isolation != Isolation::None && self.isolation != isolation {
            return Err(NeedsError::NotTheManifests {
                asked: self.isolation.name().into(),
                manifest: isolation.name().into(),
            });
        }
        if let Some(a) = &self.arch {
            if !crate::sanitize::is_arch(a) {
                return Err(NeedsError::Arch(a.chars().take(32).collect()));
            }
            if arch.as_deref() != Some(a) {
                return Err(NeedsError::NotTheManifests {
                    asked: format!("arch {a}"),
                    manifest: arch.map_or("no arch".into(), |m| format!("arch {m}")),
                });
            }
        }
        let tier = match isolation {
            Isolation::Microvm => 2,
            _ if tier == 2 => return Err(NeedsError::Tier2WithoutMicrovm(job.tool.id)),
            // A command tool's server runs in the node's tier-1 sandbox,
            // and a container tool's in its image's root inside it.
            Isolation::None | Isolation::Container => tier.max(1),
        };
        // A microVM tool without `command:` runs its image's entrypoint
        // and cmd, which its node reads from the image's registry.
        let reads_image = isolation == Isolation::Microvm && job.tool.command.is_empty();
        Ok(Needs {
            tier,
            microvm: isolation == Isolation::Microvm,
            microvm_linux: reads_image && !job.tool.egress.is_empty(),
            oci: isolation == Isolation::Container || reads_image,
            oci_gvisor: false,
            arch,
        })
    }
}

/// A live node that fits a job but takes no work now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldBack {
    /// Its name, or its id when it has none (both strict patterns).
    pub node: String,
    /// It waits for an operator's approval (else it is drained).
    pub pending: bool,
}

impl Needs {
    /// Why no node of `tenant` takes this now, when the only live nodes
    /// that fit it (`held`, not empty) wait for approval or are drained:
    /// each with the operator's command that gives it work.
    pub fn held_back(&self, tenant: &str, held: &[HeldBack]) -> String {
        let each = held
            .iter()
            .map(|h| {
                if h.pending {
                    format!(
                        "{} waits for an operator's approval (oz0 node approve {})",
                        h.node, h.node
                    )
                } else {
                    format!("{} is drained (oz0 node undrain {})", h.node, h.node)
                }
            })
            .collect::<Vec<_>>()
            .join("; ");
        format!(
            "this job needs tier {}, and the only live node(s) of tenant {tenant} that could take it take no work now: {each}",
            self.tier
        )
    }

    /// Why no node of `tenant` can take this, in the edge's words, given
    /// what the tenant's live nodes offer (`(routed tier, microVM level,
    /// oci, arch)`).
    pub fn refusal(
        &self,
        tenant: &str,
        origin: Origin,
        nodes: &[(u8, i64, bool, Option<String>)],
    ) -> String {
        if self.microvm {
            let arch = self
                .arch
                .as_deref()
                .map(|a| format!(" for {a}"))
                .unwrap_or_default();
            if self.microvm_linux {
                let macs = nodes.iter().filter(|n| n.1 == 1).count();
                let macs = if macs > 0 {
                    format!(" ({macs} live microVM node(s) of the tenant are Macs, whose bridge starts only a command: it is given)")
                } else {
                    String::new()
                };
                return format!("this microVM tool has egress and no command:, so the bridge inside its VM that carries its egress starts its image's own entrypoint and cmd, which its node reads from the image's registry: it needs a Linux node routed at tier 2, labelled isolation.microvm=ready{arch} and runtime.oci=ready, and tenant {tenant} has none live{macs} (give the tool a command: in its manifest, or add a Linux node with KVM and --oci-registry naming its image's registry)");
            }
            if self.oci {
                return format!("this microVM tool runs only in a microVM, and has no command:, so its node reads its image's entrypoint and cmd from the image's registry: it needs a Linux node routed at tier 2, labelled isolation.microvm=ready{arch} and runtime.oci=ready, or a Mac whose Apple's container runs the image's own, and tenant {tenant} has none live (a Linux node offers microVMs only when its test VM booted inside tier 1, and reads images with --oci-registry naming their registry; or give the tool a command: in its manifest)");
            }
            return format!("this microVM tool runs only in a microVM: it needs a node labelled isolation.microvm=ready{arch}, and tenant {tenant} has none live (a Linux node offers microVMs only when its test VM booted inside tier 1, a Mac on Apple silicon with Apple's container 1.5.0 or later on macOS 26; oz0-node sandbox vm --probe says why one does not)");
        }
        if self.oci_gvisor {
            return format!("this container tool of tenant {tenant} runs only in gVisor (the edge's --oci-gvisor {tenant}): it needs a node whose runtime.oci offers gvisor at tier {} or higher, and the tenant has none live (a Linux node offers it with runsc installed, Debian's package, and its check passed: the node's log says why not)", self.tier);
        }
        if self.oci {
            return format!("this container tool runs in its image's root inside tier 1: it needs a node labelled runtime.oci=ready at tier {} or higher, and tenant {tenant} has none live (a Linux node offers it with a proven tier 1 and --oci-registry naming the registry its images come from; or declare isolation: microvm to run the tool in a microVM)", self.tier);
        }
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

    const DIGEST: &str = "0000000000000000000000000000000000000000000000000000000000000000";

    fn manifest(isolation: Isolation) -> String {
        match isolation {
            Isolation::Microvm => format!("tools:\n  - id: t\n    package: oci:example.invalid/t@sha256:{DIGEST}\n    isolation: microvm\n    arch: x86_64\n    command: [/srv/t]\n"),
            Isolation::Container => format!("tools:\n  - id: t\n    package: oci:example.invalid/t@sha256:{DIGEST}\n"),
            Isolation::None => "tools:\n  - id: t\n    command: [/usr/bin/t]\n".into(),
        }
    }

    /// A microVM tool without `command:` (the seed's example manifest).
    fn image_entrypoint() -> String {
        format!("tools:\n  - id: t\n    package: oci:example.invalid/t@sha256:{DIGEST}\n    isolation: microvm\n")
    }

    fn tool(manifest: &str) -> JobPayload {
        JobPayload::read(
            JobKind::Tool,
            &serde_json::json!({"manifest": manifest, "tool": "t"}),
        )
        .unwrap()
    }

    fn req(origin: Origin, isolation: Isolation) -> JobRequest {
        JobRequest::new(origin, tool(&manifest(isolation)))
    }

    fn shell(origin: Origin) -> JobRequest {
        JobRequest::new(
            origin,
            JobPayload::Shell(crate::wire::ShellJob {
                command: vec!["true".into()],
                ..Default::default()
            }),
        )
    }

    #[test]
    fn the_wire_is_kind_and_payload_as_before() {
        // What an operator's CLI of any version sends, and what a node of
        // any version reads: `kind` and `payload` beside the other fields.
        let sent = serde_json::json!({
            "origin": "webhook", "kind": "shell", "tier": 0, "isolation": "none",
            "payload": {"command": ["make", "test"], "env": {"A": "1"}},
            "idempotency_key": "k-1",
        });
        let r: JobRequest = serde_json::from_value(sent.clone()).unwrap();
        assert!(matches!(&r.job, JobPayload::Shell(s) if s.command == ["make", "test"]));
        assert_eq!(serde_json::to_value(&r).unwrap(), sent);
        for (bad, says) in [
            (
                serde_json::json!({"origin": "chat", "kind": "shell", "payload": {"argv": []}}),
                "unknown field `argv`",
            ),
            (
                serde_json::json!({"origin": "chat", "kind": "tool", "payload": {"tool": "t"}}),
                "missing field `manifest`",
            ),
            (
                serde_json::json!({"origin": "chat", "kind": "shell", "payload": {"command": ["x"]}, "extra": 1}),
                "unknown field `extra`",
            ),
            (
                serde_json::json!({"origin": "chat", "kind": "script", "payload": {}}),
                "unknown variant `script`",
            ),
        ] {
            let e = serde_json::from_value::<JobRequest>(bad)
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{e}");
        }
        // A harness session's payload is what was sent (the edge refuses
        // the kind at submit).
        let h: JobRequest =
            serde_json::from_value(serde_json::json!({"origin": "internal", "kind": "harness"}))
                .unwrap();
        assert_eq!(h.job, JobPayload::Harness(serde_json::Value::Null));
        let leased = serde_json::json!({
            "job_id": "j1", "lease_id": "l1", "lease_ms": 30000, "tier": 2,
            "origin": "internal", "kind": "tool", "attempt": 1,
            "payload": {"manifest": manifest(Isolation::Microvm), "tool": "t", "arguments": {}},
        });
        let l: crate::wire::LeasedJobView = serde_json::from_value(leased.clone()).unwrap();
        assert_eq!(l.job.kind(), JobKind::Tool);
        assert_eq!(serde_json::to_value(&l).unwrap(), leased);
    }

    #[test]
    fn outside_events_need_tier_one() {
        for o in [Origin::Webhook, Origin::Event, Origin::Chat] {
            assert_eq!(shell(o).needs().unwrap().tier, 1);
        }
        assert_eq!(shell(Origin::Internal).needs().unwrap().tier, 0);
    }

    #[test]
    fn a_tool_job_is_routed_by_its_manifest() {
        let n = req(Origin::Internal, Isolation::Microvm).needs().unwrap();
        assert!(n.microvm && n.tier == 2 && !n.oci, "{n:?}");
        assert_eq!(n.arch.as_deref(), Some("x86_64"));
        let n = req(Origin::Internal, Isolation::None).needs().unwrap();
        assert_eq!(
            (n.tier, n.microvm, n.oci),
            (1, false, false),
            "a command tool runs at tier 1"
        );
        let n = req(Origin::Internal, Isolation::Container).needs().unwrap();
        assert!(n.oci && !n.microvm && n.tier == 1, "{n:?}");
        // A microVM tool without a command: its node reads the image's
        // entrypoint from the registry.
        let n = JobRequest::new(Origin::Internal, tool(&image_entrypoint()))
            .needs()
            .unwrap();
        assert!(n.microvm && n.oci && n.tier == 2, "{n:?}");
        // What the submitter says must match the manifest.
        let mut r = req(Origin::Internal, Isolation::None);
        r.isolation = Isolation::Microvm;
        let e = r.needs().unwrap_err().to_string();
        assert!(
            e.contains("the plugin's manifest says no isolation of its own"),
            "{e}"
        );
        let mut r = req(Origin::Internal, Isolation::Microvm);
        r.isolation = Isolation::Microvm;
        r.arch = Some("x86_64".into());
        assert_eq!(r.needs().unwrap().tier, 2, "a matching request is fine");
        r.arch = Some("aarch64".into());
        assert!(matches!(r.needs(), Err(NeedsError::NotTheManifests { .. })));
        let mut r = req(Origin::Internal, Isolation::None);
        r.tier = 2;
        assert!(matches!(r.needs(), Err(NeedsError::Tier2WithoutMicrovm(_))));
        let r = JobRequest::new(
            Origin::Internal,
            tool("tools:\n  - id: t\n    isolaton: microvm\n"),
        );
        let e = r.needs().unwrap_err().to_string();
        assert!(e.contains("line 3") && e.contains("isolaton"), "{e}");
    }

    #[test]
    fn bad_requests_are_refused() {
        let mut r = shell(Origin::Internal);
        r.tier = 3;
        assert_eq!(r.needs(), Err(NeedsError::Tier(3)));
        for f in [
            |r: &mut JobRequest| r.tier = 2,
            |r: &mut JobRequest| r.arch = Some("x86_64".into()),
            |r: &mut JobRequest| r.isolation = Isolation::Microvm,
        ] {
            let mut r = shell(Origin::Internal);
            f(&mut r);
            assert_eq!(r.needs(), Err(NeedsError::NotATool("shell")));
        }
        let mut r = req(Origin::Internal, Isolation::Microvm);
        r.arch = Some("<x>".into());
        assert!(matches!(r.needs(), Err(NeedsError::Arch(_))));
    }

    #[test]
    fn refusals_name_what_is_missing() {
        let n = shell(Origin::Webhook).needs().unwrap();
        let why = n.refusal("acme", Origin::Webhook, &[(0, 0, false, None)]);
        assert!(why.contains("no node routed at tier 1"), "{why}");
        let n = req(Origin::Internal, Isolation::Microvm).needs().unwrap();
        let why = n.refusal("acme", Origin::Internal, &[(1, 0, false, None)]);
        assert!(
            why.contains("runs only in a microVM")
                && why.contains("isolation.microvm=ready for x86_64"),
            "{why}"
        );
        let n = req(Origin::Internal, Isolation::Container).needs().unwrap();
        let why = n.refusal("acme", Origin::Internal, &[(1, 0, false, None)]);
        assert!(
            why.contains("runtime.oci=ready") && why.contains("--oci-registry"),
            "{why}"
        );
        let n = JobRequest::new(Origin::Internal, tool(&image_entrypoint()))
            .needs()
            .unwrap();
        let why = n.refusal("acme", Origin::Internal, &[(2, 2, false, None)]);
        assert!(
            why.contains("isolation.microvm=ready and runtime.oci=ready")
                && why.contains("--oci-registry")
                && why.contains("command:"),
            "{why}"
        );
        assert!(is_tenant("acme") && !is_tenant("Acme") && !is_tenant("a/b"));
        let n = shell(Origin::Internal).needs().unwrap();
        let why = n.held_back(
            "acme",
            &[
                HeldBack {
                    node: "alpha".into(),
                    pending: true,
                },
                HeldBack {
                    node: "beta".into(),
                    pending: false,
                },
            ],
        );
        assert!(
            why.contains("alpha waits for an operator's approval (oz0 node approve alpha); beta is drained (oz0 node undrain beta)"),
            "{why}"
        );
    }
}
