//! Tokens, access lists and AppContainer profiles: this process's user
//! SID, a path's access list read and replaced, a profile removed.

use std::ffi::c_void;

use windows_sys::Win32::Foundation::{CloseHandle, LocalFree, ERROR_SUCCESS, HANDLE};
use windows_sys::Win32::Security::Authorization::{
    ConvertSidToStringSidW, ConvertStringSecurityDescriptorToSecurityDescriptorW,
    GetNamedSecurityInfoW, SetNamedSecurityInfoW, SE_FILE_OBJECT,
};
use windows_sys::Win32::Security::{
    FreeSid, GetAce, GetSecurityDescriptorDacl, GetTokenInformation, TokenUser, ACCESS_ALLOWED_ACE,
    ACE_HEADER, ACL, DACL_SECURITY_INFORMATION, PROTECTED_DACL_SECURITY_INFORMATION,
    PSECURITY_DESCRIPTOR, PSID, TOKEN_QUERY, TOKEN_USER,
};
use windows_sys::Win32::System::Threading::{GetCurrentProcess, OpenProcessToken};

use super::{last_error, resolve, system32, wide, RawProc};
use crate::native::{NativeError, ProfileRemoval};

/// `S-1-…` of a SID Windows gave us.
fn sid_string(sid: PSID) -> Result<String, NativeError> {
    let mut text: *mut u16 = std::ptr::null_mut();
    // SAFETY: `sid` is a valid SID; `text` receives a LocalAlloc'd string.
    if unsafe { ConvertSidToStringSidW(sid, &mut text) } == 0 || text.is_null() {
        return Err(NativeError::Win32 {
            call: "ConvertSidToStringSidW",
            code: last_error(),
        });
    }
    let mut len = 0;
    // SAFETY: `text` is NUL-terminated; we read up to the NUL.
    while unsafe { *text.add(len) } != 0 {
        len += 1;
    }
    // SAFETY: `len` units before the NUL are initialised.
    let s = String::from_utf16_lossy(unsafe { std::slice::from_raw_parts(text, len) });
    // SAFETY: allocated by the call above, freed once.
    unsafe { LocalFree(text.cast()) };
    Ok(s)
}

/// This process's user SID (`S-1-5-21-…`).
pub fn current_user_sid() -> Result<String, NativeError> {
    let mut token: HANDLE = std::ptr::null_mut();
    // SAFETY: the pseudo-handle of this process; `token` is an out-pointer.
    if unsafe { OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &mut token) } == 0 {
        return Err(NativeError::Win32 {
            call: "OpenProcessToken",
            code: last_error(),
        });
    }
    // TOKEN_USER and its SID: well under 256 bytes; u64s keep it aligned.
    let mut buf = [0u64; 64];
    let mut len = 0u32;
    // SAFETY: `buf` is writable for its size in bytes; the token is ours.
    let ok = unsafe {
        GetTokenInformation(
            token,
            TokenUser,
            buf.as_mut_ptr().cast(),
            u32::try_from(std::mem::size_of_val(&buf)).unwrap_or(0),
            &mut len,
        )
    };
    let code = last_error();
    // SAFETY: ours, closed once.
    unsafe { CloseHandle(token) };
    if ok == 0 {
        return Err(NativeError::Win32 {
            call: "GetTokenInformation(TokenUser)",
            code,
        });
    }
    // SAFETY: the call filled `buf` with a TOKEN_USER, suitably aligned.
    let user = unsafe { &*buf.as_ptr().cast::<TOKEN_USER>() };
    sid_string(user.User.Sid)
}

