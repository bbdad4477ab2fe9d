# posattn - positional encodings and attention as a service.
#
#   make run     install what is missing, build, start posattnd on 127.0.0.1:8080
#   make test    install what is missing, build, run every test
#   make bench   build and run the benchmarks (never part of make test)
#   make load    compare schemes under load against a spawned server (posattn-load)
#   make asan / tsan / valgrind / format / check-layering / clean
#   make soak-sessions   a sessions soak under ASan and under TSan (~35 s each)
#
# Flags come from here only. User CFLAGS/LDFLAGS are appended, never replaced.
# BUILD selects the output folder, so parallel builds can use separate ones.

BUILD ?= build
CC ?= cc

# Debian packages this tree needs. `make deps` installs the missing ones.
DEB_PACKAGES := build-essential pkg-config libopenblas-dev libcmocka-dev valgrind \
                clang libclang-rt-14-dev \
                libmicrohttpd-dev libcjson-dev libuv1-dev libcurl4-openssl-dev libgnutls28-dev openssl \
                curl python3 python3-numpy python3-yaml python3-jsonschema python3-pip python3-venv nodejs

# A build on a machine without them stops here, saying what to run, rather
# than at the first missing header. Targets that install them, and those
# that need no compiler, are not held back.
# The server alone (the image's build stage: make BUILD=/build /build/posattnd)
# needs no cmocka or libcurl.
DEPS_PC := libmicrohttpd libcjson libuv gnutls openblas
MAKE_GOALS := $(filter-out deps deps-peers ui-deps run test clean format help,$(or $(MAKECMDGOALS),all))
ifneq ($(filter-out lib $(BUILD)/posattnd $(BUILD)/libposattn.a,$(MAKE_GOALS)),)
DEPS_PC += cmocka libcurl
endif
ifneq ($(MAKE_GOALS),)
MISSING_PC := $(shell for m in $(DEPS_PC); do pkg-config --exists $$m 2>/dev/null || echo $$m; done)
ifneq ($(MISSING_PC),)
$(error the libraries $(MISSING_PC) are not installed: run `make deps` first (it installs the Debian packages; `make run` and `make test` do it themselves))
endif
endif

PKG_CFLAGS := $(shell pkg-config --cflags openblas cmocka 2>/dev/null)
PKG_LIBS_BLAS := $(shell pkg-config --libs openblas 2>/dev/null || echo -lopenblas)
PKG_LIBS_CMOCKA := $(shell pkg-config --libs cmocka 2>/dev/null || echo -lcmocka)
SRV_CFLAGS := $(shell pkg-config --cflags libmicrohttpd libcjson libuv gnutls 2>/dev/null)
SRV_LIBS := $(shell pkg-config --libs libmicrohttpd libcjson libuv gnutls 2>/dev/null || echo -lmicrohttpd -lcjson -luv -lgnutls) -lpthread
CURL_LIBS := $(shell pkg-config --libs libcurl 2>/dev/null || echo -lcurl)

WARN := -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
        -Wformat=2 -Wno-format-nonliteral
OPT ?= -O2 -g
ifeq ($(WERROR),1)
WARN += -Werror
endif

ALL_CFLAGS = -std=c11 -D_POSIX_C_SOURCE=200809L $(OPT) $(WARN) -MMD -MP \
             -Iinclude $(PKG_CFLAGS) $(SAN) $(CFLAGS)
ALL_LDFLAGS = $(SAN) $(LDFLAGS)
LIBS = $(PKG_LIBS_BLAS) -lm

LIB_SRC := $(wildcard lib/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
LIB_A := $(BUILD)/libposattn.a

# server/ in layers, one folder each (docs/architecture.md; make check-layering).
SRV_DIRS := common codec store model api v2 runtime http
SRV_SRC := $(foreach d,$(SRV_DIRS),$(wildcard server/$(d)/*.c))
SRV_OBJ := $(SRV_SRC:%.c=$(BUILD)/%.o) $(BUILD)/server/embed_openapi.o $(BUILD)/server/embed_web.o
POSATTND := $(BUILD)/posattnd

# Unit tests mirror the tree they test (tests/lib/test_rope.c tests
# lib/rope.c; tests/server/codec/test_tensor.c tests server/codec/tensor.c);
# tests/e2e/ holds those that start the real binary. Each is its own binary,
# flat in $(BUILD)/tests whatever its folder, so names are unique.
TEST_SRC := $(wildcard tests/lib/test_*.c tests/server/*/test_*.c tests/e2e/test_*.c)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)
TEST_BIN := $(addprefix $(BUILD)/tests/,$(notdir $(TEST_SRC:.c=)))
ifneq ($(words $(TEST_BIN)),$(words $(sort $(TEST_BIN))))
$(error two test files share a name: $(sort $(notdir $(TEST_SRC))))
endif
TEST_COMMON_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tests/ref_*.c tests/testutil.c tests/e2e_server.c tests/batch_status.c))
# Helpers linked only into the test binaries that use them (see below).
# tests/e2e/e2e_http.c is the end-to-end tests' one HTTP client (libcurl and
# raw sockets); tests/e2e_server.c, in TEST_COMMON_OBJ, starts posattnd.
TEST_HTTP_OBJ := $(BUILD)/tests/e2e/e2e_http.o
TEST_E2E_OBJ := $(TEST_HTTP_OBJ) $(BUILD)/tests/e2e/e2e_cases.o
TEST_API_OBJ := $(BUILD)/tests/api_harness.o
TEST_BATCH_OBJ := $(BUILD)/tests/server/api/batch_fixture.o
TEST_SESSION_OBJ := $(BUILD)/tests/server/api/session_fixture.o
TEST_STORE_OBJ := $(BUILD)/tests/server/store/tensor_bytes.o
TEST_INFER_OBJ := $(BUILD)/tests/server/v2/infer_fixture.o
TEST_LIFT_OBJ := $(BUILD)/tests/server/codec/lift_fixture.o
TEST_BADINPUT_OBJ := $(TEST_HTTP_OBJ) $(BUILD)/tests/e2e/badinput_table.o
TEST_ATT_OBJ := $(BUILD)/tests/lib/attention_fixture.o

