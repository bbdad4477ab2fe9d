-- wrk-post.lua - wrk sends one fixed POST /v1/attention: the body in the
-- file named by $WRK_BODY (written by posattn-load --dump-body).
local f = assert(io.open(assert(os.getenv("WRK_BODY"), "WRK_BODY is not set"), "rb"))
wrk.method = "POST"
wrk.path = "/v1/attention"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
