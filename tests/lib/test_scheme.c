/* test_scheme.c - status names, scheme defaults and the name tables (lib/status.c,
 * lib/scheme.c). */
#include "testutil.h"

#include <string.h>

static void test_status_names(void **state)
{
    (void)state;
    assert_string_equal(pa_status_name(PA_STATUS_OK), "OK");
    assert_string_equal(pa_status_name(PA_STATUS_SHAPE_MISMATCH), "SHAPE_MISMATCH");
    assert_string_equal(pa_status_name((pa_status)-999), "UNKNOWN");
    assert_true(strlen(pa_strerror(PA_STATUS_OUT_OF_RANGE)) > 0);
    assert_string_equal(pa_strerror((pa_status)-999), "unknown status");
}

static void test_scheme_defaults(void **state)
{
    (void)state;
    pa_scheme s;
    pa_scheme_init(&s, PA_SCHEME_ROPE);
    assert_int_equal(s.type, PA_SCHEME_ROPE);
    assert_true(s.rope.base == 10000.0);
    assert_int_equal(s.rope.layout, PA_ROPE_LAYOUT_NEOX);
    assert_int_equal(s.rope.scaling, PA_ROPE_SCALING_NONE);
    assert_true(s.rope.beta_fast == 32.0 && s.rope.beta_slow == 1.0 && s.rope.truncate);
    assert_true(s.rope.low_freq_factor == 1.0 && s.rope.high_freq_factor == 4.0);
    assert_int_equal(s.t5.num_buckets, 32);
    assert_int_equal(s.t5.max_distance, 128);
    assert_true(s.t5.bidirectional);
    assert_true(s.alibi.max_bias == 8.0);
    assert_true(s.sinusoidal.base == 10000.0);
    assert_int_equal(s.learned.offset, 0);
}

static void test_name_round_trips(void **state)
{
    (void)state;
    for (int t = 0; t < PA_SCHEME_COUNT; t++) {
        pa_scheme_type back;
        const char *name = pa_scheme_type_name((pa_scheme_type)t);
        assert_non_null(name);
        assert_true(pa_scheme_type_from_name(name, &back));
        assert_int_equal(back, t);
    }
    for (int t = 0; t < PA_ROPE_SCALING_COUNT; t++) {
        pa_rope_scaling back;
        assert_true(pa_rope_scaling_from_name(pa_rope_scaling_name((pa_rope_scaling)t), &back));
        assert_int_equal(back, t);
    }
    pa_scheme_type st;
    pa_rope_layout rl;
    pa_sinusoidal_layout sl;
    pa_rope_scaling rs;
    assert_false(pa_scheme_type_from_name("nope_v2", &st));
    assert_false(pa_scheme_type_from_name(NULL, &st));
    assert_null(pa_scheme_type_name(PA_SCHEME_COUNT));
    assert_true(pa_rope_layout_from_name("gptj", &rl) && rl == PA_ROPE_LAYOUT_GPTJ);
    assert_false(pa_rope_layout_from_name("GPTJ", &rl));
    assert_true(pa_sinusoidal_layout_from_name("concat", &sl) && sl == PA_SINUSOIDAL_LAYOUT_CONCAT);
    assert_false(pa_rope_scaling_from_name("su", &rs));
}

static void test_position_sites(void **state)
{
    (void)state;
    assert_int_equal(pa_scheme_position_site(PA_SCHEME_NONE), PA_POSITION_SITE_NONE);
    assert_int_equal(pa_scheme_position_site(PA_SCHEME_SINUSOIDAL), PA_POSITION_SITE_INPUT);
    assert_int_equal(pa_scheme_position_site(PA_SCHEME_LEARNED), PA_POSITION_SITE_INPUT);
    assert_int_equal(pa_scheme_position_site(PA_SCHEME_ROPE), PA_POSITION_SITE_QK_ROTATION);
    assert_int_equal(pa_scheme_position_site(PA_SCHEME_ALIBI), PA_POSITION_SITE_LOGITS);
    assert_int_equal(pa_scheme_position_site(PA_SCHEME_T5), PA_POSITION_SITE_LOGITS);
    assert_int_equal(pa_scheme_position_site(PA_SCHEME_SHAW), PA_POSITION_SITE_LOGITS_VALUES);
    assert_int_equal(pa_scheme_position_site(PA_SCHEME_FIRE), PA_POSITION_SITE_LOGITS);
    assert_string_equal(pa_position_site_name(PA_POSITION_SITE_QK_ROTATION), "qk_rotation");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_names),
        cmocka_unit_test(test_scheme_defaults),
        cmocka_unit_test(test_name_round_trips),
        cmocka_unit_test(test_position_sites),
    };
    return cmocka_run_group_tests_name("scheme", tests, NULL, NULL);
}
