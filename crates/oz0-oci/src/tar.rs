//! A tar reader for image layers, bounded as it streams: ustar, GNU long
//! names and links, and PAX extended headers (`path`, `linkpath`, `size`;
//! every other key, extended attributes among them, is ignored). A long
//! name or a PAX header is read only up to its bound, never whole on its
//! header's word; sparse files, multi-volume archives and every other kind
//! of entry are refused. The reader never allocates on a header's word:
//! a long name or PAX header over its bound is refused before it is read,
//! and the bytes of all of them together are bounded
//! ([`Reader::limit_meta`]), as is the number of headers
//! ([`Reader::limit_headers`]).

use std::io::{self, Read};

/// Longest path or link target taken (Linux's `PATH_MAX`).
pub const MAX_NAME: u64 = 4096;
/// Largest PAX extended header taken.
pub const MAX_PAX: u64 = 64 * 1024;

const BLOCK: usize = 512;

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A regular file (`size` bytes of data follow).
    File,
    /// A directory.
    Dir,
    /// A symbolic link to this target.
    Symlink(Vec<u8>),
    /// A hard link to this earlier entry.
    Hardlink(Vec<u8>),
    /// A character or block device.
    Device,
    /// A named pipe.
    Fifo,
}

/// One entry's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Its path, as the archive names it.
    pub path: Vec<u8>,
    /// What it is.
    pub kind: Kind,
    /// Its permission bits (with setuid, setgid and sticky, as given).
    pub mode: u32,
    /// The bytes of data that follow it: a file's contents; anything
    /// else's (a hard link may carry its file's) is skipped unread.
    pub size: u64,
}

/// Reads entries one by one from a tar stream.
pub struct Reader<R: Read> {
    r: R,
    /// Data of the current entry not read yet.
    left: u64,
    /// Padding after the current entry's data.
    pad: u64,
    done: bool,
    headers_left: u64,
    headers_read: u64,
    meta_left: u64,
    meta_read: u64,
    over: bool,
}

fn err(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.into())
}

/// An octal (or base-256) number field.
fn number(field: &[u8], what: &str) -> io::Result<u64> {
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        // Base-256, big-endian; the first byte's top bit is the marker.
        let mut n: u64 = u64::from(field[0] & 0x7f);
        for &b in &field[1..] {
            n = n
                .checked_mul(256)
                .and_then(|n| n.checked_add(u64::from(b)))
                .ok_or_else(|| err(format!("its {what} field overflows")))?;
        }
        return Ok(n);
    }
    let s: Vec<u8> = field
        .iter()
        .copied()
        .skip_while(|b| *b == b' ')
        .take_while(|b| *b != 0 && *b != b' ')
        .collect();
    if s.is_empty() {
        return Ok(0);
    }
    let s =
        std::str::from_utf8(&s).map_err(|_| err(format!("its {what} field is not a number")))?;
    u64::from_str_radix(s, 8).map_err(|_| err(format!("its {what} field {s:?} is not octal")))
}

fn cstr(field: &[u8]) -> &[u8] {
    let end = field.iter().position(|b| *b == 0).unwrap_or(field.len());
    &field[..end]
}

fn checksum_ok(h: &[u8; BLOCK]) -> io::Result<bool> {
    let want = number(&h[148..156], "checksum")?;
    let mut unsigned: u64 = 0;
    let mut signed: i64 = 0;
    for (i, &b) in h.iter().enumerate() {
        let b = if (148..156).contains(&i) { b' ' } else { b };
        unsigned += u64::from(b);
        // Some old writers summed signed bytes.
        signed += i64::from(i8::from_ne_bytes([b]));
    }
    Ok(want == unsigned || i64::try_from(want).is_ok_and(|w| w == signed))
}

#[derive(Default)]
struct Pending {
    path: Option<Vec<u8>>,
    link: Option<Vec<u8>>,
    size: Option<u64>,
}

impl<R: Read> Reader<R> {
    /// A reader of the tar stream `r`.
    pub fn new(r: R) -> Reader<R> {
        Reader {
            r,
            left: 0,
            pad: 0,
            done: false,
            headers_left: u64::MAX,
            headers_read: 0,
            meta_left: u64::MAX,
            meta_read: 0,
            over: false,
        }
    }

    /// Reads at most `n` more headers (long names and PAX headers count).
    pub fn limit_headers(&mut self, n: u64) {
        self.headers_left = n;
    }

    /// Reads at most `n` more bytes of long names and PAX headers.
    pub fn limit_meta(&mut self, n: u64) {
        self.meta_left = n;
    }

    /// The bytes of long names and PAX headers read so far.
    pub fn meta_read(&self) -> u64 {
        self.meta_read
    }

    /// The headers read so far.
    pub fn headers_read(&self) -> u64 {
        self.headers_read
    }

    /// Whether the last error was the bound of [`Reader::limit_headers`]
    /// or of [`Reader::limit_meta`].
    pub fn over_bound(&self) -> bool {
        self.over
    }

    /// The stream underneath (to read what follows the archive).
    pub fn into_inner(self) -> R {
        self.r
    }

