/* similarity.c - similarity analysis of absolute position encodings.
 *
 * sim = P P^T for the sinusoidal or learned encodings P of some positions, and
 * for sinusoidal encodings the residual of the "shift is a fixed rotation"
 * property: PE(p + shift) = M(shift) PE(p), Vaswani et al. 2017 section 3.5.
 *
 * M(shift) rotates each (sin, cos) pair of frequency w_k by the angle
 * shift * w_k: columns (2k, 2k+1) in the interleaved layout, (k, k + d/2) in
 * the concat layout. Odd dims leave one unpaired column. In the concat layout
 * it is the zero pad, which M maps to itself (it contributes 0). In the
 * interleaved layout it is a lone sine whose shifted value needs the missing
 * cosine, so no fixed linear map reaches it; it is excluded from the residual.
 * The residual compares float encodings in double, so it measures float
 * rounding: about 1e-7 for any positions and shift.
 *
 * Learned encodings: dim must equal the table's cols; the residual has no
 * meaning there and *shift_residual is set to NAN. Every p + shift must fit an
 * int32 when the residual is requested (else OUT_OF_RANGE "shift"). With no
 * positions the residual is 0 (a max over nothing).
 */
#include "internal.h"
#include "softmax.h"

#include <cblas.h>
#include <math.h>

typedef struct sim_blocks {
    float *p;        /* [n, dim] encodings */
    float *row;      /* [dim] encoding of one shifted position */
    double *rot_cos; /* [dim/2] cos(shift * w_k) */
    double *rot_sin; /* [dim/2] sin(shift * w_k) */
} sim_blocks;

static void layout(pa__ws *w, int32_t n, int32_t dim, sim_blocks *b)
{
    size_t pn;
    if (!pa__mul_size((size_t)n, (size_t)dim, &pn)) {
        w->overflow = true;
        return;
    }
    b->p = pa__ws_take(w, pn, sizeof(float));
    b->row = pa__ws_take(w, (size_t)dim, sizeof(float));
    b->rot_cos = pa__ws_take(w, (size_t)(dim / 2), sizeof(double));
    b->rot_sin = pa__ws_take(w, (size_t)(dim / 2), sizeof(double));
}

size_t pa_similarity_workspace_size(int32_t n, int32_t dim)
{
    pa__ws w;
    sim_blocks b;
    if (n < 0 || dim < 1)
        return 0;
    pa__ws_init(&w, NULL, 0);
    layout(&w, n, dim, &b);
    return pa__ws_size(&w);
}

/* The pairs M rotates: column *a holds sin(p w_k), column *b cos(p w_k). */
static void pair_cols(pa_sinusoidal_layout layout, int32_t dim, int32_t k, int32_t *a, int32_t *b)
{
    if (layout == PA_SINUSOIDAL_LAYOUT_CONCAT) {
        *a = k;
        *b = k + dim / 2;
    } else {
        *a = 2 * k;
        *b = 2 * k + 1;
    }
}

/* w_k of pair k, the same formula lib/sinusoidal.c encodes with. */
static double pair_freq(const pa_sinusoidal *s, int32_t dim, int32_t k)
{
    if (s->layout == PA_SINUSOIDAL_LAYOUT_CONCAT) {
        double inc = log(s->base) / (double)pa__max_i32(dim / 2 - 1, 1);
        return exp(-(double)k * inc);
    }
    return 1.0 / pow(s->base, (2.0 * (double)k) / (double)dim);
}

/* max |PE(p + shift) - M(shift) PE(p)| over positions and paired columns.
 * Positions + shift were checked to fit int32. */
static double shift_residual_of(const pa_sinusoidal *s, const int32_t *positions, int32_t n,
                                int32_t dim, int32_t shift, const sim_blocks *b)
{
    int32_t np = dim / 2;
    double worst = 0.0;

    for (int32_t k = 0; k < np; k++) {
        double angle = (double)shift * pair_freq(s, dim, k);
        b->rot_cos[k] = cos(angle);
        b->rot_sin[k] = sin(angle);
    }
    for (int32_t i = 0; i < n; i++) {
        int32_t shifted = (int32_t)((int64_t)positions[i] + shift);
        const float *pe = b->p + (size_t)i * (size_t)dim;
        pa_status st = pa_sinusoidal_encode(s, &shifted, 1, dim, b->row, NULL);
        (void)st; /* validated by the caller: cannot fail */
        for (int32_t k = 0; k < np; k++) {
            int32_t ca, cb;
            pair_cols(s->layout, dim, k, &ca, &cb);
            double sv = pe[ca], cv = pe[cb];
            double want_s = sv * b->rot_cos[k] + cv * b->rot_sin[k];
            double want_c = cv * b->rot_cos[k] - sv * b->rot_sin[k];
            double e = fmax(fabs((double)b->row[ca] - want_s), fabs((double)b->row[cb] - want_c));
            if (e > worst)
                worst = e;
        }
    }
    return worst;
}

