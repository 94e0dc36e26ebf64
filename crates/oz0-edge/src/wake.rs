//! Held requests and what answers them early: a node's long poll waits
//! for a job queued for it (or a cancel of a job it holds), a held
//! renewal for a cancel of its job, `oz0 job logs -f` for output.
//!
//! Waiters of one queue (tenant, tier) are woken one at a time, oldest
//! first: a queued job wakes one waiter; a waiter that was woken and
//! found nothing it may take passes the wake on to the next one that was
//! waiting before the job came, so a job no waiter fits costs each of
//! them one look, never a herd of looks at once. Waiters on a key (a
//! node's cancels, a job's output) are all woken.
//!
//! With several replicas on one PostgreSQL store, what one replica wakes
//! is sent to the others through `NOTIFY` ([`Wakes::outbox`]); a replica
//! that lost its `LISTEN` connection wakes all its waiters, so each looks
//! at the store again.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;

/// A queue's wake: the queue, and the sequence number before which its
/// waiters were waiting when it came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Wake {
    tenant: String,
    tier: u8,
    before: u64,
}

/// One held request.
#[derive(Debug, Default)]
pub(crate) struct Waiter {
    notify: Notify,
    round: AtomicU64,
    woken_by: Mutex<Option<Wake>>,
    changed: std::sync::atomic::AtomicBool,
    stopped: std::sync::atomic::AtomicBool,
    /// The keys it listened on, each with the registry that holds it: its
    /// places there are taken out as it ends.
    listening: Mutex<Vec<(Weak<Keys>, String)>>,
}

impl Drop for Waiter {
    /// A key is kept only while a waiter listens on it: most keys are
    /// never woken (a job that ends uncancelled, a renewal refused, a
    /// follow that stops), and a node could name any job, so a key left
    /// behind by every waiter would be kept for the life of the edge.
    fn drop(&mut self) {
        let listening = self.listening.get_mut().unwrap_or_else(|p| p.into_inner());
        for (keys, key) in listening.drain(..) {
            let Some(keys) = keys.upgrade() else { continue };
            let mut keys = keys.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(v) = keys.get_mut(&key) {
                // This one is among them, already unable to upgrade.
                v.retain(|w| w.strong_count() > 0);
                if v.is_empty() {
                    keys.remove(&key);
                }
            }
        }
    }
}

impl Waiter {
    /// Until it is woken (a wake that came since it last listened is
    /// kept, never lost).
    pub(crate) async fn woken(&self) {
        self.notify.notified().await;
    }

    /// Whether a change of its node woke it (a drain, an approval), taken.
    pub(crate) fn take_changed(&self) -> bool {
        self.changed.swap(false, Ordering::Relaxed)
    }

    /// Whether the edge is stopping: the request is answered now with what
    /// it has (see [`Wakes::stop`]).
    pub(crate) fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Relaxed)
    }

    /// Marks it woken by the edge's stop, and wakes it.
    fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
        self.changed.store(true, Ordering::Relaxed);
        self.notify.notify_one();
    }

    /// The queue wake that woke it, if one did (taken).
    pub(crate) fn take_wake(&self) -> Option<Wake> {
        self.woken_by
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}

#[derive(Debug, Default)]
struct State {
    seq: u64,
    queues: HashMap<(String, u8), Queue>,
}

/// The waiters of each key. A lock of its own, taken after the state's
/// when both are held: a waiter that ends takes it to let its keys go,
/// and a waiter may end while the state's lock is held (its last `Arc`
/// upgraded there).
type Keys = Mutex<HashMap<String, Vec<Weak<Waiter>>>>;

#[derive(Debug, Default)]
struct Queue {
    waiting: VecDeque<(u64, u64, Weak<Waiter>)>,
    kept_after_clean: usize,
}

/// What one replica sends the others.
pub(crate) type Outbox = tokio::sync::mpsc::UnboundedSender<String>;

