//! The in-sandbox bridge: a TCP listener on the sandbox's own loopback whose
//! every connection is forwarded, byte for byte, to the run's proxy socket.
//!
//! It runs inside every sandbox with egress, so it is small, synchronous and
//! uses only `std` (plus `rustix` for `splice(2)`): one thread per direction
//! per connection, a bounded number of connections, no parsing (the proxy
//! does all of that). It holds no secret: the token travels inside the
//! client's own requests.
//!
//! Bytes move with `splice(2)` through a pipe (no copy into userspace); if
//! the kernel or a seccomp filter refuses `splice`, a plain read/write loop
//! takes over. Each connection needs `socket(AF_UNIX)` + `connect` to the
//! proxy socket, so the process running the bridge must be allowed those.
//!
//! Unix only. The descriptor hand-over ([`serve`]'s first choice,
//! `serve_channel`) and `splice(2)` are Linux only: on other unixes
//! [`serve`] carries every connection with the read/write loop, as
//! [`serve_copying`] does.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
#[cfg(target_os = "linux")]
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

/// Most connections the bridge carries at once; the next waits in the
/// listen backlog until one closes. Each costs two threads.
pub const MAX_BRIDGE_CONNECTIONS: usize = 128;
/// Copy buffer per direction (fallback path).
pub const BRIDGE_BUFFER: usize = 64 * 1024;
/// Pipe size asked for per direction when splicing (best effort).
pub const PIPE_SIZE: usize = 1024 * 1024;
/// Stack of each copy thread (the buffer is on the heap).
const THREAD_STACK: usize = 64 * 1024;

/// Forwards every connection `listener` accepts to the unix socket at
/// `proxy_socket`, until accepting fails for good. Call it after binding
/// the listener (e.g. on `127.0.0.1:0`) and before starting the command; it
/// does not return while the listener works.
pub fn serve(listener: TcpListener, proxy_socket: &Path) -> io::Result<()> {
    serve_with(listener, proxy_socket, MAX_BRIDGE_CONNECTIONS)
}

/// [`serve`] for a proxy socket that cannot carry descriptors (one that a
/// VMM forwards into a guest, such as smolvm's `--mount-socket`): every
/// connection is carried byte for byte, never handed over.
pub fn serve_copying(listener: TcpListener, proxy_socket: &Path) -> io::Result<()> {
    serve_mode(listener, proxy_socket, MAX_BRIDGE_CONNECTIONS, false)
}

/// [`serve`] with an explicit connection bound.
pub fn serve_with(listener: TcpListener, proxy_socket: &Path, max: usize) -> io::Result<()> {
    serve_mode(listener, proxy_socket, max, true)
}

fn serve_mode(
    listener: TcpListener,
    proxy_socket: &Path,
    max: usize,
    hand_over: bool,
) -> io::Result<()> {
    let slots = Slots::new(max);
    let target: Arc<PathBuf> = Arc::new(proxy_socket.to_path_buf());
    loop {
        let release = slots.take();
        let Some(tcp) = accept(&listener)? else {
            continue;
        };
        let target = target.clone();
        spawn_carrier(move || {
            let _release = release;
            let _ = if hand_over {
                carry(tcp, &target)
            } else {
                copy_both(tcp, &target)
            };
        })?;
    }
}

