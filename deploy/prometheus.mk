# deploy/prometheus.mk - monitoring with the real Prometheus (Debian's
# prometheus 2.42, which brings promtool), included by the Makefile after
# deploy/deploy.mk.
#
#   make monitor-test   promtool check config (both configs) and check rules,
#                       promtool test rules (every alert fires and stays
#                       silent), then tests/monitor/check-metrics.sh: a live
#                       posattnd's /metrics through `promtool check metrics`
#                       and scraped by Prometheus with rules.yml (~12 s)
#   make monitor-deps   what it needs: Debian's prometheus, yamllint, curl
#   make prom-image     the Prometheus image of deploy/compose.yaml (podman;
#                       POSATTN_PROM_IMAGE); `make compose-test` builds it
#
# Debian's prometheus without recommends is 22.5 MB to download and 332 MB
# installed (210 MB of it libjs-moment-timezone's data), so only these
# targets install it, not `make deps`.

MONITOR_DEB_PACKAGES := prometheus yamllint curl
POSATTN_PROM_IMAGE ?= localhost/posattn-prometheus:dev
PROM_DIR := deploy/prometheus

.PHONY: monitor-deps monitor-test prom-image prom-image-clean

monitor-deps:
	@$(call apt_install,$(MONITOR_DEB_PACKAGES))

# promtool test rules resolves rule_files against the test file's folder.
monitor-test: monitor-deps $(POSATTND)
	@yamllint -s -c deploy/.yamllint.yaml $(PROM_DIR)
	@promtool check config $(PROM_DIR)/prometheus.yml
	@promtool check config $(PROM_DIR)/prometheus-compose.yml
	@cd $(PROM_DIR) && promtool test rules rules.test.yml
	@POSATTND=$(POSATTND) tests/monitor/check-metrics.sh

prom-image: deploy-deps
	@$(CONTAINER_ENV) && podman build --format docker -t $(POSATTN_PROM_IMAGE) \
	    -f $(PROM_DIR)/Containerfile $(PROM_DIR) && \
	    echo "image: $(POSATTN_PROM_IMAGE) $$(podman image inspect --format '{{.Size}}' $(POSATTN_PROM_IMAGE) | awk '{printf "%.1f MB", $$1 / 1e6}')"

# deploy/compose.yaml runs Prometheus beside the replicas: compose-test
# (deploy/deploy.mk) needs its image too, and deploy-clean removes it.
compose-test: prom-image
# compose-test.sh and deploy/compose.yaml read the image's name from the
# environment; only there (posattnd warns of POSATTN_* it does not know).
compose-test: export POSATTN_PROM_IMAGE := $(POSATTN_PROM_IMAGE)
deploy-clean: prom-image-clean
prom-image-clean:
	-@$(CONTAINER_ENV) && podman rmi -f $(POSATTN_PROM_IMAGE)
