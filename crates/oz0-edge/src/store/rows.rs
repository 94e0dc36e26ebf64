//! The records the store reads and writes (nodes, leased jobs, job states,
//! reports) and how a node row is read back.

use super::value::{int, opt_int, opt_text, text};
use super::{Row, StoreError};

/// A node as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRow {
    /// Id.
    pub id: String,
    /// Tenant.
    pub tenant: String,
    /// Public key (base64url).
    pub public_key: String,
    /// Name, when one matched the pattern.
    pub name: Option<String>,
    /// Registered at.
    pub registered_ms: i64,
    /// Last authenticated request.
    pub last_seen_ms: i64,
    /// Last facts report.
    pub last_report_ms: Option<i64>,
    /// Sanitized facts (JSON).
    pub facts: Option<String>,
    /// Routed tier.
    pub tier_routed: u8,
    /// MicroVMs (`isolation.microvm=ready`): 0 none, 1 without egress (a
    /// Mac's), 2 with egress (see `Sanitized::microvm_level`).
    pub microvm_level: i64,
    /// `runtime.oci`: 0 none, 1 ready, 2 ready with gVisor.
    pub oci_level: i64,
    /// Architecture ('' when unknown).
    pub arch: String,
    /// Reports accepted.
    pub reports: i64,
    /// Fields dropped from the last report.
    pub dropped_last: i64,
    /// Fields dropped, all reports.
    pub dropped_total: i64,
    /// An operator approved it (or its tenant asks for no approval).
    pub approved: bool,
    /// Drained: it takes no new work.
    pub drained: bool,
    /// When an operator removed it (its key is refused from then on).
    pub removed_ms: Option<i64>,
    /// When a held request of its broke with nothing from it since (its
    /// next request clears it).
    pub gone_ms: Option<i64>,
}

impl NodeRow {
    /// Whether it may poll the tier-`tier` queue: its routed tier and
    /// those below, and tier 2 (microVM tools) wherever it offers
    /// microVMs, as a Mac does whatever tier it proved (Apple's container
    /// is not inside tier 1: the guest's kernel is the boundary).
    pub fn polls(&self, tier: u8) -> bool {
        tier <= self.tier_routed || (tier == 2 && self.microvm_level >= 1)
    }

    /// The tier it takes work at: its routed tier, or 0 while it waits
    /// for approval (when it takes no work at all).
    pub fn tier_taken(&self) -> u8 {
        if self.approved {
            self.tier_routed
        } else {
            0
        }
    }
}

pub(super) const NODE_COLS: &str = "id, tenant, public_key, name, registered_ms, last_seen_ms, last_report_ms, facts, tier_routed, microvm_ready, oci_ready, arch, reports, dropped_last, dropped_total, approved, drained, removed_ms, gone_ms";

pub(super) fn node_row(r: &Row) -> Result<NodeRow, StoreError> {
    Ok(NodeRow {
        id: text(r, 0)?,
        tenant: text(r, 1)?,
        public_key: text(r, 2)?,
        name: opt_text(r, 3)?,
        registered_ms: int(r, 4)?,
        last_seen_ms: int(r, 5)?,
        last_report_ms: opt_int(r, 6)?,
        facts: opt_text(r, 7)?,
        tier_routed: u8::try_from(int(r, 8)?).map_err(|_| StoreError::Column(8))?,
        microvm_level: int(r, 9)?,
        oci_level: int(r, 10)?,
        arch: text(r, 11)?,
        reports: int(r, 12)?,
        dropped_last: int(r, 13)?,
        dropped_total: int(r, 14)?,
        approved: int(r, 15)? != 0,
        drained: int(r, 16)? != 0,
        removed_ms: opt_int(r, 17)?,
        gone_ms: opt_int(r, 18)?,
    })
}

