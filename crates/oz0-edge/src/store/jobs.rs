//! Jobs: queueing, leasing the oldest job of a tier's queue that a node may
//! take, renewal, completion, cancellation, and a job's state.

use super::value::{int, opt_int, opt_text, text, tier_col};
use super::{JobEnd, JobRow, LeasedJob, NodeRow, Store, StoreError};
use crate::routing::Needs;

/// A job to queue.
#[derive(Debug, Clone)]
pub struct NewJob<'a> {
    /// Its id.
    pub id: &'a str,
    /// Its tenant.
    pub tenant: &'a str,
    /// `internal`, `webhook`, …
    pub origin: &'a str,
    /// `shell`, `tool`, …
    pub kind: &'a str,
    /// What it needs of a node.
    pub needs: &'a Needs,
    /// What the node runs (JSON text).
    pub payload: &'a str,
    /// The submitter's idempotency key, if any.
    pub idem_key: Option<&'a str>,
    /// A digest of the request, to tell a retry from another job.
    pub request_hash: &'a str,
    /// Times it may be handed out before it fails.
    pub max_attempts: i64,
}

/// What queueing did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Queued {
    /// Queued now.
    New,
    /// The idempotency key names a job queued before: its id, and whether
    /// the request was the same.
    Existing {
        /// That job.
        id: String,
        /// Same request (a retry) or another one.
        same: bool,
    },
}

/// What a sweep of expired leases did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Swept {
    /// Jobs back in their queue.
    pub requeued: u64,
    /// Jobs failed: their attempts were used up.
    pub failed: u64,
    /// The queues (tenant, tier) the requeued jobs went back to.
    pub queues: Vec<(String, u8)>,
}

/// A job's output as the edge keeps it, and its state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobOutput {
    /// The end of its stdout.
    pub stdout_tail: Option<String>,
    /// The end of its stderr.
    pub stderr_tail: Option<String>,
    /// Bytes written to stdout in all.
    pub stdout_bytes: Option<i64>,
    /// Bytes written to stderr in all.
    pub stderr_bytes: Option<i64>,
    /// `queued`, `leased`, `succeeded`, `failed` or `cancelled`.
    pub state: String,
    /// Its exit status.
    pub exit_code: Option<i64>,
}

/// A piece of a running job's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece<'a> {
    /// Its stream.
    pub stream: Stream,
    /// Bytes of the stream before it.
    pub offset: u64,
    /// The bytes, as text.
    pub data: &'a str,
}

/// Which of a job's output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Its standard output.
    Stdout,
    /// Its standard error.
    Stderr,
}

/// The end of `tail + data` that fits in `bound` bytes, cut at a
/// character boundary.
pub fn bounded_tail(tail: &str, data: &str, bound: usize) -> String {
    let total = tail.len() + data.len();
    if total <= bound {
        return format!("{tail}{data}");
    }
    let mut joined = String::with_capacity(bound.min(total));
    let skip = total - bound;
    if skip < tail.len() {
        let mut at = skip;
        while !tail.is_char_boundary(at) {
            at += 1;
        }
        joined.push_str(&tail[at..]);
        joined.push_str(data);
    } else {
        let mut at = skip - tail.len();
        while !data.is_char_boundary(at) {
            at += 1;
        }
        joined.push_str(&data[at..]);
    }
    joined
}

const JOB_COLS: &str = "id, tenant, state, tier_need, node_id, lease_until_ms, attempts, exit_code, kind, result, error, enqueued_ms, leased_ms, done_ms, origin, max_attempts, stdout_bytes, stderr_bytes, look";

fn job_row(r: &super::Row) -> Result<JobRow, StoreError> {
    Ok(JobRow {
        id: text(r, 0)?,
        tenant: text(r, 1)?,
        state: text(r, 2)?,
        tier: tier_col(r, 3)?,
        node_id: opt_text(r, 4)?,
        lease_until_ms: opt_int(r, 5)?,
        attempts: int(r, 6)?,
        exit_code: opt_int(r, 7)?,
        kind: text(r, 8)?,
        result: opt_text(r, 9)?,
        error: opt_text(r, 10)?,
        enqueued_ms: int(r, 11)?,
        leased_ms: opt_int(r, 12)?,
        done_ms: opt_int(r, 13)?,
        origin: text(r, 14)?,
        max_attempts: int(r, 15)?,
        stdout_bytes: opt_int(r, 16)?,
        stderr_bytes: opt_int(r, 17)?,
        look: opt_text(r, 18)?,
    })
}

