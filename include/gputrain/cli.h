/* cli.h - the strict command line: every malformed, out-of-range or repeated value is refused with
 * one line naming the flag and the value. */
#ifndef GT_CLI_H
#define GT_CLI_H

#include "gputrain/config.h"
#include <getopt.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Parses argv (argv[0] is the program; an optional first word "train", "eval" or "predict" picks the
 * command; an option the command does not use is refused).
 * Returns 0 on success, 1 when --help or --version was printed to out (caller exits 0), -1 with a
 * one-line message in e otherwise. */
int gt_cli_parse(int argc, char **argv, gt_config *c, FILE *out, gt_err *e);

/* The command line of a resumed run: argv[0] (and its command word), then the options of the run
 * that wrote the checkpoint (run_options, the checkpoint's JSON array of "--name=value" strings,
 * gt_config.run_options) that argv does not set itself, then argv's own; so a resume goes on
 * with the run's --lr, --schedule, --epochs, --model, ... unless given again. Each option must be
 * one a resume takes again. A kept --model becomes model where that is not NULL (the
 * checkpoint's built-in name or spec: a spec file may be gone or changed since). *out_argv
 * (NULL-terminated, *out_argc words) is freed with
 * gt_cli_free_args; carried (cap bytes, may be NULL) gets the options taken, space-separated.
 * 0, or -1 with a message in e (which does not name the file). */
int gt_cli_resume_args(const char *run_options, const char *model, int argc, char **argv,
                       int *out_argc, char ***out_argv, char *carried, size_t cap, gt_err *e);
void gt_cli_free_args(char **argv);

/* The long options, one per row of the option table, ending with a zeroed entry (tests check
 * that --help covers each and a good case uses it). */
const struct option *gt_cli_options(void);

/* Prints the help text, every option with its default. */
void gt_cli_usage(FILE *out);

/* Parses a device list for --gpus: "0,1,3", "all", "cpu:N". Exposed for tests. */
int gt_cli_parse_gpus(const char *s, gt_config *c, gt_err *e);

#ifdef __cplusplus
}
#endif
#endif
