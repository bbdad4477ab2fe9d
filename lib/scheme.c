/* scheme.c - scheme descriptors: defaults and the names the API uses.
 *
 * The names here are the public vocabulary (request fields, metrics labels),
 * so each enum has exactly one name table, used in both directions.
 */
#include "internal.h"

#include <string.h>

void pa_scheme_init(pa_scheme *s, pa_scheme_type type)
{
    memset(s, 0, sizeof *s);
    s->type = type;
    s->sinusoidal.base = 10000.0;
    s->sinusoidal.layout = PA_SINUSOIDAL_LAYOUT_INTERLEAVED;
    s->t5.num_buckets = 32;
    s->t5.max_distance = 128;
    s->t5.bidirectional = true;
    s->rope.base = 10000.0;
    s->rope.layout = PA_ROPE_LAYOUT_NEOX;
    s->rope.scaling = PA_ROPE_SCALING_NONE;
    s->rope.beta_fast = 32.0;
    s->rope.beta_slow = 1.0;
    s->rope.truncate = true;
    s->rope.low_freq_factor = 1.0;
    s->rope.high_freq_factor = 4.0;
    s->rope.partial_rotary_factor = 1.0;
    s->alibi.max_bias = 8.0;
    s->kerple.form = PA_KERPLE_FORM_LOG;
    s->xpos.base = 10000.0;
    s->xpos.scale_base = 512.0;
    s->xpos.layout = PA_ROPE_LAYOUT_GPTJ;
    s->rope2d.variant = PA_ROPE2D_AXIAL;
    s->rope2d.base = 10000.0;
    s->rope2d.layout = PA_ROPE_LAYOUT_GPTJ;
    s->fire.c = 0.1;
    s->fire.L = 512.0;
    s->fire.eps = 1e-6;
}

static const char *const scheme_names[PA_SCHEME_COUNT] = {
    [PA_SCHEME_NONE] = "none",
    [PA_SCHEME_SINUSOIDAL] = "sinusoidal",
    [PA_SCHEME_LEARNED] = "learned",
    [PA_SCHEME_SHAW] = "shaw",
    [PA_SCHEME_T5] = "t5",
    [PA_SCHEME_ROPE] = "rope",
    [PA_SCHEME_ALIBI] = "alibi",
    [PA_SCHEME_KERPLE] = "kerple",
    [PA_SCHEME_SANDWICH] = "sandwich",
    [PA_SCHEME_XPOS] = "xpos",
    [PA_SCHEME_ROPE2D] = "rope2d",
    [PA_SCHEME_FIRE] = "fire",
    [PA_SCHEME_COPE] = "cope",
};

static const char *const rope_scaling_names[PA_ROPE_SCALING_COUNT] = {
    [PA_ROPE_SCALING_NONE] = "none",
    [PA_ROPE_SCALING_LINEAR] = "linear",
    [PA_ROPE_SCALING_NTK] = "ntk",
    [PA_ROPE_SCALING_DYNAMIC] = "dynamic",
    [PA_ROPE_SCALING_YARN] = "yarn",
    [PA_ROPE_SCALING_LLAMA3] = "llama3",
    [PA_ROPE_SCALING_LONGROPE] = "longrope",
    [PA_ROPE_SCALING_PROPORTIONAL] = "proportional",
    [PA_ROPE_SCALING_NTK_ALPHA] = "ntk_alpha",
};

static const char *const rope_layout_names[] = {"neox", "gptj"};
static const char *const sinusoidal_layout_names[] = {"interleaved", "concat"};
static const char *const kerple_form_names[] = {"log", "power"};
static const char *const shaw_direction_names[] = {"key_minus_query", "query_minus_key"};
static const char *const site_names[] = {"none", "input", "qk_rotation", "logits", "logits_values"};

#define COUNT_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *name_of(const char *const *names, int count, int value)
{
    return value >= 0 && value < count ? names[value] : NULL;
}

