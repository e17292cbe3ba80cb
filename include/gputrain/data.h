/* data.h - datasets: IDX files (.gz or plain) and image folders, held as uint8 in memory.
 *
 * Images stay uint8, sample-major, each sample channel-major (C x H x W), so a worker can hand a
 * slice to a GPU as raw bytes; the model's input step normalises them (x / 255). Every header
 * field is validated before anything is allocated from it. */
#ifndef GT_DATA_H
#define GT_DATA_H

#include "gputrain/common.h"
#include "gputrain/model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GT_PATHLEN 1024
#define GT_MAX_CLASSES 65536 /* labels are uint16_t */
#define GT_CLASS_NAMELEN 32   /* a class name's bytes with its NUL */
typedef char gt_class_name[GT_CLASS_NAMELEN];
/* Limits on what a file may claim, checked before anything is allocated from it. */
#define GT_DATA_MAX_SAMPLES 100000000u  /* samples in one split */
#define GT_DATA_MAX_SIDE 4096u          /* pixels on either side of an image */
#define GT_DATA_MAX_BYTES (8ull << 30)  /* bytes of one split's images */

typedef struct gt_dataset {
    uint32_t n;       /* samples */
    int c, h, w;      /* channels, height, width of every sample */
    int nclasses;     /* labels are in [0, nclasses) */
    uint8_t *images;  /* n * c * h * w bytes, gt_alloc'd */
    uint16_t *labels; /* n labels, gt_alloc'd */
    uint32_t images_crc, labels_crc; /* CRC-32 of images and labels (gt_labels_crc): the
                                        fingerprint's parts */
} gt_dataset;

typedef struct gt_data {
    gt_dataset train, test;
    gt_dataset val;              /* --val-split: held out of the training set (n 0: none) */
    char dir[GT_PATHLEN];        /* where it was loaded from */
    char format[16];             /* "idx", "folder", "cifar10", "cifar100" or "synthetic" */
    gt_class_name *class_names;  /* train.nclasses names, gt_alloc'd (gt_data_free frees them):
                                    folder datasets: the class folder names; idx: Fashion-MNIST's
                                    ten names when its test labels are Fashion-MNIST's, else
                                    "0".."9"; CIFAR: its names file's, else numbers */
    uint32_t fingerprint;        /* CRC-32 over train+test images and labels: ties checkpoints to data */
} gt_data;

/* Loads a dataset. dir may be NULL: then datasets/fashion-mnist, then
 * /usr/share/datasets/fashion-mnist are tried. A folder with the four Fashion-MNIST/MNIST IDX files
 * (train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], t10k-...) loads as IDX; a folder
 * with train/<class>/ and test/<class>/ subfolders of PNG and JPEG images loads as an image
 * folder; one with CIFAR-10's or CIFAR-100's binary files loads as CIFAR.
 * train_limit > 0 keeps only the first train_limit training samples. */
int gt_data_load(const char *dir, uint32_t train_limit, gt_data *out, gt_err *e);
/* The same, with every image of an image folder resized to size[0] x size[1] (height, width:
 * --image-size) after decoding, so that the images may differ in size; {0, 0} keeps the rule that
 * they share one. Data of other formats must already have that size. */
int gt_data_load_sized(const char *dir, uint32_t train_limit, const int *size, gt_data *out,
                       gt_err *e);
void gt_data_free(gt_data *d);
/* --val-split (data_split.c): moves round(frac x n) training samples, chosen by a shuffle under a
 * fixed seed (the same in every run), into d->val; both keep their order. frac 0 does nothing; a
 * split that leaves either side empty is refused. The fingerprint stays the whole data's. */
int gt_data_split_val(gt_data *d, double frac, gt_err *e);
/* The refusal alone: 0 where frac of n training samples leaves both sides a sample (or frac 0). */
int gt_data_val_check(uint32_t n, double frac, gt_err *e);

/* The CRC-32 of n labels as the fingerprint takes them: one byte a label where nclasses <= 256
 * (the bytes of the files themselves, so fingerprints are what they were when labels were bytes),
 * else two little-endian bytes a label; gt_labels_crc_len is that byte count. */
uint32_t gt_labels_crc(const uint16_t *labels, uint32_t n, int nclasses);
uint64_t gt_labels_crc_len(uint32_t n, int nclasses);
/* d->class_names for n classes, zeroed; 0, or -1 with a message naming d->dir. */
int gt_data_alloc_names(gt_data *d, int n, gt_err *e);

/* Training-data augmentation (data_input.c, --augment), applied to the uint8 bytes of a training
 * batch while the host gathers it (the CPU network's gather and the CUDA staging gather both call
 * gt_data_copy_sample), never to evaluation. The crop and flip of sample s in epoch e are a pure
 * function of (seed, e, s) through gt_augment_key (counter_rng.h), so every mode, worker count and
 * backend sees the same augmented sample. As torchvision's RandomCrop(padding=P) followed by
 * RandomHorizontalFlip: the image is padded with P zeros on every side, an H x W window is cut at
 * a uniform offset (0..2P down, 0..2P across), then mirrored left-right with probability 1/2. */
#define GT_AUGMENT_MAX_PAD 64
typedef struct gt_augment {
    int pad;  /* crop:P, zero padding on each side, 0..GT_AUGMENT_MAX_PAD; 0 = no crop */
    int flip; /* 1: horizontal flip with probability 1/2 */
} gt_augment;