impl Store {
    /// Queues a job, or finds the one its idempotency key names.
    pub async fn insert_job(&self, j: &NewJob<'_>, now_ms: i64) -> Result<Queued, StoreError> {
        let inserted = self.exec(
            "INSERT INTO jobs (id, tenant, origin, kind, tier_need, need_microvm, need_oci, need_arch, payload, state, enqueued_ms, idem_key, request_hash, max_attempts, seq) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'queued', $10, $11, $12, $13, (SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs)) ON CONFLICT DO NOTHING",
            vec![
                j.id.into(),
                j.tenant.into(),
                j.origin.into(),
                j.kind.into(),
                i64::from(j.needs.tier).into(),
                j.needs.microvm_level().into(),
                j.needs.oci_level().into(),
                j.needs.arch.clone().into(),
                j.payload.into(),
                now_ms.into(),
                j.idem_key.into(),
                j.request_hash.into(),
                j.max_attempts.into(),
            ],
        )
        .await?;
        if inserted == 1 {
            return Ok(Queued::New);
        }
        let key = j.idem_key.ok_or(StoreError::Column(0))?;
        let rows = self
            .query(
                "SELECT id, request_hash FROM jobs WHERE tenant = $1 AND idem_key = $2",
                vec![j.tenant.into(), key.into()],
            )
            .await?;
        let r = rows.first().ok_or(StoreError::Column(0))?;
        Ok(Queued::Existing {
            id: text(r, 0)?,
            same: opt_text(r, 1)?.as_deref() == Some(j.request_hash),
        })
    }

    /// Hands the oldest queued job of one tier's queue that this node may
    /// take to it, under a new lease (expired leases come back to the
    /// queue through [`Store::sweep_leases`]): its microVMs as the job
    /// needs them, and its `runtime.oci`, except a Mac's for a microVM tool
    /// without egress (Apple's runtime reads an image's entrypoint
    /// itself). Nothing to a node that, as
    /// the store holds it in the same statement, waits for approval, is
    /// drained or was removed, whatever `node` was read as.
    pub async fn lease(
        &self,
        node: &NodeRow,
        tier: u8,
        lease_id: &str,
        until_ms: i64,
        now_ms: i64,
    ) -> Result<Option<LeasedJob>, StoreError> {
        let sql = format!(
            "UPDATE jobs SET state = 'leased', node_id = $1, lease_id = $2, lease_until_ms = $3, attempts = attempts + 1, leased_ms = $6
             WHERE id = (SELECT id FROM jobs
                         WHERE tenant = $4 AND tier_need = $5 AND state = 'queued'
                           AND need_microvm <= $7
                           AND (need_oci <= $8 OR (need_microvm = 1 AND $7 = 1))
                           AND (need_arch IS NULL OR need_arch = $9)
                         ORDER BY enqueued_ms, seq, id LIMIT 1 {})
               AND state = 'queued'
               AND EXISTS (SELECT 1 FROM nodes WHERE nodes.id = $1 AND nodes.approved = 1 AND nodes.drained = 0 AND nodes.removed_ms IS NULL
                           AND (nodes.tier_routed >= $5 OR ($5 = 2 AND nodes.microvm_ready >= 1)))
             RETURNING id, origin, kind, tier_need, payload, attempts, need_oci",
            self.lock_clause()
        );
        let rows = self
            .query(
                &sql,
                vec![
                    node.id.as_str().into(),
                    lease_id.into(),
                    until_ms.into(),
                    node.tenant.as_str().into(),
                    i64::from(tier).into(),
                    now_ms.into(),
                    node.microvm_level.into(),
                    node.oci_level.into(),
                    node.arch.as_str().into(),
                ],
            )
            .await?;
        let leased = rows
            .first()
            .map(|r| {
                Ok::<_, StoreError>(LeasedJob {
                    id: text(r, 0)?,
                    origin: text(r, 1)?,
                    kind: text(r, 2)?,
                    tier: tier_col(r, 3)?,
                    payload: text(r, 4)?,
                    attempts: int(r, 5)?,
                    gvisor: int(r, 6)? >= 2,
                })
            })
            .transpose()?;
        if leased.is_some() {
            self.count(LEASES_GRANTED, 1).await?;
        }
        Ok(leased)
    }

