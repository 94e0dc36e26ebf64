//! The schema: the versioned [`MIGRATIONS`], and how each replica applies
//! the missing ones at start, under a lock.

use super::{Backend, Store, StoreError};

/// Schema migrations, in order. Never edit one that shipped: add another.
pub const MIGRATIONS: &[(i64, &str)] = &[
    (
        1,
        "CREATE TABLE nodes (
        id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL,
        public_key TEXT NOT NULL UNIQUE,
        name TEXT,
        registered_ms BIGINT NOT NULL,
        last_seen_ms BIGINT NOT NULL,
        last_report_ms BIGINT,
        facts TEXT,
        tier_routed BIGINT NOT NULL DEFAULT 0,
        microvm_ready BIGINT NOT NULL DEFAULT 0,
        oci_ready BIGINT NOT NULL DEFAULT 0,
        arch TEXT NOT NULL DEFAULT '',
        reports BIGINT NOT NULL DEFAULT 0,
        dropped_last BIGINT NOT NULL DEFAULT 0,
        dropped_total BIGINT NOT NULL DEFAULT 0
    );
    CREATE INDEX nodes_by_tenant ON nodes (tenant, tier_routed, last_seen_ms);
    CREATE INDEX nodes_by_name ON nodes (name);
    CREATE TABLE nonces (
        node_id TEXT NOT NULL,
        nonce TEXT NOT NULL,
        expires_ms BIGINT NOT NULL,
        PRIMARY KEY (node_id, nonce)
    );
    CREATE INDEX nonces_by_expiry ON nonces (expires_ms);
    CREATE TABLE jobs (
        id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL,
        origin TEXT NOT NULL,
        kind TEXT NOT NULL,
        tier_need BIGINT NOT NULL,
        need_microvm BIGINT NOT NULL,
        need_oci BIGINT NOT NULL,
        need_arch TEXT,
        payload TEXT NOT NULL,
        state TEXT NOT NULL,
        node_id TEXT,
        lease_id TEXT,
        lease_until_ms BIGINT,
        attempts BIGINT NOT NULL DEFAULT 0,
        enqueued_ms BIGINT NOT NULL,
        outcome TEXT,
        exit_code BIGINT,
        done_ms BIGINT
    );
    CREATE INDEX jobs_queue ON jobs (tenant, tier_need, state, enqueued_ms);
    CREATE TABLE counters (
        name TEXT PRIMARY KEY,
        value BIGINT NOT NULL
    );",
    ),
    // Tool jobs: the result and the failure reason a completion carries,
    // and when a job was last handed out.
    (
        2,
        "ALTER TABLE jobs ADD COLUMN result TEXT;
    ALTER TABLE jobs ADD COLUMN error TEXT;
    ALTER TABLE jobs ADD COLUMN leased_ms BIGINT;",
    ),
    // Admission and liveness: a node waits for an operator's approval (in a
    // tenant that asks for it), can be drained and removed (its key is then
    // refused for good); names are unique among a tenant's nodes (a name
    // held twice before keeps its first holder).
    (
        3,
        "ALTER TABLE nodes ADD COLUMN approved BIGINT NOT NULL DEFAULT 1;
    ALTER TABLE nodes ADD COLUMN drained BIGINT NOT NULL DEFAULT 0;
    ALTER TABLE nodes ADD COLUMN removed_ms BIGINT;
    UPDATE nodes SET name = NULL WHERE name IS NOT NULL AND EXISTS (
        SELECT 1 FROM nodes o WHERE o.tenant = nodes.tenant AND o.name = nodes.name
          AND (o.registered_ms < nodes.registered_ms OR (o.registered_ms = nodes.registered_ms AND o.id < nodes.id)));
    CREATE UNIQUE INDEX nodes_unique_name ON nodes (tenant, name) WHERE name IS NOT NULL AND removed_ms IS NULL;",
    ),
    // Jobs operators follow: an idempotency key, a cap on attempts, the
    // bounded tails of a job's output; and indexes that keep leasing and
    // listing fast however much history there is (the queue index covers
    // queued jobs only; expired leases are swept back into it).
    (
        4,
        "ALTER TABLE jobs ADD COLUMN idem_key TEXT;
    ALTER TABLE jobs ADD COLUMN request_hash TEXT;
    ALTER TABLE jobs ADD COLUMN max_attempts BIGINT NOT NULL DEFAULT 3;
    ALTER TABLE jobs ADD COLUMN stdout_tail TEXT;
    ALTER TABLE jobs ADD COLUMN stderr_tail TEXT;
    ALTER TABLE jobs ADD COLUMN stdout_bytes BIGINT;
    ALTER TABLE jobs ADD COLUMN stderr_bytes BIGINT;
    DROP INDEX jobs_queue;
    CREATE UNIQUE INDEX jobs_idem ON jobs (tenant, idem_key) WHERE idem_key IS NOT NULL;
    CREATE INDEX jobs_queued ON jobs (tenant, tier_need, enqueued_ms, id) WHERE state = 'queued';
    CREATE INDEX jobs_leased ON jobs (lease_until_ms) WHERE state = 'leased';
    CREATE INDEX jobs_done ON jobs (done_ms) WHERE done_ms IS NOT NULL;
    CREATE INDEX jobs_by_tenant ON jobs (tenant, enqueued_ms, id);
    CREATE INDEX nodes_by_tenant_id ON nodes (tenant, id);",
    ),
    // What the node's look after a job's run found (JSON text).
    (5, "ALTER TABLE jobs ADD COLUMN look TEXT;"),
    // Liveness: when a node's held request (a long poll, a held renewal)
    // broke and nothing came from it since, cleared by its next request;
    // and the deadline of a drain, past which its jobs go back to their
    // queues.
    (
        6,
        "ALTER TABLE nodes ADD COLUMN gone_ms BIGINT;
    ALTER TABLE nodes ADD COLUMN drain_until_ms BIGINT;",
    ),
    // First come, first served within a millisecond: each job queued gets
    // the next number, so that two jobs queued one after the other in the
    // same millisecond are handed out in that order (ids are random).
    (
        7,
        "ALTER TABLE jobs ADD COLUMN seq BIGINT;
    CREATE INDEX jobs_seq ON jobs (seq);
    DROP INDEX jobs_queued;
    CREATE INDEX jobs_queued ON jobs (tenant, tier_need, enqueued_ms, seq, id) WHERE state = 'queued';",
    ),
    // Whether a Windows node's probe found PSEC, whatever it was started
    // with: its contract, '' when none; NULL on other platforms. And the
    // OS build or kernel release its last report gave (for /metrics).
    (
        8,
        "ALTER TABLE nodes ADD COLUMN psec TEXT;
    ALTER TABLE nodes ADD COLUMN build TEXT;",
    ),
    // A node's leases by the node: each poll of a node holding jobs asks
    // which it still holds, which read every lease of every node before.
    (
        9,
        "CREATE INDEX jobs_leased_by_node ON jobs (node_id) WHERE state = 'leased';",
    ),
];

