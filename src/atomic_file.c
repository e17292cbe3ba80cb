/* atomic_file.c - whole-or-nothing file replacement with rotation of older versions (see
 * atomic_file.h): temp file, fsync, rotation by links renamed over the older names, rename,
 * folder fsync. */
#include "gputrain/atomic_file.h"
#include "gputrain/config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef NAME_MAX
#define NAME_MAX 255
#endif
#define ATOMIC_SUFFIX 5          /* ".lock", or ".K" for K up to GT_MAX_KEEP */
#define ATOMIC_BASE_MAX (NAME_MAX - ATOMIC_SUFFIX)
#define ATOMIC_TMP_BASE (NAME_MAX - 20) /* room for ".tmp.PID.K" */

/* Decimal digits of 0 <= n <= INT_MAX. */
#define ATOMIC_DIGITS(n) ((n) < 10 ? 1 : (n) < 100 ? 2 : (n) < 1000 ? 3 : (n) < 10000 ? 4 \
                        : (n) < 100000 ? 5 : (n) < 1000000 ? 6 : (n) < 10000000 ? 7 \
                        : (n) < 100000000 ? 8 : (n) < 1000000000 ? 9 : 10)
_Static_assert(1 + ATOMIC_DIGITS(GT_MAX_KEEP) <= ATOMIC_SUFFIX,
               "ATOMIC_SUFFIX must hold \".K\" for every --keep K up to GT_MAX_KEEP");
_Static_assert(sizeof ".tmp." - 1 + ATOMIC_DIGITS(INT_MAX) + 1 + ATOMIC_DIGITS(GT_MAX_KEEP) <=
                   NAME_MAX - ATOMIC_TMP_BASE,
               "ATOMIC_TMP_BASE must leave room for \".tmp.PID.K\" (an int PID, K up to GT_MAX_KEEP)");
#define ATOMIC_SHOWN 160         /* a longer path is shown by its end, so a reason after it fits */

/* A path for a message: "%s%s" with SHOWN(p). */
#define SHOWN(p) (strlen(p) > ATOMIC_SHOWN ? "..." : ""), \
                 (strlen(p) > ATOMIC_SHOWN ? (p) + strlen(p) - (ATOMIC_SHOWN - 3) : (p))

/* The file name part of path and the length of the folder part before it ("" -> "."). */
static const char *atomic_base(const char *path, size_t *dirlen)
{
    const char *slash = strrchr(path, '/');
    *dirlen = slash ? (size_t)(slash - path) + 1 : 0;
    return slash ? slash + 1 : path;
}

/* The temporary name for path's writer (k = 0) or for the copy to PATH.k: in the same folder,
 * the file name cut so that it always fits NAME_MAX: FOLDER/BASE.tmp.PID[.k]. */
static void atomic_tmp_name(const char *path, int k, char *buf, size_t cap)
{
    size_t dirlen;
    const char *base = atomic_base(path, &dirlen);
    int cut = (int)strnlen(base, ATOMIC_TMP_BASE);
    if (k > 0)
        snprintf(buf, cap, "%.*s%.*s.tmp.%ld.%d", (int)dirlen, path, cut, base, (long)getpid(), k);
    else
        snprintf(buf, cap, "%.*s%.*s.tmp.%ld", (int)dirlen, path, cut, base, (long)getpid());
}

static const char *const file_kinds[][2] = {
    {"a folder", "not a regular file (a folder)"}, {"a FIFO", "not a regular file (a FIFO)"},
    {"a device", "not a regular file (a device)"}, {"a socket", "not a regular file (a socket)"},
    {"not a regular file", "not a regular file"}};

/* What a non-regular file is: [0] as a noun, [1] as the reason it is refused as an input. */
static const char *const *file_kind(mode_t mode)
{
    int k = S_ISDIR(mode) ? 0 : S_ISFIFO(mode) ? 1 : S_ISCHR(mode) || S_ISBLK(mode) ? 2
          : S_ISSOCK(mode) ? 3 : 4;
    return file_kinds[k];
}