    /// Jobs whose lease expired go back to their queue, or fail once they
    /// were handed out as often as they may be.
    pub async fn sweep_leases(&self, now_ms: i64) -> Result<Swept, StoreError> {
        let failed = self.exec_long(
            "UPDATE jobs SET state = 'failed', done_ms = $1, lease_id = NULL, lease_until_ms = NULL, error = 'handed out ' || CAST(attempts AS TEXT) || ' time(s), the most it may be, and its lease lapsed each time (its node died or lost the edge): not handed out again' WHERE state = 'leased' AND lease_until_ms < $1 AND attempts >= max_attempts",
            vec![now_ms.into()],
        )
        .await?;
        let rows = self
            .query_long(
                "UPDATE jobs SET state = 'queued', lease_id = NULL, lease_until_ms = NULL WHERE state = 'leased' AND lease_until_ms < $1 RETURNING tenant, tier_need",
                vec![now_ms.into()],
            )
            .await?;
        self.expired(failed, &rows).await
    }

    /// The leases of a node taken for dead end now: each job goes back to
    /// its queue (the attempt counts, as for a lease that lapsed), or
    /// fails once it was handed out as often as it may be.
    pub async fn release_dead(&self, node: &str, now_ms: i64) -> Result<Swept, StoreError> {
        let failed = self.exec_long(
            "UPDATE jobs SET state = 'failed', done_ms = $1, lease_id = NULL, lease_until_ms = NULL, error = 'handed out ' || CAST(attempts AS TEXT) || ' time(s), the most it may be, and its node died or lost the edge each time: not handed out again' WHERE node_id = $2 AND state = 'leased' AND attempts >= max_attempts",
            vec![now_ms.into(), node.into()],
        )
        .await?;
        let rows = self
            .query_long(
                "UPDATE jobs SET state = 'queued', lease_id = NULL, lease_until_ms = NULL WHERE node_id = $1 AND state = 'leased' RETURNING tenant, tier_need",
                vec![node.into()],
            )
            .await?;
        self.expired(failed, &rows).await
    }

    /// Counts the leases that ended unanswered (`failed` jobs, and the
    /// requeued ones `rows` name) and says where the requeued ones went.
    async fn expired(&self, failed: u64, rows: &[super::Row]) -> Result<Swept, StoreError> {
        let requeued = rows.len() as u64;
        let expired = i64::try_from(failed + requeued).unwrap_or(i64::MAX);
        if expired > 0 {
            self.count(LEASES_EXPIRED, expired).await?;
        }
        Ok(Swept {
            requeued,
            failed,
            queues: queues(rows)?,
        })
    }

    /// The jobs of nodes whose drain deadline passed go back to their
    /// queues (the attempt does not count: the operator moved them).
    /// Returns (job, node, tenant, tier) of each.
    pub async fn sweep_drains(
        &self,
        now_ms: i64,
    ) -> Result<Vec<(String, String, String, u8)>, StoreError> {
        let rows = self
            .query_long(
                "UPDATE jobs SET state = 'queued', lease_id = NULL, lease_until_ms = NULL, attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END WHERE state = 'leased' AND node_id IN (SELECT id FROM nodes WHERE drained = 1 AND drain_until_ms IS NOT NULL AND drain_until_ms <= $1) RETURNING id, node_id, tenant, tier_need",
                vec![now_ms.into()],
            )
            .await?;
        rows.iter()
            .map(|r| Ok((text(r, 0)?, text(r, 1)?, text(r, 2)?, tier_col(r, 3)?)))
            .collect()
    }

