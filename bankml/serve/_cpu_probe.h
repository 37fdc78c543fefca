/* bankml: does this CPU really execute AMX tile instructions, and a way to turn AMX off for the process.
 *
 * Some virtual machines report AMX in CPUID (/proc/cpuinfo shows amx_tile amx_int8 amx_bf16) and grant the
 * XTILEDATA permission that ggml asks for (arch_prctl ARCH_REQ_XCOMP_PERM), yet the first instruction that
 * touches tile data faults (SIGILL). ggml then enables its AMX kernels and the process dies in the first
 * batched matrix product. bankml_amx_probe() runs the same sequence ggml's kernels run (permission, tile
 * configuration, zero, loads, an int8 dot product, a store, with context switches in between) in a forked
 * child and reports how the child ended; bankml_refuse_amx_permission() installs a seccomp filter that makes
 * ARCH_REQ_XCOMP_PERM fail with EPERM, which is what ggml sees on a kernel without AMX: it then leaves its AMX
 * buffer type out and keeps every other kernel (the CPU repack kernels included).
 *
 * The instructions are written as bytes so that any assembler builds this file.
 */
#ifndef BANKML_CPU_PROBE_H
#define BANKML_CPU_PROBE_H

#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#if defined(__linux__) && defined(__x86_64__)
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#define BANKML_HAVE_AMX_PROBE 1
#endif

#define BANKML_ARCH_GET_XCOMP_PERM 0x1022
#define BANKML_ARCH_REQ_XCOMP_PERM 0x1023
#define BANKML_XFEATURE_XTILEDATA 18

/* how the probe ended: >= 0 the child's exit code, BANKML_PROBE_SIGNAL + n killed by signal n */
#define BANKML_PROBE_WORKS 0
#define BANKML_PROBE_NO_PERMISSION 2
#define BANKML_PROBE_WRONG_RESULT 3
#define BANKML_PROBE_UNSUPPORTED -2
#define BANKML_PROBE_FORK_FAILED -1
#define BANKML_PROBE_SIGNAL 1000

#ifdef BANKML_HAVE_AMX_PROBE

static inline void bankml_ldtilecfg(const void *cfg) {
    __asm__ volatile(".byte 0xc4,0xe2,0x78,0x49,0x07" : : "D"(cfg) : "memory");          /* ldtilecfg (%rdi) */
}
static inline void bankml_tilezero_tmm0(void) {
    __asm__ volatile(".byte 0xc4,0xe2,0x7b,0x49,0xc0" : : : "memory");                  /* tilezero %tmm0 */
}
static inline void bankml_tileloadd_tmm1(const void *p, long stride) {
    __asm__ volatile(".byte 0xc4,0xe2,0x7b,0x4b,0x0c,0x16" : : "S"(p), "d"(stride) : "memory");
}
static inline void bankml_tileloadd_tmm2(const void *p, long stride) {
    __asm__ volatile(".byte 0xc4,0xe2,0x7b,0x4b,0x14,0x16" : : "S"(p), "d"(stride) : "memory");
}
static inline void bankml_tdpbssd_tmm0_tmm1_tmm2(void) {
    __asm__ volatile(".byte 0xc4,0xe2,0x6b,0x5e,0xc1" : : : "memory");                  /* tdpbssd %tmm2,%tmm1,%tmm0 */
}
static inline void bankml_tilestored_tmm0(void *p, long stride) {
    __asm__ volatile(".byte 0xc4,0xe2,0x7a,0x4b,0x04,0x16" : : "S"(p), "d"(stride) : "memory");
}
static inline void bankml_tilerelease(void) {
    __asm__ volatile(".byte 0xc4,0xe2,0x78,0x49,0xc0" : : : "memory");
}

static void bankml_pause(void) {
    struct timespec ts = {0, 200000};   /* 0.2 ms: the kernel switches away and restores the tile state */
    sched_yield();
    nanosleep(&ts, NULL);
}