int gt_fd_write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? errno : EIO;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int gt_atomic_fill_text(int fd, void *ctx)
{
    const gt_atomic_text *t = ctx;
    return gt_fd_write_all(fd, t->buf, t->len);
}

/* Creates tmp exclusively. A file already there carries our pid, so (with one save at a time
 * per path in a process) it is the leftover of a killed process that had the same pid. */
static int atomic_create(const char *tmp)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST && unlink(tmp) == 0)
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    return fd;
}

/* Writes, fsyncs and closes tmp; the caller removes it on failure. */
static int atomic_write_tmp(const char *path, const char *what_file, const char *tmp,
                            gt_atomic_fill_fn fill, void *ctx, gt_err *e)
{
    int fd = atomic_create(tmp);
    if (fd < 0)
        return gt_fail(e, "cannot save %s %s%s: creating its temporary file: %s", what_file, SHOWN(path),
                       strerror(errno));
    const char *what = "writing";
    int err = fill(fd, ctx);
    if (!err && fsync(fd) != 0) {
        err = errno;
        what = "syncing";
    }
    if (close(fd) != 0 && !err) {
        err = errno;
        what = "closing";
    }
    if (err)
        return gt_fail(e, "cannot save %s %s%s: %s its temporary file: %s", what_file, SHOWN(path), what,
                       strerror(err));
    return 0;
}

/* Copies the file at in to fd: 0 or an errno. */
static int atomic_copy_fd(int in, int fd)
{
    char buf[1 << 14];
    for (;;) {
        ssize_t r = read(in, buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r < 0 ? errno : 0;
        int err = gt_fd_write_all(fd, buf, (size_t)r);
        if (err)
            return err;
    }
}

/* The fallback where the filesystem refuses hard links: a copy of `from`, itself written through a
 * temp file so `to` is always whole. 1 when there is no `from`. */
static int atomic_copy_file(const char *path, const char *what, const char *from, const char *to,
                            int k, gt_err *e)
{
    char tmp[PATH_MAX];
    atomic_tmp_name(path, k, tmp, sizeof tmp);
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0 && errno == ENOENT)
        return 1;
    if (in < 0)
        return gt_fail(e, "cannot save %s %s%s: reading it to copy: %s", what, SHOWN(path), strerror(errno));
    int fd = atomic_create(tmp);
    if (fd < 0) {
        int err = errno;
        close(in);
        return gt_fail(e, "cannot save %s %s%s: creating the temporary copy: %s", what, SHOWN(path),
                       strerror(err));
    }
    int err = atomic_copy_fd(in, fd);
    if (!err && fsync(fd) != 0)
        err = errno;
    if (close(fd) != 0 && !err)
        err = errno;
    close(in);
    if (!err && rename(tmp, to) != 0)
        err = errno;
    if (err) {
        unlink(tmp);
        return gt_fail(e, "cannot save %s %s%s: copying it to .%d: %s", what, SHOWN(path), k, strerror(err));
    }
    return 0;
}

/* Points `to` at the file `from` names, replacing what `to` held in one rename: a hard link to a
 * temporary name, renamed over `to` (a copy where the filesystem refuses links). 1 when there is
 * no `from`, 0 when done, -1 with e set. */
static int atomic_link_over(const char *path, const char *what, const char *from, const char *to,
                            int k, gt_err *e)
{
    char tmp[PATH_MAX];
    atomic_tmp_name(path, k, tmp, sizeof tmp);
    if (unlink(tmp) != 0 && errno != ENOENT)
        return gt_fail(e, "cannot save %s %s%s: removing its temporary link: %s", what, SHOWN(path),
                       strerror(errno));
    if (link(from, tmp) != 0) {
        if (errno == ENOENT)
            return 1;
        if (errno == EPERM || errno == EOPNOTSUPP || errno == ENOSYS || errno == EMLINK ||
            errno == EXDEV)
            return atomic_copy_file(path, what, from, to, k, e);
        return gt_fail(e, "cannot save %s %s%s: linking it as .%d: %s", what, SHOWN(path), k,
                       strerror(errno));
    }
    int rc = rename(tmp, to), err = errno;
    unlink(tmp); /* left where `to` was already that file (rename then does nothing) */
    if (rc != 0)
        return gt_fail(e, "cannot save %s %s%s: renaming its link to .%d: %s", what, SHOWN(path), k,
                       strerror(err));
    return 0;
}

