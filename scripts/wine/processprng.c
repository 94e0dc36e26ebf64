/*
 * bcryptprimitives.dll for Wine 8.0, which has none: Rust's standard
 * library asks it for random bytes (ProcessPrng). This one answers from
 * advapi32's RtlGenRandom (SystemFunction036), Wine's own CSPRNG.
 *
 * For running the Windows node under Wine in tests only: never shipped
 * beside oz0-node.exe (Windows looks in a program's own folder first, so a
 * copy there would stand in for the system's).
 */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len > 0) {
        ULONG n = len > 0x10000000 ? 0x10000000 : (ULONG)len;
        if (!SystemFunction036(data, n))
            return FALSE;
        data += n;
        len -= n;
    }
    return TRUE;
}
