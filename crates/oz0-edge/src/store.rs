//! The edge's store: SQLite (embedded, the default) or PostgreSQL (shared by
//! several edge replicas), chosen by URL, through one code path.
//!
//! Every query is written once, in the SQL both speak (`$N` parameters,
//! `BIGINT` and `TEXT` columns, `ON CONFLICT`, `RETURNING`); the only
//! difference is the row lock PostgreSQL takes when handing out a job
//! (`FOR UPDATE SKIP LOCKED`), which SQLite's single writer makes moot.
//! Leasing is one `UPDATE … WHERE id = (SELECT …) AND <still free>`
//! statement, so two replicas can never hand out the same job at once.
//! The schema is versioned ([`MIGRATIONS`]); each replica applies what is
//! missing at start, under a lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::routing::Needs;

/// Connections a PostgreSQL store keeps open.
pub const POSTGRES_CONNECTIONS: usize = 8;

/// Schema migrations, in order. Never edit one that shipped: add another.
pub const MIGRATIONS: &[(i64, &str)] = &[(
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
)];

/// A store failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL names no store this edge opens.
    #[error("store URL starting {0:?} is not one this edge opens: use sqlite:PATH, sqlite::memory: or postgres://USER@HOST/DB")]
    Url(String),
    /// SQLite failed.
    #[error("SQLite store: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL failed.
    #[error("PostgreSQL store: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    /// The schema is newer than this edge.
    #[error("the store's schema is at version {found}, newer than this edge's {known}: run the newer edge release")]
    Newer {
        /// In the store.
        found: i64,
        /// Known here.
        known: i64,
    },
    /// A row did not have the expected shape.
    #[error("store row: column {0} has an unexpected type (is the schema from another release?)")]
    Column(usize),
    /// The blocking task died.
    #[error("store task failed: {0}")]
    Task(String),
}

/// A value passed to or read from a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Val {
    /// NULL.
    Null,
    /// BIGINT.
    Int(i64),
    /// TEXT.
    Text(String),
}

impl From<i64> for Val {
    fn from(v: i64) -> Val {
        Val::Int(v)
    }
}
impl From<bool> for Val {
    fn from(v: bool) -> Val {
        Val::Int(i64::from(v))
    }
}
impl From<&str> for Val {
    fn from(v: &str) -> Val {
        Val::Text(v.to_string())
    }
}
impl From<String> for Val {
    fn from(v: String) -> Val {
        Val::Text(v)
    }
}
impl<T: Into<Val>> From<Option<T>> for Val {
    fn from(v: Option<T>) -> Val {
        v.map_or(Val::Null, Into::into)
    }
}

impl rusqlite::ToSql for Val {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, Value, ValueRef};
        Ok(match self {
            Val::Null => ToSqlOutput::Owned(Value::Null),
            Val::Int(i) => ToSqlOutput::Owned(Value::Integer(*i)),
            Val::Text(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
        })
    }
}

impl tokio_postgres::types::ToSql for Val {
    fn to_sql(
        &self,
        ty: &tokio_postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Val::Null => Ok(tokio_postgres::types::IsNull::Yes),
            Val::Int(i) => i.to_sql(ty, out),
            Val::Text(s) => s.to_sql(ty, out),
        }
    }
    fn accepts(_ty: &tokio_postgres::types::Type) -> bool {
        true
    }
    tokio_postgres::types::to_sql_checked!();
}

/// A row read back.
pub type Row = Vec<Val>;

fn int(r: &Row, i: usize) -> Result<i64, StoreError> {
    match r.get(i) {
        Some(Val::Int(v)) => Ok(*v),
        _ => Err(StoreError::Column(i)),
    }
}
/// A tier column, clamped to the tiers there are (0 to 2).
fn tier_col(r: &Row, i: usize) -> Result<u8, StoreError> {
    Ok(match int(r, i)? {
        ..=0 => 0,
        1 => 1,
        _ => 2,
    })
}
fn opt_int(r: &Row, i: usize) -> Result<Option<i64>, StoreError> {
    match r.get(i) {
        Some(Val::Int(v)) => Ok(Some(*v)),
        Some(Val::Null) => Ok(None),
        _ => Err(StoreError::Column(i)),
    }
}
fn text(r: &Row, i: usize) -> Result<String, StoreError> {
    match r.get(i) {
        Some(Val::Text(v)) => Ok(v.clone()),
        _ => Err(StoreError::Column(i)),
    }
}
fn opt_text(r: &Row, i: usize) -> Result<Option<String>, StoreError> {
    match r.get(i) {
        Some(Val::Text(v)) => Ok(Some(v.clone())),
        Some(Val::Null) => Ok(None),
        _ => Err(StoreError::Column(i)),
    }
}

