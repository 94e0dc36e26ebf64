//! The API's request and response bodies, shared by the edge and its clients.

use serde::{Deserialize, Serialize};

use crate::sanitize::Sanitized;

/// An API error: a status, a stable code and the edge's reason.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    #[serde(skip, default = "default_status")]
    pub status: u16,
    /// Stable code (`no_eligible_node`, `tier_not_routed`, `lease_lost`, …).
    pub error: String,
    /// Why, in the edge's words.
    pub reason: String,
}

pub(crate) fn default_status() -> u16 {
    500
}

/// A registration.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    /// The tenant.
    pub tenant: String,
    /// The node's ed25519 public key (base64url).
    pub public_key: String,
    /// A host name for display (dropped unless it matches `^[a-z0-9][a-z0-9.-]{0,62}$`).
    #[serde(default)]
    pub name: Option<String>,
}

/// A key rotation, signed by the node's current key.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RotateRequest {
    /// The new ed25519 public key (base64url).
    pub public_key: String,
    /// The new key's signature over [`crate::auth::rotation_message`].
    pub proof: String,
}

/// The answer to a registration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Registered {
    /// The node's id.
    pub node_id: String,
    /// Its tenant.
    pub tenant: String,
}

/// How the edge sees one node.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct NodeView {
    /// Id.
    pub id: String,
    /// Tenant.
    pub tenant: String,
    /// Name, when it matched the host name pattern.
    pub name: Option<String>,
    /// Tier proven (as the edge accepts it).
    pub tier_proven: u8,
    /// Tier routed (the edge's decision).
    pub tier_routed: u8,
    /// `tier 1 proven, routed at 1`.
    pub tier_line: String,
    /// `linux x86_64 6.1.0-28-amd64`.
    pub platform_line: String,
    /// `bubblewrap 0.8.0, Landlock ABI 7, seccomp, cgroup v2`.
    pub mechanism_line: String,
    /// The fix, in the edge's words.
    pub fix: Option<String>,
    /// The `MicroVMs` line.
    pub microvm_line: String,
    /// The `Containers` line (`runtime.oci`).
    #[serde(default)]
    pub containers_line: String,
    /// Why routed lower than claimed (or waiting for approval).
    pub routed_note: Option<String>,
    /// `up`, `down` (not heard from within the liveness window),
    /// `draining`, `pending approval` or `removed`.
    #[serde(default)]
    pub state: String,
    /// Heard from within the liveness window.
    #[serde(default)]
    pub up: bool,
    /// An operator approved it (or its tenant asks for no approval).
    #[serde(default)]
    pub approved: bool,
    /// Drained: it takes no new work.
    #[serde(default)]
    pub drained: bool,
    /// Last request, UTC.
    #[serde(default)]
    pub last_seen: String,
    /// Last report, Unix ms.
    pub last_report_ms: Option<i64>,
    /// Last report, UTC.
    pub last_report: Option<String>,
    /// Last request, Unix ms.
    pub last_seen_ms: i64,
    /// Fields dropped from the last report.
    pub dropped_last: i64,
    /// Fields dropped, all reports.
    pub dropped_total: i64,
    /// The sanitized facts.
    pub facts: Option<Sanitized>,
}

/// A poll of one tier's queue.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PollRequest {
    /// The queue's tier.
    pub tier: u8,
    /// Hold the answer up to this long (at most [`MAX_WAIT_MS`]) while
    /// there is nothing to hand out and nothing to stop: the edge answers
    /// the moment a job for this node is queued or one it holds is
    /// cancelled. 0 (the default) answers at once.
    #[serde(default)]
    pub wait_ms: u64,
    /// Also the queues of the tiers below `tier`, the highest first.
    #[serde(default)]
    pub below: bool,
    /// Take a job (the default); false: only learn which of `holding` to
    /// stop (a node running all the jobs it may).
    #[serde(default = "yes")]
    pub take: bool,
    /// The jobs this node runs (at most [`MAX_HOLDING`]): the answer's
    /// `stop` names those it must stop.
    #[serde(default)]
    pub holding: Vec<String>,
}

