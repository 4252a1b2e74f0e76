#!/usr/bin/env bash
# Installs the SDKs of the remote sandbox providers that cannot join the dev extra (the
# `daytona` and `opensandbox` providers and their tests) into a venv that already holds
# the dev extra, changing no package already there. CI runs it after the dev extra.
# Usage: bash scripts/install-remote-sdks.sh   (PYTHON: the venv's python, default .venv/bin/python)
#
# boto3 (the `ecs` provider): botocore pins python-dateutil<3 where the kubernetes
# client (in dev) needs >=3; installed without dependencies (it runs on 4.0).
#
# opensandbox 1.1.1 pins python-dateutil<3 (the venv has 4.0, which it runs on): it is
# installed without dependencies, with its one missing one (httpx-sse).
#
# Why not `pip install -e '.[daytona]'`: daytona 0.226.1 needs
# opentelemetry-instrumentation-aiohttp-client, whose newest release on the index (0.66b1)
# pins opentelemetry-api==1.45.1 through opentelemetry-semantic-conventions==0.66b1, while
# anthropic and mcp have brought 1.45.2; pip resolves that by downgrading
# opentelemetry-api (or by falling back to daytona 0.140, whose API differs). So this
# installs without dependency resolution: daytona and its clients pinned, the
# OpenTelemetry packages at the venv's own 1.45.2 / 0.66b2 line, and only the
# aiohttp-client instrumentation at 0.66b1 (its code runs unchanged on 0.66b2; `pip
# check` reports its pins). Once 0.66b2 of that instrumentation is published, the plain
# extra resolves without a downgrade and this script can go.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
if ! "$PY" -c "import boto3" 2>/dev/null; then
    "$PY" -m pip install -q --no-deps "boto3==1.44.8" "botocore==1.44.8" "jmespath==1.1.0" \
        "s3transfer==0.19.3"
    "$PY" -c "import boto3; boto3.client('ecs', region_name='us-east-1')"
fi
# ECS Exec's data channel is a websocket (the `ecs` extra's other package; no deps).
if ! "$PY" -c "import websockets.asyncio.client" 2>/dev/null; then
    "$PY" -m pip install -q "websockets>=13"
fi
if ! "$PY" -c "import opensandbox" 2>/dev/null; then
    "$PY" -m pip install -q --no-deps "opensandbox==1.1.1" "httpx-sse==0.4.3"
    "$PY" -c "from opensandbox import Sandbox"
fi
if "$PY" -c "import daytona" 2>/dev/null; then
    exit 0
fi
V=0.226.1
"$PY" -m pip install -q --no-deps \
    "daytona==$V" "daytona_api_client==$V" "daytona_api_client_async==$V" \
    "daytona_toolbox_api_client==$V" "daytona_toolbox_api_client_async==$V" \
    "daytona_analytics_api_client==$V" "daytona_analytics_api_client_async==$V" \
    "Deprecated==1.3.1" "aiofiles==25.1.0" "aiohappyeyeballs==2.7.1" "aiohttp==3.14.5" \
    "aiohttp-retry==2.9.1" "aiosignal==1.4.0" "bidict==0.24.1" "frozenlist==1.8.0" \
    "googleapis-common-protos==1.76.0" "httpx-ws==0.9.0" "multidict==7.2.1" \
    "obstore==0.11.1" "propcache==0.5.4" "python-dotenv==1.2.4" "python-engineio==4.15.1" \
    "python-socketio==5.18.1" "simple-websocket==1.1.0" "toml==0.10.2" \
    "websocket-client==1.9.2" "wrapt==2.5.2" "wsproto==1.3.2" "yarl==1.25.1" \
    "opentelemetry-sdk==1.45.2" "opentelemetry-semantic-conventions==0.66b2" \
    "opentelemetry-exporter-otlp-proto-http==1.45.2" \
    "opentelemetry-exporter-otlp-proto-common==1.45.2" "opentelemetry-proto==1.45.2" \
    "opentelemetry-exporter-otlp-common==0.66b2" "opentelemetry-instrumentation==0.66b2" \
    "opentelemetry-util-http==0.66b2" "opentelemetry-exporter-http-transport==0.66b2" \
    "opentelemetry-instrumentation-aiohttp-client==0.66b1"
"$PY" -c "from daytona import AsyncDaytona"
