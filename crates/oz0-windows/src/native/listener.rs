//! Loopback listeners no other process can share.
//!
//! On Windows a second socket may bind an address and port already bound,
//! when it asks with `SO_REUSEADDR` and runs as the same user, and then
//! takes some of the connections meant for the first: a relay's or a run
//! proxy's listener would hand a container's connection, and the run's
//! token in its first request, to whoever bound second. A socket that set
//! `SO_EXCLUSIVEADDRUSE` before its bind cannot be shared that way, so
//! every listener the node opens for a run is made here, and the option is
//! read back before the bind: a Windows that does not keep it gets no
//! listener at all.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::windows::io::{FromRawSocket, RawSocket};

use windows_sys::Win32::Networking::WinSock::{
    bind, closesocket, getsockopt, listen, setsockopt, WSAGetLastError, WSASocketW, WSAStartup,
    AF_INET, AF_INET6, IN6_ADDR, IN6_ADDR_0, INVALID_SOCKET, IN_ADDR, IN_ADDR_0, IPPROTO_TCP,
    SOCKADDR, SOCKADDR_IN, SOCKADDR_IN6, SOCKADDR_IN6_0, SOCKET, SOCK_STREAM, SOL_SOCKET,
    SOMAXCONN, SO_EXCLUSIVEADDRUSE, WSADATA, WSA_FLAG_NO_HANDLE_INHERIT, WSA_FLAG_OVERLAPPED,
};

/// A socket closed on drop unless handed on.
struct Owned(SOCKET);

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: the socket is ours and open; nothing uses it after this.
        unsafe { closesocket(self.0) };
    }
}

fn last_error(call: &str) -> io::Error {
    // SAFETY: reads this thread's last Winsock error; no arguments.
    let code = unsafe { WSAGetLastError() };
    let e = io::Error::from_raw_os_error(code);
    io::Error::new(e.kind(), format!("{call}: {e}"))
}

