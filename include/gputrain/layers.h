/* layers.h - the CPU reference: each layer's forward and backward in plain C (cpu_net.h runs a
 * whole network step from them).
 *
 * Layouts: activations are batch-major, each sample C x H x W; conv weights O x I x K x K; linear
 * weights out x in. Backward functions *accumulate* (+=) into parameter gradients and *overwrite*
 * input gradients (dx), so a network step zeroes the gradient once and calls each layer. These
 * functions are the reference every CUDA op is tested against (tests/test_cuda_parity.c). */
#ifndef GT_LAYERS_H
#define GT_LAYERS_H

#include "gputrain/model.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Convolution, output (h + 2 pad - k) / stride + 1 per side (floor, as PyTorch). b may be NULL
 * (no bias). col: workspace of at least gt_conv2d_col_len_strided(c, h, w, k, pad, stride)
 * floats; at stride 1 that is gt_conv2d_col_len(c, k, oh, ow). */
size_t gt_conv2d_col_len_strided(int c, int h, int w, int k, int pad, int stride);
size_t gt_conv2d_col_len(int c, int k, int oh, int ow);
void gt_conv2d_forward_strided(const float *x, int n, int c, int h, int w, const float *wt,
                               const float *b, int o, int k, int pad, int stride, float *y,
                               float *col);
/* dx may be NULL (first layer), db too (no bias). dw, db accumulate. */
void gt_conv2d_backward_strided(const float *x, const float *dy, int n, int c, int h, int w,
                                const float *wt, int o, int k, int pad, int stride, float *dx,
                                float *dw, float *db, float *col);
/* The same at stride 1. */
void gt_conv2d_forward(const float *x, int n, int c, int h, int w, const float *wt, const float *b,
                       int o, int k, int pad, float *y, float *col);
void gt_conv2d_backward(const float *x, const float *dy, int n, int c, int h, int w,
                        const float *wt, int o, int k, int pad, float *dx, float *dw, float *db,
                        float *col);

void gt_linear_forward(const float *x, int n, int in, const float *wt, const float *b, int out,
                       float *y);
void gt_linear_backward(const float *x, const float *dy, int n, int in, const float *wt, int out,
                        float *dx, float *dw, float *db);

/* Pooling with window k and stride k (h and w divisible by k is not required; floor like PyTorch).
 * maxpool records the argmax index (within the input sample plane) for its backward. */
void gt_avgpool_forward(const float *x, int n, int c, int h, int w, int k, float *y);
void gt_avgpool_backward(const float *dy, int n, int c, int h, int w, int k, float *dx);
void gt_maxpool_forward(const float *x, int n, int c, int h, int w, int k, float *y, int32_t *arg);
void gt_maxpool_backward(const float *dy, const int32_t *arg, int n, int c, int h, int w, int k,
                         float *dx);

/* Global average pooling: y[i][ch] = the mean of x's channel plane (plane = h * w elements). */
void gt_gap_forward(const float *x, int n, int c, size_t plane, float *y);
void gt_gap_backward(const float *dy, int n, int c, size_t plane, float *dx);

/* Batch normalisation over the channels of x (n x c x plane), as PyTorch's BatchNorm2d:
 * y = gamma * (x - mean) / sqrt(var + eps) + beta. Training uses the batch's mean and biased
 * variance, and moves the running statistics by momentum towards the batch mean and the unbiased
 * variance (the biased one when a channel has a single value). Evaluation uses the running
 * statistics. momentum is GT_BN_MOMENTUM for PyTorch's running statistics; 1 writes the batch's
 * own mean and unbiased variance there (what a device hands the parameter store). Both write save (2 c floats: the mean and 1 / sqrt(var + eps) they used) for the
 * backward, which takes batch_stats = 1 after a training forward and 0 after an evaluation one.
 * dx may be NULL; dgamma and dbeta accumulate. */
#define GT_BN_EPS 1e-5
#define GT_BN_MOMENTUM 0.1
void gt_batchnorm_forward_train(const float *x, int n, int c, size_t plane, const float *gamma,
                                const float *beta, double momentum, float *running_mean,
                                float *running_var, float *y, float *save);
void gt_batchnorm_forward_eval(const float *x, int n, int c, size_t plane, const float *gamma,
                               const float *beta, const float *running_mean,
                               const float *running_var, float *y, float *save);
void gt_batchnorm_backward(const float *x, const float *dy, int n, int c, size_t plane,
                           const float *gamma, const float *save, int batch_stats, float *dx,
                           float *dgamma, float *dbeta);

/* y = a + b elementwise (y may be a or b): the residual add, and its backward's gradient sum. */
void gt_add(const float *a, const float *b, float *y, size_t len);

/* Activations; backward uses the forward output y (relu: y > 0; sigmoid: y(1-y); tanh: 1-y^2).
 * Return 0, or -1 without writing anything when kind is not an activation. */
int gt_act_forward(gt_layer_kind kind, const float *x, float *y, size_t len);
int gt_act_backward(gt_layer_kind kind, const float *y, const float *dy, float *dx, size_t len);

/* Inverted dropout: keep with probability 1-p, scale kept values by 1/(1-p). The mask of sample i
 * element j is gt_counter_uniform(gt_dropout_key(seed, epoch, sample_ids[i], layer), j) >= p. */
void gt_dropout_forward(const float *x, float *y, uint8_t *mask, int n, size_t len, float p,
                        uint64_t seed, uint32_t epoch, const uint32_t *sample_ids, uint32_t layer);
void gt_dropout_backward(const float *dy, const uint8_t *mask, float *dx, size_t n_len, float p);

/* The index of the first largest of the k values z: a row's predicted class. */
int gt_argmax(const float *z, int k);

/* Softmax cross-entropy over n rows of k logits: returns the summed loss, writes dlogits =
 * (softmax - onehot) * scale (scale = 1/n for a mean loss; dlogits may be NULL), and adds to
 * *correct the number of rows whose argmax (first maximum) equals the label. */
double gt_softmax_xent(const float *logits, const uint16_t *labels, int n, int k, float scale,
                       float *dlogits, int *correct);

/* uint8 -> float input step: x / 255. */
void gt_input_normalize(const uint8_t *src, float *dst, size_t len);

#ifdef __cplusplus
}
#endif
#endif
