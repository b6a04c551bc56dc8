//! Seccomp filters that make system calls fail, as a sandbox's do, for
//! tests of what a crate does when a call it relied on starts failing.
//! Installed on every thread, for the process's life: run such a test in
//! a [`child`](crate::child) process.

/// Installs, on every thread of the process, a seccomp filter that fails
/// each system call in `refuse` with EPERM. It matches system call
/// numbers without checking the architecture: a test helper for the
/// native one.
pub fn refuse_syscalls(refuse: &[libc::c_long]) {
    install(refuse, libc::SECCOMP_FILTER_FLAG_TSYNC);
}

/// [`refuse_syscalls`] on the calling thread only (and the threads it
/// starts from now on), as a sandbox that confines one worker thread
/// does.
pub fn refuse_syscalls_on_this_thread(refuse: &[libc::c_long]) {
    install(refuse, 0);
}

fn install(refuse: &[libc::c_long], flags: libc::c_ulong) {
    let ld_nr = libc::sock_filter {
        code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
        jt: 0,
        jf: 0,
        k: 0, // offsetof(struct seccomp_data, nr)
    };
    let ret = |k: u32| libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let mut prog = vec![ld_nr];
    for &nr in refuse {
        // Equal: fall through to the refusal; else skip it.
        prog.push(libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: nr as u32,
        });
        prog.push(ret(libc::SECCOMP_RET_ERRNO | libc::EPERM as u32));
    }
    prog.push(ret(libc::SECCOMP_RET_ALLOW));
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: prctl with integer arguments.
    let r = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    assert_eq!(
        r,
        0,
        "PR_SET_NO_NEW_PRIVS: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: seccomp with a filter program that outlives the call (the
    // kernel copies it).
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &fprog as *const libc::sock_fprog,
        )
    };
    assert_eq!(r, 0, "seccomp: {}", std::io::Error::last_os_error());
}
