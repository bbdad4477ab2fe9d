# clients/python.mk - the Python client (clients/python, module posattn).
#
#   make client-python   tests/clients/test_python_client.py against real
#                        servers: harness.sh's two (POSATTN_URL, POSATTN_AUTH_URL)
#                        plus the test's own HTTPS and --tensor servers, all
#                        $(POSATTND) on 127.0.0.1; ~10 s. Needs /usr/bin/python3
#                        with NumPy (the reference), pip and venv (the README's
#                        install commands, run as written in fresh venvs with
#                        no package index: tests/clients/test_python_install.py),
#                        and openssl.
.PHONY: client-python
client-python: $(POSATTND)
	@POSATTND=$(POSATTND) E2E_TIMEOUT=120 tests/e2e/harness.sh \
	    /usr/bin/python3 tests/clients/test_python_client.py -q && \
	POSATTND=$(POSATTND) E2E_TIMEOUT=120 tests/e2e/harness.sh \
	    /usr/bin/python3 tests/clients/test_python_install.py -q
