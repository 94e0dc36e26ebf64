//! `memcpy` and `memmove` of the node's own, for the shipped Linux binary
//! on x86-64 (linked statically against musl, see `scripts/build-node`).
//!
//! musl's x86-64 `memcpy` starts every copy, however short, with
//! `rep movsq`, whose start-up dominates the short copies that make most of
//! the node's: serialising JSON, building paths and strings, TLS records. On
//! the machines we measure (virtual machines) that is about 40 ns a copy
//! under 100 bytes, against about 2 ns here; a `sandbox run -- true` makes
//! about 5,000 copies between the node and the stage, and a node taking
//! jobs from an edge several thousand more a job.
//!
//! The copies here are the usual ones of optimised C libraries:
//!
//! - up to 32 bytes: two loads that may overlap (1, 2, 4, 8 or 16 bytes from
//!   each end), every load before any store, so they serve `memmove` too;
//! - up to 1 KiB: 32 bytes a step, the last 32 bytes loaded first and stored
//!   last (overlapping the steps' end);
//! - from 1 KiB: `rep movsb`, which the processor runs at its best for long
//!   copies.
//!
//! `memmove` copies forwards (as `memcpy`) unless the destination starts
//! inside the source, and then backwards, 32 bytes a step from the end, the
//! first 32 bytes loaded first and stored last.
//!
//! On every x86-64 Linux build the functions are `oz0_memcpy` and
//! `oz0_memmove` (the unit tests below call those); on musl they are also
//! `memcpy` and `memmove`, which the static link then takes instead of
//! musl's (both, as musl's `memmove` calls into its `memcpy`).
//! `scripts/build-node` checks the shipped binary's `memcpy` is this one.
//!
//! `unsafe_code` is allowed here for `global_asm!` (the functions are
//! machine code) and for the tests' calls of them.

#![allow(unsafe_code)]

/// The symbol lines that make a label an exported function as well, on musl.
#[cfg(target_env = "musl")]
macro_rules! also {
    ($name:literal) => {
        concat!(
            ".globl ",
            $name,
            "\n.type ",
            $name,
            ",@function\n",
            $name,
            ":\n"
        )
    };
}
#[cfg(not(target_env = "musl"))]
macro_rules! also {
    ($name:literal) => {
        ""
    };
}

/// The size line of a function exported on musl.
#[cfg(target_env = "musl")]
macro_rules! also_end {
    ($name:literal) => {
        concat!(".size ", $name, ", . - ", $name, "\n")
    };
}
#[cfg(not(target_env = "musl"))]
macro_rules! also_end {
    ($name:literal) => {
        ""
    };
}

// Intel syntax. System V arguments: rdi the destination, rsi the source,
// rdx the length; rax returns the destination. Only caller-saved registers
// are used; the direction flag is clear on entry, as the ABI says.
core::arch::global_asm!(concat!(
    ".text\n",
    ".p2align 4\n",
    ".globl oz0_memcpy\n",
    ".type oz0_memcpy,@function\n",
    also!("memcpy"),
    "oz0_memcpy:\n",
    "    mov rax, rdi\n",
    "    cmp rdx, 16\n",
    "    ja .Loz0_gt16\n",
    "    cmp rdx, 8\n",
    "    jae .Loz0_8_16\n",
    "    cmp rdx, 4\n",
    "    jae .Loz0_4_7\n",
    "    test rdx, rdx\n",
    "    jz .Loz0_done\n",
    // 1 to 3 bytes: the first, the last, and the middle one of three.
    "    movzx ecx, byte ptr [rsi]\n",
    "    movzx r8d, byte ptr [rsi + rdx - 1]\n",
    "    cmp rdx, 2\n",
    "    jbe .Loz0_1_2\n",
    "    movzx r9d, byte ptr [rsi + 1]\n",
    "    mov byte ptr [rdi + 1], r9b\n",
    ".Loz0_1_2:\n",
    "    mov byte ptr [rdi], cl\n",
    "    mov byte ptr [rdi + rdx - 1], r8b\n",
    ".Loz0_done:\n",
    "    ret\n",
    ".Loz0_4_7:\n",
    "    mov ecx, dword ptr [rsi]\n",
    "    mov r8d, dword ptr [rsi + rdx - 4]\n",
    "    mov dword ptr [rdi], ecx\n",
    "    mov dword ptr [rdi + rdx - 4], r8d\n",
    "    ret\n",
    ".Loz0_8_16:\n",
    "    mov rcx, qword ptr [rsi]\n",
    "    mov r8, qword ptr [rsi + rdx - 8]\n",
    "    mov qword ptr [rdi], rcx\n",
    "    mov qword ptr [rdi + rdx - 8], r8\n",
    "    ret\n",
    ".Loz0_gt16:\n",
    "    cmp rdx, 32\n",
    "    ja .Loz0_gt32\n",
    "    movups xmm0, xmmword ptr [rsi]\n",
    "    movups xmm1, xmmword ptr [rsi + rdx - 16]\n",
    "    movups xmmword ptr [rdi], xmm0\n",
    "    movups xmmword ptr [rdi + rdx - 16], xmm1\n",
    "    ret\n",
    ".Loz0_gt32:\n",
    "    cmp rdx, 1024\n",
    "    jae .Loz0_rep\n",
    // The last 32 bytes first; r10 counts what the steps have left (> 0).
    "    movups xmm2, xmmword ptr [rsi + rdx - 32]\n",
    "    movups xmm3, xmmword ptr [rsi + rdx - 16]\n",
    "    lea r8, [rdi + rdx - 32]\n",
    "    mov rcx, rdi\n",
    "    lea r10, [rdx - 32]\n",
    ".Loz0_forward:\n",
    "    movups xmm0, xmmword ptr [rsi]\n",
    "    movups xmm1, xmmword ptr [rsi + 16]\n",
    "    movups xmmword ptr [rcx], xmm0\n",
    "    movups xmmword ptr [rcx + 16], xmm1\n",
    "    add rsi, 32\n",
    "    add rcx, 32\n",
    "    sub r10, 32\n",
    "    jg .Loz0_forward\n",
    "    movups xmmword ptr [r8], xmm2\n",
    "    movups xmmword ptr [r8 + 16], xmm3\n",
    "    ret\n",
    ".Loz0_rep:\n",
    "    mov rcx, rdx\n",
    "    rep movsb\n",
    "    ret\n",
    ".size oz0_memcpy, . - oz0_memcpy\n",
    also_end!("memcpy"),
    "\n",
    ".p2align 4\n",
    ".globl oz0_memmove\n",
    ".type oz0_memmove,@function\n",
    also!("memmove"),
    "oz0_memmove:\n",
    // Forwards unless the destination starts inside the source (as
    // unsigned, destination - source < length); up to 32 bytes, the copy
    // loads everything before it stores.
    "    mov rcx, rdi\n",
    "    sub rcx, rsi\n",
    "    cmp rcx, rdx\n",
    "    jae oz0_memcpy\n",
    "    cmp rdx, 32\n",
    "    jbe oz0_memcpy\n",
    "    mov rax, rdi\n",
    // The first 32 bytes first; then 32 a step from the end.
    "    movups xmm2, xmmword ptr [rsi]\n",
    "    movups xmm3, xmmword ptr [rsi + 16]\n",
    "    lea r9, [rsi + rdx]\n",
    "    lea rcx, [rdi + rdx]\n",
    "    lea r10, [rdx - 32]\n",
    ".Loz0_backward:\n",
    "    movups xmm0, xmmword ptr [r9 - 16]\n",
    "    movups xmm1, xmmword ptr [r9 - 32]\n",
    "    movups xmmword ptr [rcx - 16], xmm0\n",
    "    movups xmmword ptr [rcx - 32], xmm1\n",
    "    sub r9, 32\n",
    "    sub rcx, 32\n",
    "    sub r10, 32\n",
    "    jg .Loz0_backward\n",
    "    movups xmmword ptr [rdi], xmm2\n",
    "    movups xmmword ptr [rdi + 16], xmm3\n",
    "    ret\n",
    ".size oz0_memmove, . - oz0_memmove\n",
    also_end!("memmove"),
));