/// The held requests of one replica.
#[derive(Debug, Default)]
pub(crate) struct Wakes {
    state: Mutex<State>,
    keys: Arc<Keys>,
    outbox: Mutex<Option<Outbox>>,
    /// The edge is stopping: every held request is answered, and one that
    /// comes now is not held.
    stopping: std::sync::atomic::AtomicBool,
}

impl Wakes {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Weak<Waiter>>>> {
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where wakes go to the other replicas, from now on.
    pub(crate) fn outbox(&self, tx: Outbox) {
        *self.outbox.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
    }

    fn send(&self, msg: String) {
        if let Some(tx) = &*self.outbox.lock().unwrap_or_else(|p| p.into_inner()) {
            let _ = tx.send(msg);
        }
    }

    /// A new waiter; it listens from [`Wakes::listen_queue`] and
    /// [`Wakes::listen_key`] on.
    pub(crate) fn waiter() -> Arc<Waiter> {
        Arc::new(Waiter::default())
    }

    /// Starts a new round of listening for `w` (earlier queue entries of
    /// it are stale from now on).
    pub(crate) fn new_round(w: &Waiter) {
        w.round.fetch_add(1, Ordering::Relaxed);
    }

    /// `w` waits for a job in the queue of (`tenant`, `tier`).
    pub(crate) fn listen_queue(&self, w: &Arc<Waiter>, tenant: &str, tier: u8) {
        let round = w.round.load(Ordering::Relaxed);
        let mut st = self.state();
        if self.stopping.load(Ordering::Relaxed) {
            drop(st);
            return w.stop();
        }
        st.seq += 1;
        let seq = st.seq;
        let q = st.queues.entry((tenant.to_string(), tier)).or_default();
        q.waiting.push_back((seq, round, Arc::downgrade(w)));
        // Entries of waiters that ended or listen again are dropped now and
        // then: whenever the queue doubled since the last clean.
        if q.waiting.len() > 64 && q.waiting.len() > 2 * q.kept_after_clean {
            q.waiting.retain(|(_, r, w)| live(w, *r));
            q.kept_after_clean = q.waiting.len();
        }
    }

    /// `w` waits for a wake of `key`.
    pub(crate) fn listen_key(&self, w: &Arc<Waiter>, key: &str) {
        let st = self.state();
        if self.stopping.load(Ordering::Relaxed) {
            drop(st);
            return w.stop();
        }
        {
            let mut keys = self.keys();
            let v = keys.entry(key.to_string()).or_default();
            v.retain(|w| w.strong_count() > 0);
            v.push(Arc::downgrade(w));
        }
        drop(st);
        let mut listening = w.listening.lock().unwrap_or_else(|p| p.into_inner());
        if !listening
            .iter()
            .any(|(k, name)| Weak::ptr_eq(k, &Arc::downgrade(&self.keys)) && name == key)
        {
            listening.push((Arc::downgrade(&self.keys), key.to_string()));
        }
    }

    /// A job was queued in (`tenant`, `tier`): wakes one waiter of it, here
    /// and on the other replicas.
    pub(crate) fn queued(&self, tenant: &str, tier: u8) {
        self.queued_here(tenant, tier);
        self.send(format!("q {tier} {tenant}"));
    }

    pub(crate) fn queued_here(&self, tenant: &str, tier: u8) {
        let before = {
            let mut st = self.state();
            st.seq += 1;
            st.seq
        };
        self.pass_on(Wake {
            tenant: tenant.to_string(),
            tier,
            before,
        });
    }

    /// A waiter woken by `wake` found nothing it may take: the next one
    /// waiting since before the wake came gets it.
    pub(crate) fn pass_on(&self, wake: Wake) {
        let mut st = self.state();
        let Some(q) = st.queues.get_mut(&(wake.tenant.clone(), wake.tier)) else {
            return;
        };
        while let Some((seq, round, w)) = q.waiting.front().cloned() {
            if seq >= wake.before {
                return;
            }
            q.waiting.pop_front();
            let Some(w) = w.upgrade() else { continue };
            if w.round.load(Ordering::Relaxed) != round {
                continue;
            }
            *w.woken_by.lock().unwrap_or_else(|p| p.into_inner()) = Some(wake);
            w.notify.notify_one();
            return;
        }
    }

