/* report_fmt.c - what report.c and report_layers.c both write with: the
 * percentiles every report gives, units, and HTML text.
 */
#include "load.h"

#include <stdio.h>

const double load_pcts[LOAD_N_PCTS] = {50.0, 90.0, 99.0, 99.9};
const char *const load_pct_names[LOAD_N_PCTS] = {"p50", "p90", "p99", "p99_9"};

double load_ms(uint64_t us)
{
    return (double)us / 1000.0;
}

double load_rate(double n, double s)
{
    return s > 0 ? n / s : 0.0;
}

void load_html_escape(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else if (*s == '"')
            fputs("&quot;", f);
        else
            fputc(*s, f);
    }
}