impl Store {
    pub(super) async fn migrate(&self) -> Result<(), StoreError> {
        let known = MIGRATIONS.last().map_or(0, |m| m.0);
        const TABLE: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, applied_ms BIGINT NOT NULL)";
        let now = crate::time::now_ms();
        match &self.backend {
            Backend::Sqlite(c) => {
                let c = c.clone();
                tokio::task::spawn_blocking(move || -> Result<(), StoreError> {
                    let mut conn = c.lock().unwrap_or_else(|p| p.into_inner());
                    let tx =
                        conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                    tx.execute_batch(TABLE)?;
                    let found: i64 = tx.query_row(
                        "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
                        [],
                        |r| r.get(0),
                    )?;
                    if found > known {
                        return Err(StoreError::Newer { found, known });
                    }
                    for (v, sql) in MIGRATIONS.iter().filter(|m| m.0 > found) {
                        tx.execute_batch(sql)?;
                        tx.execute(
                            "INSERT INTO schema_migrations (version, applied_ms) VALUES (?1, ?2)",
                            rusqlite::params![v, now],
                        )?;
                    }
                    tx.commit()?;
                    Ok(())
                })
                .await
                .map_err(|e| StoreError::Task(e.to_string()))?
            }
            Backend::Postgres(p) => {
                let mut g = p.get().await?;
                let conn = g.as_mut().ok_or(StoreError::Task("no connection".into()))?;
                let tx = conn.client.transaction().await?;
                // One replica migrates at a time; the others wait, then find it done.
                tx.batch_execute("SELECT pg_advisory_xact_lock(7300021)")
                    .await?;
                tx.batch_execute(TABLE).await?;
                let found: i64 = tx
                    .query_one(
                        "SELECT COALESCE(MAX(version), 0)::BIGINT FROM schema_migrations",
                        &[],
                    )
                    .await?
                    .get(0);
                if found > known {
                    return Err(StoreError::Newer { found, known });
                }
                for (v, sql) in MIGRATIONS.iter().filter(|m| m.0 > found) {
                    tx.batch_execute(sql).await?;
                    tx.execute(
                        "INSERT INTO schema_migrations (version, applied_ms) VALUES ($1, $2)",
                        &[v, &now],
                    )
                    .await?;
                }
                tx.commit().await?;
                Ok(())
            }
        }
    }
}