static bool value_of(const char *const *names, int count, const char *name, int *out)
{
    if (name == NULL)
        return false;
    for (int i = 0; i < count; i++) {
        if (names[i] != NULL && strcmp(names[i], name) == 0) {
            *out = i;
            return true;
        }
    }
    return false;
}

const char *pa_scheme_type_name(pa_scheme_type type)
{
    return name_of(scheme_names, COUNT_OF(scheme_names), (int)type);
}

bool pa_scheme_type_from_name(const char *name, pa_scheme_type *out)
{
    int v;
    if (!value_of(scheme_names, COUNT_OF(scheme_names), name, &v))
        return false;
    *out = (pa_scheme_type)v;
    return true;
}

pa_position_site pa_scheme_position_site(pa_scheme_type type)
{
    switch (type) {
    case PA_SCHEME_SINUSOIDAL:
    case PA_SCHEME_LEARNED:
        return PA_POSITION_SITE_INPUT;
    case PA_SCHEME_ROPE:
    case PA_SCHEME_XPOS:
    case PA_SCHEME_ROPE2D:
        return PA_POSITION_SITE_QK_ROTATION;
    case PA_SCHEME_T5:
    case PA_SCHEME_ALIBI:
    case PA_SCHEME_KERPLE:
    case PA_SCHEME_SANDWICH:
    case PA_SCHEME_FIRE:
    case PA_SCHEME_COPE:
        return PA_POSITION_SITE_LOGITS;
    case PA_SCHEME_SHAW:
        return PA_POSITION_SITE_LOGITS_VALUES;
    case PA_SCHEME_NONE:
    case PA_SCHEME_COUNT:
        break;
    }
    return PA_POSITION_SITE_NONE;
}

const char *pa_position_site_name(pa_position_site site)
{
    return name_of(site_names, COUNT_OF(site_names), (int)site);
}

const char *pa_rope_layout_name(pa_rope_layout layout)
{
    return name_of(rope_layout_names, COUNT_OF(rope_layout_names), (int)layout);
}

bool pa_rope_layout_from_name(const char *name, pa_rope_layout *out)
{
    int v;
    if (!value_of(rope_layout_names, COUNT_OF(rope_layout_names), name, &v))
        return false;
    *out = (pa_rope_layout)v;
    return true;
}

const char *pa_sinusoidal_layout_name(pa_sinusoidal_layout layout)
{
    return name_of(sinusoidal_layout_names, COUNT_OF(sinusoidal_layout_names), (int)layout);
}

bool pa_sinusoidal_layout_from_name(const char *name, pa_sinusoidal_layout *out)
{
    int v;
    if (!value_of(sinusoidal_layout_names, COUNT_OF(sinusoidal_layout_names), name, &v))
        return false;
    *out = (pa_sinusoidal_layout)v;
    return true;
}

const char *pa_rope_scaling_name(pa_rope_scaling scaling)
{
    return name_of(rope_scaling_names, COUNT_OF(rope_scaling_names), (int)scaling);
}

bool pa_rope_scaling_from_name(const char *name, pa_rope_scaling *out)
{
    int v;
    if (!value_of(rope_scaling_names, COUNT_OF(rope_scaling_names), name, &v))
        return false;
    *out = (pa_rope_scaling)v;
    return true;
}

const char *pa_shaw_direction_name(pa_shaw_direction direction)
{
    return name_of(shaw_direction_names, COUNT_OF(shaw_direction_names), (int)direction);
}

bool pa_shaw_direction_from_name(const char *name, pa_shaw_direction *out)
{
    int v;
    if (!value_of(shaw_direction_names, COUNT_OF(shaw_direction_names), name, &v))
        return false;
    *out = (pa_shaw_direction)v;
    return true;
}

const char *pa_kerple_form_name(pa_kerple_form form)
{
    return name_of(kerple_form_names, COUNT_OF(kerple_form_names), (int)form);
}

bool pa_kerple_form_from_name(const char *name, pa_kerple_form *out)
{
    int v;
    if (!value_of(kerple_form_names, COUNT_OF(kerple_form_names), name, &v))
        return false;
    *out = (pa_kerple_form)v;
    return true;
}
