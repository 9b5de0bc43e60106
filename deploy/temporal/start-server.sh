#!/bin/sh
# temporal-server in its container (docker-compose.yml): it binds to and announces the container's
# own address, which config/docker.yaml (a template the server renders) reads as TEMPORAL_IP.
set -eu
TEMPORAL_IP="${TEMPORAL_IP:-$(hostname -i | awk '{print $1}')}"
export TEMPORAL_IP
exec temporal-server --root /etc/temporal --config config --env docker --allow-no-auth start
