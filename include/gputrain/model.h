/* model.h - a network as a sequence of layers over one flat float32 parameter array.
 *
 * Every parameter tensor has a PyTorch name and layout (conv "c1.weight" O x I x kH x kW, linear
 * "f1.weight" out x in, then ".bias"), placed one after another in the flat array the parameter
 * store owns. Parameterised layers are named c1, c2, ... and f1, f2, ... in order, as in the
 * PyTorch reference, so checkpoints interchange.
 *
 * Model spec text (also what `--model` accepts besides the built-in names): layers separated by
 * spaces, commas or newlines, '#' starts a comment:
 *   conv:OUT:K[:PAD]   convolution, stride 1      fc:OUT        linear (flattens its input)
 *   avgpool:K  maxpool:K  (stride K)              relu  sigmoid  tanh
 *   dropout:P  (0 <= P < 1)                      init:torch | init:xavier   (weights' init)
 * The last layer must be fc:NCLASSES; softmax cross-entropy is the loss. */
#ifndef GT_MODEL_H
#define GT_MODEL_H

#include "gputrain/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GT_MAX_LAYERS 32
#define GT_MAX_TENSORS (2 * GT_MAX_LAYERS)
#define GT_SPECLEN 1024

typedef enum gt_layer_kind {
    GT_CONV = 0,
    GT_LINEAR,
    GT_AVGPOOL,
    GT_MAXPOOL,
    GT_RELU,
    GT_SIGMOID,
    GT_TANH,
    GT_DROPOUT,
} gt_layer_kind;

typedef enum gt_init_kind {
    GT_INIT_TORCH = 0, /* PyTorch defaults: kaiming_uniform(a=sqrt(5)) weights, U(+-1/sqrt(fan_in)) bias */
    GT_INIT_XAVIER,    /* Xavier/Glorot uniform weights, zero bias (the D2L classic LeNet) */
} gt_init_kind;

typedef struct gt_layer {
    gt_layer_kind kind;
    char name[8];                /* "c1", "f3" for conv/linear; "" otherwise */
    int in_c, in_h, in_w;        /* input shape of one sample */
    int out_c, out_h, out_w;     /* output shape of one sample (linear: out_c x 1 x 1) */
    int k, pad;                  /* conv and pool kernel; conv padding (pool stride = k) */
    float p;                     /* dropout probability */
    size_t in_len, out_len;      /* elements per sample: in_c*in_h*in_w, out_c*out_h*out_w */
    size_t w_off, w_len;         /* weight offset and length in the flat parameter array */
    size_t b_off, b_len;         /* bias offset and length */
} gt_layer;

typedef struct gt_tensor_info {
    char name[32];   /* "c1.weight" */
    size_t offset;   /* in floats, into the flat array */
    int rank;
    int shape[4];
    size_t len;
} gt_tensor_info;

typedef struct gt_model {
    char name[32];               /* "lenet5", ... (also for a spec equal to one) or "custom" */
    char spec[GT_SPECLEN];       /* canonical spec text: rebuilding from it gives the same model */
    gt_init_kind init;
    int in_c, in_h, in_w, nclasses;
    int nlayers;
    gt_layer layers[GT_MAX_LAYERS];
    int ntensors;
    gt_tensor_info tensors[GT_MAX_TENSORS];
    size_t nparams;
    size_t max_act;              /* largest per-sample activation (input included), for buffers */
} gt_model;

/* Builds a model for inputs of in_c x in_h x in_w and nclasses outputs. name_or_spec (--model) is
 * a built-in name (lenet5, lenet5-classic, mlp, cnn-wide), a spec text, or "@FILE" to read a spec
 * from FILE. */
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

/* Tensor by name, or NULL. */
const gt_tensor_info *gt_model_tensor(const gt_model *m, const char *name);

#ifdef __cplusplus
}
#endif
#endif
