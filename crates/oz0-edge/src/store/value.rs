//! Values passed to and read from queries ([`Val`], [`Row`]), their
//! conversion into either driver's parameters, and the typed readers of a
//! row's columns.

use super::StoreError;

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

pub(super) fn int(r: &Row, i: usize) -> Result<i64, StoreError> {
    match r.get(i) {
        Some(Val::Int(v)) => Ok(*v),
        _ => Err(StoreError::Column(i)),
    }
}
/// A tier column, clamped to the tiers there are (0 to 2).
pub(super) fn tier_col(r: &Row, i: usize) -> Result<u8, StoreError> {
    Ok(match int(r, i)? {
        ..=0 => 0,
        1 => 1,
        _ => 2,
    })
}
pub(super) fn opt_int(r: &Row, i: usize) -> Result<Option<i64>, StoreError> {
    match r.get(i) {
        Some(Val::Int(v)) => Ok(Some(*v)),
        Some(Val::Null) => Ok(None),
        _ => Err(StoreError::Column(i)),
    }
}
pub(super) fn text(r: &Row, i: usize) -> Result<String, StoreError> {
    match r.get(i) {
        Some(Val::Text(v)) => Ok(v.clone()),
        _ => Err(StoreError::Column(i)),
    }
}
pub(super) fn opt_text(r: &Row, i: usize) -> Result<Option<String>, StoreError> {
    match r.get(i) {
        Some(Val::Text(v)) => Ok(Some(v.clone())),
        Some(Val::Null) => Ok(None),
        _ => Err(StoreError::Column(i)),
    }
}
