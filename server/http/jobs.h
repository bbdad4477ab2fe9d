/* jobs.h - private to http/: a request's job on the worker pool
 * (http/jobs.c).
 */
#ifndef SRV_HTTP_JOBS_H
#define SRV_HTTP_JOBS_H

#include "http/request.h"

#include <microhttpd.h>

/* The whole body is in: prepares the job (the route's endpoint or
 * protocol), runs its tasks on the pool with the connection suspended (a
 * tiny one on this thread), and answers. */
enum MHD_Result http_start_job(request *q);

#endif