fn yes() -> bool {
    true
}

/// Longest a poll, a renewal or a follow of a job's output is held.
pub const MAX_WAIT_MS: u64 = 20_000;
/// Most jobs a poll says its node holds.
pub const MAX_HOLDING: usize = 256;

impl PollRequest {
    /// A poll of one tier's queue, answered at once.
    pub fn tier(tier: u8) -> PollRequest {
        PollRequest {
            tier,
            wait_ms: 0,
            below: false,
            take: true,
            holding: Vec::new(),
        }
    }
}

/// A job its node must stop, and why.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct StopJob {
    /// The job.
    pub job_id: String,
    /// `cancelled` (by an operator), or `lost` (its lease is not this
    /// node's any more, or the job ended).
    pub reason: String,
}

/// A job handed out.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LeasedJobView {
    /// Job id.
    pub job_id: String,
    /// The lease's id: renew and complete with it.
    pub lease_id: String,
    /// The lease lasts this long from when the edge answered.
    pub lease_ms: i64,
    /// Tier.
    pub tier: u8,
    /// `internal`, `webhook`, `event` or `chat`.
    pub origin: String,
    /// What to run: on the wire its `kind` and its `payload`.
    #[serde(flatten)]
    pub job: JobPayload,
    /// How many times it was handed out, this one included.
    pub attempt: i64,
    /// The runtime a container tool must run in (`gvisor`: its tenant
    /// asks for it), when not the node's choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci_runtime: Option<String>,
}

/// The answer to a poll.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PollResponse {
    /// A job, or none.
    pub job: Option<LeasedJobView>,
    /// The tier the edge routes the node at now (it changes when an
    /// operator approves the node, or its facts change).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier_routed: Option<u8>,
    /// Jobs of the poll's `holding` the node must stop now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<StopJob>,
    /// How long the edge held the poll before it answered (a job's lease
    /// runs from then).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub held_ms: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A lease renewal.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenewRequest {
    /// The lease.
    pub lease_id: String,
    /// After renewing, hold the answer up to this long (at most
    /// [`MAX_WAIT_MS`]): a cancel of the job is refused at once
    /// (`job_cancelled`), so its node stops it within milliseconds.
    #[serde(default)]
    pub wait_ms: u64,
}

/// A piece of a running job's output.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputRequest {
    /// The lease.
    pub lease_id: String,
    /// `stdout` or `stderr`.
    pub stream: String,
    /// Bytes of this stream sent before `data` (the edge skips what it
    /// already has, so a piece sent again is kept once).
    pub offset: u64,
    /// The bytes, as text (at most [`crate::MAX_TAIL_BYTES`]).
    pub data: String,
}

/// The answer to a piece of output.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct OutputTaken {
    /// Bytes of the stream the edge has counted in all.
    pub bytes: u64,
}

/// The answer to a renewal.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Renewed {
    /// The lease lasts this long from when the edge answered.
    pub lease_ms: i64,
}

/// A job's end.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompleteRequest {
    /// The lease.
    pub lease_id: String,
    /// Whether it succeeded.
    pub succeeded: bool,
    /// Its exit status, when it has one.
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// A tool job's result: the `tools/call` answer, whole (at most
    /// [`crate::MAX_RESULT_BYTES`] of JSON; a node refuses a larger one
    /// rather than cut it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// Why the job failed or was refused, in the node's words (at most
    /// [`crate::MAX_ERROR_BYTES`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The last [`crate::MAX_TAIL_BYTES`] its command wrote to stdout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_tail: Option<String>,
    /// The last [`crate::MAX_TAIL_BYTES`] it wrote to stderr.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_tail: Option<String>,
    /// Bytes it wrote to stdout in all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_bytes: Option<u64>,
    /// Bytes it wrote to stderr in all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_bytes: Option<u64>,
    /// What the node's look after the run found in its work folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub look: Option<JobLook>,
}