/* in the child: only async-signal-safe calls */
static int bankml_amx_child(int ask_permission) {
    unsigned char cfg[64] __attribute__((aligned(64)));
    int8_t ones[16 * 64] __attribute__((aligned(64)));
    int32_t out[16 * 16] __attribute__((aligned(64)));
    int round, i, t;
    signal(SIGILL, SIG_DFL);
    signal(SIGSEGV, SIG_DFL);
    signal(SIGBUS, SIG_DFL);
    signal(SIGFPE, SIG_DFL);
    alarm(10);
    if (ask_permission &&
        syscall(SYS_arch_prctl, BANKML_ARCH_REQ_XCOMP_PERM, BANKML_XFEATURE_XTILEDATA) != 0)
        return BANKML_PROBE_NO_PERMISSION;
    memset(cfg, 0, sizeof cfg);
    cfg[0] = 1;                              /* palette 1 */
    for (t = 0; t < 3; t++) {
        cfg[16 + 2 * t] = 64;                /* colsb: 64 bytes a row */
        cfg[48 + t] = 16;                    /* rows */
    }
    for (i = 0; i < 16 * 64; i++) ones[i] = 1;
    for (round = 0; round < 3; round++) {
        for (i = 0; i < 16 * 16; i++) out[i] = -1;
        bankml_ldtilecfg(cfg);
        bankml_tilezero_tmm0();
        bankml_pause();
        bankml_tileloadd_tmm1(ones, 64);
        bankml_tileloadd_tmm2(ones, 64);
        bankml_pause();
        bankml_tdpbssd_tmm0_tmm1_tmm2();     /* every int32 of tmm0 = 64 products of 1 * 1 */
        bankml_tilestored_tmm0(out, 64);
        bankml_tilerelease();
        for (i = 0; i < 16 * 16; i++)
            if (out[i] != 64) return BANKML_PROBE_WRONG_RESULT;
        bankml_pause();
    }
    return BANKML_PROBE_WORKS;
}

/* ask_permission 0 is for tests: the tile instructions then fault on every CPU (SIGILL) */
static int bankml_amx_probe(int ask_permission) {
    int status = 0;
    pid_t pid = fork();
    if (pid < 0) return BANKML_PROBE_FORK_FAILED;
    if (pid == 0) _exit(bankml_amx_child(ask_permission));
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) return BANKML_PROBE_FORK_FAILED;
    }
    if (WIFSIGNALED(status)) return BANKML_PROBE_SIGNAL + WTERMSIG(status);
    return WEXITSTATUS(status);
}

/* 1 when this process already holds the XTILEDATA permission (then refusing it later changes nothing) */
static int bankml_amx_permission_held(void) {
    unsigned long mask = 0;
    if (syscall(SYS_arch_prctl, BANKML_ARCH_GET_XCOMP_PERM, &mask) != 0) return 0;
    return (mask >> BANKML_XFEATURE_XTILEDATA) & 1;
}

/* 0, or the errno of the failure: from now on ARCH_REQ_XCOMP_PERM fails with EPERM in every thread of this
 * process and in its children */
static int bankml_refuse_amx_permission(void) {
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 0, 5),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_arch_prctl, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, BANKML_ARCH_REQ_XCOMP_PERM, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof code / sizeof code[0]), code};
    long rc = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog);
    if (rc != 0 && errno == EACCES) {
        /* without CAP_SYS_ADMIN a filter needs no_new_privs */
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
        rc = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog);
    }
    if (rc < 0) return errno;
    if (rc > 0) return ESRCH;     /* TSYNC: a thread could not be synchronised */
    return 0;
}

/* 1 when ARCH_REQ_XCOMP_PERM now fails with EPERM here */
static int bankml_amx_request_refused(void) {
    long rc = syscall(SYS_arch_prctl, BANKML_ARCH_REQ_XCOMP_PERM, BANKML_XFEATURE_XTILEDATA);
    return rc != 0 && errno == EPERM;
}

#else

static int bankml_amx_probe(int ask_permission) { (void)ask_permission; return BANKML_PROBE_UNSUPPORTED; }
static int bankml_amx_permission_held(void) { return 0; }
static int bankml_refuse_amx_permission(void) { return ENOSYS; }
static int bankml_amx_request_refused(void) { return 0; }

#endif

#endif /* BANKML_CPU_PROBE_H */
