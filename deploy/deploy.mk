# deploy/deploy.mk - container, compose, Kubernetes and load-balancer targets,
# included by the Makefile.
#
#   make lb-test         deploy/nginx.conf in front of 3 local posattnd processes:
#                        session affinity (one replica per X-Posattn-Session key,
#                        stateless round robin), then a replica killed and one
#                        drained mid-load, no request lost
#   make k8s-validate    yamllint, then every manifest of deploy/k8s (kustomize
#                        base, overlays/example, keda, hpa-pods-metric,
#                        sessions-shared (a ReadWriteMany claim), and
#                        kserve/hpa, kserve/keda) checked offline: built-in kinds
#                        against the Kubernetes schemas (validate.mjs), KServe's
#                        InferenceService and KEDA's ScaledObject against their
#                        upstream CRDs (crd_validate.py), and posattn's rules
#   make image           the posattnd image (podman; POSATTN_IMAGE)
#   make container-test  the image run read-only on 127.0.0.1: API, healthcheck, drain
#   make compose-test    deploy/compose.yaml: 3 replicas behind nginx, then down
#   make scaling-sim     not a test: posattn-load through the compose stack with
#                        1, 2 and 3 replicas behind nginx, and the Prometheus
#                        series an autoscaler reads (docs/deploy.md)
#   make deploy-test     all four tests
#   make deploy-deps     what they need: Debian packages and the validator's npm packages
#   make deploy-clean    remove the images built here
#
# Containers use podman through deploy/container-env.sh (no Docker engine
# and no registry here: the base image is built from the Debian mirror the
# first time, about 85 s). Builds never use --pull.

DEPLOY_DEB_PACKAGES := nginx yamllint iptables curl python3 python3-jsonschema python3-yaml nodejs
POSATTN_IMAGE ?= localhost/posattnd:dev
POSATTN_LB_IMAGE ?= localhost/posattn-lb:dev
CONTAINER_ENV_SH ?= deploy/container-env.sh
# Make runs recipes with /bin/sh: eval the exports in the same line (and stop
# there if the setup failed).
CONTAINER_ENV = cenv=$$(bash $(CONTAINER_ENV_SH) --print-env) && eval "$$cenv"
K8S_VALIDATE_DIR := deploy/k8s/validate
K8S_DIRS := deploy/k8s/base deploy/k8s/overlays/example deploy/k8s/overlays/keda \
            deploy/k8s/overlays/hpa-pods-metric deploy/k8s/overlays/sessions-shared \
            deploy/k8s/kserve/hpa deploy/k8s/kserve/keda

.PHONY: deploy-deps image lb-image lb-test k8s-validate container-test compose-test \
        deploy-test deploy-clean scaling-sim

# Like `make deps`: installs only what is missing, apt-get update only then.
# iptables: podman's netavark needs it to set up container networks and
# Debian's podman does not pull it in. npm packages go to deploy/k8s/validate
# (package-lock.json committed, node_modules ignored).
deploy-deps:
	@$(call apt_install,$(DEPLOY_DEB_PACKAGES))
	@command -v npm >/dev/null || { $(call apt_install,npm); }
	@$(MAKE) --no-print-directory $(K8S_VALIDATE_DIR)/node_modules/.package-lock.json

$(K8S_VALIDATE_DIR)/node_modules/.package-lock.json: $(K8S_VALIDATE_DIR)/package.json $(K8S_VALIDATE_DIR)/package-lock.json
	cd $(K8S_VALIDATE_DIR) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# podman's layer cache makes a rebuild with nothing changed take a second.
# --format docker keeps the HEALTHCHECK (OCI images have no field for it).
image: deploy-deps
	@$(CONTAINER_ENV) && podman build --format docker -t $(POSATTN_IMAGE) . && \
	    echo "image: $(POSATTN_IMAGE) $$(podman image inspect --format '{{.Size}}' $(POSATTN_IMAGE) | awk '{printf "%.1f MB", $$1 / 1e6}')"

lb-image: deploy-deps
	@$(CONTAINER_ENV) && podman build --format docker -t $(POSATTN_LB_IMAGE) deploy/lb

lb-test: deps deploy-deps
	@$(MAKE) --no-print-directory $(POSATTND)
	POSATTND=$(POSATTND) tests/deploy/lb-test.sh

k8s-validate: deploy-deps
	yamllint -s -c deploy/.yamllint.yaml deploy/compose.yaml deploy/k8s
	@command -v kubectl >/dev/null || { echo "k8s-validate: kubectl (for kustomize) is missing"; exit 1; }
	node $(K8S_VALIDATE_DIR)/validate.mjs $(K8S_DIRS)
	/usr/bin/python3 $(K8S_VALIDATE_DIR)/crd_validate.py $(K8S_DIRS)

container-test: image
	@$(CONTAINER_ENV) && POSATTN_IMAGE=$(POSATTN_IMAGE) tests/deploy/container-test.sh

compose-test: image lb-image
	@$(CONTAINER_ENV) && POSATTN_IMAGE=$(POSATTN_IMAGE) POSATTN_LB_IMAGE=$(POSATTN_LB_IMAGE) \
	    tests/deploy/compose-test.sh

deploy-test: lb-test k8s-validate container-test compose-test

# About 3 minutes; its figures are in docs/deploy.md (Scaling simulation).
scaling-sim: image lb-image
	@$(MAKE) --no-print-directory $(LOAD_BIN)
	@$(CONTAINER_ENV) && POSATTN_IMAGE=$(POSATTN_IMAGE) POSATTN_LB_IMAGE=$(POSATTN_LB_IMAGE) \
	    LOAD=$(LOAD_BIN) tests/deploy/scaling.sh

# Removes the two images; `podman image prune -f` also drops the build-stage
# layers that podman keeps as <none> images (the layer cache).
deploy-clean:
	-@$(CONTAINER_ENV) && podman rmi -f $(POSATTN_IMAGE) $(POSATTN_LB_IMAGE)
