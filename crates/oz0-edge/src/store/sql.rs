//! Running one statement on either backend: `$N` parameters rewritten for
//! SQLite, statements prepared once per PostgreSQL connection, rows read
//! back as [`Val`]s, and the row lock only PostgreSQL takes.

use super::postgres::PgConn;
use super::{Backend, Row, Store, StoreError, Val};

fn sqlite_sql(sql: &str) -> String {
    // `?N` is SQLite's explicitly numbered parameter; `$N` would be a name.
    sql.replace('$', "?")
}

impl Store {
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

    pub(super) fn lock_clause(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite(_) => "",
            Backend::Postgres(_) => "FOR UPDATE SKIP LOCKED",
        }
    }
}
