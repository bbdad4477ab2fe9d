# openapi.mk - openapi.yaml kept valid and true to the server (included by the Makefile).
#
#   make openapi-test   npm deps if missing, then openapi-validate, then the
#                       conformance test against a live $(POSATTND)
#   make openapi-validate  only the OpenAPI 3.0 validation (swagger-parser)
#
# tests/openapi/validate.mjs runs SwaggerParser.validate (pinned by
# tests/openapi/package-lock.json); tests/openapi/conformance.py sends real
# requests through tests/e2e/harness.sh and checks every request body and
# answer against the document, and that its strict objects are the server's.
.PHONY: openapi-deps openapi-validate openapi-test

openapi-deps:
	@[ -d tests/openapi/node_modules/@apidevtools/swagger-parser ] || \
	    (cd tests/openapi && npm ci --no-audit --no-fund)

openapi-validate: openapi-deps
	@node tests/openapi/validate.mjs openapi.yaml

openapi-test: openapi-validate $(POSATTND)
	@POSATTND=$(POSATTND) tests/e2e/harness.sh /usr/bin/python3 tests/openapi/conformance.py -q
