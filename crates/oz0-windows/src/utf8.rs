//! Bytes to whole UTF-8 text, across writes: what a Windows console takes.
//!
//! A console written through the standard library refuses bytes that are
//! not UTF-8, and a pseudo console's output arrives in pieces that may cut
//! a character in two. [`Carry`] keeps an unfinished character for the next
//! piece and shows a sequence that can never be UTF-8 as U+FFFD, so no
//! output is dropped and none stops the carrying.

/// The longest unfinished UTF-8 sequence.
const MAX_CARRY: usize = 3;

/// An unfinished character kept between pieces.
#[derive(Debug, Default)]
pub struct Carry {
    pending: Vec<u8>,
}

impl Carry {
    /// The text of what was kept and `bytes`, up to an unfinished
    /// character at their end, which is kept.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::with_capacity(self.pending.len());
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (good, bad) = rest.split_at(e.valid_up_to());
                    // `good` is valid UTF-8: `valid_up_to` says so.
                    out.push_str(std::str::from_utf8(good).unwrap_or_default());
                    match e.error_len() {
                        Some(n) => {
                            out.push('\u{FFFD}');
                            rest = &bad[n..];
                        }
                        None => {
                            rest = bad;
                            break;
                        }
                    }
                }
            }
        }
        debug_assert!(rest.len() <= MAX_CARRY);
        self.pending = rest.to_vec();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_cut_in_two_comes_out_whole() {
        let mut c = Carry::default();
        let e = "é€😀".as_bytes();
        assert_eq!(c.push(&e[..1]), "");
        assert_eq!(c.push(&e[1..4]), "é");
        assert_eq!(c.push(&e[4..8]), "€");
        assert_eq!(c.push(&e[8..]), "😀");
    }

    #[test]
    fn bytes_that_are_never_utf8_show_as_replacement_and_carrying_goes_on() {
        let mut c = Carry::default();
        assert_eq!(c.push(b"a\xffb\xc3"), "a\u{FFFD}b");
        assert_eq!(c.push(b"(c"), "\u{FFFD}(c");
        assert_eq!(c.push(b"\x1b[31mred\x1b[0m"), "\x1b[31mred\x1b[0m");
    }
}