/// Starts the thread that carries one connection. When no thread can be
/// made now (the thread limit), the connection is dropped with `carry`,
/// which releases its slot, and the caller goes on after a pause; any
/// other failure is returned.
pub(crate) fn spawn_carrier(carry: impl FnOnce() + Send + 'static) -> io::Result<()> {
    let spawned = thread::Builder::new()
        .name("oz0-bridge".into())
        .stack_size(THREAD_STACK)
        .spawn(carry);
    if let Err(e) = spawned {
        if e.kind() != io::ErrorKind::WouldBlock && e.raw_os_error() != Some(11) {
            return Err(e);
        }
        thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// At most so many connections carried at once: each holds a [`Slot`].
pub(crate) struct Slots {
    count: Arc<(Mutex<usize>, Condvar)>,
    max: usize,
}

impl Slots {
    /// Room for `max` (at least one).
    pub(crate) fn new(max: usize) -> Slots {
        Slots {
            count: Arc::new((Mutex::new(0), Condvar::new())),
            max: max.max(1),
        }
    }

    /// A slot, once one is free.
    pub(crate) fn take(&self) -> Slot {
        let (lock, cv) = &*self.count;
        let mut n = lock.lock().unwrap_or_else(|e| e.into_inner());
        while *n >= self.max {
            n = cv.wait(n).unwrap_or_else(|e| e.into_inner());
        }
        *n += 1;
        Slot(self.count.clone())
    }
}

/// One connection's place among [`Slots`], freed when dropped.
pub(crate) struct Slot(Arc<(Mutex<usize>, Condvar)>);

impl Drop for Slot {
    fn drop(&mut self) {
        let (lock, cv) = &*self.0;
        let mut n = lock.lock().unwrap_or_else(|e| e.into_inner());
        *n -= 1;
        cv.notify_one();
    }
}

/// Hands every connection `listener` accepts to the proxy over `channel`
/// (one end of the run's channel, see
/// [`crate::ProxyHandle::add_run_channel`]), until accepting or handing
/// over fails for good. One thread, no copy, no unix socket of its own: the
/// bridge of a tier-1 run holds nothing its command may not have but the
/// channel, whose far end takes only connections. Linux only.
#[cfg(target_os = "linux")]
pub fn serve_channel(listener: TcpListener, channel: &UnixStream) -> io::Result<()> {
    loop {
        let Some(tcp) = accept(&listener)? else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        send_handoff(channel, &tcp)?;
    }
}

/// The next connection on `listener`; `None` when accepting should simply
/// be tried again (interrupted, aborted by the client, or out of
/// descriptors, after backing off instead of spinning).
pub(crate) fn accept(listener: &TcpListener) -> io::Result<Option<TcpStream>> {
    match listener.accept() {
        Ok((tcp, _)) => Ok(Some(tcp)),
        Err(e) => match e.kind() {
            io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted => Ok(None),
            _ if e.raw_os_error() == Some(24) || e.raw_os_error() == Some(23) => {
                thread::sleep(Duration::from_millis(20));
                Ok(None)
            }
            _ => Err(e),
        },
    }
}

/// The byte that travels with a handed-off connection.
pub const HANDOFF_MARKER: u8 = 0;

/// Hands the accepted connection itself to the proxy: the TCP socket's
/// descriptor goes over the proxy's unix socket (`SCM_RIGHTS`) with one
/// marker byte, and the proxy then reads and writes the run's socket directly,
/// so no byte passes through the bridge.
#[cfg(target_os = "linux")]
fn hand_off(tcp: &TcpStream, target: &Path) -> io::Result<()> {
    send_handoff(&UnixStream::connect(target)?, tcp)
}

/// No hand-over off Linux (the proxy takes none there): the connection is
/// carried instead.
#[cfg(not(target_os = "linux"))]
fn hand_off(_tcp: &TcpStream, _target: &Path) -> io::Result<()> {
    Err(io::ErrorKind::Unsupported.into())
}

/// Sends `tcp`'s descriptor over `unix` with the marker byte.
#[cfg(target_os = "linux")]
fn send_handoff(unix: &UnixStream, tcp: &TcpStream) -> io::Result<()> {
    use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    use std::mem::MaybeUninit;
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut cmsg = SendAncillaryBuffer::new(&mut space);
    let fds = [tcp.as_fd()];
    if !cmsg.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::other("no room for the descriptor"));
    }
    let sent = sendmsg(
        unix,
        &[io::IoSlice::new(&[HANDOFF_MARKER])],
        &mut cmsg,
        SendFlags::NOSIGNAL,
    )?;
    if sent != 1 {
        return Err(io::ErrorKind::WriteZero.into());
    }
    Ok(())
}

/// Hands the connection to the proxy, or, if that cannot be done, carries
/// it both ways until both directions end.
fn carry(tcp: TcpStream, target: &Path) -> io::Result<()> {
    let _ = tcp.set_nodelay(true);
    if hand_off(&tcp, target).is_ok() {
        return Ok(());
    }
    copy_both(tcp, target)
}

/// Carries one connection both ways until both directions end.
fn copy_both(tcp: TcpStream, target: &Path) -> io::Result<()> {
    let unix = UnixStream::connect(target)?;
    let _ = tcp.set_nodelay(true);
    carry_between(tcp, unix)
}

/// A stream [`carry_between`] carries: a TCP or unix socket.
pub(crate) trait Duplex: Read + Write + Send + 'static + Sized {
    /// Another handle to the same socket.
    fn duplicate(&self) -> io::Result<Self>;
    /// `shutdown(2)`.
    fn close(&self, how: Shutdown) -> io::Result<()>;
}

impl Duplex for TcpStream {
    fn duplicate(&self) -> io::Result<Self> {
        self.try_clone()
    }
    fn close(&self, how: Shutdown) -> io::Result<()> {
        self.shutdown(how)
    }
}

