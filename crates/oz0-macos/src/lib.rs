//! `oz0-macos`: macOS tier 1 (Seatbelt) and tier 2 (Apple's `container`), as data.