    /// What a job needs of a node, and its payload (JSON text).
    pub async fn job_spec(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<Option<(Needs, String)>, StoreError> {
        let rows = self
            .query(
                "SELECT tier_need, need_microvm, need_oci, need_arch, payload FROM jobs WHERE tenant = $1 AND id = $2",
                vec![tenant.into(), id.into()],
            )
            .await?;
        rows.first()
            .map(|r| {
                Ok((
                    Needs {
                        tier: tier_col(r, 0)?,
                        microvm: false,
                        microvm_linux: false,
                        oci: false,
                        oci_gvisor: false,
                        arch: opt_text(r, 3)?,
                    }
                    .with_microvm_level(int(r, 1)?)
                    .with_oci_level(int(r, 2)?),
                    text(r, 4)?,
                ))
            })
            .transpose()
    }

    /// Queues a new job `new_id` with the kind, origin, needs and payload
    /// of job `id`; false when there is no such job.
    pub async fn rerun(
        &self,
        tenant: &str,
        id: &str,
        new_id: &str,
        max_attempts: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        Ok(self
            .exec(
                "INSERT INTO jobs (id, tenant, origin, kind, tier_need, need_microvm, need_oci, need_arch, payload, state, enqueued_ms, max_attempts, seq) SELECT $3, tenant, origin, kind, tier_need, need_microvm, need_oci, need_arch, payload, 'queued', $4, $5, (SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs) FROM jobs WHERE tenant = $1 AND id = $2",
                vec![tenant.into(), id.into(), new_id.into(), now_ms.into(), max_attempts.into()],
            )
            .await?
            == 1)
    }

    /// The jobs a node holds a lease on now.
    pub async fn held_by(&self, node: &str) -> Result<Vec<String>, StoreError> {
        self.query(
            "SELECT id FROM jobs WHERE node_id = $1 AND state = 'leased'",
            vec![node.into()],
        )
        .await?
        .iter()
        .map(|r| text(r, 0))
        .collect()
    }

    /// Appends a piece of a running job's output to its stream's kept
    /// tail, when the lease is still this node's: the part of `data` the
    /// edge already has (from `offset`) is skipped. Returns the stream's
    /// byte count, or `None` when the lease is gone.
    pub async fn append_output(
        &self,
        job: &str,
        node: &str,
        lease_id: &str,
        piece: Piece<'_>,
        now_ms: i64,
    ) -> Result<Option<u64>, StoreError> {
        let Piece {
            stream,
            offset,
            data,
        } = piece;
        let (tail_col, bytes_col) = match stream {
            Stream::Stdout => ("stdout_tail", "stdout_bytes"),
            Stream::Stderr => ("stderr_tail", "stderr_bytes"),
        };
        let lease = "id = $1 AND node_id = $2 AND lease_id = $3 AND state = 'leased' AND lease_until_ms >= $4";
        // One writer a job (its node sends a stream's pieces in order);
        // the byte count in the WHERE makes a concurrent one retry.
        for _ in 0..4 {
            let rows = self
                .query(
                    &format!("SELECT {tail_col}, {bytes_col} FROM jobs WHERE {lease}"),
                    vec![job.into(), node.into(), lease_id.into(), now_ms.into()],
                )
                .await?;
            let Some(r) = rows.first() else {
                return Ok(None);
            };
            let tail = opt_text(r, 0)?.unwrap_or_default();
            let had = opt_int(r, 1)?;
            let have = u64::try_from(had.unwrap_or(0)).unwrap_or(0);
            let end = offset.saturating_add(data.len() as u64);
            if end <= have {
                return Ok(Some(have));
            }
            // Skip what the edge has; a gap (pieces the node could not
            // send) is counted, not filled.
            let mut skip = usize::try_from(have.saturating_sub(offset)).unwrap_or(usize::MAX);
            while skip < data.len() && !data.is_char_boundary(skip) {
                skip += 1;
            }
            let new = data.get(skip..).unwrap_or("");
            let joined = bounded_tail(&tail, new, crate::MAX_TAIL_BYTES);
            let total = i64::try_from(end).unwrap_or(i64::MAX);
            let changed = self
                .exec(
                    &format!("UPDATE jobs SET {tail_col} = $5, {bytes_col} = $6 WHERE {lease} AND COALESCE({bytes_col}, -1) = $7"),
                    vec![
                        job.into(),
                        node.into(),
                        lease_id.into(),
                        now_ms.into(),
                        joined.into(),
                        total.into(),
                        had.unwrap_or(-1).into(),
                    ],
                )
                .await?;
            if changed == 1 {
                return Ok(Some(end));
            }
        }
        Ok(None)
    }

    /// Removes finished jobs that ended before `older_than_ms`, and the
    /// oldest finished ones beyond the `keep` newest; at most `batch` a
    /// call. Returns how many went.
    pub async fn sweep_finished(
        &self,
        older_than_ms: i64,
        keep: i64,
        batch: i64,
    ) -> Result<u64, StoreError> {
        // The newest finished job past the `keep` newest: it and older go.
        let beyond = self
            .query_long(
                "SELECT done_ms FROM jobs WHERE done_ms IS NOT NULL ORDER BY done_ms DESC LIMIT 1 OFFSET $1",
                vec![keep.into()],
            )
            .await?
            .first()
            .map(|r| int(r, 0))
            .transpose()?;
        let cutoff = beyond.map_or(older_than_ms, |c| older_than_ms.max(c.saturating_add(1)));
        self.exec_long(
            "DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE done_ms IS NOT NULL AND done_ms < $1 LIMIT $2)",
            vec![cutoff.into(), batch.into()],
        )
        .await
    }

    /// The job an idempotency key names: its id and request digest.
    pub async fn job_by_key(
        &self,
        tenant: &str,
        key: &str,
    ) -> Result<Option<(String, Option<String>)>, StoreError> {
        let rows = self
            .query(
                "SELECT id, request_hash FROM jobs WHERE tenant = $1 AND idem_key = $2",
                vec![tenant.into(), key.into()],
            )
            .await?;
        rows.first()
            .map(|r| Ok((text(r, 0)?, opt_text(r, 1)?)))
            .transpose()
    }

    /// Gives a job back to its queue at once: its node is stopping. The
    /// attempt does not count (the job did not fail; its node left), so
    /// a job given back never shows more attempts than its cap. Returns
    /// its queue (tenant, tier), or `None` when the lease was not this
    /// node's.
    pub async fn release(
        &self,
        job: &str,
        node: &str,
        lease_id: &str,
        now_ms: i64,
    ) -> Result<Option<(String, u8)>, StoreError> {
        let rows = self
            .query(
                "UPDATE jobs SET state = 'queued', lease_id = NULL, lease_until_ms = NULL, attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END WHERE id = $1 AND node_id = $2 AND lease_id = $3 AND state = 'leased' AND lease_until_ms >= $4 RETURNING tenant, tier_need",
                vec![job.into(), node.into(), lease_id.into(), now_ms.into()],
            )
            .await?;
        Ok(queues(&rows)?.into_iter().next())
    }

    /// Extends a lease that is still this node's and not expired.
    pub async fn renew(
        &self,
        job: &str,
        node: &str,
        lease_id: &str,
        until_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        Ok(self
            .exec(
                "UPDATE jobs SET lease_until_ms = $1 WHERE id = $2 AND node_id = $3 AND lease_id = $4 AND state = 'leased' AND lease_until_ms >= $5",
                vec![until_ms.into(), job.into(), node.into(), lease_id.into(), now_ms.into()],
            )
            .await?
            == 1)
    }

    /// Completes a job whose lease is still this node's and not expired.
    pub async fn complete(
        &self,
        job: &str,
        node: &str,
        lease_id: &str,
        end: &JobEnd<'_>,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        Ok(self
            .exec(
                "UPDATE jobs SET state = $1, exit_code = $2, done_ms = $3, lease_until_ms = NULL, result = $7, error = $8, stdout_tail = COALESCE($9, stdout_tail), stderr_tail = COALESCE($10, stderr_tail), stdout_bytes = COALESCE($11, stdout_bytes), stderr_bytes = COALESCE($12, stderr_bytes), look = $13 WHERE id = $4 AND node_id = $5 AND lease_id = $6 AND state = 'leased' AND lease_until_ms >= $3",
                vec![
                    if end.succeeded { "succeeded" } else { "failed" }.into(),
                    end.exit_code.into(),
                    now_ms.into(),
                    job.into(),
                    node.into(),
                    lease_id.into(),
                    end.result.into(),
                    end.error.into(),
                    end.stdout_tail.into(),
                    end.stderr_tail.into(),
                    end.stdout_bytes.into(),
                    end.stderr_bytes.into(),
                    end.look.into(),
                ],
            )
            .await?
            == 1)
    }

