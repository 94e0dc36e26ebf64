//! A job's record on a node, the same for the Linux and the Windows node:
//! which ids may name its folder, and the end of its output as the edge
//! keeps it.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// A job id the edge made: used in file names only when it is plainly one.
pub fn safe_id(s: &str) -> bool {
    (1..=80).contains(&s.len())
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
}

/// The last [`oz0_edge::MAX_TAIL_BYTES`] of a job's output file (as text,
/// cut at a character boundary) and its size.
pub fn tail(path: &Path) -> (Option<String>, Option<u64>) {
    let Ok(mut f) = File::open(path) else {
        return (None, None);
    };
    let size = f.metadata().map(|m| m.len()).unwrap_or(0);
    let bound = oz0_edge::MAX_TAIL_BYTES as u64;
    if size > bound && f.seek(SeekFrom::Start(size - bound)).is_err() {
        return (None, Some(size));
    }
    let mut bytes = Vec::new();
    if f.take(bound).read_to_end(&mut bytes).is_err() {
        return (None, Some(size));
    }
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    // Replacement characters can make the text longer than the bytes.
    while text.len() > oz0_edge::MAX_TAIL_BYTES {
        let cut = text.char_indices().nth(1).map_or(text.len(), |(i, _)| i);
        text.drain(..cut);
    }
    (Some(text), Some(size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_is_the_end_and_bounded() {
        let d = std::env::temp_dir().join(format!("oz0-tail-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join("out");
        std::fs::write(&f, "short\n").unwrap();
        assert_eq!(tail(&f), (Some("short\n".into()), Some(6)));
        let mut big = "a".repeat(100_000).into_bytes();
        big.extend_from_slice(b"THE END");
        // Invalid UTF-8 near the end becomes replacement characters.
        big.splice(99_990..99_992, [0xff, 0xfe]);
        std::fs::write(&f, &big).unwrap();
        let (t, n) = tail(&f);
        let t = t.unwrap();
        assert_eq!(n, Some(100_007));
        assert!(
            t.ends_with("THE END") && t.len() <= oz0_edge::MAX_TAIL_BYTES,
            "{}",
            t.len()
        );
        assert_eq!(tail(&d.join("missing")), (None, None));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
