//! Standard output of the commands that print lists (facts, settings,
//! checks, a plugin's tools): a reader that went away (`| head`) ends the
//! output, not the command, which exits with its own status.

/// Prints `text` as `print!` does, except that a closed pipe is the end of
/// the output rather than a panic.
pub fn print(text: &str) {
    if let Err(e) = oz0_edge::term::print(text) {
        // Any other failure (a full disk) stays what `print!` makes it.
        panic!("failed printing to stdout: {e}");
    }
}

/// One line, through [`print`].
pub fn line(text: &str) {
    print(&format!("{text}\n"));
}
