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

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

mod jobs;
mod nodes;
mod postgres;
mod rows;
mod schema;
mod sql;
mod value;

pub use jobs::{
    bounded_tail, JobOutput, NewJob, Piece, Queued, Stream, Swept, LEASES_EXPIRED, LEASES_GRANTED,
};
pub use rows::{JobEnd, JobRow, LeasedJob, NodeChange, NodeRow, Registration, Report};
pub use schema::MIGRATIONS;
pub use value::{Row, Val};

use postgres::PgPool;

/// Makes the SQLite file its owner's alone before SQLite opens it (its
/// journal and WAL files take its mode): it holds job payloads and their
/// secrets. A file readable by others is made private, with a warning.
fn private_file(path: &std::path::Path) -> Result<(), StoreError> {
    let io = |e: std::io::Error| StoreError::File(format!("{}: {e}", path.display()));
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o600)
            .custom_flags(i32::try_from(rustix::fs::OFlags::NOFOLLOW.bits()).unwrap_or(0))
            .open(path)
            .map_err(io)?;
        let mode = f.metadata().map_err(io)?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            f.set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(io)?;
            crate::log::warn(
                &format!(
                    "{} had mode {mode:o}, readable by others; made 0600",
                    path.display()
                ),
                None,
            );
            for side in ["-wal", "-shm", "-journal"] {
                let mut p = path.as_os_str().to_owned();
                p.push(side);
                let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600));
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = io;
    }
    Ok(())
}

/// A SQLite file another process holds (another edge on the same file) is
/// said as such, with the fix.
fn held_elsewhere(e: rusqlite::Error, path: &str) -> StoreError {
    if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) {
        StoreError::File(format!(
            "{path} is held by another process (another edge?): one edge opens a SQLite store; edge replicas share a PostgreSQL store (--store postgres://USER@HOST/DB)"
        ))
    } else {
        StoreError::Sqlite(e)
    }
}

/// Connections a PostgreSQL store keeps open.
pub const POSTGRES_CONNECTIONS: usize = 8;

/// A store failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// The store's file.
    #[error("SQLite store file {0}")]
    File(String),
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
                        private_file(std::path::Path::new(&path))?;
                        rusqlite::Connection::open(&path)?
                    };
                    conn.busy_timeout(std::time::Duration::from_secs(5))?;
                    // The edge holds the file alone while it runs (a second
                    // process cannot even read it): SQLite then keeps the
                    // WAL's index in memory and takes no file lock a
                    // statement. SQLite checkpoints the WAL itself, each
                    // 1,000 pages, which keeps it small (see sql.rs).
                    conn.execute_batch(
                        "PRAGMA locking_mode=EXCLUSIVE; PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                    )
                    .map_err(|e| held_elsewhere(e, &path))?;
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
}
