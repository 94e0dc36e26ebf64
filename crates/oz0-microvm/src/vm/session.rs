//! The session with the QEMU test guest: its one stream (the mux), which
//! carries the server's stdin, stdout and stderr, its status, and each of
//! its proxy connections, parsed with fixed bounds.

use super::*;

#[derive(Default)]
pub(super) struct Session {
    pub(super) exit: Option<i32>,
    pub(super) answered_ms: Option<u64>,
    pub(super) bridge_port: Option<u16>,
    pub(super) failure: Option<VmEnded>,
}

pub(super) struct SessionCtx<'a> {
    pub(super) listener: &'a UnixListener,
    pub(super) done: &'a AtomicBool,
    pub(super) slot: &'a Mutex<Option<UnixStream>>,
    pub(super) cancel: &'a UnixStream,
    pub(super) started: Instant,
    pub(super) boot_timeout: Duration,
    pub(super) egress_sock: Option<PathBuf>,
}

type Shared = Arc<Mutex<UnixStream>>;

fn send(w: &Shared, kind: Kind, chan: u32, data: &[u8]) -> std::io::Result<()> {
    let mut s = w.lock().unwrap_or_else(|e| e.into_inner());
    mux::write_frame(&mut *s, kind, chan, data)
}

fn accept(ctx: &SessionCtx<'_>) -> Option<UnixStream> {
    ctx.listener.set_nonblocking(true).ok()?;
    let deadline = ctx.started + ctx.boot_timeout;
    loop {
        match ctx.listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).ok()?;
                return Some(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if ctx.done.load(Ordering::SeqCst) || Instant::now() > deadline {
                    return None;
                }
                thread::sleep(Duration::from_millis(5));
            }
            Err(_) => return None,
        }
    }
}

pub(super) fn drive(
    ctx: &SessionCtx<'_>,
    cfg: &GuestConfig,
    input: Box<dyn Read + Send>,
    output: &mut (dyn Write + Send),
    errors: &mut (dyn Write + Send),
) -> Session {
    let mut session = Session::default();
    let (mut reader, writer) = match handshake(ctx, cfg) {
        Ok(ends) => ends,
        Err(failure) => {
            session.failure = failure;
            return session;
        }
    };
    let mut input = Some(input);
    let conns: Conns = Arc::new(Mutex::new(HashMap::new()));
    loop {
        let frame = match mux::read_frame(&mut reader) {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e)
                if session.answered_ms.is_none()
                    && matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
            {
                session.failure = Some(VmEnded::BootTimeout);
                break;
            }
            Err(e) => {
                if e.kind() == std::io::ErrorKind::InvalidData {
                    let _ = writeln!(
                        errors,
                        "oz0-node: the guest broke the VM protocol ({e}); the VM is stopped"
                    );
                }
                break;
            }
        };
        match frame.kind {
            Kind::Ready if session.answered_ms.is_none() => {
                session.answered_ms =
                    Some(u64::try_from(ctx.started.elapsed().as_millis()).unwrap_or(u64::MAX));
                if frame.payload.len() == 2 {
                    session.bridge_port =
                        Some(u16::from_be_bytes([frame.payload[0], frame.payload[1]]));
                }
                let _ = reader.set_read_timeout(None);
                if let Some(inp) = input.take() {
                    pump_input(inp, writer.clone(), ctx.cancel.try_clone().ok());
                }
            }
            Kind::Stdout => {
                let _ = output
                    .write_all(&frame.payload)
                    .and_then(|_| output.flush());
            }
            Kind::Stderr => {
                let _ = errors.write_all(&frame.payload);
            }
            Kind::Exit if frame.payload.len() == 4 => {
                let p = &frame.payload;
                session.exit = Some(i32::from_be_bytes([p[0], p[1], p[2], p[3]]));
                break;
            }
            Kind::Failed => {
                session.failure = Some(VmEnded::GuestFailed {
                    reason: String::from_utf8_lossy(&frame.payload).into_owned(),
                });
                break;
            }
            Kind::Open => open_conn(ctx, &writer, &conns, frame.chan),
            Kind::Data => {
                let c = conns.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(mut s) = c.get(&frame.chan) {
                    let _ = s.write_all(&frame.payload);
                }
            }
            Kind::Close => {
                if let Some(s) = conns
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&frame.chan)
                {
                    let _ = s.shutdown(Shutdown::Write);
                }
            }
            // Frames only the node sends, or a second Ready: ignored.
            _ => {}
        }
    }
    for (_, s) in conns.lock().unwrap_or_else(|e| e.into_inner()).drain() {
        let _ = s.shutdown(Shutdown::Both);
    }
    session
}

