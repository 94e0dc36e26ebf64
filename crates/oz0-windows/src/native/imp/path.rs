//! The path Windows resolves an open file or folder to.

use std::ffi::OsString;
use std::os::windows::ffi::OsStringExt;
use std::os::windows::io::AsRawHandle;
use std::path::PathBuf;

use windows_sys::Win32::Storage::FileSystem::{
    GetFinalPathNameByHandleW, FILE_NAME_NORMALIZED, VOLUME_NAME_DOS,
};

/// The longest path Windows names, in UTF-16 units.
const MAX_UNITS: usize = 32_768;

/// The path Windows resolves the open `f` to now, every link, junction and
/// short name on the way resolved (`\\?\C:\…` on a drive, `\\?\UNC\…` on a
/// share).
pub fn final_path(f: &std::fs::File) -> std::io::Result<PathBuf> {
    let mut buf = vec![0u16; 512];
    loop {
        let len = u32::try_from(buf.len()).unwrap_or(u32::MAX);
        // SAFETY: a live handle of `f`, borrowed for the call; `buf` holds
        // `len` units, which the call writes at most.
        let n = unsafe {
            GetFinalPathNameByHandleW(
                f.as_raw_handle(),
                buf.as_mut_ptr(),
                len,
                FILE_NAME_NORMALIZED | VOLUME_NAME_DOS,
            )
        } as usize;
        if n == 0 {
            return Err(std::io::Error::last_os_error());
        }
        if n < buf.len() {
            return Ok(PathBuf::from(OsString::from_wide(&buf[..n])));
        }
        // Too small: `n` is the size it needs, its NUL counted.
        if n > MAX_UNITS {
            return Err(std::io::Error::other("a path longer than Windows names"));
        }
        buf.resize(n + 1, 0);
    }
}