    /// Wakes every waiter of `key`, here and on the other replicas.
    pub(crate) fn key(&self, key: &str) {
        self.key_here(key);
        self.send(format!("k {key}"));
    }

    pub(crate) fn key_here(&self, key: &str) {
        let woken = self.keys().remove(key).unwrap_or_default();
        let changed = key.starts_with("node:");
        for w in woken.iter().filter_map(Weak::upgrade) {
            if changed {
                w.changed.store(true, Ordering::Relaxed);
            }
            w.notify.notify_one();
        }
    }

    /// Wakes every waiter (the store may have changed unseen).
    pub(crate) fn all_here(&self) {
        let woken = self.every_waiter(&mut self.state());
        for w in woken {
            w.notify.notify_one();
        }
    }

    /// Every waiter listening now, no longer listening.
    fn every_waiter(&self, st: &mut State) -> Vec<Arc<Waiter>> {
        let mut all: Vec<Arc<Waiter>> = Vec::new();
        for q in st.queues.values_mut() {
            all.extend(q.waiting.drain(..).filter_map(|(_, _, w)| w.upgrade()));
        }
        for (_, v) in self.keys().drain() {
            all.extend(v.iter().filter_map(Weak::upgrade));
        }
        all
    }

    /// The edge is stopping: wakes every waiter, marked so
    /// ([`Waiter::stopped`]), and marks at once whoever listens from now
    /// on. A held request is then answered with what it has: a long poll
    /// after one more look, a held renewal renewed, a followed log with
    /// the output so far.
    pub(crate) fn stop(&self) {
        let mut st = self.state();
        // Set under the state's lock: a waiter listening now is either
        // among those drained below or sees the flag.
        self.stopping.store(true, Ordering::Relaxed);
        let woken = self.every_waiter(&mut st);
        drop(st);
        for w in woken {
            w.stop();
        }
    }

    /// A message of another replica (see [`Wakes::queued`], [`Wakes::key`]).
    pub(crate) fn received(&self, msg: &str) {
        if let Some(rest) = msg.strip_prefix("q ") {
            if let Some((tier, tenant)) = rest.split_once(' ') {
                if let Ok(tier) = tier.parse() {
                    self.queued_here(tenant, tier);
                }
            }
        } else if let Some(key) = msg.strip_prefix("k ") {
            self.key_here(key);
        }
    }

    /// Waiters held now (for tests and the metrics).
    pub(crate) fn waiting(&self) -> usize {
        let st = self.state();
        let mut seen = std::collections::HashSet::new();
        for q in st.queues.values() {
            for (_, r, w) in &q.waiting {
                if live(w, *r) {
                    seen.insert(w.as_ptr() as usize);
                }
            }
        }
        seen.len()
    }