/* PATH.(k-1) -> PATH.k down to PATH -> PATH.1, each by a link renamed over its target, so that
 * every name holds a whole file at every instant (the old one or the next older) and a crash at
 * any point still leaves PATH in place. A name with nothing to take (a run's first saves) is left
 * as it is. */
static int atomic_rotate(const char *path, const char *what, int keep, gt_err *e)
{
    char from[PATH_MAX], to[PATH_MAX];
    for (int k = keep; k >= 1; k--) {
        if (k > 1)
            snprintf(from, sizeof from, "%s.%d", path, k - 1);
        else
            snprintf(from, sizeof from, "%s", path);
        snprintf(to, sizeof to, "%s.%d", path, k);
        if (atomic_link_over(path, what, from, to, k, e) < 0)
            return -1;
    }
    return 0;
}

/* Makes the renames durable. */
static int atomic_sync_folder(const char *path, const char *what, gt_err *e)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = '\0'; /* a file in the root folder */
    else
        *slash = '\0';
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return gt_fail(e, "%s %s%s: opening its folder: %s", what, SHOWN(path), strerror(errno));
    int rc = fsync(fd), err = errno;
    close(fd);
    /* EINVAL: a filesystem that cannot sync folders; the rename is as durable as it gets there. */
    if (rc != 0 && err != EINVAL)
        return gt_fail(e, "%s %s%s: syncing its folder: %s", what, SHOWN(path), strerror(err));
    return 0;
}

/* What is at path may be replaced: nothing, or a regular file (not a symlink, FIFO, device or
 * folder, which a rename would destroy or a write would consume). */
static int atomic_check_target(const char *path, const char *what, gt_err *e)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0
             : gt_fail(e, "%s %s%s: %s", what, SHOWN(path), strerror(errno));
    if (S_ISLNK(st.st_mode))
        return gt_fail(e, "%s %s%s is a symbolic link: refusing to replace it (name its target)", what,
                       SHOWN(path));
    if (!S_ISREG(st.st_mode))
        return gt_fail(e, "%s %s%s is %s: refusing to replace it", what, SHOWN(path),
                       file_kind(st.st_mode)[0]);
    return 0;
}

/* The rotation targets PATH.1 .. PATH.keep: nothing, or regular files (as PATH itself). */
static int atomic_check_rotation(const char *path, const char *what, int keep, gt_err *e)
{
    char name[PATH_MAX];
    for (int k = 1; k <= keep; k++) {
        snprintf(name, sizeof name, "%s.%d", path, k);
        if (atomic_check_target(name, what, e) != 0)
            return -1;
    }
    return 0;
}

int gt_atomic_write(const char *path, const char *what, gt_atomic_fill_fn fill, void *ctx, int keep,
                    gt_err *e)
{
    char tmp[PATH_MAX];
    atomic_tmp_name(path, 0, tmp, sizeof tmp);
    int rc = atomic_check_target(path, what, e);
    if (rc == 0 && keep > 0)
        rc = atomic_check_rotation(path, what, keep, e);
    if (rc == 0)
        rc = atomic_write_tmp(path, what, tmp, fill, ctx, e);
    if (rc == 0 && keep > 0 && atomic_rotate(path, what, keep, e) != 0)
        rc = -1;
    if (rc == 0 && rename(tmp, path) != 0)
        rc = gt_fail(e, "cannot save %s %s%s: renaming its temporary file over it: %s", what, SHOWN(path),
                     strerror(errno));
    if (rc != 0) {
        unlink(tmp);
        return -1;
    }
    return atomic_sync_folder(path, what, e);
}

