//! Nodes: registration, lookup, nonces, reports, counters, and which live
//! nodes can take what work.

use super::rows::{node_row, NODE_COLS};
use super::value::{int, opt_text, text, tier_col};
use super::{NodeChange, Registration, Val};
use super::{NodeRow, Report, Store, StoreError};
use crate::routing::{HeldBack, Needs};

/// The nodes of a tenant, live and reported, that fit a job's needs by
/// their facts (`$1` tenant, `$2` tier, `$3` microVM level, `$4` OCI, `$5`
/// architecture or '', `$6` live since), whether or not they take work. A
/// microVM tool's job fits by the node's microVMs, whatever its tier (a
/// Mac's are not inside tier 1, and are offered whatever tier it proved).
/// A microVM tool without `command:` needs its image's entrypoint read
/// (`runtime.oci` on Linux), which a Mac's runtime does itself.
/// (Each parameter is first compared with a column, so that PostgreSQL
/// takes it for a BIGINT.)
const FITS: &str = "tenant = $1 AND microvm_ready >= $3 AND (tier_routed >= $2 OR $3 >= 1) AND (oci_ready >= $4 OR ($3 = 1 AND microvm_ready = 1)) AND (arch = $5 OR $5 = '') AND last_seen_ms >= $6 AND gone_ms IS NULL AND last_report_ms IS NOT NULL AND removed_ms IS NULL";

fn fits_params(tenant: &str, needs: &Needs, live_since_ms: i64) -> Vec<Val> {
    vec![
        tenant.into(),
        i64::from(needs.tier).into(),
        needs.microvm_level().into(),
        needs.oci_level().into(),
        needs.arch.clone().unwrap_or_default().into(),
        live_since_ms.into(),
    ]
}

impl Store {
    /// Registers a node (idempotent for the same key and tenant). Returns
    /// the tenant the node belongs to (which may differ from `tenant` when
    /// the key was registered before under another one).
    pub async fn register_node(
        &self,
        id: &str,
        tenant: &str,
        public_key: &str,
        name: Option<&str>,
        approved: bool,
        now_ms: i64,
    ) -> Result<Registration, StoreError> {
        if let Some(n) = self.node_by_id(id).await? {
            return Ok(Registration::Known(n));
        }
        if let Some(n) = name {
            let held = self
                .query(
                    "SELECT id FROM nodes WHERE tenant = $1 AND name = $2 AND removed_ms IS NULL",
                    vec![tenant.into(), n.into()],
                )
                .await?;
            if let Some(r) = held.first() {
                return Ok(Registration::NameTaken(text(r, 0)?));
            }
        }
        let inserted = self.exec(
            "INSERT INTO nodes (id, tenant, public_key, name, registered_ms, last_seen_ms, approved) VALUES ($1, $2, $3, $4, $5, $5, $6) ON CONFLICT DO NOTHING",
            vec![id.into(), tenant.into(), public_key.into(), name.into(), now_ms.into(), approved.into()],
        )
        .await?;
        match self.node_by_id(id).await? {
            Some(n) if inserted == 1 => Ok(Registration::New(n)),
            Some(n) => Ok(Registration::Known(n)),
            // Another node took the name between the check and the insert.
            None => Ok(Registration::NameTaken(String::new())),
        }
    }

    /// A node by its id.
    pub async fn node_by_id(&self, id: &str) -> Result<Option<NodeRow>, StoreError> {
        let rows = self
            .query(
                &format!("SELECT {NODE_COLS} FROM nodes WHERE id = $1"),
                vec![id.into()],
            )
            .await?;
        rows.first().map(node_row).transpose()
    }

    /// Sets what an operator decides of a node; false when there is no
    /// such node (or it was removed).
    pub async fn set_node(
        &self,
        id: &str,
        change: NodeChange,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let (sql, params): (&str, Vec<Val>) = match change {
            NodeChange::Approve => ("UPDATE nodes SET approved = 1 WHERE id = $1 AND removed_ms IS NULL", vec![id.into()]),
            NodeChange::Drain(on) => ("UPDATE nodes SET drained = $2, drain_until_ms = NULL WHERE id = $1 AND removed_ms IS NULL", vec![id.into(), on.into()]),
            NodeChange::DrainBy(until) => ("UPDATE nodes SET drained = 1, drain_until_ms = $2 WHERE id = $1 AND removed_ms IS NULL", vec![id.into(), until.into()]),
            NodeChange::Remove => ("UPDATE nodes SET removed_ms = $2, drained = 1 WHERE id = $1 AND removed_ms IS NULL", vec![id.into(), now_ms.into()]),
        };
        Ok(self.exec(sql, params).await? == 1)
    }

    /// Replaces a node's key (signed for by the old one); false when the
    /// new key belongs to another node.
    pub async fn rotate_key(
        &self,
        id: &str,
        old_key: &str,
        new_key: &str,
    ) -> Result<bool, StoreError> {
        let taken = self
            .query(
                "SELECT id FROM nodes WHERE public_key = $1",
                vec![new_key.into()],
            )
            .await?;
        if !taken.is_empty() {
            return Ok(false);
        }
        Ok(self
            .exec(
                "UPDATE nodes SET public_key = $3 WHERE id = $1 AND public_key = $2 AND removed_ms IS NULL",
                vec![id.into(), old_key.into(), new_key.into()],
            )
            .await?
            == 1)
    }

    /// One node by id, or by name (among nodes not removed; a name two
    /// tenants' nodes share resolves to nothing).
    pub async fn node(&self, id_or_name: &str) -> Result<Option<NodeRow>, StoreError> {
        let sql =
            format!("SELECT {NODE_COLS} FROM nodes WHERE id = $1 OR (name = $1 AND removed_ms IS NULL) ORDER BY id LIMIT 2");
        let rows = self.query(&sql, vec![id_or_name.into()]).await?;
        match rows.len() {
            1 => Ok(Some(node_row(&rows[0])?)),
            _ => {
                // Ambiguous names resolve to nothing; ids are unique.
                Ok(rows
                    .iter()
                    .map(node_row)
                    .collect::<Result<Vec<_>, _>>()?
                    .into_iter()
                    .find(|n| n.id == id_or_name))
            }
        }
    }

    /// A page of nodes not removed, of one tenant or all, by tenant and id:
    /// at most `limit` after the `(tenant, id)` cursor.
    /// Only nodes heard from since `seen_since_ms` (`i64::MIN`: all).
    pub async fn nodes_page(
        &self,
        tenant: Option<&str>,
        after: Option<(&str, &str)>,
        limit: i64,
        seen_since_ms: i64,
    ) -> Result<Vec<NodeRow>, StoreError> {
        let (t, id) = after.unwrap_or(("", ""));
        let rows = self
            .query(
                &format!("SELECT {NODE_COLS} FROM nodes WHERE removed_ms IS NULL AND ($1 = '' OR tenant = $1) AND (tenant > $2 OR (tenant = $2 AND id > $3)) AND last_seen_ms >= $5 ORDER BY tenant, id LIMIT $4"),
                vec![tenant.unwrap_or("").into(), t.into(), id.into(), limit.into(), seen_since_ms.into()],
            )
            .await?;
        rows.iter().map(node_row).collect()
    }

    /// Nodes, of one tenant or all.
    pub async fn nodes(&self, tenant: Option<&str>) -> Result<Vec<NodeRow>, StoreError> {
        let rows = match tenant {
            Some(t) => {
                self.query_long(
                    &format!(
                        "SELECT {NODE_COLS} FROM nodes WHERE tenant = $1 AND removed_ms IS NULL ORDER BY tenant, name, id"
                    ),
                    vec![t.into()],
                )
                .await?
            }
            None => {
                self.query_long(
                    &format!("SELECT {NODE_COLS} FROM nodes WHERE removed_ms IS NULL ORDER BY tenant, name, id"),
                    vec![],
                )
                .await?
            }
        };
        rows.iter().map(node_row).collect()
    }

