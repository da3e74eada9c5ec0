/*
 * vision.h: image data for the vision transformer: Fashion-MNIST (Debian's
 * dataset-fashion-mnist, IDX files, gzip) as an image set, standardised
 * batches, and evaluation (accuracy and loss) over a set.
 *
 * An image set keeps the raw bytes ([n, C, S, S] pixels, [n] labels);
 * batches are converted to floats x = (byte / 255 - mean) / std with the
 * model's own statistics (config image_mean, image_std), so training and
 * every later evaluation standardise the same way.
 */
#ifndef AL_VISION_H
#define AL_VISION_H

#include "../model/model.h"

#define AL_FMNIST_DIR "/usr/share/datasets/fashion-mnist"

typedef struct al_image_set {
    int n, C, S;      /* images, channels, side */
    uint8_t *pixels;  /* [n, C, S, S] */
    uint8_t *labels;  /* [n] */
} al_image_set;

/* Reads <dir>/<split>-images-idx3-ubyte[.gz] and <split>-labels-idx1-ubyte[.gz]
 * (split "train" or "t10k"; dir NULL or "" = AL_FMNIST_DIR). Images are IDX
 * [n, S, S] (or [n, C, S, S]), labels [n]. limit > 0 keeps the first `limit`
 * images. One-line errors: missing files, damaged IDX, counts that differ. */
int al_fmnist_load(al_image_set *s, const char *dir, const char *split, int limit, al_err *err);
void al_image_set_free(al_image_set *s);
/* Mean and standard deviation of all pixels, scaled to [0, 1]. */
void al_image_set_stats(const al_image_set *s, double *mean, double *std);
/* Checks that the set's images and labels fit the model (side, channels,
 * labels < num_labels); names the set in the message. */
int al_image_set_check(const al_image_set *s, const al_config *c, const char *what, al_err *err);
/* images[B, C, S, S] = standardised pixels of images idx[0..B); labels[B]. */
void al_image_batch(const al_image_set *s, const int *idx, int B, double mean, double std, float *images, int *labels);

/* Accuracy and mean cross-entropy of the model over the first max_images of
 * the set (0: all), a->B images per forward pass (a from al_vit_acts_create). */
int al_vit_evaluate(const al_model *m, al_acts *a, const al_image_set *s, int max_images, double *loss, double *accuracy,
                    size_t *count, al_err *err);

#endif