    /// Cancels a job of a tenant that has not ended: a queued job is never
    /// handed out, and a leased one's lease is gone (its node's next
    /// renewal is refused, so it stops the job). False when the job had
    /// already ended (or there is none).
    pub async fn cancel(&self, tenant: &str, id: &str, now_ms: i64) -> Result<bool, StoreError> {
        Ok(self
            .exec(
                "UPDATE jobs SET state = 'cancelled', done_ms = $3, lease_until_ms = NULL, error = 'cancelled by an operator' WHERE tenant = $1 AND id = $2 AND state IN ('queued', 'leased')",
                vec![tenant.into(), id.into(), now_ms.into()],
            )
            .await?
            == 1)
    }

    /// One job of a tenant.
    pub async fn job(&self, tenant: &str, id: &str) -> Result<Option<JobRow>, StoreError> {
        let rows = self
            .query(
                &format!("SELECT {JOB_COLS} FROM jobs WHERE tenant = $1 AND id = $2"),
                vec![tenant.into(), id.into()],
            )
            .await?;
        rows.first().map(job_row).transpose()
    }

    /// A job's output tails (stdout, stderr), as its node sent them.
    pub async fn job_logs(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<Option<(Option<String>, Option<String>)>, StoreError> {
        let rows = self
            .query(
                "SELECT stdout_tail, stderr_tail FROM jobs WHERE tenant = $1 AND id = $2",
                vec![tenant.into(), id.into()],
            )
            .await?;
        rows.first()
            .map(|r| Ok((opt_text(r, 0)?, opt_text(r, 1)?)))
            .transpose()
    }

    /// A job's output as the edge keeps it, with its state: the tails,
    /// the byte counts, the state and the exit status.
    pub async fn job_output(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<Option<JobOutput>, StoreError> {
        let rows = self
            .query(
                "SELECT stdout_tail, stderr_tail, stdout_bytes, stderr_bytes, state, exit_code FROM jobs WHERE tenant = $1 AND id = $2",
                vec![tenant.into(), id.into()],
            )
            .await?;
        rows.first()
            .map(|r| {
                Ok(JobOutput {
                    stdout_tail: opt_text(r, 0)?,
                    stderr_tail: opt_text(r, 1)?,
                    stdout_bytes: opt_int(r, 2)?,
                    stderr_bytes: opt_int(r, 3)?,
                    state: text(r, 4)?,
                    exit_code: opt_int(r, 5)?,
                })
            })
            .transpose()
    }

    /// A tenant's jobs, newest first, in one state or any: at most `limit`
    /// submitted before the `(enqueued_ms, id)` cursor.
    pub async fn jobs(
        &self,
        tenant: &str,
        state: Option<&str>,
        before: Option<(i64, &str)>,
        limit: i64,
    ) -> Result<Vec<JobRow>, StoreError> {
        let (ms, id) = before.unwrap_or((i64::MAX, ""));
        let rows = self
            .query_long(
                &format!("SELECT {JOB_COLS} FROM jobs WHERE tenant = $1 AND ($2 = '' OR state = $2) AND (enqueued_ms < $3 OR (enqueued_ms = $3 AND id < $4)) ORDER BY enqueued_ms DESC, id DESC LIMIT $5"),
                vec![tenant.into(), state.unwrap_or("").into(), ms.into(), id.into(), limit.into()],
            )
            .await?;
        rows.iter().map(job_row).collect()
    }
}

fn queues(rows: &[super::Row]) -> Result<Vec<(String, u8)>, StoreError> {
    let mut q: Vec<(String, u8)> = rows
        .iter()
        .map(|r| Ok((text(r, 0)?, tier_col(r, 1)?)))
        .collect::<Result<_, StoreError>>()?;
    q.sort();
    q.dedup();
    Ok(q)
}

/// Counter: leases handed out.
pub const LEASES_GRANTED: &str = "leases_granted";
/// Counter: leases that expired (their job requeued or failed).
pub const LEASES_EXPIRED: &str = "leases_expired";