/* stat() first, so a FIFO or device is never opened; O_NONBLOCK covers one swapped in between. */
int gt_open_regular(const char *path, const char **why)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        *why = strerror(errno);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        *why = file_kind(st.st_mode)[1];
        return -1;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        *why = strerror(errno);
        return -1;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        *why = file_kind(st.st_mode)[1];
        close(fd);
        return -1;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0)
        fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return fd;
}

/* ---- before the first write ------------------------------------------------------------------- */

/* Whether name is BASE.tmp.PID or BASE.tmp.PID.K (BASE cut as atomic_tmp_name cuts it) of a
 * process that no longer exists. */
static int atomic_is_stale_tmp(const char *name, const char *base, size_t cut)
{
    if (strncmp(name, base, cut) != 0 || strncmp(name + cut, ".tmp.", 5) != 0)
        return 0;
    char *end;
    errno = 0;
    long pid = strtol(name + cut + 5, &end, 10);
    if (end == name + cut + 5 || errno || pid <= 0 || pid == (long)getpid())
        return 0;
    if (*end == '.') {
        const char *k = end + 1;
        strtol(k, &end, 10);
        if (end == k)
            return 0;
    }
    return *end == '\0' && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* Removes the temporary files that killed writers of path left behind. */
static void atomic_clean_stale(const char *path)
{
    size_t dirlen;
    const char *base = atomic_base(path, &dirlen);
    char dir[PATH_MAX], victim[PATH_MAX];
    snprintf(dir, sizeof dir, "%.*s", (int)(dirlen ? dirlen : 1), dirlen ? path : ".");
    size_t cut = strnlen(base, ATOMIC_TMP_BASE);
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        if (!atomic_is_stale_tmp(ent->d_name, base, cut))
            continue;
        snprintf(victim, sizeof victim, "%.*s%s", (int)dirlen, path, ent->d_name);
        unlink(victim);
    }
    closedir(d);
}

/* Takes an advisory lock on PATH.lock, so a second run writing path is refused. */
static int atomic_lock(const char *path, const char *what, gt_err *e)
{
    char lock[PATH_MAX];
    snprintf(lock, sizeof lock, "%s.lock", path);
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int err = fd < 0 ? errno : EINVAL;
        if (fd >= 0)
            close(fd);
        return gt_fail(e, "%s %s%s: cannot create its lock file (%s): %s", what, SHOWN(path),
                       ".lock", strerror(err));
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        close(fd);
        if (err == EWOULDBLOCK)
            return gt_fail(e, "%s %s%s is being written by another running gputrain (it holds %s)",
                           what, SHOWN(path), "its .lock file");
        return gt_fail(e, "%s %s%s: cannot lock it: %s", what, SHOWN(path), strerror(err));
    }
    return fd;
}

int gt_atomic_prepare(const char *path, const char *what, int keep, gt_err *e)
{
    size_t dirlen, len = strlen(path);
    const char *base = atomic_base(path, &dirlen);
    if (len == 0 || path[len - 1] == '/')
        return gt_fail(e, "%s '%s%s' is not a file name (it ends in '/')", what, SHOWN(path));
    if (len + 32 >= PATH_MAX)
        return gt_fail(e, "%s path is %zu bytes, too long (limit %d)", what, len, PATH_MAX - 33);
    if (strlen(base) > ATOMIC_BASE_MAX)
        return gt_fail(e, "%s file name is %zu bytes, too long: at most %d, leaving room for .lock "
                       "and .K in %d", what, strlen(base), ATOMIC_BASE_MAX, NAME_MAX);
    if (atomic_check_target(path, what, e) != 0 || atomic_check_rotation(path, what, keep, e) != 0)
        return -1;
    char probe[PATH_MAX];
    snprintf(probe, sizeof probe, "%.*s.gputrain-probe.%ld", (int)dirlen, path, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return gt_fail(e, "%s %s%s: cannot write in its folder: %s", what, SHOWN(path),
                       strerror(errno));
    close(fd);
    unlink(probe);
    int lock = atomic_lock(path, what, e);
    if (lock >= 0)
        atomic_clean_stale(path);
    return lock;
}
