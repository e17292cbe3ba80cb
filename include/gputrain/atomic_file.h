/* atomic_file.h - write a file so that its path always holds the old content or the new, whole,
 * with older versions kept as PATH.1 .. PATH.keep.
 *
 * A write goes to a temporary file in the same folder, is fsynced, the older versions rotate
 * from the top down (PATH.k takes PATH.(k-1)'s file, ..., PATH.1 takes PATH's, each through a
 * hard link renamed over it, or a copy where links are refused, so a reader of any name sees an
 * old or a new whole file, never nothing), the temporary file is renamed over PATH and the folder
 * is fsynced. Also here: opening an input so
 * that it cannot block. */
#ifndef GT_ATOMIC_FILE_H
#define GT_ATOMIC_FILE_H

#include "gputrain/common.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Writes a file's content to fd; returns 0 or the errno of the failed write. */
typedef int (*gt_atomic_fill_fn)(int fd, void *ctx);

/* Writes path through fill as described above; refuses (as gt_atomic_prepare does) to replace
 * anything but a regular file at path or its rotation targets. The temporary file is
 * FOLDER/BASE.tmp.PID, BASE cut so the name fits NAME_MAX. what names the file in errors
 * ("checkpoint").
 * keep: older versions kept, 0..1000. */
int gt_atomic_write(const char *path, const char *what, gt_atomic_fill_fn fill, void *ctx, int keep,
                    gt_err *e);

/* Checks, before any work goes into it, that gt_atomic_write can write path with keep older
 * versions: a file name (no trailing '/'), short enough for its temporary and rotated names,
 * nothing at path or PATH.1 .. PATH.keep but regular files (a symlink, FIFO, device or folder is
 * refused, never replaced), a writable folder. Then takes an
 * advisory lock (flock on PATH.lock, kept until the returned fd is closed or the process ends) so
 * a second run writing path is refused, and removes PATH.tmp.* files left by killed processes
 * (the PID in the name no longer exists). The lock's fd, or -1. */
int gt_atomic_prepare(const char *path, const char *what, int keep, gt_err *e);

/* Writes all n bytes, retrying on EINTR: 0, or the errno (ENOSPC, EIO, EFBIG...). */
int gt_fd_write_all(int fd, const void *buf, size_t n);

/* A file's whole text built in memory, and the fill function that writes it (ctx: the text). */
typedef struct gt_atomic_text {
    char *buf;
    size_t len;
} gt_atomic_text;
int gt_atomic_fill_text(int fd, void *ctx);

/* Opens an input for reading without blocking: a FIFO, device, socket or folder at path is
 * refused before it can hang or be consumed. The fd (O_CLOEXEC, blocking mode restored), or -1
 * with *why set to a static reason ("not a regular file (a FIFO)", or strerror). */
int gt_open_regular(const char *path, const char **why);

#ifdef __cplusplus
}
#endif
#endif