pa_status pa_analyze_similarity(const pa_scheme *s, const int32_t *positions, int32_t n,
                                int32_t dim, int32_t shift, void *ws, size_t ws_size, float *sim,
                                double *shift_residual, pa_error *err)
{
    pa_status st;

    if (s == NULL)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "scheme", "scheme is NULL");
    if (s->type != PA_SCHEME_SINUSOIDAL && s->type != PA_SCHEME_LEARNED) {
        const char *name = pa_scheme_type_name(s->type);
        return pa__fail(err, PA_STATUS_UNSUPPORTED, "scheme.type",
                        "similarity needs an absolute scheme (sinusoidal or learned), not %s",
                        name != NULL ? name : "an unknown scheme type");
    }
    if (dim < 1)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "dim", "dim=%d must be at least 1",
                        (int)dim);
    if (n < 0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "length", "length=%d must not be negative",
                        (int)n);
    if (positions == NULL && n > 0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "positions",
                        "positions is NULL but length=%d", (int)n);
    if (sim == NULL && n > 0)
        return pa__fail(err, PA_STATUS_INVALID_ARGUMENT, "sim", "sim is NULL but length=%d",
                        (int)n);

    bool sinusoidal = s->type == PA_SCHEME_SINUSOIDAL;
    if (sinusoidal) {
        /* With no positions this only validates the scheme and dim. */
        st = pa_sinusoidal_encode(&s->sinusoidal, NULL, 0, dim, NULL, err);
        if (st != PA_STATUS_OK)
            return st;
        if (shift_residual != NULL) {
            for (int32_t i = 0; i < n; i++) {
                int64_t q = (int64_t)positions[i] + shift;
                if (q < INT32_MIN || q > INT32_MAX)
                    return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "shift",
                                    "positions[%d]=%d + shift=%d overflows int32", (int)i,
                                    (int)positions[i], (int)shift);
            }
        }
    } else {
        st = pa__learned_check(&s->learned, dim, positions, n, "positions", err);
        if (st != PA_STATUS_OK)
            return st;
    }

    size_t need = pa_similarity_workspace_size(n, dim);
    if (need == 0)
        return pa__fail(err, PA_STATUS_TOO_LARGE, "dim",
                        "the workspace for length=%d and dim=%d overflows size_t", (int)n,
                        (int)dim);
    if (ws == NULL || ws_size < need)
        return pa__fail(err, PA_STATUS_WORKSPACE_TOO_SMALL, "workspace",
                        "workspace of %zu bytes is smaller than the %zu bytes "
                        "pa_similarity_workspace_size(%d, %d) reports",
                        ws == NULL ? (size_t)0 : ws_size, need, (int)n, (int)dim);

    pa__ws w;
    sim_blocks b;
    pa__ws_init_aligned(&w, ws, ws_size);
    layout(&w, n, dim, &b);

    if (sinusoidal)
        st = pa_sinusoidal_encode(&s->sinusoidal, positions, n, dim, b.p, err);
    else
        st = pa_learned_encode(&s->learned, positions, n, b.p, err);
    if (st != PA_STATUS_OK)
        return st; /* unreachable: everything was validated above */

    double residual = NAN;
    if (sinusoidal && shift_residual != NULL)
        residual = shift_residual_of(&s->sinusoidal, positions, n, dim, shift, &b);

    if (n > 0) {
        /* ssyrk fills the upper triangle; mirroring makes sim exactly symmetric. */
        cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, n, dim, 1.0f, b.p, dim, 0.0f, sim, n);
        for (int32_t i = 1; i < n; i++)
            for (int32_t j = 0; j < i; j++)
                sim[(size_t)i * (size_t)n + (size_t)j] = sim[(size_t)j * (size_t)n + (size_t)i];
        /* Sinusoidal rows are bounded (|sim| <= dim); a learned table's
         * finite rows can still have a dot product past float32. */
        if (!pa__row_finite(sim, (size_t)n * (size_t)n))
            return pa__fail(err, PA_STATUS_OUT_OF_RANGE, "similarity",
                            "the similarity P P^T overflows float32 (the encodings' dot "
                            "products are beyond 3.4e38): scale the table down");
    }
    if (shift_residual != NULL)
        *shift_residual = residual;
    return PA_STATUS_OK;
}
