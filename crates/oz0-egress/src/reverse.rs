//! Egress into a VM whose runtime carries only connections the host opens.
//!
//! Apple's container has no network device in a tool's VM (`--network
//! none`), and a unix socket shared as a file (`--volume`) carries no
//! connection across the VM's boundary. What it carries is
//! `--publish-socket HOST:GUEST`: a connection the host opens to the socket
//! file HOST, which the runtime makes, reaches a listener the guest binds
//! at GUEST. So the route to the node's proxy runs the other way round:
//!
//! - Inside the VM, [`serve_accepting`] (the bridge): the server's proxy
//!   variables name a TCP listener on the guest's own loopback; the bridge
//!   also listens on GUEST, answers each connection the host opens there
//!   with [`READY`] and keeps it, and carries each of the server's TCP
//!   connections both ways over the oldest one kept.
//! - On the node, [`serve_dialing`]: it keeps [`POOL`] connections open to
//!   HOST. The runtime takes a connection to HOST even before the guest
//!   listens, so a connection counts only once [`READY`] came over it; one
//!   that ends first is opened again after [`REDIAL`], doubled each time
//!   it fails again up to [`REDIAL_MAX`]. A kept connection
//!   over which bytes arrive is the server's: the node opens a connection to
//!   the run's proxy, passes those bytes and carries both ways, and opens
//!   another to HOST in its place.
//!
//! Nothing here parses or holds a secret: the run's token travels inside
//! each of the server's requests, and the proxy checks it and the
//! allowlist as for any run. HOST must sit in a folder only the node's user
//! can enter: whoever opens a connection to it speaks for the node to the
//! guest's bridge.

use std::time::Duration;

#[cfg(unix)]
pub use imp::{serve_accepting, serve_dialing, Dialing};

/// The node binary's hidden argument that starts the guest's bridge in a
/// VM: `__oz0-vm-egress [--accept] SOCKET -- SERVER…`.
pub const WRAPPER_ARG: &str = "__oz0-vm-egress";
/// The wrapper's flag for this route: it listens on SOCKET for the host.
pub const ACCEPT_FLAG: &str = "--accept";
/// The guest variable that carries the run's token to the wrapper (the
/// server sees only the proxy variables that carry it).
pub const TOKEN_VAR: &str = "OZ0_EGRESS_TOKEN";
/// Where the guest's bridge listens for the host's connections in a VM of
/// Apple's container: a folder the guest's user can write (the VM's `/tmp`
/// is its own), since the runtime makes the file on the host only.
pub const GUEST_SOCKET: &str = "/tmp/oz0-egress.sock";

/// The byte the guest's bridge answers each connection it keeps with.
pub const READY: u8 = b'R';
/// Connections the node keeps open and ready for the server's next ones.
pub const POOL: usize = 4;
/// How long the node waits before opening again a connection that ended
/// before the guest was ready.
pub const REDIAL: Duration = Duration::from_millis(50);
/// The longest pause between two attempts of one slot, while the guest's
/// bridge does not answer (a VM still booting, or one that never will).
pub const REDIAL_MAX: Duration = Duration::from_millis(400);
/// How long a new connection may take to be answered with [`READY`].
pub const READY_WAIT: Duration = Duration::from_secs(10);
#[cfg(unix)]
mod imp {
    use std::io::{self, Read, Write};
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::os::unix::net::{UnixListener, UnixStream};
    use std::path::Path;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{mpsc, Arc, Mutex};
    use std::thread;

    use super::{POOL, READY, READY_WAIT, REDIAL, REDIAL_MAX};
    use crate::bridge::{accept, carry_between, spawn_carrier, Slots, MAX_BRIDGE_CONNECTIONS};

    /// Stack of each thread (buffers are on the heap).
    const THREAD_STACK: usize = 64 * 1024;

    /// Inside the VM: carries each connection `listener` (the guest's loopback,
    /// named by the server's proxy variables) accepts over one of the host's
    /// connections to `inbound` (the published socket), until either listener
    /// fails for good. At most [`MAX_BRIDGE_CONNECTIONS`] at once.
    pub fn serve_accepting(listener: TcpListener, inbound: UnixListener) -> io::Result<()> {
        let (kept_tx, kept) = mpsc::sync_channel::<UnixStream>(MAX_BRIDGE_CONNECTIONS);
        thread::Builder::new()
            .name("oz0-bridge-in".into())
            .stack_size(THREAD_STACK)
            .spawn(move || {
                for conn in inbound.incoming() {
                    let Ok(mut conn) = conn else { continue };
                    if conn.write_all(&[READY]).is_err() {
                        continue;
                    }
                    if kept_tx.send(conn).is_err() {
                        return;
                    }
                }
            })?;
        let slots = Slots::new(MAX_BRIDGE_CONNECTIONS);
        loop {
            let slot = slots.take();
            let Some(tcp) = accept(&listener)? else {
                continue;
            };
            // The host's next connection: it keeps some ready, so this waits
            // only when the server opens them faster than the host answers.
            let host = kept
                .recv()
                .map_err(|_| io::Error::other("the host's connections ended"))?;
            let _ = tcp.set_nodelay(true);
            spawn_carrier(move || {
                let _slot = slot;
                let _ = carry_between(tcp, host);
            })?;
        }
    }

    /// On the node: keeps [`POOL`] connections ready to the published socket
    /// at `host` and carries each the guest's bridge uses to the run's proxy
    /// at `proxy`, until the returned [`Dialing`] is dropped (the VM ended).
    /// Returns at once; the work goes on in threads of its own.
    pub fn serve_dialing(host: &Path, proxy: SocketAddr) -> io::Result<Dialing> {
        let d = Arc::new(Dialer {
            host: host.to_path_buf(),
            proxy,
            stop: AtomicBool::new(false),
            live: AtomicUsize::new(0),
            open: Mutex::new(Vec::new()),
            next: AtomicUsize::new(0),
        });
        let dialing = Dialing(d.clone());
        for _ in 0..POOL {
            d.clone().spawn_slot()?;
        }
        Ok(dialing)
    }

    /// The node's side of one VM's route: dropped, it stops dialling and
    /// closes every connection it holds, ready or carrying, whatever the
    /// runtime does with its end, so that no thread or descriptor of it
    /// outlives the VM.
    pub struct Dialing(Arc<Dialer>);

    impl Drop for Dialing {
        fn drop(&mut self) {
            self.0.stop.store(true, Ordering::SeqCst);
            let open = std::mem::take(&mut *self.0.open.lock().unwrap_or_else(|e| e.into_inner()));
            for (_, c) in open {
                let _ = c.shutdown(std::net::Shutdown::Both);
            }
        }
    }

    impl Dialing {
        /// Counts the slots alive (ready or carrying), also once this is
        /// dropped: at most [`POOL`] ready ones plus those carrying, and
        /// none soon after the stop.
        pub fn live_counter(&self) -> impl Fn() -> usize + Send + 'static {
            let d = self.0.clone();
            move || d.live.load(Ordering::SeqCst)
        }
    }

    struct Dialer {
        host: std::path::PathBuf,
        proxy: SocketAddr,
        stop: AtomicBool,
        /// Slots alive: waiting to be used, or carrying a connection.
        live: AtomicUsize,
        /// Every connection open, by slot id, to be closed when stopped.
        open: Mutex<Vec<(usize, UnixStream)>>,
        next: AtomicUsize,
    }

    impl Dialer {
        fn spawn_slot(self: Arc<Self>) -> io::Result<()> {
            self.live.fetch_add(1, Ordering::SeqCst);
            let me = self.clone();
            let spawned = thread::Builder::new()
                .name("oz0-egress-dial".into())
                .stack_size(THREAD_STACK)
                .spawn(move || {
                    me.slot();
                    me.live.fetch_sub(1, Ordering::SeqCst);
                });
            if let Err(e) = spawned {
                self.live.fetch_sub(1, Ordering::SeqCst);
                return Err(e);
            }
            Ok(())
        }

        /// One connection: opened until the guest answers, kept until the
        /// server's bytes arrive, then carried to the proxy. One that ends
        /// with nothing to carry (a server's connection closed before it
        /// sent a byte, or the VM stopped) is opened again, until stopped,
        /// so that as many stay ready.
        fn slot(self: &Arc<Self>) {
            let mut first = [0u8; 1];
            let id = self.next.fetch_add(1, Ordering::SeqCst);
            let conn = loop {
                let Some(mut conn) = self.ready() else { return };
                if !self.hold(id, &conn) {
                    return;
                }
                if matches!(conn.read(&mut first), Ok(1)) {
                    break conn;
                }
                self.forget(id);
            };
            self.carry(conn, first);
            self.forget(id);
        }

        /// Keeps a handle to slot `id`'s connection, to be closed when
        /// stopped; false when already stopped.
        fn hold(&self, id: usize, conn: &UnixStream) -> bool {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            if self.stop.load(Ordering::SeqCst) {
                return false;
            }
            match conn.try_clone() {
                Ok(c) => {
                    open.push((id, c));
                    true
                }
                Err(_) => false,
            }
        }

        fn forget(&self, id: usize) {
            self.open
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|(k, _)| *k != id);
        }

        /// Carries a used connection, whose first byte is `first`, to the
        /// proxy; another takes its place meanwhile.
        fn carry(self: &Arc<Self>, conn: UnixStream, first: [u8; 1]) {
            // This one is the server's now: another takes its place.
            if self.live.load(Ordering::SeqCst) < POOL + MAX_BRIDGE_CONNECTIONS {
                let _ = self.clone().spawn_slot();
            }
            let Ok(mut proxy) = TcpStream::connect(self.proxy) else {
                return;
            };
            let _ = proxy.set_nodelay(true);
            if proxy.write_all(&first).is_ok() {
                let _ = carry_between(conn, proxy);
            }
        }

        /// A connection the guest answered with [`READY`]; None once stopped.
        fn ready(&self) -> Option<UnixStream> {
            let mut pause = REDIAL;
            loop {
                if self.stop.load(Ordering::SeqCst) {
                    return None;
                }
                if let Ok(mut c) = UnixStream::connect(&self.host) {
                    let mut b = [0u8; 1];
                    let answered = c.set_read_timeout(Some(READY_WAIT)).is_ok()
                        && matches!(c.read(&mut b), Ok(1))
                        && b[0] == READY
                        && c.set_read_timeout(None).is_ok();
                    if answered {
                        return Some(c);
                    }
                }
                thread::sleep(pause);
                pause = (pause * 2).min(REDIAL_MAX);
            }
        }
    }
}