    /// Remembers a nonce until `expires_ms`; false when it was seen before.
    pub async fn use_nonce(
        &self,
        node: &str,
        nonce: &str,
        expires_ms: i64,
    ) -> Result<bool, StoreError> {
        Ok(self
            .exec(
                "INSERT INTO nonces (node_id, nonce, expires_ms) VALUES ($1, $2, $3) ON CONFLICT (node_id, nonce) DO NOTHING",
                vec![node.into(), nonce.into(), expires_ms.into()],
            )
            .await?
            == 1)
    }

    /// Forgets nonces whose window has closed.
    pub async fn expire_nonces(&self, now_ms: i64) -> Result<u64, StoreError> {
        self.exec_long(
            "DELETE FROM nonces WHERE expires_ms < $1",
            vec![now_ms.into()],
        )
        .await
    }

    /// Records that a node was heard from.
    pub async fn touch(&self, node: &str, now_ms: i64) -> Result<(), StoreError> {
        self.exec(
            "UPDATE nodes SET last_seen_ms = $1 WHERE id = $2",
            vec![now_ms.into(), node.into()],
        )
        .await?;
        Ok(())
    }

    /// Records that a node was heard from again after it was taken for
    /// gone.
    pub async fn back(&self, node: &str, now_ms: i64) -> Result<(), StoreError> {
        self.exec(
            "UPDATE nodes SET last_seen_ms = $1, gone_ms = NULL WHERE id = $2",
            vec![now_ms.into(), node.into()],
        )
        .await?;
        Ok(())
    }

    /// Takes a node for gone since `at_ms` when the store still has it
    /// last heard from at `seen_ms` (nothing came from it since, on any
    /// replica); returns whether it did.
    pub async fn gone(&self, node: &str, seen_ms: i64, at_ms: i64) -> Result<bool, StoreError> {
        Ok(self
            .exec(
                "UPDATE nodes SET gone_ms = $1 WHERE id = $2 AND last_seen_ms = $3 AND gone_ms IS NULL",
                vec![at_ms.into(), node.into(), seen_ms.into()],
            )
            .await?
            == 1)
    }

    /// Saves a sanitized report.
    pub async fn save_report(&self, r: Report<'_>) -> Result<(), StoreError> {
        self.exec(
            "UPDATE nodes SET facts = $1, tier_routed = $2, microvm_ready = $3, oci_ready = $4, arch = $5, dropped_last = $6, dropped_total = dropped_total + $6, reports = reports + 1, last_report_ms = $7, last_seen_ms = $7, psec = $9, build = $10 WHERE id = $8",
            vec![
                r.facts_json.into(),
                i64::from(r.tier_routed).into(),
                r.microvm_level.into(),
                r.oci_level.into(),
                r.arch.into(),
                r.dropped.into(),
                r.now_ms.into(),
                r.node.into(),
                r.psec.into(),
                r.build.into(),
            ],
        )
        .await?;
        Ok(())
    }

    /// Adds to a named counter.
    pub async fn count(&self, name: &str, n: i64) -> Result<(), StoreError> {
        self.exec(
            "INSERT INTO counters (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = counters.value + excluded.value",
            vec![name.into(), n.into()],
        )
        .await?;
        Ok(())
    }

    /// A named counter.
    pub async fn counter(&self, name: &str) -> Result<i64, StoreError> {
        let rows = self
            .query(
                "SELECT value FROM counters WHERE name = $1",
                vec![name.into()],
            )
            .await?;
        rows.first().map_or(Ok(0), |r| int(r, 0))
    }

    /// How many live nodes of a tenant can take work with these needs: an
    /// operator approved them (or their tenant asks for no approval), and
    /// they are not drained.
    pub async fn eligible_nodes(
        &self,
        tenant: &str,
        needs: &Needs,
        live_since_ms: i64,
    ) -> Result<i64, StoreError> {
        let rows = self
            .query_long(
                &format!(
                    "SELECT COUNT(*) FROM nodes WHERE {FITS} AND approved = 1 AND drained = 0"
                ),
                fits_params(tenant, needs, live_since_ms),
            )
            .await?;
        rows.first().map_or(Ok(0), |r| int(r, 0))
    }

