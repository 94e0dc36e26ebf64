//! Running one statement on either backend: `$N` parameters rewritten for
//! SQLite, statements prepared once per PostgreSQL connection, rows read
//! back as [`Val`]s, and the row lock only PostgreSQL takes.
//!
//! A SQLite statement of bounded work ([`Store::exec`], [`Store::query`]:
//! a row by its key, a page under a `LIMIT`) runs on the async worker that
//! asks, when the connection is free: a hand-off to a blocking thread and
//! back costs more than such a statement. When the connection is busy (a
//! sweep, another worker's statement), and for statements whose work
//! grows with the store ([`Store::exec_long`], [`Store::query_long`]:
//! sweeps, counts, whole-table reads), it runs on a blocking thread, so an
//! async worker never waits for the connection.
//!
//! SQLite checkpoints its WAL within the commit that fills 1,000 pages:
//! when that statement runs on a worker, the worker waits for the
//! checkpoint (its writes and their `fsync`) and the runtime's other
//! workers take its tasks. Checkpointing each second on a blocking thread
//! instead let the WAL grow between checkpoints and made each one longer:
//! the `history` benchmark's p99 rose from 7 to 12–20 ms at a fleet's
//! 500 polls a second, and from 18–26 to 34–57 ms saturated.

use std::sync::{Arc, Mutex, TryLockError};

use super::postgres::PgConn;
use super::{Backend, Row, Store, StoreError, Val};

fn sqlite_sql(sql: &str) -> String {
    // `?N` is SQLite's explicitly numbered parameter; `$N` would be a name.
    sql.replace('$', "?")
}

/// How much work a statement may do, which says where it runs on SQLite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Work {
    /// Bounded by a key or a `LIMIT`: on the asking worker when the
    /// connection is free.
    Bounded,
    /// Grows with the store: always on a blocking thread.
    Grows,
}

/// Runs `f` with the SQLite connection, where `work` says.
async fn on_sqlite<T: Send + 'static>(
    c: &Arc<Mutex<rusqlite::Connection>>,
    work: Work,
    f: impl FnOnce(&rusqlite::Connection) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    if work == Work::Bounded {
        match c.try_lock() {
            Ok(conn) => return f(&conn),
            Err(TryLockError::Poisoned(p)) => return f(&p.into_inner()),
            Err(TryLockError::WouldBlock) => {}
        }
    }
    let c = c.clone();
    tokio::task::spawn_blocking(move || f(&c.lock().unwrap_or_else(|p| p.into_inner())))
        .await
        .map_err(|e| StoreError::Task(e.to_string()))?
}

fn sqlite_exec(conn: &rusqlite::Connection, sql: &str, params: &[Val]) -> Result<u64, StoreError> {
    let mut st = conn.prepare_cached(sql)?;
    Ok(st.execute(rusqlite::params_from_iter(params.iter()))? as u64)
}

fn sqlite_query(
    conn: &rusqlite::Connection,
    sql: &str,
    params: &[Val],
) -> Result<Vec<Row>, StoreError> {
    use rusqlite::types::ValueRef;
    let mut st = conn.prepare_cached(sql)?;
    let n = st.column_count();
    let mut rows = st.query(rusqlite::params_from_iter(params.iter()))?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        let mut row = Vec::with_capacity(n);
        for i in 0..n {
            row.push(match r.get_ref(i)? {
                ValueRef::Null => Val::Null,
                ValueRef::Integer(v) => Val::Int(v),
                ValueRef::Text(t) => Val::Text(String::from_utf8_lossy(t).into_owned()),
                _ => return Err(StoreError::Column(i)),
            });
        }
        out.push(row);
    }
    Ok(out)
}

impl Store {
    /// Runs a statement of bounded work (a row by its key, rows under a
    /// `LIMIT`); returns the rows it changed.
    pub async fn exec(&self, sql: &str, params: Vec<Val>) -> Result<u64, StoreError> {
        self.exec_as(Work::Bounded, sql, params).await
    }

    /// Runs a statement whose work grows with the store (a sweep); returns
    /// the rows it changed.
    pub async fn exec_long(&self, sql: &str, params: Vec<Val>) -> Result<u64, StoreError> {
        self.exec_as(Work::Grows, sql, params).await
    }

    /// Runs a query of bounded work; returns its rows.
    pub async fn query(&self, sql: &str, params: Vec<Val>) -> Result<Vec<Row>, StoreError> {
        self.query_as(Work::Bounded, sql, params).await
    }

    /// Runs a query whose work grows with the store (a count, a whole
    /// table); returns its rows.
    pub async fn query_long(&self, sql: &str, params: Vec<Val>) -> Result<Vec<Row>, StoreError> {
        self.query_as(Work::Grows, sql, params).await
    }

    async fn exec_as(&self, work: Work, sql: &str, params: Vec<Val>) -> Result<u64, StoreError> {
        match &self.backend {
            Backend::Sqlite(c) => {
                let sql = sqlite_sql(sql);
                on_sqlite(c, work, move |conn| sqlite_exec(conn, &sql, &params)).await
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

    async fn query_as(
        &self,
        work: Work,
        sql: &str,
        params: Vec<Val>,
    ) -> Result<Vec<Row>, StoreError> {
        match &self.backend {
            Backend::Sqlite(c) => {
                let sql = sqlite_sql(sql);
                on_sqlite(c, work, move |conn| sqlite_query(conn, &sql, &params)).await
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

    pub(super) fn lock_clause(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite(_) => "",
            Backend::Postgres(_) => "FOR UPDATE SKIP LOCKED",
        }
    }
}