struct PgConn {
    client: tokio_postgres::Client,
    statements: HashMap<String, tokio_postgres::Statement>,
}

struct PgPool {
    config: tokio_postgres::Config,
    conns: Vec<tokio::sync::Mutex<Option<PgConn>>>,
    next: AtomicUsize,
}

impl PgPool {
    async fn connect(config: &tokio_postgres::Config) -> Result<PgConn, StoreError> {
        let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                eprintln!("oz0-edge: PostgreSQL connection closed: {e}");
            }
        });
        Ok(PgConn {
            client,
            statements: HashMap::new(),
        })
    }

    async fn get(&self) -> Result<tokio::sync::MutexGuard<'_, Option<PgConn>>, StoreError> {
        let n = self.conns.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut guard = None;
        for k in 0..n {
            if let Ok(g) = self.conns[(start + k) % n].try_lock() {
                guard = Some(g);
                break;
            }
        }
        let mut g = match guard {
            Some(g) => g,
            None => self.conns[start % n].lock().await,
        };
        if g.as_ref().is_none_or(|c| c.client.is_closed()) {
            *g = Some(Self::connect(&self.config).await?);
        }
        Ok(g)
    }
}

#[derive(Clone)]
enum Backend {
    Sqlite(Arc<Mutex<rusqlite::Connection>>),
    Postgres(Arc<PgPool>),
}

/// The store, cheap to clone.
#[derive(Clone)]
pub struct Store {
    backend: Backend,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.backend {
            Backend::Sqlite(_) => "Store(sqlite)",
            Backend::Postgres(_) => "Store(postgres)",
        })
    }
}

fn sqlite_sql(sql: &str) -> String {
    // `?N` is SQLite's explicitly numbered parameter; `$N` would be a name.
    sql.replace('$', "?")
}

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
    /// `isolation.microvm=ready`.
    pub microvm_ready: bool,
    /// `runtime.oci=ready`.
    pub oci_ready: bool,
    /// Architecture ('' when unknown).
    pub arch: String,
    /// Reports accepted.
    pub reports: i64,
    /// Fields dropped from the last report.
    pub dropped_last: i64,
    /// Fields dropped, all reports.
    pub dropped_total: i64,
}

const NODE_COLS: &str = "id, tenant, public_key, name, registered_ms, last_seen_ms, last_report_ms, facts, tier_routed, microvm_ready, oci_ready, arch, reports, dropped_last, dropped_total";

fn node_row(r: &Row) -> Result<NodeRow, StoreError> {
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
        microvm_ready: int(r, 9)? != 0,
        oci_ready: int(r, 10)? != 0,
        arch: text(r, 11)?,
        reports: int(r, 12)?,
        dropped_last: int(r, 13)?,
        dropped_total: int(r, 14)?,
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
}

/// A job's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRow {
    /// Job id.
    pub id: String,
    /// Tenant.
    pub tenant: String,
    /// `queued`, `leased`, `succeeded` or `failed`.
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
    /// Labels.
    pub microvm_ready: bool,
    /// Labels.
    pub oci_ready: bool,
    /// Labels.
    pub arch: &'a str,
    /// Fields dropped.
    pub dropped: i64,
    /// When.
    pub now_ms: i64,
}

