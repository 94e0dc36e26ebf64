//! Windows Firewall's effective settings per profile, read through
//! `INetFwPolicy2` (COM, in-process): whether it is on, and whether it
//! blocks inbound connections no rule allows. What the relay route's
//! ingress rests on (`crate::relay::check_firewall` judges it).

use windows::Win32::Foundation::RPC_E_CHANGED_MODE;
use windows::Win32::NetworkManagement::WindowsFirewall::{
    INetFwPolicy2, NetFwPolicy2, NET_FW_ACTION_BLOCK, NET_FW_PROFILE2_DOMAIN,
    NET_FW_PROFILE2_PRIVATE, NET_FW_PROFILE2_PUBLIC,
};
use windows::Win32::System::Com::{
    CoCreateInstance, CoInitializeEx, CoUninitialize, CLSCTX_INPROC_SERVER, COINIT_MULTITHREADED,
};

use crate::native::NativeError;
use crate::relay::{Profile, ProfileFacts};

fn failed(call: &'static str, e: &windows::core::Error) -> NativeError {
    NativeError::Win32 {
        call,
        // The HRESULT's bits as Windows writes them.
        code: u32::from_ne_bytes(e.code().0.to_ne_bytes()),
    }
}

/// The three profiles' facts, or the call that failed.
pub fn firewall_profiles() -> Result<Vec<ProfileFacts>, NativeError> {
    // SAFETY: COM for this thread; undone below when it was done here
    // (a thread already in another apartment model keeps its own).
    let init = unsafe { CoInitializeEx(None, COINIT_MULTITHREADED) };
    let ours = init.is_ok();
    if !ours && init != RPC_E_CHANGED_MODE {
        return Err(failed("CoInitializeEx", &init.into()));
    }
    let read = || -> Result<Vec<ProfileFacts>, NativeError> {
        // SAFETY: the firewall's policy object, in-process, as Microsoft
        // documents it; released when dropped.
        let policy: INetFwPolicy2 =
            unsafe { CoCreateInstance(&NetFwPolicy2, None, CLSCTX_INPROC_SERVER) }
                .map_err(|e| failed("CoCreateInstance(NetFwPolicy2)", &e))?;
        let mut out = Vec::new();
        for (profile, t) in [
            (Profile::Domain, NET_FW_PROFILE2_DOMAIN),
            (Profile::Private, NET_FW_PROFILE2_PRIVATE),
            (Profile::Public, NET_FW_PROFILE2_PUBLIC),
        ] {
            // SAFETY: a live interface; one profile type, as documented.
            let enabled = unsafe { policy.get_FirewallEnabled(t) }
                .map_err(|e| failed("INetFwPolicy2::get_FirewallEnabled", &e))?;
            // SAFETY: as above.
            let inbound = unsafe { policy.get_DefaultInboundAction(t) }
                .map_err(|e| failed("INetFwPolicy2::get_DefaultInboundAction", &e))?;
            out.push(ProfileFacts {
                profile,
                enabled: enabled.as_bool(),
                blocks_inbound_by_default: inbound == NET_FW_ACTION_BLOCK,
            });
        }
        Ok(out)
    };
    let facts = read();
    if ours {
        // SAFETY: pairs this thread's successful CoInitializeEx above.
        unsafe { CoUninitialize() };
    }
    facts
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The real calls: three profiles read, or the call that failed named
    /// (never facts made up). Wine's answer is printed.
    #[test]
    fn the_firewall_is_read_or_the_failed_call_is_named() {
        let r = firewall_profiles();
        println!("firewall: {r:?}");
        match r {
            Ok(f) => assert_eq!(
                f.iter().map(|f| f.profile).collect::<Vec<_>>(),
                Profile::ALL
            ),
            Err(NativeError::Win32 { call, .. }) => {
                assert!(
                    call.contains("NetFwPolicy2") || call == "CoInitializeEx",
                    "{call}"
                );
            }
            Err(e) => panic!("{e}"),
        }
        // The relay profile's SID, where this Windows derives one: a
        // package SID, the same each time.
        let sid = super::super::acl::appcontainer_sid(crate::relay::RELAY_PROFILE);
        println!("relay profile SID: {sid:?}");
        if let Ok(Some(s)) = &sid {
            crate::relay::PackageSid::parse(s).unwrap();
            assert_eq!(
                super::super::acl::appcontainer_sid(crate::relay::RELAY_PROFILE).unwrap(),
                Some(s.clone())
            );
        }
    }
}