    /// Keys some waiter listens on.
    #[cfg(test)]
    fn keys_held(&self) -> usize {
        self.keys().len()
    }
}

fn live(w: &Weak<Waiter>, round: u64) -> bool {
    w.upgrade()
        .is_some_and(|w| w.round.load(Ordering::Relaxed) == round)
}

/// The key a change of a node wakes (drained, undrained, approved,
/// removed): its held poll answers, and the node polls again as it is.
pub(crate) fn node_key(node: &str) -> String {
    format!("node:{node}")
}

/// The key a cancel of a job a node holds wakes (its held poll looks at
/// what it must stop).
pub(crate) fn stops_key(node: &str) -> String {
    format!("stops:{node}")
}

/// The key a cancel of a job wakes (its held renewal).
pub(crate) fn cancel_key(job: &str) -> String {
    format!("cancel:{job}")
}

/// The key a job's output and end wake (`oz0 job logs -f`).
pub(crate) fn job_key(job: &str) -> String {
    format!("job:{job}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_job_wakes_the_oldest_waiter_and_a_wake_is_passed_on() {
        let wakes = Wakes::default();
        let a = Wakes::waiter();
        let b = Wakes::waiter();
        wakes.listen_queue(&a, "acme", 1);
        wakes.listen_queue(&b, "acme", 1);
        wakes.queued_here("acme", 1);
        // a, the oldest, is woken; b is not.
        tokio::time::timeout(std::time::Duration::from_secs(1), a.woken())
            .await
            .unwrap();
        let wake = a.take_wake().expect("a knows the wake");
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), b.woken())
                .await
                .is_err()
        );
        // a found nothing for it and listens again: b gets the wake, a
        // does not get it back.
        Wakes::new_round(&a);
        wakes.listen_queue(&a, "acme", 1);
        wakes.pass_on(wake);
        tokio::time::timeout(std::time::Duration::from_secs(1), b.woken())
            .await
            .unwrap();
        let wake = b.take_wake().unwrap();
        wakes.pass_on(wake);
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), a.woken())
                .await
                .is_err()
        );
        // Another tenant's job wakes nobody here.
        wakes.queued_here("solo", 1);
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), a.woken())
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_stop_wakes_every_waiter_and_whoever_listens_after_it() {
        let wakes = Wakes::default();
        let (q, k, idle) = (Wakes::waiter(), Wakes::waiter(), Wakes::waiter());
        wakes.listen_queue(&q, "acme", 1);
        wakes.listen_key(&k, "job:j1");
        assert!(!q.stopped() && !k.stopped() && !idle.stopped());
        wakes.stop();
        for w in [&q, &k] {
            tokio::time::timeout(std::time::Duration::from_secs(1), w.woken())
                .await
                .unwrap();
            assert!(w.stopped() && w.take_changed());
        }
        // Not listening when the stop came: marked as it listens.
        assert!(!idle.stopped());
        wakes.listen_key(&idle, "node:n1");
        tokio::time::timeout(std::time::Duration::from_secs(1), idle.woken())
            .await
            .unwrap();
        assert!(idle.stopped());
        assert_eq!(wakes.waiting(), 0);
    }

    #[tokio::test]
    async fn a_key_is_let_go_when_no_waiter_listens_on_it_any_more() {
        let wakes = Wakes::default();
        let (a, b) = (Wakes::waiter(), Wakes::waiter());
        wakes.listen_key(&a, &cancel_key("j1"));
        wakes.listen_key(&a, &cancel_key("j1"));
        wakes.listen_key(&b, &cancel_key("j1"));
        wakes.listen_key(&b, &job_key("j1"));
        assert_eq!(wakes.keys_held(), 2);
        // One of two waiters ends unwoken: the other still hears the key.
        drop(a);
        assert_eq!(wakes.keys_held(), 2);
        wakes.key_here(&cancel_key("j1"));
        tokio::time::timeout(std::time::Duration::from_secs(1), b.woken())
            .await
            .unwrap();
        assert_eq!(wakes.keys_held(), 1);
        drop(b);
        assert_eq!(wakes.keys_held(), 0);
        // Waiters of keys that are never woken (renewals naming any job)
        // leave nothing behind.
        for i in 0..100 {
            let w = Wakes::waiter();
            wakes.listen_key(&w, &cancel_key(&format!("j{i}")));
        }
        assert_eq!(wakes.keys_held(), 0);
    }

    #[tokio::test]
    async fn a_key_wakes_all_and_replicas_messages_parse() {
        let wakes = Wakes::default();
        let (a, b) = (Wakes::waiter(), Wakes::waiter());
        wakes.listen_key(&a, &node_key("n1"));
        wakes.listen_key(&b, &node_key("n1"));
        wakes.received("k node:n1");
        for w in [&a, &b] {
            tokio::time::timeout(std::time::Duration::from_secs(1), w.woken())
                .await
                .unwrap();
        }
        let c = Wakes::waiter();
        wakes.listen_queue(&c, "acme", 0);
        assert_eq!(wakes.waiting(), 1);
        wakes.received("q 0 acme");
        tokio::time::timeout(std::time::Duration::from_secs(1), c.woken())
            .await
            .unwrap();
    }
}