    /// Live nodes of a tenant that fit these needs but take no work now:
    /// they wait for an operator's approval, or are drained (a few, by name).
    pub async fn held_back(
        &self,
        tenant: &str,
        needs: &Needs,
        live_since_ms: i64,
    ) -> Result<Vec<HeldBack>, StoreError> {
        let rows = self
            .query_long(
                &format!("SELECT id, name, approved FROM nodes WHERE {FITS} AND (approved = 0 OR drained = 1) ORDER BY name, id LIMIT 5"),
                fits_params(tenant, needs, live_since_ms),
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok(HeldBack {
                    node: match opt_text(r, 1)? {
                        Some(n) => n,
                        None => text(r, 0)?,
                    },
                    pending: int(r, 2)? == 0,
                })
            })
            .collect()
    }

    /// Figures for `/metrics`: nodes by tier and state, queue depth,
    /// jobs by state, the lease counters.
    pub async fn figures(
        &self,
        live_since_ms: i64,
    ) -> Result<crate::metrics::StoreFigures, StoreError> {
        let mut f = crate::metrics::StoreFigures::default();
        for r in self
            .query_long(
                "SELECT CASE WHEN approved = 1 THEN tier_routed ELSE 0 END, approved, drained, CASE WHEN last_seen_ms >= $1 AND gone_ms IS NULL THEN 1 ELSE 0 END, COUNT(*) FROM nodes WHERE removed_ms IS NULL GROUP BY 1, 2, 3, 4",
                vec![live_since_ms.into()],
            )
            .await?
        {
            let state = match (int(&r, 1)? != 0, int(&r, 2)? != 0, int(&r, 3)? != 0) {
                (false, _, _) => "pending approval",
                (true, true, _) => "draining",
                (true, false, true) => "up",
                (true, false, false) => "down",
            };
            *f.nodes.entry((tier_col(&r, 0)?, state)).or_default() += int(&r, 4)?;
        }
        for r in self
            .query_long(
                "SELECT tier_need, COUNT(*) FROM jobs WHERE state = 'queued' GROUP BY tier_need",
                vec![],
            )
            .await?
        {
            f.queued.insert(tier_col(&r, 0)?, int(&r, 1)?);
        }
        for r in self
            .query_long("SELECT state, COUNT(*) FROM jobs GROUP BY state", vec![])
            .await?
        {
            f.jobs.insert(text(&r, 0)?, int(&r, 1)?);
        }
        // Windows nodes: whether PSEC is there.
        for r in self
            .query_long(
                "SELECT id, psec, COALESCE(build, '') FROM nodes WHERE psec IS NOT NULL AND removed_ms IS NULL ORDER BY id LIMIT 10000",
                vec![],
            )
            .await?
        {
            f.psec.push(crate::metrics::PsecNode {
                node: text(&r, 0)?,
                contract: text(&r, 1)?,
                build: text(&r, 2)?,
            });
        }
        f.leases_granted = self.counter(super::LEASES_GRANTED).await?;
        f.leases_expired = self.counter(super::LEASES_EXPIRED).await?;
        Ok(f)
    }

    /// Whether the store answers.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.query("SELECT 1", vec![]).await.map(|_| ())
    }

    /// What a tenant's live nodes that take work offer: (routed tier,
    /// microVM level, oci, arch).
    pub async fn live_offers(
        &self,
        tenant: &str,
        live_since_ms: i64,
    ) -> Result<Vec<(u8, i64, bool, Option<String>)>, StoreError> {
        let rows = self
            .query_long(
                "SELECT tier_routed, microvm_ready, oci_ready, arch FROM nodes WHERE tenant = $1 AND last_seen_ms >= $2 AND gone_ms IS NULL AND last_report_ms IS NOT NULL AND approved = 1 AND drained = 0 AND removed_ms IS NULL LIMIT 10000",
                vec![tenant.into(), live_since_ms.into()],
            )
            .await?;
        rows.iter()
            .map(|r| {
                let a = text(r, 3)?;
                Ok((
                    tier_col(r, 0)?,
                    int(r, 1)?,
                    int(r, 2)? != 0,
                    (!a.is_empty()).then_some(a),
                ))
            })
            .collect()
    }
}
