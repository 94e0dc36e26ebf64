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

/// The channel replicas wake each other on.
const WAKE_CHANNEL: &str = "oz0_edge_wake";

impl super::Store {
    /// Sends what `edge` wakes to the other replicas on this PostgreSQL
    /// store (`NOTIFY`), and wakes `edge`'s waiters on theirs (`LISTEN`,
    /// on a connection of its own, opened again when it closes; each
    /// time, every waiter looks at the store again, for what it missed).
    /// Both tasks end with the edge.
    pub(crate) fn listen_for_wakes(&self, edge: std::sync::Weak<crate::api::Edge>) {
        let super::Backend::Postgres(pool) = &self.backend else {
            return;
        };
        let me = crate::auth::random_id();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        if let Some(e) = edge.upgrade() {
            e.wakes().outbox(tx);
        }
        let store = self.clone();
        let from = me.clone();
        tokio::spawn(async move {
            while let Some(msg) = rx.recv().await {
                let payload = format!("{from} {msg}");
                if let Err(e) = store
                    .exec(
                        "SELECT pg_notify($1, $2)",
                        vec![WAKE_CHANNEL.into(), payload.into()],
                    )
                    .await
                {
                    crate::log::warn(&format!("waking the other replicas: {e}"), None);
                }
            }
        });
        let config = pool.config.clone();
        tokio::spawn(async move {
            let mut failing = false;
            loop {
                if edge.strong_count() == 0 {
                    return;
                }
                match listen_once(&config, &edge, &me).await {
                    Ok(()) => failing = false,
                    Err(e) if !failing => {
                        failing = true;
                        crate::log::warn(
                            &format!("listening for the other replicas' wakes: {e}; trying again every second (meanwhile a job queued through another replica waits for the next poll)"),
                            None,
                        );
                    }
                    Err(_) => {}
                }
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        });
    }
}

/// One `LISTEN` connection, until it closes.
async fn listen_once(
    config: &tokio_postgres::Config,
    edge: &std::sync::Weak<crate::api::Edge>,
    me: &str,
) -> Result<(), StoreError> {
    let (client, mut conn) = config.connect(tokio_postgres::NoTls).await?;
    let (edge2, me2) = (edge.clone(), me.to_string());
    let driver = tokio::spawn(async move {
        loop {
            let m = tokio::select! {
                m = std::future::poll_fn(|cx| conn.poll_message(cx)) => m,
                // An edge that ended (a test's) lets its connection go.
                _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {
                    if edge2.strong_count() == 0 {
                        return;
                    }
                    continue;
                }
            };
            let Some(m) = m else { return };
            let Ok(tokio_postgres::AsyncMessage::Notification(n)) = m else {
                if m.is_err() {
                    return;
                }
                continue;
            };
            let Some(e) = edge2.upgrade() else { return };
            if let Some((from, msg)) = n.payload().split_once(' ') {
                if from != me2 {
                    e.wakes().received(msg);
                }
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN {WAKE_CHANNEL}"))
        .await?;
    // What was queued while no connection listened is looked for again.
    if let Some(e) = edge.upgrade() {
        e.wakes().all_here();
    }
    let _ = driver.await;
    Ok(())
}