/// What the node's look after a job's run found that host git, an agent or
/// an editor would run or follow, and the project files host tools execute
/// that the run changed (the node's words: paths are the run's, and
/// `oz0` shows them escaped).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct JobLook {
    /// Whether every entry of the work folder was examined.
    pub complete: bool,
    /// Findings still where git looks (the job then failed, unless the node
    /// only reports them).
    pub left_in_place: u64,
    /// The findings, at most [`crate::MAX_LOOK_ITEMS`].
    #[serde(default)]
    pub findings: Vec<LookFinding>,
    /// How many more findings there were.
    #[serde(default)]
    pub findings_more: u64,
    /// Project files host tools execute that the run changed, at most
    /// [`crate::MAX_LOOK_ITEMS`]; never moved.
    #[serde(default)]
    pub changed_host_exec: Vec<String>,
    /// How many more there were.
    #[serde(default)]
    pub changed_host_exec_more: u64,
}

/// One finding of the look after a run.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LookFinding {
    /// Where.
    pub path: String,
    /// What (`config`, `hook`, `agent_settings`, `unexamined`, …).
    pub what: String,
    /// Where it was renamed aside to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aside: Option<String>,
    /// Why it was left in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left: Option<String>,
}

impl JobLook {
    /// The look as a node's run status reports it (`git` there: see
    /// `oz0_linux::gitlook::GitLook`), cut to the bounds a completion
    /// carries; `None` when the run had no look or found nothing to say.
    pub fn from_status(git: &serde_json::Value) -> Option<JobLook> {
        if !git.is_object() {
            return None;
        }
        let cut = |s: &str| {
            let mut end = s.len().min(crate::MAX_ERROR_BYTES);
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            s[..end].to_string()
        };
        let text = |v: &serde_json::Value| v.as_str().map(cut);
        let findings = git["findings"].as_array().cloned().unwrap_or_default();
        let exec = git["changed_host_exec"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let look = JobLook {
            complete: git["complete"].as_bool().unwrap_or(false),
            left_in_place: git["left_in_place"].as_u64().unwrap_or(0),
            findings: findings
                .iter()
                .take(crate::MAX_LOOK_ITEMS)
                .map(|f| LookFinding {
                    path: text(&f["path"]).unwrap_or_default(),
                    what: text(&f["what"])
                        .filter(|w| {
                            !w.is_empty()
                                && w.len() <= 32
                                && w.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
                        })
                        .unwrap_or_else(|| "unknown".into()),
                    aside: text(&f["aside"]),
                    left: text(&f["left"]),
                })
                .collect(),
            findings_more: (findings.len().saturating_sub(crate::MAX_LOOK_ITEMS) as u64)
                .saturating_add(git["findings_more"].as_u64().unwrap_or(0)),
            changed_host_exec: exec
                .iter()
                .take(crate::MAX_LOOK_ITEMS)
                .filter_map(text)
                .collect(),
            changed_host_exec_more: (exec.len().saturating_sub(crate::MAX_LOOK_ITEMS) as u64)
                .saturating_add(git["changed_host_exec_more"].as_u64().unwrap_or(0)),
        };
        let quiet = look.complete && look.findings.is_empty() && look.changed_host_exec.is_empty();
        (!quiet).then_some(look)
    }

    /// Whether it is within the bounds a completion may carry: at most
    /// [`crate::MAX_LOOK_ITEMS`] of each list, each text at most
    /// [`crate::MAX_ERROR_BYTES`], and each `what` a plain word.
    pub fn within_bounds(&self) -> bool {
        let text_ok = |s: &str| s.len() <= crate::MAX_ERROR_BYTES;
        self.findings.len() <= crate::MAX_LOOK_ITEMS
            && self.changed_host_exec.len() <= crate::MAX_LOOK_ITEMS
            && self.changed_host_exec.iter().all(|p| text_ok(p))
            && self.findings.iter().all(|f| {
                text_ok(&f.path)
                    && f.aside.as_deref().is_none_or(text_ok)
                    && f.left.as_deref().is_none_or(text_ok)
                    && !f.what.is_empty()
                    && f.what.len() <= 32
                    && f.what.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
            })
    }
}

/// A node gives a job back: it is stopping.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    /// The lease.
    pub lease_id: String,
}