impl Duplex for UnixStream {
    fn duplicate(&self) -> io::Result<Self> {
        self.try_clone()
    }
    fn close(&self, how: Shutdown) -> io::Result<()> {
        self.shutdown(how)
    }
}

/// Carries bytes between `client` (the side that speaks first) and
/// `server` both ways until both directions end.
pub(crate) fn carry_between<A: Duplex + AsFdIfLinux, B: Duplex + AsFdIfLinux>(
    client: A,
    server: B,
) -> io::Result<()> {
    let client_r = client.duplicate()?;
    let server_w = server.duplicate()?;
    let server_end = server.duplicate()?;
    let up = thread::Builder::new()
        .name("oz0-bridge-up".into())
        .stack_size(THREAD_STACK)
        .spawn(move || {
            let r = pump(client_r, server_w);
            // EOF from the client: half-close so the proxy sees it. An error
            // (reset): close the proxy side fully, which ends the other
            // direction too.
            let how = if r.is_ok() {
                Shutdown::Write
            } else {
                Shutdown::Both
            };
            let _ = server_end.close(how);
            r
        })?;
    let down = pump(server.duplicate()?, client.duplicate()?);
    let _ = client.close(Shutdown::Write);
    if down.is_err() {
        // The proxy side failed: stop the other direction too.
        let _ = client.close(Shutdown::Both);
        let _ = server.close(Shutdown::Both);
    }
    let up = up.join().unwrap_or(Ok(()));
    down.and(up)
}

/// What [`pump`] needs of a stream: its descriptor on Linux (for
/// `splice(2)`), nothing elsewhere.
#[cfg(target_os = "linux")]
pub(crate) trait AsFdIfLinux: AsFd {}
#[cfg(target_os = "linux")]
impl<T: AsFd> AsFdIfLinux for T {}
/// What [`pump`] needs of a stream: its descriptor on Linux (for
/// `splice(2)`), nothing elsewhere.
#[cfg(not(target_os = "linux"))]
pub(crate) trait AsFdIfLinux {}
#[cfg(not(target_os = "linux"))]
impl<T> AsFdIfLinux for T {}

/// Moves bytes `from` → `to` until EOF: by `splice(2)` when possible.
#[cfg(target_os = "linux")]
fn pump<R: Read + AsFd, W: Write + AsFd>(from: R, to: W) -> io::Result<()> {
    match splice_pump(&from, &to) {
        Ok(()) => Ok(()),
        Err(Spliced::Unsupported) => copy_pump(from, to),
        Err(Spliced::Io(e)) => Err(e),
    }
}

/// Moves bytes `from` → `to` until EOF (no `splice(2)` off Linux).
#[cfg(not(target_os = "linux"))]
fn pump<R: Read, W: Write>(from: R, to: W) -> io::Result<()> {
    copy_pump(from, to)
}

#[cfg(target_os = "linux")]
enum Spliced {
    /// Nothing was moved; fall back to copying.
    Unsupported,
    Io(io::Error),
}

#[cfg(target_os = "linux")]
fn splice_pump(from: &impl AsFd, to: &impl AsFd) -> Result<(), Spliced> {
    use rustix::io::Errno;
    use rustix::pipe::{fcntl_setpipe_size, pipe_with, splice, PipeFlags, SpliceFlags};
    let (pipe_r, pipe_w) = pipe_with(PipeFlags::CLOEXEC).map_err(|_| Spliced::Unsupported)?;
    let size = fcntl_setpipe_size(&pipe_w, PIPE_SIZE).unwrap_or(64 * 1024);
    let mut moved = false;
    loop {
        let n = match splice(from, None, &pipe_w, None, size, SpliceFlags::MOVE) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(Errno::INTR) => continue,
            Err(Errno::INVAL | Errno::NOSYS | Errno::PERM | Errno::ACCESS) if !moved => {
                return Err(Spliced::Unsupported)
            }
            Err(e) => return Err(Spliced::Io(e.into())),
        };
        moved = true;
        let mut left = n;
        while left > 0 {
            match splice(&pipe_r, None, to, None, left, SpliceFlags::MOVE) {
                Ok(0) => return Err(Spliced::Io(io::ErrorKind::WriteZero.into())),
                Ok(k) => left -= k,
                Err(Errno::INTR) => continue,
                Err(e) => return Err(Spliced::Io(e.into())),
            }
        }
    }
}

fn copy_pump(mut from: impl Read, mut to: impl Write) -> io::Result<()> {
    let mut buf = vec![0u8; BRIDGE_BUFFER];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..n])?;
    }
}
