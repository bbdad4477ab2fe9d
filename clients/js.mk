# clients/js.mk - the JavaScript client (clients/js/posattn.js): its tests
# against live servers (tests/e2e/harness.sh: a plain one and one with
# --api-key and --max-body-mb 1; the test starts its own HTTPS one with a
# private CA made by openssl), and the README's `npm install` into a fresh npm
# project in a temporary folder, offline. Node 20 with npm, and openssl; ~3 s.
# Included from the Makefile, which defines POSATTND.

.PHONY: client-js
client-js: $(POSATTND)
	@POSATTND=$(POSATTND) tests/e2e/harness.sh node --test \
		tests/clients/test_js_client.mjs && echo "client-js: ok"
