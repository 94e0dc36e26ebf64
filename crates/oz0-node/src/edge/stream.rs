//! A running job's output, sent to the edge while the job runs, so
//! `oz0 job logs` (and `-f`) show it before the job ends and after a
//! cancel.
//!
//! Every [`TICK`] the node looks at the job's `stdout` and `stderr` files
//! (through descriptors of its own, opened read-only without following a
//! link and checked to be the very files it made for the job) and, when a
//! stream has new bytes, sends them with `append_output`: one request at a
//! time, a piece at most [`oz0_edge::MAX_TAIL_BYTES`] (when more piled up,
//! only their end, at its offset; the edge counts what was skipped).
//! Offsets are the files' byte offsets: a byte that is not UTF-8 goes as
//! `?`, one for one, so the edge's byte count stays the file's, and a
//! character cut at the end of what was written waits for the next look.
//! A lost lease stops the sending (the run's lease kills the job); any
//! other failure is logged once and tried again at the next look, and
//! never stops the job. The sending stops when the job's work ends: its
//! end is reported at once and still carries the tails of both streams
//! (where such bytes are U+FFFD).

use std::convert::Infallible;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use oz0_edge::client::{ClientError, Lease, NodeClient};

use super::log;

/// How often a running job's output files are looked at.
pub(super) const TICK: Duration = Duration::from_millis(250);

/// One stream of a job's output, as the node reads it.
struct Stream {
    name: &'static str,
    file: File,
    /// The stream's bytes the edge has (or that were skipped).
    sent: u64,
}

/// A piece of a stream to send.
#[derive(Debug, PartialEq)]
struct Piece {
    offset: u64,
    text: String,
    /// The stream's byte count once the edge has it.
    end: u64,
}

/// A job's output streams, to send while it runs.
pub(super) struct Output(Vec<Stream>);

impl Output {
    /// Opens the job's `stdout` and `stderr` in `record` to read them,
    /// when they are the files `out` and `err` the node made (a stream
    /// that cannot be opened so is not sent while the job runs, and said).
    pub(super) fn open(id: &str, record: &Path, out: &File, err: &File) -> Output {
        let mut streams = Vec::new();
        for (name, made) in [("stdout", out), ("stderr", err)] {
            let path = record.join(name);
            let opened = super::files::open_read(&path)
                .and_then(|f| Ok((f.metadata()?, made.metadata()?, f)));
            match opened {
                Ok((m, w, file)) if super::files::same_file(&m, &w) => {
                    streams.push(Stream {
                        name,
                        file,
                        sent: 0,
                    })
                }
                Ok(_) => log(&format!(
                    "job {id}: {} is not the file made for its {name}; it reaches the edge only with the job's end",
                    path.display()
                )),
                Err(e) => log(&format!(
                    "job {id}: cannot read {} ({e}); its {name} reaches the edge only with the job's end",
                    path.display()
                )),
            }
        }
        Output(streams)
    }

    /// Sends the new bytes of each stream every [`TICK`] while the lease
    /// holds; never returns (its caller drops it when the job's work ends).
    pub(super) async fn send(mut self, client: Arc<NodeClient>, lease: Lease) -> Infallible {
        let id = &lease.job.job_id;
        let mut said = false;
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            for s in &mut self.0 {
                let piece = match s.next() {
                    Ok(Some(p)) => p,
                    Ok(None) => continue,
                    Err(e) => {
                        if !said {
                            log(&format!("job {id}: cannot read its {}: {e}; tried again while it runs, and its end carries the tail", s.name));
                            said = true;
                        }
                        continue;
                    }
                };
                match client
                    .append_output(&lease, s.name, piece.offset, &piece.text)
                    .await
                {
                    Ok(_) => s.sent = piece.end,
                    Err(ClientError::LeaseLost { .. }) => return std::future::pending().await,
                    Err(e) => {
                        if !said {
                            log(&format!("job {id}: cannot send its output to the edge: {e}; tried again while it runs, and its end carries the tails"));
                            said = true;
                        }
                        break;
                    }
                }
            }
        }
    }
}

impl Stream {
    /// The stream's next piece, when it has new bytes that can be sent.
    fn next(&mut self) -> std::io::Result<Option<Piece>> {
        let size = self.file.metadata()?.len();
        if size <= self.sent {
            return Ok(None);
        }
        let from = self
            .sent
            .max(size.saturating_sub(oz0_edge::MAX_TAIL_BYTES as u64));
        let mut buf = vec![0u8; usize::try_from(size - from).unwrap_or(0)];
        let mut n = 0;
        while n < buf.len() {
            match super::files::read_at(&self.file, &mut buf[n..], from + n as u64)? {
                0 => break,
                k => n += k,
            }
        }
        buf.truncate(n);
        Ok(piece(from, &buf, from > self.sent))
    }
}

/// The piece `bytes` (the stream's from `from`) make: bytes that are not
/// UTF-8 as `?`, one for one; a character cut at the end left for the
/// next look, and one cut at the start (`cut`: what came before was
/// skipped) left out.
fn piece(from: u64, bytes: &[u8], cut: bool) -> Option<Piece> {
    let skip = if cut {
        bytes
            .iter()
            .take(3)
            .take_while(|b| (0x80..0xc0).contains(*b))
            .count()
    } else {
        0
    };
    let mut rest = &bytes[skip..];
    let mut text = String::with_capacity(rest.len());
    loop {
        match std::str::from_utf8(rest) {
            Ok(s) => {
                text.push_str(s);
                break;
            }
            Err(e) => {
                let (good, _) = rest.split_at(e.valid_up_to());
                text.push_str(std::str::from_utf8(good).unwrap_or_default());
                let Some(bad) = e.error_len() else { break };
                text.push_str(&"?".repeat(bad));
                rest = &rest[e.valid_up_to() + bad..];
            }
        }
    }
    if text.is_empty() {
        return None;
    }
    let offset = from + skip as u64;
    Some(Piece {
        offset,
        end: offset + text.len() as u64,
        text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_piece_keeps_the_files_offsets() {
        let p = |from, b: &[u8], cut| piece(from, b, cut).map(|p| (p.offset, p.text, p.end));
        assert_eq!(p(5, b"hi\n", false), Some((5, "hi\n".into(), 8)));
        // Not UTF-8: `?` for each byte.
        assert_eq!(p(0, b"a\xff\xfeb", false), Some((0, "a??b".into(), 4)));
        // A character cut at the end waits; one cut at the start is left out.
        assert_eq!(
            p(0, "aé".as_bytes()[..2].as_ref(), false),
            Some((0, "a".into(), 1))
        );
        assert_eq!(p(0, &"é".as_bytes()[..1], false), None);
        assert_eq!(
            p(10, &"é!".as_bytes()[1..], true),
            Some((11, "!".into(), 12))
        );
        assert_eq!(
            p(10, &"é!".as_bytes()[1..], false),
            Some((10, "?!".into(), 12))
        );
    }
}