impl Store {
    /// Opens `sqlite:PATH`, `sqlite::memory:` or `postgres://…` and applies
    /// the missing migrations.
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        let store = if let Some(path) = url.strip_prefix("sqlite:") {
            let path = path.to_string();
            let conn =
                tokio::task::spawn_blocking(move || -> Result<rusqlite::Connection, StoreError> {
                    let conn = if path == ":memory:" {
                        rusqlite::Connection::open_in_memory()?
                    } else {
                        rusqlite::Connection::open(&path)?
                    };
                    conn.busy_timeout(std::time::Duration::from_secs(5))?;
                    conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;")?;
                    Ok(conn)
                })
                .await
                .map_err(|e| StoreError::Task(e.to_string()))??;
            Store {
                backend: Backend::Sqlite(Arc::new(Mutex::new(conn))),
            }
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let config: tokio_postgres::Config = url.parse()?;
            let mut conns = Vec::new();
            conns.push(tokio::sync::Mutex::new(Some(
                PgPool::connect(&config).await?,
            )));
            for _ in 1..POSTGRES_CONNECTIONS {
                conns.push(tokio::sync::Mutex::new(None));
            }
            Store {
                backend: Backend::Postgres(Arc::new(PgPool {
                    config,
                    conns,
                    next: AtomicUsize::new(0),
                })),
            }
        } else {
            return Err(StoreError::Url(url.chars().take(10).collect()));
        };
        store.migrate().await?;
        Ok(store)
    }

    /// `sqlite` or `postgres`.
    pub fn kind(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    async fn migrate(&self) -> Result<(), StoreError> {
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

    /// Runs a statement; returns the rows it changed.
    pub async fn exec(&self, sql: &str, params: Vec<Val>) -> Result<u64, StoreError> {
        match &self.backend {
            Backend::Sqlite(c) => {
                let c = c.clone();
                let sql = sqlite_sql(sql);
                tokio::task::spawn_blocking(move || -> Result<u64, StoreError> {
                    let conn = c.lock().unwrap_or_else(|p| p.into_inner());
                    let mut st = conn.prepare_cached(&sql)?;
                    Ok(st.execute(rusqlite::params_from_iter(params.iter()))? as u64)
                })
                .await
                .map_err(|e| StoreError::Task(e.to_string()))?
            }
            Backend::Postgres(p) => {
                let mut g = p.get().await?;
                let conn = g.as_mut().ok_or(StoreError::Task("no connection".into()))?;
                let st = Self::pg_statement(conn, sql).await?;
                let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                    params.iter().map(|v| v as _).collect();
                Ok(conn.client.execute(&st, &refs).await?)
            }
        }
    }

    /// Runs a query; returns its rows.
    pub async fn query(&self, sql: &str, params: Vec<Val>) -> Result<Vec<Row>, StoreError> {
        match &self.backend {
            Backend::Sqlite(c) => {
                let c = c.clone();
                let sql = sqlite_sql(sql);
                tokio::task::spawn_blocking(move || -> Result<Vec<Row>, StoreError> {
                    use rusqlite::types::ValueRef;
                    let conn = c.lock().unwrap_or_else(|p| p.into_inner());
                    let mut st = conn.prepare_cached(&sql)?;
                    let n = st.column_count();
                    let mut rows = st.query(rusqlite::params_from_iter(params.iter()))?;
                    let mut out = Vec::new();
                    while let Some(r) = rows.next()? {
                        let mut row = Vec::with_capacity(n);
                        for i in 0..n {
                            row.push(match r.get_ref(i)? {
                                ValueRef::Null => Val::Null,
                                ValueRef::Integer(v) => Val::Int(v),
                                ValueRef::Text(t) => {
                                    Val::Text(String::from_utf8_lossy(t).into_owned())
                                }
                                _ => return Err(StoreError::Column(i)),
                            });
                        }
                        out.push(row);
                    }
                    Ok(out)
                })
                .await
                .map_err(|e| StoreError::Task(e.to_string()))?
            }
            Backend::Postgres(p) => {
                use tokio_postgres::types::Type;
                let mut g = p.get().await?;
                let conn = g.as_mut().ok_or(StoreError::Task("no connection".into()))?;
                let st = Self::pg_statement(conn, sql).await?;
                let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                    params.iter().map(|v| v as _).collect();
                let rows = conn.client.query(&st, &refs).await?;
                let mut out = Vec::with_capacity(rows.len());
                for r in rows {
                    let mut row = Vec::with_capacity(r.len());
                    for (i, col) in r.columns().iter().enumerate() {
                        let ty = col.type_();
                        row.push(if *ty == Type::INT8 {
                            r.try_get::<_, Option<i64>>(i)?.map_or(Val::Null, Val::Int)
                        } else if *ty == Type::INT4 {
                            r.try_get::<_, Option<i32>>(i)?
                                .map_or(Val::Null, |v| Val::Int(v.into()))
                        } else if *ty == Type::TEXT || *ty == Type::VARCHAR {
                            r.try_get::<_, Option<String>>(i)?
                                .map_or(Val::Null, Val::Text)
                        } else {
                            return Err(StoreError::Column(i));
                        });
                    }
                    out.push(row);
                }
                Ok(out)
            }
        }
    }

    async fn pg_statement(
        conn: &mut PgConn,
        sql: &str,
    ) -> Result<tokio_postgres::Statement, StoreError> {
        if let Some(s) = conn.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = conn.client.prepare(sql).await?;
        conn.statements.insert(sql.to_string(), s.clone());
        Ok(s)
    }

    fn lock_clause(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite(_) => "",
            Backend::Postgres(_) => "FOR UPDATE SKIP LOCKED",
        }
    }

    // ---- nodes -------------------------------------------------------------

    /// Registers a node (idempotent for the same key and tenant). Returns
    /// the tenant the node belongs to (which may differ from `tenant` when
    /// the key was registered before under another one).
    pub async fn register_node(
        &self,
        id: &str,
        tenant: &str,
        public_key: &str,
        name: Option<&str>,
        now_ms: i64,
    ) -> Result<String, StoreError> {
        self.exec(
            "INSERT INTO nodes (id, tenant, public_key, name, registered_ms, last_seen_ms) VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT (id) DO NOTHING",
            vec![id.into(), tenant.into(), public_key.into(), name.into(), now_ms.into()],
        )
        .await?;
        let rows = self
            .query("SELECT tenant FROM nodes WHERE id = $1", vec![id.into()])
            .await?;
        let row = rows.first().ok_or(StoreError::Column(0))?;
        text(row, 0)
    }

    /// One node by id, or by name.
    pub async fn node(&self, id_or_name: &str) -> Result<Option<NodeRow>, StoreError> {
        let sql =
            format!("SELECT {NODE_COLS} FROM nodes WHERE id = $1 OR name = $1 ORDER BY id LIMIT 2");
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

    /// Nodes, of one tenant or all.
    pub async fn nodes(&self, tenant: Option<&str>) -> Result<Vec<NodeRow>, StoreError> {
        let rows = match tenant {
            Some(t) => {
                self.query(
                    &format!(
                        "SELECT {NODE_COLS} FROM nodes WHERE tenant = $1 ORDER BY tenant, name, id"
                    ),
                    vec![t.into()],
                )
                .await?
            }
            None => {
                self.query(
                    &format!("SELECT {NODE_COLS} FROM nodes ORDER BY tenant, name, id"),
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
        self.exec(
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

    /// Saves a sanitized report.
    pub async fn save_report(&self, r: Report<'_>) -> Result<(), StoreError> {
        self.exec(
            "UPDATE nodes SET facts = $1, tier_routed = $2, microvm_ready = $3, oci_ready = $4, arch = $5, dropped_last = $6, dropped_total = dropped_total + $6, reports = reports + 1, last_report_ms = $7, last_seen_ms = $7 WHERE id = $8",
            vec![
                r.facts_json.into(),
                i64::from(r.tier_routed).into(),
                r.microvm_ready.into(),
                r.oci_ready.into(),
                r.arch.into(),
                r.dropped.into(),
                r.now_ms.into(),
                r.node.into(),
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

    /// How many live nodes of a tenant can take work with these needs.
    pub async fn eligible_nodes(
        &self,
        tenant: &str,
        needs: &Needs,
        live_since_ms: i64,
    ) -> Result<i64, StoreError> {
        let rows = self
            .query(
                "SELECT COUNT(*) FROM nodes WHERE tenant = $1 AND tier_routed >= $2 AND microvm_ready >= $3 AND oci_ready >= $4 AND (arch = $5 OR $5 = '') AND last_seen_ms >= $6 AND last_report_ms IS NOT NULL",
                vec![
                    tenant.into(),
                    i64::from(needs.tier).into(),
                    needs.microvm.into(),
                    needs.oci.into(),
                    needs.arch.clone().unwrap_or_default().into(),
                    live_since_ms.into(),
                ],
            )
            .await?;
        rows.first().map_or(Ok(0), |r| int(r, 0))
    }

    /// What a tenant's live nodes offer: (routed tier, microvm, oci, arch).
    pub async fn live_offers(
        &self,
        tenant: &str,
        live_since_ms: i64,
    ) -> Result<Vec<(u8, bool, bool, Option<String>)>, StoreError> {
        let rows = self
            .query(
                "SELECT tier_routed, microvm_ready, oci_ready, arch FROM nodes WHERE tenant = $1 AND last_seen_ms >= $2 AND last_report_ms IS NOT NULL LIMIT 10000",
                vec![tenant.into(), live_since_ms.into()],
            )
            .await?;
        rows.iter()
            .map(|r| {
                let a = text(r, 3)?;
                Ok((
                    tier_col(r, 0)?,
                    int(r, 1)? != 0,
                    int(r, 2)? != 0,
                    (!a.is_empty()).then_some(a),
                ))
            })
            .collect()
    }

    // ---- jobs --------------------------------------------------------------

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
            "UPDATE jobs SET state = 'leased', node_id = $1, lease_id = $2, lease_until_ms = $3, attempts = attempts + 1
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
        succeeded: bool,
        exit_code: Option<i64>,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        Ok(self
            .exec(
                "UPDATE jobs SET state = $1, exit_code = $2, done_ms = $3, lease_until_ms = NULL WHERE id = $4 AND node_id = $5 AND lease_id = $6 AND state = 'leased' AND lease_until_ms >= $3",
                vec![
                    if succeeded { "succeeded" } else { "failed" }.into(),
                    exit_code.into(),
                    now_ms.into(),
                    job.into(),
                    node.into(),
                    lease_id.into(),
                ],
            )
            .await?
            == 1)
    }

    /// One job of a tenant.
    pub async fn job(&self, tenant: &str, id: &str) -> Result<Option<JobRow>, StoreError> {
        let rows = self
            .query(
                "SELECT id, tenant, state, tier_need, node_id, lease_until_ms, attempts, exit_code FROM jobs WHERE tenant = $1 AND id = $2",
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
                })
            })
            .transpose()
    }
}