/// A job handed to a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeasedJob {
    /// Job id.
    pub id: String,
    /// Origin.
    pub origin: String,
    /// Kind.
    pub kind: String,
    /// Tier needed.
    pub tier: u8,
    /// Payload (JSON text).
    pub payload: String,
    /// How many times it was handed out, this one included.
    pub attempts: i64,
    /// A container tool that runs only in gVisor.
    pub gvisor: bool,
}

/// A job's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRow {
    /// Job id.
    pub id: String,
    /// Tenant.
    pub tenant: String,
    /// `shell`, `harness` or `tool`.
    pub kind: String,
    /// `queued`, `leased`, `succeeded`, `failed` or `cancelled`.
    pub state: String,
    /// Tier needed.
    pub tier: u8,
    /// The node holding or having held it.
    pub node_id: Option<String>,
    /// Lease expiry.
    pub lease_until_ms: Option<i64>,
    /// Times handed out.
    pub attempts: i64,
    /// Exit code reported.
    pub exit_code: Option<i64>,
    /// A tool job's result (JSON text).
    pub result: Option<String>,
    /// Why it failed or was cancelled.
    pub error: Option<String>,
    /// Submitted.
    pub enqueued_ms: i64,
    /// Last handed out.
    pub leased_ms: Option<i64>,
    /// Ended.
    pub done_ms: Option<i64>,
    /// Where it came from.
    pub origin: String,
    /// Times it may be handed out.
    pub max_attempts: i64,
    /// Bytes its command wrote to stdout (the tail kept is bounded).
    pub stdout_bytes: Option<i64>,
    /// Bytes it wrote to stderr.
    pub stderr_bytes: Option<i64>,
    /// What the look after the run found (JSON text).
    pub look: Option<String>,
}

/// A job's end, as a node reports it (already checked against the bounds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEnd<'a> {
    /// Whether it succeeded.
    pub succeeded: bool,
    /// Its exit status.
    pub exit_code: Option<i64>,
    /// A tool job's result (JSON text).
    pub result: Option<&'a str>,
    /// Why it failed.
    pub error: Option<&'a str>,
    /// The end of its stdout.
    pub stdout_tail: Option<&'a str>,
    /// The end of its stderr.
    pub stderr_tail: Option<&'a str>,
    /// Bytes written to stdout in all.
    pub stdout_bytes: Option<i64>,
    /// Bytes written to stderr in all.
    pub stderr_bytes: Option<i64>,
    /// What the look after the run found (JSON text).
    pub look: Option<&'a str>,
}

/// A report to save.
#[derive(Debug, Clone)]
pub struct Report<'a> {
    /// Node id.
    pub node: &'a str,
    /// Sanitized facts (JSON).
    pub facts_json: String,
    /// Routed tier.
    pub tier_routed: u8,
    /// MicroVMs: 0 none, 1 without egress, 2 with egress.
    pub microvm_level: i64,
    /// `runtime.oci`: 0 none, 1 ready, 2 ready with gVisor.
    pub oci_level: i64,
    /// Labels.
    pub arch: &'a str,
    /// Fields dropped.
    pub dropped: i64,
    /// When.
    pub now_ms: i64,
    /// A Windows node's PSEC: its contract when the probe found it, `""`
    /// when not; None on other platforms.
    pub psec: Option<&'a str>,
    /// The OS build or kernel release, when it passed its pattern.
    pub build: Option<&'a str>,
}

/// What registering a key did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registration {
    /// A new node.
    New(NodeRow),
    /// The key's node was registered before.
    Known(NodeRow),
    /// The name belongs to another node of the tenant (its id).
    NameTaken(String),
}

/// What an operator decides of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeChange {
    /// It may take work above tier 0.
    Approve,
    /// It takes no new work (true), or does again (false).
    Drain(bool),
    /// It takes no new work, and the jobs it still runs at this time
    /// (Unix ms) go back to their queues.
    DrainBy(i64),
    /// Removed: its key is refused for good.
    Remove,
}