#[cfg(test)]
mod tests {
    extern "C" {
        fn oz0_memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8;
        fn oz0_memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8;
    }

    /// Bytes that differ from their neighbours and from `seed`'s others.
    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| {
                let b = i.to_le_bytes();
                b[0].wrapping_mul(31) ^ b[1].wrapping_mul(7) ^ seed
            })
            .collect()
    }

    /// Every length up to 1,100 (each of the copy's paths and their
    /// edges) and a few long ones, from and to each alignment modulo 8:
    /// the bytes copied and nothing around them touched.
    #[test]
    fn memcpy_copies_exactly_the_bytes_asked() {
        let lengths = (0..=1100).chain([4096 + 7, 70_000]);
        for n in lengths {
            let src = pattern(n + 8, 7);
            let before = pattern(n + 16, 200);
            for so in 0..8 {
                for d in 0..8 {
                    let mut dst = before.clone();
                    let mut want = before.clone();
                    want[d..d + n].copy_from_slice(&src[so..so + n]);
                    // SAFETY: both ranges lie inside their own vectors,
                    // which do not overlap.
                    let r = unsafe { oz0_memcpy(dst.as_mut_ptr().add(d), src.as_ptr().add(so), n) };
                    assert_eq!(r, dst.as_mut_ptr().wrapping_add(d), "n={n}");
                    assert!(dst == want, "memcpy n={n} so={so} d={d}");
                }
            }
        }
    }

    /// Every length up to 1,100 and a few long ones, the destination from
    /// 40 bytes before the source to 40 after, and far either side: what
    /// `copy_within` gives.
    #[test]
    fn memmove_copies_overlapping_ranges() {
        let near = (0..=1100).flat_map(|n| (-40isize..=40).map(move |o| (n, o, 48usize)));
        let far = [0, 33, 1024, 4096 + 7, 70_000]
            .into_iter()
            .flat_map(|n| [-2000isize, -1000, -33, 33, 1000, 2000].map(|o| (n, o, 2048usize)));
        for (n, off, s) in near.chain(far) {
            let d = s.checked_add_signed(off).expect("inside the buffer");
            let mut buf = pattern(n + 2 * s, 3);
            let mut want = buf.clone();
            want.copy_within(s..s + n, d);
            let p = buf.as_mut_ptr();
            // SAFETY: both ranges lie inside `buf` (`s` spare bytes either
            // side of the source, more than `off`); memmove allows them to
            // overlap.
            let r = unsafe { oz0_memmove(p.add(d), p.add(s), n) };
            assert_eq!(r, p.wrapping_add(d), "n={n}");
            assert!(buf == want, "memmove n={n} off={off}");
        }
    }
}
