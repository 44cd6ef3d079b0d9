//! How the process's allocator treats large buffers.
//!
//! A commit decodes staged rows into buffers of megabytes (a data
//! artifact's column), frees them when its sequence ends, and decodes the
//! next chunk. glibc's malloc serves a block that large with a mapping of
//! its own, returned to the system when freed — until the first such block
//! is freed: it then raises its threshold for mapping (up to 32 MiB), and
//! later blocks come from its heap, which it keeps. A commit bounded by
//! `--memory-mib` then peaks by what the allocator kept back, and by when
//! blocks happened to be freed rather than by what the commit holds: 12
//! staged runs of 20 MiB decoded, committed within 16 MiB, peaked at 410
//! to 590 MiB from run to run, and at 309 to 331 MiB with the threshold
//! fixed (the commit of all at once: 530–570 MiB). So the threshold is
//! fixed at glibc's own default, 128 KiB, as `MALLOC_MMAP_THRESHOLD_`
//! would fix it.

/// Keep blocks of 128 KiB and more in mappings of their own, returned to
/// the system when freed. Called first in `main`, before any thread.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub(crate) fn return_large_blocks() {
    // SAFETY: `mallopt` sets one malloc parameter; it takes no pointer and
    // is called before the process starts any thread.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

/// Other allocators keep their own policy.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn return_large_blocks() {}
