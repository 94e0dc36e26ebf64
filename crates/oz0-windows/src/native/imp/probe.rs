//! Probing PSEC: the edition and build from the registry, the API set,
//! `processmodel.dll`'s exports, the contract version, the feature bits,
//! and creating and closing the minimal spec.

use windows_sys::Win32::Foundation::{ERROR_SUCCESS, HANDLE};
use windows_sys::Win32::System::Registry::{
    RegGetValueW, HKEY_LOCAL_MACHINE, RRF_RT_REG_DWORD, RRF_RT_REG_SZ,
};
use windows_sys::Win32::System::WindowsProgramming::IsApiSetImplemented;

use super::{resolve, system32, wide, PfnClose, PfnCreate, PfnQuerySupport, PfnVersion, RawProc};
use crate::native::NativeError;
use crate::probe::{
    self, Contract, CreateClose, Edition, Exports, PsecProbe, SupportAnswer, VersionAnswer,
    WindowsBuild,
};

const CURRENT_VERSION: &str = "SOFTWARE\\Microsoft\\Windows NT\\CurrentVersion";

/// Where `ProductType` is (`WinNT`, `ServerNT`, `LanmanNT`).
const PRODUCT_OPTIONS: &str = "SYSTEM\\CurrentControlSet\\Control\\ProductOptions";

fn reg_string(value: &str) -> Option<String> {
    reg_string_in(CURRENT_VERSION, value)
}

fn reg_string_in(key: &str, value: &str) -> Option<String> {
    let (key, name) = (wide(key), wide(value));
    let mut buf = [0u16; 128];
    let mut bytes = u32::try_from(std::mem::size_of_val(&buf)).ok()?;
    // SAFETY: key and name are NUL-terminated and outlive the call; buf
    // is writable for `bytes` bytes, and RegGetValueW writes at most that
    // many (it NUL-terminates REG_SZ with RRF_RT_REG_SZ).
    let rc = unsafe {
        RegGetValueW(
            HKEY_LOCAL_MACHINE,
            key.as_ptr(),
            name.as_ptr(),
            RRF_RT_REG_SZ,
            std::ptr::null_mut(),
            buf.as_mut_ptr().cast(),
            &mut bytes,
        )
    };
    if rc != ERROR_SUCCESS {
        return None;
    }
    let units = (bytes as usize / 2).saturating_sub(1).min(buf.len());
    String::from_utf16(&buf[..units]).ok()
}

fn reg_dword(value: &str) -> Option<u32> {
    let (key, name) = (wide(CURRENT_VERSION), wide(value));
    let mut v = 0u32;
    let mut bytes = 4u32;
    // SAFETY: as in reg_string; `v` is writable for 4 bytes.
    let rc = unsafe {
        RegGetValueW(
            HKEY_LOCAL_MACHINE,
            key.as_ptr(),
            name.as_ptr(),
            RRF_RT_REG_DWORD,
            std::ptr::null_mut(),
            (&mut v as *mut u32).cast(),
            &mut bytes,
        )
    };
    (rc == ERROR_SUCCESS).then_some(v)
}

/// Probes PSEC the way MXC does; see the module documentation.
pub fn probe() -> Result<PsecProbe, NativeError> {
    let edition = Edition::from_registry(
        reg_string("InstallationType").as_deref(),
        reg_string_in(PRODUCT_OPTIONS, "ProductType").as_deref(),
    );
    let build = reg_string("CurrentBuildNumber")
        .and_then(|b| WindowsBuild::from_registry(&b, reg_dword("UBR")));
    let mut p = PsecProbe {
        edition,
        build,
        api_set_implemented: false,
        exports: Exports::default(),
        version: None,
        support: None,
        create_close: CreateClose::NotRun,
    };
    let api_set = c"api-win-appmodel-processmodel~securityenvironment";
    debug_assert_eq!(api_set.to_str(), Ok(probe::API_SET));
    // SAFETY: `api_set` is a NUL-terminated ANSI string.
    p.api_set_implemented = unsafe { IsApiSetImplemented(api_set.as_ptr().cast()) } != 0;
    if !p.api_set_implemented {
        return Ok(p);
    }
    let Some(module) = system32(probe::DLL) else {
        return Ok(p);
    };
    let create = resolve(module, c"CreateProcessSecurityEnvironment");
    let query = resolve(module, c"QueryProcessSecurityEnvironmentSupport");
    let close = resolve(module, c"CloseProcessSecurityEnvironment");
    let version = resolve(module, c"IsProcessSecurityEnvironmentVersionSupported");
    p.exports = Exports {
        create: create.is_some(),
        query_support: query.is_some(),
        close: close.is_some(),
        version: version.is_some(),
    };
    let (Some(create), Some(query), Some(close)) = (create, query, close) else {
        return Ok(p);
    };
    let mut contract = Contract::V1_0;
    if let Some(version) = version {
        // SAFETY: the export has this signature (HRESULT(DWORD, BOOLEAN*, DWORD*)).
        let version: PfnVersion = unsafe { std::mem::transmute::<RawProc, PfnVersion>(version) };
        let (mut available, mut minor) = (0u8, 0u32);
        // SAFETY: both out-pointers are valid for the call.
        let hr = unsafe { version(1, &mut available, &mut minor) };
        p.version = Some(if hr < 0 {
            VersionAnswer::Failed { hresult: hr }
        } else if available == 0 {
            VersionAnswer::Unavailable
        } else {
            let minor = u16::try_from(minor).unwrap_or(u16::MAX);
            contract = Contract { major: 1, minor };
            VersionAnswer::Available { minor }
        });
        if !matches!(p.version, Some(VersionAnswer::Available { .. })) {
            return Ok(p);
        }
    }
    // SAFETY: the export has this signature (HRESULT(UINT64*)).
    let query: PfnQuerySupport = unsafe { std::mem::transmute::<RawProc, PfnQuerySupport>(query) };
    let mut bits = 0u64;
    // SAFETY: `bits` is a valid out-pointer.
    let hr = unsafe { query(&mut bits) };
    p.support = Some(if hr < 0 {
        SupportAnswer::Failed { hresult: hr }
    } else {
        SupportAnswer::Flags { bits }
    });
    if hr < 0 {
        return Ok(p);
    }
    // SAFETY: the exports have these signatures
    // (HRESULT(LPCVOID, DWORD, FLAGS, HANDLE*) and void(HANDLE)).
    let (create, close): (PfnCreate, PfnClose) = unsafe {
        (
            std::mem::transmute::<RawProc, PfnCreate>(create),
            std::mem::transmute::<RawProc, PfnClose>(close),
        )
    };
    let spec = crate::psec_wire::minimal_spec(Contract::V1_0.min(contract));
    // A minimal spec is a few dozen bytes (24): its length fits a DWORD.
    #[allow(clippy::cast_possible_truncation)]
    let spec_len = spec.len() as u32;
    let mut env: HANDLE = std::ptr::null_mut();
    // SAFETY: `spec` is a live buffer of the given length; `env` is a
    // valid out-pointer; flags 0 asks for no special behaviour.
    let hr = unsafe { create(spec.as_ptr().cast(), spec_len, 0, &mut env) };
    p.create_close = if hr < 0 || env.is_null() {
        CreateClose::Failed { hresult: hr }
    } else {
        // SAFETY: `env` came from a successful create and is closed once.
        unsafe { close(env) };
        CreateClose::Passed
    };
    Ok(p)
}
