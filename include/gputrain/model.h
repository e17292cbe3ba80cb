/* model.h - a network as a sequence of layers over one flat float32 parameter array and one flat
 * float32 buffer array.
 *
 * Parameters are what the optimizer trains (weight decay and momentum apply to them): conv
 * "c1.weight" O x I x kH x kW, linear "f1.weight" out x in, batch norm "b1.weight" (gamma) and
 * "b1.bias" (beta), each followed by its ".bias" where it has one, placed one after another in
 * the flat array the parameter store owns. Buffers are state a layer keeps that is not trained:
 * batch norm's "b1.running_mean", "b1.running_var" (C floats each, updated by every training
 * forward, read by evaluation) and "b1.num_batches_tracked" (one value, the count of training
 * batches, which PyTorch keeps as an int64 scalar and gputrain as an exact float). The optimizer
 * never touches a buffer; a model without batch norm has none. Parameterised layers are named c1,
 * c2, ..., b1, ... and f1, ... in order, as in the PyTorch reference, so checkpoints interchange;
 * the residual built-ins use their PyTorch module's names instead (stem.0, layers.3.c1, fc).
 *
 * Model spec text (also what `--model` accepts besides the built-in names): layers separated by
 * spaces, commas or newlines, '#' starts a comment:
 *   conv:OUT:K[:PAD[:STRIDE]][:nobias]   convolution (PAD 0, STRIDE 1 by default; nobias: no bias)
 *   fc:OUT        linear (flattens its input)     bn   batch norm over the input's channels
 *   avgpool:K  maxpool:K  (stride K)              gap  global average pool: C x H x W -> C x 1 x 1
 *   relu  sigmoid  tanh                           dropout:P  (0 <= P < 1)
 *   res[ BODY ]             a residual block: BODY's output plus the block's input
 *   res[ BODY | SHORTCUT ]  BODY's output plus SHORTCUT's, which also runs on the block's input
 *                           ('[' ends a word, ']' and '|' are words of their own; blocks nest)
 *   init:torch | init:xavier | init:kaiming   (weights' init; see gt_init_kind)
 *   names:plain | names:resnet  (tensor names: c1, b1, f1, ... or the PyTorch ResNet reference's
 *                                stem.N, layers.N.c1/b1/c2/b2/short.N, fc; see resnet20) 
 * The last layer must be fc:NCLASSES; softmax cross-entropy is the loss. */
#ifndef GT_MODEL_H
#define GT_MODEL_H

#include "gputrain/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GT_MAX_LAYERS 128     /* resnet20 has 83 (its blocks' markers included) */
#define GT_MAX_TENSORS (2 * GT_MAX_LAYERS)
#define GT_SPECLEN 4096       /* resnet20's canonical spec is about 670 characters */
#define GT_MAX_BUFFER_TENSORS (3 * GT_MAX_LAYERS)
#define GT_MAX_BLOCK_DEPTH 8  /* residual blocks inside residual blocks */

typedef enum gt_layer_kind {
    GT_CONV = 0,
    GT_LINEAR,
    GT_AVGPOOL,
    GT_MAXPOOL,
    GT_RELU,
    GT_SIGMOID,
    GT_TANH,
    GT_DROPOUT,
    GT_BATCHNORM,
    GT_GAP,
    GT_RES_BEGIN, /* "res[": the block's input is kept; its output is its input */
    GT_RES_SPLIT, /* "|": the body ends; its output is the block's input again, for the shortcut */
    GT_RES_END,   /* "]": the last branch's output plus the other's (body or block input) */
} gt_layer_kind;

typedef enum gt_init_kind {
    GT_INIT_TORCH = 0, /* PyTorch defaults: kaiming_uniform(a=sqrt(5)) weights, U(+-1/sqrt(fan_in)) bias */
    GT_INIT_XAVIER,    /* Xavier/Glorot uniform weights, zero bias (the D2L classic LeNet) */
    GT_INIT_KAIMING,   /* conv: kaiming_normal_(mode=fan_out, relu), zero bias; linear as torch
                          (the residual networks' reference) */
} gt_init_kind;
/* Every init: batch norm's gamma 1, beta 0; running mean 0, running variance 1, count 0. */

/* The input step (--normalize): every byte becomes x / 255, then, where on, (x / 255 - mean[ch]) /
 * std[ch] for its channel ch, the same formula on the CPU (cpu_net.c) and the GPU (kernels.cu).
 * It belongs to the model, so that the devices, checkpoints (metadata "input_norm"), eval and
 * predict all see it; gt_model_build leaves it off, and a checkpoint without it means off. */
#define GT_NORM_MAX_C 16 /* channels it can describe */
typedef struct gt_input_norm {
    int on;                      /* 0: x / 255 only */
    float mean[GT_NORM_MAX_C];   /* per channel, in units of x / 255 */
    float std[GT_NORM_MAX_C];    /* per channel, > 0 */
} gt_input_norm;