/* Whether a changes anything (NULL: no). */
int gt_augment_on(const gt_augment *a);
/* Parses --augment's value: "none", or a comma list of crop:P and flip. 0, or -1 with a one-line
 * message. */
int gt_augment_parse(const char *s, gt_augment *a, gt_err *e);
/* The canonical text of a ("none", "crop:2,flip", "flip"), for logs and the config record. */
void gt_augment_format(const gt_augment *a, char *buf, size_t size);
/* The crop offsets (dy, dx: 0..2P, the window's corner in the padded image) and flip that sample
 * gets in epoch (exposed for tests). */
void gt_augment_draw(const gt_augment *a, uint64_t seed, uint32_t epoch, uint32_t sample, int *dy,
                     int *dx, int *flip);
/* Sample id of ds, augmented by a (NULL: copied as it is), into dst (c * h * w bytes). */
void gt_data_copy_sample(const gt_dataset *ds, uint32_t id, const gt_augment *a, uint64_t seed,
                         uint32_t epoch, uint8_t *dst);

/* Per-channel normalisation (gt_input_norm, model.h; --normalize). gt_norm_parse reads
 * "M1,M2,.../S1,S2,..." (as many means as standard deviations, 1..GT_NORM_MAX_C, each std > 0)
 * into *out (on) and *count, messages beginning with what; gt_norm_format writes count channels
 * back in that form (9 significant digits: the floats exactly), or "none" where off.
 * gt_data_channel_stats: the mean and standard deviation (population) of x / 255 over every
 * pixel of each channel of ds (--normalize auto, on the training split); a constant channel gets
 * std 1. */
int gt_norm_parse(const char *what, const char *s, gt_input_norm *out, int *count, gt_err *e);
/* Whether a and b normalise channels 0..count-1 alike (both off, or the same values). */
int gt_norm_equal(const gt_input_norm *a, const gt_input_norm *b, int count);
void gt_norm_format(const gt_input_norm *n, int count, char *buf, size_t size);
int gt_data_channel_stats(const gt_dataset *ds, gt_input_norm *out, gt_err *e);

/* The shape of one sample (channels, height, width) and the class count of the dataset that
 * gt_data_load(dir, ...) would load, read from the train images' IDX header alone (CIFAR's is
 * fixed), so that the model can be built and the devices opened while the data still loads.
 * Returns 0, or -1 where that is not cheap to know (an image folder) or the header is bad:
 * gt_data_load says why. */
int gt_data_probe(const char *dir, int *c, int *h, int *w, int *nclasses);

/* One IDX file (data_idx.c): images (magic 0x00000803, rank 3) or labels (0x00000801, rank 1).
 * The byte count must match the header exactly, and a gzip file's trailer its contents. *crc (if
 * crc is non-NULL) gets the CRC-32 of the pixels or labels. Exposed for tests. */
int gt_idx_load_images(const char *path, uint32_t *n, int *h, int *w, uint8_t **pixels,
                       uint32_t *crc, gt_err *e);
int gt_idx_load_labels(const char *path, uint32_t *n, uint8_t **labels, uint32_t *crc, gt_err *e);
/* An images file's header alone: its image count and size, checked as gt_idx_load_images does. */
int gt_idx_read_image_header(const char *path, uint32_t *n, int *h, int *w, gt_err *e);

/* CIFAR binary files (data_cifar.c): gt_cifar_detect says 10 for a folder with data_batch_1.bin,
 * 100 for one with train.bin, else 0; gt_cifar_load (nclasses 10 or 100) reads both splits and the
 * class names into out, which the caller frees on any outcome. */
int gt_cifar_detect(const char *dir);
int gt_cifar_load(const char *dir, int nclasses, gt_data *out, gt_err *e);

/* Synthetic data (data_synth.c): --data synthetic:CxHxW:K[:N], K classes of C x H x W images,
 * N training samples (default 50000) and 10000 test samples, each a class template plus noise,
 * the same bytes from a fixed seed on every machine. gt_synth_is says whether spec names it;
 * gt_synth_check returns 0 for anything else or a good spec, else -1 with a one-line error;
 * gt_synth_probe gives the shape (-1 if spec is not a good one); gt_synth_load fills out's
 * splits and numbered class names. */
#define GT_SYNTH_PREFIX "synthetic:"
int gt_synth_is(const char *spec);
int gt_synth_check(const char *spec, gt_err *e);
int gt_synth_probe(const char *spec, int *c, int *h, int *w, int *nclasses);
int gt_synth_load(const char *spec, gt_data *out, gt_err *e);

/* Image-folder dataset ROOT/<split>/<class>/<file>, up to GT_MAX_CLASSES class folders; every
 * image must share one size and channel count (1 or 3; grey-with-alpha and RGBA are reduced to 1
 * and 3). *class_names gets the *nclasses folder names, gt_alloc'd (the caller frees them; NULL
 * on failure). */
int gt_folder_load(const char *root, const char *split, gt_dataset *out,
                   gt_class_name **class_names, int *nclasses, gt_err *e);
/* The same, resized as gt_data_load_sized does (size {0, 0}: not resized). */
int gt_folder_load_sized(const char *root, const char *split, const int *size, gt_dataset *out,
                         gt_class_name **class_names, int *nclasses, gt_err *e);

#ifdef __cplusplus
}
#endif
#endif