/// A job's output, as its node sent it while it ran and when it ended.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct JobLogs {
    /// The end of its stdout (at most `bound_bytes`); with
    /// `stdout_after`, only what came after that byte.
    pub stdout_tail: Option<String>,
    /// The end of its stderr (at most `bound_bytes`); with
    /// `stderr_after`, only what came after that byte.
    pub stderr_tail: Option<String>,
    /// Bytes written to stdout in all.
    pub stdout_bytes: Option<i64>,
    /// Bytes written to stderr in all.
    pub stderr_bytes: Option<i64>,
    /// The most of each stream the edge keeps: its end.
    pub bound_bytes: usize,
    /// The byte of stdout `stdout_tail` starts at (what came between the
    /// query's `stdout_after` and it was not kept).
    #[serde(default)]
    pub stdout_from: i64,
    /// The byte of stderr `stderr_tail` starts at.
    #[serde(default)]
    pub stderr_from: i64,
    /// The job's state when the answer was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Its exit status, once it ended with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
}

/// Query of a job's output: what came after the given bytes, held up to
/// `wait_ms` until there is some or the job ended (`oz0 job logs -f`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogsQuery {
    /// Only stdout after this many bytes.
    #[serde(default)]
    pub stdout_after: Option<i64>,
    /// Only stderr after this many bytes.
    #[serde(default)]
    pub stderr_after: Option<i64>,
    /// Hold the answer up to this long (at most [`MAX_WAIT_MS`]) while
    /// nothing came after those bytes and the job has not ended.
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

/// A page of a tenant's jobs, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct JobPage {
    /// The jobs (without their results: `GET …/jobs/{id}` has them).
    pub jobs: Vec<JobView>,
    /// Pass as `before` for the next page; none at the end.
    pub next: Option<String>,
}

/// A page of nodes, by tenant and id.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct NodePage {
    /// The nodes.
    pub nodes: Vec<NodeView>,
    /// Pass as `after` for the next page; none at the end.
    pub next: Option<String>,
}

/// Query of a tenant's jobs.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobsQuery {
    /// Only jobs in this state.
    #[serde(default)]
    pub state: Option<String>,
    /// At most this many (1-500, default 100).
    #[serde(default)]
    pub limit: Option<i64>,
    /// The previous page's `next`.
    #[serde(default)]
    pub before: Option<String>,
}

/// A shell job's payload: one command in the node's tier-1 sandbox (or
/// with no wall on a `--sandbox none` node). The edge checks it at submit
/// and the node runs it, with this one type.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShellJob {
    /// The command and its arguments.
    pub command: Vec<String>,
    /// Its variables (names as `sandbox run --env` takes them).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
    /// `HOST[:PORT]` it may reach through the egress proxy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Node-local ports it may reach through the proxy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forward: Vec<u16>,
    /// Wall time, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// Memory of all its processes, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
    /// Processes at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<u32>,
    /// CPU time, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<u64>,
    /// Size of its /tmp and /dev, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp_size: Option<u64>,
}