typedef struct gt_layer {
    gt_layer_kind kind;
    char name[24];               /* "c1", "b2", "f3", "layers.7.short.0" for layers with
                                    parameters; "" otherwise */
    int in_c, in_h, in_w;        /* input shape of one sample */
    int out_c, out_h, out_w;     /* output shape of one sample (linear: out_c x 1 x 1) */
    int k, pad;                  /* conv and pool kernel; conv padding (pool stride = k) */
    int stride;                  /* conv stride, at least 1 */
    int no_bias;                 /* conv without a bias */
    int peer;                    /* blocks: res[ -> its ]; | -> its res[; ] -> the layer whose
                                    input is the other branch (its | or, without one, its res[) */
    float p;                     /* dropout probability */
    size_t in_len, out_len;      /* elements per sample: in_c*in_h*in_w, out_c*out_h*out_w */
    size_t w_off, w_len;         /* weight offset and length in the flat parameter array */
    size_t b_off, b_len;         /* bias offset and length */
    size_t s_off, s_len;         /* buffer offset and length in the flat buffer array (batch
                                    norm: running mean, running variance, count: 2 C + 1) */
} gt_layer;

typedef struct gt_tensor_info {
    char name[48];   /* "c1.weight", "layers.7.short.1.num_batches_tracked" */
    size_t offset;   /* in floats, into the flat array */
    int rank;
    int shape[4];
    size_t len;
} gt_tensor_info;

typedef struct gt_model {
    char name[32];               /* "lenet5", ... (also for a spec equal to one) or "custom" */
    char spec[GT_SPECLEN];       /* canonical spec text: rebuilding from it gives the same model */
    gt_init_kind init;
    int resnet_names;            /* names:resnet: layers named as model_name_resnet (model.c) */
    int in_c, in_h, in_w, nclasses;
    int nlayers;
    gt_layer layers[GT_MAX_LAYERS];
    int ntensors;
    gt_tensor_info tensors[GT_MAX_TENSORS];
    size_t nparams;
    size_t ndecay;               /* parameters [0, ndecay) take weight decay, the rest none: with
                                    batch norm the conv and linear weights come first and biases
                                    and batch norm's gamma, beta after them; else every one */
    int nbuffer_tensors;
    gt_tensor_info buffer_tensors[GT_MAX_BUFFER_TENSORS]; /* offsets into the buffer array */
    size_t nbuffers;             /* floats in the buffer array; 0 without batch norm */
    size_t max_act;              /* largest per-sample activation (input included), for buffers */
    gt_input_norm norm;          /* the input step's per-channel normalisation (--normalize) */
} gt_model;

/* Builds a model for inputs of in_c x in_h x in_w and nclasses outputs. name_or_spec (--model) is
 * a built-in name (lenet5, lenet5-classic, mlp, cnn-wide, resnet20, resnet18), a spec text, or
 * "@FILE" to read a spec from FILE. */
int gt_model_build(const char *name_or_spec, int in_c, int in_h, int in_w, int nclasses,
                   gt_model *m, gt_err *e);

/* Builds a model from spec text only: never a built-in name or "@FILE" (what a checkpoint's
 * model_spec holds, which must not make gputrain read a file). Messages begin with where, e.g.
 * "checkpoint PATH: model_spec". A spec equal to a built-in's is named after it, else "custom". */
int gt_model_build_spec(const char *where, const char *spec, int in_c, int in_h, int in_w,
                        int nclasses, gt_model *m, gt_err *e);

/* The spec text of a built-in model, or NULL. */
const char *gt_model_builtin_spec(const char *name);

/* Seeded, reproducible initialisation with the model's init kind. */
void gt_model_init_params(const gt_model *m, float *params, uint64_t seed);
/* The buffers' initial values (m->nbuffers floats): running mean 0, running variance 1, count 0. */
void gt_model_init_buffers(const gt_model *m, float *buffers);

/* Folds one training batch's statistics (stats, in the buffers' layout: each batch norm's batch
 * mean, unbiased batch variance and 1, as a device leaves them in d->stats) into the running
 * statistics `buffers`, as PyTorch's BatchNorm2d moves its own: momentum GT_BN_MOMENTUM, count
 * plus one. The parameter store calls it for every step a worker pushes. */
void gt_model_fold_stats(const gt_model *m, float *buffers, const float *stats);

/* Checks that the residual blocks nest and their markers point at each other as the builder
 * sets them (peer), and gives each marker's block nesting depth in depth[l] (0 outermost), which
 * picks a backend's gradient buffer for the block; other layers' entries are left alone. -1 with
 * a message naming the model and layer. */
int gt_model_block_depths(const gt_model *m, int *depth, gt_err *e);

/* Parameter tensor by name, or NULL. */
const gt_tensor_info *gt_model_tensor(const gt_model *m, const char *name);
/* The end (offset + length) of the parameter tensor that ends last at or before limit, 0 where none
 * does: where a copy or apply in parts can end its first part, the first layers', whose gradient
 * a backward finishes last and whose parameters a forward reads first. */
size_t gt_model_tensors_end_within(const gt_model *m, size_t limit);
/* Buffer tensor by name, or NULL. */
const gt_tensor_info *gt_model_buffer(const gt_model *m, const char *name);

#ifdef __cplusplus
}
#endif
#endif
