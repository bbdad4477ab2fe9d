/* web.c - see web.h. The generated build/server/embed_web.c holds one array
 * per file of server/web/ and the parallel tables declared below.
 */
#include "http/web.h"

#include <string.h>

extern const char *const srv_web_names[];
extern const unsigned char *const srv_web_data[];
extern const size_t srv_web_lens[];
extern const size_t srv_web_count;

static const struct {
    const char *ext;
    const char *type;
} types[] = {
    {".html", "text/html; charset=utf-8"},
    {".css", "text/css; charset=utf-8"},
    {".js", "text/javascript; charset=utf-8"},
    {".mjs", "text/javascript; charset=utf-8"},
    {".json", "application/json"},
    {".svg", "image/svg+xml"},
    {".png", "image/png"},
    {".txt", "text/plain; charset=utf-8"},
};

static const char *content_type_of(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (dot != NULL)
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
            if (strcmp(dot, types[i].ext) == 0)
                return types[i].type;
    return "application/octet-stream";
}

bool srv_web_find(const char *url_path, srv_web_file *out)
{
    const char *name;
    if (strcmp(url_path, "/") == 0)
        name = "index.html";
    else if (strncmp(url_path, "/web/", 5) == 0)
        name = url_path + 5;
    else
        return false;
    for (size_t i = 0; i < srv_web_count; i++) {
        if (strcmp(name, srv_web_names[i]) == 0) {
            out->name = srv_web_names[i];
            out->data = srv_web_data[i];
            out->len = srv_web_lens[i];
            out->content_type = content_type_of(name);
            return true;
        }
    }
    return false;
}