/// Why a shell job's payload is refused; each names the field and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShellJobError {
    /// Not a shell job's JSON (an unknown field, a wrong type).
    #[error("the payload is not a shell job: {0} (give {{\"command\": [..], \"env\": {{..}}, \"allow\": [..], \"timeout\": S}})")]
    Shape(String),
    /// No command, or an empty program.
    #[error("the job's command is empty: give \"command\": [PROGRAM, ARG...]")]
    EmptyCommand,
    /// A command the node could never run.
    #[error(transparent)]
    Command(oz0_policy::SpecError),
    /// A variable the sandbox refuses.
    #[error("env {name}: {err}")]
    Env {
        /// The variable's name.
        name: String,
        /// Why.
        err: oz0_policy::env::EnvError,
    },
    /// An `allow` or `forward` entry that does not parse.
    #[error(transparent)]
    Egress(oz0_policy::net::NetError),
    /// A limit out of range.
    #[error(transparent)]
    Limits(oz0_policy::limits::LimitError),
}

impl ShellJob {
    /// Reads and checks a payload: every field in its rules (the node
    /// checks again, with the same code).
    pub fn from_value(v: &serde_json::Value) -> Result<ShellJob, ShellJobError> {
        let j: ShellJob =
            serde_json::from_value(v.clone()).map_err(|e| ShellJobError::Shape(e.to_string()))?;
        j.check()?;
        Ok(j)
    }

    /// Checks every field.
    pub fn check(&self) -> Result<(), ShellJobError> {
        if self.command.is_empty() || self.command[0].is_empty() {
            return Err(ShellJobError::EmptyCommand);
        }
        // The node's own check, so a command it could never run is refused here.
        oz0_policy::spec::check_command(&self.command).map_err(ShellJobError::Command)?;
        for (k, v) in &self.env {
            oz0_policy::EnvVar::new(k, v).map_err(|err| ShellJobError::Env {
                name: k.clone(),
                err,
            })?;
        }
        oz0_policy::net::Egress::parse(&self.allow, &self.forward)
            .map_err(ShellJobError::Egress)?;
        self.limits().validate().map_err(ShellJobError::Limits)
    }

    /// Its limits.
    pub fn limits(&self) -> oz0_policy::Limits {
        oz0_policy::Limits {
            memory_mib: self.memory,
            processes: self.processes,
            cpu_seconds: self.cpu_seconds,
            timeout_seconds: self.timeout,
            tmp_mib: self.tmp_size,
        }
    }
}

/// What a job runs, as the wire carries it: its kind (`"kind"`) and that
/// kind's payload (`"payload"`), each read with the one type the edge
/// checks it with at submit and the node runs it with.
///
/// ```json
/// {"kind": "shell", "payload": {"command": ["make", "test"]}}
/// {"kind": "tool", "payload": {"manifest": "tools: ...", "tool": "fs"}}
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "payload", rename_all = "snake_case")]
pub enum JobPayload {
    /// A shell command ([`ShellJob`]).
    Shell(ShellJob),
    /// A harness session: its payload has no type yet, and the edge
    /// refuses the kind at submit (no node runs harness sessions).
    Harness(serde_json::Value),
    /// One call of a plugin's tool ([`oz0_plugin::job::ToolJob`]).
    Tool(oz0_plugin::job::ToolJob),
}

