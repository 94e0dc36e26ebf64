//! Jobs: queueing, leasing the oldest job of a tier's queue that a node may
//! take, renewal, completion, cancellation, and a job's state.

use super::value::{int, opt_int, opt_text, text, tier_col};
use super::{JobEnd, JobRow, LeasedJob, NodeRow, Store, StoreError};
use crate::routing::Needs;

impl Store {
    /// Queues a job.
    #[allow(clippy::too_many_arguments)]
    pub async fn insert_job(
        &self,
        id: &str,
        tenant: &str,
        origin: &str,
        kind: &str,
        needs: &Needs,
        payload: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        self.exec(
            "INSERT INTO jobs (id, tenant, origin, kind, tier_need, need_microvm, need_oci, need_arch, payload, state, enqueued_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'queued', $10)",
            vec![
                id.into(),
                tenant.into(),
                origin.into(),
                kind.into(),
                i64::from(needs.tier).into(),
                needs.microvm.into(),
                needs.oci.into(),
                needs.arch.clone().into(),
                payload.into(),
                now_ms.into(),
            ],
        )
        .await?;
        Ok(())
    }

    /// Hands the oldest job of one tier's queue that this node may take to
    /// it, under a new lease. A job whose lease expired is free again.
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
                         WHERE tenant = $4 AND tier_need = $5
                           AND (state = 'queued' OR (state = 'leased' AND lease_until_ms < $6))
                           AND need_microvm <= $7 AND need_oci <= $8
                           AND (need_arch IS NULL OR need_arch = $9)
                         ORDER BY enqueued_ms, id LIMIT 1 {})
               AND (state = 'queued' OR (state = 'leased' AND lease_until_ms < $6))
             RETURNING id, origin, kind, tier_need, payload, attempts",
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
                    node.microvm_ready.into(),
                    node.oci_ready.into(),
                    node.arch.as_str().into(),
                ],
            )
            .await?;
        rows.first()
            .map(|r| {
                Ok(LeasedJob {
                    id: text(r, 0)?,
                    origin: text(r, 1)?,
                    kind: text(r, 2)?,
                    tier: tier_col(r, 3)?,
                    payload: text(r, 4)?,
                    attempts: int(r, 5)?,
                })
            })
            .transpose()
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
                "UPDATE jobs SET state = $1, exit_code = $2, done_ms = $3, lease_until_ms = NULL, result = $7, error = $8 WHERE id = $4 AND node_id = $5 AND lease_id = $6 AND state = 'leased' AND lease_until_ms >= $3",
                vec![
                    if end.succeeded { "succeeded" } else { "failed" }.into(),
                    end.exit_code.into(),
                    now_ms.into(),
                    job.into(),
                    node.into(),
                    lease_id.into(),
                    end.result.map(str::to_string).into(),
                    end.error.map(str::to_string).into(),
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
                "SELECT id, tenant, state, tier_need, node_id, lease_until_ms, attempts, exit_code, kind, result, error, enqueued_ms, leased_ms, done_ms FROM jobs WHERE tenant = $1 AND id = $2",
                vec![tenant.into(), id.into()],
            )
            .await?;
        rows.first()
            .map(|r| {
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
                })
            })
            .transpose()
    }
}