    fn skip(&mut self, mut n: u64) -> io::Result<()> {
        let mut buf = [0u8; 8192];
        while n > 0 {
            let want = usize::try_from(n.min(8192)).expect("at most 8192");
            let got = self.r.read(&mut buf[..want])?;
            if got == 0 {
                return Err(err(
                    "the layer ends inside an entry's data (it is truncated)",
                ));
            }
            n -= u64::try_from(got).expect("usize fits u64");
        }
        Ok(())
    }

    /// Reads `size` bytes of a metadata entry, at most `max`.
    fn small(&mut self, size: u64, max: u64, what: &str) -> io::Result<Vec<u8>> {
        if size > max {
            return Err(err(format!(
                "its {what} is {size} bytes, over the {max} the node reads"
            )));
        }
        if size > self.meta_left {
            self.over = true;
            return Err(err(format!(
                "its long names and PAX headers are over the bound of one image (at a {what} of {size} bytes)"
            )));
        }
        self.meta_left -= size;
        self.meta_read += size;
        let mut v = vec![0u8; usize::try_from(size).expect("bounded")];
        self.r
            .read_exact(&mut v)
            .map_err(|_| err(format!("the layer ends inside a {what}")))?;
        self.skip(padding(size))?;
        Ok(v)
    }

    /// The next entry, or `None` at the archive's end.
    pub fn next_entry(&mut self) -> io::Result<Option<Header>> {
        if self.done {
            return Ok(None);
        }
        let rest = self.left + self.pad;
        self.skip(rest)?;
        self.left = 0;
        self.pad = 0;
        let mut pending = Pending::default();
        loop {
            let mut h = [0u8; BLOCK];
            let mut got = 0;
            while got < BLOCK {
                let n = self.r.read(&mut h[got..])?;
                if n == 0 {
                    break;
                }
                got += n;
            }
            if got == 0 && pending.path.is_none() && pending.link.is_none() {
                // Ended without the closing blocks: taken as the end.
                self.done = true;
                return Ok(None);
            }
            if got < BLOCK {
                return Err(err("the layer ends inside a header (it is truncated)"));
            }
            if h.iter().all(|b| *b == 0) {
                self.done = true;
                return Ok(None);
            }
            if self.headers_left == 0 {
                self.over = true;
                return Err(err("it has more entries than the bound"));
            }
            self.headers_left -= 1;
            self.headers_read += 1;
            if !checksum_ok(&h)? {
                return Err(err(
                    "a header's checksum is wrong (the layer is not a tar stream, or is damaged)",
                ));
            }
            let size = number(&h[124..136], "size")?;
            let flag = h[156];
            match flag {
                b'L' => {
                    let mut v = self.small(size, MAX_NAME, "long name")?;
                    v.truncate(cstr(&v).len());
                    pending.path = Some(v);
                    continue;
                }
                b'K' => {
                    let mut v = self.small(size, MAX_NAME, "long link name")?;
                    v.truncate(cstr(&v).len());
                    pending.link = Some(v);
                    continue;
                }
                b'x' => {
                    let v = self.small(size, MAX_PAX, "PAX header")?;
                    pax(&v, &mut pending)?;
                    continue;
                }
                b'g' => {
                    // Global PAX headers name nothing a layer needs.
                    self.small(size, MAX_PAX, "global PAX header")?;
                    continue;
                }
                _ => {}
            }
            let ustar = &h[257..263] == b"ustar\0";
            let name = cstr(&h[0..100]);
            let path = match pending.path.take() {
                Some(p) => p,
                None if ustar && h[345] != 0 => {
                    let mut p = cstr(&h[345..500]).to_vec();
                    p.push(b'/');
                    p.extend_from_slice(name);
                    p
                }
                None => name.to_vec(),
            };
            let link = pending
                .link
                .take()
                .unwrap_or_else(|| cstr(&h[157..257]).to_vec());
            let size = pending.size.take().unwrap_or(size);
            let mode = u32::try_from(number(&h[100..108], "mode")? & 0o7777).expect("masked");
            let kind = match flag {
                b'0' | 0 | b'7' => Kind::File,
                b'1' => Kind::Hardlink(link),
                b'2' => Kind::Symlink(link),
                b'3' | b'4' => Kind::Device,
                b'5' => Kind::Dir,
                b'6' => Kind::Fifo,
                b'S' => {
                    return Err(err(
                        "it holds a sparse file, which the node does not unpack",
                    ))
                }
                other => {
                    return Err(err(format!(
                        "it holds an entry of type {:?}, which the node does not unpack",
                        char::from(other)
                    )))
                }
            };
            // Only a file's data is read; anything else's is skipped.
            self.left = size;
            self.pad = padding(size);
            return Ok(Some(Header {
                path,
                kind,
                mode,
                size,
            }));
        }
    }

    /// Reads the current entry's data (at most what is left of it).
    pub fn read_data(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let want = usize::try_from(self.left.min(u64::try_from(buf.len()).unwrap_or(u64::MAX)))
            .expect("at most buf.len()");
        let n = self.r.read(&mut buf[..want])?;
        if n == 0 {
            return Err(err("the layer ends inside a file's data (it is truncated)"));
        }
        self.left -= u64::try_from(n).expect("usize fits u64");
        Ok(n)
    }
}