/// Why a job's payload does not read as its kind's type: the kind's own
/// error, which names the field and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JobPayloadError {
    /// A shell job's payload.
    #[error(transparent)]
    Shell(#[from] ShellJobError),
    /// A tool job's payload.
    #[error(transparent)]
    Tool(#[from] oz0_plugin::job::ToolJobError),
}

impl JobPayload {
    /// Its kind.
    pub fn kind(&self) -> crate::routing::JobKind {
        use crate::routing::JobKind;
        match self {
            JobPayload::Shell(_) => JobKind::Shell,
            JobPayload::Harness(_) => JobKind::Harness,
            JobPayload::Tool(_) => JobKind::Tool,
        }
    }

    /// Reads `payload` as `kind`'s type: a shell job's every field checked
    /// ([`ShellJob::from_value`]), a tool job's shape (its manifest is
    /// checked where it is routed, `JobRequest::needs`), a harness
    /// session's as it is.
    pub fn read(
        kind: crate::routing::JobKind,
        payload: &serde_json::Value,
    ) -> Result<JobPayload, JobPayloadError> {
        use crate::routing::JobKind;
        Ok(match kind {
            JobKind::Shell => JobPayload::Shell(ShellJob::from_value(payload)?),
            JobKind::Harness => JobPayload::Harness(payload.clone()),
            JobKind::Tool => JobPayload::Tool(oz0_plugin::job::ToolJob::from_value(payload)?),
        })
    }

    /// A job as the edge's store keeps it (its kind's wire name, its
    /// payload's JSON text), read with the same types; None when it does
    /// not read (the store's fault: it keeps only payloads that did).
    pub fn stored(kind: &str, payload: &str) -> Option<JobPayload> {
        let payload: serde_json::Value = serde_json::from_str(payload).ok()?;
        serde_json::from_value(serde_json::json!({"kind": kind, "payload": payload})).ok()
    }

    /// Its payload as JSON (what the wire's `"payload"` holds).
    pub fn payload(&self) -> serde_json::Value {
        let v = match self {
            JobPayload::Shell(p) => serde_json::to_value(p),
            JobPayload::Harness(p) => Ok(p.clone()),
            JobPayload::Tool(p) => serde_json::to_value(p),
        };
        v.expect("a payload serialises")
    }
}

/// A job accepted.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Accepted {
    /// Its id.
    pub job_id: String,
    /// The idempotency key named a job queued before: this is it.
    #[serde(default)]
    pub existing: bool,
    /// The tier it needs (its queue).
    pub tier: u8,
    /// Live nodes that can take it.
    pub eligible_nodes: i64,
}

/// A job's state, for operators.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct JobView {
    /// Id.
    pub job_id: String,
    /// `shell`, `harness` or `tool`.
    #[serde(default)]
    pub kind: String,
    /// `queued`, `leased`, `succeeded`, `failed` or `cancelled`.
    pub state: String,
    /// Tier.
    pub tier: u8,
    /// The node holding or having held it.
    pub node_id: Option<String>,
    /// Times handed out.
    pub attempts: i64,
    /// Exit status.
    pub exit_code: Option<i64>,
    /// `internal`, `webhook`, `event` or `chat`.
    #[serde(default)]
    pub origin: String,
    /// Times it may be handed out before it fails.
    #[serde(default)]
    pub max_attempts: i64,
    /// Bytes its command wrote to stdout (`…/logs` has the tail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_bytes: Option<i64>,
    /// Bytes it wrote to stderr.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_bytes: Option<i64>,
    /// A tool job's result (the `tools/call` answer), once it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// Why it failed, was refused or was cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the node's look after the run found (see [`JobLook`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub look: Option<JobLook>,
    /// Submitted, Unix ms.
    #[serde(default)]
    pub submitted_ms: i64,
    /// Last handed out, Unix ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leased_ms: Option<i64>,
    /// Ended, Unix ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done_ms: Option<i64>,
    /// A shell job's command (one job's view, not a list's; its variables
    /// are never shown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// A tool job's tool and MCP tool (one job's view).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The name of the node holding or having held it (one job's view).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
}

/// Query of the node list.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodesQuery {
    /// Only this tenant.
    #[serde(default)]
    pub tenant: Option<String>,
    /// At most this many (1-500, default 100).
    #[serde(default)]
    pub limit: Option<i64>,
    /// The previous page's `next`.
    #[serde(default)]
    pub after: Option<String>,
    /// Also nodes not heard from for a day and more.
    #[serde(default)]
    pub all: Option<bool>,
}

/// How an operator drains a node.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainQuery {
    /// The jobs it still runs after this many seconds go back to their
    /// queues, and it stops them.
    #[serde(default)]
    pub deadline_s: Option<u64>,
}

/// The tenants the edge serves.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Tenants {
    /// Their names.
    pub tenants: Vec<String>,
}