/// The guest's proxy connections, by channel.
type Conns = Arc<Mutex<HashMap<u32, UnixStream>>>;

/// Takes the guest agent's connection and sends it the server's
/// configuration: the stream's read end (reads time out at the boot
/// deadline until the agent answers) and its shared write end. `Err` when
/// the session ends here, with why (none when the monitor ended at once or
/// the stream failed).
fn handshake(
    ctx: &SessionCtx<'_>,
    cfg: &GuestConfig,
) -> Result<(UnixStream, Shared), Option<VmEnded>> {
    let Some(stream) = accept(ctx) else {
        return Err(Some(if ctx.done.load(Ordering::SeqCst) {
            VmEnded::MonitorEnded
        } else {
            VmEnded::BootTimeout
        }));
    };
    if let Ok(c) = stream.try_clone() {
        *ctx.slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(c);
    }
    if ctx.done.load(Ordering::SeqCst) {
        return Err(None);
    }
    let reader = stream.try_clone().map_err(|_| None)?;
    let writer: Shared = Arc::new(Mutex::new(stream));
    let cfg_json = serde_json::to_vec(cfg).map_err(|_| None)?;
    if cfg_json.len() > mux::MAX_CONFIG {
        return Err(Some(VmEnded::GuestFailed {
            reason: "the server's command and variables exceed 64 KiB".into(),
        }));
    }
    send(&writer, Kind::Config, 0, &cfg_json).map_err(|_| None)?;
    // Until the agent answers, reads time out at the boot deadline.
    let remaining = (ctx.started + ctx.boot_timeout).saturating_duration_since(Instant::now());
    let _ = reader.set_read_timeout(Some(remaining.max(Duration::from_millis(1))));
    Ok((reader, writer))
}

/// Sends the caller's input to the server, then its end; [`EOF_GRACE`]
/// later, the cancel byte (`e`). Detached: a caller's input that never
/// ends must not hold the VM's end.
fn pump_input(mut inp: Box<dyn Read + Send>, w: Shared, cancel: Option<UnixStream>) {
    thread::spawn(move || {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match inp.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if send(&w, Kind::Stdin, 0, &buf[..n]).is_err() {
                        return;
                    }
                }
            }
        }
        let _ = send(&w, Kind::StdinEof, 0, &[]);
        thread::sleep(EOF_GRACE);
        if let Some(mut c) = cancel {
            let _ = c.write_all(b"e");
        }
    });
}

fn open_conn(ctx: &SessionCtx<'_>, writer: &Shared, conns: &Conns, chan: u32) {
    let refuse = || {
        let _ = send(writer, Kind::Close, chan, &[]);
    };
    let Some(sock) = &ctx.egress_sock else {
        return refuse();
    };
    {
        let c = conns.lock().unwrap_or_else(|e| e.into_inner());
        if c.len() >= crate::guest::MAX_GUEST_CONNECTIONS || c.contains_key(&chan) {
            return refuse();
        }
    }
    let Ok(s) = UnixStream::connect(sock) else {
        return refuse();
    };
    let Ok(mut r) = s.try_clone() else {
        return refuse();
    };
    conns
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(chan, s);
    let w = writer.clone();
    thread::spawn(move || {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if send(&w, Kind::Data, chan, &buf[..n]).is_err() {
                        return;
                    }
                }
            }
        }
        let _ = send(&w, Kind::Close, chan, &[]);
    });
}
