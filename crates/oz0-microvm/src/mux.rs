//! The one byte stream between the node and a VM's guest agent.
//!
//! A virtio-serial port (the guest side) bound to a unix socket (the node's
//! side) carries frames: the guest's configuration, the server's stdin,
//! stdout, stderr and exit status, and the guest's proxy connections, each
//! on a channel of its own. There is no network device: this stream is the
//! only way in or out besides `/work`.
//!
//! The node treats every frame from the guest as hostile: the header is
//! fixed-size, a payload is at most [`MAX_PAYLOAD`] bytes, an unknown kind
//! ends the VM, and no frame can name a path or a host (the guest can only
//! open a channel to the proxy socket, which checks its token and allowlist).
//!
//! Frame: kind (1 byte), channel (4 bytes, big-endian), length (4 bytes,
//! big-endian), payload.

use std::io::{self, Read, Write};

/// Largest payload of one frame.
pub const MAX_PAYLOAD: usize = 64 * 1024;
/// Largest configuration frame (it carries the server's command and
/// variables; several frames of it are not needed).
pub const MAX_CONFIG: usize = MAX_PAYLOAD;

/// The frame's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Node → guest: the [`crate::guest::GuestConfig`] as JSON (once, first).
    Config = 1,
    /// Node → guest: bytes for the server's stdin.
    Stdin = 2,
    /// Node → guest: the server's stdin ended.
    StdinEof = 3,
    /// Guest → node: bytes of the server's stdout.
    Stdout = 4,
    /// Guest → node: bytes of the server's stderr.
    Stderr = 5,
    /// Guest → node: the server ended; payload: its status (i32, big-endian).
    Exit = 6,
    /// Guest → node: a new proxy connection on `chan`.
    Open = 7,
    /// Either way: bytes of proxy connection `chan`.
    Data = 8,
    /// Either way: no more bytes of proxy connection `chan` from this side.
    Close = 9,
    /// Guest → node: the agent runs and has applied its configuration;
    /// payload: the bridge's port (u16, big-endian) or empty.
    Ready = 10,
    /// Guest → node: the agent could not start the server; payload: why.
    Failed = 11,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Config,
            2 => Kind::Stdin,
            3 => Kind::StdinEof,
            4 => Kind::Stdout,
            5 => Kind::Stderr,
            6 => Kind::Exit,
            7 => Kind::Open,
            8 => Kind::Data,
            9 => Kind::Close,
            10 => Kind::Ready,
            11 => Kind::Failed,
            _ => return None,
        })
    }
}

/// One frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Its kind.
    pub kind: Kind,
    /// Its channel (0 for the server's streams).
    pub chan: u32,
    /// Its payload.
    pub payload: Vec<u8>,
}

/// Reads one frame; `Ok(None)` at a clean end of stream.
pub fn read_frame(r: &mut impl Read) -> io::Result<Option<Frame>> {
    let mut head = [0u8; 9];
    let mut got = 0;
    while got < head.len() {
        match r.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let kind = Kind::from_u8(head[0]).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unknown frame kind {}", head[0]),
        )
    })?;
    let chan = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
    let len = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) as usize;
    if len > MAX_PAYLOAD {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes, over the limit of {MAX_PAYLOAD}"),
        ));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    Ok(Some(Frame {
        kind,
        chan,
        payload,
    }))
}

/// Writes one frame (splitting nothing: `data` must fit [`MAX_PAYLOAD`]).
pub fn write_frame(w: &mut impl Write, kind: Kind, chan: u32, data: &[u8]) -> io::Result<()> {
    let len = match u32::try_from(data.len()) {
        Ok(n) if data.len() <= MAX_PAYLOAD => n,
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "frame payload too large",
            ))
        }
    };
    let mut buf = Vec::with_capacity(9 + data.len());
    buf.push(kind as u8);
    buf.extend_from_slice(&chan.to_be_bytes());
    buf.extend_from_slice(&len.to_be_bytes());
    buf.extend_from_slice(data);
    w.write_all(&buf)?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_limits() {
        let mut buf = Vec::new();
        write_frame(&mut buf, Kind::Data, 7, b"hello").unwrap();
        write_frame(&mut buf, Kind::StdinEof, 0, b"").unwrap();
        let mut r = io::Cursor::new(buf);
        let f = read_frame(&mut r).unwrap().unwrap();
        assert_eq!(
            (f.kind, f.chan, f.payload.as_slice()),
            (Kind::Data, 7, &b"hello"[..])
        );
        assert_eq!(read_frame(&mut r).unwrap().unwrap().kind, Kind::StdinEof);
        assert!(read_frame(&mut r).unwrap().is_none());

        let mut big = vec![8u8, 0, 0, 0, 1];
        big.extend_from_slice(&(u32::try_from(MAX_PAYLOAD).unwrap() + 1).to_be_bytes());
        assert!(read_frame(&mut io::Cursor::new(big)).is_err());
        assert!(read_frame(&mut io::Cursor::new(vec![99u8, 0, 0, 0, 0, 0, 0, 0, 0])).is_err());
        assert!(read_frame(&mut io::Cursor::new(vec![8u8, 0, 0])).is_err());
        assert!(write_frame(&mut Vec::new(), Kind::Data, 0, &vec![0; MAX_PAYLOAD + 1]).is_err());
    }
}
