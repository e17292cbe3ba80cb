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

/* col: workspace of at least gt_conv2d_col_len(c, k, oh, ow) floats. */
size_t gt_conv2d_col_len(int c, int k, int oh, int ow);
void gt_conv2d_forward(const float *x, int n, int c, int h, int w, const float *wt, const float *b,
                       int o, int k, int pad, float *y, float *col);
/* dx may be NULL (first layer). dw, db accumulate. */
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

/* Activations; backward uses the forward output y (relu: y > 0; sigmoid: y(1-y); tanh: 1-y^2).
 * Return 0, or -1 without writing anything when kind is not an activation. */
int gt_act_forward(gt_layer_kind kind, const float *x, float *y, size_t len);
int gt_act_backward(gt_layer_kind kind, const float *y, const float *dy, float *dx, size_t len);

/* Inverted dropout: keep with probability 1-p, scale kept values by 1/(1-p). The mask of sample i
 * element j is gt_counter_uniform(gt_dropout_key(seed, epoch, sample_ids[i], layer), j) >= p. */
void gt_dropout_forward(const float *x, float *y, uint8_t *mask, int n, size_t len, float p,
                        uint64_t seed, uint32_t epoch, const uint32_t *sample_ids, uint32_t layer);
void gt_dropout_backward(const float *dy, const uint8_t *mask, float *dx, size_t n_len, float p);

/* Softmax cross-entropy over n rows of k logits: returns the summed loss, writes dlogits =
 * (softmax - onehot) * scale (scale = 1/n for a mean loss; dlogits may be NULL), and adds to
 * *correct the number of rows whose argmax (first maximum) equals the label. */
double gt_softmax_xent(const float *logits, const uint8_t *labels, int n, int k, float scale,
                       float *dlogits, int *correct);

/* uint8 -> float input step: x / 255. */
void gt_input_normalize(const uint8_t *src, float *dst, size_t len);

#ifdef __cplusplus
}
#endif
#endif
