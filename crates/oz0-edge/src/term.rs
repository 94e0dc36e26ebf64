//! Text on its way to an operator's terminal: what a job printed, what a
//! node or an edge says.
//!
//! A terminal acts on what it is sent. ESC starts sequences that set the
//! clipboard (OSC 52), the window's title (OSC 0), move the cursor and
//! erase lines (CSI); the C1 controls U+0080–U+009F do the same on
//! terminals that take them (U+009B is CSI), and BEL, backspace and a lone
//! CR rewrite what is on screen. [`escape`] makes every one of them visible
//! and keeps what reads as text:
//!
//! | in | shown as |
//! |---|---|
//! | newline, tab, a CR right before a newline (a Windows line end) | kept |
//! | other C0 controls (ESC, BEL, backspace, a lone CR, …) and DEL | `\x1b`, `\x07`, `\x08`, `\x0d`, `\x7f` |
//! | C1 controls U+0080–U+009F | `\u{9b}` |
//! | bidirectional controls (U+061C, U+200E–U+200F, U+202A–U+202E, U+2066–U+2069), which reorder what is shown | `\u{202e}` |
//! | a byte that is not UTF-8 | `\xff` |
//! | everything else, backslashes too | kept |
//!
//! A backslash is kept, so `\x1b` on screen may be a job's own four
//! characters: the raw bytes (`oz0 … --raw`) or JSON (`--json`) tell them
//! apart. [`json`] is JSON with the escapes serde_json leaves out (DEL, C1,
//! U+2028, U+2029): the same value, no control character in its text.
//! [`print()`] writes to standard output, where a reader that went away
//! (`| head`) ends the output, not the command.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::Write as _;

/// `bytes` as a terminal may show them: every control character but
/// newline and tab (and CR before newline) as a visible escape, every byte
/// that is not UTF-8 as `\xNN`. Borrows when there is nothing to escape.
pub fn escape(bytes: &[u8]) -> Cow<'_, str> {
    if let Ok(s) = std::str::from_utf8(bytes) {
        if !s
            .chars()
            .any(|c| (c.is_control() && c != '\n' && c != '\t') || is_bidi(c))
        {
            return Cow::Borrowed(s);
        }
    }
    let mut out = String::with_capacity(bytes.len() + 16);
    for chunk in bytes.utf8_chunks() {
        let mut chars = chunk.valid().chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\n' | '\t' => out.push(c),
                '\r' if chars.peek() == Some(&'\n') => out.push(c),
                // C0 and DEL
                '\0'..='\x1f' | '\x7f' => {
                    let _ = write!(out, "\\x{:02x}", u32::from(c));
                }
                // C1, and the controls that reorder text on screen
                c if ('\u{80}'..='\u{9f}').contains(&c) || is_bidi(c) => {
                    let _ = write!(out, "\\u{{{:02x}}}", u32::from(c));
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    Cow::Owned(out)
}

/// Whether `c` is a bidirectional control, which makes a terminal show the
/// text around it in another order than it is.
pub fn is_bidi(c: char) -> bool {
    matches!(c, '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `v` as pretty JSON with every control character escaped: serde_json
/// escapes C0 but writes DEL, C1 and the line and paragraph separators as
/// they are; here they are `\u007f`, `\u009b`, `\u2028`, `\u2029` (outside
/// strings JSON has none of them, so the text is the same value).
pub fn json<T: serde::Serialize + ?Sized>(v: &T) -> serde_json::Result<String> {
    let text = serde_json::to_string_pretty(v)?;
    if !text
        .chars()
        .any(|c| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}'))
    {
        return Ok(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\x7f' | '\u{80}'..='\u{9f}' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

/// Writes `text` to standard output. A reader that went away (a closed
/// pipe, as `| head` leaves it) is not an error: the output ends there
/// and the command goes on to its own status. Any other failure is.
pub fn print(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(b: &[u8]) -> String {
        escape(b).into_owned()
    }

    #[test]
    fn text_reordering_controls_are_made_visible() {
        assert_eq!(
            shown("a\u{202e}cba\u{2066}x\u{200f}".as_bytes()),
            r"a\u{202e}cba\u{2066}x\u{200f}"
        );
    }

    #[test]
    fn plain_text_is_borrowed_and_kept() {
        let s = "a line\tand a tab\nsecond line, ünïcode, a \\ backslash\n";
        assert!(matches!(escape(s.as_bytes()), Cow::Borrowed(t) if t == s));
    }

    #[test]
    fn terminal_sequences_are_made_visible() {
        let cases: [(&[u8], &str); 12] = [
            (b"\x1b]52;c;b3duZWQ=\x07", r"\x1b]52;c;b3duZWQ=\x07"), // OSC 52: clipboard
            (b"\x1b]0;owned\x1b\\", r"\x1b]0;owned\x1b\"),          // OSC 0: title, ST
            (b"\x1b[1A\x1b[2K", r"\x1b[1A\x1b[2K"),                 // CSI cursor-up, erase line
            (b"bell\x07", r"bell\x07"),
            (b"x\x08y", r"x\x08y"),       // backspace
            (b"abc\rdef", r"abc\x0ddef"), // a lone CR rewrites the line
            (b"del\x7f", r"del\x7f"),
            (b"nul\0", r"nul\x00"),
            ("\u{9b}2J".as_bytes(), r"\u{9b}2J"), // C1 CSI, as UTF-8
            ("\u{80}\u{9d}\u{9f}".as_bytes(), r"\u{80}\u{9d}\u{9f}"),
            (b"\xff\xfe ok \xc3", r"\xff\xfe ok \xc3"), // not UTF-8
            (b"\xc2\x9b", r"\u{9b}"),                   // the same C1, byte by byte
        ];
        for (input, want) in cases {
            assert_eq!(shown(input), want, "{input:?}");
        }
    }

    #[test]
    fn newline_tab_and_windows_line_ends_are_kept() {
        assert_eq!(shown(b"a\tb\r\nc\n"), "a\tb\r\nc\n");
        assert_eq!(shown(b"a\r\r\n"), "a\\x0d\r\n");
        assert_eq!(shown(b"end\r"), r"end\x0d");
    }

    #[test]
    fn nothing_a_terminal_acts_on_is_left() {
        let all: Vec<u8> = (0..=255).collect();
        let s = shown(&all);
        assert!(
            !s.chars().any(|c| c.is_control() && c != '\n' && c != '\t'),
            "{s:?}"
        );
        let c1: String = ('\u{80}'..='\u{9f}').collect();
        let s = shown(c1.as_bytes());
        assert!(!s.chars().any(char::is_control), "{s:?}");
    }

    #[test]
    fn json_escapes_what_serde_json_leaves() {
        let v = serde_json::json!({"t": "\u{1b}[2J \u{9b}2J \u{7f} \u{2028}\u{2029} é"});
        let text = json(&v).unwrap();
        assert!(
            !text
                .chars()
                .any(|c| (c.is_control() && c != '\n') || matches!(c, '\u{2028}' | '\u{2029}')),
            "{text:?}"
        );
        assert!(
            text.contains(r"\u001b[2J \u009b2J \u007f \u2028\u2029 é"),
            "{text}"
        );
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, v);
    }
}
