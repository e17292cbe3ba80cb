/* atomic_file.c - whole-or-nothing file replacement with rotation of older versions (see
 * atomic_file.h): temp file, fsync, hard-link rotation, rename, folder fsync. */
#include "gputrain/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
        return gt_fail(e, "cannot save %s %s: creating %s: %s", what_file, path, tmp, strerror(errno));
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
        return gt_fail(e, "cannot save %s %s: %s %s: %s", what_file, path, what, tmp, strerror(err));
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

/* The fallback where the filesystem refuses hard links: a copy, itself written through a temp
 * file so `to` is always whole. */
static int atomic_copy_file(const char *path, const char *what, const char *to, gt_err *e)
{
    char tmp[PATH_MAX + 32]; /* to is PATH.k */
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", to, (long)getpid());
    int in = open(path, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return gt_fail(e, "cannot save %s %s: reading it to copy: %s", what, path, strerror(errno));
    int fd = atomic_create(tmp);
    if (fd < 0) {
        int err = errno;
        close(in);
        return gt_fail(e, "cannot save %s %s: creating %s: %s", what, path, tmp, strerror(err));
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
        return gt_fail(e, "cannot save %s %s: copying it to %s: %s", what, path, to, strerror(err));
    }
    return 0;
}

/* PATH.(k-1) -> PATH.k down to PATH.1 -> PATH.2, then PATH.1 = PATH by hard link, so a crash at
 * any point still leaves PATH in place. */
static int atomic_rotate(const char *path, const char *what, int keep, gt_err *e)
{
    char from[PATH_MAX], to[PATH_MAX];
    for (int k = keep; k >= 2; k--) {
        snprintf(from, sizeof from, "%s.%d", path, k - 1);
        snprintf(to, sizeof to, "%s.%d", path, k);
        if (rename(from, to) != 0 && errno != ENOENT)
            return gt_fail(e, "cannot save %s %s: renaming %s to %s: %s", what, path, from, to,
                           strerror(errno));
    }
    snprintf(to, sizeof to, "%s.1", path);
    int rc = link(path, to);
    /* EEXIST: keep is 1, or a killed save left PATH.1 and PATH.2 as links to one file, which
     * rename() leaves both in place. */
    if (rc != 0 && errno == EEXIST) {
        if (unlink(to) != 0 && errno != ENOENT)
            return gt_fail(e, "cannot save %s %s: removing %s: %s", what, path, to, strerror(errno));
        rc = link(path, to);
    }
    if (rc == 0 || errno == ENOENT) /* ENOENT: no previous version to keep */
        return 0;
    if (errno == EPERM || errno == EOPNOTSUPP || errno == ENOSYS || errno == EMLINK || errno == EXDEV)
        return atomic_copy_file(path, what, to, e);
    return gt_fail(e, "cannot save %s %s: linking it as %s: %s", what, path, to, strerror(errno));
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
        return gt_fail(e, "%s %s: opening its folder %s: %s", what, path, dir, strerror(errno));
    int rc = fsync(fd), err = errno;
    close(fd);
    /* EINVAL: a filesystem that cannot sync folders; the rename is as durable as it gets there. */
    if (rc != 0 && err != EINVAL)
        return gt_fail(e, "%s %s: syncing its folder %s: %s", what, path, dir, strerror(err));
    return 0;
}

int gt_atomic_write(const char *path, const char *what, gt_atomic_fill_fn fill, void *ctx, int keep,
                    gt_err *e)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int rc = atomic_write_tmp(path, what, tmp, fill, ctx, e);
    if (rc == 0 && keep > 0 && atomic_rotate(path, what, keep, e) != 0)
        rc = -1;
    if (rc == 0 && rename(tmp, path) != 0)
        rc = gt_fail(e, "cannot save %s %s: renaming %s over it: %s", what, path, tmp, strerror(errno));
    if (rc != 0) {
        unlink(tmp);
        return -1;
    }
    return atomic_sync_folder(path, what, e);
}

static const char *file_kind(mode_t mode)
{
    return S_ISDIR(mode) ? "not a regular file (a folder)" : S_ISFIFO(mode) ? "not a regular file (a FIFO)"
         : S_ISCHR(mode) || S_ISBLK(mode) ? "not a regular file (a device)"
         : S_ISSOCK(mode) ? "not a regular file (a socket)" : "not a regular file";
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
        *why = file_kind(st.st_mode);
        return -1;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        *why = strerror(errno);
        return -1;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        *why = file_kind(st.st_mode);
        close(fd);
        return -1;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0)
        fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return fd;
}
