# Deployment targets (deploy/README.md; `make help` lists them). The Makefile includes this file
# (`include deploy/make.mk`) and defines VENV and PY.

IMAGE_PREFIX ?= localhost/ttsq
IMAGE_TAG    ?= dev
IMAGE_BASE   ?=
LOCAL_BASE   := localhost/bookworm-py
K8S_OVERLAYS := gpu cpu-tiny managed-redis
# --isolation=chroot: crun/runc cannot create build containers on these machines (hybrid cgroups).
# --network host and the host's CA bundle: how a RUN pip install reaches the package index here.
# --format docker: OCI images have no HEALTHCHECK.
PODMAN_BUILD := podman build --isolation=chroot --network host -v /etc/ssl/certs:/etc/ssl/certs:ro --format docker \
	$(if $(IMAGE_BASE),--build-arg BASE_IMAGE=$(IMAGE_BASE))

.PHONY: deploy-tools deploy-test k8s-render prometheus-rule image image-base image-local image-check image-constraints

## Install what the deployment checks need (scripts/install_deploy_tools.sh).
deploy-tools:
	scripts/install_deploy_tools.sh --images

## The offline deployment checks alone (tests/deploy; also part of make test).
deploy-test: install deploy-tools
	$(VENV)/bin/pytest tests/deploy

## Render every overlay to var/k8s/OVERLAY.yaml (kubectl kustomize).
k8s-render: deploy-tools
	mkdir -p var/k8s
	for overlay in $(K8S_OVERLAYS); do kubectl kustomize k8s/overlays/$$overlay > var/k8s/$$overlay.yaml || exit 1; done
	@echo "rendered: $(foreach o,$(K8S_OVERLAYS),var/k8s/$(o).yaml)"

# The PrometheusRule is generated (kustomize cannot wrap a rules file); tests/deploy fails while it is stale.
## Render deploy/prometheus/alerts.yml as k8s/components/monitoring/prometheusrule.yaml.
prometheus-rule: install
	$(PY) scripts/render_prometheus_rule.py

## Build both images with podman (BASE_IMAGE: the Dockerfile's pinned default).
image:
	scripts/install_deploy_tools.sh --images
	$(PODMAN_BUILD) --target api -t $(IMAGE_PREFIX)-api:$(IMAGE_TAG) .
	$(PODMAN_BUILD) --target worker -t $(IMAGE_PREFIX)-worker:$(IMAGE_TAG) .
	podman images --filter reference='$(IMAGE_PREFIX)-*'

## A local Debian bookworm + Python 3.11 base image (mmdebstrap), for machines with no registry.
image-base:
	scripts/install_deploy_tools.sh --images
	podman image exists $(LOCAL_BASE) || { \
		mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm var/bookworm-rootfs.tar \
		&& podman import var/bookworm-rootfs.tar $(LOCAL_BASE) && rm -f var/bookworm-rootfs.tar; }

## make image on that local base.
image-local: image-base
	$(MAKE) image IMAGE_BASE=$(LOCAL_BASE)

## Base, then build api and worker, then run them against a real Redis; output in deploy/image-check.log.
image-check: install
	scripts/install_deploy_tools.sh --images
	$(PY) deploy/image/check.py --log deploy/image-check.log $(IMAGE_CHECK_ARGS)

## Refresh deploy/image/constraints.txt from the dev environment.
image-constraints: install
	{ sed -n '1,2p' deploy/image/constraints.txt; $(VENV)/bin/pip freeze --exclude-editable | grep -v -E '^(-e|#)' | LC_ALL=C sort -f; } \
		> deploy/image/constraints.txt.new && mv deploy/image/constraints.txt.new deploy/image/constraints.txt