/// Winsock started for this process (std starts it too, lazily; the
/// count is kept by Winsock, and it is never cleaned up while we run).
fn startup() -> io::Result<()> {
    // SAFETY: WSADATA is plain data Winsock fills in; zero is a valid start.
    let mut data: WSADATA = unsafe { std::mem::zeroed() };
    // SAFETY: `data` is a valid out-pointer for the call's length.
    let rc = unsafe { WSAStartup(0x0202, &mut data) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// A listener on `addr`, which must be a loopback address, bound with
/// `SO_EXCLUSIVEADDRUSE` (checked by reading it back), not inherited by
/// child processes, and usable by tokio (overlapped).
pub fn exclusive_listener(addr: SocketAddr) -> io::Result<TcpListener> {
    if !addr.ip().is_loopback() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{addr} is not a loopback address"),
        ));
    }
    startup()?;
    let family = match addr {
        SocketAddr::V4(_) => AF_INET,
        SocketAddr::V6(_) => AF_INET6,
    };
    // SAFETY: plain integers; no protocol info is passed (null).
    let raw = unsafe {
        WSASocketW(
            i32::from(family),
            SOCK_STREAM,
            IPPROTO_TCP,
            std::ptr::null(),
            0,
            WSA_FLAG_OVERLAPPED | WSA_FLAG_NO_HANDLE_INHERIT,
        )
    };
    if raw == INVALID_SOCKET {
        return Err(last_error("WSASocketW"));
    }
    let sock = Owned(raw);
    let one: i32 = 1;
    // SAFETY: `one` is a live i32 and the length says so.
    let rc = unsafe {
        setsockopt(
            sock.0,
            SOL_SOCKET,
            SO_EXCLUSIVEADDRUSE,
            std::ptr::from_ref(&one).cast(),
            4,
        )
    };
    if rc != 0 {
        return Err(last_error("setsockopt(SO_EXCLUSIVEADDRUSE)"));
    }
    let (mut got, mut len): (i32, i32) = (0, 4);
    // SAFETY: `got` and `len` are live and `len` is `got`'s size.
    let rc = unsafe {
        getsockopt(
            sock.0,
            SOL_SOCKET,
            SO_EXCLUSIVEADDRUSE,
            std::ptr::from_mut(&mut got).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(last_error("getsockopt(SO_EXCLUSIVEADDRUSE)"));
    }
    if got == 0 {
        return Err(io::Error::other(
            "this Windows did not keep SO_EXCLUSIVEADDRUSE on the socket, so another process could share its port: no listener is opened",
        ));
    }
    let rc = match addr {
        SocketAddr::V4(a) => {
            let sa = SOCKADDR_IN {
                sin_family: AF_INET,
                sin_port: a.port().to_be(),
                sin_addr: IN_ADDR {
                    S_un: IN_ADDR_0 {
                        S_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                },
                sin_zero: [0; 8],
            };
            // SAFETY: `sa` is a complete SOCKADDR_IN and the length is its size.
            unsafe {
                bind(
                    sock.0,
                    std::ptr::from_ref(&sa).cast::<SOCKADDR>(),
                    sockaddr_len::<SOCKADDR_IN>(),
                )
            }
        }
        SocketAddr::V6(a) => {
            let sa = SOCKADDR_IN6 {
                sin6_family: AF_INET6,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: IN6_ADDR {
                    u: IN6_ADDR_0 {
                        Byte: a.ip().octets(),
                    },
                },
                Anonymous: SOCKADDR_IN6_0 {
                    sin6_scope_id: a.scope_id(),
                },
            };
            // SAFETY: `sa` is a complete SOCKADDR_IN6 and the length is its size.
            unsafe {
                bind(
                    sock.0,
                    std::ptr::from_ref(&sa).cast::<SOCKADDR>(),
                    sockaddr_len::<SOCKADDR_IN6>(),
                )
            }
        }
    };
    if rc != 0 {
        return Err(last_error(&format!("bind({addr})")));
    }
    // SAFETY: a bound socket of ours; the backlog is Winsock's own maximum.
    if unsafe { listen(sock.0, i32::try_from(SOMAXCONN).unwrap_or(i32::MAX)) } != 0 {
        return Err(last_error("listen"));
    }
    let raw = sock.0;
    std::mem::forget(sock);
    // SAFETY: `raw` is an open, listening socket that nothing else owns
    // (the guard was forgotten): the listener takes it over.
    Ok(unsafe { TcpListener::from_raw_socket(raw as RawSocket) })
}

fn sockaddr_len<T>() -> i32 {
    i32::try_from(std::mem::size_of::<T>()).expect("a socket address is small")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn option(l: &TcpListener) -> i32 {
        use std::os::windows::io::AsRawSocket;
        let (mut got, mut len): (i32, i32) = (0, 4);
        // SAFETY: the listener's socket is open; `got` and `len` are live.
        let rc = unsafe {
            getsockopt(
                SOCKET::try_from(l.as_raw_socket()).unwrap(),
                SOL_SOCKET,
                SO_EXCLUSIVEADDRUSE,
                std::ptr::from_mut(&mut got).cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0);
        got
    }

    #[test]
    fn the_listener_is_exclusive_and_accepts() {
        let l = exclusive_listener("127.0.0.1:0".parse().unwrap()).unwrap();
        assert_eq!(option(&l), 1, "SO_EXCLUSIVEADDRUSE is set");
        let plain = TcpListener::bind("127.0.0.1:0").unwrap();
        assert_eq!(option(&plain), 0, "std's listener does not set it");
        let addr = l.local_addr().unwrap();
        assert!(addr.ip().is_loopback() && addr.port() != 0);
        let c = std::net::TcpStream::connect(addr).unwrap();
        let (s, _) = l.accept().unwrap();
        assert_eq!(s.peer_addr().unwrap(), c.local_addr().unwrap());
        // A second bind of the same port fails, with or without reuse.
        assert!(exclusive_listener(addr).is_err());
        assert!(TcpListener::bind(addr).is_err());
        let v6 = exclusive_listener("[::1]:0".parse().unwrap());
        if let Ok(v6) = v6 {
            assert_eq!(option(&v6), 1);
        }
    }

    #[test]
    fn only_loopback() {
        let e = exclusive_listener("0.0.0.0:0".parse().unwrap()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