fn padding(size: u64) -> u64 {
    (512 - size % 512) % 512
}

/// Parses PAX records (`LEN KEY=VALUE\n`) into `p`.
fn pax(mut v: &[u8], p: &mut Pending) -> io::Result<()> {
    while !v.is_empty() {
        let sp = v
            .iter()
            .position(|b| *b == b' ')
            .ok_or_else(|| err("a PAX record has no length"))?;
        let len: usize = std::str::from_utf8(&v[..sp])
            .ok()
            .and_then(|s| s.parse().ok())
            .filter(|l| *l > sp + 1 && *l <= v.len())
            .ok_or_else(|| err("a PAX record's length is wrong"))?;
        let rec = &v[sp + 1..len];
        let rec = rec
            .strip_suffix(b"\n")
            .ok_or_else(|| err("a PAX record does not end in a newline"))?;
        let eq = rec
            .iter()
            .position(|b| *b == b'=')
            .ok_or_else(|| err("a PAX record has no '='"))?;
        let (key, value) = (&rec[..eq], &rec[eq + 1..]);
        match key {
            b"path" => p.path = Some(value.to_vec()),
            b"linkpath" => p.link = Some(value.to_vec()),
            b"size" => {
                p.size = Some(
                    std::str::from_utf8(value)
                        .ok()
                        .and_then(|s| s.parse().ok())
                        .ok_or_else(|| err("a PAX size is not a number"))?,
                )
            }
            // Extended attributes (file capabilities among them), times,
            // owners: never applied.
            _ => {}
        }
        v = &v[len..];
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A ustar header for `name`.
    pub(crate) fn header(name: &str, flag: u8, mode: u32, size: u64, link: &str) -> Vec<u8> {
        let mut h = vec![0u8; 512];
        h[..name.len()].copy_from_slice(name.as_bytes());
        h[100..107].copy_from_slice(format!("{mode:07o}").as_bytes());
        if size < 1 << 33 {
            h[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
        } else {
            // Base-256, as GNU tar writes a size over 8 GiB.
            h[128..136].copy_from_slice(&size.to_be_bytes());
            h[124] = 0x80;
        }
        h[156] = flag;
        h[157..157 + link.len()].copy_from_slice(link.as_bytes());
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
        h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        h
    }

    fn entries(data: &[u8]) -> io::Result<Vec<(Header, Vec<u8>)>> {
        let mut r = Reader::new(data);
        let mut out = Vec::new();
        while let Some(h) = r.next_entry()? {
            let mut d = Vec::new();
            let mut buf = [0u8; 7];
            loop {
                let n = r.read_data(&mut buf)?;
                if n == 0 {
                    break;
                }
                d.extend_from_slice(&buf[..n]);
            }
            out.push((h, d));
        }
        Ok(out)
    }

    #[test]
    fn files_links_and_long_names() {
        let mut t = header("a/b.txt", b'0', 0o4755, 5, "");
        t.extend_from_slice(b"hello");
        t.extend(vec![0u8; 507]);
        let long = "d/".repeat(80) + "f";
        let mut pax_rec = format!("path={long}\n");
        let len = pax_rec.len() + 4;
        pax_rec = format!("{len} {pax_rec}");
        t.extend(header(
            "././@PaxHeader",
            b'x',
            0o644,
            pax_rec.len() as u64,
            "",
        ));
        t.extend_from_slice(pax_rec.as_bytes());
        t.extend(vec![0u8; 512 - pax_rec.len()]);
        t.extend(header("short", b'0', 0o644, 0, ""));
        t.extend(header("l", b'2', 0o777, 0, "/etc/passwd"));
        t.extend(vec![0u8; 1024]);
        let e = entries(&t).unwrap();
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].0.path, b"a/b.txt");
        assert_eq!(e[0].0.mode, 0o4755);
        assert_eq!(e[0].1, b"hello");
        assert_eq!(e[1].0.path, long.as_bytes());
        assert_eq!(e[2].0.kind, Kind::Symlink(b"/etc/passwd".to_vec()));
    }

    #[test]
    fn bounds_and_damage_are_refused() {
        // A long name claiming a gigabyte is refused on its header's word.
        let t = header("././@LongLink", b'L', 0o644, 1 << 30, "");
        let e = entries(&t).unwrap_err().to_string();
        assert!(
            e.contains("long name is 1073741824 bytes, over the 4096"),
            "{e}"
        );
        let mut t = header("x", b'0', 0o644, 0, "");
        t[0] = b'y';
        assert!(entries(&t).unwrap_err().to_string().contains("checksum"));
        let mut t = header("x", b'0', 0o644, 100, "");
        t.extend_from_slice(b"short");
        assert!(entries(&t).unwrap_err().to_string().contains("truncated"));
        let t = header("x", b'S', 0o644, 0, "");
        assert!(entries(&t).unwrap_err().to_string().contains("sparse"));
    }
}