LOAD_SRC := $(wildcard tools/load/*.c)
LOAD_OBJ := $(LOAD_SRC:%.c=$(BUILD)/%.o)
LOAD_BIN := $(BUILD)/posattn-load
LOAD_CFLAGS := $(shell pkg-config --cflags libcurl libcjson 2>/dev/null)
LOAD_LIBS = $(CURL_LIBS) $(shell pkg-config --libs libcjson 2>/dev/null || echo -lcjson) -lpthread -lm

BENCH_SRC := $(wildcard bench/bench_*.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
BARE_MHD := $(BUILD)/bench/bare_mhd

.PHONY: build machine-report readme-test ui-deps ui-test ui-cors bench-service e2e-tensors e2e-models e2e-tls fuzz fuzz-smoke load load-test load-crosscheck slowloris overload soak soak-sessions soak-sessions-asan soak-sessions-tsan all deps deps-peers bench-peers check-fmt-float check-fmt-float-diff lib run test unit e2e e2e-clients check-layering bench bench-smoke asan tsan valgrind format clean

all: lib $(POSATTND) $(LOAD_BIN) $(BENCH_BIN)

lib: $(LIB_A)

# apt_install PACKAGES: installs those of the Debian packages that are
# missing (apt-get update only when something must be installed). Needs root,
# as on the project's machines, or sudo.
apt_install = missing=""; for p in $(1); do \
	    dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	    echo "installing$$missing"; \
	    SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	    $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -q && \
	    $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends $$missing; \
	fi

deps:
	@$(call apt_install,$(DEB_PACKAGES))

# Peers for bench/peers.py only (python3-torch pulls ~175 packages): not
# needed to build, test or serve.
# ONNX Runtime comes from npm (bench/ort/package.json, locked), installed
# with --ignore-scripts: its install script only fetches a GPU build, the
# CPU binary is in the package. python3-onnx writes its models.
PEER_PACKAGES := python3-numpy python3-torch python3-onnx nodejs
deps-peers:
	@$(call apt_install,$(PEER_PACKAGES))
	@[ -d bench/ort/node_modules/onnxruntime-node ] || \
	    (cd bench/ort && npm ci --ignore-scripts --no-audit --no-fund)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

# Tests may reach inside lib/ (its private headers); nothing else may.
# The shared helpers (testutil.h, ref_*.h) are in tests/ itself.
$(BUILD)/tests/%.o: tests/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(SRV_CFLAGS) -Ilib -Iserver -Itests -c $< -o $@

# The softmax row kernels are written to vectorize; -O3 lets GCC do it.
$(BUILD)/lib/softmax.o: OPT += -O3 -fno-trapping-math
$(BUILD)/lib/bias_row.o: OPT += -O3 -fno-trapping-math
$(BUILD)/lib/rope.o: OPT += -O3
# The decode kernel's register tiles (lib/decode_rows.c) need the
# loops over their rows unrolled, as -O3 does.
$(BUILD)/lib/attention_decode.o: OPT += -O3
$(BUILD)/lib/decode_rows.o: OPT += -O3

# The server sees the core through include/ only, plus its own libraries;
# its files name each other by folder ("codec/tensor.h").
$(BUILD)/server/%.o: server/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(SRV_CFLAGS) -Iserver -c $< -o $@

# Files served by posattnd are compiled in, so the binary needs no data folder.
# embed NAME FILE: a C array NAME with FILE's bytes and NAME_len.
embed = { echo '\#include <stddef.h>'; echo 'const unsigned char $(1)[] = {'; \
          od -An -v -tx1 $(2) | sed -e 's/\([0-9a-f][0-9a-f]\)/0x\1,/g'; echo '0x00};'; \
          echo 'const size_t $(1)_len = sizeof $(1) - 1;'; } > $@

$(BUILD)/server/embed_openapi.c: openapi.yaml
	@mkdir -p $(dir $@)
	@$(call embed,srv_openapi_yaml,$<)

# The web page (server/http/web/, served at GET / and GET /web/NAME): one array
# per file and the tables server/http/web.c looks names up in. Names are limited
# to [A-Za-z0-9._-] so they are safe in C strings and URLs.
WEB_FILES := $(sort $(wildcard server/http/web/*))
$(BUILD)/server/embed_web.c: $(WEB_FILES) server/http/web/.
	@mkdir -p $(dir $@)
	@set -e; { echo '#include <stddef.h>'; i=0; for f in $(WEB_FILES); do \
	    n=$${f#server/http/web/}; case "$$n" in *[!A-Za-z0-9._-]*) echo "web: bad file name $$f" >&2; exit 1;; esac; \
	    echo "static const unsigned char f$$i[] = {"; \
	    od -An -v -tx1 $$f | sed -e 's/\([0-9a-f][0-9a-f]\)/0x\1,/g'; echo '0x00};'; i=$$((i+1)); done; \
	  echo 'const char *const srv_web_names[] = {'; for f in $(WEB_FILES); do echo "\"$${f#server/http/web/}\","; done; echo '0};'; \
	  echo 'const unsigned char *const srv_web_data[] = {'; i=0; for f in $(WEB_FILES); do echo "f$$i,"; i=$$((i+1)); done; echo '0};'; \
	  echo 'const size_t srv_web_lens[] = {'; i=0; for f in $(WEB_FILES); do echo "sizeof f$$i - 1,"; i=$$((i+1)); done; echo '0};'; \
	  echo "const size_t srv_web_count = $(words $(WEB_FILES));"; } > $@.tmp; mv $@.tmp $@

$(BUILD)/server/embed_%.o: $(BUILD)/server/embed_%.c
	$(CC) -std=c11 -O1 -c $< -o $@

$(POSATTND): $(BUILD)/server/main.o $(SRV_OBJ) $(LIB_A)
	$(CC) $(ALL_LDFLAGS) $^ -o $@ $(SRV_LIBS) $(LIBS)

$(LIB_A): $(LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

# A test binary: its own object (one rule each, below), the helpers it needs,
# the server objects and the core library after every object.
$(foreach t,$(TEST_SRC),$(eval $(BUILD)/tests/$(notdir $(t:.c=)): $(BUILD)/$(t:.c=.o)))
$(TEST_BIN): $(TEST_COMMON_OBJ) $(SRV_OBJ) $(LIB_A)
	$(CC) $(ALL_LDFLAGS) $(filter %.o,$^) $(filter %.a,$^) -o $@ $(PKG_LIBS_CMOCKA) $(SRV_LIBS) \
	    $(CURL_LIBS) $(LIBS)
$(BUILD)/tests/test_e2e_http $(BUILD)/tests/test_e2e_limits $(BUILD)/tests/test_e2e_drain \
    $(BUILD)/tests/test_e2e_framing: $(TEST_E2E_OBJ)
$(BUILD)/tests/test_api_attention $(BUILD)/tests/test_api_errors $(BUILD)/tests/test_encode \
    $(BUILD)/tests/test_analyze $(BUILD)/tests/test_extrapolation $(BUILD)/tests/test_infer \
    $(BUILD)/tests/test_infer_model $(BUILD)/tests/test_infer_parameters \
    $(BUILD)/tests/test_infer_sequence \
    $(BUILD)/tests/test_protocol $(BUILD)/tests/test_item_options $(BUILD)/tests/test_batch \
    $(BUILD)/tests/test_batch_positions $(BUILD)/tests/test_json $(BUILD)/tests/test_json_arrays $(BUILD)/tests/test_sizes \
    $(BUILD)/tests/test_api_scheme $(BUILD)/tests/test_item $(BUILD)/tests/test_model_item \
    $(BUILD)/tests/test_item_qscale $(BUILD)/tests/test_bias_schemes $(BUILD)/tests/test_api_xpos \
    $(BUILD)/tests/test_api_rope2d $(BUILD)/tests/test_api_fire $(BUILD)/tests/test_api_cope \
    $(BUILD)/tests/test_api_packed $(BUILD)/tests/test_api_diff $(BUILD)/tests/test_api_mla \
    $(BUILD)/tests/test_sessions $(BUILD)/tests/test_session_create $(BUILD)/tests/test_item_session \
    $(BUILD)/tests/test_session_takeover $(BUILD)/tests/test_roofline \
    $(BUILD)/tests/test_named16: $(TEST_API_OBJ)
$(BUILD)/tests/test_batch $(BUILD)/tests/test_batch_positions $(BUILD)/tests/test_item_qscale: $(TEST_BATCH_OBJ)
$(BUILD)/tests/test_sessions $(BUILD)/tests/test_session_create \
    $(BUILD)/tests/test_session_takeover: $(TEST_SESSION_OBJ)
# It makes a replica stop between an item's two looks for its session.
$(BUILD)/tests/test_session_takeover: ALL_LDFLAGS += -Wl,--wrap=srv_kv_adopt
$(BUILD)/tests/test_tensor_file $(BUILD)/tests/test_tensor_store \
    $(BUILD)/tests/test_tensors $(BUILD)/tests/test_named16: $(TEST_STORE_OBJ)
$(BUILD)/tests/test_infer $(BUILD)/tests/test_infer_parameters: $(TEST_INFER_OBJ)
$(BUILD)/tests/test_json_lift $(BUILD)/tests/test_json_numbers: $(TEST_LIFT_OBJ)
$(BUILD)/tests/test_badinput: $(TEST_BADINPUT_OBJ)
$(BUILD)/tests/test_attention $(BUILD)/tests/test_attention_mask $(BUILD)/tests/test_attention_options \
    $(BUILD)/tests/test_attention_decode $(BUILD)/tests/test_attention_qscale $(BUILD)/tests/test_shaw \
    $(BUILD)/tests/test_rope_gemma4_hunyuan $(BUILD)/tests/test_kerple $(BUILD)/tests/test_sandwich \
    $(BUILD)/tests/test_xpos $(BUILD)/tests/test_rope2d $(BUILD)/tests/test_fire $(BUILD)/tests/test_cope \
    $(BUILD)/tests/test_packed $(BUILD)/tests/test_diff $(BUILD)/tests/test_mla \
    $(BUILD)/tests/test_paged $(BUILD)/tests/test_kv16 $(BUILD)/tests/test_bf16: $(TEST_ATT_OBJ)

# bench_attention measures lib/tile.c's kernels alone too (a second
# ceiling), and bench_decode lib/decode_rows.c's (the arithmetic alone).
$(BUILD)/bench/bench_attention.o $(BUILD)/bench/bench_decode.o \
    $(BUILD)/bench/attention_options.o: $(BUILD)/bench/%.o: bench/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Ilib -c $< -o $@
# bench_attention's options section and the harness it shares with it.
BENCH_ATT_OBJ := $(BUILD)/bench/attention_harness.o $(BUILD)/bench/attention_options.o
$(BUILD)/bench/bench_attention: $(BENCH_ATT_OBJ)
$(BUILD)/bench/bench_decode: $(BUILD)/bench/attention_harness.o

# Every benchmark measures the machine's ceilings in its own run (bench/ceiling.c).
$(BUILD)/bench/%: $(BUILD)/bench/%.o $(BUILD)/bench/ceiling.o $(LIB_A)
	$(CC) $(ALL_LDFLAGS) $^ -o $@ $(LIBS) -lpthread

# make run: install, build (the server and posattn-load), serve on
# 127.0.0.1:8080. POSATTN_HOST and POSATTN_PORT (or PORT=) choose another
# address; more flags with ARGS="--workers 4".
RUN_HOST = $(or $(POSATTN_HOST),127.0.0.1)
RUN_PORT = $(or $(PORT),$(POSATTN_PORT),8080)
run: deps
	@echo "make run: building posattnd and posattn-load in $(BUILD)/ (a minute or two on a fresh clone)"
	@$(MAKE) -s --no-print-directory $(POSATTND) $(LOAD_BIN)
	@echo "make run: starting posattnd on http://$(RUN_HOST):$(RUN_PORT)/ (the web page; Ctrl-C stops it)"
	exec $(POSATTND) --host $(RUN_HOST) --port $(RUN_PORT) $(ARGS)

# The web page in headless Chromium (tests/ui/ui-test.mjs, playwright-core):
# screenshots in $(BUILD)/ui. Chromium is only needed here, not by make test.
UI_PACKAGES := chromium nodejs openssl
ui-deps:
	@$(call apt_install,$(UI_PACKAGES))
	@[ -d tests/ui/node_modules/playwright-core ] || (cd tests/ui && npm ci --no-audit --no-fund)

ui-test: ui-deps $(POSATTND) $(LOAD_BIN)
	@POSATTND=$(POSATTND) UI_OUT=$(BUILD)/ui node tests/ui/ui-test.mjs

# ui-test's CORS check alone, in make test (~5 s): a page served from another
# 127.0.0.1 port calls posattnd --cors-origin with the JS client in Chromium,
# and is refused by a posattnd without the flag (tests/ui/cors.mjs).
ui-cors: ui-deps $(POSATTND)
	@POSATTND=$(POSATTND) node tests/ui/cors.mjs

# make test: the README's command and CI's. Deps first, then a warning-free
# build (-Werror), and every suite: the layering check, a bench smoke run,
# the end-to-end clients, the unit tests, the slow-client and overload runs.
# tests/run-suites.py prints one line per suite and an overall count; each
# suite's whole output is in $(BUILD)/test-logs/SUITE.log (V=1 shows it too).
# After the build, two suites run at a time (TEST_JOBS), but for those with
# timing checks (TEST_ALONE), which run by themselves; V=1 runs one at a time.
TEST_SUITES := build check-layering bench-smoke e2e-clients client-python client-js openapi-test \
               monitor-test e2e-tensors e2e-models e2e-tls readme-test load-test unit slowloris overload \
               ui-cors
TEST_JOBS ?= 2
TEST_ALONE := unit,slowloris,overload
test: deps
	@/usr/bin/python3 tests/run-suites.py --logs $(BUILD)/test-logs $(if $(V),--verbose) \
	    --jobs $(TEST_JOBS) --alone $(TEST_ALONE) -- \
	    $(MAKE) --no-print-directory WERROR=1 BUILD=$(BUILD) :: $(TEST_SUITES)

# README's quickstart run as written (make run on a free port through
# POSATTN_PORT, then its curl and Python blocks against it), every
# relative link of README.md, docs/ and the clients' pages resolving, and
# docs/extrapolation.md's script on short lengths (so that it keeps working),
# and docs/library.md's program built with its link line and run.
readme-test: $(POSATTND) $(LOAD_BIN) $(LIB_A)
	@/usr/bin/python3 tests/readme/links.py
	@/usr/bin/python3 tests/readme/library.py --build $(BUILD)
	@/usr/bin/python3 tests/readme/quickstart.py --build $(BUILD)
	@/usr/bin/python3 tools/extrapolation_compare.py --quick --posattnd $(POSATTND) \
	    --md $(BUILD)/extrapolation.md --svg $(BUILD)/extrapolation.svg >/dev/null && \
	    echo "extrapolation_compare.py --quick: ok (docs/extrapolation.md's script)"

# Everything make test needs, built (the first suite, so that a compiler
# error is reported as the build's).
build: $(POSATTND) $(LOAD_BIN) $(TEST_BIN) $(BENCH_BIN) $(BARE_MHD)

# The library's tests run twice: with the kernels this CPU picks (AVX-512
# where it has it) and with the portable ones (POSATTN_KERNEL=portable);
# on a CPU with AVX-512, a third time with the AVX2 ones
# (POSATTN_KERNEL=avx2), which would otherwise run only on other machines;
# and once more with tiles of 256 keys (POSATTN_TILE_KEYS=256, against
# 1024), where their sequences of a few hundred keys cross several tiles.
LIB_TEST_BIN := $(filter $(addprefix $(BUILD)/tests/,$(notdir $(basename $(wildcard tests/lib/test_*.c)))),$(TEST_BIN))
unit: $(TEST_BIN) $(POSATTND)
	@tests/run-unit.sh $(TEST_BIN)
	@for k in portable $$(grep -qw avx512f /proc/cpuinfo && grep -qw fma /proc/cpuinfo && echo avx2); do \
	    out=$$(POSATTN_KERNEL=$$k tests/run-unit.sh $(LIB_TEST_BIN) 2>&1); rc=$$?; \
	    if [ $$rc -ne 0 ]; then echo "$$out"; fi; \
	    echo "$$out" | tail -n 1 | sed "s/^unit:/unit, library with POSATTN_KERNEL=$$k:/"; \
	    [ $$rc -eq 0 ] || exit $$rc; \
	done
	@out=$$(POSATTN_TILE_KEYS=256 tests/run-unit.sh $(LIB_TEST_BIN) 2>&1); rc=$$?; \
	if [ $$rc -ne 0 ]; then echo "$$out"; fi; \
	echo "$$out" | tail -n 1 | sed "s/^unit:/unit, library with tiles of 256 keys (POSATTN_TILE_KEYS=256):/"; \
	exit $$rc

# End-to-end clients against the real binary (curl, Python stdlib, Node fetch);
# the C end-to-end tests (tests/e2e/test_*.c) run with the unit tests.
E2E_CLIENTS := tests/e2e/curl.sh "/usr/bin/python3 tests/e2e/client.py -q" \
               "node --test tests/e2e/client.mjs" "/usr/bin/python3 tests/e2e/v2.py -q" \
               "/usr/bin/python3 tests/e2e/v2_readme.py -q" \
               "/usr/bin/python3 tests/e2e/v2_models.py -q" \
               "/usr/bin/python3 tests/e2e/options.py -q" \
               "/usr/bin/python3 tests/e2e/roofline.py -q" \
               "/usr/bin/python3 tests/e2e/bounds.py -q" \
               "/usr/bin/python3 tests/e2e/key_rotation.py -q" \
               "/usr/bin/python3 tests/e2e/sessions.py -q" \
               "/usr/bin/python3 tests/e2e/session_attention.py -q" \
               "/usr/bin/python3 tests/e2e/session_models.py -q" \
               "/usr/bin/python3 tests/e2e/v2_sequences.py -q" \
               "/usr/bin/python3 tests/e2e/restarts.py -q" \
               "/usr/bin/python3 tests/e2e/shared_cache.py -q" \
               "/usr/bin/python3 tests/e2e/cors.py -q" \
               "/usr/bin/python3 tests/e2e/defaults.py -q" \
               "/usr/bin/python3 tests/e2e/config_keys.py -q"
e2e-clients: $(POSATTND)
	@for c in $(E2E_CLIENTS); do POSATTND=$(POSATTND) tests/e2e/harness.sh $$c || exit 1; done; \
	echo "e2e-clients: ok"

# Slow clients against a spawned server (~6 s): headers and bodies trickled a
# byte a second and silent connections are all cut at the 2 s timeout while a
# normal client is served; prints the figures.
slowloris: $(POSATTND)
	@/usr/bin/python3 tests/slowloris.py --posattnd $(POSATTND) --timeout 2 --seconds 6 \
	    --slow 100 --idle 10

# A burst at 8x capacity against a spawned server with a small queue and a
# memory cap (~2 s): 503 + Retry-After for the excess, every accepted answer
# checked against NumPy, peak RSS under the bound, nothing left in flight.
overload: $(POSATTND)
	@/usr/bin/python3 tests/overload.py --posattnd $(POSATTND)

# A steady 40 requests/s for SOAK_SECONDS against a spawned server, RSS
# sampled: fails on any error or on growth past max(8 MB, 10 %) after the
# warm-up. Not in make test (it takes minutes); .ci/run runs 60 s.
SOAK_SECONDS ?= 180
soak: $(POSATTND)
	@/usr/bin/python3 tests/soak.py --posattnd $(POSATTND) --seconds $(SOAK_SECONDS)

e2e: $(POSATTND) $(BUILD)/tests/test_e2e_http $(BUILD)/tests/test_e2e_limits $(BUILD)/tests/test_e2e_drain
	@$(BUILD)/tests/test_e2e_http
	@$(BUILD)/tests/test_e2e_limits
	@$(BUILD)/tests/test_e2e_drain
	@$(MAKE) --no-print-directory e2e-clients

# Named tensors (--tensor): fixtures written by tests/fixtures/make_tensors.py
# (NumPy) into the build folder, then requests by {"ref"} against inline.
e2e-tensors: $(POSATTND)
	@/usr/bin/python3 tests/e2e/tensors.py -q --bin $(POSATTND) --dir $(BUILD)/fixtures/tensors

# Models (--model): every model type's fixture config against options written
# by hand and a float64 reference of Hugging Face's attention.
e2e-models: $(POSATTND)
	@/usr/bin/python3 tests/e2e/models.py -q --bin $(POSATTND)

# HTTPS: a private CA and server certificate made with openssl at test time;
# then docs/running.md's HTTPS recipe as written (openssl, posattnd, curl,
# both clients, posattn-load).
e2e-tls: $(POSATTND) $(LOAD_BIN)
	@/usr/bin/python3 tests/e2e/tls.py -q --bin $(POSATTND)
	@/usr/bin/python3 tests/e2e/https_recipe.py --bin $(POSATTND)

# The arrows of the tree (tools/check_layering.py; docs/architecture.md):
# lib/ and include/ use libc, libm and CBLAS only (server -> include <- lib),
# server/'s folders include only the folders below them, and no server files
# use each other's symbols in a circle (nm over the objects). The self-test
# plants upward includes in a copy of the tree and wants each one caught.
check-layering: $(SRV_OBJ) $(BUILD)/server/main.o
	@/usr/bin/python3 tools/check_layering.py --objects $(BUILD)/server
	@/usr/bin/python3 tools/check_layering.py --self-test

# What the CPU at hand is and runs, for the end of .ci/run's log (figures,
# not tests: nothing here fails): its model and the vector extensions the
# kernels dispatch on, the kernels the library picked, and the
# compute_dtype bf16 section of bench_attention, whose targets only a CPU
# with AVX-512 BF16 can show, and decode over float32, bf16 and f16 caches
# against the read bandwidth (issue #34). About 12 s.
CPU_FLAGS_SHOWN := avx2 fma f16c avx512f avx512vbmi avx512_bf16 avx512_fp16 amx_bf16
machine-report: $(BUILD)/bench/bench_attention $(BUILD)/bench/bench_decode
	@printf 'cpu: %s, %s cores; has:' "$$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)" "$$(nproc)"; \
	 for f in $(CPU_FLAGS_SHOWN); do grep -m1 '^flags' /proc/cpuinfo | grep -qw -- "$$f" && printf ' %s' "$$f"; done; echo
	@$(BUILD)/bench/bench_attention --bf16
	@$(BUILD)/bench/bench_decode --16bit

bench: $(BENCH_BIN)
	@for b in $(BENCH_BIN); do OPENBLAS_NUM_THREADS=$${OPENBLAS_NUM_THREADS:-2} $$b || exit 1; done
	@$(MAKE) --no-print-directory bench-service

# libFuzzer over the request parser and validator (srv_job_prepare, the
# tasks, finish), seeded by tests/fuzz/corpus; new inputs and crash files go
# to $(BUILD)/fuzz, never into the seed folder. make fuzz runs FUZZ_SECONDS.
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_BIN := $(BUILD)/fuzz/fuzz_request
FUZZ_SRC := tests/fuzz/fuzz_request.c $(filter server/api/% server/v2/% server/codec/% server/store/% server/model/% \
            server/common/%,$(SRV_SRC)) $(LIB_SRC)
FUZZ_CFLAGS := -std=c11 -D_POSIX_C_SOURCE=200809L -O1 -g -fno-omit-frame-pointer \
               -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
               -Iinclude -Iserver $(PKG_CFLAGS) $(SRV_CFLAGS)
FUZZ_RUN = mkdir -p $(BUILD)/fuzz/corpus && cd $(BUILD)/fuzz && \
	OPENBLAS_NUM_THREADS=1 ./fuzz_request -max_total_time=$(1) -max_len=8192 -timeout=10 \
	    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=./ \
	    -dict=$(CURDIR)/tests/fuzz/request.dict corpus $(CURDIR)/tests/fuzz/corpus

$(FUZZ_BIN): $(FUZZ_SRC) $(wildcard server/*/*.h include/*.h lib/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_SRC) -o $@ $(SRV_LIBS) $(LIBS)

# The tensor file header parsers (safetensors, .npy) get their own driver,
# seeded by the good and malformed files tests/fixtures/make_tensors.py writes.
FUZZ_ST_BIN := $(BUILD)/fuzz/fuzz_safetensors
FUZZ_ST_SRC := tests/fuzz/fuzz_safetensors.c server/store/tensor_file.c server/codec/half.c \
               server/codec/float32.c
FUZZ_ST_SEEDS := $(abspath $(BUILD)/fixtures/tensors)
FUZZ_ST_RUN = /usr/bin/python3 tests/fixtures/make_tensors.py $(FUZZ_ST_SEEDS) && \
	mkdir -p $(BUILD)/fuzz/st-corpus && cd $(BUILD)/fuzz && \
	./fuzz_safetensors -max_total_time=$(1) -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
	    -print_final_stats=1 -artifact_prefix=./st- -dict=$(CURDIR)/tests/fuzz/safetensors.dict \
	    st-corpus $(FUZZ_ST_SEEDS)/good $(FUZZ_ST_SEEDS)/bad

$(FUZZ_ST_BIN): $(FUZZ_ST_SRC) server/store/tensor_file.h server/codec/tensor.h server/codec/half.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_ST_SRC) -o $@ $(SRV_LIBS) -lm

# The tensor numbers parsed before cJSON (server/codec/json_lift.c) against cJSON's
# own reading of the same text: a differential driver, seeded by the requests.
FUZZ_LIFT_BIN := $(BUILD)/fuzz/fuzz_lift
FUZZ_LIFT_SRC := tests/fuzz/fuzz_lift.c $(wildcard server/codec/*.c) server/common/reply.c \
                 server/common/errors.c
FUZZ_LIFT_RUN = mkdir -p $(BUILD)/fuzz/lift-corpus && cd $(BUILD)/fuzz && \
	./fuzz_lift -max_total_time=$(1) -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
	    -print_final_stats=1 -artifact_prefix=./lift- -dict=$(CURDIR)/tests/fuzz/request.dict \
	    lift-corpus $(CURDIR)/tests/fuzz/corpus

$(FUZZ_LIFT_BIN): $(FUZZ_LIFT_SRC) $(wildcard server/codec/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_LIFT_SRC) -o $@ $(SRV_LIBS) -lm

# The base64 codec's vector kernels against its scalar code (and encode
# against decode), on any text, alignment and dst size.
FUZZ_B64_BIN := $(BUILD)/fuzz/fuzz_base64
FUZZ_B64_SRC := tests/fuzz/fuzz_base64.c server/codec/base64.c
FUZZ_B64_RUN = mkdir -p $(BUILD)/fuzz/b64-corpus && cd $(BUILD)/fuzz && \
	./fuzz_base64 -max_total_time=$(1) -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
	    -print_final_stats=1 -artifact_prefix=./b64- b64-corpus $(CURDIR)/tests/fuzz/corpus-b64

$(FUZZ_B64_BIN): $(FUZZ_B64_SRC) server/codec/base64.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_B64_SRC) -o $@

fuzz: deps $(FUZZ_BIN) $(FUZZ_ST_BIN) $(FUZZ_LIFT_BIN) $(FUZZ_B64_BIN)
	$(call FUZZ_RUN,$(FUZZ_SECONDS))
	$(call FUZZ_ST_RUN,$(FUZZ_SECONDS))
	$(call FUZZ_LIFT_RUN,$(FUZZ_SECONDS))
	$(call FUZZ_B64_RUN,$(FUZZ_SECONDS))
fuzz-smoke: deps $(FUZZ_BIN) $(FUZZ_ST_BIN) $(FUZZ_LIFT_BIN) $(FUZZ_B64_BIN)
	$(call FUZZ_RUN,10)
	$(call FUZZ_ST_RUN,10)
	$(call FUZZ_LIFT_RUN,10)
	$(call FUZZ_B64_RUN,10)

# posattn-load is a client: libcurl and cJSON, nothing from lib/ or server/.
$(BUILD)/tools/load/%.o: tools/load/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LOAD_CFLAGS) -c $< -o $@

$(LOAD_BIN): $(LOAD_OBJ)
	$(CC) $(ALL_LDFLAGS) $^ -o $@ $(LOAD_LIBS)

# make load: a short scheme comparison against a spawned server (~20 s).
LOAD_ARGS ?= --schemes none,rope,rope:yarn,alibi,t5,shaw --lengths 128,512 --heads 8 \
             --head-dim 64 --concurrency 4 --encoding b64 --duration 1.5 --warmup 0.3
load: deps
	$(MAKE) --no-print-directory $(POSATTND) $(LOAD_BIN)
	$(LOAD_BIN) --spawn $(POSATTND) $(LOAD_ARGS) \
	    --json $(BUILD)/load-report.json --html $(BUILD)/load-report.html \
	    --svg $(BUILD)/load-report.svg
	@echo "reports: $(BUILD)/load-report.json $(BUILD)/load-report.html $(BUILD)/load-report.svg"

load-test: $(POSATTND) $(LOAD_BIN)
	@tools/load/test_load.sh $(BUILD)

# posattn-load against wrk on the same request and connections (~15 s).
# wrk is needed by this target only.
CROSSCHECK_PACKAGES := wrk

# The service path against bare libmicrohttpd and against its own compute
# (bench/service.sh); part of make bench.
$(BARE_MHD): bench/bare_mhd.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(SRV_CFLAGS) $< -o $@ $(SRV_LIBS)

bench-service: $(POSATTND) $(LOAD_BIN) $(BARE_MHD) $(BUILD)/bench/bench_decode $(BUILD)/bench/bench_attention
	@$(call apt_install,$(CROSSCHECK_PACKAGES) curl)
	@bench/service.sh $(BUILD)
	@POSATTND=$(POSATTND) E2E_TIMEOUT=300 tests/e2e/harness.sh /usr/bin/python3 bench/v2_throughput.py
	@/usr/bin/python3 bench/decode_service.py --posattnd $(POSATTND) --ceiling-bin $(BUILD)/bench/bench_decode
load-crosscheck: $(POSATTND) $(LOAD_BIN)
	@$(call apt_install,$(CROSSCHECK_PACKAGES))
	@tests/load/wrk-crosscheck.sh $(BUILD)

# bench_json measures the server's JSON and base64 paths: it sees server/ and
# links the server objects it uses plus cJSON (explicit rules win over the
# pattern rules), and the previous float formatter (tests/ref_fmt_float.c).
BENCH_JSON_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(wildcard server/codec/*.c)) \
                  $(addprefix $(BUILD)/server/common/,reply.o errors.o) \
                  $(BUILD)/tests/ref_fmt_float.o
$(BUILD)/bench/bench_json.o: bench/bench_json.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(SRV_CFLAGS) -Iserver -Itests -c $< -o $@
$(BUILD)/bench/bench_json: $(BUILD)/bench/bench_json.o $(BENCH_JSON_OBJ)
	$(CC) $(ALL_LDFLAGS) $^ -o $@ $(SRV_LIBS) -lm

# All 2^32 floats through srv_fmt_float (~20 min on 2 cores; never in make test).
# check-fmt-float-diff: all 2^32 byte for byte against the formatter before
# the fast printer, tests/ref_fmt_float.c (~8 min on one core).
check-fmt-float: $(BUILD)/bench/check_fmt_float_exhaustive
	$< --threads $$(nproc)
check-fmt-float-diff: $(BUILD)/bench/check_fmt_float_exhaustive
	$< --diff --threads 1
$(BUILD)/bench/check_fmt_float_exhaustive.o: bench/check_fmt_float_exhaustive.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Iserver -Itests -c $< -o $@
$(BUILD)/bench/check_fmt_float_exhaustive: $(BUILD)/bench/check_fmt_float_exhaustive.o $(BUILD)/server/codec/fmt_float.o \
                                           $(BUILD)/tests/ref_fmt_float.o
	$(CC) $(ALL_LDFLAGS) $^ -o $@ -lpthread -lm

# posattn against NumPy and PyTorch, same shapes and threads, same run (~3 min).
bench-peers: deps-peers $(BUILD)/bench/bench_peer_posattn $(BUILD)/bench/bench_peer_case
	/usr/bin/python3 bench/peers.py --bin $(BUILD)/bench/bench_peer_posattn --threads $${BENCH_THREADS:-2}
	/usr/bin/python3 bench/peer_ort.py --bin $(BUILD)/bench/bench_peer_case --threads $${BENCH_THREADS:-2}

# A tiny run of every benchmark so they never rot; not a measurement.
bench-smoke: $(BENCH_BIN) $(POSATTND) $(LOAD_BIN) $(BARE_MHD)
	@$(call apt_install,$(CROSSCHECK_PACKAGES) curl)
	@for b in $(BENCH_BIN); do $$b --smoke >/dev/null || { echo "bench-smoke: $$b failed"; exit 1; }; done; \
	SMOKE=1 bench/service.sh $(BUILD) >/dev/null || { echo "bench-smoke: bench/service.sh failed"; exit 1; }; \
	POSATTND=$(POSATTND) tests/e2e/harness.sh /usr/bin/python3 bench/v2_throughput.py --L 16 --repeat 1 >/dev/null || \
	    { echo "bench-smoke: bench/v2_throughput.py failed"; exit 1; }; \
	/usr/bin/python3 bench/peer_ort.py --smoke --bin $(BUILD)/bench/bench_peer_case >/dev/null || \
	    { echo "bench-smoke: bench/peer_ort.py failed"; exit 1; }; \
	/usr/bin/python3 bench/decode_service.py --smoke --posattnd $(POSATTND) \
	    --ceiling-bin $(BUILD)/bench/bench_decode >/dev/null || \
	    { echo "bench-smoke: bench/decode_service.py failed"; exit 1; }; \
	echo "bench-smoke: ok"

# The sanitized builds, one folder each (make asan, make tsan and the
# sessions soak below share them, so their flags are written once).
ASAN_MAKE = $(MAKE) --no-print-directory BUILD=build-asan WERROR=1 \
            OPT="-O1 -g -fno-omit-frame-pointer" SAN="-fsanitize=address,undefined -fno-sanitize-recover=all"
TSAN_MAKE = $(MAKE) --no-print-directory BUILD=build-tsan WERROR=1 OPT="-O1 -g" SAN="-fsanitize=thread"

asan: deps
	env ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 OPENBLAS_NUM_THREADS=1 \
	    $(ASAN_MAKE) unit

# ThreadSanitizer over the whole suite, the end-to-end server (pool, suspend
# and resume) included; a report makes the server exit non-zero, which the
# e2e test checks.
tsan: deps
	env TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" OPENBLAS_NUM_THREADS=1 \
	    $(TSAN_MAKE) unit

# A sessions soak (issue #33) against a sanitized posattnd, SOAK_SESSIONS_SECONDS
# of load (~35 s wall-clock each; tests/soak_sessions.py): posattn-load
# --sessions runs (windows, forks, eviction none) and a client forking and
# deleting sessions under them, in a --cache-mb 2 pool that fills (CACHE_FULL,
# drops for room), snapshots every second, then SIGTERM (the drain saves to a
# temporary --cache-dir) and a restart that loads them. Fails on any
# sanitizer report (leaks included), a crash, a non-zero exit, an unexpected
# error code, or a cache not empty once every session is deleted.
SOAK_SESSIONS_SECONDS ?= 30
soak-sessions: soak-sessions-asan soak-sessions-tsan
soak-sessions-asan: deps $(LOAD_BIN)
	@$(ASAN_MAKE) build-asan/posattnd >/dev/null
	@/usr/bin/python3 tests/soak_sessions.py --posattnd build-asan/posattnd --load $(LOAD_BIN) \
	    --sanitizer asan --seconds $(SOAK_SESSIONS_SECONDS)
soak-sessions-tsan: deps $(LOAD_BIN)
	@$(TSAN_MAKE) build-tsan/posattnd >/dev/null
	@/usr/bin/python3 tests/soak_sessions.py --posattnd build-tsan/posattnd --load $(LOAD_BIN) \
	    --sanitizer tsan --seconds $(SOAK_SESSIONS_SECONDS)

valgrind: deps $(TEST_BIN)
	@OPENBLAS_NUM_THREADS=1 tests/run-unit.sh --valgrind $(TEST_BIN)

format:
	clang-format -i include/*.h lib/*.[ch] server/*.c server/*/*.[ch] tests/*.[ch] \
	    tests/lib/*.[ch] tests/server/*/*.[ch] tests/e2e/*.[ch] tests/fuzz/*.c bench/*.c tools/load/*.[ch]

clean:
	rm -rf build build-*

# Container, compose, Kubernetes and load-balancer targets.
-include deploy/deploy.mk
# Prometheus: its configs and rules checked, a live /metrics linted and
# scraped (monitor-test, in make test), its image for the compose stack.
-include deploy/prometheus.mk
# The clients (clients/python, clients/js) and openapi.yaml's validation and
# conformance test, each against live servers; all part of make test. (The
# fragments are optional includes because the image's build stage copies
# only the Makefile and the daemon's sources.)
-include clients/python.mk clients/js.mk tests/openapi/openapi.mk

-include $(LIB_OBJ:.o=.d) $(LOAD_OBJ:.o=.d) $(SRV_OBJ:.o=.d) $(BUILD)/server/main.d $(TEST_OBJ:.o=.d) $(TEST_COMMON_OBJ:.o=.d) $(TEST_E2E_OBJ:.o=.d) $(TEST_API_OBJ:.o=.d) $(TEST_BATCH_OBJ:.o=.d) $(TEST_SESSION_OBJ:.o=.d) $(TEST_STORE_OBJ:.o=.d) $(TEST_INFER_OBJ:.o=.d) $(TEST_LIFT_OBJ:.o=.d) $(TEST_BADINPUT_OBJ:.o=.d) $(TEST_ATT_OBJ:.o=.d) $(BENCH_BIN:%=%.d) $(BENCH_ATT_OBJ:.o=.d)
.SECONDARY:
