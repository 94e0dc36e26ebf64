//! The PostgreSQL connection pool: a fixed set of connections, each opened
//! on first use and opened again when it closed, with the statements it
//! prepared.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::StoreError;

pub(super) struct PgConn {
    pub(super) client: tokio_postgres::Client,
    pub(super) statements: HashMap<String, tokio_postgres::Statement>,
}

pub(super) struct PgPool {
    pub(super) config: tokio_postgres::Config,
    pub(super) conns: Vec<tokio::sync::Mutex<Option<PgConn>>>,
    pub(super) next: AtomicUsize,
}

impl PgPool {
    pub(super) async fn connect(config: &tokio_postgres::Config) -> Result<PgConn, StoreError> {
        let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                crate::log::warn(&format!("PostgreSQL connection closed: {e}"), None);
            }
        });
        Ok(PgConn {
            client,
            statements: HashMap::new(),
        })
    }

    pub(super) async fn get(
        &self,
    ) -> Result<tokio::sync::MutexGuard<'_, Option<PgConn>>, StoreError> {
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
