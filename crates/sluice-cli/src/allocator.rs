//! How the process's allocator treats large buffers and threads.
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
//!
//! glibc also gives each thread that meets a locked arena an arena of its
//! own, up to eight per core; memory freed into one arena serves only the
//! threads that use it, so a long run whose steps allocate on whichever
//! runtime thread is free keeps the peak of every arena at once. One arena
//! per core bounds that: `bench pipeline --executions 200000` (2 cores,
//! beside a CI run) peaked at 422 MiB against 673 MiB, in 55.9 s against
//! 59.5 s.

/// Keep blocks of 128 KiB and more in mappings of their own, returned to
/// the system when freed, and at most one arena per core. Called first in
/// `main`, before any thread.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub(crate) fn configure_malloc() {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let arenas = libc::c_int::try_from(cores).unwrap_or(libc::c_int::MAX);
    // SAFETY: `mallopt` sets one malloc parameter; it takes no pointer and
    // is called before the process starts any thread.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
        libc::mallopt(libc::M_ARENA_MAX, arenas);
    }
}

/// Other allocators keep their own policy.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn configure_malloc() {}
