/* layer_kinds.h - the one table of layer kinds: each row names a kind's spec word, its parser,
 * its shape rule, its canonical token and its CPU forward and backward, so that the model builder
 * (model.c), the CPU network (cpu_net.c) and every check agree on what a kind is. A kind without
 * a row is an error wherever it is met, never an identity layer.
 *
 * A new layer kind is its enum value (model.h), its CPU functions (layers.h), one row here
 * (src/layer_kinds.c), and its CUDA forward and backward (cuda/layers_cuda.cu) with a parity case. */
#ifndef GT_LAYER_KINDS_H
#define GT_LAYER_KINDS_H

#include "gputrain/cpu_net.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GT_LAYER_MAX_WIDTH 65536 /* channels or features of one layer */
#define GT_LAYER_MAX_KERNEL 64
#define GT_LAYER_MAX_FIELDS 6    /* conv:OUT:K:PAD:STRIDE:nobias */

/* A spec token split at ':' into its word and the numbers after it. */
typedef struct gt_layer_token {
    int n;                           /* fields present, word included; GT_LAYER_MAX_FIELDS + 1
                                        when there are too many */
    const char *f[GT_LAYER_MAX_FIELDS];
    int len[GT_LAYER_MAX_FIELDS];
} gt_layer_token;

/* The CPU reference of layer l of net over batch b (forward), or over its n samples (backward:
 * dy is the output gradient, dx the input gradient to overwrite, NULL for the first layer). */
typedef void (*gt_cpu_forward_fn)(gt_cpu_net *net, int l, const float *params, const gt_batch *b,
                                  int train);
typedef void (*gt_cpu_backward_fn)(gt_cpu_net *net, int l, const float *params, float *grad,
                                   int n, int train, const float *dy, float *dx);

typedef struct gt_layer_kind_row {
    gt_layer_kind kind;
    const char *word;        /* the spec token's word: "conv" */
    char param_prefix;       /* 'c', 'f' or 'b': its weight and bias are c1.weight...; 0 for
                                none */
    /* The token's fields into l's hyper-parameters; -1 with the reason in e (no layer or token:
     * the caller adds them). */
    int (*parse)(const gt_layer_token *t, gt_layer *l, gt_err *e);
    /* The output shape (c, h, w) from l's input shape and hyper-parameters, in long long so that
     * nothing overflows; -1 when the hyper-parameters cannot work (kernel < 1...). */
    int (*out_shape)(const gt_layer *l, long long out[3]);
    /* The canonical token, every field explicit: building from it gives the same layer. */
    void (*format)(const gt_layer *l, char *buf, size_t size);
    gt_cpu_forward_fn cpu_forward;
    gt_cpu_backward_fn cpu_backward;
} gt_layer_kind_row;

/* The row of a kind, or NULL for a value that has none. */
const gt_layer_kind_row *gt_layer_kind_of(gt_layer_kind kind);
/* The row whose word is word[0..len), or NULL. */
const gt_layer_kind_row *gt_layer_kind_find(const char *word, size_t len);
/* Every kind's word in table order, separated by spaces, for messages. */
void gt_layer_kind_words(char *buf, size_t size);

/* Splits s[0..len) at ':' into t. */
void gt_layer_token_split(const char *s, int len, gt_layer_token *t);

/* The one shape rule: l's output shape from its input shape (l->in_c, in_h, in_w). -1 with a
 * message for a kind without a row or hyper-parameters that cannot work. */
int gt_layer_out_shape(const gt_layer *l, long long out[3], gt_err *e);

/* The weight, bias and buffer lengths (lens[0..2]) layer l has from its kind and shapes: conv
 * O x I x K x K and O (none with no_bias), linear out x in and out, batch norm C, C and 2 C + 1,
 * other kinds none. */
void gt_layer_param_lens(const gt_layer *l, size_t lens[3]);

/* Layer l of m's output shape, blocks included: a '|' gives its block's input shape again, a ']'
 * requires its two branches to agree (the layers before l must have their shapes). -1 with a
 * message for a bad peer index or branches that differ. */
int gt_layer_model_shape(const gt_model *m, int l, long long out[3], gt_err *e);

#ifdef __cplusplus
}
#endif
#endif