/// The access list of `path`: its entries, or None for a NULL DACL.
pub fn access_list(path: &std::path::Path) -> Result<Option<Vec<crate::acl::Ace>>, NativeError> {
    let name = wide(&path.to_string_lossy());
    let mut dacl: *mut ACL = std::ptr::null_mut();
    let mut sd: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
    // SAFETY: `name` is NUL-terminated; the out-pointers are valid; the
    // descriptor is LocalAlloc'd and freed below.
    let rc = unsafe {
        GetNamedSecurityInfoW(
            name.as_ptr(),
            SE_FILE_OBJECT,
            DACL_SECURITY_INFORMATION,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut dacl,
            std::ptr::null_mut(),
            &mut sd,
        )
    };
    if rc != ERROR_SUCCESS {
        return Err(NativeError::Win32 {
            call: "GetNamedSecurityInfoW",
            code: rc,
        });
    }
    let result = if dacl.is_null() {
        Ok(None)
    } else {
        // SAFETY: a valid ACL inside the descriptor, which lives until freed.
        let count = unsafe { (*dacl).AceCount };
        let mut aces = Vec::with_capacity(usize::from(count));
        let mut failed = None;
        for i in 0..u32::from(count) {
            let mut ace: *mut c_void = std::ptr::null_mut();
            // SAFETY: `i` is below the ACL's count; `ace` is an out-pointer.
            if unsafe { GetAce(dacl, i, &mut ace) } == 0 {
                failed = Some(NativeError::Win32 {
                    call: "GetAce",
                    code: last_error(),
                });
                break;
            }
            // SAFETY: every ACE starts with an ACE_HEADER.
            let h = unsafe { *ace.cast::<ACE_HEADER>() };
            // ACCESS_ALLOWED_ACE_TYPE 0, ACCESS_DENIED_ACE_TYPE 1: the
            // same layout (header, mask, SID). Others (object, callback,
            // audit) are read as their type says: not an allow of this.
            if h.AceType > 1 {
                continue;
            }
            // SAFETY: types 0 and 1 are laid out as ACCESS_ALLOWED_ACE.
            let a = unsafe { &*ace.cast::<ACCESS_ALLOWED_ACE>() };
            let sid: PSID = (&a.SidStart as *const u32).cast_mut().cast();
            match sid_string(sid) {
                Ok(sid) => aces.push(crate::acl::Ace {
                    sid,
                    allow: h.AceType == 0,
                    mask: a.Mask,
                    // INHERIT_ONLY_ACE
                    inherit_only: h.AceFlags & 0x08 != 0,
                }),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(Some(aces)),
        }
    };
    // SAFETY: allocated by GetNamedSecurityInfoW, freed once.
    unsafe { LocalFree(sd.cast()) };
    result
}

/// Replaces the access list of `path` with the DACL of `sddl`,
/// protected from inheritance.
pub fn set_access_list(path: &std::path::Path, sddl: &str) -> Result<(), NativeError> {
    let text = wide(sddl);
    let mut sd: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
    // SAFETY: `text` is NUL-terminated; `sd` receives a LocalAlloc'd
    // descriptor, freed below.
    if unsafe {
        ConvertStringSecurityDescriptorToSecurityDescriptorW(
            text.as_ptr(),
            1,
            &mut sd,
            std::ptr::null_mut(),
        )
    } == 0
    {
        return Err(NativeError::Win32 {
            call: "ConvertStringSecurityDescriptorToSecurityDescriptorW",
            code: last_error(),
        });
    }
    let (mut present, mut defaulted) = (0, 0);
    let mut dacl: *mut ACL = std::ptr::null_mut();
    // SAFETY: `sd` is the valid descriptor made above.
    let ok = unsafe { GetSecurityDescriptorDacl(sd, &mut present, &mut dacl, &mut defaulted) };
    let result = if ok == 0 || present == 0 || dacl.is_null() {
        Err(NativeError::Win32 {
            call: "GetSecurityDescriptorDacl",
            code: last_error(),
        })
    } else {
        let name = wide(&path.to_string_lossy());
        // SAFETY: `name` is NUL-terminated; `dacl` lives inside `sd`.
        let rc = unsafe {
            SetNamedSecurityInfoW(
                name.as_ptr(),
                SE_FILE_OBJECT,
                DACL_SECURITY_INFORMATION | PROTECTED_DACL_SECURITY_INFORMATION,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                dacl,
                std::ptr::null(),
            )
        };
        if rc == ERROR_SUCCESS {
            Ok(())
        } else {
            Err(NativeError::Win32 {
                call: "SetNamedSecurityInfoW",
                code: rc,
            })
        }
    };
    // SAFETY: allocated by the conversion above, freed once.
    unsafe { LocalFree(sd.cast()) };
    result
}

type PfnDeleteProfile = unsafe extern "system" fn(*const u16) -> i32;

/// `HRESULT_FROM_WIN32(ERROR_NOT_FOUND)`: an HRESULT is these bits.
#[allow(clippy::cast_possible_wrap)]
const HR_NOT_FOUND: i32 = 0x8007_0490_u32 as i32;

/// `DeriveAppContainerSidFromAppContainerName`: HRESULT(PCWSTR, PSID*).
type PfnDeriveSid = unsafe extern "system" fn(*const u16, *mut PSID) -> i32;

/// The package SID (`S-1-15-2-…`) of the AppContainer profile `name`
/// (`DeriveAppContainerSidFromAppContainerName`, from `userenv.dll` in
/// System32 only, looked up at run time; the profile need not exist).
/// None where Windows has no such call.
pub fn appcontainer_sid(name: &str) -> Result<Option<String>, NativeError> {
    let Some(module) = system32("userenv.dll") else {
        return Ok(None);
    };
    let Some(derive) = resolve(module, c"DeriveAppContainerSidFromAppContainerName") else {
        return Ok(None);
    };
    // SAFETY: the export has this signature (HRESULT(PCWSTR, PSID*)).
    let derive: PfnDeriveSid = unsafe { std::mem::transmute::<RawProc, PfnDeriveSid>(derive) };
    let name = wide(name);
    let mut sid: PSID = std::ptr::null_mut();
    // SAFETY: `name` is NUL-terminated and outlives the call; `sid`
    // receives a SID the caller frees with FreeSid.
    let hr = unsafe { derive(name.as_ptr(), &mut sid) };
    if hr != 0 || sid.is_null() {
        // The HRESULT's bits as Windows writes them.
        #[allow(clippy::cast_sign_loss)]
        return Err(NativeError::Win32 {
            call: "DeriveAppContainerSidFromAppContainerName",
            code: hr as u32,
        });
    }
    let s = sid_string(sid);
    // SAFETY: allocated by the call above, freed once.
    unsafe { FreeSid(sid) };
    s.map(Some)
}

/// Removes the AppContainer profile `name` of this user
/// (`DeleteAppContainerProfile`, from `userenv.dll` in System32 only,
/// looked up at run time: a Windows without it still runs the node).
pub fn delete_appcontainer_profile(name: &str) -> Result<ProfileRemoval, NativeError> {
    let Some(module) = system32("userenv.dll") else {
        return Ok(ProfileRemoval::Unsupported);
    };
    let Some(delete) = resolve(module, c"DeleteAppContainerProfile") else {
        return Ok(ProfileRemoval::Unsupported);
    };
    // SAFETY: the export has this signature (HRESULT(PCWSTR)).
    let delete: PfnDeleteProfile =
        unsafe { std::mem::transmute::<RawProc, PfnDeleteProfile>(delete) };
    let name = wide(name);
    // SAFETY: `name` is NUL-terminated and outlives the call.
    let hr = unsafe { delete(name.as_ptr()) };
    match hr {
        0 => Ok(ProfileRemoval::Removed),
        HR_NOT_FOUND => Ok(ProfileRemoval::NotFound),
        // The HRESULT's bits as Windows writes them.
        #[allow(clippy::cast_sign_loss)]
        _ => Err(NativeError::Win32 {
            call: "DeleteAppContainerProfile",
            code: hr as u32,
        }),
    }
}
